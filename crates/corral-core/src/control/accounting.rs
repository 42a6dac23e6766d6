//! Accounting: what each job's admissions held, as GPU-seconds and CPU-seconds by GPU type,
//! counted by one rule for every shell, and the queue budgets that rule feeds.
//!
//! The rule: a job is charged for the GPUs and CPU of its admission's placements from the
//! moment it is admitted (`HeldAdmission::admitted_at`) until the [`Change::Admission`]
//! that replaces or releases it. The plane releases an admission once nothing of the job
//! runs (finished, suspended, failed, deleted), so those jobs are charged until their
//! replicas have stopped; a preempted job's admission passes to its preemptor when the
//! preemption is decided, so the grace period of its stop is charged to the preemptor,
//! which holds those GPUs from then on. A GPU is therefore charged to one job at a time,
//! never more: the charges of a cluster never exceed its GPUs.
//!
//! A shell records the [`UsageInterval`]s a step closes ([`super::Step::usage`]) with the
//! step's changes, in the same transaction: a closed interval is stored once or not at
//! all, and an open one is the admission the shell stores anyway, so nothing is counted
//! twice or lost across a crash. Reports ([`usage_rows`]) split intervals by UTC day or
//! month; budgets ([`Budgets`]) sum them per calendar period.

use std::collections::BTreeMap;

use corral_api::queue::{BudgetPeriod, Queue, QueueBudget};
use jiff::Timestamp;
use jiff::civil::Date;
use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};

use super::plane::{Change, HeldAdmission};
use crate::sched::{JobRequest, Millis};

const DAY_MS: Millis = 86_400_000;

/// What one admission held over a span of time: `gpus` GPUs of `gpu_type` (`""` for GPUs
/// of nodes without a type; jobs without GPUs have 0) and `cpu_milli` of CPU, from `start`
/// to `end` (ms since the epoch, `end` excluded).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageInterval {
    /// `namespace/name`.
    pub job: String,
    pub queue: String,
    pub gpu_type: String,
    pub gpus: u32,
    pub cpu_milli: u64,
    pub start: Millis,
    pub end: Millis,
}

impl UsageInterval {
    pub fn namespace(&self) -> &str {
        self.job.split_once('/').map_or("", |(ns, _)| ns)
    }

    pub fn seconds(&self) -> f64 {
        self.end.saturating_sub(self.start) as f64 / 1000.0
    }

    pub fn gpu_seconds(&self) -> f64 {
        f64::from(self.gpus) * self.seconds()
    }

    pub fn cpu_seconds(&self) -> f64 {
        self.cpu_milli as f64 / 1000.0 * self.seconds()
    }

    /// The part of the interval within `[from, to)`, if any.
    pub fn clipped(&self, from: Millis, to: Millis) -> Option<UsageInterval> {
        let (start, end) = (self.start.max(from), self.end.min(to));
        (start < end).then(|| UsageInterval {
            start,
            end,
            ..self.clone()
        })
    }
}

/// The interval an admission opens (its `end` is set when it closes): the rule of what a
/// job is charged for, in one place.
pub fn charge_of(queue: &str, held: &HeldAdmission, request: Option<&JobRequest>) -> UsageInterval {
    let a = &held.admission;
    let cpu_of = |role: &str| {
        request
            .and_then(|r| r.groups.iter().find(|g| g.role == role))
            .map_or(0, |g| g.cpu_milli)
    };
    UsageInterval {
        job: a.job.clone(),
        queue: queue.to_string(),
        gpu_type: a.gpu_type.clone().unwrap_or_default(),
        gpus: a
            .placements
            .iter()
            .map(|p| u32::try_from(p.gpu_indices.len()).unwrap_or(u32::MAX))
            .fold(0u32, u32::saturating_add),
        cpu_milli: a
            .placements
            .iter()
            .map(|p| cpu_of(&p.role))
            .fold(0u64, u64::saturating_add),
        start: held.admitted_at,
        end: held.admitted_at,
    }
}

/// The admissions being charged now, by job, and what closing them produced.
#[derive(Clone, Debug, Default)]
pub(crate) struct Charges {
    open: BTreeMap<String, UsageInterval>,
}

impl Charges {
    /// Opens a charge for an admission a shell restored (charged since it was admitted).
    pub(crate) fn restore(&mut self, charge: UsageInterval) {
        self.open.insert(charge.job.clone(), charge);
    }

