//! Request counts and latencies per model and revision, for `/metrics`: requests by status class, and a
//! histogram of the time from a request's arrival to its response head (cold-start holds
//! included, since that is what the client waited).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the latency histogram's buckets, in seconds.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
];

/// Status classes counted: 2xx, 3xx, 4xx, 5xx.
pub const STATUS_CLASSES: [&str; 4] = ["2xx", "3xx", "4xx", "5xx"];

#[derive(Debug, Default)]
pub struct Stats {
    by_class: [AtomicU64; 4],
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
    retries: AtomicU64,
}

/// A copy of one model's stats.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatsSnapshot {
    /// Requests by status class, in [`STATUS_CLASSES`] order.
    pub by_class: [u64; 4],
    /// Cumulative counts per bucket of [`LATENCY_BUCKETS`].
    pub buckets: [u64; LATENCY_BUCKETS.len()],
    pub count: u64,
    pub sum_seconds: f64,
    /// Requests sent again to another replica after one failed.
    pub retries: u64,
    /// Requests under way on its replicas.
    pub in_flight: u32,
    pub ready_replicas: u32,
    pub replicas: u32,
}

impl Stats {
    pub(crate) fn record(&self, status: u16, took: Duration) {
        let class = match status {
            200..=299 => 0,
            300..=399 => 1,
            400..=499 => 2,
            _ => 3,
        };
        self.by_class[class].fetch_add(1, Ordering::Relaxed);
        let secs = took.as_secs_f64();
        for (i, le) in LATENCY_BUCKETS.iter().enumerate() {
            if secs <= *le {
                self.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    pub(crate) fn retried(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            by_class: std::array::from_fn(|i| self.by_class[i].load(Ordering::Relaxed)),
            buckets: std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            count: self.count.load(Ordering::Relaxed),
            sum_seconds: self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6,
            retries: self.retries.load(Ordering::Relaxed),
            ..StatsSnapshot::default()
        }
    }
}
