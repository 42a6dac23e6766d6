//! The durable store: SQLite (WAL) in `data_dir/corral.db`.
//!
//! What survives a crash lives here: jobs with their status (restart counts, conditions),
//! the scheduler's admissions (so a restart rebuilds its running set), replica process
//! records (pid + start time, to re-adopt replicas), ports held by admitted jobs, and
//! events. The schema is versioned with `PRAGMA user_version`.
//!
//! Writes that belong together are one transaction: a submit of several jobs is all or
//! nothing, an admission is stored with its ports, a job's removal takes its admission,
//! replicas and ports with it.
//!
//! # What each JSON column holds, and why an existing data directory keeps opening
//!
//! The store owns its format: what it writes must read back after the types in memory
//! change, in this release and the next (and, for added fields, in the previous one).
//!
//! - `jobs.spec`: [`corral_api::TrainingJob`] without its status; `jobs.status`:
//!   [`corral_api::TrainingJobStatus`]. The public resource types, versioned by their
//!   `apiVersion` and kept compatible as an API (fields are only added, with defaults). They
//!   have no `deny_unknown_fields` (unknown fields in user input are reported by
//!   `corral_api::document`, not by serde), so a field added by a newer release is ignored.
//! - `admissions.admission`: `record::AdmissionRow`, the store's own versioned record
//!   (`"v": 1`), converted explicitly from and to the scheduler's `RunningJob`, whose types
//!   are internal and strict (`deny_unknown_fields`) and may change at any time. Reads the
//!   unversioned layout corral 0.1.0 wrote. See the `record` module.
//! - `replicas.record`: [`ProcessRecord`], this crate's executor's own re-adoption record:
//!   no `deny_unknown_fields`; every field added after 0.1.0 must carry `#[serde(default)]`
//!   (`tests/store_fixture.rs` reads rows written by 0.1.0). `cgroup` is a [`CgroupRef`]
//!   tagged by `version` (`v1`/`v2`).
//! - `replicas.state`: [`ProcessState`] as serde writes an enum (`"Running"`,
//!   `{"Exited":{"code":1}}`, ...). The text `"Running"` is also a query key
//!   ([`Store::running_replicas`]), so its encoding must never change; a variant added later
//!   is unreadable by an older release (a `Corrupt` error naming the replica), which is the
//!   honest answer for a state it cannot act on.
//! - `served_models.spec`: [`corral_api::ServedModel`] without its status (see
//!   `served_models`); `served_revisions.spec` the same, as each revision was made (see
//!   `served_revisions`).
//! - `usage`: the usage ledger's closed intervals, plain SQL values (see `usage`); kept
//!   when their job is removed.
//! - `pipeline_runs`, `artifacts`: pipeline runs and the cache with its lineage (see
//!   `pipelines`).
//! - `ports`, `events`, and the other columns of `jobs` and `replicas`: plain SQL values.
//!
//! [`CgroupRef`]: crate::cgroup::CgroupRef

use std::path::{Path, PathBuf};

use corral_api::{TrainingJob, TrainingJobStatus};
use corral_core::sched::RunningJob;
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use crate::executor::{ProcessRecord, ProcessState};
use crate::lock::{DirLock, LockError, LockHolder};

mod audit;
mod events;
mod pipelines;
mod record;
mod served_models;
mod served_revisions;
mod stored_pipelines;
mod tenants;

pub use audit::{AUDIT_CAP, AUDIT_FILE, AuditEntry, AuditLog};
pub use pipelines::StoredRun;
pub use served_revisions::StoredRevision;
mod usage;

/// The schema version this code writes.
pub const SCHEMA_VERSION: i64 = 1;

/// The file name of the store inside the data directory.
pub const DB_FILE: &str = "corral.db";

/// The charts' history (corral-server's `history`), beside the store.
pub const HISTORY_FILE: &str = "history.db";