    /// Applies a step's admission changes, in order: each closes the job's open charge at
    /// `now` and opens the new admission's, if any (`open` makes it from the plane's
    /// record of the job). Returns the intervals closed, empty ones left out.
    pub(crate) fn apply(
        &mut self,
        changes: &[Change],
        now: Millis,
        mut open: impl FnMut(&str, &HeldAdmission) -> Option<UsageInterval>,
    ) -> Vec<UsageInterval> {
        let mut closed = Vec::new();
        for c in changes {
            let Change::Admission { job, admission } = c else {
                continue;
            };
            if let Some(mut charge) = self.open.remove(job) {
                charge.end = now.max(charge.start);
                if charge.end > charge.start {
                    closed.push(charge);
                }
            }
            if let Some(held) = admission
                && let Some(charge) = open(job, held)
            {
                self.open.insert(job.clone(), charge);
            }
        }
        closed
    }

    /// The open charges, each as if it closed at `now`, in job order.
    pub(crate) fn until(&self, now: Millis) -> impl Iterator<Item = UsageInterval> + '_ {
        self.open.values().map(move |c| UsageInterval {
            end: now.max(c.start),
            ..c.clone()
        })
    }
}

/// The start of the UTC day, ISO week (Monday) or month holding `at`, and the start of
/// the next one (ms since the epoch).
pub fn period_bounds(period: BudgetPeriod, at: Millis) -> (Millis, Millis) {
    let day = at / DAY_MS;
    match period {
        BudgetPeriod::Day => (day * DAY_MS, (day + 1) * DAY_MS),
        BudgetPeriod::Week => {
            // 1970-01-01 was a Thursday: day 0 is weekday 3 counted from Monday.
            let monday = day - (day + 3) % 7;
            (monday * DAY_MS, (monday + 7) * DAY_MS)
        }
        BudgetPeriod::Month => {
            let date = civil_date(at);
            let first = date.first_of_month();
            let next = first
                .checked_add(jiff::Span::new().months(1))
                .unwrap_or(first);
            (
                millis_of(first),
                millis_of(next).max(millis_of(first) + DAY_MS),
            )
        }
    }
}

fn civil_date(at: Millis) -> Date {
    let ts = i64::try_from(at)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .unwrap_or(Timestamp::UNIX_EPOCH);
    ts.to_zoned(TimeZone::UTC).date()
}

fn millis_of(date: Date) -> Millis {
    date.to_zoned(TimeZone::UTC)
        .map(|z| u64::try_from(z.timestamp().as_millisecond()).unwrap_or(0))
        .unwrap_or(0)
}

/// How usage is summed over time in a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UsageBucket {
    Day,
    Month,
}

impl UsageBucket {
    fn bounds(self, at: Millis) -> (Millis, Millis) {
        period_bounds(
            match self {
                UsageBucket::Day => BudgetPeriod::Day,
                UsageBucket::Month => BudgetPeriod::Month,
            },
            at,
        )
    }

    /// The bucket's name for the period starting at `start`: `2026-11-26` or `2026-11`.
    pub fn label(self, start: Millis) -> String {
        let d = civil_date(start);
        match self {
            UsageBucket::Day => format!("{:04}-{:02}-{:02}", d.year(), d.month(), d.day()),
            UsageBucket::Month => format!("{:04}-{:02}", d.year(), d.month()),
        }
    }
}

/// One row of a usage report: what the jobs of one namespace and queue (and one job, in a
/// report by job) held of one GPU type in one period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageRow {
    /// `2026-11-26` (by day) or `2026-11` (by month), UTC.
    pub period: String,
    pub namespace: String,
    pub queue: String,
    /// `namespace/name`, in a report by job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    pub gpu_type: String,
    pub gpu_seconds: f64,
    pub gpu_hours: f64,
    pub cpu_seconds: f64,
}

