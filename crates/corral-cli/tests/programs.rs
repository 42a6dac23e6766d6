//! `corral operator` and `corral up` run the `corral-operator` and `corral-server` programs in
//! their place, and an operator that cannot have its listen port stops at once, saying which
//! port and which flag.

use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

/// A kubeconfig naming an API server nobody serves: the operator reads it and gets as far as
/// binding its own port before it would contact the API server.
fn kubeconfig(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:9\"}}]\n\
         users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n\
         current-context: x\n",
    )
    .expect("write kubeconfig");
    path
}

fn run_until_exit(mut cmd: Command) -> std::process::Output {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the operator");
    let pid = child.id();
    let started = Instant::now();
    let waiter = std::thread::spawn(move || child.wait_with_output());
    while !waiter.is_finished() {
        if started.elapsed() > Duration::from_secs(30) {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("the operator did not stop within 30 s although its port was taken");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    waiter.join().expect("join").expect("wait")
}

fn assert_refused_port(program: &str, leading: &[&str]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr");
    let mut cmd = Command::new(program);
    cmd.args(leading)
        .args(["--listen", &addr.to_string()])
        .env("KUBECONFIG", kubeconfig(dir.path()))
        .env_remove("KUBERNETES_SERVICE_HOST");
    let out = run_until_exit(cmd);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exited 0: {stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {addr}")) && stderr.contains("--listen"),
        "stderr names neither the port nor the flag: {stderr}"
    );
}

#[test]
fn the_operator_stops_when_its_listen_port_is_taken() {
    assert_refused_port(env!("CARGO_BIN_EXE_corral-operator"), &[]);
}

#[test]
fn corral_operator_runs_the_operator_program_with_its_arguments() {
    // The same refusal through `corral operator`: the arguments reached corral-operator.
    assert_refused_port(env!("CARGO_BIN_EXE_corral"), &["operator"]);
    let help = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["operator", "--help"])
        .output()
        .expect("corral operator --help");
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(help.status.success(), "{text}");
    assert!(
        text.contains("--lease-namespace") && text.contains("--webhook-cert-dir"),
        "{text}"
    );
}

#[test]
fn corral_up_runs_the_server_program_in_its_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["up", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("corral up");
    // Same pid, another program: what a supervisor signals is the server itself.
    let exe = std::path::PathBuf::from(format!("/proc/{}/exe", child.id()));
    let server = std::fs::canonicalize(env!("CARGO_BIN_EXE_corral-server")).expect("server");
    let started = Instant::now();
    let mut seen = None;
    while started.elapsed() < Duration::from_secs(20) {
        seen = std::fs::read_link(&exe).ok();
        if seen.as_deref() == Some(server.as_path()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let served = std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        || (0..250).any(|_| {
            std::thread::sleep(Duration::from_millis(40));
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        seen.as_deref(),
        Some(server.as_path()),
        "corral up ran {seen:?}"
    );
    assert!(
        served,
        "the server program did not listen on the port `corral up` was given"
    );
}
