//! The verbs that show the cluster rather than a job: queues, nodes, top, audit.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;

use super::common_args::{ConnArgs, Output};
use super::print::{fail, out, print_structured};
use super::render::{nodes_text, queues_table, top_table};

#[derive(Args, Debug)]
pub struct ClusterViewArgs {
    #[arg(short, long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Args, Debug)]
pub struct TopArgs {
    /// Refresh every N seconds until interrupted.
    #[arg(short, long, value_name = "SECONDS")]
    pub watch: Option<u64>,
    #[arg(short, long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Args, Debug)]
pub struct AuditArgs {
    /// The newest entries to show (at most the 10,000 the server keeps).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    #[arg(short, long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// `corral audit`: who wrote what through the API, and how it ended (an admin token).
pub fn run_audit(args: &AuditArgs) -> ExitCode {
    match args.conn.client().audit(args.limit) {
        Ok(entries) if args.output.is_table() => {
            let rows: Vec<Vec<String>> = entries
                .iter()
                .map(|e| {
                    let at = jiff::Timestamp::from_millisecond(e.at_ms as i64)
                        .map(|t| t.round(jiff::Unit::Second).unwrap_or(t).to_string())
                        .unwrap_or_else(|_| e.at_ms.to_string());
                    vec![
                        at,
                        e.who.clone(),
                        e.scope.clone(),
                        e.action.clone(),
                        e.target.clone(),
                        e.status.to_string(),
                        e.outcome.clone(),
                    ]
                })
                .collect();
            out(&super::render::table(
                &[
                    "TIME",
                    "WHO",
                    "NAMESPACE",
                    "ACTION",
                    "TARGET",
                    "STATUS",
                    "OUTCOME",
                ],
                &rows,
            ))
        }
        Ok(entries) => print_structured(&serde_json::json!({ "items": entries }), args.output),
        Err(e) => fail(&e),
    }
}

/// `corral queues`
pub fn run_queues(args: &ClusterViewArgs) -> ExitCode {
    match args.conn.client().queues() {
        Ok(q) if args.output.is_table() => out(&queues_table(&q)),
        Ok(q) => print_structured(&serde_json::json!({ "items": q }), args.output),
        Err(e) => fail(&e),
    }
}

/// `corral nodes`
pub fn run_nodes(args: &ClusterViewArgs) -> ExitCode {
    match args.conn.client().nodes() {
        Ok(n) if args.output.is_table() => out(&nodes_text(&n)),
        Ok(n) => print_structured(&serde_json::json!({ "items": n }), args.output),
        Err(e) => fail(&e),
    }
}

/// `corral top`: samples twice, a second apart, to show CPU as a rate.
pub fn run_top(args: &TopArgs) -> ExitCode {
    let client = args.conn.client();
    if !args.output.is_table() {
        return match client.top() {
            Ok(rows) => print_structured(&serde_json::json!({ "items": rows }), args.output),
            Err(e) => fail(&e),
        };
    }
    let mut before = match client.top() {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    let mut at = Instant::now();
    loop {
        std::thread::sleep(Duration::from_secs(args.watch.unwrap_or(1).max(1)));
        let after = match client.top() {
            Ok(r) => r,
            Err(e) => return fail(&e),
        };
        let text = if after.is_empty() {
            "No replicas are running.\n".to_string()
        } else {
            top_table(&before, &after, at.elapsed())
        };
        if args.watch.is_some() {
            // Clear the screen and print again.
            let code = out(&format!("\x1b[2J\x1b[H{text}"));
            if code != ExitCode::SUCCESS {
                return code;
            }
        } else {
            return out(&text);
        }
        before = after;
        at = Instant::now();
    }
}
