//! `corral usage`: the usage ledger, GPU-hours per period, namespace, queue and GPU type (or
//! per job), as a table, JSON, YAML or CSV.

use std::process::ExitCode;

use clap::{Args, ValueEnum};
use corral_server::routes::UsageReport;

use super::common_args::{ConnArgs, Output};
use super::print::{fail, out, print_structured};
use super::render::table;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum UsageOutput {
    #[default]
    Table,
    Json,
    Yaml,
    /// One row a line with a header: period, namespace, queue, job, gpuType, gpuSeconds,
    /// gpuHours, cpuSeconds.
    Csv,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum UsagePeriod {
    #[default]
    Day,
    Month,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum UsageBy {
    /// Per namespace, queue and GPU type.
    #[default]
    Queue,
    /// Per job as well.
    Job,
}

#[derive(Args, Debug)]
pub struct UsageArgs {
    /// From this time or date (RFC 3339 or YYYY-MM-DD, UTC; default: the start of this month).
    #[arg(long, value_name = "TIME")]
    pub from: Option<String>,
    /// Until this time or date (default: now).
    #[arg(long, value_name = "TIME")]
    pub to: Option<String>,
    /// Sum per day or per month.
    #[arg(long, value_enum, default_value_t = UsagePeriod::Day)]
    pub period: UsagePeriod,
    /// Rows per queue, or per job.
    #[arg(long, value_enum, default_value_t = UsageBy::Queue)]
    pub by: UsageBy,
    /// Only this namespace (default: every namespace the token may see).
    #[arg(short, long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    #[arg(short, long, value_enum, default_value_t = UsageOutput::Table)]
    pub output: UsageOutput,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// `corral usage`
pub fn run_usage(args: &UsageArgs) -> ExitCode {
    let period = match args.period {
        UsagePeriod::Day => "day",
        UsagePeriod::Month => "month",
    };
    let by = match args.by {
        UsageBy::Queue => "queue",
        UsageBy::Job => "job",
    };
    let mut params = vec![("period", period), ("by", by)];
    for (k, v) in [
        ("from", &args.from),
        ("to", &args.to),
        ("namespace", &args.namespace),
    ] {
        if let Some(v) = v {
            params.push((k, v.as_str()));
        }
    }
    let report = match args.conn.client().usage(&params) {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    match args.output {
        UsageOutput::Table => out(&usage_table(&report)),
        UsageOutput::Json => print_structured(&report, Output::Json),
        UsageOutput::Yaml => print_structured(&report, Output::Yaml),
        UsageOutput::Csv => match usage_csv(&report) {
            Ok(text) => out(&text),
            Err(e) => fail(&format!("cannot write CSV: {e}")),
        },
    }
}

/// The report's rows as a table, then the queues' budgets.
pub fn usage_table(r: &UsageReport) -> String {
    let by_job = r.by == "job";
    let mut header = vec!["PERIOD", "NAMESPACE", "QUEUE"];
    if by_job {
        header.push("JOB");
    }
    header.extend(["GPU TYPE", "GPU-HOURS", "CPU-HOURS"]);
    let rows: Vec<Vec<String>> = r
        .items
        .iter()
        .map(|i| {
            let mut row = vec![i.period.clone(), i.namespace.clone(), i.queue.clone()];
            if by_job {
                let job = i.job.as_deref().unwrap_or("");
                row.push(job.split_once('/').map_or(job, |(_, n)| n).to_string());
            }
            row.extend([
                if i.gpu_type.is_empty() {
                    "-".to_string()
                } else {
                    i.gpu_type.clone()
                },
                format!("{:.2}", i.gpu_hours),
                format!("{:.2}", i.cpu_seconds / 3600.0),
            ]);
            row
        })
        .collect();
    let mut text = format!("Usage from {} to {}\n", r.from, r.to);
    if rows.is_empty() {
        text.push_str("No usage in this window.\n");
    } else {
        text.push_str(&table(&header, &rows));
    }
    if !r.budgets.is_empty() {
        let rows: Vec<Vec<String>> = r
            .budgets
            .iter()
            .map(|b| {
                vec![
                    b.queue.clone(),
                    format!("{} GPU-hours per {}", b.budget_gpu_hours, b.period),
                    format!("{:.2}", b.used_gpu_hours),
                    b.renews_at.clone(),
                    if b.exhausted { "yes" } else { "no" }.to_string(),
                ]
            })
            .collect();
        text.push('\n');
        text.push_str(&table(
            &["QUEUE", "BUDGET", "USED", "RENEWS", "EXHAUSTED"],
            &rows,
        ));
    }
    text
}

/// The report's rows as CSV (RFC 4180), with a header.
pub fn usage_csv(r: &UsageReport) -> Result<String, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "period",
        "namespace",
        "queue",
        "job",
        "gpuType",
        "gpuSeconds",
        "gpuHours",
        "cpuSeconds",
    ])?;
    for i in &r.items {
        w.write_record([
            i.period.as_str(),
            i.namespace.as_str(),
            i.queue.as_str(),
            i.job.as_deref().unwrap_or(""),
            i.gpu_type.as_str(),
            &format!("{:.3}", i.gpu_seconds),
            &format!("{:.6}", i.gpu_hours),
            &format!("{:.3}", i.cpu_seconds),
        ])?;
    }
    let bytes = w.into_inner().map_err(|e| e.into_error())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}
