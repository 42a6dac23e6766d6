//! A served model's revisions in the embedded cluster: a submission of an existing model
//! revises it (a new revision only when what the replicas run changed), the core's
//! promotion and retirement are recorded, the revisions survive a reopen, the split's
//! percent is checked at its field, and a delete takes every revision with it. No replica
//! runs (the model is at zero and gets no request).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::cluster::{Harness, Waits};
use corral_local::{Cluster, ClusterError};

const WAITS: Waits = Waits {
    deadline: Duration::from_secs(30),
    pause: Duration::from_millis(25),
};

fn model(version: &str) -> String {
    format!(
        "apiVersion: corral.dev/v1alpha1
kind: ServedModel
metadata: {{name: tiny}}
spec:
  template:
    command: [python3, server.py]
    env: [{{name: MODEL_VERSION, value: {version}}}]
  autoscaling: {{minReplicas: 0, maxReplicas: 2}}
"
    )
}

/// One serving pass with no load; the model's (latest, stable, revision names).
fn pass(h: &mut Harness, c: &mut Cluster) -> (String, String, Vec<String>) {
    h.tick(c);
    let (_, errors) = c.serve_pass(h.now, &BTreeMap::new());
    assert!(errors.is_empty(), "{errors:?}");
    let status = c
        .served_model("default", "tiny")
        .and_then(|m| m.status)
        .expect("a status after a pass");
    (
        status.latest_revision.unwrap_or_default(),
        status.stable_revision.unwrap_or_default(),
        status.revisions.into_iter().map(|r| r.name).collect(),
    )
}

fn revisions_are_kept_promoted_retired_and_deleted() {
    let (mut h, mut c) = Harness::new(WAITS, 33000, "");
    let first = c
        .submit_served_models(&model("v1"), "default", false)
        .expect("submit");
    assert_eq!(first[0].revision.as_deref(), Some("tiny-00001"));
    assert!(first[0].new_revision);
    let (latest, stable, _) = pass(&mut h, &mut c);
    assert_eq!(
        (latest.as_str(), stable.as_str()),
        ("tiny-00001", "tiny-00001")
    );

    // The same template: no new revision; a new env: tiny-00002.
    let same = c
        .submit_served_models(&model("v1"), "default", false)
        .expect("resubmit");
    assert_eq!(same[0].revision.as_deref(), Some("tiny-00001"));
    assert!(!same[0].new_revision);
    let second = c
        .submit_served_models(&model("v2"), "default", false)
        .expect("revise");
    assert_eq!(second[0].revision.as_deref(), Some("tiny-00002"));
    assert!(second[0].new_revision);
    // Nothing is ready anywhere (the model is at zero): the rollout promotes at once, and
    // the first revision, without replicas, is retired.
    let (latest, stable, names) = pass(&mut h, &mut c);
    assert_eq!(
        (latest.as_str(), stable.as_str()),
        ("tiny-00002", "tiny-00002")
    );
    assert_eq!(names, vec!["tiny-00002".to_string()]);
    pass(&mut h, &mut c);

    // The split's percent, checked at its field.
    let err = c
        .set_canary_percent("default", "tiny", Some(101))
        .expect_err("refused");
    let ClusterError::Invalid(problems) = err else {
        panic!("not refused as invalid: {err}");
    };
    assert_eq!(problems[0].errors[0].path, "spec.canaryTrafficPercent");
    let m = c
        .set_canary_percent("default", "tiny", Some(10))
        .expect("set");
    assert_eq!(m.spec.canary_traffic_percent, Some(10));

    // Reopened: the revisions and the split are as they were.
    drop(c);
    let mut c = h.open();
    let (latest, stable, names) = pass(&mut h, &mut c);
    assert_eq!(
        (latest.as_str(), stable.as_str()),
        ("tiny-00002", "tiny-00002")
    );
    assert_eq!(names, vec!["tiny-00002".to_string()]);
    assert_eq!(
        c.served_model("default", "tiny")
            .map(|m| m.spec.canary_traffic_percent),
        Some(Some(10))
    );
    // A third revision numbers on from the kept ones.
    let third = c
        .submit_served_models(&model("v3"), "default", false)
        .expect("revise again");
    assert_eq!(third[0].revision.as_deref(), Some("tiny-00003"));

    // Deleted: a model of the same name starts again at revision 1.
    c.delete_served_model("default", "tiny", h.now)
        .expect("delete");
    let again = c
        .submit_served_models(&model("v9"), "default", false)
        .expect("submit again");
    assert_eq!(again[0].revision.as_deref(), Some("tiny-00001"));
}

fn main() -> std::process::ExitCode {
    common::main(vec![(
        "revisions_are_kept_promoted_retired_and_deleted",
        revisions_are_kept_promoted_retired_and_deleted,
    )])
}
