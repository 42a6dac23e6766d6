//! Served models on the verbs users already know: `corral get servedmodels`,
//! `corral get servedmodel/NAME`, `corral describe servedmodel NAME`,
//! `corral delete servedmodel NAME` (kubectl's `KIND NAME...` and `KIND/NAME` forms).
//! Submitting (and changing: a change of what the replicas run is a new revision) goes
//! through `corral submit`; a replica's output is `corral logs <model>-serving-<i>` (each
//! replica is a job). The traffic split between revisions: `corral serve canary NAME
//! PERCENT`, `corral serve promote NAME`, `corral serve rollback NAME`.

use std::process::ExitCode;

use corral_server::api_client::Client;
use serde_json::Value;

use super::common_args::{ConnArgs, NamespaceArgs, Output};
use super::print::{fail, out, print_structured};
use super::render::table;

const KIND_WORDS: [&str; 3] = ["servedmodels", "servedmodel", "sm"];

/// The served model names a verb's arguments ask for, when they name the kind:
/// `servedmodels [NAME...]` or `servedmodel/NAME...`. `None`: they name jobs.
pub fn served_model_names(args: &[String]) -> Option<Vec<String>> {
    let first = args.first()?;
    if KIND_WORDS.contains(&first.to_ascii_lowercase().as_str()) {
        return Some(args[1..].to_vec());
    }
    let names: Vec<String> = args
        .iter()
        .filter_map(|a| {
            let (kind, name) = a.split_once('/')?;
            KIND_WORDS
                .contains(&kind.to_ascii_lowercase().as_str())
                .then(|| name.to_string())
        })
        .collect();
    (names.len() == args.len()).then_some(names)
}

