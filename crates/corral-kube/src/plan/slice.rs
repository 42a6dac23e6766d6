//! How much a pass may admit so that it ends within its budget: the operator writes each
//! admitted replica through the API server (pod, Binding, status), so the time a pass takes
//! grows with what its step starts. The plane admits in slices
//! (`ControlPlane::step_sliced`): at most this many replicas a pass, the rest in the next
//! one, in the same order. The slice is sized from what replicas cost in recent passes.

use std::time::Duration;

/// What one write is assumed to cost before anything was measured: ~300 a second, what
/// this operator issues against a kube-apiserver on 2 cores.
const FIRST_GUESS_SECS: f64 = 0.0033;
/// Writes of a pass per replica it started, before anything was measured: its pod, its
/// Binding, and its share of its job's status and Events (2.6-2.8 over a whole burst in
/// `corral bench operator`; passes under a burst also write the statuses of the jobs that
/// finished and of the new ones that wait).
const FIRST_GUESS_WRITES_PER_REPLICA: f64 = 3.5;
/// Bounds of a pass's writes per replica as measured: one pass that wrote many statuses
/// and started few replicas moves the slice only so far.
const WRITES_PER_REPLICA: (f64, f64) = (2.0, 10.0);
/// Passes that wrote or started less than this say too little to count.
const MIN_SAMPLE: u64 = 16;
/// The part of the budget a slice is sized to fill: the pace of writes swings by half
/// from one pass to the next on a busy API server (2.5-4.5 ms a write in `corral bench
/// operator`), and a pass sized for the whole budget on the average would run over it
/// every other time.
const HEADROOM: f64 = 0.7;
/// Weight of the newest measurement (an exponential average: a slower API server is
/// followed within a few passes).
const WEIGHT: f64 = 0.3;

/// The slice of the passes to come, from a time budget and what passes cost.
#[derive(Clone, Debug, PartialEq)]
pub struct PassSlice {
    budget: Option<Duration>,
    /// Seconds of a pass's writes per write, smoothed: the API server's pace as this
    /// operator sees it (its rate limit, its window of concurrent writes, the server).
    secs_per_write: f64,
    /// A pass's writes per replica it started, smoothed.
    writes_per_replica: f64,
    /// Seconds of a pass's plan, smoothed: the budget's part that no slice can save.
    plan_secs: f64,
    /// A slice that measurements do not move ([`PassSlice::fixed`]).
    pinned: Option<u32>,
}

/// What one pass cost.
#[derive(Clone, Copy, Debug, Default)]
pub struct PassCost {
    pub plan_secs: f64,
    pub apply_secs: f64,
    /// Writes the apply issued ([`crate::apply::ApplyReport::writes`]).
    pub writes: u64,
    /// Replicas whose pods it created.
    pub replicas: u64,
}

fn smooth(old: f64, new: f64) -> f64 {
    WEIGHT * new + (1.0 - WEIGHT) * old
}

impl PassSlice {
    /// `None`: a pass admits everything that fits.
    pub fn new(budget: Option<Duration>) -> Self {
        PassSlice {
            budget: budget.filter(|b| !b.is_zero()),
            secs_per_write: FIRST_GUESS_SECS,
            writes_per_replica: FIRST_GUESS_WRITES_PER_REPLICA,
            plan_secs: 0.0,
            pinned: None,
        }
    }

    /// Every pass admits up to `replicas`, whatever passes cost (a test, or a shell that
    /// knows its pace).
    pub fn fixed(replicas: u32) -> Self {
        PassSlice {
            pinned: Some(replicas.max(1)),
            ..PassSlice::new(None)
        }
    }

    /// Replicas the next pass may start (at least one: a gang is never cut, so a pass
    /// always admits at least one job that fits).
    pub fn replicas(&self) -> Option<u32> {
        if self.pinned.is_some() {
            return self.pinned;
        }
        let left = (HEADROOM * self.budget?.as_secs_f64() - self.plan_secs).max(0.0);
        let n = (left / (self.secs_per_write * self.writes_per_replica)).floor();
        Some(n.clamp(1.0, f64::from(u32::MAX)) as u32)
    }

    /// What the last pass cost.
    pub fn measured(&mut self, cost: PassCost) {
        if cost.plan_secs.is_finite() && cost.plan_secs >= 0.0 {
            self.plan_secs = smooth(self.plan_secs, cost.plan_secs);
        }
        if cost.writes < MIN_SAMPLE || !cost.apply_secs.is_finite() || cost.apply_secs <= 0.0 {
            return;
        }
        self.secs_per_write = smooth(self.secs_per_write, cost.apply_secs / cost.writes as f64);
        if cost.replicas >= MIN_SAMPLE {
            let (lo, hi) = WRITES_PER_REPLICA;
            let ratio = (cost.writes as f64 / cost.replicas as f64).clamp(lo, hi);
            self.writes_per_replica = smooth(self.writes_per_replica, ratio);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(plan_secs: f64, apply_secs: f64, writes: u64, replicas: u64) -> PassCost {
        PassCost {
            plan_secs,
            apply_secs,
            writes,
            replicas,
        }
    }

    #[test]
    fn the_slice_follows_what_passes_cost() {
        let mut s = PassSlice::new(Some(Duration::from_secs(1)));
        assert_eq!(s.replicas(), Some(60));
        // Writes of 10 ms each (a rate limit of 100/s), 3 a replica, a plan of 100 ms:
        // 600 ms of writes in 70% of the budget, 20 replicas.
        for _ in 0..40 {
            s.measured(pass(0.1, 3.0, 300, 100));
        }
        assert_eq!(s.replicas(), Some(20), "{s:?}");
        // Too few writes to say anything of their cost.
        s.measured(pass(0.1, 30.0, 3, 1));
        assert_eq!(s.replicas(), Some(20));
        // One pass of many statuses and few replicas moves the slice only so far.
        s.measured(pass(0.1, 10.0, 1000, 20));
        assert!(s.replicas().is_some_and(|n| n >= 10), "{:?}", s.replicas());
        // A faster server is followed within a few passes.
        for _ in 0..10 {
            s.measured(pass(0.1, 0.6, 300, 100));
        }
        assert!(s.replicas().is_some_and(|n| n > 80), "{:?}", s.replicas());
        // So slow that one replica takes longer than the budget: still one.
        for _ in 0..40 {
            s.measured(pass(0.1, 100.0, 100, 30));
        }
        assert_eq!(s.replicas(), Some(1));
        // A plan alone longer than the budget: one.
        for _ in 0..40 {
            s.measured(pass(2.0, 0.3, 300, 100));
        }
        assert_eq!(s.replicas(), Some(1));
    }

    #[test]
    fn a_fixed_slice_does_not_move() {
        let mut s = PassSlice::fixed(3);
        s.measured(pass(0.1, 10.0, 1000, 100));
        assert_eq!(s.replicas(), Some(3));
    }

    #[test]
    fn no_budget_no_slice() {
        assert_eq!(PassSlice::new(None).replicas(), None);
        assert_eq!(PassSlice::new(Some(Duration::ZERO)).replicas(), None);
    }
}
