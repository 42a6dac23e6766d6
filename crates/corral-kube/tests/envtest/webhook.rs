//! The validating admission webhook through the real kube-apiserver: deploy/webhook's
//! ValidatingWebhookConfiguration (rules, matchConditions) pointed at the operator's
//! webhook served in-process over HTTPS with a self-signed certificate, so that a
//! TrainingJob that cannot run as written is refused at create with the embedded shell's
//! words, and a valid one, its status and its deletion go through.

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::watch;

use corral_kube::build::BuildOptions;
use corral_kube::webhook;

use crate::harness::{Env, repo_root};
use crate::manifests::namespace;
use crate::trainingjobs::{replica, training_job, training_jobs};

/// deploy/webhook/webhook.yaml's configuration, calling `url` with `ca` instead of the
/// Service and cert-manager's injection, for namespace `ns` only (the other cases hold
/// jobs the operator must see invalid).
fn configuration(url: &str, ca: &str, ns: &str) -> ValidatingWebhookConfiguration {
    configuration_of("webhook.yaml", "corral-envtest-trainingjobs", url, ca, ns)
}

/// The configuration of `deploy/webhook/<file>`, named `name`, made as [`configuration`].
fn configuration_of(
    file: &str,
    name: &str,
    url: &str,
    ca: &str,
    ns: &str,
) -> ValidatingWebhookConfiguration {
    let text = std::fs::read_to_string(repo_root().join("deploy/webhook").join(file))
        .unwrap_or_else(|e| panic!("deploy/webhook/{file}: {e}"));
    let doc = serde_saphyr::from_multiple::<Value>(&text)
        .expect("yaml")
        .into_iter()
        .find(|d| d["kind"] == json!("ValidatingWebhookConfiguration"))
        .expect("a ValidatingWebhookConfiguration");
    let mut c: ValidatingWebhookConfiguration = serde_json::from_value(doc).expect("parses");
    c.metadata.name = Some(name.into());
    c.metadata.annotations = None;
    for w in c.webhooks.iter_mut().flatten() {
        w.client_config = WebhookClientConfig {
            url: Some(url.to_string()),
            ca_bundle: Some(ByteString(ca.as_bytes().to_vec())),
            service: None,
        };
        w.namespace_selector = Some(LabelSelector {
            match_labels: Some(
                [("kubernetes.io/metadata.name".to_string(), ns.to_string())].into(),
            ),
            ..LabelSelector::default()
        });
    }
    c
}

fn bad_job(ns: &str) -> Value {
    // Memory without its unit, a success policy of another framework, and a pod template
    // whose containers are not a list: what the CRD's schema lets through (it refuses a
    // missing image itself).
    let mut j = training_job(
        ns,
        "bad",
        "pytorch",
        json!({"worker": replica(2, 1)}),
        json!({}),
    );
    j["spec"]["replicas"]["worker"]["resources"]["memory"] = json!("16");
    j["spec"]["successPolicy"] = json!("AllWorkers");
    j["spec"]["replicas"]["master"] = replica(1, 1);
    j["spec"]["replicas"]["master"]["template"]["podTemplate"] =
        json!({"spec": {"containers": "sidecar"}});
    j
}

