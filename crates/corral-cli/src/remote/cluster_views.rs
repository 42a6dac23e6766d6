//! The verbs that show the cluster rather than a job: queues, nodes, top.

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
