//! `corral plan --config` and the embedded cluster decide the same: the repository's
//! examples, submitted to a cluster opened with `examples/cluster.yaml` on a node of eight
//! (fake) H100s, are admitted to the same pool, nodes and GPU indices as `corral plan`
//! places them, the same jobs wait, and the same files are refused. The examples are
//! those of `examples/` and its directories, their commands made harmless (see
//! [`harmless`]), plus a second GPU sweep that has to wait.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use corral_cli::plan::{PlanArgs, decide};
use corral_local::config::ClusterFileConfig;
use corral_local::executor::ShimCommand;
use corral_local::{Cluster, ClusterConfig};
use jiff::Timestamp;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The example jobs (every example but the cluster's configuration), by path: examples/
/// and its directories. Jobs whose Python requirements are a file of their code snapshot
/// are left out: they are submitted with `--code` (tests/frameworks.rs runs them), and this
/// test submits without a snapshot; so are pipelines and their runs.
fn example_files() -> Vec<PathBuf> {
    let yaml_in = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .expect("examples/")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect()
    };
    let examples = repo().join("examples");
    let mut files = yaml_in(&examples);
    for entry in std::fs::read_dir(&examples).expect("examples/") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files.extend(yaml_in(&path));
        }
    }
    files.retain(|p| {
        p.file_name().is_some_and(|n| n != "cluster.yaml")
            && !std::fs::read_to_string(p)
                .expect("example")
                .contains("requirementsFile:")
            // A pipeline run's steps are planned as they start, not by `corral plan`; a
            // stored Pipeline (`kind: Pipeline`, as the runs' prefix) runs nothing itself.
            && !std::fs::read_to_string(p)
                .expect("example")
                .contains("kind: Pipeline")
    });
    files.sort();
    files
}

/// Every `command` in `v` made `sleep 30`, without `args` or `workingDir`: what this test
/// compares is the admission, and a command this machine lacks (`torchrun`, `mpirun`) or a
/// working directory it does not have would fail the start in the same tick and give the
/// admission back before it is compared.
fn harmless(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            map.remove("args");
            map.remove("workingDir");
            if map.get("command").is_some_and(serde_json::Value::is_array) {
                map.insert("command".into(), serde_json::json!(["sleep", "30"]));
            }
            map.values_mut().for_each(harmless);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(harmless),
        _ => {}
    }
}