/// The SQLite databases of the data directory, each the server's alone (`0600`).
pub const DATABASE_FILES: [&str; 3] = [DB_FILE, AUDIT_FILE, HISTORY_FILE];

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("corrupt record {what}: {message}")]
    Corrupt { what: String, message: String },
    #[error("TrainingJob {namespace}/{name} already exists")]
    AlreadyExists { namespace: String, name: String },
    #[error(
        "the store has schema version {found}, newer than this program's {SCHEMA_VERSION}; \
         upgrade corral"
    )]
    TooNew { found: i64 },
    #[error("cannot create {path}: {message}")]
    Io { path: String, message: String },
    /// Another open store (another `corral up`) holds the data directory.
    #[error(
        "data directory {} is in use by {holder}; stop it first or use another --data-dir",
        dir.display()
    )]
    InUse { dir: PathBuf, holder: LockHolder },
    #[error("cannot lock {}: {error}", path.display())]
    Lock {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// A job as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredJob {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Submission order.
    pub seq: i64,
    pub submitted_ms: u64,
    pub converted_from: Option<String>,
    /// The job, its status included.
    pub job: TrainingJob,
    /// Deleted by the user; removed once its replicas have stopped.
    pub deleting: bool,
}

impl StoredJob {
    /// `namespace/name`: the scheduler's key.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A job to insert.
#[derive(Clone, Debug)]
pub struct NewJob {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub submitted_ms: u64,
    pub converted_from: Option<String>,
    pub job: TrainingJob,
}

/// The scheduler's placement of an admitted job. Stored as a versioned record of the
/// store's own (`store::record`), never as the scheduler's types directly.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredAdmission {
    pub pool: String,
    pub gpu_type: Option<String>,
    /// Request, placements and admission time: what the scheduler needs to take it back.
    pub running: RunningJob,
}

/// One replica process incarnation.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredReplica {
    /// The executor's name of the replica (unique across namespaces).
    pub name: String,
    pub namespace: String,
    pub job: String,
    pub job_uid: String,
    pub role: String,
    pub index: u32,
    pub attempt: u32,
    pub retry: u32,
    pub record: ProcessRecord,
    pub port: Option<u16>,
    pub started_ms: u64,
    /// Last state observed (terminal states are kept so that later ticks still see them).
    pub state: ProcessState,
}

/// Something that happened to a job.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredEvent {
    pub namespace: String,
    pub job: String,
    pub time_ms: u64,
    pub type_: String,
    pub reason: String,
    pub message: String,
}

/// The SQLite store. Single connection, owned by the cluster.
pub struct Store {
    /// Stopped (and joined) before the connection closes and the lock is released.
    checkpointer: Option<Checkpointer>,
    conn: Connection,
    /// The data directory's lock, held for the life of the store (none in memory).
    lock: Option<DirLock>,
}

/// How often the checkpointer copies the WAL into the database.
const CHECKPOINT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);
/// The WAL size (pages of 4 KiB) at which a commit checkpoints by itself, should the
/// checkpointer not keep up (SQLite's default is 1,000).
const BACKSTOP_CHECKPOINT_PAGES: i64 = 16_000;

/// Checkpoints the store's WAL on a thread and connection of its own.
struct Checkpointer {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    fn start(db: &Path) -> Result<Checkpointer, StoreError> {
        let conn = Connection::open(db)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        // The same durability as the writer's: the checkpoint fsyncs the WAL before it
        // copies, and the database after.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("corral-checkpoint".into())
            .spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(CHECKPOINT_INTERVAL)
                {
                    // PASSIVE: copies what no reader still needs, never waits for or
                    // blocks the writer. A failure is retried at the next interval.
                    let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
                }
            })
            .map_err(|e| StoreError::Io {
                path: db.display().to_string(),
                message: format!("cannot start the checkpoint thread: {e}"),
            })?;
        Ok(Checkpointer {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn json<T: Serialize>(v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Corrupt {
        what: "serialization".into(),
        message: e.to_string(),
    })
}

fn parse<T: for<'de> Deserialize<'de>>(what: &str, text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        what: what.to_string(),
        message: e.to_string(),
    })
}

