//! `GET /api/v1/watch` on the operator: the jobs a caller may see, pushed as server-sent
//! events when a pass changed them, in the embedded server's format (`jobs`: `{"reset",
//! "upsert", "remove", "reasons"}`), so that the dashboard keeps up without reloading.
//! Job events are not pushed here: `describe` reads them from the API server.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use corral_core::views::JobSummary;
use serde_json::json;

use super::{ReadApi, answer};

/// The longest a watcher goes without looking (another namespace may become visible to it
/// when RBAC changes, without a pass that changed anything).
const POLL: Duration = Duration::from_secs(5);
/// The shortest time between two looks of one watcher.
const MIN_GAP: Duration = Duration::from_millis(200);

struct Watcher {
    api: Arc<ReadApi>,
    caller: super::access::Caller,
    passes: tokio::sync::watch::Receiver<u64>,
    /// What was last sent, by `ns/name`.
    rows: BTreeMap<String, JobSummary>,
    reasons: BTreeMap<String, String>,
    first: bool,
}

fn key(j: &JobSummary) -> String {
    format!("{}/{}", j.namespace, j.name)
}

impl Watcher {
    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if !self.first {
                tokio::select! {
                    _ = tokio::time::sleep(POLL) => {}
                    r = self.passes.changed() => if r.is_err() { return None; },
                }
                tokio::time::sleep(MIN_GAP).await;
            }
            match self.look().await {
                Ok(Some(e)) => return Some(e),
                Ok(None) => {}
                Err(message) => {
                    // Said once; the client reconnects (a standby sends it to the leader).
                    return Some(SseEvent::default().event("error").data(message));
                }
            }
        }
    }

    /// What differs from what was sent, as one `jobs` event (none when nothing does).
    async fn look(&mut self) -> Result<Option<SseEvent>, String> {
        let snap = self.api.snapshot().map_err(|r| r.message)?;
        let visible = self
            .api
            .access
            .visible(&self.caller, snap.namespaces())
            .await
            .map_err(|r| r.message)?;
        let rows: BTreeMap<String, JobSummary> = snap
            .summaries(|ns| visible.as_ref().is_none_or(|v| v.iter().any(|x| x == ns)))
            .into_iter()
            .map(|j| (key(&j), j))
            .collect();
        let reasons: BTreeMap<String, String> = snap
            .plane
            .pending
            .iter()
            .filter(|(k, _)| rows.contains_key(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let reset = std::mem::take(&mut self.first);
        let upsert: Vec<&JobSummary> = rows
            .iter()
            .filter(|(k, j)| reset || self.rows.get(*k) != Some(*j))
            .map(|(_, j)| j)
            .collect();
        let remove: Vec<&String> = if reset {
            Vec::new()
        } else {
            self.rows
                .keys()
                .filter(|k| !rows.contains_key(*k))
                .collect()
        };
        let mut why: BTreeMap<&String, Option<&String>> = BTreeMap::new();
        for (k, v) in &reasons {
            if reset || self.reasons.get(k) != Some(v) {
                why.insert(k, Some(v));
            }
        }
        for k in self.reasons.keys().filter(|k| !reasons.contains_key(*k)) {
            why.insert(k, None);
        }
        if !reset && upsert.is_empty() && remove.is_empty() && why.is_empty() {
            return Ok(None);
        }
        let data = json!({"reset": reset, "upsert": upsert, "remove": remove, "reasons": why});
        let event = SseEvent::default().event("jobs").data(data.to_string());
        self.rows = rows;
        self.reasons = reasons;
        Ok(Some(event))
    }
}

pub(super) async fn watch(State(api): State<Arc<ReadApi>>, headers: HeaderMap) -> Response {
    answer(async move {
        let caller = api.caller(&headers).await?;
        api.snapshot()?;
        let watcher = Watcher {
            passes: api.passes.subscribe(),
            api,
            caller,
            rows: BTreeMap::new(),
            reasons: BTreeMap::new(),
            first: true,
        };
        let stream = futures::stream::unfold(watcher, |mut w| async move {
            let event = w.next().await?;
            Some((Ok::<_, Infallible>(event), w))
        });
        Ok(Sse::new(stream)
            .keep_alive(KeepAlive::default())
            .into_response())
    })
    .await
}
