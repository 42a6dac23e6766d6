//! The plane's settings, built one way for every shell ([`ControlConfig::builder`]), and the
//! one rule for how long a shell settles after a step ([`Settling`]).

use std::time::Duration;

use std::collections::BTreeMap;

use corral_api::JobPriorityClass;
use corral_api::queue::{Queue, QueueBudget};

use crate::sched::{SchedulerConfig, known_gpu_speeds};

/// What the platform runs a replica as: it decides whether a role without an image can run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Platform {
    /// Local processes (the embedded cluster, `corral plan`): a role without an image runs
    /// its command on the host.
    #[default]
    Processes,
    /// Pods from container images (Kubernetes): a role without an image cannot run.
    Pods,
}

/// Settings of the control plane: the same in every shell for the same cluster. Made with
/// [`ControlConfig::builder`], so that every shell derives them by the same rules. The
/// default is [`Platform::Processes`]'s.
#[derive(Clone, Debug)]
pub struct ControlConfig {
    /// The scheduler's settings (`move_in_place` is always on: the plane moves jobs).
    pub scheduler: SchedulerConfig,
    /// The grace period of jobs that set none of their own (`None`: 30 s).
    pub grace_period: Option<Duration>,
    pub priority_classes: Vec<JobPriorityClass>,
    /// The platform runs replicas from container images only (Kubernetes): a job with a
    /// role that names no image is never admitted; it waits with the reason in its status.
    pub requires_image: bool,
    /// The platform's nodes are fixed (processes on known machines, the simulator): a job
    /// that no node can ever hold is refused at submit ([`super::SubmitCheck`]). Where nodes
    /// come and go (Kubernetes) it is admitted and waits, Unschedulable.
    pub fixed_nodes: bool,
    /// Queue budgets by queue name (`Queue.spec.budget`): a queue whose jobs held its
    /// GPU-hours in the current period admits no new job (see [`super::accounting`]).
    pub budgets: BTreeMap<String, QueueBudget>,
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            scheduler: SchedulerConfig::default(),
            grace_period: None,
            priority_classes: Vec::new(),
            requires_image: false,
            fixed_nodes: true,
            budgets: BTreeMap::new(),
        }
    }
}

impl ControlConfig {
    pub fn builder(platform: Platform) -> ControlConfigBuilder {
        ControlConfigBuilder {
            config: ControlConfig {
                requires_image: platform == Platform::Pods,
                fixed_nodes: platform == Platform::Processes,
                ..ControlConfig::default()
            },
            gpu_types: Vec::new(),
        }
    }
}

/// Builds a [`ControlConfig`]: the shell says what it read (its settings, the GPU types of
/// its nodes, its priority classes); the rules that turn those into settings are here.
#[derive(Clone, Debug)]
pub struct ControlConfigBuilder {
    config: ControlConfig,
    gpu_types: Vec<String>,
}

impl ControlConfigBuilder {
    /// The scheduler's settings as configured (default: [`SchedulerConfig::default`]).
    pub fn scheduler(mut self, scheduler: SchedulerConfig) -> Self {
        self.config.scheduler = scheduler;
        self
    }

