//! What one party must not see of another: a namespace's token sees only its own jobs,
//! and the server's environment stays out of replicas.

use super::*;

const TOKENS: &str = "
apiVersion: corral.dev/v1alpha1
kind: CorralConfig
tokens:
  - {token: token-a, namespace: team-a}
  - {token: token-b, namespace: team-b}
  - {token: token-admin}
";

pub(super) fn tokens_keep_namespaces_apart() -> TestResult {
    let c = TestCluster::start(TOKENS)?;
    let b = c.client(Some("token-b"));
    b.submit("team-b", &parked_job("secret"))?;
    let a = c.client(Some("token-a"));
    a.submit("team-a", &parked_job("mine"))?;
    // With no -n, the CLI works in the token's namespace.
    let given = remote::NamespaceArgs::default();
    check(
        given.given().is_some() || given.resolve(&a) == "team-a",
        "the token's namespace is the default one",
    )?;

    // Team A cannot read, list, describe, log, suspend or delete team B's jobs, and cannot tell
    // an existing job from a missing one.
    let job = c.url("/api/v1/namespaces/team-b/trainingjobs/secret");
    let missing = c.url("/api/v1/namespaces/team-b/trainingjobs/no-such-job");
    for (method, url) in [
        ("GET", job.clone()),
        ("GET", format!("{job}/describe")),
        ("GET", format!("{job}/logs")),
        ("POST", format!("{job}/suspend")),
        ("DELETE", job.clone()),
        ("GET", c.url("/api/v1/namespaces/team-b/trainingjobs")),
    ] {
        let (status, body) = raw(method, &url, Some("token-a"), None)?;
        check(
            status == 403 && error_code(&body) == "Forbidden",
            format!("{method} {url}: {status} {body}"),
        )?;
        let other = url.replace("/secret", "/no-such-job");
        if other != url {
            let (s2, body2) = raw(method, &other, Some("token-a"), None)?;
            check(
                s2 == status && body2 == body,
                format!("{method}: existing and missing jobs differ: {body} / {body2}"),
            )?;
        }
    }
    let _ = missing;
    let (status, body) = raw(
        "POST",
        &c.url("/api/v1/namespaces/team-b/trainingjobs"),
        Some("token-a"),
        Some(parked_job("sneaky").as_bytes()),
    )?;
    check(
        status == 403,
        format!("submit into team-b with token-a: {status} {body}"),
    )?;

    // A document naming another namespace, sent to one's own, is refused too.
    let smuggled = parked_job("smuggled").replace(
        "metadata: {name: smuggled}",
        "metadata: {name: smuggled, namespace: team-b}",
    );
    let err = a
        .submit("team-a", &smuggled)
        .err()
        .ok_or("a job for team-b was accepted from token-a")?;
    check(
        err.status() == Some(400) || err.status() == Some(403),
        format!("{err}"),
    )?;

    // Listing everything shows only one's own namespace.
    let all = a.list(None)?;
    check(
        all.iter().all(|j| j.namespace == "team-a") && all.len() == 1,
        format!("{all:?}"),
    )?;
    // B and the admin token see B's job; B's job is still there.
    check(
        b.get("team-b", "secret").is_ok(),
        "team-b cannot read its own job",
    )?;
    let admin = c.client(Some("token-admin"));
    check(
        admin.list(None)?.len() == 2,
        "the admin token does not see both jobs",
    )?;
    check(
        b.list(Some("team-b"))?.len() == 1,
        "team-b's job disappeared",
    )?;

    // /metrics: a token is needed, and per-replica series (which name jobs) are shown to
    // their namespace's token and the admin token only.
    b.submit(
        "team-b",
        &parked_job("busy").replace("  runPolicy: {suspend: true}\n", ""),
    )?;
    wait_for_state(&b, "team-b", "busy", Duration::from_secs(30), |s| {
        s == JobState::Running
    })?;
    let busy = "job=\"busy\"";
    let (status, body) = raw("GET", &c.url("/metrics"), None, None)?;
    check(
        status == 401,
        format!("/metrics without a token: {status} {body}"),
    )?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, text) = raw("GET", &c.url("/metrics"), Some("token-b"), None)?;
        check(status == 200, format!("/metrics with token-b: {status}"))?;
        if text.contains(busy) {
            break;
        }
        check(
            Instant::now() < deadline,
            format!("team-b's replica is not in /metrics for token-b:\n{text}"),
        )?;
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, text) = raw("GET", &c.url("/metrics"), Some("token-a"), None)?;
    check(
        status == 200 && !text.contains(busy) && text.contains("corral_jobs{"),
        format!("/metrics for token-a shows team-b's job or no cluster gauges:\n{text}"),
    )?;
    let (_, text) = raw("GET", &c.url("/metrics"), Some("token-admin"), None)?;
    check(
        text.contains(busy),
        "the admin token does not see team-b's replica",
    )?;
    b.delete("team-b", "busy")?;

    // No token, or an unknown one: 401.
    let (status, body) = raw(
        "GET",
        &c.url("/api/v1/namespaces/team-a/trainingjobs"),
        None,
        None,
    )?;
    check(
        status == 401 && error_code(&body) == "Unauthorized",
        format!("{status} {body}"),
    )?;
    let (status, _) = raw(
        "GET",
        &c.url("/api/v1/namespaces/team-a/trainingjobs"),
        Some("nope"),
        None,
    )?;
    check(status == 401, format!("unknown token: {status}"))?;
    // The CLI shows the problem and the fix.
    let err = c
        .client(None)
        .list(Some("team-a"))
        .err()
        .ok_or("listing without a token worked")?;
    check(err.to_string().contains("--token"), err.to_string())?;
    Ok(())
}

