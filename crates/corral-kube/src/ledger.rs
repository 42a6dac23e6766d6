//! The usage ledger on Kubernetes: the intervals of GPU and CPU time that the control plane
//! closes (`corral_core::control::accounting`: what each admission held, by GPU type), kept
//! in ConfigMaps of the operator's own namespace, where no tenant writes. A rebuilt plane
//! restores its queues' budgets from them (`ControlPlane::restore_usage`), and a deleted
//! job's usage stays in them.
//!
//! One ConfigMap per namespace of the jobs, UTC day (of the admission's start) and shard,
//! `corral-usage-<day>-<namespace>-<shard>`, labelled with the namespace and the day; one
//! key per admission, `<start ms>.<job name>`, its interval as JSON. An admission is keyed by
//! when it started, so one written again (its release did not land, and the plane closed it
//! again later) replaces itself: one admission is never counted twice. A shard holds up to
//! [`SHARD_BYTES`] (about 4,000 admissions); the next one is begun beyond that.
//!
//! A pass writes the intervals it closed before anything else ([`crate::apply`]): a job's
//! release is stored only once the usage it closes is, so no restart loses any of it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use corral_core::control::accounting::UsageInterval;
use corral_core::sched::Millis;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use sha2::{Digest, Sha256};

/// Every ledger ConfigMap carries it (value [`LEDGER_VERSION`]).
pub const LEDGER_LABEL: &str = "corral.dev/usage-ledger";
pub const LEDGER_VERSION: &str = "v1";
/// The namespace whose jobs' usage a ledger ConfigMap holds.
pub const NAMESPACE_LABEL: &str = "corral.dev/usage-namespace";
/// The UTC day (`YYYY-MM-DD`) its admissions started.
pub const DAY_LABEL: &str = "corral.dev/usage-day";
/// Where the ledger is unless the operator is told otherwise (its own namespace).
pub const DEFAULT_NAMESPACE: &str = "corral-system";
/// How many bytes of entries a shard takes before the next is begun: a ConfigMap holds
/// at most 1 MiB.
pub const SHARD_BYTES: usize = 768 * 1024;
/// How long the ledger keeps a day unless told otherwise: a year and a month, so that last
/// year's same month can be compared.
pub const DEFAULT_RETENTION_DAYS: u64 = 400;

/// Days of the ledger a rebuilt plane reads for its budgets: a month's budget needs the
/// last 31 days, and an admission may have begun a month before it closed.
pub const RESTORED_DAYS: u64 = 64;

const DAY_MS: Millis = 86_400_000;

/// What a pass adds to one ledger ConfigMap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerWrite {
    pub name: String,
    /// The namespace of the jobs it holds.
    pub namespace: String,
    pub day: String,
    /// No such ConfigMap was seen: create it (or add to it, if another pass just did).
    pub create: bool,
    /// Keys and intervals (JSON) to set.
    pub entries: BTreeMap<String, String>,
}

/// The UTC day of `ms` since the epoch, as `YYYY-MM-DD`.
pub fn day_of(ms: Millis) -> String {
    let ts = i64::try_from(ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .unwrap_or(Timestamp::UNIX_EPOCH);
    ts.strftime("%Y-%m-%d").to_string()
}

/// The key of one admission in its day's ConfigMap: when it started and the job's name
/// (a hash of the name where both would pass the 253 characters a key may have).
pub fn entry_key(interval: &UsageInterval) -> String {
    let name = interval
        .job
        .split_once('/')
        .map_or(interval.job.as_str(), |(_, n)| n);
    let key = format!("{}.{name}", interval.start);
    if key.len() <= 253 {
        return key;
    }
    let hash = Sha256::digest(name.as_bytes());
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}.{hex}", interval.start)
}

fn map_name(namespace: &str, day: &str, shard: u32) -> String {
    format!("corral-usage-{day}-{namespace}-{shard}")
}

fn label<'a>(cm: &'a ConfigMap, key: &str) -> Option<&'a str> {
    cm.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// A ledger ConfigMap as the writes see it.
struct Shard<'a> {
    name: &'a str,
    shard: u32,
    bytes: usize,
    data: Option<&'a BTreeMap<String, String>>,
}