/// Sums intervals into rows by period (`bucket`), namespace, queue, GPU type and, with
/// `by_job`, job; only what lies within `[from, to)` counts, an interval spanning periods
/// is split at their bounds. Rows in period, namespace, queue, job, type order.
pub fn usage_rows(
    intervals: impl IntoIterator<Item = UsageInterval>,
    from: Millis,
    to: Millis,
    bucket: UsageBucket,
    by_job: bool,
) -> Vec<UsageRow> {
    type Key = (Millis, String, String, Option<String>, String);
    let mut sums: BTreeMap<Key, (f64, f64)> = BTreeMap::new();
    for i in intervals {
        let Some(mut rest) = i.clipped(from, to) else {
            continue;
        };
        loop {
            let (start, next) = bucket.bounds(rest.start);
            let part = rest.clipped(start, next);
            if let Some(p) = part {
                let key = (
                    start,
                    p.namespace().to_string(),
                    p.queue.clone(),
                    by_job.then(|| p.job.clone()),
                    p.gpu_type.clone(),
                );
                let s = sums.entry(key).or_default();
                s.0 += p.gpu_seconds();
                s.1 += p.cpu_seconds();
            }
            if rest.end <= next {
                break;
            }
            rest.start = next;
        }
    }
    sums.into_iter()
        .map(
            |((start, namespace, queue, job, gpu_type), (gpu_s, cpu_s))| UsageRow {
                period: bucket.label(start),
                namespace,
                queue,
                job,
                gpu_type,
                gpu_seconds: gpu_s,
                gpu_hours: gpu_s / 3600.0,
                cpu_seconds: cpu_s,
            },
        )
        .collect()
}

/// Budgets by queue, and the GPU-seconds each budgeted queue's closed intervals held per
/// UTC day (bounded: days before the longest period in use are dropped).
#[derive(Clone, Debug, Default)]
pub struct Budgets {
    budgets: BTreeMap<String, QueueBudget>,
    days: BTreeMap<String, BTreeMap<Millis, f64>>,
}

/// A budgeted queue's standing in its current period.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetStanding {
    pub budget: QueueBudget,
    pub used_gpu_seconds: f64,
    /// When the current period ends (ms since the epoch).
    pub renews_at: Millis,
}

impl BudgetStanding {
    /// The budget in GPU-seconds.
    pub fn budget_gpu_seconds(&self) -> f64 {
        self.budget.gpu_seconds().unwrap_or(f64::INFINITY)
    }

    pub fn exhausted(&self) -> bool {
        self.used_gpu_seconds >= self.budget_gpu_seconds()
    }
}

/// The budgets the queues set, by queue name (one whose `gpuHours` is not a quantity, which
/// validation refuses, is left out).
pub fn budgets_of<'a>(
    queues: impl IntoIterator<Item = &'a Queue>,
) -> BTreeMap<String, QueueBudget> {
    queues
        .into_iter()
        .filter_map(|q| Some((q.metadata.name.clone(), q.spec.budget.clone()?)))
        .filter(|(_, b)| b.gpu_seconds().is_some())
        .collect()
}

