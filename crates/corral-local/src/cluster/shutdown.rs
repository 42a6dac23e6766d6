//! What becomes of running replicas when the server stops (`corral up` ends): by default
//! they keep running, each under its shim, and the next `corral up` on the same data
//! directory re-adopts them; with `--stop-replicas-on-exit` they are stopped as a delete
//! stops them (SIGTERM, the grace period, SIGKILL) and the next start observes how they
//! ended, as after any exit (the restart policy decides).

use std::time::{Duration, Instant};

use super::engine::Cluster;

/// A replica that still runs: its process name and the GPUs it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunningReplica {
    pub name: String,
    pub gpu_indices: Vec<u32>,
}

impl Cluster {
    /// The replicas that run now.
    pub fn running_replicas(&self) -> Vec<RunningReplica> {
        self.executor
            .running()
            .into_iter()
            .map(|r| RunningReplica {
                name: r.name.clone(),
                gpu_indices: r.gpu_indices.clone(),
            })
            .collect()
    }

    /// Stops every running replica (SIGTERM, SIGKILL after `grace`) and waits until they
    /// have ended, at most `grace` and 5 s more. Returns those still running then.
    pub fn stop_all_replicas(&mut self, grace: Duration) -> Vec<RunningReplica> {
        let running = self.running_replicas();
        for r in &running {
            // One that ended meanwhile is not an error worth a word here.
            let _ = self.executor.stop(&r.name, grace);
        }
        let deadline = Instant::now() + grace + Duration::from_secs(5);
        loop {
            // Escalates to SIGKILL after the grace period; the exits are in the replicas'
            // files, which the next start reads.
            self.executor.poll(Instant::now());
            let left = self.running_replicas();
            if left.is_empty() || Instant::now() >= deadline {
                return left;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The grace period of a stop when the job names none (`gracePeriodSeconds`).
    pub fn default_grace(&self) -> Duration {
        Duration::from_secs(self.config.file.settings.grace_period_seconds.unwrap_or(30))
    }
}
