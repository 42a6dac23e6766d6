//! The control plane: every decision Corral makes about jobs, in one deterministic state
//! machine that the three shells (embedded, Kubernetes, simulator) drive the same way.
//!
//! ```text
//!   commands ──────────▶ ┌──────────────────────────────┐ ──▶ changes  (persist first)
//!   submit, delete,      │ ControlPlane                 │ ──▶ actions  (start / stop
//!   suspend, resume      │  jobs + status               │      a replica, with its
//!   observations ──────▶ │  scheduler (sched/)          │      placement or grace)
//!   replica phases       │  lifecycle (lifecycle/)      │ ──▶ events   (what happened,
//!   now ───────────────▶ │  ledger, reasons, rules      │      in words)
//!                        └──────────────────────────────┘
//! ```
//!
//! One [`ControlPlane::step`]:
//! 1. the ledger counts the GPU-seconds every admitted job held since the last step and
//!    hands each job's attained service to the scheduler (least attained service first);
//! 2. jobs whose inputs changed are reconciled (exits, restarts, releases), so that what
//!    finished frees its GPUs before the scheduler runs;
//! 3. one scheduler cycle: admissions (recorded with their placement), preemptions (the
//!    job leaves the scheduler and stops with its grace period; it re-enters its queue
//!    once every replica has stopped), moves to faster pools (stop, then start on the new
//!    placement), and a reason in words for every job that waits (written into its
//!    `Queued` condition; a job that cannot fit even on an empty cluster also gets the
//!    `Unschedulable` condition and a Warning event, and stays queued);
//! 4. the jobs the cycle touched are reconciled again, so that an admitted gang starts in
//!    the same step.
//!
//! The shell persists [`Step::changes`] before it applies [`Step::actions`], then reports
//! what it observed ([`ControlPlane::observe`]) and steps again. A shell that keeps no
//! state between passes (the Kubernetes operator) rebuilds the plane each pass with
//! [`ControlPlane::restore`] from what it stored: jobs with their status, admissions and
//! the replicas it sees.
//!
//! Invariants (on top of the scheduler's and the lifecycle's):
//! - Deterministic: the same commands, observations and times give the same steps; jobs
//!   are visited in key order, hash maps serve lookups only.
//! - A job is in the scheduler exactly when it waits for an admission or holds one; a
//!   preempted or moving job is in neither until its replicas have stopped, so its GPUs are
//!   never promised twice by this plane.
//! - Every admission is announced as a [`Change::Admission`] before any start that uses it.

pub mod accounting;
pub mod artifact_gc;
mod config;
pub mod conformance;
mod events;
mod exec;
mod ledger;
pub mod pipeline;
mod plane;
mod room;
mod rules;
pub mod serving;
mod submit;

pub use config::{ControlConfig, ControlConfigBuilder, Platform, SETTLE_ROUNDS, Settling};
pub use events::{EventType, JobEvent, announced_condition, event_reason, kept_in_status};
pub use exec::{
    ExecCaller, ExecRefusal, ExecTarget, decide_exec, parse_replica, refuse_missing_job,
};
pub use ledger::{Ledger, ServiceByType};
pub use plane::{
    Change, ControlError, ControlPlane, Effect, HeldAdmission, JobAction, JobRecord,
    LaunchRejection, RestoredJob, SchedulingHints, StartFailure, Step,
};
pub use room::{Need, Room, take_gang};
pub use rules::{
    CPU_POOL, finished_for_good, grace_period, restorable_by_name, with_default_queue,
};
pub use submit::{Refusal, SubmitCheck};
