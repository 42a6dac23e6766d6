//! Watching started replicas: adopting them after a restart, observing their ends
//! (`exit.json`, else the shim's own end), stopping them with grace, and cleaning up what an
//! ended replica leaves (cgroups, containers).

use std::time::{Duration, Instant};

use rustix::process::Signal;

use super::container::{self, ContainerHandle};
use super::files::{self, ExitRecord};
use super::{ExecutorError, LocalExecutor, ProcessRecord, ProcessState, Tracked, io_err, procfs};
use crate::cgroup::CgroupRef;

impl LocalExecutor {
    /// Takes over a replica started before a restart. `Running` when pid and start time still
    /// match (then it is watched like any other), else the state its exit file records, else
    /// `Gone` (and leftovers of it are killed). A replica is never tracked twice: adopting
    /// the name of a replica already running with another incarnation kills the adopted one.
    pub fn adopt(&mut self, record: ProcessRecord) -> ProcessState {
        if let Some(t) = self.replicas.get(&record.name) {
            if t.record.incarnation == record.incarnation && t.record.pid == record.pid {
                return t.state;
            }
            if !t.state.is_terminal() {
                return self.kill_duplicate(&record);
            }
        }
        let alive = procfs::is_same_alive(record.pid, record.start_time);
        let exit: Option<ExitRecord> = files::read_json(&record.exit_path()).ok().flatten();
        let state = match (&exit, alive) {
            (Some(rec), _) => ProcessState::from_exit(rec),
            (None, true) => ProcessState::Running,
            (None, false) => self.finish_without_exit_file(&record, false, None),
        };
        if state.is_terminal()
            && let Some(cg) = &record.cgroup
        {
            self.retire_cgroup(cg.clone(), record.container.is_some());
        }
        if let Some(old) = self.replicas.remove(&record.name)
            && let Some(c) = old.child
        {
            self.unreaped.push(c);
        }
        self.insert_tracked(
            record.name.clone(),
            Tracked {
                record,
                child: None,
                state,
                reported: state,
                kill_at: None,
                killed: false,
            },
        );
        state
    }

    fn kill_duplicate(&mut self, record: &ProcessRecord) -> ProcessState {
        if procfs::is_same_alive(record.pid, record.start_time) {
            let _ = procfs::signal_group(record.pid, Signal::KILL);
            if let Some(cg) = &record.cgroup {
                cg.kill_all(None);
            }
            remove_container(record);
            let _ = files::write_json_atomic(
                &record.exit_path(),
                &executor_exit(None, Some(procfs::signal_number(Signal::KILL)), false),
            );
            return ProcessState::Signaled {
                signal: procfs::signal_number(Signal::KILL),
            };
        }
        match files::read_json::<ExitRecord>(&record.exit_path()) {
            Ok(Some(rec)) => ProcessState::from_exit(&rec),
            _ => ProcessState::Gone,
        }
    }

    /// The shim ended without an exit file (killed, crashed): kill what it left behind, decide
    /// the state, and write the exit file so that every later look agrees.
    fn finish_without_exit_file(
        &self,
        record: &ProcessRecord,
        killed_by_us: bool,
        shim_status: Option<std::process::ExitStatus>,
    ) -> ProcessState {
        // A pid still in use as a process group id is never reused by the kernel, so group
        // members are ours unless a new process now owns the pid (then its group is not ours).
        let pid_reused = procfs::stat(record.pid)
            .is_some_and(|s| s.start_time != record.start_time && !s.is_dead());
        if !pid_reused {
            procfs::kill_group_except(record.pid, 0);
        }
        if let Some(cg) = &record.cgroup {
            cg.kill_all(None);
        }
        // The runtime's client is gone; the container it ran is not.
        remove_container(record);
        let oom = record.cgroup.as_ref().is_some_and(|cg| cg.oom_kills() > 0);
        let signal = if killed_by_us {
            Some(procfs::signal_number(Signal::KILL))
        } else {
            use std::os::unix::process::ExitStatusExt;
            shim_status.and_then(|s| s.signal())
        };
        let rec = executor_exit(None, signal, oom);
        let _ = files::write_json_atomic(&record.exit_path(), &rec);
        ProcessState::from_exit(&rec)
    }

