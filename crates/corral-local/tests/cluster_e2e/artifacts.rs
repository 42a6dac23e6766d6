//! A deleted run's artifacts go once nothing holds them (here with no retention): not while
//! a later run reuses them through the cache, then with their cache entry, so that the
//! next identical step runs again rather than reusing what is gone.

use std::path::Path;

use super::WAITS;
use crate::common::cluster::Harness;
use corral_api::pipeline::StepPhase;
use corral_local::Cluster;

fn run(name: &str) -> String {
    format!(
        "apiVersion: corral.dev/v1alpha1
kind: PipelineRun
metadata: {{name: {name}}}
spec:
  pipelineSpec:
    steps:
      - name: make
        outputs: [out]
        task: {{command: [sh, -c, 'echo made > $CORRAL_OUTPUT_OUT/f'], resources: {{cpu: 10m, memory: 16Mi}}}}
"
    )
}

fn phase_of_make(c: &Cluster, name: &str) -> Option<StepPhase> {
    let run = c.pipeline_run("default", name).ok().flatten()?;
    let status = run.status?;
    status
        .phase
        .is_finished()
        .then(|| status.steps.get("make").map(|s| s.phase))
        .flatten()
}

/// A minute of passes: the artifacts are looked over at most once a minute.
fn a_minute(h: &mut Harness, c: &mut Cluster) -> Vec<String> {
    (0..61).flat_map(|_| h.tick(c).artifacts_removed).collect()
}

pub(super) fn a_deleted_runs_artifacts_go_once_nothing_reuses_them() {
    let (mut h, mut c) = Harness::new(WAITS, 33800, "artifacts: {retentionSeconds: 0}\n");
    c.submit(&run("r1"), "default", h.now).expect("submit r1");
    h.until(&mut c, "r1 ended", |c| phase_of_make(c, "r1").is_some());
    assert_eq!(phase_of_make(&c, "r1"), Some(StepPhase::Succeeded));
    c.submit(&run("r2"), "default", h.now).expect("submit r2");
    h.until(&mut c, "r2 ended", |c| phase_of_make(c, "r2").is_some());
    assert_eq!(
        phase_of_make(&c, "r2"),
        Some(StepPhase::Cached),
        "r2 reuses r1's result"
    );
    let data = h.path("data");
    let r1 = data.join("artifacts/default/r1");
    let made = r1.join("make/out/f");
    assert!(made.exists(), "{}", made.display());
    // r1 deleted: r2 still reads its output, which stays.
    c.delete_pipeline_run("default", "r1", h.now)
        .expect("delete r1");
    let removed = a_minute(&mut h, &mut c);
    assert!(removed.is_empty(), "{removed:?}");
    assert!(made.exists(), "r1's output went while r2 reuses it");
    // r2 deleted too: nothing holds it any more.
    c.delete_pipeline_run("default", "r2", h.now)
        .expect("delete r2");
    let removed = a_minute(&mut h, &mut c);
    assert_eq!(removed, [r1.join("make/out").to_string_lossy().to_string()]);
    assert!(!Path::new(&r1).exists(), "r1's directory is left");
    // Its cache entry went with it: the same step runs again.
    c.submit(&run("r3"), "default", h.now).expect("submit r3");
    h.until(&mut c, "r3 ended", |c| phase_of_make(c, "r3").is_some());
    assert_eq!(phase_of_make(&c, "r3"), Some(StepPhase::Succeeded));
    // A run that exists keeps its own.
    let removed = a_minute(&mut h, &mut c);
    assert!(removed.is_empty(), "{removed:?}");
    assert!(data.join("artifacts/default/r3/make/out/f").exists());
}

/// A deleted job's output directory stays for `artifacts.jobOutputRetentionSeconds` (here 2
/// minutes), so that what it wrote can still be copied out, then goes.
pub(super) fn a_deleted_jobs_output_stays_for_its_retention() {
    let (mut h, mut c) = Harness::new(
        WAITS,
        33850,
        "artifacts: {jobOutputRetentionSeconds: 120}\n",
    );
    c.submit(
        &super::job("writer", 1, "", "echo trained > $CORRAL_OUTPUT_DIR/model"),
        "default",
        h.now,
    )
    .expect("submit");
    h.until(&mut c, "writer ended", |c| {
        crate::common::cluster::state(c, "writer").is_some_and(|s| s.is_finished())
    });
    let jobs = h.path("data").join("artifacts/default/.jobs");
    let outputs = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(&jobs)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    let [output] = &outputs()[..] else {
        panic!("one output directory: {:?}", outputs());
    };
    let output = output.clone();
    assert_eq!(
        std::fs::read_to_string(output.join("model"))
            .expect("model")
            .trim(),
        "trained"
    );
    // Written 3 minutes before its job is deleted: the retention counts from the delete.
    for _ in 0..3 {
        let removed = a_minute(&mut h, &mut c);
        assert!(removed.is_empty(), "a live job's output went: {removed:?}");
    }
    c.delete("default", "writer", h.now).expect("delete");
    h.until(&mut c, "writer gone", |c| {
        crate::common::cluster::state(c, "writer").is_none()
    });
    // Within its retention it stays, though its job is gone.
    let removed = a_minute(&mut h, &mut c);
    assert!(removed.is_empty(), "{removed:?}");
    assert!(
        output.join("model").exists(),
        "the output went with its job"
    );
    // Past it, it goes.
    let removed: Vec<String> = (0..2).flat_map(|_| a_minute(&mut h, &mut c)).collect();
    assert_eq!(removed, [output.to_string_lossy().to_string()]);
    assert!(!output.exists());
}
