//! `GET /api/v1/watch`: what changes, pushed as server-sent events, so that a page (the
//! dashboard) keeps up without reloading everything.
//!
//! Each watcher keeps the rows it last sent and, when the cluster changed (or every
//! [`POLL`] at the latest), sends what differs. Events are named:
//! - `jobs`: `{"reset": bool, "upsert": [JobSummary...], "remove": ["ns/name"...],
//!   "reasons": {"ns/name": "why it waits" | null}}`; the first is a reset holding every job
//!   the token may see, later ones only what changed.
//! - `event`: one job event (`Event`, as in `describe`), as it is recorded; a new watcher
//!   first gets those of the latest [`BACKLOG`] events that its token may see.
//! - `error`: the server could not read the cluster; the stream ends and the client
//!   reconnects.
//!
//! A namespace's token is sent only its namespace's jobs, reasons and events.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::IntoResponse;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use corral_local::cluster::SummaryRow;
use serde::Deserialize;
use tokio::time::Instant;

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;

use super::ApiResult;

/// The longest a watcher goes without looking (a pending reason can change without a
/// tick that reports anything).
const POLL: Duration = Duration::from_secs(1);
/// The shortest time between two looks of one watcher: a burst of changes costs one.
const MIN_GAP: Duration = Duration::from_millis(200);
/// Events read per look; more wait for the next one.
const EVENTS_PER_LOOK: u32 = 500;
/// How far back (in events of every namespace) a new watcher starts, so that a page
/// opens with the latest events (those of them the token may see) rather than none.
const BACKLOG: i64 = 200;

#[derive(Debug, Default, Deserialize)]
pub struct WatchQuery {
    /// End the stream after this many seconds (as Kubernetes' watch); none: never.
    #[serde(rename = "timeoutSeconds")]
    pub timeout_seconds: Option<u64>,
}

