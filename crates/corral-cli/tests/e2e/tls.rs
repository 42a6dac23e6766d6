//! HTTPS beyond loopback (issue 33), with the real programs: `corral up --listen 0.0.0.0:P`
//! makes a self-signed certificate and prints its fingerprint; the CLI works with the
//! fingerprint pinned (a flag, or what `corral login` kept), or with the certificate as its
//! CA file, and fails with a clear message without it or with another pin; plain HTTP is not
//! answered there, and is served beyond loopback only when asked for by name.

use super::*;
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Output, Stdio};

use corral_server::api_client::Trust;

const TOKEN: &str = "tls-e2e-token-5b1d";

/// Kills the `corral up` child on every way out of a test.
struct ChildServer(Child);

impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// `corral up` on all addresses with a token, its output in `<dir>/server.log`.
fn start_up(dir: &Path, port: u16, extra: &[&str]) -> Result<ChildServer, Failed> {
    let config = dir.join("corral.yaml");
    std::fs::write(
        &config,
        format!("kind: CorralConfig\ntokens: [{{token: {TOKEN}, namespace: default}}]\n"),
    )?;
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600))?;
    let log = std::fs::File::create(dir.join("server.log"))?;
    let child = Command::new(env!("CARGO_BIN_EXE_corral"))
        .arg("up")
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--config")
        .arg(&config)
        .arg("--listen")
        .arg(format!("0.0.0.0:{port}"))
        .args(extra)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    Ok(ChildServer(child))
}

fn wait_until(what: &str, dir: &Path, mut ready: impl FnMut() -> bool) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
            return Err(format!("{what} within 30 s; server log:\n{log}").into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// `corral list` with `args`, and the environment `env`, no inherited client settings.
fn corral_list(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> std::io::Result<Output> {
    Command::new(env!("CARGO_BIN_EXE_corral"))
        .arg("list")
        .args(args)
        .env_remove("CORRAL_SERVER")
        .env_remove("CORRAL_TOKEN")
        .env_remove("CORRAL_CA_FILE")
        .env_remove("CORRAL_FINGERPRINT")
        .env("CORRAL_CLIENT_CONFIG", dir.join("no-client.yaml"))
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub(super) fn https_beyond_loopback_with_a_pinned_certificate() -> TestResult {
    let dir = tempfile::tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))?;
    let port = free_port()?;
    let _server = start_up(dir.path(), port, &[])?;
    let cert = dir.path().join("data/tls/server.crt");
    let url = format!("https://127.0.0.1:{port}");
    wait_until("a self-signed certificate", dir.path(), || cert.exists())?;
    let fingerprint = corral_server::tls::fingerprint_of_file(&cert)?;
    let pinned = Client::with_trust(&url, Some(TOKEN), &Trust::Fingerprint(fingerprint.clone()))?;
    wait_until("corral up answering HTTPS", dir.path(), || pinned.healthy())?;
    let log = std::fs::read_to_string(dir.path().join("server.log"))?;
    check(
        log.contains(&format!("fingerprint: {fingerprint}")) && log.contains("https://"),
        format!("the fingerprint is printed:\n{log}"),
    )?;
    for f in ["server.crt", "server.key"] {
        let mode = std::fs::metadata(dir.path().join("data/tls").join(f))?
            .permissions()
            .mode();
        check(mode & 0o777 == 0o600, format!("{f} is {mode:o}"))?;
    }

    // The pin as a flag: works.
    let ok = corral_list(
        dir.path(),
        &[
            "--server",
            &url,
            "--token",
            TOKEN,
            "--fingerprint",
            &fingerprint,
        ],
        &[],
    )?;
    check(ok.status.success(), text(&ok))?;
    // Without it: refused, saying how to trust the server.
    let no_pin = corral_list(dir.path(), &["--server", &url, "--token", TOKEN], &[])?;
    let said = text(&no_pin);
    check(
        !no_pin.status.success() && said.contains("not trusted") && said.contains("--fingerprint"),
        said,
    )?;
    // Another pin: refused, naming both fingerprints.
    let other = "00:".repeat(31) + "00";
    let wrong = corral_list(
        dir.path(),
        &["--server", &url, "--token", TOKEN, "--fingerprint", &other],
        &[],
    )?;
    let said = text(&wrong);
    check(
        !wrong.status.success()
            && said.contains(&fingerprint)
            && said.contains(&format!("not the pinned {other}")),
        said,
    )?;
    // The certificate as the CA file (its names include 127.0.0.1).
    let ca = corral_list(
        dir.path(),
        &["--server", &url, "--token", TOKEN],
        &[("CORRAL_CA_FILE", cert.to_str().ok_or("path")?)],
    )?;
    check(ca.status.success(), text(&ca))?;

    // `corral login` keeps server, token and pin (0600); later commands need nothing else.
    let client_config = dir.path().join("client/client.yaml");
    let login = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["login", "--server", &url, "--token", TOKEN])
        .args(["--fingerprint", &fingerprint])
        .env("CORRAL_CLIENT_CONFIG", &client_config)
        .output()?;
    check(login.status.success(), text(&login))?;
    let mode = std::fs::metadata(&client_config)?.permissions().mode();
    check(mode & 0o777 == 0o600, format!("client config is {mode:o}"))?;
    let kept = corral_list(
        dir.path(),
        &[],
        &[(
            "CORRAL_CLIENT_CONFIG",
            client_config.to_str().ok_or("path")?,
        )],
    )?;
    check(kept.status.success(), text(&kept))?;
    // A login whose pin does not match keeps nothing.
    let bad_login = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["login", "--server", &url, "--fingerprint", &other])
        .env("CORRAL_CLIENT_CONFIG", dir.path().join("bad.yaml"))
        .output()?;
    check(
        !bad_login.status.success() && !dir.path().join("bad.yaml").exists(),
        text(&bad_login),
    )?;

    // Plain HTTP on the same port gets no answer.
    let plain = Client::new(&format!("http://127.0.0.1:{port}"), Some(TOKEN));
    let e = plain.health().err().ok_or("plain HTTP was answered")?;
    check(e.to_string().contains("use an https:// URL"), e.to_string())?;
    Ok(())
}

pub(super) fn plain_http_beyond_loopback_only_by_name() -> TestResult {
    let dir = tempfile::tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))?;
    let port = free_port()?;
    let _server = start_up(dir.path(), port, &["--allow-plain-http-beyond-loopback"])?;
    let plain = Client::new(&format!("http://127.0.0.1:{port}"), Some(TOKEN));
    wait_until("corral up answering plain HTTP", dir.path(), || {
        plain.healthy()
    })?;
    let log = std::fs::read_to_string(dir.path().join("server.log"))?;
    check(
        log.contains("in the clear") && !dir.path().join("data/tls").exists(),
        format!("warned, no certificate made:\n{log}"),
    )?;
    // The flag and a certificate contradict each other: refused before anything starts.
    let both = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args([
            "up",
            "--allow-plain-http-beyond-loopback",
            "--tls-cert",
            "c",
            "--tls-key",
            "k",
        ])
        .output()?;
    check(
        !both.status.success() && String::from_utf8_lossy(&both.stderr).contains("cannot be used"),
        text(&both),
    )?;
    Ok(())
}
