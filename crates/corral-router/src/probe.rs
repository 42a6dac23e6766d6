//! Readiness: each replica's check (an HTTP GET of the model's readiness path answering
//! 2xx) every probe period. A pass puts the replica in rotation (and wakes requests held for
//! a cold start); `failureThreshold` failures in a row take it out, as does a request that
//! failed on it ([`crate::table::Replica::eject`]) until the next pass.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Empty;
use hyper::{Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

use crate::Router;
use crate::table::{Model, Replica};

/// How often the prober looks for replicas whose probe is due.
const TICK: Duration = Duration::from_millis(100);

impl Router {
    /// Probes every replica of every model until the router is dropped. Run it on the
    /// runtime that serves the router.
    pub async fn probe_forever(self) {
        let client: Client<HttpConnector, Empty<Bytes>> =
            Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
        let mut last: std::collections::HashMap<(String, String), Instant> = Default::default();
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tick.tick().await;
            if Arc::strong_count(&self.inner) == 1 {
                return;
            }
            let now = Instant::now();
            let mut seen = std::collections::HashSet::new();
            for (key, model) in self.models() {
                let settings = model.settings();
                for replica in model.replicas() {
                    let id = (key.clone(), replica.name.clone());
                    seen.insert(id.clone());
                    // Until a replica is first in rotation (a cold start, a restart) it is
                    // probed every tick, so that a held request waits for the replica and
                    // not for the probe period.
                    let period = if replica.is_ready() {
                        settings.probe_period
                    } else {
                        TICK
                    };
                    let due = last
                        .get(&id)
                        .is_none_or(|t| now.duration_since(*t) >= period);
                    if !due || replica.probing.swap(true, Ordering::AcqRel) {
                        continue;
                    }
                    last.insert(id, now);
                    let (client, model) = (client.clone(), model.clone());
                    let path = settings.readiness_path.clone();
                    let timeout = settings.probe_period.max(Duration::from_secs(1));
                    let threshold = settings.failure_threshold.max(1);
                    tokio::spawn(async move {
                        let ok = probe(&client, &replica, &path, timeout).await;
                        record(&model, &replica, ok, threshold);
                        replica.probing.store(false, Ordering::Release);
                    });
                }
            }
            last.retain(|id, _| seen.contains(id));
        }
    }
}

async fn probe(
    client: &Client<HttpConnector, Empty<Bytes>>,
    replica: &Replica,
    path: &str,
    timeout: Duration,
) -> bool {
    let Ok(uri) = Uri::builder()
        .scheme("http")
        .authority(replica.addr.to_string())
        .path_and_query(path)
        .build()
    else {
        return false;
    };
    let mut req = Request::new(Empty::new());
    *req.uri_mut() = uri;
    matches!(
        tokio::time::timeout(timeout, client.request(req)).await,
        Ok(Ok(resp)) if resp.status().is_success()
    )
}

fn record(model: &Model, replica: &Replica, ok: bool, threshold: u32) {
    if ok {
        replica.failures.store(0, Ordering::Relaxed);
        if !replica.ready.swap(true, Ordering::AcqRel) {
            model.became_ready.notify_waiters();
        }
    } else if replica.failures.fetch_add(1, Ordering::Relaxed) + 1 >= threshold {
        replica.ready.store(false, Ordering::Release);
    }
}