pub(super) async fn watch(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<WatchQuery>,
) -> ApiResult {
    let only = caller.namespace().map(str::to_string);
    let last_event = (state.with_cluster(|c| c.last_event_id()).await?? - BACKLOG).max(0);
    let watcher = Watcher {
        changes: state.subscribe_changes(),
        closing: state.subscribe_closing(),
        state,
        only,
        rows: Vec::new(),
        reasons: BTreeMap::new(),
        last_event,
        first: true,
        queued: VecDeque::new(),
        last_look: None,
        ends: q
            .timeout_seconds
            .map(|s| Instant::now() + Duration::from_secs(s)),
        done: false,
    };
    let stream = futures_util::stream::unfold(watcher, |mut w| async move {
        let event = w.next().await?;
        Some((Ok::<_, Infallible>(event), w))
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

struct Watcher {
    state: AppState,
    changes: tokio::sync::watch::Receiver<u64>,
    /// True once the server stops: the stream ends.
    closing: tokio::sync::watch::Receiver<bool>,
    /// The namespace the token may see; none: all.
    only: Option<String>,
    /// The rows last sent, in key order (as the cluster lists them).
    rows: Vec<SummaryRow>,
    /// The reasons last sent, by `ns/name`.
    reasons: BTreeMap<String, String>,
    last_event: i64,
    first: bool,
    queued: VecDeque<SseEvent>,
    last_look: Option<Instant>,
    ends: Option<Instant>,
    done: bool,
}

impl Watcher {
    /// The next event to send; none: the stream ends.
    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(e) = self.queued.pop_front() {
                return Some(e);
            }
            if self.done || self.over() {
                return None;
            }
            if !self.first {
                self.wait().await;
                if self.over() {
                    return None;
                }
            }
            self.last_look = Some(Instant::now());
            if let Err(e) = self.look().await {
                self.done = true;
                self.queued
                    .push_back(SseEvent::default().event("error").data(e.body.message));
            }
        }
    }

    /// The server stops, or the watch's time is up.
    fn over(&self) -> bool {
        *self.closing.borrow() || self.ends.is_some_and(|t| Instant::now() >= t)
    }

    /// Until the cluster changed or [`POLL`] passed, then at least [`MIN_GAP`] after the
    /// last look.
    async fn wait(&mut self) {
        let poll = tokio::time::sleep(POLL);
        let ends = async {
            match self.ends {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        let closing = {
            let rx = &mut self.closing;
            async move { rx.wait_for(|c| *c).await.is_ok() }
        };
        tokio::select! {
            _ = poll => {}
            _ = ends => return,
            _ = closing => return,
            r = self.changes.changed() => {
                // The server is stopping: look once more at the poll's pace.
                if r.is_err() {
                    tokio::time::sleep(POLL).await;
                }
            }
        }
        if let Some(last) = self.last_look {
            tokio::time::sleep_until(last + MIN_GAP).await;
        }
    }

    /// Reads what the token may see and queues what differs from what was sent.
    async fn look(&mut self) -> Result<(), ApiError> {
        let only = self.only.clone();
        let after = self.last_event;
        let (rows, reasons, events) = self
            .state
            .with_cluster(move |c| {
                let rows = c.list_rows(only.as_deref());
                let reasons = c.pending_reasons(&rows);
                let events = c.events_after(after, only.as_deref(), EVENTS_PER_LOOK);
                (rows, reasons, events)
            })
            .await?;
        let events = events?;
        let reasons: BTreeMap<String, String> = rows
            .iter()
            .zip(reasons)
            .filter_map(|(r, why)| Some((key(r), why?)))
            .collect();
        let reset = std::mem::take(&mut self.first);
        let (upsert, remove) = if reset {
            (rows.iter().collect(), Vec::new())
        } else {
            diff(&self.rows, &rows)
        };
        let mut why: Vec<(String, Option<&str>)> = Vec::new();
        for (k, v) in &reasons {
            if reset || self.reasons.get(k) != Some(v) {
                why.push((k.clone(), Some(v)));
            }
        }
        if !reset {
            for k in self.reasons.keys() {
                if !reasons.contains_key(k) {
                    why.push((k.clone(), None));
                }
            }
        }
        if reset || !upsert.is_empty() || !remove.is_empty() || !why.is_empty() {
            let data = jobs_message(reset, &upsert, &remove, &why);
            self.queued
                .push_back(SseEvent::default().event("jobs").data(data));
        }
        for (id, e) in events {
            self.last_event = id;
            if let Ok(data) = serde_json::to_string(&e) {
                self.queued
                    .push_back(SseEvent::default().event("event").data(data));
            }
        }
        self.rows = rows;
        self.reasons = reasons;
        Ok(())
    }
}

fn key(r: &SummaryRow) -> String {
    format!("{}/{}", r.namespace(), r.name())
}

/// The rows of `new` that are not in `old` or changed, and the keys of `old`'s rows gone
/// from `new`. Both are in key order; an unchanged row shares its text with the old one
/// (compared by address first).
fn diff<'a>(old: &[SummaryRow], new: &'a [SummaryRow]) -> (Vec<&'a SummaryRow>, Vec<String>) {
    use std::cmp::Ordering;
    let (mut upsert, mut remove) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        let order = match (old.get(i), new.get(j)) {
            (Some(o), Some(n)) => o.cmp(n),
            (Some(_), None) => Ordering::Less,
            _ => Ordering::Greater,
        };
        match order {
            Ordering::Less => {
                remove.push(key(&old[i]));
                i += 1;
            }
            Ordering::Greater => {
                upsert.push(&new[j]);
                j += 1;
            }
            Ordering::Equal => {
                let (a, b) = (old[i].json(), new[j].json());
                if !(std::ptr::eq(a, b) || a == b) {
                    upsert.push(&new[j]);
                }
                i += 1;
                j += 1;
            }
        }
    }
    (upsert, remove)
}

/// The `jobs` message, the rows' JSON joined as made (as a list answer is).
fn jobs_message(
    reset: bool,
    upsert: &[&SummaryRow],
    remove: &[String],
    reasons: &[(String, Option<&str>)],
) -> String {
    let mut out = String::with_capacity(64 + upsert.len() * 260);
    out.push_str(if reset {
        "{\"reset\":true,\"upsert\":["
    } else {
        "{\"reset\":false,\"upsert\":["
    });
    for (i, r) in upsert.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(r.json());
    }
    out.push_str("],\"remove\":");
    out.push_str(&serde_json::to_string(remove).unwrap_or_else(|_| "[]".into()));
    let reasons: serde_json::Map<String, serde_json::Value> = reasons
        .iter()
        .map(|(k, v)| (k.clone(), v.map_or(serde_json::Value::Null, Into::into)))
        .collect();
    out.push_str(",\"reasons\":");
    out.push_str(&serde_json::Value::Object(reasons).to_string());
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_local::cluster::{JobState, JobSummary};
    use jiff::Timestamp;

    fn row(name: &str, state: JobState) -> SummaryRow {
        SummaryRow::new(&JobSummary {
            namespace: "team-a".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            framework: "pytorch".into(),
            queue: "default".into(),
            state,
            replicas_ready: 0,
            replicas_total: 1,
            gpus: 1,
            created: Timestamp::UNIX_EPOCH,
            restarts: 0,
            preemptions: 0,
        })
    }

    /// A diff names exactly the added, changed and removed rows, whatever their order of
    /// change.
    #[test]
    fn diff_names_added_changed_and_removed_rows() {
        let a = row("a", JobState::Queued);
        let b = row("b", JobState::Queued);
        let c = row("c", JobState::Queued);
        let old = vec![a.clone(), b.clone(), c];
        let b2 = row("b", JobState::Running);
        let d = row("d", JobState::Queued);
        let new = vec![a, b2, d];
        let (upsert, remove) = diff(&old, &new);
        let names: Vec<&str> = upsert.iter().map(|r| r.name()).collect();
        assert_eq!(names, ["b", "d"]);
        assert_eq!(remove, ["team-a/c"]);
        let (upsert, remove) = diff(&new, &new);
        assert!(upsert.is_empty() && remove.is_empty());
        let (upsert, remove) = diff(&[], &new);
        assert_eq!((upsert.len(), remove.len()), (3, 0));
        let (upsert, remove) = diff(&new, &[]);
        assert_eq!((upsert.len(), remove.len()), (0, 3));
    }

    #[test]
    fn jobs_message_is_json_with_every_part() {
        let r = row("a", JobState::Queued);
        let msg = jobs_message(
            false,
            &[&r],
            &["team-a/gone".to_string()],
            &[
                ("team-a/a".to_string(), Some("no \"room\"")),
                ("team-a/b".to_string(), None),
            ],
        );
        let v: serde_json::Value = serde_json::from_str(&msg).expect("JSON");
        assert_eq!(v["reset"], false);
        assert_eq!(v["upsert"][0]["name"], "a");
        assert_eq!(v["remove"][0], "team-a/gone");
        assert_eq!(v["reasons"]["team-a/a"], "no \"room\"");
        assert!(v["reasons"]["team-a/b"].is_null());
    }
}
