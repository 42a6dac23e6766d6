//! The dashboard in real headless Chromium (Debian's `chromium` and `chromium-driver`,
//! driven over WebDriver by fantoccini): the real server with real jobs, checked by what a
//! person sees. Screenshots of each page go to `<target>/tmp/dashboard-screenshots/`.
//!
//! Under `CI=true` a missing chromium or chromedriver fails; elsewhere the tests are
//! skipped with a note. `-- bench-dashboard` runs the benchmark instead (JSON on stdout;
//! see `browser/bench.rs`).
//!
//! A custom harness (libtest-mimic), because the executor starts every replica under the
//! shim `<current executable> shim <dir>`: invoked that way, this binary is the shim.

#[path = "browser/bench.rs"]
mod bench;
#[allow(dead_code)] // of what the CLI's test binaries share, this one uses `prerequisite`
mod common;
use common::cluster::TestCluster;
#[path = "browser/driver.rs"]
mod driver;
#[path = "browser/operator.rs"]
mod operator;
#[path = "browser/pages.rs"]
mod pages;
#[path = "browser/runs.rs"]
mod runs;
#[path = "browser/serving.rs"]
mod serving;
#[path = "browser/usage.rs"]
mod usage;

use std::process::ExitCode;

use libtest_mimic::{Arguments, Failed, Trial};

type TestResult = Result<(), Failed>;

fn main() -> ExitCode {
    let mut argv = std::env::args_os();
    let _program = argv.next();
    let rest: Vec<_> = argv.collect();
    if rest.first().is_some_and(|a| a == "shim") {
        std::process::exit(corral_local::shim::run(rest.into_iter().skip(1)));
    }
    if rest.iter().any(|a| a == "bench-dashboard") {
        return match bench::run() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {}", e.message().unwrap_or("(no message)"));
                ExitCode::FAILURE
            }
        };
    }
    let args = Arguments::from_args();
    let tests = vec![
        Trial::test(
            "a_submitted_job_shows_its_replicas_and_a_live_log",
            pages::a_submitted_job_shows_its_replicas_and_a_live_log,
        ),
        Trial::test(
            "a_waiting_job_shows_why_and_suspend_from_the_page_suspends",
            pages::a_waiting_job_shows_why_and_suspend_from_the_page_suspends,
        ),
        Trial::test(
            "a_namespace_token_sees_only_its_namespace",
            pages::a_namespace_token_sees_only_its_namespace,
        ),
        Trial::test(
            "a_pipeline_run_is_drawn_as_its_dag",
            runs::a_pipeline_run_is_drawn_as_its_dag,
        ),
        Trial::test(
            "a_stored_pipeline_is_listed_with_the_runs_made_from_it",
            runs::a_stored_pipeline_is_listed_with_the_runs_made_from_it,
        ),
        Trial::test(
            "a_served_model_shows_its_training_run_revisions_and_replicas",
            serving::a_served_model_shows_its_training_run_revisions_and_replicas,
        ),
        Trial::test(
            "the_usage_page_charts_what_the_ledger_counted",
            usage::the_usage_page_charts_what_the_ledger_counted,
        ),
        Trial::test(
            "the_operator_serves_the_dashboard_walled_by_rbac",
            operator::the_operator_serves_the_dashboard_walled_by_rbac,
        ),
        Trial::test(
            "assets_are_typed_cached_and_gzipped",
            pages::assets_are_typed_cached_and_gzipped,
        ),
    ];
    libtest_mimic::run(&args, tests).exit_code()
}

fn check(cond: bool, what: impl Into<String>) -> TestResult {
    if cond {
        Ok(())
    } else {
        Err(what.into().into())
    }
}