/// The example `f` (one document) with [`harmless`] commands, written as JSON into `dir`:
/// its path there, its text and the namespace its job names (else `default`).
fn prepared(f: &Path, dir: &Path) -> (PathBuf, String, String) {
    let text = std::fs::read_to_string(f).expect("example");
    let mut doc: serde_json::Value = serde_saphyr::from_str(&text).expect("one YAML document");
    harmless(&mut doc);
    let ns = doc["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    let name = f
        .strip_prefix(repo().join("examples"))
        .expect("under examples/")
        .display()
        .to_string()
        .replace('/', "_");
    let copy = dir.join(format!("{name}.json"));
    let text = doc.to_string();
    std::fs::write(&copy, &text).expect("write the copy");
    (copy, text, ns)
}

fn plan(config: &Path, files: &[PathBuf]) -> Result<corral_cli::plan::Planned, String> {
    let files: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    decide(&PlanArgs {
        files: &files,
        config: Some(config.to_path_buf()),
        nodes: &[],
        default_nodes: 2,
        node_cpu: 128,
        node_memory_gib: 1024,
    })
}

/// (pool, GPU type, [(replica, node, GPU indices)]) of an admission.
type Placed = (String, Option<String>, Vec<(String, String, Vec<u32>)>);

fn placed(
    pool: &str,
    gpu_type: &Option<String>,
    placements: &[corral_core::sched::ReplicaPlacement],
) -> Placed {
    let mut p: Vec<(String, String, Vec<u32>)> = placements
        .iter()
        .map(|p| {
            (
                format!("{}-{}", p.role, p.index),
                p.node.clone(),
                p.gpu_indices.clone(),
            )
        })
        .collect();
    p.sort();
    (pool.to_string(), gpu_type.clone(), p)
}

#[test]
fn plan_admits_what_the_embedded_cluster_admits_on_the_examples() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The example cluster on one node with eight H100s; images run as host commands, so
    // nothing is pulled (the commands fail after the admission, which is all this compares).
    let config_text = format!(
        "{}\n---\nkind: CorralConfig\nports: {{min: 32300, max: 32399}}\ngracePeriodSeconds: 1\n\
         containers: {{runtime: none, withoutRuntime: host}}\n\
         node: {{name: plan-node, gpus: 8, gpuType: NVIDIA-H100-80GB-HBM3, cpu: '256', memory: 2Ti}}\n",
        std::fs::read_to_string(repo().join("examples/cluster.yaml")).expect("cluster.yaml")
    );
    let config_path = dir.path().join("corral.yaml");
    std::fs::write(&config_path, &config_text).expect("write corral.yaml");

    let mut config = ClusterConfig::new(dir.path().join("data"));
    config.file = ClusterFileConfig::parse(&config_text).expect("config");
    config.shim = Some(ShimCommand {
        program: PathBuf::from(env!("CARGO_BIN_EXE_corral")),
        args_prefix: vec!["shim".into()],
    });
    let mut now = Timestamp::from_second(1_800_000_000).expect("time");
    let (mut cluster, _) = Cluster::open(config, now).expect("open");

    // Every file goes to both; a file one refuses, the other refuses too. Each file is
    // submitted a millisecond after the last, as plan orders them.
    let mut accepted = Vec::new();
    let mut submitted = Vec::new();
    let mut inputs: Vec<(PathBuf, String, String)> = example_files()
        .iter()
        .map(|f| prepared(f, dir.path()))
        .collect();
    // A second sweep of eight GPUs, which must wait for the first's: the examples' other
    // jobs are CPU-only and all fit.
    let (_, sweep, ns) = prepared(&repo().join("examples/generic.yaml"), dir.path());
    let again = sweep.replacen("\"name\":\"lr-sweep\"", "\"name\":\"lr-sweep-again\"", 1);
    assert_ne!(again, sweep, "generic.yaml's job is lr-sweep");
    let again_path = dir.path().join("lr-sweep-again.json");
    std::fs::write(&again_path, &again).expect("write");
    inputs.push((again_path, again, ns));
    for (f, text, ns) in inputs {
        now = now
            .checked_add(jiff::SignedDuration::from_millis(1))
            .expect("time");
        let alone = plan(&config_path, std::slice::from_ref(&f));
        match cluster.submit(&text, &ns, now) {
            Ok(results) => {
                assert!(
                    alone.is_ok(),
                    "{}: plan refused what up accepted: {alone:?}",
                    f.display()
                );
                for r in results {
                    // A served model submitted again (canary.yaml after servedmodel.yaml)
                    // is the same model, revised.
                    let entry = (r.namespace, r.name, r.kind);
                    if !submitted.contains(&entry) {
                        submitted.push(entry);
                    }
                }
                accepted.push(f);
            }
            // Refused by up: plan fails on the file, or its plane refuses the job in the
            // same words (a job this node can never hold: its field and reason).
            Err(e) => {
                let up = e.to_string();
                let same_words = alone.as_ref().is_ok_and(|p| {
                    !p.refused.is_empty()
                        && p.refused.iter().all(|r| {
                            r.split_once(": ")
                                .is_some_and(|(_, words)| up.contains(words))
                        })
                });
                assert!(
                    alone.is_err() || same_words,
                    "{}: up refused ({up}) what plan accepted: {:?}",
                    f.display(),
                    alone.map(|p| p.refused)
                );
            }
        }
    }
    assert!(accepted.len() >= 3, "most examples run here: {accepted:?}");

    let planned = plan(&config_path, &accepted).expect("plan");
    now = now
        .checked_add(jiff::SignedDuration::from_secs(1))
        .expect("time");
    cluster.tick(now).expect("tick");

    let mut admitted = 0;
    for (key, name, held) in &planned.jobs {
        let (ns, _) = key.split_once('/').expect("key");
        let d = cluster
            .describe(ns, name)
            .expect("describe")
            .expect("the job exists");
        let up = d
            .admission
            .as_ref()
            .map(|a| placed(&a.pool, &a.gpu_type, &a.placements));
        let plan = held.as_ref().map(|h| {
            placed(
                &h.admission.pool,
                &h.admission.gpu_type,
                &h.admission.placements,
            )
        });
        assert_eq!(plan, up, "{key}: plan and up disagree");
        if plan.is_some() {
            admitted += 1;
        } else {
            assert_eq!(
                planned.reasons.get(key),
                d.pending_reason.as_ref(),
                "{key}: the same reason"
            );
        }
    }
    assert!(admitted >= 1, "something is admitted: {:?}", planned.jobs);
    assert!(
        admitted < planned.jobs.len(),
        "and something waits (eight GPUs do not hold them all)"
    );

    // Leave no process behind.
    for (ns, name, kind) in &submitted {
        match kind.as_deref() {
            Some("ServedModel") => cluster.delete_served_model(ns, name, now),
            _ => cluster.delete(ns, name, now),
        }
        .expect("delete");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cluster.list(None).expect("list").is_empty() {
        assert!(Instant::now() < deadline, "jobs are removed after delete");
        now = now
            .checked_add(jiff::SignedDuration::from_secs(1))
            .expect("time");
        cluster.tick(now).expect("tick");
        std::thread::sleep(Duration::from_millis(50));
    }
}
