//! The control plane kept between passes while this replica leads, fed what changed, as the
//! embedded cluster keeps its own: a pass costs what changed, not how many jobs exist.
//!
//! Each pass compares every job and its pods with what the last pass saw (resourceVersions:
//! a string compare each) and hands the plane only the differences: a new job (`submit`, or
//! by name when it finished for good), a pod's new phase (`observe`), a pod gone
//! (`forget_replica`), a start the kubelet cannot make (`start_failed`), `suspend` set or
//! cleared, a deletion, a launch refused for good. What the API server holds stays the
//! truth: the plane is rebuilt from it ([`ControlPlane::restore`], as every pass did
//! before) whenever the feed cannot say what changed ([`Rebuild`]): the first pass of a
//! leadership term, a write of the last pass that did not land as planned, the cluster's
//! nodes, pools, queues, priority classes or the room other pods take changed, a job's
//! spec changed (beyond `suspend`), or a job vanished that the plane cannot let go by itself
//! ([`ControlPlane::vanished`]: one holding an admission or not finished).

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};

use jiff::Timestamp;

use corral_api::{JobPriorityClass, Queue};
use corral_core::control::ControlPlane;
use corral_core::lifecycle::{Incarnation, ReplicaId};
use corral_core::sched::ClusterSnapshot;

use super::observe_jobs::ObservedJob;
use crate::apply::ApplyReport;
use crate::observe::{self, World};

/// Why a pass rebuilt the plane from the API server instead of feeding it what changed
/// (the label of `corral_plane_rebuilds_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rebuild {
    /// The first pass of this leadership term.
    Start,
    /// A planner that keeps no plane (`--rebuild-each-pass`, one-shot passes).
    EachPass,
    /// A write of the last pass failed, was backed off or abandoned: the API server may
    /// hold something else than the plane decided.
    Unapplied,
    /// Nodes, node pools, queues, priority classes or the room other pods take changed.
    Cluster,
    /// A job changed in a way the feed does not carry (its spec beyond `suspend`, a new
    /// job already holding an admission or pods, one the plane refuses as new).
    Job,
    /// A job that held an admission or had replicas left the API server.
    Vanished,
}

impl Rebuild {
    pub fn as_str(self) -> &'static str {
        match self {
            Rebuild::Start => "start",
            Rebuild::EachPass => "each_pass",
            Rebuild::Unapplied => "unapplied",
            Rebuild::Cluster => "cluster",
            Rebuild::Job => "job",
            Rebuild::Vanished => "vanished",
        }
    }
}

/// What the last pass saw of one pod: its resourceVersion's [`digest`] and the replica
/// incarnation it stands for.
type SeenPod = (u64, Option<(ReplicaId, Incarnation)>);

