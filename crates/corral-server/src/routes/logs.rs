//! A replica's log: the current or previous incarnation, its last lines or recent ones,
//! with their times, or followed into each new incarnation until the job ends.

use std::path::PathBuf;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, header};
use axum::response::IntoResponse;
use corral_api::training_job::Role;
use corral_local::cluster::{JobState, ReplicaLog};
use jiff::Timestamp;
use serde::Deserialize;
use tokio::io::AsyncReadExt;

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;

use super::ApiResult;

/// `?replica=<job>-<role>-<i>|<role>-<i>`, or `?role=&index=`; `follow=true` streams until
/// the job ends, into each new incarnation of the replica; `previous=true`: the incarnation
/// before the current one; `tail=N`: only the last N lines; `sinceSeconds=N`: only those
/// that arrived in the last N seconds; `timestamps=true`: each line with its time.
#[derive(Debug, Default, Deserialize)]
pub struct LogQuery {
    pub replica: Option<String>,
    pub role: Option<String>,
    pub index: Option<u32>,
    #[serde(default)]
    pub follow: bool,
    #[serde(default)]
    pub previous: bool,
    pub tail: Option<u64>,
    /// Prefix each line with the time it arrived (RFC 3339, UTC).
    #[serde(default)]
    pub timestamps: bool,
    /// Only lines that arrived in the last N seconds.
    #[serde(rename = "sinceSeconds")]
    pub since_seconds: Option<u64>,
}

/// The replica a log request means, as `<role>-<index>`, checked against the job's roles.
fn pick_replica(job: &corral_api::TrainingJob, q: &LogQuery) -> Result<String, ApiError> {
    let roles: Vec<String> = job
        .spec
        .replicas
        .iter()
        .filter(|(_, r)| r.count > 0)
        .map(|(role, r)| format!("{role}-0..{}", r.count.saturating_sub(1)))
        .collect();
    let bad = |what: String| {
        ApiError::bad_request(format!(
            "{what}; job {} has replicas {}",
            job.name(),
            roles.join(", ")
        ))
    };
    let (role, index) = if let Some(r) = &q.replica {
        let short = r
            .strip_prefix(job.name())
            .and_then(|s| s.strip_prefix('-'))
            .unwrap_or(r);
        let Some((role, index)) = short.rsplit_once('-') else {
            return Err(bad(format!(
                "`{r}` is not a replica name (`<role>-<index>`, e.g. `worker-0`)"
            )));
        };
        let index: u32 = index
            .parse()
            .map_err(|_| bad(format!("`{r}`: `{index}` is not a replica index")))?;
        (role.to_string(), index)
    } else if let Some(role) = &q.role {
        (role.clone(), q.index.unwrap_or(0))
    } else {
        let first = job
            .spec
            .replicas
            .iter()
            .find(|(_, r)| r.count > 0)
            .map(|(role, _)| role.as_str().to_string())
            .ok_or_else(|| bad("the job has no replicas".into()))?;
        (first, q.index.unwrap_or(0))
    };
    let parsed: Role = role
        .parse()
        .map_err(|_| bad(format!("the job has no role `{role}`")))?;
    let Some(spec) = job.spec.replicas.get(&parsed) else {
        return Err(bad(format!("the job has no role `{role}`")));
    };
    let max = job
        .spec
        .elastic
        .as_ref()
        .and_then(|e| e.max_replicas)
        .unwrap_or(spec.count)
        .max(spec.count);
    if index >= max {
        return Err(bad(format!("{role} has no replica {index}")));
    }
    Ok(format!("{role}-{index}"))
}

