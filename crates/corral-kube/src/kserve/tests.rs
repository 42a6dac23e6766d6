use std::sync::Arc;

use jiff::Timestamp;
use serde_json::{Value, json};

use corral_api::ServedModel;
use corral_api::served_model::{RevisionStatus, ServedModelStatus};

use super::status::same_status;
use super::{InferenceService, KserveAction, SOURCE_ANNOTATION, plan};

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).expect("time")
}

fn isvc(predictor: Value) -> InferenceService {
    InferenceService {
        raw: json!({
            "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "llm", "namespace": "team", "uid": "u1", "generation": 2,
                         "labels": {"corral.dev/queue": "serving"}},
            "spec": {"predictor": predictor},
        }),
    }
}

fn custom() -> Value {
    json!({"minReplicas": 1, "containers": [{"name": "kserve-container", "image": "m:1",
           "command": ["python3", "serve.py"],
           "readinessProbe": {"httpGet": {"path": "/healthz"}}}]})
}

/// The model the plan asks for, as the API server then holds it, with `status`.
fn made(i: &InferenceService, status: Option<ServedModelStatus>) -> Arc<ServedModel> {
    let mut m = super::convert(i).expect("converts");
    m.status = status;
    Arc::new(m)
}

fn statuses(actions: &[KserveAction]) -> Vec<&Value> {
    actions
        .iter()
        .filter_map(|a| match a {
            KserveAction::WriteStatus { status, .. } => Some(status),
            _ => None,
        })
        .collect()
}

fn cond<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .expect("condition")
}

#[test]
fn an_inference_service_becomes_a_served_model_it_owns() {
    let i = isvc(custom());
    let actions = plan(std::slice::from_ref(&i), &[], t(0));
    let KserveAction::ApplyModel { body, .. } = &actions[0] else {
        panic!("{actions:?}");
    };
    assert_eq!(body["kind"], "ServedModel");
    assert_eq!(body["metadata"]["name"], "llm");
    assert_eq!(
        body["metadata"]["ownerReferences"][0]["kind"],
        "InferenceService"
    );
    assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], "u1");
    assert_eq!(
        body["metadata"]["annotations"][SOURCE_ANNOTATION],
        "InferenceService/u1"
    );
    assert_eq!(body["spec"]["queue"], "serving");
    assert_eq!(body["spec"]["template"]["image"], "m:1");
    let s = statuses(&actions)[0];
    assert_eq!(cond(s, "Ready")["status"], "False");
    assert_eq!(s["observedGeneration"], 2);
    // Once the model is there as asked, nothing is applied again.
    let m = made(&i, None);
    let again = plan(std::slice::from_ref(&i), &[m], t(1));
    assert!(
        again
            .iter()
            .all(|a| !matches!(a, KserveAction::ApplyModel { .. })),
        "{again:?}"
    );
}

#[test]
fn the_models_status_is_written_back_in_kserves_words() {
    let mut i = isvc(custom());
    let ready = ServedModelStatus {
        desired_replicas: 1,
        replicas: 1,
        ready_replicas: 1,
        url: Some("/serve/team/llm/".into()),
        latest_revision: Some("llm-00002".into()),
        stable_revision: Some("llm-00001".into()),
        revisions: vec![
            RevisionStatus {
                name: "llm-00001".into(),
                traffic_percent: 90,
                ready_replicas: 1,
                ..Default::default()
            },
            RevisionStatus {
                name: "llm-00002".into(),
                traffic_percent: 10,
                ready_replicas: 1,
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let m = made(&i, Some(ready));
    let actions = plan(std::slice::from_ref(&i), std::slice::from_ref(&m), t(5));
    let s = statuses(&actions)[0].clone();
    assert_eq!(s["url"], "/serve/team/llm/");
    assert_eq!(cond(&s, "Ready")["status"], "True");
    assert_eq!(cond(&s, "PredictorReady")["status"], "True");
    let p = &s["components"]["predictor"];
    assert_eq!(p["latestCreatedRevision"], "llm-00002");
    assert_eq!(p["latestReadyRevision"], "llm-00002");
    assert_eq!(p["latestRolledoutRevision"], "llm-00001");
    assert_eq!(
        p["traffic"],
        json!([
            {"revisionName": "llm-00001", "percent": 90, "latestRevision": false},
            {"revisionName": "llm-00002", "percent": 10, "latestRevision": true},
        ])
    );
    assert_eq!(s["modelStatus"]["transitionStatus"], "InProgress");
    // Written: the next pass writes nothing, and a later change keeps the time a condition
    // turned.
    i.raw["status"] = s.clone();
    assert!(
        statuses(&plan(
            std::slice::from_ref(&i),
            std::slice::from_ref(&m),
            t(9)
        ))
        .is_empty()
    );
    let mut down = (*m).clone();
    if let Some(st) = down.status.as_mut() {
        st.ready_replicas = 0;
        st.revisions.clear();
    }
    let actions = plan(std::slice::from_ref(&i), &[Arc::new(down)], t(20));
    let s2 = statuses(&actions)[0];
    assert_eq!(cond(s2, "Ready")["status"], "False");
    assert_eq!(cond(s2, "Ready")["lastTransitionTime"], t(20).to_string());
    assert_eq!(
        cond(s2, "IngressReady")["lastTransitionTime"],
        cond(&s, "IngressReady")["lastTransitionTime"]
    );
    assert!(s2["components"]["predictor"]["latestReadyRevision"].is_null());
}

#[test]
fn scaled_to_zero_it_stays_ready() {
    let mut p = custom();
    p["minReplicas"] = json!(0);
    let i = isvc(p);
    let m = made(
        &i,
        Some(ServedModelStatus {
            url: Some("/serve/team/llm/".into()),
            ..Default::default()
        }),
    );
    let actions = plan(std::slice::from_ref(&i), &[m], t(0));
    assert_eq!(cond(statuses(&actions)[0], "Ready")["status"], "True");
}

#[test]
fn what_corral_cannot_serve_is_refused_in_the_status_with_the_field() {
    let i = isvc(json!({"sklearn": {"storageUri": "gs://m"}}));
    let actions = plan(std::slice::from_ref(&i), &[], t(0));
    assert_eq!(actions.len(), 1, "{actions:?}");
    let s = statuses(&actions)[0];
    let ready = cond(s, "Ready");
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], "InvalidSpec");
    assert!(
        ready["message"]
            .as_str()
            .is_some_and(|m| m.contains("spec.predictor.sklearn")),
        "{ready}"
    );
    assert_eq!(s["modelStatus"]["transitionStatus"], "InvalidSpec");
}

#[test]
fn a_model_it_did_not_make_is_not_taken_over() {
    let i = isvc(custom());
    let mut other = super::convert(&i).expect("converts");
    other.metadata.annotations.clear();
    let actions = plan(std::slice::from_ref(&i), &[Arc::new(other)], t(0));
    assert_eq!(actions.len(), 1, "{actions:?}");
    let ready = cond(statuses(&actions)[0], "Ready");
    assert_eq!(ready["reason"], "Conflict");
}

#[test]
fn nulls_and_missing_fields_are_the_same_status() {
    let new = json!({"url": null, "a": {"b": 1, "c": null}});
    assert!(same_status(Some(&json!({"a": {"b": 1}})), &new));
    assert!(!same_status(Some(&json!({"a": {"b": 2}})), &new));
    assert!(!same_status(None, &new));
    // Another writer's field is no reason to write again.
    assert!(same_status(
        Some(&json!({"a": {"b": 1}, "theirs": 1})),
        &new
    ));
}