fn shard_of(cm: &ConfigMap) -> Option<(String, String, Shard<'_>)> {
    let namespace = label(cm, NAMESPACE_LABEL)?.to_string();
    let day = label(cm, DAY_LABEL)?.to_string();
    let name = cm.metadata.name.as_deref()?;
    let shard = name.rsplit_once('-')?.1.parse().ok()?;
    let data = cm.data.as_ref();
    let bytes = data.map_or(0, |d| d.iter().map(|(k, v)| k.len() + v.len()).sum());
    Some((
        namespace,
        day,
        Shard {
            name,
            shard,
            bytes,
            data,
        },
    ))
}

/// Every interval the ledger holds, and what of it does not read, in words.
pub fn intervals(maps: &[Arc<ConfigMap>]) -> (Vec<UsageInterval>, Vec<String>) {
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    for cm in maps {
        let name = cm.metadata.name.as_deref().unwrap_or_default();
        for (key, value) in cm.data.iter().flatten() {
            match serde_json::from_str::<UsageInterval>(value) {
                Ok(i) => out.push(i),
                Err(e) => warnings.push(format!(
                    "usage ledger ConfigMap {name}, key {key}: not an interval ({e})"
                )),
            }
        }
    }
    (out, warnings)
}

/// What a rebuilt plane's budgets need: the intervals of admissions that began in the
/// last [`RESTORED_DAYS`] days (one closed that began before is not counted again; one
/// still open comes back with its job).
pub fn recent(maps: &[Arc<ConfigMap>], now: Timestamp) -> Vec<UsageInterval> {
    let oldest = day_of(millis(now).saturating_sub(RESTORED_DAYS * DAY_MS));
    let maps: Vec<Arc<ConfigMap>> = maps
        .iter()
        .filter(|cm| label(cm, DAY_LABEL).is_some_and(|d| d >= oldest.as_str()))
        .cloned()
        .collect();
    intervals(&maps).0
}

/// `now` as ms since the epoch.
pub fn millis(now: Timestamp) -> Millis {
    u64::try_from(now.as_millisecond()).unwrap_or(0)
}

/// Where the intervals a pass closed go: the ConfigMap that holds the admission already,
/// else the last shard of its namespace and day with room, else a new shard.
pub fn writes(closed: &[UsageInterval], maps: &[Arc<ConfigMap>]) -> Vec<LedgerWrite> {
    if closed.is_empty() {
        return Vec::new();
    }
    let mut shards: BTreeMap<(String, String), Vec<Shard<'_>>> = BTreeMap::new();
    for cm in maps {
        if let Some((ns, day, s)) = shard_of(cm) {
            shards.entry((ns, day)).or_default().push(s);
        }
    }
    for list in shards.values_mut() {
        list.sort_by_key(|s| s.shard);
    }
    let mut out: BTreeMap<String, LedgerWrite> = BTreeMap::new();
    // Bytes this pass adds to each shard, and the new shards it begins.
    let mut added: BTreeMap<String, usize> = BTreeMap::new();
    let mut begun: BTreeMap<(String, String), u32> = BTreeMap::new();
    for i in closed {
        let (ns, day) = (i.namespace().to_string(), day_of(i.start));
        let key = entry_key(i);
        let Ok(value) = serde_json::to_string(i) else {
            continue;
        };
        let size = key.len() + value.len();
        let list = shards.get(&(ns.clone(), day.clone()));
        let holding = list
            .into_iter()
            .flatten()
            .find(|s| s.data.is_some_and(|d| d.contains_key(&key)));
        let room = |name: &str, bytes: usize| {
            bytes + added.get(name).copied().unwrap_or(0) + size <= SHARD_BYTES
        };
        let (name, create) = match (holding, list.and_then(|l| l.last())) {
            (Some(s), _) => (s.name.to_string(), false),
            (None, Some(last)) if room(last.name, last.bytes) => (last.name.to_string(), false),
            (None, last) => {
                let next = last.map_or(0, |s| s.shard + 1);
                let shard = begun.entry((ns.clone(), day.clone())).or_insert(next);
                let mut name = map_name(&ns, &day, *shard);
                if !room(&name, 0) {
                    *shard += 1;
                    name = map_name(&ns, &day, *shard);
                }
                (name, true)
            }
        };
        *added.entry(name.clone()).or_default() += size;
        out.entry(name.clone())
            .or_insert_with(|| LedgerWrite {
                name,
                namespace: ns,
                day,
                create,
                entries: BTreeMap::new(),
            })
            .entries
            .insert(key, value);
    }
    out.into_values().collect()
}