    /// Observes every replica without blocking; returns the state changes since the last call
    /// (in name order). Escalates stops whose grace period is over at `now` to SIGKILL.
    pub fn poll(&mut self, now: Instant) -> Vec<(String, ProcessState)> {
        self.unreaped
            .retain_mut(|c| !matches!(c.try_wait(), Ok(Some(_)) | Err(_)));
        // Only replicas with something to look at: ended ones stay tracked (until their job
        // is deleted) and would make every pass cost the cluster's whole history.
        let names: Vec<String> = self
            .replicas
            .iter()
            .filter(|(_, t)| !t.state.is_terminal() || t.state != t.reported)
            .map(|(name, _)| name.clone())
            .collect();
        let mut changes = Vec::new();
        for name in names {
            let Some(mut t) = self.replicas.remove(&name) else {
                continue;
            };
            if !t.state.is_terminal() {
                self.observe(&mut t, now);
            }
            if t.state != t.reported {
                t.reported = t.state;
                changes.push((name.clone(), t.state));
            }
            self.insert_tracked(name, t);
        }
        changes
    }

    fn observe(&mut self, t: &mut Tracked, now: Instant) {
        let rec = &t.record;
        if let Some(at) = t.kill_at
            && now >= at
        {
            t.kill_at = None;
            t.killed = true;
            if procfs::is_same_alive(rec.pid, rec.start_time) {
                let _ = procfs::signal_group(rec.pid, Signal::KILL);
            }
            if let Some(cg) = &rec.cgroup {
                cg.kill_all(None);
            }
        }
        let mut shim_status = None;
        let shim_ended = match &mut t.child {
            Some(child) => match child.try_wait() {
                Ok(Some(status)) => {
                    shim_status = Some(status);
                    t.child = None;
                    true
                }
                Ok(None) => false,
                Err(_) => !procfs::is_same_alive(rec.pid, rec.start_time),
            },
            None => !procfs::is_same_alive(rec.pid, rec.start_time),
        };
        // Read after the liveness check: a shim writes its exit file before it exits.
        let exit: Option<ExitRecord> = files::read_json(&rec.exit_path()).ok().flatten();
        let state = match exit {
            Some(exit) => ProcessState::from_exit(&exit),
            None if shim_ended => {
                let record = t.record.clone();
                self.finish_without_exit_file(&record, t.killed, shim_status)
            }
            None => return,
        };
        t.state = state;
        t.kill_at = None;
        if let Some(c) = t.child.take() {
            self.unreaped.push(c);
        }
        if let Some(cg) = &t.record.cgroup {
            self.retire_cgroup(cg.clone(), t.record.container.is_some());
        }
    }

    /// Queues the cgroup of an ended replica for removal: the pass that saw the replica end
    /// starts the next ones first (the rmdirs are off the path from one job's exit to the
    /// next one's start), and must never wait for a shim to finish exiting.
    fn retire_cgroup(&mut self, cg: CgroupRef, ran_container: bool) {
        self.retired_cgroups.push((cg, ran_container));
    }

    /// Removes the cgroups of ended replicas; those still busy stay queued for the next call.
    pub fn remove_retired_cgroups(&mut self) {
        self.retired_cgroups
            .retain(|(cg, ran_container)| !cg.try_remove(*ran_container));
    }