fn status_u64(m: &Value, field: &str) -> u64 {
    m.pointer(&format!("/status/{field}"))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

fn row(m: &Value) -> Vec<String> {
    let text = |p: &str| {
        m.pointer(p)
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .unwrap_or_default()
    };
    let min = m
        .pointer("/spec/autoscaling/minReplicas")
        .and_then(Value::as_u64)
        .unwrap_or(1);
    let max = m
        .pointer("/spec/autoscaling/maxReplicas")
        .and_then(Value::as_u64)
        .unwrap_or(min.max(1));
    vec![
        text("/metadata/name"),
        format!(
            "{}/{}",
            status_u64(m, "readyReplicas"),
            status_u64(m, "replicas")
        ),
        status_u64(m, "desiredReplicas").to_string(),
        format!("{min}..{max}"),
        text("/status/url"),
    ]
}

const HEADER: [&str; 5] = ["NAME", "READY", "DESIRED", "MIN..MAX", "URL"];

/// `corral get servedmodels [NAME...]`.
pub fn get(client: &Client, ns: &str, names: &[String], output: Output) -> ExitCode {
    let models = if names.is_empty() {
        match client.served_models(ns) {
            Ok(m) => m,
            Err(e) => return fail(&e),
        }
    } else {
        let mut models = Vec::new();
        for n in names {
            match client.served_model(ns, n) {
                Ok(v) => models.push(v.get("model").cloned().unwrap_or(Value::Null)),
                Err(e) => return fail(&e),
            }
        }
        models
    };
    match output {
        Output::Json | Output::Yaml => print_structured(
            &serde_json::json!({"kind": "List", "items": models}),
            output,
        ),
        Output::Name => out(&models
            .iter()
            .map(|m| format!("servedmodel/{}\n", row(m)[0]))
            .collect::<String>()),
        _ if models.is_empty() => {
            eprintln!("No served models in namespace {ns}.");
            ExitCode::SUCCESS
        }
        _ => out(&table(&HEADER, &models.iter().map(row).collect::<Vec<_>>())),
    }
}

/// `corral describe servedmodel NAME...`: the model's line, its autoscaler and replicas.
pub fn describe(client: &Client, ns: &str, names: &[String], output: Output) -> ExitCode {
    let mut code = ExitCode::SUCCESS;
    for name in names {
        let v = match client.served_model(ns, name) {
            Ok(v) => v,
            Err(e) => {
                code = fail(&e);
                continue;
            }
        };
        if matches!(output, Output::Json | Output::Yaml) {
            print_structured(&v, output);
            continue;
        }
        let m = v.get("model").cloned().unwrap_or(Value::Null);
        let mut text = table(&HEADER, &[row(&m)]);
        text.push_str(&origin_text(&m));
        let panic = m
            .pointer("/status/panic")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let last = m
            .pointer("/status/lastRequestTime")
            .and_then(Value::as_str)
            .unwrap_or("never");
        text.push_str(&format!(
            "\nAutoscaler: desired {} replicas, current {}, ready {}{}; last request {last}\n\nReplicas:\n",
            status_u64(&m, "desiredReplicas"),
            status_u64(&m, "replicas"),
            status_u64(&m, "readyReplicas"),
            if panic { ", PANIC (a burst)" } else { "" },
        ));
        let rows: Vec<Vec<String>> = v
            .get("replicas")
            .and_then(Value::as_array)
            .map(|rs| {
                rs.iter()
                    .map(|r| {
                        vec![
                            r["job"].as_str().unwrap_or_default().to_string(),
                            r["revision"].as_str().unwrap_or("-").to_string(),
                            r["state"].as_str().unwrap_or_default().to_string(),
                            if r["ready"].as_bool() == Some(true) {
                                "yes"
                            } else {
                                "no"
                            }
                            .to_string(),
                            r["outstanding"].to_string(),
                        ]
                    })
                    .collect()
            })
            .unwrap_or_default();
        if rows.is_empty() {
            text.push_str("  (none)\n");
        } else {
            text.push_str(&table(
                &["JOB", "REVISION", "STATE", "IN ROTATION", "OUTSTANDING"],
                &rows,
            ));
        }
        text.push_str(&revisions_text(&m));
        out(&text);
    }
    code
}

/// `corral delete servedmodel NAME...`.
pub fn delete(client: &Client, ns: &str, names: &[String]) -> ExitCode {
    let mut code = ExitCode::SUCCESS;
    for name in names {
        match client.delete_served_model(ns, name) {
            Ok(()) => println!("servedmodel/{name} deleted"),
            Err(e) => code = fail(&e),
        }
    }
    code
}

/// Where the model came from (`spec.model`): the training run, as pinned at submit.
fn origin_text(m: &Value) -> String {
    let Some(o) = m.pointer("/status/model") else {
        return String::new();
    };
    let field = |f: &str| o.get(f).and_then(Value::as_str).unwrap_or("-");
    let from = match o.get("pipelineRun").and_then(Value::as_str) {
        Some(run) => format!(
            "pipelinerun/{run} step {} output {} (job {}, run uid {}, run finished {})",
            field("step"),
            field("output"),
            o.get("trainingJob")
                .and_then(Value::as_str)
                .filter(|j| !j.is_empty())
                .unwrap_or("none: a cached result"),
            field("uid"),
            field("completionTime"),
        ),
        None => format!(
            "trainingjob/{} (uid {}, succeeded {})",
            field("trainingJob"),
            field("uid"),
            field("completionTime"),
        ),
    };
    format!(
        "\nModel: from {from}\n  path {}\n  content {}\n",
        field("path"),
        field("sha256"),
    )
}

/// The revisions part of `describe`: traffic (now and as asked) and replicas of each.
fn revisions_text(m: &Value) -> String {
    let text = |p: &str| {
        m.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("-")
            .to_string()
    };
    let canary = m
        .pointer("/spec/canaryTrafficPercent")
        .and_then(Value::as_u64)
        .map_or(
            "unset (the latest takes every request once ready)".to_string(),
            |p| format!("{p}% to the latest"),
        );
    let mut s = format!(
        "\nRevisions: latest {}, stable {}; canaryTrafficPercent {canary}\n",
        text("/status/latestRevision"),
        text("/status/stableRevision"),
    );
    let rows: Vec<Vec<String>> = m
        .pointer("/status/revisions")
        .and_then(Value::as_array)
        .map(|rs| {
            rs.iter()
                .map(|r| {
                    let n = |f: &str| r.get(f).and_then(Value::as_u64).unwrap_or(0);
                    vec![
                        r["name"].as_str().unwrap_or_default().to_string(),
                        format!("{}%", n("trafficPercent")),
                        format!("{}%", n("targetPercent")),
                        format!("{}/{}", n("readyReplicas"), n("replicas")),
                        n("desiredReplicas").to_string(),
                        n("inFlight").to_string(),
                        r["hash"]
                            .as_str()
                            .unwrap_or_default()
                            .chars()
                            .take(19)
                            .collect(),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    if rows.is_empty() {
        s.push_str("  (none yet)\n");
    } else {
        s.push_str(&table(
            &[
                "REVISION",
                "TRAFFIC",
                "TARGET",
                "READY",
                "DESIRED",
                "IN FLIGHT",
                "HASH",
            ],
            &rows,
        ));
        if let Some(url) = m.pointer("/status/url").and_then(Value::as_str) {
            s.push_str(&format!(
                "  One revision alone: {}@<REVISION>/ (or @latest, @stable)\n",
                url.trim_end_matches('/')
            ));
        }
    }
    s
}

/// `corral serve`: the traffic split between a served model's revisions.
#[derive(clap::Subcommand, Debug)]
pub enum ServeCommand {
    /// Send PERCENT of new requests (0-100) to the latest revision, the rest to the
    /// stable one (spec.canaryTrafficPercent).
    Canary {
        name: String,
        percent: u32,
        #[command(flatten)]
        namespace: NamespaceArgs,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Every request to the latest revision once it has a replica ready; the old one
    /// drains (requests under way finish) and stops.
    Promote {
        name: String,
        #[command(flatten)]
        namespace: NamespaceArgs,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Every request back to the stable revision (canaryTrafficPercent 0); the latest
    /// drains and stops.
    Rollback {
        name: String,
        #[command(flatten)]
        namespace: NamespaceArgs,
        #[command(flatten)]
        conn: ConnArgs,
    },
}

/// Runs `corral serve ...`.
pub fn run_serve(command: &ServeCommand) -> ExitCode {
    let (name, namespace, conn, percent) = match command {
        ServeCommand::Canary {
            name,
            percent,
            namespace,
            conn,
        } => (name, namespace, conn, Some(*percent)),
        ServeCommand::Promote {
            name,
            namespace,
            conn,
        } => (name, namespace, conn, None),
        ServeCommand::Rollback {
            name,
            namespace,
            conn,
        } => (name, namespace, conn, Some(0)),
    };
    let client = conn.client();
    let ns = namespace.resolve(&client);
    match client.set_canary_percent(&ns, name, percent) {
        Ok(v) => {
            let revision = |field: &str| {
                v.pointer(&format!("/model/status/{field}"))
                    .and_then(Value::as_str)
                    .unwrap_or("-")
                    .to_string()
            };
            let (latest, stable) = (revision("latestRevision"), revision("stableRevision"));
            let said = match percent {
                _ if latest == stable => format!("{latest} takes every request"),
                None => format!(
                    "{latest} takes every request once it has a replica ready; {stable} then drains"
                ),
                Some(0) => format!("rolled back: {stable} takes every request; {latest} drains"),
                Some(p) => format!("{latest} gets {p}% of new requests, {stable} the rest"),
            };
            println!("servedmodel/{name}: {said}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
    }
}
