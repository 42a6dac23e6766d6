//! Why a job waits, in a structured form and in words a user understands, e.g.
//! "needs 8 GPUs of type A100 on one node; largest free block is 6 on node-3; queue team-a is
//! at its quota 16/16 and its cohort has nothing to lend".

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

// Why a running job was stopped, apart from why a job waits.
mod preemption;
pub use preemption::{PreemptionReason, job_as_seen_by};

/// [`ResourceShort::resource`] of GPUs.
pub const GPU: &str = "gpu";
/// [`ResourceShort::resource`] of CPU, counted in milli-CPUs.
pub const CPU: &str = "cpu";
/// [`ResourceShort::resource`] of memory, counted in bytes.
pub const MEMORY: &str = "memory";

/// What a pending job needs, for the first clause of its reason.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Needs {
    pub replicas: u64,
    /// GPUs per replica when all replicas need the same number.
    pub gpus_per_replica: Option<u32>,
    pub total_gpus: u64,
    /// Allowed GPU types; empty means any.
    pub gpu_types: Vec<String>,
    /// CPU and memory of the largest replica (shown for CPU-only jobs).
    pub cpu_milli: u64,
    pub memory_bytes: u64,
}

/// The resource a quota check failed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum QuotaResource {
    Gpu,
    Cpu,
    Memory,
}

/// A node that has room for the job but carries a taint the job does not tolerate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaintBlock {
    pub node: String,
    /// GPUs the node has for the job (free now, or in all for a job that never fits).
    pub free_gpus: u32,
    /// `key=value:Effect`, as the scheduler matches it.
    pub taint: String,
}

impl fmt::Display for TaintBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let room = if self.free_gpus == 0 {
            "room for a replica".to_string()
        } else {
            plural(u64::from(self.free_gpus), "GPU", "GPUs")
        };
        write!(
            f,
            "{} has {room} but taint {}, which the job does not tolerate",
            self.node, self.taint
        )
    }
}

/// How much of one resource a replica needs, and the most of it one node the job may use
/// has for it (free now, or in all for a job that never fits).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceShort {
    /// [`GPU`], [`CPU`] (milli-CPUs), [`MEMORY`] (bytes) or an extended resource's name.
    pub resource: String,
    pub needed: u64,
    pub most: u64,
    /// The node that has `most` (none when no node has any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl ResourceShort {
    fn short(&self) -> bool {
        self.most < self.needed
    }
}

/// Why no node has room for a replica: every resource the replica asks for (besides GPUs,
/// where those are counted apart) with the most one node has. The resources whose `most`
/// is below `needed` are what falls short; when none is, no node has them all at once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Shortfall {
    /// The replica's role, when the job has several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Whether the job's node selector or tolerations leave nodes of the pool out.
    #[serde(default)]
    pub narrowed: bool,
    pub resources: Vec<ResourceShort>,
}

impl Shortfall {
    fn who(&self) -> String {
        match &self.role {
            Some(r) => format!("a {r} replica"),
            None => "a replica".to_string(),
        }
    }