    /// The GPU types the cluster's nodes have: without configured speeds, each type gets
    /// its known relative speed (newer generations rank first).
    pub fn gpu_types<'a>(mut self, types: impl IntoIterator<Item = &'a str>) -> Self {
        self.gpu_types.extend(types.into_iter().map(str::to_string));
        self
    }

    /// The cluster's grace period for jobs that set none (`None`: 30 s).
    pub fn grace_period(mut self, grace: Option<Duration>) -> Self {
        self.config.grace_period = grace;
        self
    }

    /// How long a newly admitted job is safe from preemption, where the shell's settings
    /// say (`None`: the scheduler's default).
    pub fn preemption_protection_seconds(mut self, seconds: Option<u64>) -> Self {
        if let Some(s) = seconds {
            self.config.scheduler.preemption_protection_ms = s.saturating_mul(1000);
        }
        self
    }

    /// How long at least between two resizes of one elastic job, where the shell's
    /// settings say (`None`: the scheduler's default, 60 s).
    pub fn resize_dwell_seconds(mut self, seconds: Option<u64>) -> Self {
        if let Some(s) = seconds {
            self.config.scheduler.resize_dwell_ms = s.saturating_mul(1000);
        }
        self
    }

    pub fn priority_classes(mut self, classes: Vec<JobPriorityClass>) -> Self {
        self.config.priority_classes = classes;
        self
    }

    /// The cluster's queues: their budgets, where they set one.
    pub fn queues<'a>(mut self, queues: impl IntoIterator<Item = &'a Queue>) -> Self {
        self.config.budgets = super::accounting::budgets_of(queues);
        self
    }

    pub fn build(mut self) -> ControlConfig {
        if self.config.scheduler.gpu_type_speed.is_empty() {
            self.config.scheduler.gpu_type_speed =
                known_gpu_speeds(self.gpu_types.iter().map(String::as_str));
        }
        self.config
    }
}

/// Settle rounds after one step at most: enough for a step's starts to be observed, a
/// preempted gang's stops to hand it back to its queue and a moved job to start again.
pub const SETTLE_ROUNDS: usize = 10;

/// The one settle rule every shell follows after [`super::ControlPlane::step`]: apply the
/// step; while the last round asked something of the shell (changes, actions, events) or
/// applying it observed something (a start, a removed record), call
/// [`super::ControlPlane::settle`] and apply that, at most [`SETTLE_ROUNDS`] times. A shell
/// whose observations only come with its next pass (the operator) observes nothing while
/// applying, and settles only what the step itself left unsettled.
#[derive(Clone, Debug, Default)]
pub struct Settling {
    rounds: usize,
    cut_short: bool,
}

impl Settling {
    /// Whether to settle once more, after a round whose step was `asked` (not empty) and
    /// whose application `observed` something.
    pub fn again(&mut self, asked: bool, observed: bool) -> bool {
        if !(asked || observed) {
            return false;
        }
        if self.rounds == SETTLE_ROUNDS {
            self.cut_short = true;
            return false;
        }
        self.rounds += 1;
        true
    }

    /// Settle rounds run so far.
    pub fn rounds(&self) -> usize {
        self.rounds
    }

    /// Whether the rounds ran out while the plane still had work (the simulator counts it).
    pub fn cut_short(&self) -> bool {
        self.cut_short
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settling_stops_when_nothing_is_asked_or_seen_and_after_the_limit() {
        let mut s = Settling::default();
        assert!(!s.again(false, false));
        assert_eq!(s.rounds(), 0);
        let mut s = Settling::default();
        for _ in 0..SETTLE_ROUNDS {
            assert!(s.again(true, false));
        }
        assert!(!s.again(false, true));
        assert!(s.cut_short());
        assert_eq!(s.rounds(), SETTLE_ROUNDS);
    }

    #[test]
    fn builder_derives_speeds_only_when_none_are_configured() {
        let c = ControlConfig::builder(Platform::Pods)
            .gpu_types(["NVIDIA-H100-80GB-HBM3", "Tesla-V100-SXM2-16GB"])
            .preemption_protection_seconds(Some(7))
            .build();
        assert!(c.requires_image);
        assert!(!c.fixed_nodes);
        assert_eq!(c.scheduler.preemption_protection_ms, 7000);
        assert_eq!(c.scheduler.gpu_type_speed.len(), 2);
        let mut configured = SchedulerConfig::default();
        configured.gpu_type_speed.insert("x".into(), 2.0);
        let c = ControlConfig::builder(Platform::Processes)
            .scheduler(configured)
            .gpu_types(["NVIDIA-H100-80GB-HBM3"])
            .build();
        assert!(!c.requires_image);
        assert!(c.fixed_nodes);
        assert_eq!(c.scheduler.gpu_type_speed.len(), 1);
        assert_eq!(c.scheduler.gpu_type_speed.get("x"), Some(&2.0));
    }
}