pub(super) async fn logs(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
    query: Result<Query<LogQuery>, QueryRejection>,
) -> ApiResult {
    caller.check(&namespace)?;
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    if query.previous && query.follow {
        return Err(ApiError::bad_request(
            "`previous` and `follow` do not go together: a previous incarnation has ended"
                .to_string(),
        ));
    }
    let (ns, n) = (namespace.clone(), name.clone());
    let Some(job) = state.with_cluster(move |c| c.get(&ns, &n)).await?? else {
        return Err(ApiError::job_not_found(&namespace, &name));
    };
    let replica = pick_replica(&job, &query)?;
    let full = format!("{name}-{replica}");
    let tail = LogTail {
        state: state.clone(),
        namespace: namespace.clone(),
        job: name.clone(),
        replica: replica.clone(),
        follow: query.follow,
        tail: query.tail,
        view: LogView::of(&query),
        at_line_start: true,
        shown: None,
        file: None,
        queued: Vec::new(),
        finished: false,
    };
    let logs = tail.incarnations().await?;
    let mut response = if query.follow {
        let stream = futures_util::stream::unfold(tail, |mut t| async move {
            t.next_chunk().await.map(|chunk| (chunk, t))
        });
        Body::from_stream(stream).into_response()
    } else {
        let picked = if query.previous {
            let Some(log) = logs.len().checked_sub(2).and_then(|i| logs.get(i)) else {
                return Err(ApiError::not_found(match logs.len() {
                    0 => format!("replica {full} has not started yet, so it has no log"),
                    _ => format!("replica {full} has run once, so it has no previous incarnation"),
                }));
            };
            log
        } else {
            let Some(log) = logs.last() else {
                return Err(ApiError::not_found(format!(
                    "replica {full} has not started yet, so it has no log; `corral logs \
                     {name} {replica} -f` waits for it"
                )));
            };
            log
        };
        let path = picked.path.clone();
        let view = LogView::of(&query);
        let text = tokio::task::spawn_blocking(move || view.read(&path))
            .await
            .map_err(|e| ApiError::internal(format!("reading the log: {e}")))?
            .map_err(|e| ApiError::internal(format!("reading the log of {full}: {e}")))?;
        Body::from(last_lines(text, query.tail)).into_response()
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Ok(v) = HeaderValue::from_str(&full) {
        headers.insert("x-corral-replica", v);
    }
    Ok(response)
}

/// How lines are shown: with their times, and from when on.
#[derive(Clone, Copy, Debug)]
struct LogView {
    timestamps: bool,
    /// Unix milliseconds: lines that arrived earlier are left out.
    since_ms: Option<i64>,
}

impl LogView {
    fn of(q: &LogQuery) -> Self {
        LogView {
            timestamps: q.timestamps,
            since_ms: q.since_seconds.map(|s| {
                Timestamp::now()
                    .as_millisecond()
                    .saturating_sub(i64::try_from(s).unwrap_or(i64::MAX).saturating_mul(1000))
            }),
        }
    }

    /// A whole incarnation's log (the rotated segment, then the current one), as shown.
    fn read(self, path: &std::path::Path) -> std::io::Result<Vec<u8>> {
        self.read_counted(path).map(|(text, _)| text)
    }

    /// `read`, and how many bytes of the log it went through.
    fn read_counted(self, path: &std::path::Path) -> std::io::Result<(Vec<u8>, u64)> {
        let mut out = Vec::new();
        let mut read = 0u64;
        for line in corral_local::executor::log_times::timed_lines(path)? {
            read += line.text.len() as u64;
            let ms = line.unix_ms.and_then(|m| i64::try_from(m).ok());
            // A line of unknown time is kept: it may be recent.
            if let (Some(since), Some(ms)) = (self.since_ms, ms)
                && ms < since
            {
                continue;
            }
            if self.timestamps {
                out.extend(stamp(ms).as_bytes());
            }
            out.extend(line.text);
        }
        Ok((out, read))
    }

    /// Output read live: each line that starts in `chunk` gets the time of reading (within
    /// one poll of its arrival).
    fn live(self, chunk: &[u8], at_line_start: &mut bool) -> Vec<u8> {
        if !self.timestamps {
            return chunk.to_vec();
        }
        let now = stamp(Some(Timestamp::now().as_millisecond()));
        let mut out = Vec::with_capacity(chunk.len() + 32);
        for b in chunk {
            if *at_line_start {
                out.extend(now.as_bytes());
            }
            out.push(*b);
            *at_line_start = *b == b'\n';
        }
        out
    }
}

/// `2026-11-23T13:00:00.123Z ` (kubectl's form); `-` when the time is unknown.
fn stamp(ms: Option<i64>) -> String {
    match ms.and_then(|m| Timestamp::from_millisecond(m).ok()) {
        Some(t) => format!("{} ", t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ")),
        None => "- ".to_string(),
    }
}

/// The last `n` lines of `text` (a last line without its newline counts), or all of it.
fn last_lines(text: Vec<u8>, n: Option<u64>) -> Vec<u8> {
    let Some(n) = n else {
        return text;
    };
    if n == 0 {
        return Vec::new();
    }
    let body = text.strip_suffix(b"\n").unwrap_or(&text);
    let mut seen = 0u64;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            seen += 1;
            if seen == n {
                return text[i + 1..].to_vec();
            }
        }
    }
    text
}

/// The line that introduces an incarnation in a followed log, so that a reader sees where
/// one ended and the next began.
fn incarnation_mark(replica: &str, ordinal: usize, log: &ReplicaLog) -> String {
    let started = log
        .started
        .map(|t| format!(", started {}", t.round(jiff::Unit::Second).unwrap_or(t)))
        .unwrap_or_default();
    let restarts = match ordinal {
        1 => "first run".to_string(),
        2 => "after 1 restart".to_string(),
        n => format!("after {} restarts", n - 1),
    };
    format!("==> {replica}: incarnation {ordinal} ({restarts}{started}) <==\n")
}