    fn may_use(&self) -> &'static str {
        if self.narrowed {
            " the job may use"
        } else {
            ""
        }
    }

    /// Free now: "no node with 8 free GPUs has 16 CPUs free (at most 4, on node-3)".
    fn write_free(&self, f: &mut fmt::Formatter<'_>, gpus: u32) -> fmt::Result {
        if let Some(role) = &self.role {
            write!(f, "for a {role} replica, ")?;
        }
        write!(f, "no node")?;
        if gpus > 0 {
            write!(
                f,
                " with {}",
                plural(u64::from(gpus), "free GPU", "free GPUs")
            )?;
        }
        if self.narrowed {
            write!(f, " that the job may use")?;
        }
        let short: Vec<&ResourceShort> = self.resources.iter().filter(|r| r.short()).collect();
        if short.is_empty() {
            let all: Vec<String> = self
                .resources
                .iter()
                .map(|r| resource_amount(&r.resource, r.needed))
                .collect();
            return write!(f, " has {} free at once", join_and(&all));
        }
        let clauses: Vec<String> = short
            .iter()
            .map(|r| {
                let most = match (&r.node, r.most) {
                    (Some(node), m) if m > 0 => {
                        format!("at most {}, on {node}", resource_bare(&r.resource, m))
                    }
                    _ => format!("all {} is taken", resource_noun(&r.resource)),
                };
                format!("{} free ({most})", resource_amount(&r.resource, r.needed))
            })
            .collect();
        write!(f, " has {}", clauses.join(" or "))
    }

    /// Even empty: "a replica needs 600 GiB memory but the largest node, node-0, has
    /// 512 GiB".
    fn write_total(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short: Vec<&ResourceShort> = self.resources.iter().filter(|r| r.short()).collect();
        if short.is_empty() {
            let all: Vec<String> = self
                .resources
                .iter()
                .map(|r| resource_amount(&r.resource, r.needed))
                .collect();
            return write!(
                f,
                "no node{} has {} at once, which {} needs",
                self.may_use(),
                join_and(&all),
                self.who()
            );
        }
        let clauses: Vec<String> = short
            .iter()
            .map(|r| {
                let largest = match (&r.node, r.most) {
                    (Some(node), m) if m > 0 => format!(
                        "the largest node{}, {node}, has {}",
                        self.may_use(),
                        resource_bare(&r.resource, m)
                    ),
                    _ => format!("no node{} has any", self.may_use()),
                };
                format!(
                    "{} needs {} but {largest}",
                    self.who(),
                    resource_amount(&r.resource, r.needed)
                )
            })
            .collect();
        write!(f, "{}", clauses.join("; "))
    }
}

/// Why no node of a pool could hold a replica of the job even when empty (what
/// [`Blocker::NoSuitableNode`] names when no taint alone keeps the job off a node).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Misfit {
    /// No node of the pool takes new work (cordoned, or not ready).
    NoneSchedulable,
    /// No node that takes new work has the labels of the job's node selector.
    Selector { selector: BTreeMap<String, String> },
    /// Every such node the node selector admits carries a taint the job does not tolerate.
    Taints {
        /// One of those taints (`key=value:Effect`).
        taint: String,
        /// Whether the job has a node selector (that left other nodes out).
        narrowed: bool,
    },
    /// The nodes the job may use are too small for a replica.
    Resources(Shortfall),
}

impl fmt::Display for Misfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Misfit::NoneSchedulable => write!(
                f,
                "no node of the pool takes new work (all are cordoned or not ready)"
            ),
            Misfit::Selector { selector } => {
                let labels: Vec<String> =
                    selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(
                    f,
                    "no node has the labels of the job's node selector ({})",
                    labels.join(", ")
                )
            }
            Misfit::Taints { taint, narrowed } => write!(
                f,
                "every node{} has a taint the job does not tolerate, such as {taint}",
                if *narrowed {
                    " that matches the job's node selector"
                } else {
                    ""
                }
            ),
            Misfit::Resources(s) => s.write_total(f),
        }
    }
}

