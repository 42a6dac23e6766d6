//! The history store: a bounded time series for the dashboard's charts without Prometheus.
//!
//! Once a minute the server samples what it already shows (`nodes`, `top`) and keeps, per
//! minute: each GPU's utilisation and memory in use (`gpu`, keyed `node/index`), each
//! running replica's CPU (cores, from its CPU time since the last sample), memory, GPU
//! utilisation and GPU memory (`replica`, keyed `namespace/job/replica`), and the GPUs
//! used and free of each GPU type (`gpus`, keyed by type, `-` for GPUs without one).
//!
//! Bounded twice: minutes older than [`RETENTION_MINUTES`] (a week) are dropped, and at
//! most [`MAX_SAMPLES`] rows are kept (about 60 MB on disk), the oldest minutes first.
//! Kept in `<data>/history.db`, a SQLite database of its own (WAL, its own connection, a
//! small page cache), so that the charts survive a restart and never wait on, or make
//! wait, the cluster's store.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use corral_local::cluster::{NodeInfo, ReplicaUsageRow};
use rusqlite::{Connection, params};
use serde::{Deserialize, Serialize};

/// A week of minutes.
pub const RETENTION_MINUTES: i64 = 7 * 24 * 60;
/// The most rows kept, of every series together: a week of 100 series.
pub const MAX_SAMPLES: i64 = 1_000_000;
// The file of the history store inside the data directory.
pub use corral_local::store::HISTORY_FILE;

/// The kinds of series, and the names of their values, in column order.
pub const KINDS: &[(&str, &[&str])] = &[
    ("gpu", &["utilizationPercent", "memoryUsedBytes"]),
    (
        "replica",
        &[
            "cpuCores",
            "memoryBytes",
            "gpuUtilizationPercent",
            "gpuMemoryBytes",
        ],
    ),
    ("gpus", &["used", "free"]),
];

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS samples (
    kind      TEXT NOT NULL,
    key       TEXT NOT NULL,
    namespace TEXT NOT NULL,
    minute    INTEGER NOT NULL,
    v0 REAL, v1 REAL, v2 REAL, v3 REAL,
    PRIMARY KEY (kind, key, minute)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS samples_by_minute ON samples (minute);
";

/// One sample to keep.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub kind: &'static str,
    pub key: String,
    /// The namespace of a replica's series; `""` for the cluster's own.
    pub namespace: String,
    pub values: [Option<f64>; 4],
}

/// One series as the API answers it: times (Unix seconds, one a minute where sampled) and
/// each value's numbers, aligned with the times (`null` where not read).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Series {
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub times: Vec<i64>,
    pub values: BTreeMap<String, Vec<Option<f64>>>,
}

pub struct History {
    conn: Mutex<Connection>,
    /// Rows held (counted at open, kept up to date by the writer).
    rows: Mutex<i64>,
    /// CPU time of each replica at the last sample, for its rate.
    last_cpu: Mutex<BTreeMap<String, (i64, f64)>>,
    /// The most rows kept ([`MAX_SAMPLES`]).
    cap: i64,
}

impl History {
    /// Opens (or creates) `<data_dir>/history.db`.
    pub fn open(data_dir: &Path) -> Result<History, String> {
        let path = data_dir.join(HISTORY_FILE);
        let failed = |e: rusqlite::Error| format!("the history store {}: {e}", path.display());
        corral_local::tenancy::private_file(&path)
            .map_err(|e| format!("the history store {}: {e}", path.display()))?;
        let conn = Connection::open(&path).map_err(failed)?;
        Self::init(conn).map_err(failed)
    }

    /// A history store in memory (tests).
    pub fn open_in_memory() -> Result<History, String> {
        let conn = Connection::open_in_memory().map_err(|e| e.to_string())?;
        Self::init(conn).map_err(|e| e.to_string())
    }

    fn init(conn: Connection) -> rusqlite::Result<History> {
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let _mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        // 256 KiB of page cache (SQLite's default is 2 MiB): the server's idle memory
        // target is 15 MB, and a chart reads a few thousand rows by index.
        conn.pragma_update(None, "cache_size", -256)?;
        conn.execute_batch(SCHEMA)?;
        let rows: i64 = conn.query_row("SELECT COUNT(*) FROM samples", [], |r| r.get(0))?;
        Ok(History {
            conn: Mutex::new(conn),
            rows: Mutex::new(rows),
            last_cpu: Mutex::new(BTreeMap::new()),
            cap: MAX_SAMPLES,
        })
    }

