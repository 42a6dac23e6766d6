//! The review handler: what it allows, what it refuses and in which words.

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::*;

fn job(image: Option<&str>, memory: &str) -> Value {
    let mut template = json!({"command": ["python", "train.py"]});
    if let Some(i) = image {
        template["image"] = json!(i);
    }
    json!({
        "apiVersion": "corral.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {
            "name": "mnist", "namespace": "ml", "uid": "3f1c", "generation": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            // What the API server adds before admission: not the author's, never refused.
            "managedFields": [{"manager": "kubectl", "operation": "Update"}],
            "finalizers": ["example.com/keep"],
        },
        "spec": {
            "framework": "pytorch",
            "replicas": {
                "master": {"count": 1, "resources": {"cpu": "1", "memory": memory, "gpu": 1},
                           "template": template.clone()},
                "worker": {"count": 2, "resources": {"cpu": "1", "memory": memory, "gpu": 1},
                           "template": template},
            },
        },
    })
}

fn valid() -> Value {
    job(Some("pytorch/pytorch:2.5.1"), "8Gi")
}

fn request(operation: &str, object: Option<Value>, old: Option<Value>) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "corral.dev", "version": "v1alpha1", "kind": "TrainingJob"},
            "resource": {"group": "corral.dev", "version": "v1alpha1", "resource": "trainingjobs"},
            "name": "mnist",
            "namespace": "ml",
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": object,
            "oldObject": old,
            "dryRun": false,
        },
    })
}

/// The response of a review that must parse.
fn respond(review: &Value) -> Value {
    let body = serde_json::to_vec(review).expect("json");
    let out = super::review(&body, &BuildOptions::default()).expect("a review");
    let v = serde_json::to_value(out).expect("json");
    assert_eq!(v["apiVersion"], json!("admission.k8s.io/v1"), "{v}");
    assert_eq!(v["kind"], json!("AdmissionReview"), "{v}");
    assert_eq!(
        v["response"]["uid"],
        json!("705ab4f5-6393-11e8-b7cc-42010a800002"),
        "the response must carry the request's uid: {v}"
    );
    v["response"].clone()
}

#[test]
fn a_valid_job_is_allowed() {
    let r = respond(&request("CREATE", Some(valid()), None));
    assert_eq!(r["allowed"], json!(true), "{r}");
}

#[test]
fn an_invalid_job_is_denied_naming_each_field_in_the_embedded_shells_words() {
    let r = respond(&request("CREATE", Some(job(None, "16")), None));
    assert_eq!(r["allowed"], json!(false), "{r}");
    let status = &r["status"];
    assert_eq!(status["code"], json!(422), "{r}");
    assert_eq!(status["reason"], json!("Invalid"), "{r}");
    let message = status["message"].as_str().expect("message");
    // What `corral submit` prints for the same document: the headline, then a line per field.
    assert!(
        message.starts_with("TrainingJob mnist is invalid: "),
        "{message}"
    );
    for field in [
        "spec.replicas.master.template.image",
        "spec.replicas.worker.template.image",
        "spec.replicas.worker.resources.memory",
    ] {
        assert!(
            message.contains(&format!("\n  {field}: ")),
            "{field}: {message}"
        );
        assert!(
            status["details"]["causes"]
                .as_array()
                .expect("causes")
                .iter()
                .any(|c| c["field"] == json!(field)),
            "{field}: {r}"
        );
    }
    // Exactly the validation's words (corral_api, as the embedded shell calls it).
    let ctx = ValidationContext {
        requires_image: true,
        ..ValidationContext::default()
    };
    let text = as_written(&job(None, "16")).to_string();
    let embedded = parse_documents(&text, &ctx);
    let Some(Err(e)) = embedded.first() else {
        panic!("corral_api accepted the job")
    };
    let n = e.errors.len();
    let mut expected = format!("TrainingJob mnist is invalid: {n} errors");
    for f in e.errors.iter() {
        expected.push_str(&format!("\n  {f}"));
    }
    assert_eq!(message, expected);
}

#[test]
fn a_pod_template_the_operator_cannot_build_is_denied_at_its_field() {
    let mut j = valid();
    j["spec"]["replicas"]["worker"]["template"]["podTemplate"] =
        json!({"spec": {"containers": "sidecar"}});
    let r = respond(&request("CREATE", Some(j), None));
    assert_eq!(r["allowed"], json!(false), "{r}");
    let message = r["status"]["message"].as_str().expect("message");
    assert!(
        message.contains("\n  spec.replicas.worker.template.podTemplate: "),
        "{message}"
    );
    assert!(message.contains("containers"), "{message}");
}