/// Kills the `corral up` child on every way out of a test.
struct ChildServer(std::process::Child);

impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The real programs: `corral up` started with a secret and an allowed variable in its
/// environment (as an operator's shell would hold a cloud key), a job submitted with
/// `corral submit` into a tenant's namespace prints its environment, `corral logs` reads
/// it back. The secret must not reach the replica; the allowed variable (`passEnv`) must.
pub(super) fn the_servers_environment_stays_out_of_replicas() -> TestResult {
    const SECRET_VALUE: &str = "s3cr3t-e2e-value-9f2c";
    let corral = PathBuf::from(env!("CARGO_BIN_EXE_corral"));
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("corral.yaml");
    std::fs::write(
        &config,
        "apiVersion: corral.dev/v1alpha1\nkind: CorralConfig\n\
         passEnv: [CORRAL_E2E_ALLOWED]\n",
    )?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let log = std::fs::File::create(dir.path().join("server.log"))?;
    let server = ChildServer(
        std::process::Command::new(&corral)
            .arg("up")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--config")
            .arg(&config)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .env("CORRAL_E2E_CLOUD_KEY", SECRET_VALUE)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_VALUE)
            .env("CORRAL_E2E_ALLOWED", "visible")
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?,
    );
    let client = Client::new(&url, None);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !client.healthy() {
        check(
            Instant::now() < deadline,
            "corral up did not answer in 30 s",
        )?;
        std::thread::sleep(Duration::from_millis(50));
    }
    let job = dir.path().join("printenv.yaml");
    std::fs::write(
        &job,
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {name: printenv}
spec:
  framework: pytorch
  replicas:
    worker:
      count: 1
      restartPolicy: Never
      resources: {cpu: 100m, memory: 64Mi}
      template:
        command: [/bin/sh, -c, 'env; echo END-OF-ENV']
        env: [{name: OWN, value: mine}]
",
    )?;
    let cli = |args: &[&str]| -> Result<String, Failed> {
        let out = std::process::Command::new(&corral)
            .args(args)
            .args(["-n", "team-b", "--server", &url])
            .env_remove("CORRAL_TOKEN")
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        check(
            out.status.success(),
            format!(
                "corral {args:?} failed: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            ),
        )?;
        Ok(text)
    };
    cli(&["submit", &job.display().to_string()])?;
    let state = wait_for_state(
        &client,
        "team-b",
        "printenv",
        Duration::from_secs(60),
        |s| s.is_finished(),
    )?;
    check(
        state == JobState::Succeeded,
        format!("the job ended {state}"),
    )?;
    let out = cli(&["logs", "printenv"])?;
    check(out.contains("END-OF-ENV"), format!("no output:\n{out}"))?;
    check(
        !out.contains(SECRET_VALUE),
        format!("the server's secret reached the replica:\n{out}"),
    )?;
    let vars: BTreeMap<&str, &str> = out.lines().filter_map(|l| l.split_once('=')).collect();
    check(
        vars.get("CORRAL_E2E_ALLOWED") == Some(&"visible"),
        format!("the passEnv variable is missing:\n{out}"),
    )?;
    check(
        vars.get("OWN") == Some(&"mine"),
        format!("the job's env:\n{out}"),
    )?;
    check(
        vars.contains_key("RANK"),
        format!("the contract's env:\n{out}"),
    )?;
    let tmpdir = vars.get("TMPDIR").copied().unwrap_or_default();
    check(
        tmpdir.starts_with(&dir.path().join("data").display().to_string()),
        format!("TMPDIR {tmpdir:?} is not the replica's own"),
    )?;
    drop(server);
    Ok(())
}

