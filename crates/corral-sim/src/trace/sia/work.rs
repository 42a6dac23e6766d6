//! A job's work in steps, from the model's validation profiles (the **Work** of the
//! reader's description).

use super::profiles::Validation;

impl Validation {
    /// Sia's `init_batch_size`: the smallest validated batch.
    pub fn init_batch(&self) -> Option<u32> {
        self.epochs.keys().next().copied()
    }

    /// Sia's `max_batch_size`: the largest validated batch.
    pub fn max_batch(&self) -> Option<u32> {
        self.epochs.keys().next_back().copied()
    }

    /// Sia's `max_epochs`: the shortest validation file (the explicit budgets in Sia's
    /// `APPLICATIONS` table equal it for every model of the profiles).
    pub fn max_epochs(&self) -> usize {
        self.epochs.values().map(Vec::len).min().unwrap_or(0)
    }

    /// Progress at the start of `epoch` (Sia's `get_progress`: the least over the batch
    /// sizes of the progress after epoch `epoch - 1`).
    fn progress(&self, epoch: usize) -> f64 {
        if epoch == 0 {
            return 0.0;
        }
        self.epochs
            .values()
            .filter_map(|v| v.get(epoch - 1))
            .map(|r| r.progress)
            .fold(f64::INFINITY, f64::min)
    }

    /// Gradient statistics of `epoch` at global batch `batch`, linear between validated
    /// batch sizes (Sia's `get_grad_stats`).
    fn grad_stats(&self, batch: f64, epoch: usize) -> Option<(f64, f64)> {
        let lo = self
            .epochs
            .iter()
            .rev()
            .find(|(b, _)| f64::from(**b) <= batch)?;
        let hi = self.epochs.iter().find(|(b, _)| f64::from(**b) >= batch)?;
        let (l, h) = (lo.1.get(epoch)?, hi.1.get(epoch)?);
        if lo.0 == hi.0 {
            return Some((l.grad_sqr, l.grad_var));
        }
        let (a, b) = (f64::from(*lo.0), f64::from(*hi.0));
        let w = |x: f64, y: f64| ((batch - a) * y + (b - batch) * x) / (b - a);
        Some((w(l.grad_sqr, h.grad_sqr), w(l.grad_var, h.grad_var)))
    }

    /// Iterations a run at global batch `batch` needs to finish training, as Sia's simulator
    /// counts them (siasosp23/artifacts at aaf7a0de, sia-simulator/job.py, `Job.step`, lines
    /// 414-511): epoch `e` needs `progress(e + 1) - progress(e)` of progress, made at `gain`
    /// per iteration, where `gain = (var + sqr) / (var / scale + sqr)` with `scale = batch /
    /// init_batch` and the epoch's gradient statistics; the run ends after the last epoch
    /// of the budget (`get_completion_epoch` without a target metric: `max_epochs - 1`).
    /// None when `batch` is outside the validated batch sizes.
    pub fn iterations_at(&self, batch: f64) -> Option<f64> {
        let init = f64::from(self.init_batch()?);
        if batch < init || batch > f64::from(self.max_batch()?) {
            return None;
        }
        let scale = batch / init;
        let mut total = 0.0;
        for e in 0..self.max_epochs() {
            let (sqr, var) = self.grad_stats(batch, e)?;
            let gain = (var + sqr) / (var / scale + sqr);
            if !(gain.is_finite() && gain > 0.0) {
                return None;
            }
            total += (self.progress(e + 1) - self.progress(e)) / gain;
        }
        (total.is_finite() && total > 0.0).then_some(total)
    }

    pub(super) fn range(&self) -> String {
        match (self.init_batch(), self.max_batch()) {
            (Some(a), Some(b)) => format!("{a}..={b}"),
            _ => "none".into(),
        }
    }
}
