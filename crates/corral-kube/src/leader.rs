//! Leader election with a coordination.k8s.io/v1 Lease, as client-go's leaderelection: one
//! replica of the operator acts; the others wait until the holder stops renewing.
//!
//! The decision is pure ([`decide`]); [`LeaseLock`] reads and writes the Lease with
//! optimistic concurrency (a lost race is a 409, never two leaders). [`run_election`] keeps
//! the Lease on a thread of its own, whatever the passes do, and publishes what it holds in
//! the [`Leadership`] that fences every write (see [`crate::fence`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::{Client, Error};
use tokio::sync::oneshot;

use crate::fence::{Leadership, Timings};

/// What to do with the Lease as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseDecision {
    /// No Lease yet: create it, holding it.
    Create,
    /// We hold it: renew.
    Renew,
    /// Free or expired: take it over (a new transition).
    Acquire,
    /// Someone else holds it and renews: wait, until `expires` at the latest.
    Follow { holder: String, expires: Timestamp },
}

/// What one attempt on the Lease found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// We hold it; `fresh`: newly acquired (created or taken over), not renewed.
    Held { fresh: bool },
    /// Someone else holds it (or won the race): try again by `expires` if known.
    Follow { expires: Option<Timestamp> },
}

/// Client-go's rule: a lease is held while `renewTime + leaseDurationSeconds` is in the
/// future; an empty holder means released.
pub fn decide(lease: Option<&Lease>, me: &str, now: Timestamp) -> LeaseDecision {
    let Some(lease) = lease else {
        return LeaseDecision::Create;
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.unwrap_or_default();
    if holder == me {
        return LeaseDecision::Renew;
    }
    if holder.is_empty() {
        return LeaseDecision::Acquire;
    }
    let duration = jiff::SignedDuration::from_secs(i64::from(
        spec.lease_duration_seconds.unwrap_or(15).max(1),
    ));
    let renewed = spec
        .renew_time
        .or(spec.acquire_time)
        .map(|t| t.0)
        .unwrap_or(Timestamp::UNIX_EPOCH);
    match renewed.checked_add(duration) {
        Ok(expiry) if expiry > now => LeaseDecision::Follow {
            holder,
            expires: expiry,
        },
        _ => LeaseDecision::Acquire,
    }
}

/// One Lease, held by `identity`.
pub struct LeaseLock {
    api: Api<Lease>,
    pub name: String,
    pub identity: String,
    pub duration: Duration,
}

impl LeaseLock {
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> Self {
        LeaseLock {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            duration,
        }
    }

    fn spec(&self, now: Timestamp, acquire: Option<Timestamp>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: acquire.map(MicroTime),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// Tries to hold the lease once, writing `now` as its renewTime.
    pub async fn try_acquire_or_renew(&self, now: Timestamp) -> Result<Attempt, Error> {
        let current = self.api.get_opt(&self.name).await?;
        let lost_race = Attempt::Follow { expires: None };
        match decide(current.as_ref(), &self.identity, now) {
            LeaseDecision::Follow { expires, .. } => Ok(Attempt::Follow {
                expires: Some(expires),
            }),
            LeaseDecision::Create => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(self.spec(now, Some(now), 0)),
                };
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(Attempt::Held { fresh: true }),
                    Err(Error::Api(s)) if s.code == 409 => Ok(lost_race),
                    Err(e) => Err(e),
                }
            }
            decision => {
                let Some(mut lease) = current else {
                    return Ok(lost_race);
                };
                let fresh = decision != LeaseDecision::Renew;
                let old = lease.spec.clone().unwrap_or_default();
                let (acquire, transitions) = if !fresh {
                    (
                        old.acquire_time.map(|t| t.0),
                        old.lease_transitions.unwrap_or(0),
                    )
                } else {
                    (
                        Some(now),
                        old.lease_transitions.unwrap_or(0).saturating_add(1),
                    )
                };
                lease.spec = Some(self.spec(now, acquire, transitions));
                // replace carries the resourceVersion read above: a lost race is a 409.
                match self
                    .api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
                {
                    Ok(_) => Ok(Attempt::Held { fresh }),
                    Err(Error::Api(s)) if s.code == 409 => Ok(lost_race),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Gives the lease up on shutdown so that a standby takes over at once.
    pub async fn release(&self) -> Result<(), Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        lease.spec = Some(spec);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            Err(Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Where the Lease is and who asks for it.
#[derive(Clone, Debug)]
pub struct Election {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub timings: Timings,
}

/// Runs [`run_election`] on a thread of its own, with its own runtime and client: a pass
/// that keeps the operator's runtime busy (planning is CPU work) cannot delay a renewal.
/// The thread ends when `quit` fires or its sender is dropped, releasing the lease if held.
pub fn spawn_election(
    config: kube::Config,
    election: Election,
    leadership: Arc<Leadership>,
    quit: oneshot::Receiver<()>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("lease".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!("leader election cannot start: {e}; this replica never leads");
                    return;
                }
            };
            rt.block_on(async move {
                // Built inside this runtime: a kube client's connection task runs where it
                // was built.
                let client = match Client::try_from(config) {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::error!(
                            "leader election cannot start: {e}; this replica never leads"
                        );
                        return;
                    }
                };
                let lock = LeaseLock::new(
                    client,
                    &election.namespace,
                    &election.name,
                    &election.identity,
                    election.timings.lease_duration,
                );
                run_election(&lock, election.timings, &leadership, quit).await;
            });
        })
}

/// Acquires and renews the Lease every `retry_period` (client-go's loop) and records each
/// success in `leadership`; a standby tries again when the holder's lease expires. The
/// term ends by itself at its deadline when renewals fail ([`crate::fence`]).
pub async fn run_election(
    lock: &LeaseLock,
    timings: Timings,
    leadership: &Leadership,
    mut quit: oneshot::Receiver<()>,
) {
    let mut holding = false;
    loop {
        let sent = Instant::now();
        // An attempt never outlives the term it would extend; a standby's is bounded too.
        let budget = leadership
            .term()
            .held_until
            .and_then(|until| until.checked_duration_since(sent))
            .filter(|d| !d.is_zero())
            .unwrap_or(timings.renew_deadline);
        let attempt = tokio::select! {
            r = tokio::time::timeout(budget, lock.try_acquire_or_renew(Timestamp::now())) => r,
            _ = &mut quit => break,
        };
        let mut wait = timings.retry_period;
        match attempt {
            Ok(Ok(Attempt::Held { fresh })) => {
                let before = leadership.term();
                let term = leadership.renewed(sent, fresh, timings.renew_deadline);
                if term.number != before.number {
                    tracing::info!(term = term.number, "leading as {}", lock.identity);
                }
                holding = true;
            }
            Ok(Ok(Attempt::Follow { expires })) => {
                if holding {
                    tracing::warn!("the lease passed to another replica; following");
                }
                leadership.end();
                holding = false;
                // Wake as the holder's lease expires when that is sooner: a standby takes
                // over as soon as it may, not up to a retry period later.
                if let Some(expires) = expires {
                    let left = Duration::try_from(expires.duration_since(Timestamp::now()))
                        .unwrap_or(Duration::ZERO);
                    wait = wait.min(left + Duration::from_millis(10));
                }
            }
            Ok(Err(e)) => tracing::warn!("leader election: {e}"),
            Err(_) => tracing::warn!(
                "leader election: no answer within {} ms",
                budget.as_millis()
            ),
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = &mut quit => break,
        }
    }
    // Writes stop before the lease is given up.
    leadership.close();
    if holding && let Err(e) = lock.release().await {
        tracing::warn!("releasing the lease: {e}");
    }
}

/// Label on the leading operator's pod: the Service of the served models' router
/// (`corral-serving`, deploy/operator.yaml) selects it, since only the leader routes.
pub const LEADER_LABEL: &str = "corral.dev/leader";

/// Marks this replica's pod (`namespace/pod`, from POD_NAMESPACE and POD_NAME) as the
/// leader's, or no longer. Taking the lead, it also takes the label from any other pod of
/// the namespace (a deposed leader writes nothing once its term ended: its successor does
/// it). Outside a pod (a binary run by hand) there is none to mark: said at debug level. A
/// failure is logged; leading goes on.
pub async fn label_own_pod(client: &Client, namespace: &str, pod: &str, leading: bool) {
    use kube::api::{ListParams, Patch, PatchParams};
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), namespace);
    let patch =
        |value: Option<&str>| serde_json::json!({"metadata": {"labels": {LEADER_LABEL: value}}});
    if leading {
        let others = pods
            .list(&ListParams::default().labels(&format!("{LEADER_LABEL}=true")))
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        for other in others {
            let Some(name) = other.metadata.name.filter(|n| n != pod) else {
                continue;
            };
            if let Err(e) = pods
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch(None)))
                .await
            {
                tracing::warn!("taking {LEADER_LABEL} from pod {namespace}/{name}: {e}");
            }
        }
    }
    let value = leading.then_some("true");
    match pods
        .patch(pod, &PatchParams::default(), &Patch::Merge(&patch(value)))
        .await
    {
        Ok(_) => tracing::info!(leading, "pod {namespace}/{pod} labelled {LEADER_LABEL}"),
        Err(Error::Api(s)) if s.code == 404 => {
            tracing::debug!("no pod {namespace}/{pod} to label {LEADER_LABEL}")
        }
        Err(e) => tracing::warn!("labelling pod {namespace}/{pod} {LEADER_LABEL}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, renewed: Timestamp, secs: i32) -> Lease {
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(secs),
                renew_time: Some(MicroTime(renewed)),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn lease_rules() {
        let t0 = Timestamp::from_second(1_700_000_000).expect("valid");
        let later = |s: i64| {
            t0.checked_add(jiff::SignedDuration::from_secs(s))
                .expect("valid")
        };
        assert_eq!(decide(None, "a", t0), LeaseDecision::Create);
        assert_eq!(
            decide(Some(&lease("a", t0, 15)), "a", later(100)),
            LeaseDecision::Renew
        );
        assert_eq!(
            decide(Some(&lease("b", t0, 15)), "a", later(10)),
            LeaseDecision::Follow {
                holder: "b".into(),
                expires: later(15)
            }
        );
        assert_eq!(
            decide(Some(&lease("b", t0, 15)), "a", later(16)),
            LeaseDecision::Acquire
        );
        assert_eq!(
            decide(Some(&lease("", t0, 15)), "a", later(1)),
            LeaseDecision::Acquire
        );
    }
}