/// The ledger ConfigMaps of days more than `retention_days` before `now`.
pub fn expired(maps: &[Arc<ConfigMap>], now: Millis, retention_days: u64) -> Vec<String> {
    let oldest = day_of(now.saturating_sub(retention_days.saturating_mul(DAY_MS)));
    maps.iter()
        .filter(|cm| label(cm, DAY_LABEL).is_some_and(|d| d < oldest.as_str()))
        .filter_map(|cm| cm.metadata.name.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Writes a pass's intervals into the ledger in `namespace`; the ConfigMaps' names and the
/// resourceVersions the writes left them at, or the first error.
pub async fn write(
    client: &kube::Client,
    namespace: &str,
    writes: &[LedgerWrite],
) -> Result<Vec<(String, String)>, String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let mut written = Vec::with_capacity(writes.len());
    for w in writes {
        let body = Patch::Merge(serde_json::json!({ "data": w.entries }));
        let params = PatchParams::default();
        let patch = || api.patch(&w.name, &params, &body);
        let result = if w.create {
            match api
                .create(&PostParams::default(), &new_map(w, namespace))
                .await
            {
                // Made by an earlier pass whose write the watch had not shown yet.
                Err(kube::Error::Api(s)) if s.code == 409 => patch().await,
                other => other,
            }
        } else {
            match patch().await {
                // Deleted (by hand, or expired) since it was seen.
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    api.create(&PostParams::default(), &new_map(w, namespace))
                        .await
                }
                other => other,
            }
        };
        match result {
            Ok(cm) => written.push((
                w.name.clone(),
                cm.metadata.resource_version.unwrap_or_default(),
            )),
            Err(e) => {
                return Err(format!(
                    "usage ledger: writing ConfigMap {namespace}/{}: {e}",
                    w.name
                ));
            }
        }
    }
    Ok(written)
}

/// Deletes the ledger ConfigMaps past their retention (one not found is gone already).
pub async fn delete_expired(
    client: &kube::Client,
    namespace: &str,
    names: &[String],
) -> Result<(), String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    for name in names {
        match api.delete(name, &Default::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(format!("usage ledger: deleting {namespace}/{name}: {e}")),
        }
    }
    Ok(())
}

