//! `corral plan --config` and the embedded cluster decide the same: the repository's
//! examples, submitted to a cluster opened with `examples/cluster.yaml` on a node of eight
//! (fake) H100s, are admitted to the same pool, nodes and GPU indices as `corral plan`
//! places them, the same jobs wait, and the same files are refused.

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

/// The example jobs (every example but the cluster's configuration), by file name.
fn example_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("examples"))
        .expect("examples/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter(|p| p.file_name().is_some_and(|n| n != "cluster.yaml"))
        .collect();
    files.sort();
    files
}

/// The namespace a file's jobs name (the examples name at most one), else `default`.
fn namespace_of(text: &str) -> String {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("namespace: "))
        .map_or_else(|| "default".to_string(), |n| n.trim().to_string())
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
    for f in example_files() {
        now = now
            .checked_add(jiff::SignedDuration::from_millis(1))
            .expect("time");
        let text = std::fs::read_to_string(&f).expect("example");
        let ns = namespace_of(&text);
        let alone = plan(&config_path, std::slice::from_ref(&f));
        match cluster.submit(&text, &ns, now) {
            Ok(results) => {
                assert!(
                    alone.is_ok(),
                    "{}: plan refused what up accepted: {alone:?}",
                    f.display()
                );
                for r in results {
                    submitted.push((r.namespace, r.name));
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
    for (ns, name) in &submitted {
        cluster.delete(ns, name, now).expect("delete");
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
