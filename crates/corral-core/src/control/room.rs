//! Room on a node now. An admission is the scheduler's promise; the room is what the node
//! has free at this moment. They differ while a preempted job's replicas finish their grace
//! period, while pods are still terminating, or where another scheduler placed work. A gang
//! starts (embedded: its processes; Kubernetes: its pods are bound) only when every replica
//! fits in that room, all or nothing; otherwise it waits and the reason says what is short
//! where. The shell observes the room; this module decides, with the same words everywhere.

use std::collections::{BTreeMap, BTreeSet};

/// What a node has free now, as the shell observes it: its capacity less everything that
/// runs there, whoever's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Room {
    pub gpus: u64,
    /// The free GPU indices, where the shell knows them (the embedded shell does; on
    /// Kubernetes the device plugin picks them and only counts are known).
    pub gpu_indices: Option<BTreeSet<u32>>,
    pub cpu_milli: u64,
    pub memory_bytes: u64,
    pub extended: BTreeMap<String, u64>,
}

impl Room {
    /// A node whose only scarce resource is its GPUs (the embedded shell: CPU and memory
    /// are limited per replica, not reserved, so they never keep a start waiting).
    pub fn gpus_only(free: BTreeSet<u32>) -> Room {
        Room {
            gpus: free.len() as u64,
            gpu_indices: Some(free),
            cpu_milli: u64::MAX,
            memory_bytes: u64::MAX,
            extended: BTreeMap::new(),
        }
    }
}

/// What one replica of a gang takes on its node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Need {
    /// The replica, for the reason (`worker-0`).
    pub replica: String,
    pub node: String,
    /// The GPU indices its placement names (compared where the room knows indices).
    pub gpu_indices: Vec<u32>,
    pub gpus: u64,
    pub cpu_milli: u64,
    pub memory_bytes: u64,
    pub extended: BTreeMap<String, u64>,
}

/// Takes every need of a gang from `room` when all of them fit; otherwise takes nothing
/// and says what is short where (the first replica that does not fit).
pub fn take_gang(room: &mut BTreeMap<String, Room>, needs: &[Need]) -> Result<(), String> {
    let mut trial: BTreeMap<String, Room> = BTreeMap::new();
    for need in needs {
        let node = match trial.get_mut(&need.node) {
            Some(n) => n,
            None => {
                let Some(r) = room.get(&need.node) else {
                    return Err(format!(
                        "waiting for room: node {} of replica {} is not there now",
                        need.node, need.replica
                    ));
                };
                trial.entry(need.node.clone()).or_insert_with(|| r.clone())
            }
        };
        if let Some(short) = shortfall(node, need) {
            return Err(format!(
                "waiting for room on node {} for replica {}: {short} (a preempted job's replicas \
                 still stopping, pods still terminating, or work another scheduler placed there)",
                need.node, need.replica
            ));
        }
        take(node, need);
    }
    room.extend(trial);
    Ok(())
}

fn shortfall(room: &Room, need: &Need) -> Option<String> {
    if let Some(free) = &room.gpu_indices {
        let held: Vec<String> = need
            .gpu_indices
            .iter()
            .filter(|g| !free.contains(g))
            .map(u32::to_string)
            .collect();
        if !held.is_empty() {
            let s = if held.len() == 1 { "" } else { "s" };
            return Some(format!("GPU{s} {} still in use", held.join(",")));
        }
    }
    if room.gpus < need.gpus {
        return Some(format!("needs {} GPUs, {} free", need.gpus, room.gpus));
    }
    if room.cpu_milli < need.cpu_milli {
        return Some(format!(
            "needs {} CPU, {} free",
            milli_words(need.cpu_milli),
            milli_words(room.cpu_milli)
        ));
    }
    if room.memory_bytes < need.memory_bytes {
        return Some(format!(
            "needs {} MiB of memory, {} MiB free",
            need.memory_bytes >> 20,
            room.memory_bytes >> 20
        ));
    }
    need.extended.iter().find_map(|(k, v)| {
        let free = room.extended.get(k).copied().unwrap_or(0);
        (*v > free).then(|| format!("needs {v} {k}, {free} free"))
    })
}

fn take(room: &mut Room, need: &Need) {
    if let Some(free) = &mut room.gpu_indices {
        for g in &need.gpu_indices {
            free.remove(g);
        }
    }
    room.gpus = room.gpus.saturating_sub(need.gpus);
    room.cpu_milli = room.cpu_milli.saturating_sub(need.cpu_milli);
    room.memory_bytes = room.memory_bytes.saturating_sub(need.memory_bytes);
    for (k, v) in &need.extended {
        if let Some(h) = room.extended.get_mut(k) {
            *h = h.saturating_sub(*v);
        }
    }
}

fn milli_words(m: u64) -> String {
    if m.is_multiple_of(1000) {
        (m / 1000).to_string()
    } else {
        format!("{m}m")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn need(replica: &str, node: &str, gpus: &[u32]) -> Need {
        Need {
            replica: replica.into(),
            node: node.into(),
            gpu_indices: gpus.to_vec(),
            gpus: gpus.len() as u64,
            ..Need::default()
        }
    }

    #[test]
    fn a_gang_takes_all_or_nothing_and_names_the_held_gpus() {
        let mut room = BTreeMap::from([
            ("a".to_string(), Room::gpus_only(BTreeSet::from([0, 1, 2]))),
            ("b".to_string(), Room::gpus_only(BTreeSet::from([0]))),
        ]);
        let before = room.clone();
        let err = take_gang(
            &mut room,
            &[
                need("worker-0", "a", &[0, 1]),
                need("worker-1", "b", &[0, 1]),
            ],
        )
        .unwrap_err();
        assert!(
            err.contains("node b for replica worker-1: GPU 1 still in use"),
            "{err}"
        );
        assert_eq!(room, before, "nothing taken");
        take_gang(&mut room, &[need("worker-0", "a", &[0, 1])]).expect("fits");
        assert_eq!(room["a"].gpu_indices, Some(BTreeSet::from([2])));
        let err = take_gang(&mut room, &[need("worker-0", "a", &[1])]).unwrap_err();
        assert!(err.contains("GPU 1 still in use"), "{err}");
    }

    #[test]
    fn counts_cpu_memory_and_missing_nodes_are_named() {
        let mut room = BTreeMap::from([(
            "n".to_string(),
            Room {
                gpus: 2,
                cpu_milli: 4000,
                memory_bytes: 8 << 30,
                ..Room::default()
            },
        )]);
        let mut n = need("ps-0", "n", &[]);
        n.gpus = 3;
        assert!(
            take_gang(&mut room, &[n.clone()])
                .unwrap_err()
                .contains("needs 3 GPUs, 2 free")
        );
        n.gpus = 1;
        n.cpu_milli = 4500;
        assert!(
            take_gang(&mut room, &[n.clone()])
                .unwrap_err()
                .contains("needs 4500m CPU, 4 free")
        );
        n.cpu_milli = 1000;
        n.memory_bytes = 9 << 30;
        assert!(
            take_gang(&mut room, &[n.clone()])
                .unwrap_err()
                .contains("needs 9216 MiB of memory, 8192 MiB free")
        );
        n.node = "gone".into();
        assert!(
            take_gang(&mut room, &[n])
                .unwrap_err()
                .contains("node gone of replica ps-0 is not there")
        );
    }
}