/// Follows a replica's log: its current incarnation, then every later one as it starts,
/// until the job ends.
struct LogTail {
    state: AppState,
    namespace: String,
    job: String,
    replica: String,
    follow: bool,
    /// Lines of the first incarnation shown to start from the end of (`--tail`).
    tail: Option<u64>,
    view: LogView,
    /// Whether the next byte read live starts a line (for timestamps).
    at_line_start: bool,
    /// 0-based position of the incarnation being read, among the replica's incarnations.
    shown: Option<usize>,
    file: Option<tokio::fs::File>,
    /// What to send before reading on (a mark, the start of an incarnation).
    queued: Vec<Bytes>,
    /// The job ended: read what is left, then stop.
    finished: bool,
}

const POLL: Duration = Duration::from_millis(200);

impl LogTail {
    async fn incarnations(&self) -> Result<Vec<ReplicaLog>, ApiError> {
        let (ns, job, replica) = (
            self.namespace.clone(),
            self.job.clone(),
            self.replica.clone(),
        );
        self.state
            .with_cluster(move |c| c.replica_logs(&ns, &job, &replica))
            .await
    }

    /// Whether the job is over (finished, or gone).
    async fn job_over(&self) -> bool {
        let (ns, job) = (self.namespace.clone(), self.job.clone());
        match self
            .state
            .with_cluster(move |c| c.describe(&ns, &job))
            .await
        {
            Ok(Ok(Some(d))) => {
                d.summary.state.is_finished() || d.summary.state == JobState::Suspended
            }
            _ => true,
        }
    }

    /// Moves on to incarnation `i` of `logs`: queues its mark and what it has written so far
    /// (only the last `tail` lines of the first one shown), and keeps its file open at the
    /// end of what was queued.
    async fn open(&mut self, logs: &[ReplicaLog], i: usize) -> Result<(), std::io::Error> {
        let log = &logs[i];
        let full = format!("{}-{}", self.job, self.replica);
        self.queued
            .push(Bytes::from(incarnation_mark(&full, i + 1, log)));
        let mut rotated = log.path.as_os_str().to_owned();
        rotated.push(".1");
        let rotated = PathBuf::from(rotated);
        let text = if self.view.timestamps || self.view.since_ms.is_some() {
            let (path, view) = (log.path.clone(), self.view);
            let (text, read) = tokio::task::spawn_blocking(move || view.read_counted(&path))
                .await
                .map_err(std::io::Error::other)??;
            // Live reading goes on after what the history covered of the current segment.
            let before = tokio::fs::metadata(&rotated).await.map_or(0, |m| m.len());
            match tokio::fs::File::open(&log.path).await {
                Ok(mut f) => {
                    use tokio::io::AsyncSeekExt;
                    f.seek(std::io::SeekFrom::Start(read.saturating_sub(before)))
                        .await?;
                    self.file = Some(f);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.file = None,
                Err(e) => return Err(e),
            }
            text
        } else {
            let mut text = match tokio::fs::read(&rotated).await {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(e),
            };
            match tokio::fs::File::open(&log.path).await {
                Ok(mut f) => {
                    f.read_to_end(&mut text).await?;
                    self.file = Some(f);
                }
                // Launched, not yet writing.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.file = None,
                Err(e) => return Err(e),
            }
            text
        };
        self.at_line_start = text.last().is_none_or(|b| *b == b'\n');
        let text = if self.shown.is_none() {
            last_lines(text, self.tail)
        } else {
            text
        };
        if !text.is_empty() {
            self.queued.push(Bytes::from(text));
        }
        self.shown = Some(i);
        Ok(())
    }

    async fn next_chunk(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        loop {
            if !self.queued.is_empty() {
                return Some(Ok(self.queued.remove(0)));
            }
            if let Some(f) = &mut self.file {
                let mut buf = vec![0u8; 64 * 1024];
                match f.read(&mut buf).await {
                    Ok(0) => {}
                    Ok(n) => {
                        buf.truncate(n);
                        let shown = self.view.live(&buf, &mut self.at_line_start);
                        return Some(Ok(Bytes::from(shown)));
                    }
                    Err(e) => return Some(Err(e)),
                }
            }
            // Nothing more in this incarnation's file: a later incarnation, if one started,
            // or the file of this one, if it was not there yet.
            let logs = self.incarnations().await.unwrap_or_default();
            let next = match self.shown {
                // The current one first: following shows what runs now, then what follows.
                None => logs.len().checked_sub(1),
                Some(i) if i + 1 < logs.len() => Some(i + 1),
                Some(i) if self.file.is_none() && i < logs.len() => Some(i),
                Some(_) => None,
            };
            if let Some(i) = next {
                if self.shown == Some(i) {
                    // Reopen the file that has appeared since; its mark went out already.
                    match tokio::fs::File::open(&logs[i].path).await {
                        Ok(f) => self.file = Some(f),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Some(Err(e)),
                    }
                    if self.file.is_some() {
                        continue;
                    }
                } else {
                    if let Err(e) = self.open(&logs, i).await {
                        return Some(Err(e));
                    }
                    continue;
                }
            }
            if !self.follow || self.finished || self.state.is_closing() {
                return None;
            }
            if self.job_over().await {
                // One more pass reads what was written before the end.
                self.finished = true;
                continue;
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
