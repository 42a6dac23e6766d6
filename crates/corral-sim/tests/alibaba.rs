//! The Alibaba GPU trace (cluster-trace-gpu-v2023) and the fragmentation experiment.

mod common;

use std::path::PathBuf;

use corral_sim::fragmentation::{FragPolicy, run};
use corral_sim::trace::alibaba::{parse_nodes, parse_pods};

const NODES: &str = "sn,cpu_milli,memory_mib,gpu,model\n\
b,16000,1000,4,V100\n\
a,8000,1000,2,T4\n";

/// p0: half a GPU of any type; p1: fits no node (skipped); p2: 4 V100; p3: 2 T4.
const PODS: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
p0,1000,10,1,500,,BE,Running,0,9,0\n\
p1,999999,10,1,1000,,BE,Running,1,9,1\n\
p2,1000,10,4,1000,V100,LS,Running,2,9,2\n\
p3,1000,10,2,1000,T4,LS,Running,3,9,3\n";

#[test]
fn hand_checked_fragmentation() {
    let nodes = parse_nodes(NODES, "n.csv").unwrap();
    let pods = parse_pods(PODS, "p.csv", None).unwrap();
    // First-fit puts p0 on b (listed first); p2 then finds 3 free V100s: stop. b's 3 free
    // GPUs fit neither p2 (4 GPUs) nor p3 (T4): unallocatable; a's 2 fit p3.
    let r = run(&nodes, &pods, FragPolicy::FirstFit).unwrap();
    assert_eq!(r.pods_placed, 1);
    assert_eq!(r.pods_skipped_never_fit, 1);
    assert_eq!(r.first_unplaceable_pod.as_deref(), Some("p2"));
    assert_eq!(r.first_unplaceable_index, Some(2));
    assert_eq!((r.gpus_total, r.gpus_allocated, r.gpus_free), (6, 1, 5));
    assert!((r.gpus_allocated_pct - 100.0 / 6.0).abs() < 1e-9);
    assert_eq!(r.gpus_free_unallocatable, 3);
    assert_eq!(r.fractional_pods_rounded_up, 1);
    // Best-fit puts p0 on a (fewest free GPUs), p2 on b; p3 finds 1 free T4: stop, and
    // that GPU fits no remaining pod.
    let r = run(&nodes, &pods, FragPolicy::BestFit).unwrap();
    assert_eq!(r.pods_placed, 2);
    assert_eq!(r.first_unplaceable_pod.as_deref(), Some("p3"));
    assert_eq!((r.gpus_allocated, r.gpus_free), (5, 1));
    assert_eq!(r.gpus_free_unallocatable, 1);
    // Corral's scheduler: a valid placement of the same pods (checked against CPU, memory,
    // GPUs and GPU type by the experiment), stopping at p2 or p3.
    let r = run(&nodes, &pods, FragPolicy::Corral).unwrap();
    assert!(matches!(
        r.first_unplaceable_pod.as_deref(),
        Some("p2" | "p3")
    ));
    assert_eq!(r.gpus_allocated + r.gpus_free, 6);
    // Everything fits when p2 asks for 3 GPUs and p3 for 1: no failure.
    let fits = PODS
        .replace("p2,1000,10,4,", "p2,1000,10,3,")
        .replace("p3,1000,10,2,", "p3,1000,10,1,");
    let pods = parse_pods(&fits, "p.csv", None).unwrap();
    for p in [
        FragPolicy::FirstFit,
        FragPolicy::BestFit,
        FragPolicy::Corral,
    ] {
        let r = run(&nodes, &pods, p).unwrap();
        assert_eq!(r.first_unplaceable_pod, None, "{p:?}");
        assert_eq!((r.pods_placed, r.pods_skipped_never_fit), (3, 1), "{p:?}");
        assert_eq!(
            (r.gpus_allocated, r.gpus_free_unallocatable),
            (5, 0),
            "{p:?}"
        );
    }
}

fn trace_dir() -> Option<PathBuf> {
    common::shared_trace("alibaba-gpu-v2023")
}

#[test]
fn real_trace_parses() {
    let Some(d) = trace_dir() else {
        return;
    };
    let read = |f: &str| std::fs::read_to_string(d.join(f)).unwrap();
    let nodes = parse_nodes(&read("openb_node_list_gpu_node.csv"), "nodes").unwrap();
    assert_eq!(nodes.len(), 1213);
    assert_eq!(nodes.iter().map(|n| n.gpus).sum::<u32>(), 6212);
    for (f, n) in [
        ("openb_pod_list_default.csv", 8152),
        ("openb_pod_list_gpuspec33.csv", 8152),
        ("openb_pod_list_multigpu50.csv", 9061),
    ] {
        let pods = parse_pods(&read(f), f, None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pods.len(), n, "{f}");
        for p in [
            FragPolicy::FirstFit,
            FragPolicy::BestFit,
            FragPolicy::Corral,
        ] {
            let r = run(&nodes, &pods, p).unwrap_or_else(|e| panic!("{f} {p:?}: {e}"));
            assert!(
                r.pods_placed > 0 && r.gpus_free_unallocatable <= r.gpus_free,
                "{f} {p:?}"
            );
        }
    }
}
