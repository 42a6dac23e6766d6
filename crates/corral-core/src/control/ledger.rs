//! The ledger of attained service: GPU-seconds each job and each queue has held, by GPU
//! type. The scheduler orders jobs of one priority by it (least attained service first,
//! Tiresias); the same numbers serve accounting ("team A used 1,200 H100-hours").

use std::collections::{BTreeMap, HashMap};

use crate::sched::Millis;

/// GPU-seconds held, by GPU type (`""` for GPUs of nodes without a type).
pub type ServiceByType = BTreeMap<String, f64>;

#[derive(Clone, Debug, Default)]
pub struct Ledger {
    jobs: HashMap<String, ServiceByType>,
    queues: BTreeMap<String, ServiceByType>,
    /// Until when service has been counted.
    counted_to: Option<Millis>,
}

impl Ledger {
    /// Time passes: every job in `holding` (key, queue, GPU type, GPUs) held its GPUs from
    /// the last call until `now`. Time never runs backwards here: an earlier `now` counts
    /// nothing.
    pub(crate) fn accrue<'a>(
        &mut self,
        now: Millis,
        holding: impl Iterator<Item = (&'a str, &'a str, Option<&'a str>, u64)>,
    ) {
        let from = self.counted_to.unwrap_or(now);
        self.counted_to = Some(now.max(from));
        let seconds = now.saturating_sub(from) as f64 / 1000.0;
        if seconds <= 0.0 {
            return;
        }
        for (job, queue, gpu_type, gpus) in holding {
            if gpus == 0 {
                continue;
            }
            let gpu_s = gpus as f64 * seconds;
            let ty = gpu_type.unwrap_or("");
            *self
                .jobs
                .entry(job.to_string())
                .or_default()
                .entry(ty.to_string())
                .or_default() += gpu_s;
            *self
                .queues
                .entry(queue.to_string())
                .or_default()
                .entry(ty.to_string())
                .or_default() += gpu_s;
        }
    }

    /// What a job has held so far.
    pub fn job(&self, key: &str) -> Option<&ServiceByType> {
        self.jobs.get(key)
    }

    /// What each queue's jobs have held so far (jobs that were removed included).
    pub fn queues(&self) -> &BTreeMap<String, ServiceByType> {
        &self.queues
    }

    /// Restores a job's service (from a shell's record, or after a restart).
    pub(crate) fn set_job(&mut self, key: &str, service: ServiceByType) {
        self.jobs.insert(key.to_string(), service);
    }

    /// The job's service as the scheduler weighs it: GPU-seconds on each type scaled by the
    /// job's speed there relative to its fastest type (an hour on a card three times slower
    /// is a third of the service), where the job's speeds are known.
    pub(crate) fn weighted(&self, key: &str, throughput: &BTreeMap<String, f64>) -> f64 {
        let Some(by_type) = self.jobs.get(key) else {
            return 0.0;
        };
        let best = throughput.values().copied().fold(0.0f64, f64::max);
        by_type
            .iter()
            .map(|(ty, s)| match throughput.get(ty) {
                Some(v) if best > 0.0 => s * v / best,
                _ => *s,
            })
            .sum()
    }

    pub(crate) fn forget_job(&mut self, key: &str) {
        self.jobs.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_accrues_per_job_queue_and_type() {
        let mut l = Ledger::default();
        l.accrue(1_000, std::iter::empty());
        l.accrue(
            11_000,
            [("a/j", "a", Some("V100"), 2), ("b/k", "b", None, 1)].into_iter(),
        );
        assert_eq!(l.job("a/j").and_then(|s| s.get("V100")), Some(&20.0));
        assert_eq!(l.job("b/k").and_then(|s| s.get("")), Some(&10.0));
        assert_eq!(l.queues()["a"]["V100"], 20.0);
        // Backwards time counts nothing.
        l.accrue(5_000, [("a/j", "a", Some("V100"), 2)].into_iter());
        assert_eq!(l.job("a/j").and_then(|s| s.get("V100")), Some(&20.0));
    }

    #[test]
    fn weighted_service_scales_by_relative_speed() {
        let mut l = Ledger::default();
        l.set_job(
            "j",
            [("K80".to_string(), 300.0), ("V100".to_string(), 100.0)].into(),
        );
        let tput = [("K80".to_string(), 1.0), ("V100".to_string(), 3.0)].into();
        assert!((l.weighted("j", &tput) - 200.0).abs() < 1e-9);
        assert_eq!(l.weighted("j", &BTreeMap::new()), 400.0);
    }
}
