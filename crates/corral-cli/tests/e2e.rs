//! End-to-end tests: the real server in-process on an ephemeral port with a temporary data
//! directory, real replica processes, the blocking API client the CLI uses, and the CLI's
//! remote, up and quickstart code (from the `corral_cli` library).
//!
//! A custom harness (libtest-mimic), because the executor starts every replica under the
//! shim `<current executable> shim <dir>`: invoked that way, this binary is the shim.

mod common;
use common::cluster::TestCluster;
// The tests, by topic. This file is the test crate's root, whose `mod` paths start at
// tests/ (where every .rs file is a test target of its own), hence the paths.
#[path = "e2e/api_contract.rs"]
mod api_contract;
#[path = "e2e/cli_commands.rs"]
mod cli_commands;
#[path = "e2e/code_snapshots.rs"]
mod code_snapshots;
#[path = "e2e/elastic.rs"]
mod elastic;
#[path = "e2e/isolation.rs"]
mod isolation;
#[path = "e2e/jobs.rs"]
mod jobs;
#[path = "e2e/kubectl_habits.rs"]
mod kubectl_habits;
#[path = "e2e/manifest_checks.rs"]
mod manifest_checks;
#[path = "e2e/metrics.rs"]
mod metrics;
#[path = "e2e/mpi.rs"]
mod mpi;
#[path = "e2e/pipelines.rs"]
mod pipelines;
#[path = "e2e/serving.rs"]
mod serving;
#[path = "e2e/serving_from_training.rs"]
mod serving_from_training;
#[path = "e2e/serving_revisions.rs"]
mod serving_revisions;
#[path = "e2e/stored_pipelines.rs"]
mod stored_pipelines;
#[path = "e2e/tls.rs"]
mod tls;
#[path = "e2e/usage.rs"]
mod usage;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use corral_cli::{doctor, manifests, plan, quickstart, remote, up};
use corral_local::cluster::JobState;
use corral_server::api_client::{Client, LogRequest};
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value;

type TestResult = Result<(), Failed>;