impl Budgets {
    pub fn new(budgets: BTreeMap<String, QueueBudget>) -> Self {
        Budgets {
            budgets,
            days: BTreeMap::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.budgets.is_empty()
    }

    /// Counts a closed interval towards its queue's budget (split by UTC day).
    pub fn record(&mut self, i: &UsageInterval) {
        if !self.budgets.contains_key(&i.queue) || i.gpus == 0 {
            return;
        }
        let days = self.days.entry(i.queue.clone()).or_default();
        // The longest period is a month: 32 days are all any standing needs.
        let keep = (i.end / DAY_MS).saturating_sub(32) * DAY_MS;
        days.retain(|d, _| *d >= keep);
        let mut start = i.start;
        while start < i.end {
            let day = start / DAY_MS * DAY_MS;
            let end = i.end.min(day + DAY_MS);
            *days.entry(day).or_default() += f64::from(i.gpus) * (end - start) as f64 / 1000.0;
            start = end;
        }
    }

    /// Each budgeted queue's standing at `now`: its closed intervals of the current period
    /// plus its open charges (`open`, as if closed now).
    pub fn standings(
        &self,
        now: Millis,
        open: impl Iterator<Item = UsageInterval>,
    ) -> BTreeMap<String, BudgetStanding> {
        let mut out: BTreeMap<String, BudgetStanding> = BTreeMap::new();
        for (queue, budget) in &self.budgets {
            let (start, renews_at) = period_bounds(budget.period, now);
            let closed: f64 = self
                .days
                .get(queue)
                .map_or(0.0, |d| d.range(start..).map(|(_, s)| s).sum());
            out.insert(
                queue.clone(),
                BudgetStanding {
                    budget: budget.clone(),
                    used_gpu_seconds: closed,
                    renews_at,
                },
            );
        }
        for i in open {
            if let Some(s) = out.get_mut(&i.queue) {
                let (start, _) = period_bounds(s.budget.period, now);
                if let Some(part) = i.clipped(start, now) {
                    s.used_gpu_seconds += part.gpu_seconds();
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Millis {
        let ts: Timestamp = s.parse().expect("timestamp");
        u64::try_from(ts.as_millisecond()).expect("after the epoch")
    }

    fn interval(job: &str, gpus: u32, start: Millis, end: Millis) -> UsageInterval {
        UsageInterval {
            job: job.to_string(),
            queue: "q".to_string(),
            gpu_type: "H100".to_string(),
            gpus,
            cpu_milli: 2000,
            start,
            end,
        }
    }

    #[test]
    fn periods_are_utc_days_iso_weeks_and_months() {
        let t = at("2026-11-26T16:00:00Z"); // a Thursday
        assert_eq!(
            period_bounds(BudgetPeriod::Day, t),
            (at("2026-11-26T00:00:00Z"), at("2026-11-27T00:00:00Z"))
        );
        assert_eq!(
            period_bounds(BudgetPeriod::Week, t),
            (at("2026-11-23T00:00:00Z"), at("2026-11-30T00:00:00Z"))
        );
        assert_eq!(
            period_bounds(BudgetPeriod::Month, at("2026-12-31T23:59:59Z")),
            (at("2026-12-01T00:00:00Z"), at("2027-01-01T00:00:00Z"))
        );
    }

    #[test]
    fn rows_split_intervals_at_day_bounds() {
        let i = interval(
            "a/j",
            2,
            at("2026-11-25T23:00:00Z"),
            at("2026-11-26T01:00:00Z"),
        );
        let rows = usage_rows([i], 0, Millis::MAX, UsageBucket::Day, true);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].period, "2026-11-25");
        assert_eq!(rows[1].period, "2026-11-26");
        assert_eq!(rows[0].gpu_seconds, 7200.0);
        assert_eq!(rows[0].gpu_hours, 2.0);
        assert_eq!(rows[1].cpu_seconds, 7200.0);
        assert_eq!(rows[1].namespace, "a");
        assert_eq!(rows[1].job.as_deref(), Some("a/j"));
        let month = usage_rows(
            [interval(
                "a/j",
                2,
                at("2026-11-25T23:00:00Z"),
                at("2026-11-26T01:00:00Z"),
            )],
            at("2026-11-26T00:30:00Z"),
            Millis::MAX,
            UsageBucket::Month,
            false,
        );
        assert_eq!(month.len(), 1);
        assert_eq!(month[0].period, "2026-11");
        assert_eq!(month[0].gpu_seconds, 3600.0);
        assert_eq!(month[0].job, None);
    }

    #[test]
    fn a_budget_counts_closed_and_open_usage_of_its_period_only() {
        let queue: Queue = serde_json::from_value(serde_json::json!({
            "apiVersion": "corral.dev/v1alpha1", "kind": "Queue",
            "metadata": {"name": "q"},
            "spec": {"budget": {"gpuHours": 2, "period": "day"}}
        }))
        .expect("queue");
        let mut b = Budgets::new(budgets_of([&queue]));
        let now = at("2026-11-26T12:00:00Z");
        // Yesterday's hour does not count today; this morning's does.
        b.record(&interval(
            "a/old",
            1,
            at("2026-11-25T10:00:00Z"),
            at("2026-11-25T11:00:00Z"),
        ));
        b.record(&interval(
            "a/j",
            1,
            at("2026-11-26T10:00:00Z"),
            at("2026-11-26T11:00:00Z"),
        ));
        let s = &b.standings(now, std::iter::empty())["q"];
        assert_eq!(s.used_gpu_seconds, 3600.0);
        assert!(!s.exhausted());
        assert_eq!(s.renews_at, at("2026-11-27T00:00:00Z"));
        let open = interval("a/k", 2, at("2026-11-26T11:30:00Z"), now);
        let s = &b.standings(now, [open].into_iter())["q"];
        assert_eq!(s.used_gpu_seconds, 3600.0 * 2.0);
        assert!(s.exhausted());
    }
}
