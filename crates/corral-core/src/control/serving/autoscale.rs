//! The autoscaler's decision, as Knative's KPA makes it: desired replicas are the average
//! in-flight requests over the stable window divided by the per-replica target, rounded up;
//! a burst above the panic threshold over the short panic window scales up at once and
//! nothing scales down while it lasts; a scale-down waits until no recommendation of the
//! stable window asked for more (no flapping); the last replica goes only after the idle
//! period without a request.
//!
//! Observations (what the router sees) and the time are passed in; nothing here reads a
//! clock.

use std::collections::VecDeque;

use corral_api::served_model::Autoscaling;
use jiff::{SignedDuration, Timestamp};

/// What the router saw of one model at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadSample {
    pub at: Timestamp,
    /// Requests in flight (held for a cold start included).
    pub in_flight: u32,
    /// Requests that arrived since the previous sample.
    pub arrived: u64,
}

/// What the autoscaler decided and why.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScaleDecision {
    pub desired: u32,
    pub panic: bool,
    /// Average in-flight requests over the stable and the panic window.
    pub stable_average: f64,
    pub panic_average: f64,
}

/// One model's autoscaler: its recent samples and recommendations.
#[derive(Clone, Debug, Default)]
pub struct Autoscaler {
    samples: VecDeque<LoadSample>,
    /// Recommendations made within the stable window, for the scale-down delay.
    recommendations: VecDeque<(Timestamp, u32)>,
    /// Set while in panic: when the panic condition last held.
    panic_seen: Option<Timestamp>,
    /// The most replicas asked for during this panic (never scaled below it in panic).
    panic_floor: u32,
    last_request: Option<Timestamp>,
    /// When this autoscaler first decided: an idle model that never saw a request counts
    /// its idle period from here.
    born: Option<Timestamp>,
}

fn secs(s: u32) -> SignedDuration {
    SignedDuration::from_secs(i64::from(s))
}

fn average(samples: &VecDeque<LoadSample>, since: Timestamp) -> f64 {
    let (sum, n) = samples
        .iter()
        .filter(|s| s.at > since)
        .fold((0u64, 0u64), |(sum, n), s| {
            (sum + u64::from(s.in_flight), n + 1)
        });
    if n == 0 { 0.0 } else { sum as f64 / n as f64 }
}

fn replicas_for(load: f64, target: u32) -> u32 {
    let r = (load / f64::from(target.max(1))).ceil();
    // An average of u32 values over a u32 target fits in u32.
    if r <= 0.0 {
        0
    } else {
        r.min(f64::from(u32::MAX)) as u32
    }
}

impl Autoscaler {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records what the router saw. Samples older than the one before are ignored.
    pub fn observe(&mut self, sample: LoadSample) {
        if self.samples.back().is_some_and(|last| sample.at < last.at) {
            return;
        }
        if sample.arrived > 0 || sample.in_flight > 0 {
            self.last_request = Some(sample.at);
        }
        self.samples.push_back(sample);
    }

    /// When a request was last seen in flight or arriving.
    pub fn last_request(&self) -> Option<Timestamp> {
        self.last_request
    }

