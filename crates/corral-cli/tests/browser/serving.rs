//! A served model on the dashboard: listed on the serving page with its traffic and the job
//! that trained it, and its page shows that training run (a link to the job), the revision
//! carrying every request and its replica in rotation, as the API reports them.

use std::path::Path;
use std::time::Duration;

use super::driver::{self, Browser};
use super::{TestCluster, TestResult, check};

/// A job whose output is the model, in a line of shell (no Python needed to train it).
const TRAIN: &str = "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {name: train-tiny}
spec:
  framework: generic
  replicas:
    worker:
      template:
        command: [sh, -c, 'echo {\\\"weights\\\": [1, 1], \\\"bias\\\": 0} > $CORRAL_OUTPUT_DIR/model.json']
      resources: {cpu: 10m, memory: 16Mi}
";

pub(super) fn a_served_model_shows_its_training_run_revisions_and_replicas() -> TestResult {
    if !driver::available() {
        return Ok(());
    }
    let c = TestCluster::start("")?;
    let client = c.client(None);
    client.submit("default", TRAIN)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let state = client.describe("default", "train-tiny")?.summary.state;
        if state.is_finished() {
            check(
                state == corral_local::cluster::JobState::Succeeded,
                format!("train-tiny {state}"),
            )?;
            break;
        }
        check(
            std::time::Instant::now() < deadline,
            "train-tiny did not finish",
        )?;
        std::thread::sleep(Duration::from_millis(100));
    }
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/serving");
    let model = std::fs::read_to_string(example.join("from-training.yaml"))?
        .replace("{cpu: 500m, memory: 256Mi}", "{cpu: 10m, memory: 64Mi}");
    let up = corral_cli::code_archive::upload(&model, &example)?;
    client.submit_with_code("default", &up.boundary, &up.body)?;

    let b = Browser::start()?;
    b.goto(&c.url("/#/serving"))?;
    let row = b.wait(
        "the model in the serving table, trained by train-tiny",
        "const a = document.querySelector('#models a[href=\"#/serving/default/tiny-trained\"]');
         return a && a.closest('tr').innerText.includes('train-tiny') ? a.closest('tr').innerText : ''",
    )?;
    b.screenshot("serving")?;
    b.click("#models a[href=\"#/serving/default/tiny-trained\"]")?;
    let origin = b.wait(
        "where the model came from",
        "const p = document.querySelector('#model-origin a[href=\"#/jobs/default/train-tiny\"]');
         return p ? document.querySelector('#model-origin').innerText : ''",
    )?;
    check(
        origin
            .as_str()
            .is_some_and(|t| t.contains("model.json") && t.contains("sha256:")),
        format!("the origin names the file and its content: {origin}"),
    )?;
    // The replica comes into rotation and its revision carries every request, live.
    let in_rotation = b.wait(
        "the replica in rotation",
        "const r = [...document.querySelectorAll('#model-replicas tbody tr')];
         return r.length === 1 && r[0].innerText.includes('tiny-trained-serving-0')
           && r[0].children[3].innerText === 'yes'",
    );
    if let Err(e) = in_rotation {
        // What the replica said, for whoever reads the failure.
        let mut log = Vec::new();
        let request = corral_server::api_client::LogRequest {
            previous: true,
            tail: Some(30),
            ..Default::default()
        };
        let _ = client.logs("default", "tiny-trained-serving-0", &request, &mut log);
        return Err(format!(
            "{}\nthe replica's last incarnation said:\n{}",
            e.message().unwrap_or_default(),
            String::from_utf8_lossy(&log)
        )
        .into());
    }
    let traffic = b.wait(
        "the revision with all the traffic",
        "const r = document.querySelector('#revisions tr[data-revision=\"tiny-trained-00001\"]');
         return r && r.children[1].innerText === '100%' ? r.innerText : ''",
    )?;
    b.screenshot("served-model")?;
    check(
        row.as_str().is_some_and(|t| t.contains("default")),
        format!("{row} / {traffic}"),
    )?;
    // The revision's own URL.
    check(
        traffic
            .as_str()
            .is_some_and(|t| t.contains("/serve/default/tiny-trained@tiny-trained-00001/")),
        format!("no URL of the revision in {traffic}"),
    )?;
    // The model deleted, its replica goes: no model server outlives the test.
    client.delete_served_model("default", "tiny-trained")?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while client.describe("default", "tiny-trained-serving-0").is_ok() {
        check(
            std::time::Instant::now() < deadline,
            "the replica job outlived its model by a minute",
        )?;
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}
