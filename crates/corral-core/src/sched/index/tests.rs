//! Placement by how a node is left.

use std::collections::BTreeMap;

use super::{ClusterIndex, NodeFilter, PodRequest};
use crate::sched::model::{ClusterSnapshot, Node};

fn node(name: &str, cpu_milli: u64) -> Node {
    Node::new(name, Some("A".to_string()), 8, cpu_milli, 1 << 40)
}

/// Two nodes with the same free GPUs: the CPU-hungry replica goes where it leaves
/// enough CPU for the GPUs left, not to the first node in order.
#[test]
fn a_replica_does_not_strand_gpus_by_taking_their_cpu() {
    let snapshot = ClusterSnapshot {
        nodes: vec![node("poor", 32_000), node("rich", 96_000)],
        ..Default::default()
    };
    let index = ClusterIndex::new(&snapshot).expect("valid snapshot");
    let selector = BTreeMap::new();
    let filter = NodeFilter {
        selector: &selector,
        tolerations: &[],
    };
    let pod = PodRequest {
        cpu: 16_000,
        gpu: 1,
        ..Default::default()
    };
    let (n, fit) = index.find_node(0, &pod, None, &filter, 256).expect("fits");
    assert_eq!(index.nodes[n as usize].name, "rich");
    // 80 cores back 6 of the 7 GPUs left at 12 cores per GPU.
    assert_eq!(fit.stranded, 1);
    // On `poor`, 16 cores would back 4 of 7.
    let poor = index.fit(0, &pod, 8);
    assert_eq!(poor.stranded, 3);
}