const SCHEMA_V1: &str = "
CREATE TABLE jobs (
    namespace      TEXT NOT NULL,
    name           TEXT NOT NULL,
    uid            TEXT NOT NULL UNIQUE,
    seq            INTEGER NOT NULL,
    submitted_ms   INTEGER NOT NULL,
    converted_from TEXT,
    spec           TEXT NOT NULL,
    status         TEXT,
    deleting       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, name)
);
CREATE TABLE admissions (
    job_uid   TEXT PRIMARY KEY,
    admission TEXT NOT NULL
);
CREATE TABLE replicas (
    name       TEXT NOT NULL,
    attempt    INTEGER NOT NULL,
    retry      INTEGER NOT NULL,
    namespace  TEXT NOT NULL,
    job        TEXT NOT NULL,
    job_uid    TEXT NOT NULL,
    role       TEXT NOT NULL,
    idx        INTEGER NOT NULL,
    record     TEXT NOT NULL,
    port       INTEGER,
    started_ms INTEGER NOT NULL,
    state      TEXT NOT NULL,
    PRIMARY KEY (name, attempt, retry)
);
CREATE INDEX replicas_by_job ON replicas (job_uid);
CREATE TABLE ports (
    port    INTEGER PRIMARY KEY,
    job_uid TEXT NOT NULL,
    replica TEXT NOT NULL
);
CREATE TABLE events (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace TEXT NOT NULL,
    job       TEXT NOT NULL,
    time_ms   INTEGER NOT NULL,
    type      TEXT NOT NULL,
    reason    TEXT NOT NULL,
    message   TEXT NOT NULL
);
CREATE INDEX events_by_job ON events (namespace, job);
";

impl Store {
    /// Opens (or creates) `data_dir/corral.db`, in WAL mode, migrating the schema.
    ///
    /// Takes the data directory's lock first (see [`crate::lock`]) and holds it until the
    /// store is dropped: while another store has the directory open, in this process or
    /// another, this fails at once with [`StoreError::InUse`], before the database is touched.
    pub fn open(data_dir: &Path) -> Result<Store, StoreError> {
        std::fs::create_dir_all(data_dir).map_err(|e| StoreError::Io {
            path: data_dir.display().to_string(),
            message: e.to_string(),
        })?;
        let lock = DirLock::acquire(data_dir).map_err(|e| match e {
            LockError::Held { holder } => StoreError::InUse {
                dir: data_dir.to_path_buf(),
                holder,
            },
            LockError::Io { path, error } => StoreError::Lock { path, error },
        })?;
        let conn = Connection::open(data_dir.join(DB_FILE))?;
        let mut store = Self::init(conn, Some(lock))?;
        // Checkpoints copy the WAL into the database and fsync both: milliseconds on a
        // virtual disk, which the commit that crossed the threshold used to wait for while
        // the server held the cluster (every request behind it waited too). A thread of
        // the store's own does them on a connection of its own; a checkpoint runs beside
        // the writer in WAL mode. The writer's own threshold stays, far higher, as a bound
        // on the WAL should that thread fall behind.
        store
            .conn
            .pragma_update(None, "wal_autocheckpoint", BACKSTOP_CHECKPOINT_PAGES)?;
        store.checkpointer = Some(Checkpointer::start(&data_dir.join(DB_FILE))?);
        Ok(store)
    }

    /// A store in memory (tests).
    pub fn open_in_memory() -> Result<Store, StoreError> {
        Self::init(Connection::open_in_memory()?, None)
    }

    /// Records the API address in the data directory's lock file, so that a refused second
    /// open can say where the running server is. A no-op in memory.
    pub fn announce_address(&self, addr: &str) -> Result<(), StoreError> {
        match &self.lock {
            Some(lock) => lock
                .announce_address(addr)
                .map_err(|error| StoreError::Lock {
                    path: lock.path().to_path_buf(),
                    error,
                }),
            None => Ok(()),
        }
    }