pub(crate) async fn admission_webhook(env: &Env) {
    let ns = "webhook";
    namespace(env, ns).await;
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()])
        .expect("self-signed certificate");
    let dir = env.dir.join("webhook-certs");
    std::fs::create_dir_all(&dir).expect("cert dir");
    let ca = cert.cert.pem();
    std::fs::write(dir.join(webhook::CERT_FILE), &ca).expect("tls.crt");
    std::fs::write(
        dir.join(webhook::KEY_FILE),
        cert.signing_key.serialize_pem(),
    )
    .expect("tls.key");
    let listener = webhook::bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (stop, stopped) = watch::channel(false);
    let server = tokio::spawn(webhook::serve(
        listener,
        dir,
        BuildOptions::default(),
        stopped,
    ));

    let configs: Api<ValidatingWebhookConfiguration> = Api::all(env.admin.clone());
    let url = format!("https://127.0.0.1:{port}{}", webhook::PATH);
    configs
        .create(&PostParams::default(), &configuration(&url, &ca, ns))
        .await
        .expect("register the webhook");
    let jobs: Api<DynamicObject> = Api::namespaced_with(env.admin.clone(), ns, &training_jobs());

    // The server picks the configuration up within a moment: until then the job is stored.
    let bad = bad_job(ns);
    let mut refusal = None;
    for _ in 0..60 {
        match jobs
            .create(
                &PostParams::default(),
                &serde_json::from_value(bad.clone()).expect("object"),
            )
            .await
        {
            Err(kube::Error::Api(s)) if s.message.contains("denied the request") => {
                refusal = Some(s);
                break;
            }
            Err(e) => panic!("the create failed otherwise than by the webhook: {e}"),
            Ok(_) => {
                jobs.delete("bad", &DeleteParams::default().grace_period(0))
                    .await
                    .expect("delete the job stored before the webhook was called");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
    let s = refusal.expect("the webhook never refused the invalid job");
    eprintln!(
        "envtest: kubectl would print: Error from server ({}): {}",
        s.reason, s.message
    );
    assert_eq!(s.code, 422, "{s:?}");
    assert_eq!(s.reason, "Invalid", "{s:?}");
    // The embedded shell's words for the same document, after the server's prefix.
    let expected = webhook::check(&bad, &BuildOptions::default()).message();
    assert_eq!(
        s.message,
        format!("admission webhook \"trainingjobs.corral.dev\" denied the request: {expected}")
    );
    for field in [
        "spec.replicas.worker.resources.memory",
        "spec.successPolicy",
        "spec.replicas.master.template.podTemplate",
    ] {
        assert!(
            s.message.contains(&format!("\n  {field}: ")),
            "{field}: {}",
            s.message
        );
    }
    assert!(
        jobs.get_opt("bad").await.expect("get").is_none(),
        "the refused job was stored"
    );

    // A valid job is created; an update that breaks its spec is refused; its status and
    // annotations are written (the operator's updates) and it is deleted.
    let good = training_job(
        ns,
        "good",
        "pytorch",
        json!({"master": replica(1, 1), "worker": replica(1, 1)}),
        json!({}),
    );
    jobs.create(
        &PostParams::default(),
        &serde_json::from_value(good).expect("object"),
    )
    .await
    .expect("a valid job is admitted");
    let pp = PatchParams::default();
    let broken = jobs
        .patch(
            "good",
            &pp,
            &Patch::Merge(
                json!({"spec": {"replicas": {"worker": {"resources": {"memory": "16"}}}}}),
            ),
        )
        .await
        .expect_err("a spec update that breaks the job was admitted");
    assert!(
        broken
            .to_string()
            .contains("spec.replicas.worker.resources.memory"),
        "{broken}"
    );
    jobs.patch(
        "good",
        &pp,
        &Patch::Merge(json!({"metadata": {"annotations": {"corral.dev/note": "x"}}})),
    )
    .await
    .expect("an annotation update is admitted");
    jobs.patch_status(
        "good",
        &pp,
        &Patch::Merge(json!({"status": {"conditions": []}})),
    )
    .await
    .expect("a status update is admitted");
    jobs.delete("good", &DeleteParams::default())
        .await
        .expect("a delete is admitted");

    // A PipelineRun whose step names no image: refused in the words the operator would
    // fail it with (`corral_kube::pipelines::check`, the same check).
    let runs: Api<DynamicObject> = Api::namespaced_with(
        env.admin.clone(),
        ns,
        &crate::manifests::ar("corral.dev", "v1alpha1", "PipelineRun", "pipelineruns"),
    );
    let run = json!({
        "apiVersion": "corral.dev/v1alpha1", "kind": "PipelineRun",
        "metadata": {"name": "no-image", "namespace": ns},
        "spec": {"pipelineSpec": {"steps": [{"name": "only", "task": {"command": ["true"]}}]}},
    });
    let refused = runs
        .create(
            &PostParams::default(),
            &serde_json::from_value(run.clone()).expect("run"),
        )
        .await
        .expect_err("a run whose step has no image was stored");
    let expected = webhook::check_run(&run).message();
    assert!(expected.contains("image"), "{expected}");
    assert!(refused.to_string().contains(&expected), "{refused}");
    assert!(runs.get_opt("no-image").await.expect("get").is_none());
    // A stored Pipeline the same (a run of it would run its copy); a run naming one passes.
    let pipelines: Api<DynamicObject> = Api::namespaced_with(
        env.admin.clone(),
        ns,
        &crate::manifests::ar("corral.dev", "v1alpha1", "Pipeline", "pipelines"),
    );
    let mut pipeline = json!({
        "apiVersion": "corral.dev/v1alpha1", "kind": "Pipeline",
        "metadata": {"name": "stored", "namespace": ns}, "spec": run["spec"]["pipelineSpec"],
    });
    let refused = pipelines
        .create(
            &PostParams::default(),
            &serde_json::from_value(pipeline.clone()).expect("pipeline"),
        )
        .await
        .expect_err("a Pipeline whose step has no image was stored");
    let expected = webhook::check_pipeline(&pipeline).message();
    assert!(refused.to_string().contains(&expected), "{refused}");
    pipeline["spec"]["steps"][0]["task"]["image"] = json!("busybox");
    pipelines
        .create(
            &PostParams::default(),
            &serde_json::from_value(pipeline).expect("pipeline"),
        )
        .await
        .expect("a good Pipeline is stored");
    let by_ref = json!({
        "apiVersion": "corral.dev/v1alpha1", "kind": "PipelineRun",
        "metadata": {"name": "by-ref", "namespace": ns},
        "spec": {"pipelineRef": {"name": "stored"}},
    });
    runs.create(
        &PostParams::default(),
        &serde_json::from_value(by_ref).expect("run"),
    )
    .await
    .expect("a run of a stored Pipeline passes (the operator gives it its copy)");
    runs.delete("by-ref", &DeleteParams::default())
        .await
        .expect("delete the run");
    // A ServedModel the same, in its own field paths: a readiness path that is not one, and
    // a TrainingJob's output (embedded only) are refused; a good one is stored.
    let models: Api<DynamicObject> = Api::namespaced_with(
        env.admin.clone(),
        ns,
        &crate::manifests::ar("corral.dev", "v1alpha1", "ServedModel", "servedmodels"),
    );
    let mut model = json!({
        "apiVersion": "corral.dev/v1alpha1", "kind": "ServedModel",
        "metadata": {"name": "tiny", "namespace": ns},
        "spec": {"template": {"image": "models/tiny:1", "command": ["python3", "serve.py"]},
                 "readiness": {"path": "healthz"},
                 "model": {"trainingJob": "train"}},
    });
    let refused = models
        .create(
            &PostParams::default(),
            &serde_json::from_value(model.clone()).expect("model"),
        )
        .await
        .expect_err("a ServedModel with a bad readiness path was stored");
    let expected = webhook::check_served_model(&model, &Default::default()).message();
    assert!(
        expected.contains("spec.readiness.path") && expected.contains("spec.model.trainingJob"),
        "{expected}"
    );
    assert!(refused.to_string().contains(&expected), "{refused}");
    model["spec"]["readiness"]["path"] = json!("/healthz");
    model["spec"].as_object_mut().expect("spec").remove("model");
    models
        .create(
            &PostParams::default(),
            &serde_json::from_value(model).expect("model"),
        )
        .await
        .expect("a good ServedModel is stored");
    models
        .delete("tiny", &DeleteParams::default())
        .await
        .expect("delete the model");

    inference_services(env, ns, &configs, (&url, &ca)).await;
    configs
        .delete("corral-envtest-trainingjobs", &DeleteParams::default())
        .await
        .expect("unregister the webhook");
    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), server).await;
}

