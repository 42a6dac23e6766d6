//! Where each replica can be reached: the shell decides (Kubernetes DNS names with the
//! framework port, or a local host with ports Corral allocates) and hands the map in.

use std::collections::BTreeMap;
use std::fmt;

use corral_api::training_job::TrainingJob;

use crate::lifecycle::ReplicaId;

/// One replica's address: a host, and the port it serves its framework on (MPI and
/// generic replicas may have none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: Option<u16>,
}

impl Endpoint {
    pub fn new(host: &str, port: Option<u16>) -> Self {
        Endpoint {
            host: host.to_string(),
            port,
        }
    }
}

impl fmt::Display for Endpoint {
    /// `host:port`, or `host` without a port.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(p) => write!(f, "{}:{p}", self.host),
            None => f.write_str(&self.host),
        }
    }
}

/// Every replica's endpoint, by replica.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Addresses {
    endpoints: BTreeMap<ReplicaId, Endpoint>,
}

impl Addresses {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&mut self, replica: ReplicaId, endpoint: Endpoint) {
        self.endpoints.insert(replica, endpoint);
    }

    pub fn get(&self, replica: ReplicaId) -> Option<&Endpoint> {
        self.endpoints.get(&replica)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&ReplicaId, &Endpoint)> {
        self.endpoints.iter()
    }

    /// Kubernetes: each replica behind its own headless Service, reachable at
    /// `<job>-<role>-<i>.<job>.<ns>.svc[.<cluster domain>]` on the job's port (its `port`, or
    /// the framework default).
    pub fn kubernetes(job: &TrainingJob, cluster_domain: Option<&str>) -> Self {
        let port = job.spec.port.or(job.spec.framework.default_port());
        let ns = job.metadata.namespace_or_default();
        let mut out = Addresses::new();
        for (role, spec) in &job.spec.replicas {
            for index in 0..replica_slots(job, *role, spec.count) {
                let id = ReplicaId::new(*role, index);
                let host = kubernetes_host(job.name(), ns, id, cluster_domain);
                out.insert(id, Endpoint { host, port });
            }
        }
        out
    }

    /// Embedded: every replica on `host`, each on the port `port_of` returns (ports that the
    /// shell allocated, never the same one twice at once).
    pub fn local(
        job: &TrainingJob,
        host: &str,
        mut port_of: impl FnMut(ReplicaId) -> Option<u16>,
    ) -> Self {
        let mut out = Addresses::new();
        for (role, spec) in &job.spec.replicas {
            for index in 0..replica_slots(job, *role, spec.count) {
                let id = ReplicaId::new(*role, index);
                out.insert(id, Endpoint::new(host, port_of(id)));
            }
        }
        out
    }
}

/// Replica indices a role may use: its count, or an elastic job's maximum.
pub fn replica_slots(job: &TrainingJob, role: corral_api::training_job::Role, count: u32) -> u32 {
    match crate::lifecycle::policy::elastic_role(&job.spec) {
        Some(r) if r == role => job
            .spec
            .elastic
            .as_ref()
            .and_then(|e| e.max_replicas)
            .unwrap_or(count)
            .max(count),
        _ => count,
    }
}

/// `<job>-<role>-<i>.<job>.<ns>.svc`, with `.<cluster domain>` appended when given (as
/// Kubeflow appends CUSTOM_CLUSTER_DOMAIN).
pub fn kubernetes_host(
    job: &str,
    namespace: &str,
    replica: ReplicaId,
    cluster_domain: Option<&str>,
) -> String {
    let mut host = format!("{}.{job}.{namespace}.svc", replica.name(job));
    if let Some(d) = cluster_domain.filter(|d| !d.is_empty()) {
        host.push('.');
        host.push_str(d);
    }
    host
}
