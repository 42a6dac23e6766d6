//! `submit --code`: the snapshot runs as submitted, goes with the job, and a refused
//! upload leaves nothing behind.

use super::*;

/// Entries of `dir` (none when it does not exist), sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn code_job(name: &str, script: &str) -> String {
    format!(
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  framework: generic
  runPolicy: {{backoffLimit: 0}}
  replicas:
    worker:
      count: 1
      restartPolicy: Never
      resources: {{cpu: 100m, memory: 64Mi}}
      template: {{command: [/bin/sh, {script}]}}
"
    )
}

pub(super) fn code_snapshots_run_as_submitted_and_go_with_the_job() -> TestResult {
    const LIMIT: u64 = 64 * 1024;
    let c = TestCluster::start(&format!(
        "kind: CorralConfig\ncodeSnapshots: {{maxBytes: {LIMIT}}}\n"
    ))?;
    let client = c.client(None);
    let work = tempfile::tempdir()?;
    let w = work.path();
    // The job waits until the test has edited the code, then reads it.
    std::fs::write(
        w.join("run.sh"),
        "while [ ! -e \"$HOME/go\" ]; do sleep 0.1; done\n\
         echo \"message=$(cat msg.txt) cwd=$(pwd)\"\n\
         . ./lib/more.sh\n\
         if [ -e secret.txt ]; then echo secret-present; else echo secret-absent; fi\n\
         if echo x > written.txt 2>/dev/null; then echo wrote; else echo read-only; fi\n",
    )?;
    std::fs::create_dir_all(w.join("lib"))?;
    std::fs::write(w.join("lib/more.sh"), "echo more=$(cat msg.txt)\n")?;
    std::fs::write(w.join("msg.txt"), "original\n")?;
    std::fs::write(w.join("secret.txt"), "do not ship\n")?;
    std::fs::write(w.join(".gitignore"), "secret.txt\n")?;

    let up = corral_cli::code_archive::upload(&code_job("snap", "run.sh"), w)?;
    let submitted = client.submit_with_code("default", &up.boundary, &up.body)?;
    check(submitted.len() == 1, format!("{submitted:?}"))?;
    let uid = submitted[0].uid.clone();
    let copy = c.code_dir().join(&uid);
    check(
        entries(&copy) == vec![".gitignore", "lib", "msg.txt", "run.sh"],
        format!("the job's copy holds {:?}", entries(&copy)),
    )?;
    // Edited after submit: the job must not see it.
    std::fs::write(w.join("msg.txt"), "edited\n")?;
    std::fs::write(w.join("lib/more.sh"), "echo more=edited-script\n")?;
    wait_for_state(&client, "default", "snap", Duration::from_secs(60), |s| {
        s == JobState::Running
    })?;
    let d = client.describe("default", "snap")?;
    let replica_dir = d.replicas[0]
        .log_path
        .as_ref()
        .and_then(|p| Path::new(p).parent().map(Path::to_path_buf))
        .ok_or("no log path")?;
    // In its HOME: the replica directory, or `home/` in it when the replica runs as its
    // namespace's uid (as root).
    // SAFETY: geteuid has no preconditions and cannot fail.
    let home = if unsafe { libc::geteuid() } == 0 {
        replica_dir.join(corral_local::executor::HOME_DIR)
    } else {
        replica_dir
    };
    // Running is recorded when the shim is spawned; it makes the tenant's HOME just after.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !home.is_dir() {
        check(
            Instant::now() < deadline,
            format!("{} was not made", home.display()),
        )?;
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(home.join("go"), "")?;
    let state = wait_for_state(
        &client,
        "default",
        "snap",
        Duration::from_secs(60),
        JobState::is_finished,
    )?;
    let mut log = Vec::new();
    client.logs("default", "snap", &LogRequest::default(), &mut log)?;
    let log = String::from_utf8_lossy(&log).into_owned();
    check(state == JobState::Succeeded, format!("{state}: {log}"))?;
    check(
        log.contains(&format!("message=original cwd={}", copy.display())),
        format!("runs from its snapshot, as submitted: {log}"),
    )?;
    check(log.contains("more=original"), log.clone())?;
    check(log.contains("secret-absent"), format!(".gitignored: {log}"))?;
    // The copy is read-only by its modes, which root writes through.
    if !running_as_root() {
        check(log.contains("read-only"), log.clone())?;
    }
    let job = client.get("default", "snap")?;
    check(
        job.pointer("/metadata/annotations/corral.dev~1code")
            .and_then(Value::as_str)
            == Some(up.digest.as_str()),
        format!("the digest annotation: {job}"),
    )?;

    // Delete removes the copy.
    client.delete("default", "snap")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while copy.exists() {
        check(Instant::now() < deadline, "the snapshot outlived its job")?;
        std::thread::sleep(Duration::from_millis(100));
    }

    // A manifest may not claim a snapshot of its own.
    let claimed = code_job("claims", "run.sh").replace(
        "metadata: {name: claims}",
        "metadata: {name: claims, annotations: {corral.dev/code: 'sha256:00'}}",
    );
    let err = client
        .submit("default", &claimed)
        .err()
        .ok_or("a manifest set the code annotation")?;
    check(err.to_string().contains("corral.dev/code"), err.to_string())?;

    // Refused submissions leave nothing behind: an invalid manifest...
    let bad = corral_cli::code_archive::upload(&code_job("bad-", "run.sh"), w)?;
    let err = client
        .submit_with_code("default", &bad.boundary, &bad.body)
        .err()
        .ok_or("an invalid manifest was accepted")?;
    check(err.status() == Some(400), err.to_string())?;
    // ...and a snapshot over the limit, refused with the limit named.
    let mut noise = Vec::with_capacity(2 * LIMIT as usize);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..2 * LIMIT {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        noise.push(x as u8);
    }
    std::fs::write(w.join("weights.bin"), &noise)?;
    let big = corral_cli::code_archive::upload(&code_job("big", "run.sh"), w)?;
    let err = client
        .submit_with_code("default", &big.boundary, &big.body)
        .err()
        .ok_or("a snapshot over the limit was accepted")?;
    check(
        err.status() == Some(413) && err.to_string().contains(&LIMIT.to_string()),
        err.to_string(),
    )?;
    // Small archive, many bytes of files: refused while unpacking.
    std::fs::write(w.join("weights.bin"), vec![0u8; 2 * LIMIT as usize])?;
    let zeros = corral_cli::code_archive::upload(&code_job("zeros", "run.sh"), w)?;
    let err = client
        .submit_with_code("default", &zeros.boundary, &zeros.body)
        .err()
        .ok_or("a snapshot with too many bytes of files was accepted")?;
    check(
        err.status() == Some(413) && err.to_string().contains(&LIMIT.to_string()),
        err.to_string(),
    )?;
    check(
        client.list(Some("default"))?.is_empty(),
        "no job was stored",
    )?;
    let left: Vec<String> = entries(&c.code_dir())
        .into_iter()
        .filter(|e| e != ".incoming")
        .collect();
    check(left.is_empty(), format!("snapshots left: {left:?}"))?;
    let incoming = entries(&c.code_dir().join(".incoming"));
    check(incoming.is_empty(), format!("uploads left: {incoming:?}"))?;
    Ok(())
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}
