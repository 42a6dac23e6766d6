//! A job the platform removed on its own, with everything of it.

use super::*;

impl ControlPlane {
    /// The platform removed the job and its replicas' records on its own (Kubernetes: a
    /// TrainingJob deleted without a finalizer, its pods left to the garbage collector).
    /// A retired job's name is freed, and a finished job that holds nothing (one kept for
    /// its TTL) goes as a deleted one does; `true` then. `false` for a job that holds an
    /// admission or has not finished: what it still occupies is known only to the
    /// platform (its pods, stopping), so the shell restores the plane from what it holds.
    /// A job the plane does not know is gone already: `true`.
    pub fn vanished(&mut self, key: &str) -> bool {
        if self.retired.contains(key) {
            let _ = self.delete(key);
            return true;
        }
        let Some(e) = self.jobs.get_mut(key) else {
            return true;
        };
        let finished = e.job.status.as_ref().is_some_and(conditions::is_terminal);
        let holds = matches!(e.standing, Standing::Admitted(_) | Standing::Moving { .. });
        if !finished || holds {
            return false;
        }
        e.replicas.clear();
        let _ = self.delete(key);
        true
    }
}
