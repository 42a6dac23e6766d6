//! Which of the plane's events the operator publishes as Kubernetes Events: what the job's
//! status does not keep. Admitted, Running and Succeeded are kept by the conditions written
//! in the same pass (and the placements by `status.admission`), so by default they cost no
//! write; `--condition-events` publishes them too. Warnings always go out.

mod common;

use common::FakeApi;
use common::passes::*;
use corral_kube::apply::{Applier, RateLimiter};
use corral_kube::plan::PlanConfig;
use jiff::Timestamp;
use kube::runtime::events::{Recorder, Reporter};
use serde_json::json;

async fn pass_with(fake: &FakeApi, condition_events: bool, now: Timestamp) -> Vec<String> {
    let client = fake.client();
    let reporter = Reporter {
        controller: "corral".into(),
        instance: Some("test".into()),
    };
    let applier = Applier::new(
        client.clone(),
        Some(Recorder::new(client, reporter)),
        RateLimiter::unlimited(),
    )
    .with_condition_events(condition_events);
    let (plan, report) =
        common::passes::kept_pass(fake, &applier, &PlanConfig::default(), now).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    plan.jobs
        .iter()
        .flat_map(|j| j.events.iter().map(|e| e.reason.clone()))
        .collect()
}

fn published(fake: &FakeApi) -> Vec<String> {
    let s = fake.state.lock().expect("lock");
    s.events
        .iter()
        .filter_map(|e| e["reason"].as_str().map(str::to_string))
        .collect()
}

/// A job admitted, running, restarted once and succeeded, passing `condition_events`.
async fn life(condition_events: bool) -> (FakeApi, Vec<String>) {
    let fake = cluster(&["n1"]);
    fake.insert(
        JOBS,
        job("j", 1, 1, json!({"runPolicy": {"backoffLimit": 3}})),
    );
    let mut planned = pass_with(&fake, condition_events, t(0)).await;
    set_phase(&fake, "j-master-0", "Running", None);
    set_phase(&fake, "j-worker-0", "Running", None);
    planned.extend(pass_with(&fake, condition_events, t(1)).await);
    set_phase(&fake, "j-worker-0", "Failed", Some(1));
    planned.extend(pass_with(&fake, condition_events, t(2)).await);
    fake.finish_terminating();
    for s in 3..8 {
        planned.extend(pass_with(&fake, condition_events, t(s * 10)).await);
        for p in pods_of(&fake, "j") {
            let name = p["metadata"]["name"].as_str().unwrap_or("").to_string();
            if p["status"]["phase"].is_null() || p["status"]["phase"] == json!("Pending") {
                set_phase(&fake, &name, "Running", None);
            }
        }
    }
    set_phase(&fake, "j-master-0", "Succeeded", Some(0));
    set_phase(&fake, "j-worker-0", "Succeeded", Some(0));
    planned.extend(pass_with(&fake, condition_events, t(100)).await);
    assert_eq!(condition(&fake, "j", "Succeeded").as_deref(), Some("True"));
    (fake, planned)
}

#[tokio::test]
async fn what_the_conditions_keep_is_not_published_again_and_warnings_are() {
    let (fake, planned) = life(false).await;
    for r in ["Admitted", "Running", "Restarting", "Succeeded"] {
        assert!(
            planned.iter().any(|p| p == r),
            "the plane said {r}: {planned:?}"
        );
    }
    let published = published(&fake);
    assert!(
        published.iter().any(|r| r == "Restarting"),
        "a warning is published: {published:?}"
    );
    for r in ["Admitted", "Running", "Succeeded"] {
        assert!(
            !published.iter().any(|p| p == r),
            "{r} is kept by the status, not published: {published:?}"
        );
    }
    // The status keeps each with its time and words.
    let status = job_status(&fake, "j");
    for ty in ["Admitted", "Running", "Succeeded"] {
        let c = status["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == json!(ty)))
            .unwrap_or_else(|| panic!("{ty} condition: {status}"));
        assert!(c["lastTransitionTime"].is_string(), "{c}");
        assert!(c["message"].as_str().is_some_and(|m| !m.is_empty()), "{c}");
    }
}

#[tokio::test]
async fn condition_events_publishes_every_event_of_the_plane() {
    let (fake, planned) = life(true).await;
    let mut published = published(&fake);
    let mut planned = planned;
    published.sort();
    planned.sort();
    assert_eq!(published, planned);
}