#[test]
fn tolerations_the_operator_cannot_read_are_denied_at_their_field() {
    let mut j = valid();
    j["spec"]["replicas"]["master"]["template"]["podTemplate"] =
        json!({"spec": {"tolerations": "all"}});
    let r = respond(&request("CREATE", Some(j), None));
    assert_eq!(r["allowed"], json!(false), "{r}");
    let message = r["status"]["message"].as_str().expect("message");
    assert!(
        message.contains("spec.replicas.master.template.podTemplate"),
        "{message}"
    );
}

#[test]
fn an_update_that_leaves_the_spec_alone_is_allowed_even_for_an_invalid_job() {
    // A job stored before the webhook existed must still get its status and annotations.
    let old = job(None, "16");
    let mut new = old.clone();
    new["metadata"]["annotations"] = json!({"corral.dev/admission": "{}"});
    new["status"] = json!({"conditions": []});
    let r = respond(&request("UPDATE", Some(new), Some(old)));
    assert_eq!(r["allowed"], json!(true), "{r}");
}

#[test]
fn an_update_of_the_spec_is_checked() {
    let mut new = valid();
    new["spec"]["replicas"]["worker"]["resources"]["memory"] = json!("16");
    let r = respond(&request("UPDATE", Some(new), Some(valid())));
    assert_eq!(r["allowed"], json!(false), "{r}");
    let message = r["status"]["message"].as_str().expect("message");
    assert!(
        message.contains("spec.replicas.worker.resources.memory"),
        "{message}"
    );
}

#[test]
fn a_status_update_and_a_delete_are_allowed() {
    let mut status = request("UPDATE", Some(job(None, "16")), Some(valid()));
    status["request"]["subResource"] = json!("status");
    assert_eq!(respond(&status)["allowed"], json!(true));
    let delete = request("DELETE", None, Some(job(None, "16")));
    assert_eq!(respond(&delete)["allowed"], json!(true));
    let mut going = job(None, "16");
    going["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:05Z");
    assert_eq!(
        respond(&request("UPDATE", Some(going), Some(valid())))["allowed"],
        json!(true)
    );
}

#[test]
fn garbage_gets_a_400_never_a_panic() {
    let opts = BuildOptions::default();
    for body in [
        b"".to_vec(),
        b"not json".to_vec(),
        b"[1, 2]".to_vec(),
        br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#.to_vec(),
        br#"{"request": {"uid": 7}}"#.to_vec(),
        serde_json::to_vec(&request("CREATE", None, None)).expect("json"),
        serde_json::to_vec(&request("CREATE", Some(json!("a string")), None)).expect("json"),
        vec![0xff, 0xfe, 0x00],
    ] {
        let resp = answer(&body, &opts);
        assert_eq!(
            resp.status(),
            StatusCode::BAD_REQUEST,
            "{}",
            String::from_utf8_lossy(&body)
        );
    }
    let ok = answer(
        &serde_json::to_vec(&request("CREATE", Some(valid()), None)).expect("json"),
        &opts,
    );
    assert_eq!(ok.status(), StatusCode::OK);
}

#[test]
fn a_job_no_node_could_hold_is_admitted() {
    // Nodes come and go on Kubernetes: the operator shows it Unschedulable instead.
    let mut j = valid();
    j["spec"]["replicas"]["worker"]["resources"]["memory"] = json!("40Ti");
    let r = respond(&request("CREATE", Some(j), None));
    assert_eq!(r["allowed"], json!(true), "{r}");
}