/// One reason a job cannot be admitted in one pool (or at all).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Blocker {
    /// The job names a queue that does not exist.
    NoSuchQueue { queue: String },
    /// The job's namespace may not use the queue it names (`Queue.spec.namespaces`).
    NamespaceNotAllowed {
        queue: String,
        namespace: String,
        allowed: Vec<String>,
    },
    /// No pool offers any of the allowed GPU types (or, for a job without GPUs, no pool
    /// has a node).
    NoMatchingPool {
        gpu_types: Vec<String>,
        /// Whether the job asks for GPUs.
        #[serde(default = "yes")]
        asks_gpus: bool,
        /// Nodes that belong to no pool (the first few), and how many there are.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        unpooled: Vec<String>,
        #[serde(default)]
        unpooled_total: u64,
    },
    /// A replica needs more GPUs than any node of the pool has, even empty.
    TooLargeForNode {
        pool: String,
        gpu_type: Option<String>,
        gpus_per_replica: u32,
        largest_node_gpus: u32,
    },
    /// Some of the pool's GPUs are unhealthy now, and what is left healthy could not hold
    /// the job even empty: a replica larger than the largest node's healthy GPUs, or a gang
    /// larger than the pool's. It waits for the GPUs to heal (as on Kubernetes, where the
    /// device plugin lowers the node's allocatable GPUs).
    TooFewHealthyGpus {
        pool: String,
        gpu_type: Option<String>,
        /// GPUs asked: per replica (`per_replica`) or for the whole gang.
        needed: u64,
        per_replica: bool,
        /// Healthy GPUs: on the largest node (`per_replica`) or in the pool.
        healthy: u64,
        /// Unhealthy GPUs in the pool.
        unhealthy: u64,
    },
    /// The gang needs more GPUs than the whole pool has, even empty.
    TooLargeForPool {
        pool: String,
        gpu_type: Option<String>,
        total_gpus: u64,
        pool_gpus: u64,
    },
    /// Every replica fits a node alone, but the whole gang can never fit the nodes of the
    /// pool the job may use at once, even empty.
    GangTooLarge {
        pool: String,
        gpu_type: Option<String>,
        /// [`GPU`], [`CPU`] or [`MEMORY`] the gang needs more of in all (`needed`) than
        /// those nodes have (`most`); `None`: the sums fit, but the nodes' shapes hold only
        /// `most` of the `needed` replicas of `role`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resource: Option<String>,
        needed: u64,
        most: u64,
        /// The role whose replicas do not fit, when the job has several.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        role: Option<String>,
        /// Whether the job's node selector or tolerations leave nodes of the pool out.
        #[serde(default)]
        narrowed: bool,
    },
    /// The queue could never hold the job in this pool, even with nothing else running:
    /// its quota there, borrowing included, is less than the job asks.
    NoQuota {
        queue: String,
        pool: String,
        gpu_type: Option<String>,
        resource: QuotaResource,
        requested: u64,
        /// The most the queue could ever use in the pool (nominal, plus what it may borrow).
        most: u64,
        cohort: Option<String>,
    },
    /// No node of the pool could hold a replica even empty: its node selector, taints,
    /// CPU, memory, GPUs or extended resources rule every node out.
    NoSuitableNode {
        pool: String,
        gpu_type: Option<String>,
        /// A node that would hold a replica but for a taint the job does not tolerate.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        taint: Option<TaintBlock>,
        /// What rules the nodes out otherwise.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        misfit: Option<Misfit>,
    },
    /// Not enough free room now.
    Capacity {
        pool: String,
        gpu_type: Option<String>,
        /// Most free GPUs on one usable node, and that node.
        largest_free: u32,
        largest_free_node: Option<String>,
        /// GPUs the job's largest replica needs: when the largest free block has that
        /// many, what is missing is CPU, memory or extended resources on those nodes.
        gpus_per_replica: u32,
        free_gpus: u64,
        /// Replicas of the gang that would fit now (only meaningful for gangs).
        replicas_that_fit: u64,
        replicas: u64,
        /// Jobs holding node reservations in this pool (backfill may not use those nodes)
        /// on nodes this job could use now: named only where a reservation is a cause.
        reserved_for: Vec<String>,
        /// Free GPUs this job could use on those reserved nodes.
        #[serde(default)]
        reserved_free: u64,
        /// The node with more free GPUs than `largest_free` (or, where the GPUs are not
        /// what is missing, with room for a replica) that a taint keeps the job off.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tainted: Option<TaintBlock>,
        /// Where GPUs are not what is missing (the job asks for none, or nodes have them
        /// free): what a replica needs that no node has free.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        short: Option<Shortfall>,
    },
    /// The queue may not use more of this pool now.
    Quota {
        queue: String,
        pool: String,
        gpu_type: Option<String>,
        resource: QuotaResource,
        used: u64,
        requested: u64,
        nominal: u64,
        /// Most the queue may borrow above nominal (none: no limit).
        borrowing_limit: Option<u64>,
        cohort: Option<String>,
        /// What the cohort could still lend.
        cohort_can_lend: u64,
    },
    /// Decided by a single-job fast path that does not preempt; the next full cycle will
    /// consider preemption.
    AwaitingCycle,
    /// Lower-priority jobs hold the room, but each was admitted less than the preemption
    /// protection ago (`SchedulerConfig::preemption_protection_ms`), so none may be stopped
    /// yet: the job waits at least until `until` (ms since the epoch).
    Protected { pool: String, jobs: u32, until: u64 },
    /// The queue's jobs have held its budget's GPU-hours in the current period
    /// (`Queue.spec.budget`): it admits no new job until `renews_at` (ms since the epoch).
    OverBudget {
        queue: String,
        /// `day`, `week` or `month`.
        period: String,
        budget_gpu_hours: f64,
        /// GPU-hours held in the period, to a thousandth.
        used_gpu_hours: f64,
        renews_at: u64,
    },
}

