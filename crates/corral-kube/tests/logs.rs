//! Issue 19 #1: the operator's log lines. Its own test binary: tracing caches which
//! callsites are enabled process-wide, so a test that installs a subscriber is not run
//! beside tests that log without one.

mod common;

use common::FakeApi;
use corral_kube::apply::{Applier, RateLimiter};
use corral_kube::plan::PlanConfig;
use serde_json::{Value, json};

fn cluster() -> FakeApi {
    let fake = FakeApi::new();
    fake.insert(
        "api/v1/nodes",
        json!({
            "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            "status": {
                "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }),
    );
    fake
}

fn bad_toleration_job(name: &str) -> Value {
    let res = json!({"cpu": "8", "memory": "32Gi", "gpu": 4});
    let tpl = json!({"image": "pytorch/pytorch:2.5.1", "command": ["torchrun", "train.py"]});
    let mut bad = tpl.clone();
    bad["podTemplate"] = json!({"spec": {"tolerations": [{"key": "gpu", "operator": "Sometimes", "effect": "NoSchedule"}]}});
    json!({
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "framework": "pytorch",
            "replicas": {
                "master": {"count": 1, "resources": res, "template": tpl},
                "worker": {"count": 1, "resources": res, "template": bad},
            },
        },
    })
}

/// Log lines written to memory.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

// Issue 19 #1: the operator logged nothing. Its JSON lines about a job carry the job's
// namespace and name.
#[tokio::test(flavor = "current_thread")]
async fn json_logs_name_the_job_on_every_line_about_it() {
    use corral_kube::operator::{LogFormat, log_subscriber};
    let out = Captured::default();
    let subscriber = log_subscriber(
        LogFormat::Json,
        tracing_subscriber::EnvFilter::new("info"),
        out.clone(),
        false,
    );
    let _guard = tracing::subscriber::set_default(subscriber);
    let fake = cluster();
    fake.insert(
        "apis/corral.dev/v1alpha1/trainingjobs",
        bad_toleration_job("logged"),
    );
    let applier = Applier::new(fake.client(), None, RateLimiter::unlimited());
    let now = jiff::Timestamp::from_second(1_735_689_600).expect("time");
    let _ = common::passes::kept_pass(&fake, &applier, &PlanConfig::default(), now).await;
    let text = String::from_utf8(out.0.lock().expect("lock").clone()).expect("utf-8");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    let about_job: Vec<&Value> = lines
        .iter()
        .filter(|l| l["span"]["name"] == json!("job"))
        .collect();
    assert!(
        about_job.iter().any(|l| l["level"] == json!("WARN")
            && l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("Unsupported value"))),
        "{text}"
    );
    assert!(
        about_job
            .iter()
            .any(|l| l["fields"]["event"] == json!("Admitted")),
        "{text}"
    );
    for l in &about_job {
        assert_eq!(l["span"]["namespace"], json!("ml"), "{l}");
        assert_eq!(l["span"]["job"], json!("logged"), "{l}");
    }
}