#[test]
fn a_pipeline_run_is_refused_as_the_operator_would_fail_it() {
    let run = json!({
        "apiVersion": "corral.dev/v1alpha1", "kind": "PipelineRun",
        "metadata": {"name": "r", "namespace": "ml"},
        "spec": {"pipelineSpec": {"steps": [{"name": "only", "task": {"command": ["true"]}}]}},
    });
    let v = check_run(&run);
    assert_eq!(v.what, "PipelineRun r");
    let decoded: corral_api::PipelineRun = serde_json::from_value(run.clone()).expect("run");
    let operator = crate::pipelines::check(&decoded).expect_err("the operator refuses it too");
    assert_eq!(v.errors, operator, "the same fields, the same words");
    // A run of a stored Pipeline: the operator gives it its copy, and checks that.
    let mut by_ref = run.clone();
    by_ref["spec"] = json!({"pipelineRef": {"name": "stored"}});
    assert!(check_run(&by_ref).errors.is_empty());
    let mut resolved = run.clone();
    resolved["spec"]["pipelineRef"] = json!({"name": "stored", "generation": 1});
    assert_eq!(check_run(&resolved).errors, v.errors, "its copy is checked");
    let mut good = run.clone();
    good["spec"]["pipelineSpec"]["steps"][0]["task"]["image"] = json!("busybox");
    assert!(
        check_run(&good).errors.is_empty(),
        "{:?}",
        check_run(&good).errors
    );
    // Sent to the same path: the review answers by kind.
    let mut review = request("CREATE", Some(run), None);
    review["request"]["kind"]["kind"] = json!("PipelineRun");
    let resp = respond(&review);
    assert_eq!(resp["allowed"], json!(false), "{resp}");
    assert_eq!(resp["status"]["details"]["kind"], json!("PipelineRun"));
}

/// A stored Pipeline is refused where a run of it could never run, in the words `corral
/// submit` gives; a good one passes.
#[test]
fn a_stored_pipeline_is_checked_as_a_submit_checks_it() {
    let mut pipeline = json!({
        "apiVersion": "corral.dev/v1alpha1", "kind": "Pipeline",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"steps": [{"name": "only", "task": {"command": ["true"]}},
                           {"name": "next", "dependsOn": ["nowhere"],
                            "task": {"image": "busybox", "command": ["true"]}}]},
    });
    let v = crate::webhook::check_pipeline(&pipeline);
    assert_eq!(v.what, "Pipeline train");
    let paths: Vec<&str> = v.errors.iter().map(|e| e.path.as_str()).collect();
    assert!(paths.contains(&"spec.steps[0].task.image"), "{paths:?}");
    assert!(
        paths
            .iter()
            .any(|p| p.starts_with("spec.steps[1].dependsOn")),
        "{paths:?}"
    );
    let mut review = request("CREATE", Some(pipeline.clone()), None);
    review["request"]["kind"]["kind"] = json!("Pipeline");
    assert_eq!(respond(&review)["allowed"], json!(false));
    pipeline["spec"]["steps"][0]["task"]["image"] = json!("busybox");
    pipeline["spec"]["steps"][1]["dependsOn"] = json!(["only"]);
    let v = crate::webhook::check_pipeline(&pipeline);
    assert!(v.errors.is_empty(), "{:?}", v.errors);
}

/// An InferenceService (`--kserve`) is refused where Corral could not serve it, in the
/// converter's words and its own field paths; a custom-container predictor passes.
#[test]
fn an_inference_service_is_checked_as_a_submit_checks_it() {
    let mut isvc = json!({
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "iris", "namespace": "ml", "uid": "u1"},
        "spec": {"predictor": {"sklearn": {"storageUri": "gs://models/iris"}}},
    });
    let v = check_inference_service(&isvc, &BuildOptions::default());
    assert_eq!(v.what, "InferenceService iris");
    assert!(
        v.errors.iter().any(|e| e.path == "spec.predictor.sklearn"),
        "{:?}",
        v.errors
    );
    let mut review = request("CREATE", Some(isvc.clone()), None);
    review["request"]["kind"] =
        json!({"group": "serving.kserve.io", "version": "v1beta1", "kind": "InferenceService"});
    let resp = respond(&review);
    assert_eq!(resp["allowed"], json!(false), "{resp}");
    assert_eq!(
        resp["status"]["details"]["group"],
        json!("serving.kserve.io")
    );
    assert!(
        resp["status"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("InferenceService iris is invalid")),
        "{resp}"
    );
    isvc["spec"]["predictor"] = json!({"containers": [{"name": "kserve-container",
        "image": "models/iris:1", "command": ["python3", "serve.py"]}]});
    let v = check_inference_service(&isvc, &BuildOptions::default());
    assert!(v.errors.is_empty(), "{:?}", v.errors);
    // Without an image it could not run on Kubernetes: refused, as a ServedModel is.
    isvc["spec"]["predictor"]["containers"][0]
        .as_object_mut()
        .map(|c| c.remove("image"));
    let v = check_inference_service(&isvc, &BuildOptions::default());
    assert!(
        v.errors.iter().any(|e| e.path.contains("image")),
        "{:?}",
        v.errors
    );
}
