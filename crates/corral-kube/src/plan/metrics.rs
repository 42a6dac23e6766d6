//! Stage 6: the numbers of the pass for [`crate::metrics`], after the plane's step: jobs by
//! queue and state (the state words every shell shows), GPUs held per queue, and how many
//! jobs wait and run.

use corral_core::control::ControlPlane;
use corral_core::lifecycle::{self, conditions};

use super::Plan;
use super::observe_jobs::ObservedJob;

pub(super) fn tally(out: &mut Plan, jobs: &[ObservedJob<'_>], plane: &ControlPlane) {
    for o in jobs {
        // The job as the plane left it; a job the plane removed or never took (its pod
        // templates do not read) as observed.
        let job = plane.job(&o.key).unwrap_or(o.job);
        let status = job.status.clone().unwrap_or_default();
        let terminal = conditions::is_terminal(&status);
        let admission = plane.admission(&o.key);
        if admission.is_some() {
            out.running += 1;
        } else if plane.is_pending(&o.key) {
            out.pending += 1;
        }
        let queue = job.spec.queue_name().to_string();
        *out.jobs_by_state
            .entry(queue.clone())
            .or_default()
            .entry(lifecycle::job_state(&job.spec, Some(&status)).as_str())
            .or_default() += 1;
        let gpus: u64 = match admission {
            Some(a) if !terminal => a
                .admission
                .placements
                .iter()
                .map(|p| p.gpu_indices.len() as u64)
                .sum(),
            _ => 0,
        };
        *out.queue_gpus_in_use.entry(queue).or_default() += gpus;
    }
}
