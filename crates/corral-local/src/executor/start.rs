//! Starting replicas: the checks, the replica's files and `launch.json`, and the spawn of
//! its shim (a standby one when there is one), alone or a gang at once.

use std::fs;
use std::io;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use rustix::process::Signal;

use super::files::{self, EXIT_FILE, LAUNCH_FILE, LOG_FILE, LaunchFile, RECORD_FILE};
use super::{
    ExecutorError, LocalExecutor, ProcessRecord, ProcessState, ReplicaProcessSpec, StartGate,
    Tracked, base_env, container, io_err, path_component, procfs, python, scratch,
};
use crate::cgroup::{CgroupLimits, CgroupRef};
use crate::tenancy::set_owner_mode;

/// A tenant's HOME and default working directory, inside its replica directory.
pub const HOME_DIR: &str = "home";

/// What one launch gives: the record and the shim, our child.
type Launched = Result<(ProcessRecord, Child), ExecutorError>;

/// A launch whose files are written and whose shim is not spawned yet.
struct Prepared {
    dir: PathBuf,
    cgroup: Option<CgroupRef>,
    container: Option<container::ContainerHandle>,
}

impl LocalExecutor {
    /// Starts a replica: writes its files, creates its cgroup, spawns the shim.
    pub fn start(&mut self, spec: &ReplicaProcessSpec) -> Result<ProcessRecord, ExecutorError> {
        self.check_startable(spec)?;
        let (record, child) = self.launch(spec)?;
        Ok(self.track(record, child))
    }

    /// Starts several replicas (a gang) at once: the checks in order, then the launches,
    /// on several threads where there are cores to spare, since each spends most of its time
    /// in the kernel (cgroup creation, process spawn, file writes). One result per spec, in
    /// order; a failed one does not stop the others.
    pub fn start_all(
        &mut self,
        specs: &[ReplicaProcessSpec],
    ) -> Vec<Result<ProcessRecord, ExecutorError>> {
        // Half the cores launch; the other half run the shims that are starting. On two
        // cores that is one thread, which measured as fast as eight and costs no thread
        // creation.
        self.start_all_on(specs, self.launch_threads)
    }

