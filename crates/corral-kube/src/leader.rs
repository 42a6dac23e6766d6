//! Leader election with a coordination.k8s.io/v1 Lease, as client-go's leaderelection: one
//! replica of the operator acts; the others wait until the holder stops renewing.
//!
//! The decision is pure ([`decide`]); [`LeaseLock`] reads and writes the Lease with
//! optimistic concurrency (a lost race is a 409, never two leaders).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::{Client, Error};

/// What to do with the Lease as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseDecision {
    /// No Lease yet: create it, holding it.
    Create,
    /// We hold it: renew.
    Renew,
    /// Free or expired: take it over (a new transition).
    Acquire,
    /// Someone else holds it and renews: wait.
    Follow { holder: String },
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
        Ok(expiry) if expiry > now => LeaseDecision::Follow { holder },
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

    /// Tries to hold the lease once. Ok(true): we lead until `now + duration`.
    pub async fn try_acquire_or_renew(&self, now: Timestamp) -> Result<bool, Error> {
        let current = self.api.get_opt(&self.name).await?;
        match decide(current.as_ref(), &self.identity, now) {
            LeaseDecision::Follow { .. } => Ok(false),
            LeaseDecision::Create => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(self.spec(now, Some(now), 0)),
                };
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(e) => Err(e),
                }
            }
            decision => {
                let Some(mut lease) = current else {
                    return Ok(false);
                };
                let old = lease.spec.clone().unwrap_or_default();
                let (acquire, transitions) = if decision == LeaseDecision::Renew {
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
                    Ok(_) => Ok(true),
                    Err(Error::Api(s)) if s.code == 409 => Ok(false),
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
            LeaseDecision::Follow { holder: "b".into() }
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