    /// What to keep of one look at the cluster at `minute` (Unix minutes).
    pub fn samples(&self, minute: i64, nodes: &[NodeInfo], top: &[ReplicaUsageRow]) -> Vec<Sample> {
        let mut out = Vec::new();
        let mut by_type: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for n in nodes {
            for g in &n.gpus {
                out.push(Sample {
                    kind: "gpu",
                    key: format!("{}/{}", n.name, g.index),
                    namespace: String::new(),
                    values: [
                        g.utilization_percent.map(f64::from),
                        g.memory_used_bytes.map(|b| b as f64),
                        None,
                        None,
                    ],
                });
                let ty = n.gpu_type.clone().unwrap_or_else(|| "-".to_string());
                let t = by_type.entry(ty).or_default();
                if g.used_by.is_some() {
                    t.0 += 1.0;
                } else {
                    t.1 += 1.0;
                }
            }
        }
        for (ty, (used, free)) in by_type {
            out.push(Sample {
                kind: "gpus",
                key: ty,
                namespace: String::new(),
                values: [Some(used), Some(free), None, None],
            });
        }
        let mut last = self.last_cpu.lock().unwrap_or_else(|p| p.into_inner());
        let mut seen = BTreeMap::new();
        for r in top {
            let key = format!("{}/{}/{}", r.namespace, r.job, r.replica);
            // Cores: CPU seconds since the last sample over the seconds between them.
            let cores = match (r.cpu_seconds, last.get(&key)) {
                (Some(now), Some(&(at, before))) if minute > at && now >= before => {
                    Some((now - before) / ((minute - at) as f64 * 60.0))
                }
                _ => None,
            };
            if let Some(c) = r.cpu_seconds {
                seen.insert(key.clone(), (minute, c));
            }
            out.push(Sample {
                kind: "replica",
                key,
                namespace: r.namespace.clone(),
                values: [
                    cores,
                    r.memory_bytes.map(|b| b as f64),
                    r.gpu_utilization_percent.map(f64::from),
                    r.gpu_memory_bytes.map(|b| b as f64),
                ],
            });
        }
        *last = seen;
        out
    }