/// Why a job is still pending.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingReason {
    pub needs: Needs,
    pub blockers: Vec<Blocker>,
}

impl PendingReason {
    /// Whether the job could not be admitted even on an empty cluster: every blocker is
    /// about the cluster's shape (no such queue or pool, replicas larger than any node,
    /// gangs larger than any pool, or than what is healthy of it now), none about what is
    /// in use now. Such a job stays pending (adding nodes, or a GPU healing, may admit it)
    /// but is reported Unschedulable at once.
    pub fn never_fits(&self) -> bool {
        !self.blockers.is_empty()
            && self.blockers.iter().all(|b| {
                matches!(
                    b,
                    Blocker::NoSuchQueue { .. }
                        | Blocker::NamespaceNotAllowed { .. }
                        | Blocker::NoMatchingPool { .. }
                        | Blocker::TooLargeForNode { .. }
                        | Blocker::TooLargeForPool { .. }
                        | Blocker::GangTooLarge { .. }
                        | Blocker::NoQuota { .. }
                        | Blocker::TooFewHealthyGpus { .. }
                        | Blocker::NoSuitableNode { .. }
                )
            })
    }
}

fn yes() -> bool {
    true
}

fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

fn types_phrase(types: &[String]) -> String {
    match types {
        [] => "of any type".to_string(),
        [t] => format!("of type {t}"),
        _ => format!("of type {}", types.join(" or ")),
    }
}

/// CPUs as people write them: `250m` is "0.25", `1500m` "1.5" (exact, never rounded).
pub fn cpu_text(milli: u64) -> String {
    let (whole, frac) = (milli / 1000, milli % 1000);
    if frac == 0 {
        whole.to_string()
    } else {
        let frac = format!("{frac:03}");
        format!("{whole}.{}", frac.trim_end_matches('0'))
    }
}

fn memory_text(bytes: u64) -> String {
    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;
    if bytes >= GIB {
        if bytes.is_multiple_of(GIB) {
            format!("{} GiB", bytes / GIB)
        } else {
            format!("{:.1} GiB", bytes as f64 / GIB as f64)
        }
    } else {
        format!("{} MiB", bytes.div_ceil(MIB))
    }
}

/// "1 CPU", "2.5 CPUs".
fn cpus(milli: u64) -> String {
    if milli == 1000 {
        "1 CPU".to_string()
    } else {
        format!("{} CPUs", cpu_text(milli))
    }
}

/// An amount with its unit: "8 GPUs", "4 CPUs", "600 GiB memory", "2 rdma/hca".
pub(crate) fn resource_amount(resource: &str, v: u64) -> String {
    match resource {
        GPU => plural(v, "GPU", "GPUs"),
        CPU => cpus(v),
        MEMORY => format!("{} memory", memory_text(v)),
        other => format!("{v} {other}"),
    }
}

/// An amount whose resource is already named: "8", "4", "512 GiB", "1".
pub(crate) fn resource_bare(resource: &str, v: u64) -> String {
    match resource {
        CPU => cpu_text(v),
        MEMORY => memory_text(v),
        _ => v.to_string(),
    }
}

fn resource_noun(resource: &str) -> &str {
    match resource {
        GPU => "GPUs",
        CPU => "CPU",
        other => other,
    }
}

/// "a", "a and b", "a, b and c".
fn join_and(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

fn amount_text(resource: QuotaResource, v: u64) -> String {
    match resource {
        QuotaResource::Gpu => v.to_string(),
        QuotaResource::Cpu => cpu_text(v),
        QuotaResource::Memory => memory_text(v),
    }
}

/// A quota amount with its unit: "8 GPUs", "4 CPUs", "512 GiB memory".
pub(crate) fn quota_amount(resource: QuotaResource, v: u64) -> String {
    match resource {
        QuotaResource::Gpu => resource_amount(GPU, v),
        QuotaResource::Cpu => resource_amount(CPU, v),
        QuotaResource::Memory => resource_amount(MEMORY, v),
    }
}

impl fmt::Display for Needs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let types = types_phrase(&self.gpu_types);
        if self.total_gpus == 0 {
            let what = format!(
                "{} and {} memory",
                cpus(self.cpu_milli),
                memory_text(self.memory_bytes)
            );
            return if self.replicas == 1 {
                write!(f, "needs {what} on one node")
            } else {
                write!(f, "needs {} replicas x {what}", self.replicas)
            };
        }
        match (self.replicas, self.gpus_per_replica) {
            (1, _) => write!(
                f,
                "needs {} {types} on one node",
                plural(self.total_gpus, "GPU", "GPUs")
            ),
            (n, Some(g)) => write!(
                f,
                "needs {n} replicas x {} ({} GPUs) {types}",
                plural(u64::from(g), "GPU", "GPUs"),
                self.total_gpus
            ),
            (n, None) => write!(
                f,
                "needs {n} replicas with {} in all {types}",
                plural(self.total_gpus, "GPU", "GPUs")
            ),
        }
    }
}