/// Every write through the API is in the audit trail with the token's identity (its name,
/// else its place in the list, and its namespace), refused ones with why; only a token of
/// every namespace reads it, and never sees a token in it.
pub(super) fn writes_are_audited_with_the_tokens_identity() -> TestResult {
    let c = TestCluster::start(
        "kind: CorralConfig
tokens:
  - {token: token-a, namespace: team-a, name: alice}
  - {token: token-b, namespace: team-b}
  - {token: token-admin, name: ops}
",
    )?;
    c.client(Some("token-a"))
        .submit("team-a", &parked_job("audited"))?;
    // team-b's token tries to delete team-a's job: refused, and recorded.
    let (status, _) = raw(
        "DELETE",
        &c.url("/api/v1/namespaces/team-a/trainingjobs/audited"),
        Some("token-b"),
        None,
    )?;
    check(
        status == 403,
        format!("the delete was not refused: {status}"),
    )?;
    // Reads are not writes.
    c.client(Some("token-a")).list(Some("team-a"))?;

    let (status, body) = raw("GET", &c.url("/api/v1/audit"), Some("token-a"), None)?;
    check(
        status == 403 && error_code(&body) == "Forbidden",
        format!("a namespace's token read the audit trail: {status} {body}"),
    )?;
    let entries = c.client(Some("token-admin")).audit(100)?;
    check(
        entries.len() == 2,
        format!("expected the submit and the refused delete: {entries:#?}"),
    )?;
    let submit = &entries[0];
    check(
        submit.who == "alice"
            && submit.scope == "team-a"
            && submit.action == "POST"
            && submit.target == "/api/v1/namespaces/team-a/trainingjobs"
            && submit.status == 201
            && submit.outcome == "ok",
        format!("the submit: {submit:#?}"),
    )?;
    let delete = &entries[1];
    check(
        delete.who == "token #2"
            && delete.scope == "team-b"
            && delete.action == "DELETE"
            && delete.target == "/api/v1/namespaces/team-a/trainingjobs/audited"
            && delete.status == 403
            && delete.outcome.starts_with("Forbidden: "),
        format!("the refused delete: {delete:#?}"),
    )?;
    check(
        delete.at_ms >= submit.at_ms && delete.seq > submit.seq,
        "entries in order",
    )?;
    let text = serde_json::to_string(&entries).map_err(|e| e.to_string())?;
    check(
        !text.contains("token-a") && !text.contains("token-b"),
        format!("a token is in the audit trail: {text}"),
    )?;

    // Every write the API offers, as its OpenAPI document lists them (a new one included),
    // is recorded with its outcome, refused or not. Queues, quotas and tokens are no
    // writes here: they come from corral.yaml, read at start.
    let (_, body) = raw("GET", &c.url("/openapi.json"), Some("token-admin"), None)?;
    let doc: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    let mut writes = Vec::new();
    for (path, ops) in doc["paths"].as_object().into_iter().flatten() {
        for method in ops.as_object().into_iter().flatten().map(|(m, _)| m) {
            if method != "get" && path.starts_with("/api/") {
                let path = path
                    .replace("{namespace}", "team-b")
                    .replace("{name}", "nothing")
                    .replace("{replica}", "worker-0");
                writes.push((method.to_uppercase(), path));
            }
        }
    }
    check(
        writes.len() >= 10,
        format!("the OpenAPI document lists fewer writes than the API has: {writes:?}"),
    )?;
    for (method, path) in &writes {
        raw(method, &c.url(path), Some("token-b"), Some(b"{}"))?;
    }
    let after = c.client(Some("token-admin")).audit(100)?;
    for (method, path) in &writes {
        check(
            after.iter().any(|e| {
                e.action == *method && e.target == *path && e.scope == "team-b" && e.status > 0
            }),
            format!("{method} {path} is not in the audit trail: {after:#?}"),
        )?;
    }
    Ok(())
}