    /// [`start_all`](Self::start_all) with the launches spread over at most `threads`
    /// threads (1: in this thread).
    pub fn start_all_on(
        &mut self,
        specs: &[ReplicaProcessSpec],
        threads: usize,
    ) -> Vec<Result<ProcessRecord, ExecutorError>> {
        let mut checked: Vec<Result<(), ExecutorError>> = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            let twice = specs[..i].iter().any(|o| o.name == spec.name);
            checked.push(if twice {
                Err(ExecutorError::AlreadyRunning(format!(
                    "{} (twice in one start)",
                    spec.name
                )))
            } else {
                self.check_startable(spec)
            });
        }
        let threads = threads.clamp(1, specs.len().max(1));
        let this = &*self;
        let launch = |(spec, ok): (&ReplicaProcessSpec, Result<(), ExecutorError>)| {
            ok.and_then(|()| this.launch(spec))
        };
        let mut work: Vec<_> = specs.iter().zip(checked).collect();
        let launched: Vec<Launched> = if threads == 1 {
            // Every replica's files first, then the shims back to back: a shim that is
            // starting (loading, making its cgroup) takes a core, and the files written
            // before any runs are written without it in the way.
            let prepared: Vec<_> = work
                .into_iter()
                .map(|(spec, ok)| (spec, ok.and_then(|()| this.prepare(spec))))
                .collect();
            prepared
                .into_iter()
                .map(|(spec, p)| p.and_then(|p| this.spawn_shim(spec, p)))
                .collect()
        } else {
            let per_thread = work.len().div_ceil(threads);
            let mut chunks = Vec::new();
            while !work.is_empty() {
                let rest = work.split_off(per_thread.min(work.len()));
                chunks.push(std::mem::replace(&mut work, rest));
            }
            std::thread::scope(|scope| {
                let handles: Vec<_> = chunks
                    .into_iter()
                    .map(|chunk| {
                        let n = chunk.len();
                        let handle =
                            scope.spawn(move || chunk.into_iter().map(launch).collect::<Vec<_>>());
                        (n, handle)
                    })
                    .collect();
                handles
                    .into_iter()
                    .flat_map(|(n, handle)| {
                        handle.join().unwrap_or_else(|_| {
                            (0..n)
                                .map(|_| {
                                    Err(ExecutorError::Io {
                                        context: "starting a replica".into(),
                                        source: io::Error::other("the launching thread panicked"),
                                    })
                                })
                                .collect()
                        })
                    })
                    .collect()
            })
        };
        launched
            .into_iter()
            .map(|r| match r {
                Ok((record, child)) => Ok(self.track(record, child)),
                Err(e) => self.adopt_started(e),
            })
            .collect()
    }

    /// A start refused because the incarnation was started already (by a server killed
    /// before it recorded the start): the shim wrote the record itself, so the replica is
    /// adopted (running, or with the exit it left) rather than started twice or never
    /// again. Launch files without a record and without a live shim are from a start that
    /// never ran its command: they are removed, so that the next start goes ahead.
    fn adopt_started(&mut self, e: ExecutorError) -> Result<ProcessRecord, ExecutorError> {
        let ExecutorError::AlreadyStarted { dir, .. } = &e else {
            return Err(e);
        };
        if let Ok(Some(record)) = files::read_json::<ProcessRecord>(&dir.join(RECORD_FILE)) {
            self.adopt(record.clone());
            return Ok(record);
        }
        let shim_alive = procfs::all().iter().any(|p| {
            std::fs::read(format!("/proc/{}/cmdline", p.pid)).is_ok_and(|c| {
                c.split(|b| *b == 0)
                    .any(|arg| arg == dir.as_os_str().as_encoded_bytes())
            })
        });
        if !shim_alive && !dir.join(EXIT_FILE).exists() {
            let _ = fs::remove_file(dir.join(LAUNCH_FILE));
        }
        Err(e)
    }

    /// Refuses a spec that is malformed or whose replica runs (tracked or not).
    fn check_startable(&self, spec: &ReplicaProcessSpec) -> Result<(), ExecutorError> {
        if spec.name.is_empty() || spec.incarnation.is_empty() {
            return Err(ExecutorError::InvalidSpec(
                "name and incarnation must not be empty".into(),
            ));
        }
        if spec.container.is_some() && self.config.containers.is_none() {
            return Err(ExecutorError::InvalidSpec(format!(
                "{}: runs in a container, and this machine has no container runtime",
                spec.name
            )));
        }
        if spec.python.is_some() && self.config.python.is_none() {
            return Err(ExecutorError::InvalidSpec(format!(
                "{}: needs a Python environment, and uv is not installed here",
                spec.name
            )));
        }
        if spec.command.is_empty() && spec.container.is_none() {
            return Err(ExecutorError::InvalidSpec(format!(
                "{}: the command is empty",
                spec.name
            )));
        }
        if let Some(t) = self.replicas.get(&spec.name)
            && !t.state.is_terminal()
        {
            return Err(ExecutorError::AlreadyRunning(spec.name.clone()));
        }
        if let Some(other) = self.running_untracked_incarnation(&spec.name) {
            if other.incarnation == spec.incarnation {
                // This very incarnation runs, started by a server that died before it
                // recorded the start: the caller adopts it.
                return Err(ExecutorError::AlreadyStarted {
                    name: spec.name.clone(),
                    incarnation: spec.incarnation.clone(),
                    dir: other.dir,
                });
            }
            return Err(ExecutorError::AlreadyRunning(format!(
                "{} (incarnation {}, pid {}, not adopted yet)",
                spec.name, other.incarnation, other.pid
            )));
        }
        let dir = self.replica_dir(&spec.name, &spec.incarnation);
        if dir.join(RECORD_FILE).exists() || dir.join(LAUNCH_FILE).exists() {
            return Err(ExecutorError::AlreadyStarted {
                name: spec.name.clone(),
                incarnation: spec.incarnation.clone(),
                dir,
            });
        }
        Ok(())
    }

    /// Closes the [`StartGate`] until the returned value is dropped; `None` when it could
    /// not be (the shims then go on at once).
    pub fn close_start_gate(&self) -> Option<StartGate> {
        self.start_gate
            .as_deref()
            .and_then(|p| StartGate::close(p).ok())
    }

    /// The side effects of a start (files, shim, record; the shim makes the cgroup);
    /// touches no tracking state, so several run at once.
    fn launch(&self, spec: &ReplicaProcessSpec) -> Launched {
        self.prepare(spec).and_then(|p| self.spawn_shim(spec, p))
    }

    /// A launch's files: the replica's directory and `launch.json`, for the shim to read.
    fn prepare(&self, spec: &ReplicaProcessSpec) -> Result<Prepared, ExecutorError> {
        let dir = self.replica_dir(&spec.name, &spec.incarnation);
        fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        if let Some(who) = spec.run_as {
            // The tenant's group reads the replica's directories (its log, its launch
            // files), nobody else does, and the tenant cannot change what the server trusts
            // in them: root's, 0750. Its code snapshot the same, read-only.
            let name_dir = dir.parent().unwrap_or(dir.as_path());
            for path in [name_dir, dir.as_path()] {
                set_owner_mode(path, 0, who.gid, 0o750).map_err(io_err(format!(
                    "giving {} to gid {}",
                    path.display(),
                    who.gid
                )))?;
            }
            if let Some(code) = &spec.code {
                set_owner_mode(code, 0, who.gid, 0o550).map_err(io_err(format!(
                    "giving {} to gid {}",
                    code.display(),
                    who.gid
                )))?;
            }
        }
        for (path, content) in &spec.files {
            let path = dir.join(path);
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent)
                    .map_err(io_err(format!("creating {}", parent.display())))?;
            }
            fs::write(&path, content).map_err(io_err(format!("writing {}", path.display())))?;
        }

        let handle = spec
            .container
            .as_ref()
            .zip(self.config.containers.as_ref())
            .map(|(_, rt)| {
                let mut h = rt.handle(&spec.name, &spec.incarnation);
                h.memory_limit = spec.memory_bytes;
                h
            });
        // A container's limits are the runtime's (its own cgroup). With the cgroupfs
        // manager that cgroup is made below the replica's (no limits of its own; the
        // runtime's client does not join it): there Corral reads the container's CPU,
        // memory and OOM kills as a host replica's.
        let cgroupfs = self.config.containers.as_ref().is_some_and(|r| r.cgroupfs);
        // Named here, made by the replica's shim before its command starts (in parallel
        // for a gang, off the control loop); a shim that cannot make it fails the replica
        // with the reason, before the command runs.
        let cgroup = match &self.cgroups {
            Some(m) if handle.is_none() || cgroupfs => Some(m.plan(&format!(
                "{}--{}",
                path_component(&spec.name),
                path_component(&spec.incarnation)
            ))),
            _ => None,
        };
        let cgroup_limits = if handle.is_none() {
            CgroupLimits {
                memory_bytes: spec.memory_bytes,
                cpu_milli: spec.cpu_milli,
            }
        } else {
            CgroupLimits::default()
        };

        let scratch = scratch::for_replica(
            &self.config.run_dir,
            &spec.job,
            &spec.incarnation,
            spec.run_as,
        );
        let mut env = base_env(&dir, &scratch.tmp, &self.config.pass_env);
        // A tenant writes only in directories of its own (the shim makes them): HOME is
        // `home/`, also the default working directory.
        // Its PATH keeps only the directories it may search (the server's PATH may name
        // root's own, where nothing would run as the tenant).
        let home = spec.run_as.map(|_| dir.join(HOME_DIR));
        if let (Some(home), Some(who)) = (&home, spec.run_as) {
            for (k, v) in env.iter_mut() {
                match k.as_str() {
                    "HOME" => *v = home.display().to_string(),
                    "PATH" => *v = crate::tenancy::search_path_for_group(v, who.gid),
                    _ => {}
                }
            }
            // A tenant's uid has no account in /etc/passwd: programs that ask who they are
            // (Python's getpass.getuser(), which torch.distributed calls) read USER and
            // LOGNAME first, and fail without them (seen on a GPU server under torchrun).
            let namespace = spec.job.split('/').next().unwrap_or_default();
            let user = format!("corral-{namespace}");
            env.retain(|(k, _)| k != "USER" && k != "LOGNAME");
            env.push(("USER".into(), user.clone()));
            env.push(("LOGNAME".into(), user));
        }
        // The contract's variables and the job's own win over the base.
        env.retain(|(k, _)| !spec.env.iter().any(|(n, _)| n == k));
        env.extend(spec.env.iter().cloned());
        if !env.iter().any(|(k, _)| k == "CUDA_VISIBLE_DEVICES") {
            let gpus: Vec<String> = spec.gpu_indices.iter().map(u32::to_string).collect();
            env.push(("CUDA_VISIBLE_DEVICES".into(), gpus.join(",")));
        }
        let (command, env, working_dir) = match (&spec.container, &handle, &self.config.containers)
        {
            (Some(request), Some(handle), Some(runtime)) => {
                // The container sees the contract's and the job's variables; the image
                // brings its own PATH and HOME. CUDA_VISIBLE_DEVICES is not set: inside,
                // the placement's GPUs are numbered from 0.
                let (text, multiline_env) = container::env_file(&spec.env);
                let env_path = dir.join(container::ENV_FILE);
                if let Err(e) = fs::write(&env_path, text) {
                    return Err(io_err(format!("writing {}", env_path.display()))(e));
                }
                let args = container::run_args(
                    runtime,
                    handle,
                    request,
                    &container::RunOptions {
                        replica: &spec.name,
                        job: &spec.job,
                        run_dir: &self.config.run_dir,
                        replica_dir: &dir,
                        multiline_env,
                        working_dir: spec.working_dir.as_deref(),
                        code: spec.code.as_deref(),
                        mounts: &spec.mounts,
                        cgroup_parent: cgroup.as_ref().and_then(CgroupRef::hierarchy_path),
                        cpu_milli: spec.cpu_milli,
                        memory_bytes: spec.memory_bytes,
                        gpu_indices: &spec.gpu_indices,
                        run_as: spec.run_as,
                    },
                );
                (args, container::client_env(), dir.clone())
            }
            _ => (
                spec.command.clone(),
                env,
                spec.working_dir
                    .clone()
                    .or_else(|| spec.code.clone())
                    .or(home)
                    .unwrap_or_else(|| dir.clone()),
            ),
        };
        let python = match spec.python.as_ref().zip(self.config.python.as_ref()) {
            None => None,
            Some((env, (uv, envs))) => {
                // A tenant's environments are its own: built for its gid, in a directory
                // only its group reads.
                let envs = match spec.run_as {
                    Some(who) => envs.join(format!("t{}", who.uid)),
                    None => envs.clone(),
                };
                match python::PythonLaunch::new(uv.clone(), envs, env, spec.code.as_deref()) {
                    Ok(p) => Some(python::PythonLaunch {
                        tenant_gid: spec.run_as.map(|w| w.gid),
                        ..p
                    }),
                    Err(e) => {
                        return Err(ExecutorError::Io {
                            context: format!("the python environment of {}", spec.name),
                            source: io::Error::other(e),
                        });
                    }
                }
            }
        };
        let launch = LaunchFile {
            command,
            env,
            working_dir: Some(working_dir),
            log_path: dir.join(LOG_FILE),
            log_limit_bytes: self.config.log_limit_bytes,
            cgroup: cgroup.clone(),
            cgroup_limits,
            record: Some(files::RecordDraft {
                name: spec.name.clone(),
                job: spec.job.clone(),
                incarnation: spec.incarnation.clone(),
                gpu_indices: spec.gpu_indices.clone(),
            }),
            container: handle.clone(),
            python,
            start_gate: self.start_gate.clone(),
            run_as: spec.run_as.filter(|_| handle.is_none()),
            scratch: Some(scratch).filter(|_| handle.is_none()),
        };
        // Written in place: no shim reads it before it is whole (the shim is spawned after),
        // and a directory without a record is not a replica to a restart.
        if let Err(e) = files::write_json(&dir.join(LAUNCH_FILE), &launch) {
            return Err(io_err(format!(
                "writing {}",
                dir.join(LAUNCH_FILE).display()
            ))(e));
        }
        Ok(Prepared {
            dir,
            cgroup,
            container: handle,
        })
    }

    /// The pids of the standby shims ready now (see [`standby`](super::standby)).
    pub fn standby_pids(&self) -> Vec<u32> {
        self.standby.as_ref().map_or_else(Vec::new, |s| s.pids())
    }

    /// Starts the shim of a prepared launch (a standby one when there is one) and writes
    /// the replica's process record.
    fn spawn_shim(&self, spec: &ReplicaProcessSpec, prepared: Prepared) -> Launched {
        let Prepared {
            dir,
            cgroup,
            container: handle,
        } = prepared;
        let record = |pid: u32, start_time: u64| ProcessRecord {
            name: spec.name.clone(),
            job: spec.job.clone(),
            incarnation: spec.incarnation.clone(),
            pid,
            start_time,
            dir: dir.clone(),
            cgroup: cgroup.clone(),
            gpu_indices: spec.gpu_indices.clone(),
            container: handle.clone(),
        };
        if let Some(mut standby) = self.standby.as_ref().and_then(|s| s.take()) {
            // The record first: no shim ever works on a directory that has none.
            let rec = record(standby.child.id(), standby.start_time);
            if files::write_json_atomic(&dir.join(RECORD_FILE), &rec).is_ok()
                && standby.hand_over(&dir).is_ok()
            {
                return Ok((rec, standby.child));
            }
            // It died meanwhile (or the record could not be written): a fresh shim below,
            // whose record replaces this one.
            let _ = standby.child.kill();
            let _ = standby.child.wait();
        }
        // The shim reports into the replica's log and exit file; its own stdout and stderr
        // go nowhere, so that it never writes to a terminal or pipe that ended with the
        // server (and no file is created here for it).
        let mut cmd = Command::new(&self.config.shim.program);
        {
            use std::os::unix::process::CommandExt;
            cmd.args(&self.config.shim.args_prefix)
                .arg(&dir)
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return Err(io_err(format!(
                    "spawning the shim {}",
                    self.config.shim.program.display()
                ))(e));
            }
        };
        let pid = child.id();
        // The child is not reaped yet, so its /proc entry exists even if it already exited.
        let Some(stat) = procfs::stat(pid) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(ExecutorError::Io {
                context: format!("reading /proc/{pid}/stat of the shim"),
                source: io::Error::other("no such process"),
            });
        };
        let record = record(pid, stat.start_time);
        if let Err(e) = files::write_json_atomic(&dir.join(RECORD_FILE), &record) {
            // Without a record a restart could not find it: do not let it run.
            let _ = procfs::signal_group(pid, Signal::KILL);
            let _ = child.wait();
            return Err(io_err(format!(
                "writing {}",
                dir.join(RECORD_FILE).display()
            ))(e));
        }
        Ok((record, child))
    }

    /// Watches a launched replica from now on.
    fn track(&mut self, record: ProcessRecord, child: Child) -> ProcessRecord {
        if let Some(old) = self.replicas.remove(&record.name)
            && let Some(c) = old.child
        {
            self.unreaped.push(c);
        }
        self.insert_tracked(
            record.name.clone(),
            Tracked {
                record: record.clone(),
                child: Some(child),
                state: ProcessState::Running,
                reported: ProcessState::Running,
                kill_at: None,
                killed: false,
            },
        );
        record
    }

    /// An incarnation of `name` that is alive on this machine but not tracked (started before
    /// a restart and not adopted yet): starting another would run the replica twice.
    fn running_untracked_incarnation(&self, name: &str) -> Option<ProcessRecord> {
        let dir = self.config.run_dir.join(path_component(name));
        let incarnations = fs::read_dir(dir).ok()?;
        incarnations.filter_map(Result::ok).find_map(|inc| {
            let rec: ProcessRecord = files::read_json(&inc.path().join(RECORD_FILE)).ok()??;
            let alive = procfs::is_same_alive(rec.pid, rec.start_time) && !rec.exit_path().exists();
            alive.then_some(rec)
        })
    }
}