    fn init(conn: Connection, lock: Option<DirLock>) -> Result<Store, StoreError> {
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        // Every statement this store runs stays prepared (about 30 of them).
        conn.set_prepared_statement_cache_capacity(64);
        // The bundled SQLite has STAT4, which recompiles a cached statement whenever a new
        // value is bound to a parameter compared with an indexed column (every lookup by
        // uid): a fixed plan keeps them compiled once. The plans are simple index lookups.
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
            true,
        )?;
        // WAL with synchronous=NORMAL: a commit is appended to the WAL file (in the OS page
        // cache) before `commit()` returns, and the WAL is fsynced at checkpoints. The threat
        // model is a crash of this process (`kill -9` of the server): the OS still holds
        // every committed page, so no acknowledged submit and no persisted status is lost,
        // and the order "status persisted before actions" holds. What NORMAL gives up is
        // durability of the last commits against a power loss or kernel crash (the database
        // is never corrupted, it rolls back to an earlier consistent state). FULL fsynced
        // every commit and capped submissions at ~100/s.
        let _mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::TooNew { found: version });
        }
        if version < 1 {
            let tx = conn.unchecked_transaction()?;
            tx.execute_batch(SCHEMA_V1)?;
            tx.pragma_update(None, "user_version", 1)?;
            tx.commit()?;
        }
        // The next seq (inserts), running replicas (recovery) and a job's ports (read at
        // each start of its replicas) without a table scan;
        // lookups by uid use the index of its UNIQUE constraint. Indexes only: existing
        // stores change without a schema change. `jobs_by_uid` duplicated the UNIQUE index,
        // and every job insert paid for both.
        conn.execute_batch(
            "DROP INDEX IF EXISTS jobs_by_uid;\n\
             CREATE INDEX IF NOT EXISTS jobs_by_seq ON jobs (seq);\n\
             CREATE INDEX IF NOT EXISTS replicas_by_state ON replicas (state);\n\
             CREATE INDEX IF NOT EXISTS ports_by_job ON ports (job_uid);",
        )?;
        conn.execute_batch(tenants::TENANT_IDS_TABLE)?;
        conn.execute_batch(served_models::SERVED_MODELS_TABLE)?;
        conn.execute_batch(served_revisions::SERVED_REVISIONS_TABLE)?;
        conn.execute_batch(usage::SCHEMA)?;
        conn.execute_batch(pipelines::SCHEMA)?;
        conn.execute_batch(stored_pipelines::SCHEMA)?;
        Ok(Store {
            checkpointer: None,
            conn,
            lock,
        })
    }

    /// The schema version of the open store.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        Ok(self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))?)
    }

    // ---- jobs ----

    /// Groups the writes that follow into one transaction, until [`Store::commit_batch`]:
    /// one append to the WAL for a whole step or submission instead of one per write. The
    /// writes that must be all or nothing (a submission, an admission with its ports, a
    /// removal) are savepoints inside it.
    pub fn begin_batch(&self) -> Result<(), StoreError> {
        self.conn.execute_batch("BEGIN IMMEDIATE")?;
        Ok(())
    }

    /// Undoes the writes since [`Store::begin_batch`] (after a failed one).
    pub fn rollback_batch(&self) -> Result<(), StoreError> {
        if !self.conn.is_autocommit() {
            self.conn.execute_batch("ROLLBACK")?;
        }
        Ok(())
    }

    /// Commits the writes since [`Store::begin_batch`].
    pub fn commit_batch(&self) -> Result<(), StoreError> {
        self.conn.execute_batch("COMMIT")?;
        Ok(())
    }

    /// Inserts every job, or none (one already exists, or any write fails). Returns each
    /// job's submission order (`seq`).
    pub fn insert_jobs(&mut self, jobs: &[NewJob]) -> Result<Vec<i64>, StoreError> {
        let tx = self.conn.savepoint()?;
        let mut seq: i64 = tx
            .prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM jobs")?
            .query_row([], |r| r.get(0))?;
        let mut seqs = Vec::with_capacity(jobs.len());
        for j in jobs {
            let exists: Option<i64> = tx
                .prepare_cached("SELECT 1 FROM jobs WHERE namespace = ?1 AND name = ?2")?
                .query_row(params![j.namespace, j.name], |r| r.get(0))
                .optional()?;
            if exists.is_some() {
                return Err(StoreError::AlreadyExists {
                    namespace: j.namespace.clone(),
                    name: j.name.clone(),
                });
            }
            seq += 1;
            seqs.push(seq);
            let mut spec = j.job.clone();
            let status = spec.status.take();
            tx.prepare_cached(
                "INSERT INTO jobs (namespace, name, uid, seq, submitted_ms, converted_from, \
                 spec, status) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                j.namespace,
                j.name,
                j.uid,
                seq,
                to_i64(j.submitted_ms),
                j.converted_from,
                json(&spec)?,
                status.as_ref().map(json).transpose()?,
            ])?;
        }
        tx.commit()?;
        Ok(seqs)
    }

    fn job_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawJob> {
        Ok(RawJob {
            namespace: r.get(0)?,
            name: r.get(1)?,
            uid: r.get(2)?,
            seq: r.get(3)?,
            submitted_ms: r.get(4)?,
            converted_from: r.get(5)?,
            spec: r.get(6)?,
            status: r.get(7)?,
            deleting: r.get(8)?,
        })
    }

    const JOB_COLUMNS: &str = "namespace, name, uid, seq, submitted_ms, converted_from, spec, \
                               status, deleting";

    /// Every job, in submission order.
    pub fn jobs(&self) -> Result<Vec<StoredJob>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM jobs ORDER BY seq",
            Self::JOB_COLUMNS
        ))?;
        let raws = stmt
            .query_map([], Self::job_from_row)?
            .collect::<Result<Vec<_>, _>>()?;
        raws.into_iter().map(RawJob::decode).collect()
    }

    /// Every job, in submission order, one at a time (a long history is never all in
    /// memory at once).
    pub fn for_each_job(
        &self,
        mut f: impl FnMut(StoredJob) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM jobs ORDER BY seq",
            Self::JOB_COLUMNS
        ))?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            f(Self::job_from_row(row)?.decode()?)?;
        }
        Ok(())
    }

    /// One job.
    pub fn job(&self, namespace: &str, name: &str) -> Result<Option<StoredJob>, StoreError> {
        let raw = self
            .conn
            .query_row(
                &format!(
                    "SELECT {} FROM jobs WHERE namespace = ?1 AND name = ?2",
                    Self::JOB_COLUMNS
                ),
                params![namespace, name],
                Self::job_from_row,
            )
            .optional()?;
        raw.map(RawJob::decode).transpose()
    }

    /// Replaces a job's spec (suspend, resume); the status is kept.
    pub fn update_spec(&self, uid: &str, job: &TrainingJob) -> Result<(), StoreError> {
        let mut spec = job.clone();
        spec.status = None;
        self.conn
            .prepare_cached("UPDATE jobs SET spec = ?2 WHERE uid = ?1")?
            .execute(params![uid, json(&spec)?])?;
        Ok(())
    }

    /// Records a job's status (before the actions that follow from it are applied).
    pub fn save_status(&self, uid: &str, status: &TrainingJobStatus) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("UPDATE jobs SET status = ?2 WHERE uid = ?1")?
            .execute(params![uid, json(status)?])?;
        Ok(())
    }

    /// Marks a job deleted; it is removed once its replicas have stopped.
    pub fn mark_deleting(&self, uid: &str) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("UPDATE jobs SET deleting = 1 WHERE uid = ?1")?
            .execute(params![uid])?;
        Ok(())
    }

    /// Removes a job with its admission, replica records, ports and events.
    pub fn remove_job(&mut self, uid: &str) -> Result<(), StoreError> {
        let tx = self.conn.savepoint()?;
        let who: Option<(String, String)> = tx
            .prepare_cached("SELECT namespace, name FROM jobs WHERE uid = ?1")?
            .query_row(params![uid], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        tx.prepare_cached("DELETE FROM jobs WHERE uid = ?1")?
            .execute(params![uid])?;
        tx.prepare_cached("DELETE FROM admissions WHERE job_uid = ?1")?
            .execute(params![uid])?;
        tx.prepare_cached("DELETE FROM replicas WHERE job_uid = ?1")?
            .execute(params![uid])?;
        tx.prepare_cached("DELETE FROM ports WHERE job_uid = ?1")?
            .execute(params![uid])?;
        if let Some((ns, name)) = who {
            tx.prepare_cached("DELETE FROM events WHERE namespace = ?1 AND job = ?2")?
                .execute(params![ns, name])?;
        }
        tx.commit()?;
        Ok(())
    }

    // ---- admissions and ports ----

    /// Stores an admission together with the ports of its replicas (replica name -> port).
    pub fn admit(
        &mut self,
        uid: &str,
        admission: &StoredAdmission,
        ports: &[(String, u16)],
    ) -> Result<(), StoreError> {
        let tx = self.conn.savepoint()?;
        tx.prepare_cached(
            "INSERT OR REPLACE INTO admissions (job_uid, admission) VALUES (?1, ?2)",
        )?
        .execute(params![
            uid,
            record::encode(admission).map_err(|e| StoreError::Corrupt {
                what: format!("admission of {uid}"),
                message: e.to_string(),
            })?
        ])?;
        tx.prepare_cached("DELETE FROM ports WHERE job_uid = ?1")?
            .execute(params![uid])?;
        for (replica, port) in ports {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO ports (port, job_uid, replica) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![port, uid, replica])?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Forgets an admission but keeps the job's ports (its replicas still stop).
    pub fn drop_admission(&self, uid: &str) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("DELETE FROM admissions WHERE job_uid = ?1")?
            .execute(params![uid])?;
        Ok(())
    }

    /// Forgets an admission and the job's ports.
    pub fn release(&mut self, uid: &str) -> Result<(), StoreError> {
        let tx = self.conn.savepoint()?;
        tx.prepare_cached("DELETE FROM admissions WHERE job_uid = ?1")?
            .execute(params![uid])?;
        tx.prepare_cached("DELETE FROM ports WHERE job_uid = ?1")?
            .execute(params![uid])?;
        tx.commit()?;
        Ok(())
    }

    /// Every admission, by job uid.
    pub fn admissions(&self) -> Result<Vec<(String, StoredAdmission)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT job_uid, admission FROM admissions ORDER BY job_uid")?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
            .collect::<Result<Vec<_>, _>>()?;
        rows.into_iter()
            .map(|(uid, text)| match record::decode(&text) {
                Ok(a) => Ok((uid, a)),
                Err(message) => Err(StoreError::Corrupt {
                    what: format!("admission of {uid}"),
                    message,
                }),
            })
            .collect()
    }

    /// Ports held, as (port, job uid, replica name).
    pub fn ports(&self) -> Result<Vec<(u16, String, String)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT port, job_uid, replica FROM ports ORDER BY port")?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// The ports one job holds, as (replica name, port): what its replicas' env names.
    pub fn ports_of(&self, job_uid: &str) -> Result<Vec<(String, u16)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT replica, port FROM ports WHERE job_uid = ?1")?;
        let rows = stmt
            .query_map([job_uid], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    // ---- replicas ----

    /// Records (or updates) a replica incarnation.
    pub fn put_replica(&self, r: &StoredReplica) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO replicas (name, attempt, retry, namespace, job, job_uid, \
             role, idx, record, port, started_ms, state) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            )?
            .execute(params![
                r.name,
                r.attempt,
                r.retry,
                r.namespace,
                r.job,
                r.job_uid,
                r.role,
                r.index,
                json(&r.record)?,
                r.port,
                to_i64(r.started_ms),
                json(&r.state)?,
            ])?;
        Ok(())
    }

    /// Updates the observed state of a replica incarnation.
    pub fn set_replica_state(
        &self,
        name: &str,
        attempt: u32,
        retry: u32,
        state: ProcessState,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "UPDATE replicas SET state = ?4 WHERE name = ?1 AND attempt = ?2 AND retry = ?3",
            )?
            .execute(params![name, attempt, retry, json(&state)?])?;
        Ok(())
    }

    /// Forgets a replica incarnation (its files and logs stay on disk).
    pub fn remove_replica(&self, name: &str, attempt: u32, retry: u32) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("DELETE FROM replicas WHERE name = ?1 AND attempt = ?2 AND retry = ?3")?
            .execute(params![name, attempt, retry])?;
        Ok(())
    }

    /// Every replica incarnation, by name then incarnation.
    pub fn replicas(&self) -> Result<Vec<StoredReplica>, StoreError> {
        self.replicas_where("", [])
    }

    /// The replica incarnations of one job, by name then incarnation.
    pub fn replicas_of(&self, job_uid: &str) -> Result<Vec<StoredReplica>, StoreError> {
        self.replicas_where("WHERE job_uid = ?1", [job_uid])
    }

    /// The recorded incarnations of one replica (by its process name).
    pub fn replicas_named(&self, name: &str) -> Result<Vec<StoredReplica>, StoreError> {
        self.replicas_where("WHERE name = ?1", [name])
    }

    /// The replicas recorded as running: what the control loop looks at, without reading
    /// the history of every finished job.
    pub fn running_replicas(&self) -> Result<Vec<StoredReplica>, StoreError> {
        self.replicas_where("WHERE state = ?1", [json(&ProcessState::Running)?])
    }

    fn replicas_where<P: rusqlite::Params>(
        &self,
        filter: &str,
        params: P,
    ) -> Result<Vec<StoredReplica>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT name, attempt, retry, namespace, job, job_uid, role, idx, record, port, \
             started_ms, state FROM replicas {filter} ORDER BY name, attempt, retry"
        ))?;
        let rows = stmt
            .query_map(params, |r| {
                Ok((
                    (
                        r.get::<_, String>(0)?,
                        r.get::<_, u32>(1)?,
                        r.get::<_, u32>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, String>(4)?,
                        r.get::<_, String>(5)?,
                    ),
                    (
                        r.get::<_, String>(6)?,
                        r.get::<_, u32>(7)?,
                        r.get::<_, String>(8)?,
                        r.get::<_, Option<u16>>(9)?,
                        r.get::<_, i64>(10)?,
                        r.get::<_, String>(11)?,
                    ),
                ))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        rows.into_iter()
            .map(
                |(
                    (name, attempt, retry, namespace, job, job_uid),
                    (role, index, record, port, started, state),
                )| {
                    let what = format!("replica {name}");
                    Ok(StoredReplica {
                        record: parse(&what, &record)?,
                        state: parse(&what, &state)?,
                        name,
                        attempt,
                        retry,
                        namespace,
                        job,
                        job_uid,
                        role,
                        index,
                        port,
                        started_ms: to_u64(started),
                    })
                },
            )
            .collect()
    }
}