    /// Desired replicas now, for a model with `current` replicas (existing, ready or not) of
    /// which `ready` are in rotation.
    pub fn decide(
        &mut self,
        spec: &Autoscaling,
        now: Timestamp,
        current: u32,
        ready: u32,
    ) -> ScaleDecision {
        let born = *self.born.get_or_insert(now);
        let stable_since = now - secs(spec.stable_window_seconds);
        while self.samples.front().is_some_and(|s| s.at <= stable_since) {
            self.samples.pop_front();
        }
        while self
            .recommendations
            .front()
            .is_some_and(|(at, _)| *at <= stable_since)
        {
            self.recommendations.pop_front();
        }
        let stable_average = average(&self.samples, stable_since);
        let panic_average = average(&self.samples, now - secs(spec.panic_window_seconds));
        let target = spec.target_in_flight.max(1);
        let stable_want = replicas_for(stable_average, target);
        let panic_want = replicas_for(panic_average, target);

        // Panic: the burst asks for the threshold's share more than what is in rotation
        // can carry (a model with none ready counts one, so that a cold start is no panic
        // by itself).
        let capacity = f64::from(ready.max(1)) * f64::from(target);
        let burst = panic_average * 100.0 >= capacity * f64::from(spec.panic_threshold_percent);
        if burst && current > 0 {
            self.panic_seen = Some(now);
        } else if self
            .panic_seen
            .is_some_and(|seen| now.duration_since(seen) >= secs(spec.stable_window_seconds))
        {
            self.panic_seen = None;
            self.panic_floor = 0;
        }
        let panic = self.panic_seen.is_some();

        let min = spec.min_replicas;
        let max = spec.max_replicas().max(min);
        let mut want = if panic {
            let w = panic_want
                .max(stable_want)
                .max(current)
                .max(self.panic_floor);
            self.panic_floor = w.min(max);
            w
        } else {
            stable_want
        };
        // Requests held at zero (a cold start) need one replica whatever the average says.
        let newest = self.samples.back().map_or(0, |s| s.in_flight);
        if newest > 0 {
            want = want.max(1);
        }
        let mut desired = want.clamp(min, max);

        // Scale-down delay: never below what the stable window's recommendations asked.
        self.recommendations.push_back((now, desired));
        if desired < current && !panic {
            let recent_max = self
                .recommendations
                .iter()
                .map(|(_, r)| *r)
                .max()
                .unwrap_or(desired);
            desired = desired.max(recent_max.min(current));
        }
        // The idle period: the last replica stays until no request was seen for that long.
        let idle_since = self.last_request.unwrap_or(born);
        let idle_long_enough =
            now.duration_since(idle_since) >= secs(spec.scale_to_zero_after_seconds);
        if desired == 0 && current > 0 && !idle_long_enough {
            desired = 1;
        }
        ScaleDecision {
            desired,
            panic,
            stable_average,
            panic_average,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("valid")
    }

    fn spec(min: u32, max: u32) -> Autoscaling {
        Autoscaling {
            min_replicas: min,
            max_replicas: Some(max),
            target_in_flight: 2,
            stable_window_seconds: 60,
            panic_window_seconds: 6,
            panic_threshold_percent: 200,
            scale_to_zero_after_seconds: 120,
        }
    }

    fn sample(at: i64, in_flight: u32) -> LoadSample {
        LoadSample {
            at: t(at),
            in_flight,
            arrived: u64::from(in_flight),
        }
    }

    #[test]
    fn steady_load_asks_for_load_over_target() {
        let s = spec(1, 10);
        let mut a = Autoscaler::new();
        for i in 0..60 {
            a.observe(sample(i, 6));
        }
        let d = a.decide(&s, t(60), 3, 3);
        assert_eq!(d.desired, 3);
        assert!(!d.panic);
    }

    #[test]
    fn a_burst_panics_and_scales_up_at_once() {
        let s = spec(1, 10);
        let mut a = Autoscaler::new();
        for i in 0..55 {
            a.observe(sample(i, 2));
        }
        // 1 ready replica (target 2); 16 in flight for 5 s is 800%.
        for i in 55..60 {
            a.observe(sample(i, 16));
        }
        let d = a.decide(&s, t(60), 1, 1);
        assert!(d.panic);
        assert_eq!(d.desired, 8);
        // The burst ends, the panic does not scale down before a stable window passed.
        for i in 60..80 {
            a.observe(sample(i, 0));
        }
        let d = a.decide(&s, t(80), 8, 8);
        assert!(d.panic);
        assert_eq!(d.desired, 8);
    }

    #[test]
    fn scales_to_zero_only_after_the_idle_period() {
        let s = spec(0, 4);
        let mut a = Autoscaler::new();
        a.observe(sample(0, 1));
        for i in 1..100 {
            a.observe(sample(i, 0));
        }
        // Idle since t=0 for 99 s < 120 s: keeps its replica.
        assert_eq!(a.decide(&s, t(99), 1, 1).desired, 1);
        for i in 100..130 {
            a.observe(sample(i, 0));
        }
        assert_eq!(a.decide(&s, t(130), 1, 1).desired, 0);
    }

    #[test]
    fn a_held_request_at_zero_asks_for_one_replica() {
        let s = spec(0, 4);
        let mut a = Autoscaler::new();
        assert_eq!(a.decide(&s, t(0), 0, 0).desired, 0);
        a.observe(sample(1, 1));
        let d = a.decide(&s, t(1), 0, 0);
        assert_eq!(d.desired, 1);
        assert!(!d.panic, "a cold start is not a panic");
    }
}
