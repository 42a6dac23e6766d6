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
    /// Time passes: returns the seconds since the last call (`None` when none passed, or
    /// on the first call, which only starts the count). Time never runs backwards here.
    pub(crate) fn advance(&mut self, now: Millis) -> Option<f64> {
        let from = self
            .counted_to
            .replace(now.max(self.counted_to.unwrap_or(now)))?;
        let seconds = now.saturating_sub(from) as f64 / 1000.0;
        (seconds > 0.0).then_some(seconds)
    }

    /// A job of `queue` held `gpu_s` GPU-seconds of `gpu_type` (allocating only for keys
    /// it sees for the first time: this runs for every admitted job at every step).
    pub(crate) fn add(&mut self, job: &str, queue: &str, gpu_type: Option<&str>, gpu_s: f64) {
        if gpu_s <= 0.0 {
            return;
        }
        let ty = gpu_type.unwrap_or("");
        if !self.jobs.contains_key(job) {
            self.jobs.insert(job.to_string(), ServiceByType::new());
        }
        if let Some(by_type) = self.jobs.get_mut(job) {
            bump(by_type, ty, gpu_s);
        }
        if !self.queues.contains_key(queue) {
            self.queues.insert(queue.to_string(), ServiceByType::new());
        }
        if let Some(by_type) = self.queues.get_mut(queue) {
            bump(by_type, ty, gpu_s);
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

fn bump(by_type: &mut ServiceByType, ty: &str, gpu_s: f64) {
    match by_type.get_mut(ty) {
        Some(v) => *v += gpu_s,
        None => {
            by_type.insert(ty.to_string(), gpu_s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_accrues_per_job_queue_and_type() {
        let mut l = Ledger::default();
        assert_eq!(l.advance(1_000), None);
        let seconds = l.advance(11_000).expect("ten seconds");
        l.add("a/j", "a", Some("V100"), 2.0 * seconds);
        l.add("b/k", "b", None, seconds);
        assert_eq!(l.job("a/j").and_then(|s| s.get("V100")), Some(&20.0));
        assert_eq!(l.job("b/k").and_then(|s| s.get("")), Some(&10.0));
        assert_eq!(l.queues()["a"]["V100"], 20.0);
        // Backwards time counts nothing.
        assert_eq!(l.advance(5_000), None);
        assert_eq!(l.advance(11_000), None);
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
