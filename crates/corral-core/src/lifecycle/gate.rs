//! The gate of a job whose replicas another operator runs (Kubeflow's training operator, in
//! the Kubernetes shell's alongside mode): Corral admits and places a TrainingJob that
//! mirrors it (its *workload*) and creates none of its pods, so the only thing Corral can do
//! to the job itself is let it run or keep it suspended, and drop the mirror when it ends.
//! Which of the three is decided here, once; the shell's per-kind adapters only carry it
//! out (unsuspend with the placement, suspend, delete the mirror), as Kueue's
//! `jobframework` reconciler does for every `GenericJob`.

use corral_api::training_job::TrainingJobStatus;

use super::state::is_preempting;

/// What the job run elsewhere may do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Its workload holds an admission and is not being preempted: the runner may run it,
    /// on the admission's placement.
    Run,
    /// Its workload waits for an admission, or is being preempted (its admission is still
    /// held but it is back in its queue): the runner keeps it suspended, so its pods go and
    /// the room comes back.
    Hold,
    /// The runner says it finished: the workload goes, and its admission and quota with it.
    Release,
}

impl Gate {
    /// The gate of a job the runner reports finished (`runner_finished`, in the runner's
    /// own status) or not, whose workload has `workload` as its status (`None`: no status
    /// yet, or no workload) and holds an admission or not (`admission_held`: the shell's
    /// record of it is there).
    pub fn decide(
        runner_finished: bool,
        workload: Option<&TrainingJobStatus>,
        admission_held: bool,
    ) -> Gate {
        if runner_finished {
            Gate::Release
        } else if admission_held && !workload.is_some_and(is_preempting) {
            Gate::Run
        } else {
            Gate::Hold
        }
    }
}

#[cfg(test)]
mod tests {
    use corral_api::training_job::{ConditionStatus, ConditionType};
    use jiff::Timestamp;

    use super::*;
    use crate::lifecycle::conditions::{self, reason};

    fn status(conds: &[(ConditionType, &str)]) -> TrainingJobStatus {
        let mut s = TrainingJobStatus::default();
        for &(t, why) in conds {
            conditions::set(
                &mut s,
                t,
                ConditionStatus::True,
                why,
                String::new(),
                Timestamp::UNIX_EPOCH,
            );
        }
        s
    }

    #[test]
    fn an_admission_not_being_preempted_runs() {
        let admitted = status(&[(ConditionType::Admitted, reason::ADMITTED)]);
        assert_eq!(Gate::decide(false, Some(&admitted), true), Gate::Run);
        // The admission is what counts; a workload without a status yet runs on it too.
        assert_eq!(Gate::decide(false, None, true), Gate::Run);
    }

    #[test]
    fn no_admission_or_a_preemption_holds() {
        assert_eq!(Gate::decide(false, None, false), Gate::Hold);
        let queued = status(&[(ConditionType::Queued, reason::QUEUED)]);
        assert_eq!(Gate::decide(false, Some(&queued), false), Gate::Hold);
        // Admitted and Queued at once: being preempted, its admission still held.
        let preempting = status(&[
            (ConditionType::Admitted, reason::ADMITTED),
            (ConditionType::Queued, reason::PREEMPTED),
        ]);
        assert_eq!(Gate::decide(false, Some(&preempting), true), Gate::Hold);
    }

    #[test]
    fn a_start_back_off_is_not_a_preemption() {
        // `is_preempting` leaves a start back-off out; the admission decides then.
        let backing_off = status(&[
            (ConditionType::Admitted, reason::ADMITTED),
            (ConditionType::Queued, reason::START_BACK_OFF),
        ]);
        assert_eq!(Gate::decide(false, Some(&backing_off), true), Gate::Run);
        assert_eq!(Gate::decide(false, Some(&backing_off), false), Gate::Hold);
    }

    #[test]
    fn finished_by_the_runner_releases_whatever_the_admission() {
        let admitted = status(&[(ConditionType::Admitted, reason::ADMITTED)]);
        assert_eq!(Gate::decide(true, Some(&admitted), true), Gate::Release);
        assert_eq!(Gate::decide(true, None, false), Gate::Release);
    }
}