/// A value as one number, for telling whether it changed.
fn digest<T: Hash + ?Sized>(v: &T) -> u64 {
    let mut h = DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

/// What the last pass saw of one job.
#[derive(Clone, Debug, Default)]
pub(super) struct Seen {
    /// Where its key lies in [`SeenJobs`]' buffer: (start, length).
    key: (u32, u32),
    /// Hashes ([`digest`]) of its uid and resourceVersion, not copies: a long history of
    /// small strings kept for the life of the plane would pin the allocator's pages.
    uid: u64,
    resource_version: u64,
    generation: Option<i64>,
    /// A hash of the spec with `runPolicy.suspend` cleared: a change the feed cannot carry.
    spec: u64,
    suspend: bool,
    deleting: bool,
    rejection: u64,
    /// Whether the plane holds it (a job whose templates do not read is left out of it).
    in_plane: bool,
    /// Its pods' names and resourceVersions, in one number ([`pods_fingerprint`]).
    pods_fingerprint: u64,
    /// Its pods by name, sorted: resourceVersion and the replica incarnation each stands
    /// for. Only of a job the plane holds in full: of a retired one (most of a long
    /// history) nothing but a deletion concerns the plane.
    pods: Vec<(String, SeenPod)>,
}

/// The names and resourceVersions of a job's pods as one number, whatever their order.
fn pods_fingerprint(o: &ObservedJob<'_>) -> u64 {
    o.pods.iter().fold(o.pods.len() as u64, |acc, p| {
        acc.wrapping_add(digest(&(&p.metadata.name, &p.metadata.resource_version)))
    })
}

fn spec_hash(o: &ObservedJob<'_>) -> u64 {
    let mut spec = o.job.spec.clone();
    spec.run_policy.suspend = false;
    digest(&serde_json::to_vec(&spec).unwrap_or_default())
}

fn rejection_digest(o: &ObservedJob<'_>) -> u64 {
    digest(
        &o.job
            .metadata
            .annotations
            .get(crate::consts::LAUNCH_REJECTED_ANNOTATION),
    )
}

impl Seen {
    /// `detail`: the plane holds the job in full (not retired), so its pods are kept one by
    /// one.
    pub(super) fn of(
        o: &ObservedJob<'_>,
        in_plane: bool,
        detail: bool,
        earlier: Option<&Seen>,
    ) -> Seen {
        // The spec's hash is worked out again only when its generation moved.
        let spec = match earlier {
            Some(s) if s.generation == o.job.metadata.generation && s.generation.is_some() => {
                s.spec
            }
            _ => spec_hash(o),
        };
        Seen {
            key: (0, 0),
            uid: digest(&o.job.metadata.uid),
            resource_version: digest(&o.job.metadata.resource_version),
            generation: o.job.metadata.generation,
            spec,
            suspend: o.job.spec.run_policy.suspend,
            deleting: o.deleting,
            rejection: rejection_digest(o),
            in_plane,
            pods_fingerprint: pods_fingerprint(o),
            pods: if detail {
                let mut pods: Vec<(String, SeenPod)> = o
                    .pods
                    .iter()
                    .filter_map(|p| {
                        Some((
                            p.metadata.name.clone()?,
                            (digest(&p.metadata.resource_version), observe::replica_of(p)),
                        ))
                    })
                    .collect();
                pods.sort_by(|a, b| a.0.cmp(&b.0));
                pods.shrink_to_fit();
                pods
            } else {
                Vec::new()
            },
        }
    }

    fn pod(&self, name: &str) -> Option<&SeenPod> {
        let i = self
            .pods
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()?;
        self.pods.get(i).map(|(_, p)| p)
    }
}

/// What the cluster looked like to the plane when it was built: a change rebuilds it.
#[derive(Debug)]
pub(super) struct ClusterInputs {
    pub snapshot: ClusterSnapshot,
    pub queues: Vec<Queue>,
    pub classes: Vec<JobPriorityClass>,
}

impl ClusterInputs {
    pub(super) fn of(snapshot: &ClusterSnapshot, world: &World) -> Self {
        ClusterInputs {
            snapshot: snapshot.clone(),
            queues: world.queues.clone(),
            classes: world.classes.clone(),
        }
    }

    /// Whether the cluster is still the one the plane was built for (compared, not
    /// copied: a pass copies nothing of an unchanged cluster).
    pub(super) fn unchanged(&self, snapshot: &ClusterSnapshot, world: &World) -> bool {
        self.snapshot == *snapshot && self.queues == world.queues && self.classes == world.classes
    }
}

/// What the last pass saw, by job, found by the hash of the job's key. The keys are packed
/// in one buffer: a long history of small strings kept for the life of the plane would pin
/// the allocator's pages (the operator's resident memory after 2,000 jobs).
#[derive(Default)]
pub(super) struct SeenJobs {
    by_hash: HashMap<u64, Seen>,
    keys: String,
    /// Bytes of `keys` no entry uses any more: packed again once they are half of it.
    garbage: usize,
}

impl SeenJobs {
    fn key_of(&self, s: &Seen) -> &str {
        let (start, len) = (s.key.0 as usize, s.key.1 as usize);
        self.keys.get(start..start + len).unwrap_or_default()
    }

    pub(super) fn get(&self, key: &str) -> Option<&Seen> {
        let s = self.by_hash.get(&digest(key))?;
        (self.key_of(s) == key).then_some(s)
    }

    /// Records what was seen of `key`; `false` when another key has the same hash (then
    /// nothing is recorded).
    pub(super) fn insert(&mut self, key: &str, mut seen: Seen) -> bool {
        let h = digest(key);
        match self.by_hash.get(&h) {
            Some(old) if self.key_of(old) == key => seen.key = old.key,
            Some(_) => return false,
            None => {
                let start = u32::try_from(self.keys.len()).unwrap_or(u32::MAX);
                let len = u32::try_from(key.len()).unwrap_or(u32::MAX);
                self.keys.push_str(key);
                seen.key = (start, len);
            }
        }
        self.by_hash.insert(h, seen);
        true
    }

    /// Takes out every job whose key's hash is not in `present`; returns their keys.
    fn take_absent(&mut self, present: &HashSet<u64>) -> Vec<String> {
        let gone: Vec<u64> = self
            .by_hash
            .keys()
            .filter(|h| !present.contains(h))
            .copied()
            .collect();
        let mut out = Vec::with_capacity(gone.len());
        for h in gone {
            if let Some(s) = self.by_hash.remove(&h) {
                self.garbage += s.key.1 as usize;
                out.push(self.key_of(&s).to_string());
            }
        }
        if self.garbage > self.keys.len() / 2 {
            self.pack();
        }
        out
    }

    fn pack(&mut self) {
        let mut keys = String::with_capacity(self.keys.len() - self.garbage.min(self.keys.len()));
        for s in self.by_hash.values_mut() {
            let (start, len) = (s.key.0 as usize, s.key.1 as usize);
            let key = self.keys.get(start..start + len).unwrap_or_default();
            s.key = (u32::try_from(keys.len()).unwrap_or(u32::MAX), s.key.1);
            keys.push_str(key);
        }
        self.keys = keys;
        self.garbage = 0;
    }
}

/// The plane and what it was fed.
pub(super) struct Kept {
    pub plane: ControlPlane,
    pub cluster: ClusterInputs,
    pub seen: SeenJobs,
}

impl Kept {
    /// A plane just restored from the world, and what it was restored from.
    pub(super) fn new(
        plane: ControlPlane,
        cluster: ClusterInputs,
        observed: &[ObservedJob<'_>],
    ) -> Kept {
        let mut seen = SeenJobs::default();
        for o in observed {
            let detail = plane.job(&o.key).is_some();
            let in_plane = o.retired || detail;
            // Two keys of one 64-bit hash (vanishingly rare): the second is not recorded,
            // and the next pass rebuilds.
            let _ = seen.insert(&o.key, Seen::of(o, in_plane, detail, None));
        }
        Kept {
            plane,
            cluster,
            seen,
        }
    }

    /// Hands the plane what changed since the last pass, or says why it cannot.
    pub(super) fn feed(
        &mut self,
        observed: &[ObservedJob<'_>],
        now: Timestamp,
    ) -> Result<(), Rebuild> {
        let mut present = HashSet::with_capacity(observed.len());
        for o in observed {
            present.insert(digest(o.key.as_str()));
            let earlier = self.seen.get(&o.key);
            let unchanged = earlier.is_some_and(|s| {
                s.resource_version == digest(&o.job.metadata.resource_version)
                    && s.pods_fingerprint == pods_fingerprint(o)
            });
            if unchanged {
                continue;
            }
            let in_plane = match earlier.filter(|s| s.in_plane) {
                None => self.take_new(o, now)?,
                Some(s) => {
                    let s = s.clone();
                    self.take_change(o, &s)?;
                    true
                }
            };
            let detail = self.plane.job(&o.key).is_some();
            let seen = Seen::of(o, in_plane, detail, self.seen.get(&o.key));
            if !self.seen.insert(&o.key, seen) {
                return Err(Rebuild::Job);
            }
        }
        // Jobs no longer stored: the plane says whether it can let them go by itself.
        for key in self.seen.take_absent(&present) {
            if !self.plane.vanished(&key) {
                return Err(Rebuild::Vanished);
            }
        }
        Ok(())
    }

    /// A job the plane does not hold yet.
    fn take_new(&mut self, o: &ObservedJob<'_>, now: Timestamp) -> Result<bool, Rebuild> {
        if o.retired {
            self.plane.restore_retired([o.key.clone()]);
            return Ok(true);
        }
        // Anything but a job that has only just been created is the restore's to read.
        if o.stored.is_some() || !o.pods.is_empty() || o.deleting || o.rejection.is_some() {
            return Err(Rebuild::Job);
        }
        let Some(restored) = o.restored(now) else {
            // Its templates do not read: left out of the plane and reported, as restored.
            return Ok(false);
        };
        if self.plane.job(&o.key).is_some() || self.plane.is_retired(&o.key) {
            return Err(Rebuild::Job);
        }
        self.plane
            .submit(restored.record)
            .map_err(|_| Rebuild::Job)?;
        Ok(true)
    }

    /// A job the plane holds, changed since the last pass.
    fn take_change(&mut self, o: &ObservedJob<'_>, s: &Seen) -> Result<(), Rebuild> {
        // Deleted and made again under its name between two passes: another job.
        if s.uid != digest(&o.job.metadata.uid) {
            return Err(Rebuild::Job);
        }
        if self.plane.is_retired(&o.key) {
            // Its name is all the plane keeps: only a deletion (above: `gone`) concerns it.
            return Ok(());
        }
        if self.plane.job(&o.key).is_none() {
            // Removed by the plane (deleted): its object goes next.
            return Ok(());
        }
        if s.resource_version != digest(&o.job.metadata.resource_version) {
            let spec_moved = s.generation.is_none() || s.generation != o.job.metadata.generation;
            if spec_moved && spec_hash(o) != s.spec {
                return Err(Rebuild::Job);
            }
            if o.job.spec.run_policy.suspend != s.suspend {
                // A finished job keeps its state whatever its spec says, as restored.
                let _ = self
                    .plane
                    .set_suspend(&o.key, o.job.spec.run_policy.suspend);
            }
            if o.deleting && !s.deleting {
                let _ = self.plane.delete(&o.key);
            }
            if rejection_digest(o) != s.rejection
                && let Some(r) = o.rejection.clone()
            {
                self.plane.launch_rejected(&o.key, r);
            }
        }
        // Pods: a new phase, a start the kubelet cannot make, a pod gone.
        for p in &o.pods {
            let Some(name) = p.metadata.name.as_ref() else {
                continue;
            };
            let before = s.pod(name);
            if before.is_some_and(|(rv, _)| *rv == digest(&p.metadata.resource_version)) {
                continue;
            }
            let now_stands_for = observe::replica_of(p);
            if let Some((_, Some((replica, incarnation)))) = before
                && now_stands_for != Some((*replica, *incarnation))
            {
                self.plane.forget_replica(&o.key, *replica, *incarnation);
            }
            if let Some(r) = observe::observe_pod(p) {
                self.plane.observe(&o.key, r);
            }
            if let Some(f) = observe::pod_start_failure(p) {
                self.plane.start_failed(&o.key, f);
            }
        }
        for (name, (_, stood_for)) in &s.pods {
            let still = o
                .pods
                .iter()
                .any(|p| p.metadata.name.as_deref() == Some(name.as_str()));
            if let (false, Some((replica, incarnation))) = (still, stood_for) {
                self.plane.forget_replica(&o.key, *replica, *incarnation);
            }
        }
        Ok(())
    }
}

/// Whether the API server holds what the last pass planned: anything it refused, backed
/// off or left undone makes the next pass rebuild the plane from what it holds.
pub fn applied_as_planned(report: &ApplyReport) -> bool {
    report.errors.is_empty()
        && report.backed_off == 0
        && report.abandoned == 0
        && report.rejected.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys stay readable as jobs come and go and the buffer is packed again.
    #[test]
    fn seen_jobs_keep_their_keys_through_packing() {
        let mut seen = SeenJobs::default();
        for k in ["ml/a", "ml/bb", "team/ccc"] {
            assert!(seen.insert(k, Seen::default()));
        }
        assert!(seen.insert("ml/a", Seen::default()), "again: the same key");
        let present: HashSet<u64> = ["ml/bb"].iter().map(|k| digest(*k)).collect();
        let mut gone = seen.take_absent(&present);
        gone.sort();
        assert_eq!(gone, ["ml/a", "team/ccc"]);
        assert_eq!(seen.keys, "ml/bb", "packed once half of it was unused");
        assert!(seen.get("ml/bb").is_some());
        assert!(seen.get("ml/a").is_none());
        assert!(seen.insert("ml/dddd", Seen::default()));
        assert!(seen.get("ml/dddd").is_some() && seen.get("ml/bb").is_some());
    }
}
