//! The routing table: each served model's replicas, which of them are in rotation, how many
//! requests each carries, the split of new requests between its revisions (as the control
//! plane computed it), and the model's load as the autoscaler observes it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::Notify;

use crate::stats::Stats;

/// One replica the shell started, as the router should reach it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaTarget {
    /// The replica's name (`<model>-serving-<i>-worker-0`), for metrics and describe.
    pub name: String,
    pub addr: SocketAddr,
    /// The model's revision it runs (empty: the model has one).
    pub revision: String,
    /// Out of rotation for a scale-down: it gets no new request, and those under way on it
    /// end (its outstanding count is still kept, for the shell to see them end).
    pub draining: bool,
}

/// A served model as the router should serve it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelTarget {
    pub replicas: Vec<ReplicaTarget>,
    /// Percent of new requests per revision (summing to 100); empty: every replica alike.
    pub traffic: Vec<(String, u32)>,
    /// Readiness check: an HTTP GET of this path answering 2xx.
    pub readiness_path: String,
    pub probe_period: Duration,
    /// Failed probes in a row after which a ready replica leaves rotation.
    pub failure_threshold: u32,
    /// Request bodies above this are refused with 413.
    pub max_request_bytes: u64,
    /// Other names of revisions in a revision's URL (`latest`, `stable`), each with the
    /// revision it names now.
    pub aliases: Vec<(String, String)>,
}

/// One replica in the table.
#[derive(Debug)]
pub struct Replica {
    pub name: String,
    pub addr: SocketAddr,
    pub revision: Arc<str>,
    /// In rotation: the last probe passed and no request failed on it since.
    pub(crate) ready: AtomicBool,
    /// Probes failed in a row.
    pub(crate) failures: AtomicU32,
    /// Requests sent to it whose response has not ended.
    pub(crate) outstanding: AtomicU32,
    pub(crate) probing: AtomicBool,
    /// Gets no new request ([`ReplicaTarget::draining`]).
    pub(crate) draining: AtomicBool,
}

impl Replica {
    fn new(t: &ReplicaTarget) -> Self {
        Replica {
            name: t.name.clone(),
            addr: t.addr,
            revision: Arc::from(t.revision.as_str()),
            ready: AtomicBool::new(false),
            failures: AtomicU32::new(0),
            outstanding: AtomicU32::new(0),
            probing: AtomicBool::new(false),
            draining: AtomicBool::new(t.draining),
        }
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub fn outstanding(&self) -> u32 {
        self.outstanding.load(Ordering::Relaxed)
    }

    /// A request failed on it (connect error, 5xx): out of rotation until a probe passes.
    pub(crate) fn eject(&self) {
        self.ready.store(false, Ordering::Release);
    }
}

/// One served model in the table.
#[derive(Debug)]
pub struct Model {
    pub(crate) target: RwLock<ModelTarget>,
    pub(crate) replicas: RwLock<Vec<Arc<Replica>>>,
    /// Requests being answered or held (the autoscaler's observation).
    pub(crate) in_flight: AtomicU32,
    /// Requests that arrived since the load was last taken.
    pub(crate) arrived: AtomicU64,
    /// Woken when a replica enters rotation (held requests look again).
    pub(crate) became_ready: Notify,
    /// Spreads ties between equally loaded replicas.
    pub(crate) next: AtomicU32,
    /// Revisions with a share of new requests, each with its share's upper bound on a
    /// 0..100 scale (cumulative).
    pub(crate) split: RwLock<Vec<(Arc<str>, u32)>>,
    /// Counts the requests given a revision, for the split.
    pub(crate) slot: AtomicU64,
    /// Request counts and latencies by revision (kept while the model is served).
    pub(crate) stats: RwLock<BTreeMap<Arc<str>, Arc<Stats>>>,
}

/// Which replicas a pick looks at.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Within<'a> {
    /// Those of one revision.
    Revision(&'a str),
    /// Those of any revision with a share of new requests (or all, without a split).
    Routed,
}

fn cumulative(traffic: &[(String, u32)]) -> Vec<(Arc<str>, u32)> {
    let mut upto = 0;
    traffic
        .iter()
        .filter(|(_, p)| *p > 0)
        .map(|(r, p)| {
            upto += p;
            (Arc::from(r.as_str()), upto)
        })
        .collect()
}

impl Model {
    pub(crate) fn new(target: ModelTarget) -> Self {
        let replicas = target
            .replicas
            .iter()
            .map(|t| Arc::new(Replica::new(t)))
            .collect();
        Model {
            replicas: RwLock::new(replicas),
            in_flight: AtomicU32::new(0),
            arrived: AtomicU64::new(0),
            became_ready: Notify::new(),
            next: AtomicU32::new(0),
            split: RwLock::new(cumulative(&target.traffic)),
            slot: AtomicU64::new(0),
            stats: RwLock::new(BTreeMap::new()),
            target: RwLock::new(target),
        }
    }