    /// Stops a replica: SIGTERM now (the shim forwards it to the group), SIGKILL of the
    /// whole group once `grace` has passed (on a later [`poll`](Self::poll)). A zero grace
    /// kills at once. Stopping an ended replica does nothing.
    pub fn stop(&mut self, name: &str, grace: Duration) -> Result<(), ExecutorError> {
        let t = self
            .replicas
            .get_mut(name)
            .ok_or_else(|| ExecutorError::NotFound(name.to_string()))?;
        if t.state.is_terminal() {
            return Ok(());
        }
        let rec = &t.record;
        let alive = procfs::is_same_alive(rec.pid, rec.start_time);
        if grace.is_zero() {
            t.killed = true;
            t.kill_at = None;
            if alive {
                let _ = procfs::signal_group(rec.pid, Signal::KILL);
            }
            if let Some(cg) = &rec.cgroup {
                cg.kill_all(None);
            }
            return Ok(());
        }
        if alive {
            procfs::signal_process(rec.pid, Signal::TERM).map_err(io_err(format!(
                "sending SIGTERM to {name} (pid {})",
                rec.pid
            )))?;
        }
        let at = Instant::now() + grace;
        t.kill_at = Some(t.kill_at.map_or(at, |k| k.min(at)));
        Ok(())
    }

    /// Removes the containers of this run directory that no running replica owns (one whose
    /// shim was killed with the machine, or of a replica nobody recorded). For the start-up,
    /// after every record was adopted: it waits for the runtime. Returns their names.
    pub fn sweep_containers(&self) -> Vec<String> {
        let Some(rt) = &self.config.containers else {
            return Vec::new();
        };
        let Ok(names) = container::list_labelled(rt, &self.config.run_dir) else {
            return Vec::new();
        };
        let owned: std::collections::BTreeSet<&str> = self
            .replicas
            .values()
            .filter(|t| !t.state.is_terminal())
            .filter_map(|t| t.record.container.as_ref().map(|c| c.name.as_str()))
            .collect();
        names
            .into_iter()
            .filter(|n| !owned.contains(n.as_str()))
            .filter(|n| {
                ContainerHandle {
                    program: rt.program.clone(),
                    global_args: rt.global_args.clone(),
                    kind: rt.kind,
                    name: n.clone(),
                    memory_limit: None,
                }
                .remove()
            })
            .collect()
    }
}

/// Removes a killed replica's container without waiting for the runtime (a thread reaps
/// it): the control loop never waits on it.
fn remove_container(record: &ProcessRecord) {
    let Some(c) = &record.container else {
        return;
    };
    match c.remove_in_background() {
        Ok(mut child) => {
            std::thread::spawn(move || child.wait());
        }
        Err(e) => eprintln!("corral: removing container {}: {e}", c.name),
    }
}

fn executor_exit(code: Option<i32>, signal: Option<i32>, oom_killed: bool) -> ExitRecord {
    ExitRecord {
        code,
        signal,
        oom_killed,
        error: None,
        setup_failed: false,
        start_failed: false,
        written_by: "executor".into(),
        finished_at_ms: files::now_ms(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_records_map_to_states() {
        let rec = |code, signal, oom| executor_exit(code, signal, oom);
        assert_eq!(
            ProcessState::from_exit(&rec(Some(3), None, false)),
            ProcessState::Exited { code: 3 }
        );
        assert_eq!(
            ProcessState::from_exit(&rec(None, Some(9), true)),
            ProcessState::OomKilled
        );
        assert_eq!(
            ProcessState::from_exit(&rec(Some(0), None, true)),
            ProcessState::Exited { code: 0 }
        );
        assert_eq!(
            ProcessState::from_exit(&rec(None, Some(15), false)),
            ProcessState::Signaled { signal: 15 }
        );
        assert_eq!(
            ProcessState::from_exit(&rec(None, None, false)),
            ProcessState::Gone
        );
        let mut setup = rec(Some(125), None, false);
        setup.setup_failed = true;
        assert_eq!(ProcessState::from_exit(&setup), ProcessState::SetupFailed);
        let mut start = rec(Some(127), None, false);
        start.start_failed = true;
        assert_eq!(
            ProcessState::from_exit(&start),
            ProcessState::StartFailed { code: 127 }
        );
    }
}