impl fmt::Display for QuotaResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QuotaResource::Gpu => "GPU",
            QuotaResource::Cpu => "CPU",
            QuotaResource::Memory => "memory",
        })
    }
}

impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blocker::NoSuchQueue { queue } => write!(f, "queue {queue} does not exist"),
            Blocker::NamespaceNotAllowed {
                queue,
                namespace,
                allowed,
            } => write!(
                f,
                "queue {queue} admits only jobs of namespace{} {}, not of {namespace}; \
                 use a queue of namespace {namespace} or ask for it to be listed in the \
                 queue's spec.namespaces",
                if allowed.len() == 1 { "" } else { "s" },
                allowed.join(", ")
            ),
            Blocker::NoMatchingPool {
                gpu_types,
                asks_gpus,
                unpooled,
                unpooled_total,
            } => {
                match (asks_gpus, gpu_types.is_empty()) {
                    (false, _) => write!(f, "no node pool has a node")?,
                    (true, true) => write!(f, "no node pool has GPUs, and this job asks for GPUs")?,
                    (true, false) => {
                        write!(f, "no node pool has GPUs {}", types_phrase(gpu_types))?
                    }
                }
                if !unpooled.is_empty() {
                    let mut names = unpooled.join(", ");
                    let more = unpooled_total.saturating_sub(unpooled.len() as u64);
                    if more > 0 {
                        names.push_str(&format!(" and {more} more"));
                    }
                    write!(
                        f,
                        "; node{} {names} {} in no pool (a NodePool takes only nodes with \
                         GPUs of its gpuType and the labels of its nodeSelector)",
                        if *unpooled_total == 1 { "" } else { "s" },
                        if *unpooled_total == 1 { "is" } else { "are" },
                    )?;
                }
                Ok(())
            }
            Blocker::TooLargeForNode {
                gpus_per_replica,
                largest_node_gpus,
                ..
            } => write!(
                f,
                "a replica needs {} but the largest node has {}",
                plural(u64::from(*gpus_per_replica), "GPU", "GPUs"),
                largest_node_gpus
            ),
            Blocker::TooFewHealthyGpus {
                needed,
                per_replica,
                healthy,
                unhealthy,
                ..
            } => write!(
                f,
                "{} {} but {} only {healthy} healthy now ({unhealthy} unhealthy); it waits for \
                 them to heal",
                if *per_replica {
                    "a replica needs"
                } else {
                    "the gang needs"
                },
                plural(*needed, "GPU", "GPUs"),
                if *per_replica {
                    "the largest node has"
                } else {
                    "the pool has"
                },
            ),
            Blocker::TooLargeForPool {
                total_gpus,
                pool_gpus,
                ..
            } => write!(
                f,
                "the gang needs {total_gpus} GPUs but the pool has only {pool_gpus}"
            ),
            Blocker::GangTooLarge {
                resource: Some(r),
                needed,
                most,
                narrowed,
                ..
            } => write!(
                f,
                "the gang needs {} in all but the nodes{} have {}",
                resource_amount(r, *needed),
                if *narrowed { " the job may use" } else { "" },
                resource_amount(r, *most)
            ),
            Blocker::GangTooLarge {
                resource: None,
                needed,
                most,
                role,
                narrowed,
                ..
            } => write!(
                f,
                "the nodes{} hold at most {most} of the gang's {needed} {}replicas at once",
                if *narrowed { " the job may use" } else { "" },
                role.as_ref().map(|r| format!("{r} ")).unwrap_or_default()
            ),
            Blocker::NoQuota {
                queue,
                pool,
                resource,
                requested,
                most,
                cohort,
                ..
            } => {
                let borrow = match cohort {
                    None => "has no cohort to borrow from",
                    Some(_) => "cannot borrow more from its cohort",
                };
                if *most == 0 {
                    write!(
                        f,
                        "queue {queue} has no {resource} quota in pool {pool} and {borrow}"
                    )
                } else {
                    write!(
                        f,
                        "queue {queue} may use at most {} in pool {pool}, borrowing included, \
                         but the job needs {}",
                        quota_amount(*resource, *most),
                        quota_amount(*resource, *requested)
                    )
                }
            }
            Blocker::NoSuitableNode { taint, misfit, .. } => match (taint, misfit) {
                (Some(t), _) => write!(f, "no node the job tolerates could hold a replica ({t})"),
                (None, Some(m)) => write!(f, "{m}"),
                // A reason stored before the scheduler said why.
                (None, None) => write!(
                    f,
                    "no node matches the job's node selector, tolerations, CPU, memory and \
                     extended resources"
                ),
            },
            Blocker::Capacity {
                largest_free,
                largest_free_node,
                gpus_per_replica,
                free_gpus,
                replicas_that_fit,
                replicas,
                reserved_for,
                reserved_free,
                tainted,
                short,
                ..
            } => {
                // GPUs are not what is missing: the job asks for none, or counted by GPUs
                // alone the whole gang fits.
                let gpus_there = *gpus_per_replica == 0
                    || (largest_free_node.is_some()
                        && *largest_free >= *gpus_per_replica
                        && *replicas_that_fit >= *replicas);
                match largest_free_node {
                    _ if gpus_there => {
                        if let Some(node) =
                            largest_free_node.as_ref().filter(|_| *gpus_per_replica > 0)
                        {
                            write!(
                                f,
                                "{} free on {node}, but ",
                                if *largest_free == 1 {
                                    "1 GPU is".to_string()
                                } else {
                                    format!("{largest_free} GPUs are")
                                }
                            )?;
                        }
                        match short {
                            Some(s) => s.write_free(f, *gpus_per_replica)?,
                            None if tainted.is_some() && *gpus_per_replica == 0 => {
                                write!(f, "no node the job may use has room for a replica")?
                            }
                            None if *replicas > 1 => {
                                write!(f, "no nodes have room for all {replicas} replicas at once")?
                            }
                            None if *gpus_per_replica > 0 => write!(
                                f,
                                "no node with enough free GPUs has the CPU, memory and \
                                 extended resources a replica needs free"
                            )?,
                            None => write!(f, "no node the job may use has room for a replica")?,
                        }
                    }
                    Some(node) if *largest_free > 0 => write!(
                        f,
                        "the largest free block is {} on {node}",
                        plural(u64::from(*largest_free), "GPU", "GPUs")
                    )?,
                    // Never "no GPUs are free" while GPUs are free, only not to this job.
                    _ if *free_gpus == 0 && *reserved_free == 0 && tainted.is_none() => {
                        write!(f, "no GPUs are free")?
                    }
                    _ if *free_gpus == 0 && *reserved_free > 0 => {
                        write!(f, "no unreserved GPUs are free")?
                    }
                    _ if *free_gpus > 0 => write!(f, "no node the job may use has a free GPU")?,
                    _ => write!(f, "no node has room for a replica")?,
                }
                if *replicas > 1 && *free_gpus > 0 && *gpus_per_replica > 0 && !gpus_there {
                    write!(
                        f,
                        " ({} free in all; room for {replicas_that_fit} of {replicas} replicas)",
                        plural(*free_gpus, "GPU", "GPUs")
                    )?;
                }
                if !reserved_for.is_empty() {
                    write!(
                        f,
                        "; {} on nodes reserved for {} so that it is not starved",
                        if *reserved_free == 1 {
                            "1 free GPU is".to_string()
                        } else {
                            format!("{reserved_free} free GPUs are")
                        },
                        reserved_for.join(", ")
                    )?;
                }
                if let Some(t) = tainted {
                    write!(f, "; {t}")?;
                }
                Ok(())
            }
            Blocker::Quota {
                queue,
                resource,
                used,
                requested,
                nominal,
                borrowing_limit,
                cohort,
                cohort_can_lend,
                ..
            } => {
                let unit = match resource {
                    QuotaResource::Gpu => "",
                    QuotaResource::Cpu => " CPUs",
                    QuotaResource::Memory => "",
                };
                if used >= nominal {
                    write!(
                        f,
                        "queue {queue} is at its {resource} quota {}/{}{unit}",
                        amount_text(*resource, *used),
                        amount_text(*resource, *nominal)
                    )?;
                } else {
                    write!(
                        f,
                        "queue {queue} uses {}/{}{unit} of its {resource} quota and needs {} more",
                        amount_text(*resource, *used),
                        amount_text(*resource, *nominal),
                        amount_text(*resource, *requested)
                    )?;
                }
                let borrowed = used.saturating_sub(*nominal);
                match (cohort, borrowing_limit) {
                    (None, _) => write!(f, " and has no cohort to borrow from"),
                    (Some(_), Some(limit))
                        if borrowed.saturating_add(*requested) > *limit
                            && *cohort_can_lend >= *requested =>
                    {
                        write!(
                            f,
                            " and may borrow at most {}",
                            amount_text(*resource, *limit)
                        )
                    }
                    (Some(_), _) if *cohort_can_lend == 0 => {
                        write!(f, " and its cohort has nothing to lend")
                    }
                    (Some(_), _) => write!(
                        f,
                        " and its cohort can lend only {}",
                        amount_text(*resource, *cohort_can_lend)
                    ),
                }
            }
            Blocker::AwaitingCycle => write!(f, "waiting for the next scheduling cycle"),
            Blocker::OverBudget {
                queue,
                period,
                budget_gpu_hours,
                used_gpu_hours,
                renews_at,
            } => {
                let at = i64::try_from(*renews_at)
                    .ok()
                    .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
                    .map_or_else(|| format!("{renews_at} ms"), |t| t.to_string());
                write!(
                    f,
                    "queue {queue} is over its budget: its jobs held {used_gpu_hours} of its \
                     {budget_gpu_hours} GPU-hours this {period}; it admits no new job until {at}"
                )
            }
            Blocker::Protected { pool, jobs, until } => {
                let at = i64::try_from(*until)
                    .ok()
                    .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
                    .map_or_else(|| format!("{until} ms"), |t| t.to_string());
                write!(
                    f,
                    "{} of lower priority in pool {pool} could make room but are protected \
                     from preemption until {at} (admitted less than the preemption protection \
                     ago)",
                    plural(u64::from(*jobs), "job", "jobs")
                )
            }
        }
    }
}