struct RawJob {
    namespace: String,
    name: String,
    uid: String,
    seq: i64,
    submitted_ms: i64,
    converted_from: Option<String>,
    spec: String,
    status: Option<String>,
    deleting: bool,
}

impl RawJob {
    fn decode(self) -> Result<StoredJob, StoreError> {
        let what = format!("job {}/{}", self.namespace, self.name);
        let mut job: TrainingJob = parse(&what, &self.spec)?;
        job.status = self
            .status
            .as_deref()
            .map(|s| parse(&what, s))
            .transpose()?;
        Ok(StoredJob {
            namespace: self.namespace,
            name: self.name,
            uid: self.uid,
            seq: self.seq,
            submitted_ms: to_u64(self.submitted_ms),
            converted_from: self.converted_from,
            job,
            deleting: self.deleting,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every job insert updates each of the table's indexes: one on uid, not two, and the
    /// status update by uid (every step of a running job) still finds its row through it.
    #[test]
    fn jobs_have_one_index_on_uid_and_updates_use_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        let mut indexes = store
            .conn
            .prepare("SELECT name FROM pragma_index_list('jobs')")
            .expect("prepare");
        let names: Vec<String> = indexes
            .query_map([], |r| r.get(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("names");
        let on_uid = names
            .iter()
            .filter(|index| {
                let columns: Vec<String> = store
                    .conn
                    .prepare("SELECT name FROM pragma_index_info(?1)")
                    .and_then(|mut s| {
                        s.query_map([index.as_str()], |r| r.get(0))?
                            .collect::<Result<_, _>>()
                    })
                    .expect("columns");
                columns == ["uid"]
            })
            .count();
        assert_eq!(on_uid, 1, "indexes of jobs: {names:?}");
        let plan: String = store
            .conn
            .query_row(
                "EXPLAIN QUERY PLAN UPDATE jobs SET status = ?2 WHERE uid = ?1",
                ["a", "b"],
                |r| r.get(3),
            )
            .expect("plan");
        assert!(plan.contains("USING INDEX"), "{plan}");
    }

    #[test]
    fn a_jobs_ports_are_read_by_index() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        for (port, uid, replica) in [
            (30001, "a", "a-worker-0"),
            (30002, "b", "b-worker-0"),
            (30003, "a", "a-worker-1"),
        ] {
            store
                .conn
                .execute(
                    "INSERT INTO ports (port, job_uid, replica) VALUES (?1, ?2, ?3)",
                    params![port, uid, replica],
                )
                .expect("insert");
        }
        let mut ports = store.ports_of("a").expect("ports");
        ports.sort();
        assert_eq!(
            ports,
            [
                ("a-worker-0".to_string(), 30001),
                ("a-worker-1".to_string(), 30003)
            ]
        );
        assert!(store.ports_of("c").expect("ports").is_empty());
        let plan: String = store
            .conn
            .query_row(
                "EXPLAIN QUERY PLAN SELECT replica, port FROM ports WHERE job_uid = ?1",
                ["a"],
                |r| r.get(3),
            )
            .expect("plan");
        assert!(plan.contains("USING INDEX ports_by_job"), "{plan}");
    }
}
