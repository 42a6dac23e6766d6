//! MPI on the embedded cluster: the example trains through real `mpirun`, whose `orted`
//! reaches the workers through `corral rsh` (the exec API); exec is scoped to a replica's
//! own job; a worker that dies under mpirun fails the job with mpirun's words, no hang.

use super::*;
use corral_server::api_client::ExecCall;

pub(super) fn mpirun_available() -> bool {
    std::process::Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn uv_available() -> bool {
    corral_local::executor::python::find_uv().is_some()
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub(super) fn launcher_log(client: &Client, job: &str) -> Result<String, Failed> {
    let mut log = Vec::new();
    let request = LogRequest {
        replica: Some("launcher-0".into()),
        ..LogRequest::default()
    };
    client.logs("default", job, &request, &mut log)?;
    Ok(String::from_utf8_lossy(&log).into_owned())
}

/// Runs a command in a replica; its exit status, stdout and stderr. A job is Running once
/// its shims are spawned, and its command may still be coming: a replica that is "still
/// preparing" is asked again for up to 30 s, as `corral rsh` does.
fn exec(
    client: &Client,
    job: &str,
    replica: &str,
    command: &[&str],
    stdin: Option<&str>,
) -> Result<(i32, String, String), corral_server::api_client::ClientError> {
    let command: Vec<String> = command.iter().map(|s| s.to_string()).collect();
    let call = ExecCall {
        namespace: "default",
        job,
        replica,
        command: &command,
        stdin: stdin.map(str::to_string),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        match client.exec(&call, &mut out, &mut err) {
            Err(e) if e.to_string().contains("still preparing") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e),
            Ok(code) => {
                return Ok((
                    code,
                    String::from_utf8_lossy(&out).into_owned(),
                    String::from_utf8_lossy(&err).into_owned(),
                ));
            }
        }
    }
}

pub(super) fn mpi_example_trains_through_mpirun_and_corral_rsh() -> TestResult {
    if !common::prerequisite(
        mpirun_available(),
        "mpirun (Debian: openmpi-bin) is not installed",
    ) || !common::prerequisite(uv_available(), "uv is not installed")
    {
        return Ok(());
    }
    // The real `corral up` (it runs the corral-server program, which is then mpirun's rsh
    // agent), as the example's comment has a user run it.
    let data = super::usage::admin_dir()?;
    let up = super::usage::UpProcess::start(data.path(), super::usage::free_port()?)?;
    let client = up.client(super::usage::ADMIN_TOKEN);
    let dir = repo_root().join("examples/mpi");
    let manifest = std::fs::read_to_string(dir.join("job.yaml"))?;
    let started = Instant::now();
    let upload = corral_cli::code_archive::upload(&manifest, &dir)?;
    client.submit_with_code("default", &upload.boundary, &upload.body)?;
    let state = wait_for_state(
        &client,
        "default",
        "mpi-allreduce",
        Duration::from_secs(300),
        JobState::is_finished,
    )?;
    let log = launcher_log(&client, "mpi-allreduce")?;
    eprintln!(
        "mpi-allreduce: {state} in {:.1}s (submit to finish, Python environment included)",
        started.elapsed().as_secs_f64()
    );
    check(state == JobState::Succeeded, format!("{state}: {log}"))?;
    let result = log
        .lines()
        .find(|l| l.starts_with("RESULT "))
        .ok_or(format!("no RESULT line: {log}"))?;
    // Two ranks, each in its own worker replica: orted ran inside the workers.
    check(
        result.starts_with("RESULT ok ranks=2 replicas=2")
            && result.contains("mpi-allreduce-worker-0")
            && result.contains("mpi-allreduce-worker-1"),
        result.to_string(),
    )
}

/// An MPI job whose workers and launcher only wait, and a job beside it.
fn sleeping_mpi_job(name: &str) -> String {
    format!(
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  framework: mpi
  runPolicy: {{backoffLimit: 0}}
  replicas:
    launcher:
      restartPolicy: Never
      resources: {{cpu: 100m, memory: 64Mi}}
      template: {{command: [sleep, \"120\"]}}
    worker:
      count: 1
      restartPolicy: Never
      resources: {{cpu: 100m, memory: 64Mi}}
      template: {{command: [sleep, \"120\"], env: [{{name: WHO, value: {name}-worker}}]}}
"
    )
}

pub(super) fn exec_runs_in_the_replica_and_only_within_its_own_job() -> TestResult {
    let c = TestCluster::start("kind: CorralConfig\n")?;
    let client = c.client(None);
    client.submit("default", &sleeping_mpi_job("mine"))?;
    client.submit("default", &sleeping_mpi_job("theirs"))?;
    for job in ["mine", "theirs"] {
        wait_for_state(&client, "default", job, Duration::from_secs(60), |s| {
            s == JobState::Running
        })?;
    }
    // People: the replica's environment and working directory, the command's own exit
    // status, standard input.
    let (code, out, _) = exec(
        &client,
        "mine",
        "worker-0",
        &["sh", "-c", "echo $WHO $CORRAL_REPLICA; exit 7"],
        None,
    )?;
    check(
        code == 7 && out == "mine-worker mine-worker-0\n",
        format!("{code} {out:?}"),
    )?;
    let (code, out, _) = exec(&client, "mine", "mine-worker-0", &["cat"], Some("in\n"))?;
    check(code == 0 && out == "in\n", format!("{code} {out:?}"))?;
    // Its user: as root, the namespace's (never root), without a way back through a setuid
    // program, as the replica's own command.
    let (code, out, _) = exec(
        &client,
        "mine",
        "worker-0",
        &["sh", "-c", "id -u; grep NoNewPrivs /proc/self/status"],
        None,
    )?;
    // SAFETY: geteuid(2) has no preconditions.
    let me = unsafe { libc::geteuid() };
    let uid: Option<u32> = out.lines().next().and_then(|l| l.trim().parse().ok());
    if me == 0 {
        check(
            code == 0 && uid.is_some_and(|u| u != 0) && out.contains("NoNewPrivs:\t1"),
            format!("exec as root runs as the tenant: {code} {out:?}"),
        )?;
    } else {
        check(
            uid == Some(me),
            format!("exec runs as the server's user: {out:?}"),
        )?;
    }
    if me == 0 {
        // As root each job has its own /dev/shm, and exec enters it: a file made there by
        // an exec into one replica is seen by the job's other replica, not by another
        // job's, nor on the machine.
        let probe = format!("exec-probe-{}", std::process::id());
        let (code, _, err) = exec(
            &client,
            "mine",
            "worker-0",
            &["touch", &format!("/dev/shm/{probe}")],
            None,
        )?;
        check(code == 0, format!("touch in /dev/shm: {code} {err}"))?;
        let seen_by = |job: &str, replica: &str| -> Result<bool, Failed> {
            exec(&client, job, replica, &["ls", "/dev/shm"], None)
                .map(|(_, out, _)| out.lines().any(|l| l == probe))
                .map_err(|e| format!("ls /dev/shm in {job} {replica}: {e}").into())
        };
        check(
            seen_by("mine", "launcher-0")?,
            "the job's other replica does not share its /dev/shm",
        )?;
        check(
            !seen_by("theirs", "worker-0")?,
            "another job sees this job's /dev/shm",
        )?;
        check(
            !std::path::Path::new("/dev/shm").join(&probe).exists(),
            "the job's /dev/shm is the machine's",
        )?;
    }
    let (code, _, err) = exec(&client, "mine", "worker-0", &["no-such-program"], None)?;
    check(
        code == 127 && err.contains("no-such-program"),
        format!("{code} {err}"),
    )?;
    // The launcher's credentials: only MPI launchers get them.
    let (_, token, _) = exec(
        &client,
        "mine",
        "launcher-0",
        &["sh", "-c", "printf %s \"$CORRAL_TOKEN\""],
        None,
    )?;
    check(token.starts_with("cj1.default.mine."), token.clone())?;
    let (_, worker_token, _) = exec(
        &client,
        "mine",
        "worker-0",
        &["sh", "-c", "printf %s \"$CORRAL_TOKEN\""],
        None,
    )?;
    check(worker_token.is_empty(), "a worker has no exec credentials")?;
    let replica = c.client(Some(&token));
    let (code, out, _) = exec(&replica, "mine", "worker-0", &["echo", "own"], None)?;
    check(code == 0 && out == "own\n", format!("{code} {out:?}"))?;
    // Another job's replica: refused, saying why.
    let e = exec(&replica, "theirs", "worker-0", &["echo", "x"], None)
        .err()
        .ok_or("exec into another job's replica was not refused")?;
    check(
        e.status() == Some(403) && e.to_string().contains("only into replicas of its own job"),
        format!("{:?} {e}", e.status()),
    )?;
    // Nor does the token read anything else.
    let e = replica
        .list(Some("default"))
        .err()
        .ok_or("a replica token listed jobs")?;
    check(e.status() == Some(403), e.to_string())?;
    // A forged token (another job's name on this MAC) is refused too.
    let forged = token.replacen(".mine.", ".theirs.", 1);
    let e = exec(
        &c.client(Some(&forged)),
        "theirs",
        "worker-0",
        &["true"],
        None,
    )
    .err()
    .ok_or("a forged token was accepted")?;
    check(e.status() == Some(401), e.to_string())?;
    // A replica that does not exist, and a finished job.
    let e = exec(&client, "mine", "worker-5", &["true"], None)
        .err()
        .ok_or("exec into worker-5")?;
    check(e.status() == Some(404), e.to_string())?;
    client.delete("default", "theirs")?;
    Ok(())
}

pub(super) fn mpirun_fails_with_its_message_when_a_worker_is_gone() -> TestResult {
    if !common::prerequisite(
        mpirun_available(),
        "mpirun (Debian: openmpi-bin) is not installed",
    ) {
        return Ok(());
    }
    let c = TestCluster::start("kind: CorralConfig\n")?;
    let client = c.client(None);
    let job = "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {name: lost}
spec:
  framework: mpi
  runPolicy: {backoffLimit: 0}
  replicas:
    launcher:
      restartPolicy: Never
      resources: {cpu: 100m, memory: 64Mi}
      template:
        command: [mpirun, -np, \"2\", sh, -c, \"echo rank-up; sleep 120\"]
        env:
          - {name: OMPI_ALLOW_RUN_AS_ROOT, value: \"1\"}
          - {name: OMPI_ALLOW_RUN_AS_ROOT_CONFIRM, value: \"1\"}
    worker:
      count: 2
      restartPolicy: Never
      resources: {cpu: 100m, memory: 64Mi}
      template: {command: [sleep, \"300\"]}
";
    client.submit("default", job)?;
    // Both ranks up: orted runs in each worker.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let log = launcher_log(&client, "lost").unwrap_or_default();
        if log.matches("rank-up").count() == 2 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("the ranks did not start: {log}").into());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let d = client.describe("default", "lost")?;
    let pid = d
        .replicas
        .iter()
        .find(|r| r.name == "lost-worker-1")
        .and_then(|r| r.pid)
        .ok_or("worker-1 has no pid")?;
    // The worker's whole process group, as a node that dies takes it: its command, the
    // orted exec'd into it and that orted's rank.
    let killed = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .status()?;
    check(killed.success(), "kill the worker's group")?;
    let started = Instant::now();
    let state = wait_for_state(
        &client,
        "default",
        "lost",
        Duration::from_secs(60),
        JobState::is_finished,
    )?;
    let log = launcher_log(&client, "lost")?;
    let d = client.describe("default", "lost")?;
    // The Failed condition's message, as `corral describe` shows it.
    let failed = d
        .job
        .status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .rev()
                .find(|c| c.type_ == corral_api::training_job::ConditionType::Failed)
        })
        .map(|c| c.message.clone())
        .unwrap_or_default();
    eprintln!(
        "lost: {state} {:.1}s after the worker was killed; {failed}",
        started.elapsed().as_secs_f64()
    );
    check(state == JobState::Failed, format!("{state}: {log}"))?;
    check(
        failed.contains("worker-1") || failed.contains("launcher-0"),
        format!("the reason names the replica that failed: {failed}"),
    )?;
    // mpirun said what happened (orted lost, or its rank killed), and did not hang.
    check(
        log.contains("ORTE has lost communication") || log.contains("mpirun noticed"),
        format!("mpirun's message in the launcher's log: {log}"),
    )
}

/// mpirun's rsh agent over HTTPS: the launcher is given the API's https URL and the
/// fingerprint of its certificate, and `corral rsh` pins it to start orted in the workers.
pub(super) fn mpirun_reaches_its_workers_through_an_https_api() -> TestResult {
    if !common::prerequisite(
        mpirun_available(),
        "mpirun (Debian: openmpi-bin) is not installed",
    ) {
        return Ok(());
    }
    let (c, fingerprint) = TestCluster::start_https("kind: CorralConfig\n")?;
    let client = Client::with_trust(
        &c.server.url(),
        None,
        &corral_server::api_client::Trust::Fingerprint(fingerprint.clone()),
    )?;
    let job = "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {name: over-tls}
spec:
  framework: mpi
  runPolicy: {backoffLimit: 0}
  replicas:
    launcher:
      restartPolicy: Never
      resources: {cpu: 100m, memory: 64Mi}
      template:
        command: [sh, -c, 'echo \"server=$CORRAL_SERVER pin=$CORRAL_FINGERPRINT\"; mpirun -np 2 sh -c \"echo rank-up\"']
        env:
          - {name: OMPI_ALLOW_RUN_AS_ROOT, value: \"1\"}
          - {name: OMPI_ALLOW_RUN_AS_ROOT_CONFIRM, value: \"1\"}
    worker:
      count: 2
      restartPolicy: Never
      resources: {cpu: 100m, memory: 64Mi}
      template: {command: [sleep, \"300\"]}
";
    client.submit("default", job)?;
    let state = wait_for_state(
        &client,
        "default",
        "over-tls",
        Duration::from_secs(120),
        JobState::is_finished,
    )?;
    let log = launcher_log(&client, "over-tls")?;
    check(
        state == JobState::Succeeded
            && log.contains("server=https://")
            && log.contains(&format!("pin={fingerprint}"))
            && log.matches("rank-up").count() == 2,
        format!("{state}: {log}"),
    )
}
