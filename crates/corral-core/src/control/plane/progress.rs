//! Progress reported by a job's replicas (see [`lifecycle::record_progress`]).

use super::*;

impl ControlPlane {
    /// `replica` (its name, `<job>-<role>-<index>`) of the job reported `report`, the newest
    /// of its reports (the shell reads them at its own pace). Recorded in the job's status at
    /// the next reconcile when a reader would see a difference. Ignored for a job whose
    /// replicas neither run nor are being stopped (a checkpoint reported while they stop
    /// ends the stop early: see `lifecycle::checkpointed_since`).
    pub fn observe_progress(&mut self, key: &str, replica: String, report: ProgressReport) {
        if let Some(e) = self.jobs.get_mut(key)
            && !matches!(e.standing, Standing::Queued | Standing::Out)
        {
            e.progress.push((replica, report));
            self.unsettled.insert(key.to_string());
        }
    }
}
