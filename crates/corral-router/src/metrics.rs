//! The router's series on `/metrics` (the same names in every shell).

use std::fmt::Write as _;

use crate::{LATENCY_BUCKETS, Router, STATUS_CLASSES, StatsSnapshot};

/// The router's series for the models `allows` admits (a namespace's token: its own), by
/// model and revision (`revision=""`: requests no revision took, e.g. refused before).
/// Counters are announced by their family name, which OpenMetrics writes without `_total`.
pub fn metrics_text(router: &Router, allows: impl Fn(&str) -> bool, openmetrics: bool) -> String {
    let stats: Vec<_> = router
        .stats()
        .into_iter()
        .filter(|m| allows(m.key.split('/').next().unwrap_or_default()))
        .collect();
    let mut out = String::new();
    if stats.is_empty() {
        return out;
    }
    let family = |name: &str| {
        if openmetrics {
            name.trim_end_matches("_total").to_string()
        } else {
            name.to_string()
        }
    };
    let model_labels = |k: &str| {
        let (ns, model) = k.split_once('/').unwrap_or((k, ""));
        format!("namespace=\"{ns}\",model=\"{model}\"")
    };
    let revisions: Vec<(String, &StatsSnapshot)> = stats
        .iter()
        .flat_map(|m| {
            m.revisions
                .iter()
                .map(|(r, s)| (format!("{},revision=\"{r}\"", model_labels(&m.key)), s))
        })
        .collect();
    let requests = family("corral_serving_requests_total");
    let _ = writeln!(
        out,
        "# HELP {requests} Requests answered through the router, by revision and status class.\n# TYPE {requests} counter"
    );
    for (l, s) in &revisions {
        for (class, n) in STATUS_CLASSES.iter().zip(s.by_class) {
            let _ = writeln!(
                out,
                "corral_serving_requests_total{{{l},code=\"{class}\"}} {n}"
            );
        }
    }
    out.push_str("# HELP corral_serving_request_duration_seconds Time from a request's arrival to its response head (cold starts included), by revision.\n# TYPE corral_serving_request_duration_seconds histogram\n");
    for (l, s) in &revisions {
        for (le, n) in LATENCY_BUCKETS.iter().zip(s.buckets) {
            let _ = writeln!(
                out,
                "corral_serving_request_duration_seconds_bucket{{{l},le=\"{le}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "corral_serving_request_duration_seconds_bucket{{{l},le=\"+Inf\"}} {}\ncorral_serving_request_duration_seconds_sum{{{l}}} {}\ncorral_serving_request_duration_seconds_count{{{l}}} {}",
            s.count, s.sum_seconds, s.count
        );
    }
    let _ = writeln!(
        out,
        "# HELP corral_serving_in_flight_requests Requests being answered or held for a cold start.\n# TYPE corral_serving_in_flight_requests gauge"
    );
    for m in &stats {
        let _ = writeln!(
            out,
            "corral_serving_in_flight_requests{{{}}} {}",
            model_labels(&m.key),
            m.in_flight
        );
    }
    for (name, help, value) in [
        (
            "corral_serving_ready_replicas",
            "Replicas in the router's rotation, by revision.",
            (|s: &StatsSnapshot| s.ready_replicas as u64) as fn(&_) -> u64,
        ),
        (
            "corral_serving_retries_total",
            "Requests sent again to another replica after one failed, by revision.",
            |s| s.retries,
        ),
    ] {
        let kind = if name.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        let f = family(name);
        let _ = writeln!(out, "# HELP {f} {help}\n# TYPE {f} {kind}");
        for (l, s) in &revisions {
            let _ = writeln!(out, "{name}{{{l}}} {}", value(s));
        }
    }
    out
}
