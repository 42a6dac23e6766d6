//! deploy/grafana/corral-dashboard.json queries only series this server renders: every
//! `corral_*` and `DCGM_*` name in its expressions is checked against `/metrics` as
//! rendered from a sample with GPUs, queues, replicas and progress, so that a renamed
//! series cannot leave the shipped dashboard blank.

use std::collections::BTreeSet;

use corral_local::cluster::{JobProgressRow, ReplicaUsageRow};

use crate::metrics::tests::{h100, sample};
use crate::metrics::{Format, render};

const DASHBOARD: &str = include_str!("../../../deploy/grafana/corral-dashboard.json");

/// The `corral_*` and `DCGM_*` names in a PromQL expression.
fn names_in(expr: &str) -> Vec<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| w.starts_with("corral_") || w.starts_with("DCGM_"))
        .map(str::to_string)
        .collect()
}

/// Every expression of the dashboard: its panels' targets and its variables' queries.
fn expressions(doc: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for p in doc["panels"].as_array().into_iter().flatten() {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.extend(t["expr"].as_str().map(str::to_string));
        }
    }
    for v in doc["templating"]["list"].as_array().into_iter().flatten() {
        out.extend(v["definition"].as_str().map(str::to_string));
    }
    out
}

#[test]
fn the_grafana_dashboard_queries_only_series_the_server_renders() {
    let doc: serde_json::Value = serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
    let (mut m, queues, mut rows) = sample();
    m.gpu_samples = vec![h100(0)];
    rows.push(ReplicaUsageRow {
        namespace: "ns".into(),
        job: "j".into(),
        replica: "j-worker-0".into(),
        pid: Some(1),
        cpu_seconds: Some(1.0),
        memory_bytes: Some(1),
        gpus: vec![0],
        gpu_utilization_percent: Some(97),
        gpu_memory_bytes: Some(1 << 30),
    });
    let progress = [JobProgressRow {
        namespace: "ns".into(),
        job: "j".into(),
        progress: corral_api::progress::JobProgress {
            step: 60,
            total_steps: Some(100),
            percent: Some(60.0),
            eta_seconds: Some(150),
            ..Default::default()
        },
    }];
    let text = render(&m, &queues, &rows, &progress, Format::Text);
    let rendered: BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let exprs = expressions(&doc);
    assert!(exprs.len() >= 10, "{exprs:?}");
    let mut missing = Vec::new();
    for e in &exprs {
        for name in names_in(e) {
            if !rendered.contains(name.as_str()) {
                missing.push(format!("{name} (in `{e}`)"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the dashboard queries series /metrics does not have: {missing:?}\nrendered: {rendered:?}"
    );
}
