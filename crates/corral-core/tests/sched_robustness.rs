//! Snapshots with absurd values are handled, never a panic (found by the simulator).

use corral_core::sched::{ClusterSnapshot, Node, Scheduler, SchedulerConfig};

fn node(name: &str) -> Node {
    Node::new(name, Some("A100".into()), 8, u64::MAX, u64::MAX)
}

#[test]
fn huge_node_totals_do_not_overflow() {
    let snapshot = ClusterSnapshot {
        nodes: vec![node("a"), node("b"), node("c")],
        ..Default::default()
    };
    let mut s = Scheduler::new(&snapshot, SchedulerConfig::default()).expect("builds");
    let outcome = s.cycle(0);
    assert!(outcome.admitted.is_empty());
}