impl Blocker {
    /// The GPU type of the pool this blocker is about, if it is about one pool.
    pub fn gpu_type(&self) -> Option<&str> {
        match self {
            Blocker::TooLargeForNode { gpu_type, .. }
            | Blocker::TooLargeForPool { gpu_type, .. }
            | Blocker::GangTooLarge { gpu_type, .. }
            | Blocker::NoQuota { gpu_type, .. }
            | Blocker::TooFewHealthyGpus { gpu_type, .. }
            | Blocker::NoSuitableNode { gpu_type, .. }
            | Blocker::Capacity { gpu_type, .. }
            | Blocker::Quota { gpu_type, .. } => gpu_type.as_deref(),
            _ => None,
        }
    }

    /// The pool this blocker is about, if it is about one pool.
    pub fn pool(&self) -> Option<&str> {
        match self {
            Blocker::TooLargeForNode { pool, .. }
            | Blocker::TooLargeForPool { pool, .. }
            | Blocker::GangTooLarge { pool, .. }
            | Blocker::NoQuota { pool, .. }
            | Blocker::TooFewHealthyGpus { pool, .. }
            | Blocker::NoSuitableNode { pool, .. }
            | Blocker::Capacity { pool, .. }
            | Blocker::Quota { pool, .. }
            | Blocker::Protected { pool, .. } => Some(pool),
            _ => None,
        }
    }
}

impl fmt::Display for PendingReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.needs)?;
        // With more than one candidate pool, say which pool each clause is about.
        let mut pools: Vec<&str> = self.blockers.iter().filter_map(|b| b.pool()).collect();
        pools.dedup();
        let several = pools.len() > 1;
        for b in &self.blockers {
            match (several, b.pool()) {
                (true, Some(pool)) => {
                    let label = b.gpu_type().unwrap_or(pool);
                    write!(f, "; on {label}: {b}")?
                }
                _ => write!(f, "; {b}")?,
            }
        }
        Ok(())
    }
}