    /// Takes the shell's view: replicas with the same name and address keep their state
    /// (readiness, outstanding requests); new ones start out of rotation until probed.
    pub(crate) fn update(&self, target: ModelTarget) {
        let mut replicas = self.replicas.write().unwrap_or_else(|e| e.into_inner());
        let kept: Vec<Arc<Replica>> = target
            .replicas
            .iter()
            .map(|t| {
                match replicas
                    .iter()
                    .find(|r| r.name == t.name && r.addr == t.addr && *r.revision == *t.revision)
                {
                    Some(r) => {
                        r.draining.store(t.draining, Ordering::Release);
                        r.clone()
                    }
                    None => Arc::new(Replica::new(t)),
                }
            })
            .collect();
        *replicas = kept;
        drop(replicas);
        *self.split.write().unwrap_or_else(|e| e.into_inner()) = cumulative(&target.traffic);
        *self.target.write().unwrap_or_else(|e| e.into_inner()) = target;
    }

    pub(crate) fn settings(&self) -> ModelTarget {
        self.target
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn replicas(&self) -> Vec<Arc<Replica>> {
        self.replicas
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The revision a new request goes to, by the split's weights: requests are counted
    /// and each count takes a slot of 100 in a fixed interleaved order, so that any 100
    /// requests in a row follow the percentages exactly. `None`: no split.
    pub(crate) fn choose_revision(&self) -> Option<Arc<str>> {
        let split = self.split.read().unwrap_or_else(|e| e.into_inner());
        let total = split.last()?.1;
        let n = self.slot.fetch_add(1, Ordering::Relaxed);
        // 61 is prime to 100: slot n % 100 -> a permutation of 0..100 that interleaves
        // each revision's slots over the cycle.
        let slot = u32::try_from((n % 100) * 61 % 100).unwrap_or(0) * total / 100;
        split
            .iter()
            .find(|(_, upto)| slot < *upto)
            .map(|(r, _)| r.clone())
    }

    /// The revision a pinned request names (`name`, or an alias of one): `None` when the
    /// model has no such revision with replicas or a share of requests.
    pub(crate) fn pinned_revision(&self, name: &str) -> Option<Arc<str>> {
        let target = self.target.read().unwrap_or_else(|e| e.into_inner());
        let name = target
            .aliases
            .iter()
            .find(|(alias, _)| alias == name)
            .map_or(name, |(_, revision)| revision.as_str());
        let served = target
            .replicas
            .iter()
            .any(|r| r.revision == name && !r.draining)
            || target.traffic.iter().any(|(r, p)| r == name && *p > 0);
        served.then(|| Arc::from(name))
    }

    /// What a pinned request for an unknown revision is told: the revisions it may name.
    pub(crate) fn revisions_named(&self) -> Vec<String> {
        let target = self.target.read().unwrap_or_else(|e| e.into_inner());
        let mut names: Vec<String> = target
            .replicas
            .iter()
            .map(|r| r.revision.clone())
            .chain(
                target
                    .traffic
                    .iter()
                    .filter(|(_, p)| *p > 0)
                    .map(|(r, _)| r.clone()),
            )
            .filter(|r| !r.is_empty())
            .collect();
        names.sort();
        names.dedup();
        names.extend(target.aliases.iter().map(|(a, _)| a.clone()));
        names
    }

    /// The stats of requests answered by `revision`.
    pub(crate) fn stats_of(&self, revision: &Arc<str>) -> Arc<Stats> {
        if let Some(s) = self
            .stats
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(revision)
        {
            return s.clone();
        }
        self.stats
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(revision.clone())
            .or_default()
            .clone()
    }

    /// The ready replica with the fewest outstanding requests among those `within` not yet
    /// `tried` (ties spread round-robin).
    pub(crate) fn pick(&self, within: Within<'_>, tried: &[SocketAddr]) -> Pick {
        let replicas = self.replicas.read().unwrap_or_else(|e| e.into_inner());
        let n = replicas.len();
        if n == 0 {
            return Pick::NoneReady;
        }
        let split = self.split.read().unwrap_or_else(|e| e.into_inner());
        let counts = |r: &Replica| match within {
            Within::Revision(name) => *r.revision == *name,
            Within::Routed => split.is_empty() || split.iter().any(|(s, _)| *s == r.revision),
        };
        let start = self.next.fetch_add(1, Ordering::Relaxed) as usize % n;
        let mut best: Option<&Arc<Replica>> = None;
        let mut any_ready = false;
        for i in 0..n {
            let r = &replicas[(start + i) % n];
            if !r.is_ready() || r.is_draining() || !counts(r) {
                continue;
            }
            any_ready = true;
            if tried.contains(&r.addr) {
                continue;
            }
            if best.is_none_or(|b| r.outstanding() < b.outstanding()) {
                best = Some(r);
            }
        }
        match best {
            Some(r) => Pick::Replica(r.clone()),
            None if any_ready => Pick::AllTried,
            None => Pick::NoneReady,
        }
    }

    /// The load since the last call: requests in flight now, and arrived since.
    pub(crate) fn take_load(&self) -> Load {
        Load {
            in_flight: self.in_flight.load(Ordering::Relaxed),
            arrived: self.arrived.swap(0, Ordering::Relaxed),
        }
    }
}

/// What [`Model::pick`] found.
pub(crate) enum Pick {
    Replica(Arc<Replica>),
    /// Ready replicas exist, and every one was tried for this request.
    AllTried,
    NoneReady,
}

/// A model's load as the autoscaler observes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Load {
    pub in_flight: u32,
    pub arrived: u64,
}