/// deploy/webhook/kserve.yaml (`--kserve`): an InferenceService Corral cannot serve is
/// refused at create in `check_inference_service`'s words; a custom-container one is stored.
async fn inference_services(
    env: &Env,
    ns: &str,
    configs: &Api<ValidatingWebhookConfiguration>,
    (url, ca): (&str, &str),
) {
    let name = "corral-envtest-inferenceservices";
    configs
        .create(
            &PostParams::default(),
            &configuration_of("kserve.yaml", name, url, ca, ns),
        )
        .await
        .expect("register the InferenceService webhook");
    let isvcs: Api<DynamicObject> =
        Api::namespaced_with(env.admin.clone(), ns, &corral_kube::kserve::api_resource());
    let mut isvc = json!({
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "iris", "namespace": ns},
        "spec": {"predictor": {"sklearn": {"storageUri": "gs://models/iris"}}},
    });
    let expected = webhook::check_inference_service(&isvc, &Default::default()).message();
    let mut refused = None;
    for _ in 0..60 {
        match isvcs
            .create(
                &PostParams::default(),
                &serde_json::from_value(isvc.clone()).expect("object"),
            )
            .await
        {
            Err(e) => {
                refused = Some(e.to_string());
                break;
            }
            Ok(_) => {
                // Stored before the server saw the configuration: again.
                isvcs
                    .delete("iris", &DeleteParams::default())
                    .await
                    .expect("delete the early one");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
    let refused = refused.expect("the webhook never refused the sklearn predictor");
    assert!(
        expected.contains("spec.predictor.sklearn") && refused.contains(&expected),
        "{refused}"
    );
    isvc["spec"]["predictor"] = json!({"containers": [{"name": "kserve-container",
        "image": "models/iris:1", "command": ["python3", "serve.py"]}]});
    isvcs
        .create(
            &PostParams::default(),
            &serde_json::from_value(isvc).expect("object"),
        )
        .await
        .expect("a custom-container InferenceService is stored");
    isvcs
        .delete("iris", &DeleteParams::default())
        .await
        .expect("delete it");
    configs
        .delete(name, &DeleteParams::default())
        .await
        .expect("unregister the InferenceService webhook");
}