    /// Keeps the samples of `minute`, then drops what is past the retention or the cap.
    pub fn record(&self, minute: i64, samples: &[Sample]) -> Result<(), String> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn.transaction().map_err(|e| e.to_string())?;
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO samples (kind, key, namespace, minute, v0, v1, v2, v3)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )
                .map_err(|e| e.to_string())?;
            for s in samples {
                let [a, b, c, d] = s.values;
                insert
                    .execute(params![s.kind, s.key, s.namespace, minute, a, b, c, d])
                    .map_err(|e| e.to_string())?;
            }
        }
        tx.execute(
            "DELETE FROM samples WHERE minute <= ?1",
            params![minute - RETENTION_MINUTES],
        )
        .map_err(|e| e.to_string())?;
        let count = |tx: &rusqlite::Transaction<'_>| -> Result<i64, String> {
            tx.query_row("SELECT COUNT(*) FROM samples", [], |r| r.get(0))
                .map_err(|e| e.to_string())
        };
        let mut rows = count(&tx)?;
        if rows > self.cap {
            // The oldest minutes go first, whole, until the rows fit.
            let cut: Option<i64> = tx
                .query_row(
                    "SELECT minute FROM samples ORDER BY minute LIMIT 1 OFFSET ?1",
                    params![rows - self.cap - 1],
                    |r| r.get(0),
                )
                .ok();
            if let Some(cut) = cut {
                tx.execute("DELETE FROM samples WHERE minute <= ?1", params![cut])
                    .map_err(|e| e.to_string())?;
                rows = count(&tx)?;
            }
        }
        tx.commit().map_err(|e| e.to_string())?;
        *self.rows.lock().unwrap_or_else(|p| p.into_inner()) = rows;
        Ok(())
    }

    /// Rows held now.
    pub fn rows(&self) -> i64 {
        *self.rows.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The series of one kind between two minutes (both included), of one namespace or
    /// all (`namespace` applies to replicas; the cluster's series have none), optionally
    /// only keys that start with `prefix`.
    pub fn series(
        &self,
        kind: &str,
        from_minute: i64,
        to_minute: i64,
        namespace: Option<&str>,
        prefix: Option<&str>,
    ) -> Result<Vec<Series>, String> {
        let Some((_, names)) = KINDS.iter().find(|(k, _)| *k == kind) else {
            return Err(format!("no series of kind `{kind}`"));
        };
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let mut stmt = conn
            .prepare_cached(
                "SELECT key, namespace, minute, v0, v1, v2, v3 FROM samples
                 WHERE kind = ?1 AND minute >= ?2 AND minute <= ?3
                   AND (?4 IS NULL OR namespace = ?4)
                   AND (?5 IS NULL OR substr(key, 1, length(?5)) = ?5)
                 ORDER BY key, minute",
            )
            .map_err(|e| e.to_string())?;
        let rows = stmt
            .query_map(
                params![kind, from_minute, to_minute, namespace, prefix],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, i64>(2)?,
                        [
                            r.get::<_, Option<f64>>(3)?,
                            r.get::<_, Option<f64>>(4)?,
                            r.get::<_, Option<f64>>(5)?,
                            r.get::<_, Option<f64>>(6)?,
                        ],
                    ))
                },
            )
            .map_err(|e| e.to_string())?;
        let mut out: Vec<Series> = Vec::new();
        for row in rows {
            let (key, ns, minute, values) = row.map_err(|e| e.to_string())?;
            if out.last().is_none_or(|s| s.key != key) {
                out.push(Series {
                    key,
                    namespace: ns,
                    times: Vec::new(),
                    values: names.iter().map(|n| (n.to_string(), Vec::new())).collect(),
                });
            }
            if let Some(s) = out.last_mut() {
                s.times.push(minute * 60);
                for (i, n) in names.iter().enumerate() {
                    if let Some(v) = s.values.get_mut(*n) {
                        v.push(values[i]);
                    }
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(kind: &'static str, key: &str, ns: &str, v: f64) -> Sample {
        Sample {
            kind,
            key: key.to_string(),
            namespace: ns.to_string(),
            values: [Some(v), None, None, None],
        }
    }

    #[test]
    fn minutes_past_a_week_are_dropped_and_series_read_back_aligned() {
        let h = History::open_in_memory().expect("history");
        h.record(100, &[sample("gpu", "n/0", "", 50.0)])
            .expect("record");
        h.record(101, &[sample("gpu", "n/0", "", 60.0)])
            .expect("record");
        let s = h.series("gpu", 0, 200, None, None).expect("series");
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].times, vec![6000, 6060]);
        assert_eq!(
            s[0].values["utilizationPercent"],
            vec![Some(50.0), Some(60.0)]
        );
        assert_eq!(s[0].values["memoryUsedBytes"], vec![None, None]);
        h.record(100 + RETENTION_MINUTES, &[sample("gpu", "n/0", "", 70.0)])
            .expect("record");
        let s = h.series("gpu", 0, i64::MAX, None, None).expect("series");
        assert_eq!(s[0].times.len(), 2, "minute 100 is a week old");
        assert_eq!(h.rows(), 2);
    }

    #[test]
    fn past_the_cap_the_oldest_minutes_go_first() {
        let mut h = History::open_in_memory().expect("history");
        h.cap = 5;
        for minute in 0..4 {
            h.record(
                minute,
                &[sample("gpu", "n/0", "", 1.0), sample("gpu", "n/1", "", 2.0)],
            )
            .expect("record");
        }
        assert_eq!(h.rows(), 4, "minutes 0 and 1 went to keep 5 rows at most");
        let s = h.series("gpu", 0, 10, None, None).expect("series");
        assert_eq!(s[0].times, vec![120, 180]);
    }

    #[test]
    fn replicas_are_filtered_by_namespace_and_prefix() {
        let h = History::open_in_memory().expect("history");
        h.record(
            1,
            &[
                sample("replica", "a/j/j-worker-0", "a", 1.0),
                sample("replica", "b/k/k-worker-0", "b", 2.0),
            ],
        )
        .expect("record");
        let a = h.series("replica", 0, 10, Some("a"), None).expect("a");
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].key, "a/j/j-worker-0");
        let k = h.series("replica", 0, 10, None, Some("b/k/")).expect("k");
        assert_eq!(k.len(), 1);
        assert!(h.series("nope", 0, 10, None, None).is_err());
    }
}
