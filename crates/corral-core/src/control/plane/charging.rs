//! The plane's side of accounting (see [`crate::control::accounting`]): charging each
//! admission from the step's changes, and holding back the jobs of queues over budget.

use super::*;
use crate::control::accounting::{BudgetStanding, charge_of};
use crate::sched::Blocker;

impl ControlPlane {
    /// Closes the charges the step's admission changes end and opens the new ones; the
    /// closed intervals go into [`Step::usage`] and count towards their queue's budget.
    pub(super) fn charge(&mut self, now: Millis, step: &mut Step) {
        let jobs = &self.jobs;
        let closed = self.charges.apply(&step.changes, now, |key, held| {
            let e = jobs.get(key)?;
            Some(charge_of(
                e.job.spec.queue_name(),
                held,
                e.request.as_ref().ok(),
            ))
        });
        for i in &closed {
            self.budgets.record(i);
        }
        step.usage.extend(closed);
    }

    /// Tells the scheduler which queues are over budget now, before its cycle; a blocked
    /// queue's jobs are looked at again when its period renews.
    pub(super) fn judge_budgets(&mut self, now: Millis, step: &mut Step) {
        if self.budgets.is_empty() {
            return;
        }
        let standings = self.budgets.standings(now, self.charges.until(now));
        for (queue, s) in standings {
            let blocker = s.exhausted().then(|| over_budget(&queue, &s));
            if blocker.is_some() {
                step.wake(Duration::from_millis(
                    s.renews_at.saturating_sub(now).max(1),
                ));
            }
            self.scheduler.set_over_budget(&queue, blocker);
        }
    }

    /// Intervals a shell recorded before (closed, of the last month at least), so that
    /// budgets count what the queues held before a restart. One that an admission the
    /// plane holds again opened (the same job, admitted at the same time) was recorded
    /// before the shell stored its release, which did not land: the open charge counts
    /// that time, so it is not counted twice.
    pub fn restore_usage(&mut self, closed: impl IntoIterator<Item = UsageInterval>) {
        let open: std::collections::HashSet<(String, Millis)> =
            self.charges.until(0).map(|c| (c.job, c.start)).collect();
        for i in closed {
            if !open.contains(&(i.job.clone(), i.start)) {
                self.budgets.record(&i);
            }
        }
    }

    /// What each admission held so far: the open charges, as if they closed at `now`, in
    /// job order. With the intervals the shell recorded, the whole usage ledger.
    pub fn open_usage(&self, now: Timestamp) -> Vec<UsageInterval> {
        self.charges.until(millis(now)).collect()
    }

    /// Each budgeted queue's standing at `now`.
    pub fn budget_standings(&self, now: Timestamp) -> BTreeMap<String, BudgetStanding> {
        let now = millis(now);
        self.budgets.standings(now, self.charges.until(now))
    }
}

fn over_budget(queue: &str, s: &BudgetStanding) -> Blocker {
    Blocker::OverBudget {
        queue: queue.to_string(),
        period: s.budget.period.as_str().to_string(),
        budget_gpu_hours: s.budget_gpu_seconds() / 3600.0,
        // To a thousandth, so that the reason does not change with every step.
        used_gpu_hours: (s.used_gpu_seconds / 3.6).floor() / 1000.0,
        renews_at: s.renews_at,
    }
}