fn main() -> ExitCode {
    let mut argv = std::env::args_os();
    let _program = argv.next();
    let rest: Vec<_> = argv.collect();
    if rest.first().is_some_and(|a| a == "shim") {
        std::process::exit(corral_local::shim::run(rest.into_iter().skip(1)));
    }
    // The MPI launcher's rsh agent is `<current executable> rsh`: this binary, here.
    if rest.first().is_some_and(|a| a == "rsh") {
        std::process::exit(corral_cli::remote::run_rsh(rest.into_iter().skip(1)));
    }
    let args = Arguments::from_args();
    let tests = vec![
        Trial::test(
            "a_fan_out_and_a_wide_run_keep_to_their_bounds",
            pipelines::a_fan_out_and_a_wide_run_keep_to_their_bounds,
        ),
        Trial::test(
            "a_fan_out_over_a_steps_output_runs_once_per_item_it_listed",
            pipelines::a_fan_out_over_a_steps_output_runs_once_per_item_it_listed,
        ),
        Trial::test(
            "a_pipeline_run_survives_kill_9_of_the_server",
            pipelines::a_pipeline_run_survives_kill_9_of_the_server,
        ),
        Trial::test(
            "a_stored_pipeline_runs_with_its_code_and_keeps_its_versions",
            stored_pipelines::a_stored_pipeline_runs_with_its_code_and_keeps_its_versions,
        ),
        Trial::test(
            "a_pipeline_runs_caches_reruns_and_fails_with_its_reason",
            pipelines::a_pipeline_runs_caches_reruns_and_fails_with_its_reason,
        ),
        Trial::test(
            "an_elastic_job_grows_shrinks_and_finishes",
            elastic::an_elastic_job_grows_shrinks_and_finishes,
        ),
        Trial::test(
            "quickstart_job_with_4_replicas_succeeds",
            jobs::quickstart_job_with_4_replicas_succeeds,
        ),
        Trial::test(
            "https_beyond_loopback_with_a_pinned_certificate",
            tls::https_beyond_loopback_with_a_pinned_certificate,
        ),
        Trial::test(
            "plain_http_beyond_loopback_only_by_name",
            tls::plain_http_beyond_loopback_only_by_name,
        ),
        Trial::test(
            "mpirun_reaches_its_workers_through_an_https_api",
            mpi::mpirun_reaches_its_workers_through_an_https_api,
        ),
        Trial::test(
            "tokens_keep_namespaces_apart",
            isolation::tokens_keep_namespaces_apart,
        ),
        Trial::test(
            "writes_are_audited_with_the_tokens_identity",
            isolation::writes_are_audited_with_the_tokens_identity,
        ),
        Trial::test(
            "malformed_input_is_400_with_field_paths",
            api_contract::malformed_input_is_400_with_field_paths,
        ),
        Trial::test(
            "huge_body_is_413_with_json",
            api_contract::huge_body_is_413_with_json,
        ),
        Trial::test(
            "metrics_pass_promtool_in_both_formats",
            metrics::metrics_pass_promtool_in_both_formats,
        ),
        Trial::test(
            "openapi_lists_every_route",
            api_contract::openapi_lists_every_route,
        ),
        Trial::test(
            "logs_follow_every_incarnation",
            jobs::logs_follow_every_incarnation,
        ),
        Trial::test(
            "validate_and_submit_agree_on_bad_manifests",
            manifest_checks::validate_and_submit_agree_on_bad_manifests,
        ),
        Trial::test(
            "delete_all_and_selector_ask_first",
            jobs::delete_all_and_selector_ask_first,
        ),
        Trial::test(
            "suspend_resume_delete_and_views",
            jobs::suspend_resume_delete_and_views,
        ),
        Trial::test(
            "unknown_job_and_route_are_json_404",
            api_contract::unknown_job_and_route_are_json_404,
        ),
        Trial::test(
            "cli_tables_and_up_options",
            cli_commands::cli_tables_and_up_options,
        ),
        Trial::test(
            "concurrent_submissions_are_each_stored_once",
            jobs::concurrent_submissions_are_each_stored_once,
        ),
        Trial::test(
            "gpu_type_names_capacity_warnings_doctor_and_plan",
            manifest_checks::gpu_type_names_capacity_warnings_doctor_and_plan,
        ),
        Trial::test("api_bench_smoke", cli_commands::api_bench_smoke),
        Trial::test(
            "what_kubernetes_accepts_but_is_not_honoured_is_a_warning",
            manifest_checks::what_kubernetes_accepts_but_is_not_honoured_is_a_warning,
        ),
        Trial::test(
            "code_snapshots_run_as_submitted_and_go_with_the_job",
            code_snapshots::code_snapshots_run_as_submitted_and_go_with_the_job,
        ),
        Trial::test(
            "mpi_example_trains_through_mpirun_and_corral_rsh",
            mpi::mpi_example_trains_through_mpirun_and_corral_rsh,
        ),
        Trial::test(
            "exec_runs_in_the_replica_and_only_within_its_own_job",
            mpi::exec_runs_in_the_replica_and_only_within_its_own_job,
        ),
        Trial::test(
            "mpirun_fails_with_its_message_when_a_worker_is_gone",
            mpi::mpirun_fails_with_its_message_when_a_worker_is_gone,
        ),
        Trial::test("kubectl_habits_hold", kubectl_habits::kubectl_habits_hold),
        Trial::test(
            "submit_p_sets_a_runs_parameters",
            kubectl_habits::submit_p_sets_a_runs_parameters,
        ),
        Trial::test(
            "relative_working_dir_needs_code",
            kubectl_habits::relative_working_dir_needs_code,
        ),
        Trial::test(
            "usage_is_counted_kept_through_kill_9_and_walled_off",
            usage::usage_is_counted_kept_through_kill_9_and_walled_off,
        ),
        Trial::test(
            "the_servers_environment_stays_out_of_replicas",
            isolation::the_servers_environment_stays_out_of_replicas,
        ),
        Trial::test(
            "a_served_model_scales_streams_and_survives_a_crash",
            serving::a_served_model_scales_streams_and_survives_a_crash,
        ),
        Trial::test(
            "revisions_split_roll_out_and_roll_back_without_losing_a_request",
            serving_revisions::revisions_split_roll_out_and_roll_back_without_losing_a_request,
        ),
        Trial::test(
            "a_model_trained_by_a_job_is_served_from_its_output",
            serving_from_training::a_model_trained_by_a_job_is_served_from_its_output,
        ),
        Trial::test(
            "a_model_is_served_from_a_pipeline_steps_output",
            serving_from_training::a_model_is_served_from_a_pipeline_steps_output,
        ),
        Trial::test(
            "an_inference_service_is_served_and_split",
            serving_revisions::an_inference_service_is_served_and_split,
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

/// A raw HTTP call: status and body.
fn raw(
    method: &str,
    url: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
) -> Result<(u16, String), Failed> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let auth = token.map(|t| format!("Bearer {t}"));
    let response = match (method, body) {
        ("POST", Some(b)) => {
            let mut r = agent.post(url).header("Content-Type", "application/yaml");
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.send(b)
        }
        ("POST", None) => {
            let mut r = agent.post(url);
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.send_empty()
        }
        ("DELETE", _) => {
            let mut r = agent.delete(url);
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.call()
        }
        _ => {
            let mut r = agent.get(url);
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.call()
        }
    };
    let mut response = response?;
    let status = response.status().as_u16();
    let mut text = String::new();
    response.body_mut().as_reader().read_to_string(&mut text)?;
    Ok((status, text))
}

/// Sends only the request line and headers of a POST that announces `length` bytes, and
/// reads the answer (a server must refuse before reading such a body).
fn raw_headers_only(
    addr: std::net::SocketAddr,
    path: &str,
    length: usize,
) -> Result<(u16, String), Failed> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/yaml\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or(format!("no status in {text:?}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

fn json(text: &str) -> Result<Value, Failed> {
    serde_json::from_str(text).map_err(|e| format!("not JSON ({e}): {text}").into())
}

fn error_code(text: &str) -> String {
    json(text)
        .ok()
        .and_then(|v| {
            v.pointer("/error/code")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_default()
}

fn wait_for_state(
    client: &Client,
    ns: &str,
    name: &str,
    timeout: Duration,
    done: impl Fn(JobState) -> bool,
) -> Result<JobState, Failed> {
    let deadline = Instant::now() + timeout;
    loop {
        let d = client.describe(ns, name)?;
        if done(d.summary.state) {
            return Ok(d.summary.state);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "job {ns}/{name} is still {} after {timeout:?}:\n{}",
                d.summary.state,
                remote::describe_text(&d)
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn quickstart_job(name: &str, workers: u32, dir: &Path) -> String {
    format!(
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  framework: pytorch
  replicas:
    worker:
      count: {workers}
      restartPolicy: Never
      resources: {{cpu: 100m, memory: 64Mi}}
      template:
        command: [python3, train.py]
        workingDir: {dir:?}
        env: [{{name: QUICKSTART_STEPS, value: \"120\"}}]
  runPolicy: {{backoffLimit: 0}}
",
        dir = dir.display().to_string()
    )
}

/// A job that never starts (suspended), for tests that need one stored.
fn parked_job(name: &str) -> String {
    format!(
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  framework: generic
  replicas:
    worker:
      count: 1
      resources: {{cpu: 100m, memory: 64Mi}}
      template: {{command: [sleep, \"30\"]}}
  runPolicy: {{suspend: true}}
"
    )
}