fn new_map(w: &LedgerWrite, namespace: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(w.name.clone()),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([
                (LEDGER_LABEL.to_string(), LEDGER_VERSION.to_string()),
                (NAMESPACE_LABEL.to_string(), w.namespace.clone()),
                (DAY_LABEL.to_string(), w.day.clone()),
            ])),
            ..Default::default()
        },
        data: Some(w.entries.clone()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Millis {
        let ts: Timestamp = s.parse().expect("timestamp");
        u64::try_from(ts.as_millisecond()).expect("after the epoch")
    }

    fn interval(job: &str, start: &str, end: &str) -> UsageInterval {
        UsageInterval {
            job: job.to_string(),
            queue: "q".to_string(),
            gpu_type: "NVIDIA-H100-80GB-HBM3".to_string(),
            gpus: 8,
            cpu_milli: 16_000,
            start: at(start),
            end: at(end),
        }
    }

    /// The ConfigMaps the API server would hold after `writes` were applied to `maps`.
    fn applied(maps: &[Arc<ConfigMap>], writes: &[LedgerWrite]) -> Vec<Arc<ConfigMap>> {
        let mut by_name: BTreeMap<String, ConfigMap> = maps
            .iter()
            .map(|m| (m.metadata.name.clone().unwrap_or_default(), (**m).clone()))
            .collect();
        for w in writes {
            let cm = by_name
                .entry(w.name.clone())
                .or_insert_with(|| new_map(w, DEFAULT_NAMESPACE));
            cm.data
                .get_or_insert_with(BTreeMap::new)
                .extend(w.entries.clone());
        }
        by_name.into_values().map(Arc::new).collect()
    }

    #[test]
    fn an_admission_written_again_replaces_itself() {
        let first = interval("ml/a", "2026-11-27T23:00:00Z", "2026-11-28T01:00:00Z");
        let w = writes(std::slice::from_ref(&first), &[]);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].name, "corral-usage-2026-11-27-ml-0");
        assert!(w[0].create);
        let maps = applied(&[], &w);
        // Its release did not land: closed again an hour later, by start day.
        let again = UsageInterval {
            end: at("2026-11-28T02:00:00Z"),
            ..first.clone()
        };
        let w = writes(std::slice::from_ref(&again), &maps);
        assert_eq!(w.len(), 1);
        assert!(!w[0].create, "{w:?}");
        let maps = applied(&maps, &w);
        let (all, warnings) = intervals(&maps);
        assert!(warnings.is_empty());
        assert_eq!(all, vec![again]);
    }

    #[test]
    fn namespaces_and_days_have_their_own_maps_and_full_shards_roll_over() {
        let w = writes(
            &[
                interval("ml/a", "2026-11-27T10:00:00Z", "2026-11-27T11:00:00Z"),
                interval("team-b/a", "2026-11-27T10:00:00Z", "2026-11-27T11:00:00Z"),
                interval("ml/b", "2026-11-28T10:00:00Z", "2026-11-28T11:00:00Z"),
            ],
            &[],
        );
        let names: Vec<&str> = w.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "corral-usage-2026-11-27-ml-0",
                "corral-usage-2026-11-27-team-b-0",
                "corral-usage-2026-11-28-ml-0"
            ]
        );
        // So many admissions in one day that they fill more than one shard.
        let many: Vec<UsageInterval> = (0..10_000u64)
            .map(|n| UsageInterval {
                job: format!("ml/job-{n}"),
                start: at("2026-11-27T00:00:00Z") + n,
                end: at("2026-11-27T01:00:00Z"),
                ..interval("ml/x", "2026-11-27T00:00:00Z", "2026-11-27T01:00:00Z")
            })
            .collect();
        let w = writes(&many, &[]);
        assert!(w.len() >= 2, "{}", w.len());
        let maps = applied(&[], &w);
        for cm in &maps {
            let bytes: usize = cm
                .data
                .iter()
                .flatten()
                .map(|(k, v)| k.len() + v.len())
                .sum();
            assert!(bytes <= SHARD_BYTES, "{bytes}");
        }
        assert_eq!(intervals(&maps).0.len(), 10_000);
        // The next admission goes to the last shard, which has room.
        let one = interval("ml/late", "2026-11-27T20:00:00Z", "2026-11-27T21:00:00Z");
        let w = writes(&[one], &maps);
        assert_eq!(w.len(), 1);
        assert!(!w[0].create);
        assert_eq!(
            w[0].name,
            format!("corral-usage-2026-11-27-ml-{}", maps.len() - 1)
        );
    }

    #[test]
    fn keys_are_valid_for_long_names_and_old_days_expire() {
        let long = format!("ml/{}", "a".repeat(250));
        let i = interval(&long, "2026-11-27T10:00:00Z", "2026-11-27T11:00:00Z");
        let key = entry_key(&i);
        assert!(key.len() <= 253, "{}", key.len());
        assert!(
            key.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
        );
        let maps = applied(&[], &writes(&[i], &[]));
        let now = at("2028-01-15T00:00:00Z");
        assert_eq!(expired(&maps, now, 400), ["corral-usage-2026-11-27-ml-0"]);
        assert!(expired(&maps, at("2027-12-01T00:00:00Z"), 400).is_empty());
    }

    #[test]
    fn what_does_not_read_is_said_not_fatal() {
        let mut cm = new_map(
            &LedgerWrite {
                name: "corral-usage-2026-11-27-ml-0".into(),
                namespace: "ml".into(),
                day: "2026-11-27".into(),
                create: true,
                entries: BTreeMap::from([("1.x".to_string(), "{".to_string())]),
            },
            DEFAULT_NAMESPACE,
        );
        cm.data
            .get_or_insert_with(BTreeMap::new)
            .insert("2.y".into(), "{}".into());
        let (all, warnings) = intervals(&[Arc::new(cm)]);
        assert!(all.is_empty());
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("corral-usage-2026-11-27-ml-0"));
    }
}
