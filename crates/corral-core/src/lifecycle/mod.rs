//! Job lifecycle: what happens to a TrainingJob from submission to cleanup.
//!
//! One pure function, [`reconcile`]: the job (spec + recorded status), the replica
//! incarnations the shell observes, the scheduler's decision ([`AdmissionState`]) and `now`
//! go in; the new status, the [`Action`]s to apply and when to look again come out. An
//! admission is the scheduler's own [`crate::sched::Admission`], and a start carries its
//! [`crate::sched::ReplicaPlacement`]: one type per concept across the core. The
//! shell (embedded executor or Kubernetes operator) observes, calls it, persists the status,
//! then applies the actions.
//!
//! ```text
//!            admitted               all replicas running
//!  Queued ───────────▶ Admitted ──────────────────────────▶ Running ──▶ Succeeded
//!    ▲  ▲                 │  ▲  retryable exit: restart       │         (success policy)
//!    │  │                 │  └──── Restarting ◀───────────────┤
//!    │  └── preempted ────┴────────────────────────────────────┤
//!    │      (not a failure: replicas stop with a grace period, │
//!    │       then the job requeues with its history)           ▼
//!    └──── resumed ◀── Suspended                            Failed  (permanent exit,
//!                                                             backoffLimit, deadline)
//! ```
//!
//! Invariants:
//! - **Terminal is final.** Once Succeeded or Failed is True, the job never gets a replica
//!   again, whatever arrives late (kubeflow/trainer#3737); remaining replicas stop and are
//!   cleaned up per `cleanPodPolicy`; after `ttlSecondsAfterFinished` the job is deleted.
//! - **backoffLimit is durable.** Every restart is counted in `status.restartCount`, which
//!   the shell persists before it acts; a crash of the controller replays from the stored
//!   status and counts nothing twice (kubeflow/trainer#2045). Restarts wait an exponential
//!   back-off (`status.backoffUntil`).
//! - **Stale events never count.** Every start carries an [`Incarnation`] (the gang's
//!   `status.attempt`, and the replica's own retry count); observations of any other
//!   incarnation are late or duplicated and only ever get stopped.
//! - **Preemption is not a failure.** It does not count against backoffLimit; the job
//!   returns to its queue with its restart history (`status.preemptionCount` counts it).
//! - **A start the platform cannot make is not a failure either** (an image it cannot pull,
//!   a command that does not exist: [`FailureReason::StartFailed`]). The job stops what
//!   runs, gives its admission back and waits out of its queue (state `BackOff`) for a
//!   back-off of 10 s doubling to 5 min, counted in `status.startFailures` (durable, never
//!   against backoffLimit), then re-enters it ([`back_off_failed_start`]).
//! - **Nothing runs without an admission**, and a gang starts only with a placement for
//!   every replica. A replica starts only when its name is free (no other incarnation).
//! - Allreduce frameworks (PyTorch DDP, MPI, JAX, XGBoost, TF without parameter servers,
//!   generic) restart the whole gang when one replica fails; TF parameter-server jobs and
//!   elastic PyTorch restart the replica alone.
//! - **A job another operator runs is only gated.** Its workload is admitted like any job,
//!   but whether the operator may run it, must keep it suspended, or is done with it is
//!   [`Gate::decide`], the one decision the Kubernetes shell's alongside mode applies.

mod action;
pub mod conditions;
mod gate;
mod observe;
pub mod policy;
mod progress;
mod reconcile;
mod state;

pub use action::{Action, StopReason};
pub use gate::Gate;
pub use observe::{
    AdmissionState, FailureReason, Incarnation, ObservedReplica, ReplicaId, ReplicaPhase,
    current_incarnation,
};
pub use policy::DEFAULT_GRACE_PERIOD;
pub use progress::{RATE_AFTER, RECORD_EVERY, checkpointed_since, record_progress};
pub use reconcile::{
    Reconciled, back_off_failed_start, fail_rejected_launch, reconcile, reconcile_with,
};
pub use state::{JobState, is_backing_off, is_pending, is_preempting, job_state};
