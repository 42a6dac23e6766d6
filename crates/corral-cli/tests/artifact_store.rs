//! `corral artifacts --store`, the real binary, as the Kubernetes operator's pods run it
//! with `--artifact-store`: a step's outputs uploaded by the sidecar once it is told to
//! stop, hashed and read in the store as the embedded cluster hashes and reads them on a
//! disk, fetched into the next step's volume; against a directory store and against an S3
//! server (moto's, on loopback; under CI=true it must be installed: `pip install
//! 'moto[server]'`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_corral");
const OUT: &str = "/corral/artifacts/r1/produce/data";
const SCORE: &str = "/corral/artifacts/r1/produce/score";

fn corral(env: &[(String, String)], args: &[&str]) -> std::process::Output {
    let mut c = Command::new(BIN);
    c.args(["artifacts"]).args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("corral runs")
}

fn ok(out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The sidecar: started, told to stop as the kubelet tells it, and its exit.
fn upload(env: &[(String, String)], store: &str, volume: &Path, dirs: &[&str]) {
    let mut c = Command::new(BIN);
    c.args(["artifacts", "upload", "--store", store, "--volume"])
        .arg(volume)
        .args(dirs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let child = c.spawn().expect("corral runs");
    // It waits, uploading nothing, until it is stopped.
    std::thread::sleep(Duration::from_millis(500));
    let child = stop(child);
    let out = child.wait_with_output().expect("exit");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("uploaded"),
        "{out:?}"
    );
}

fn stop(child: Child) -> Child {
    let pid = child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status();
    assert!(killed.is_ok_and(|s| s.success()));
    child
}

fn report(env: &[(String, String)], verb: &str, store: &str, paths: &[&str]) -> Value {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("message");
    let mut args = vec![verb, "--store", store, "--message-file"];
    let f = file.to_string_lossy().into_owned();
    args.push(&f);
    args.extend(paths);
    ok(corral(env, &args));
    serde_json::from_str(&fs::read_to_string(&file).expect("message")).expect("json")
}

type Value = serde_json::Value;

fn on(volume: &Path, pod_path: &str) -> PathBuf {
    volume.join(pod_path.trim_start_matches("/corral/artifacts/"))
}

/// The whole round: step 1's pod, the artifact pods, step 2's pod.
fn round_trip(env: &[(String, String)], store: &str) {
    let step1 = tempfile::tempdir().expect("volume");
    let volume = step1.path();
    let vol = volume.to_string_lossy().into_owned();
    ok(corral(
        env,
        &["prepare", "--store", store, "--volume", &vol, OUT, SCORE],
    ));
    let data = on(volume, OUT);
    assert!(data.is_dir(), "the output is made before the step starts");
    fs::create_dir_all(data.join("sub")).expect("mkdir");
    fs::write(data.join("n"), "3\n").expect("write");
    // Above the upload buffer (10 MiB): a multipart upload.
    fs::write(data.join("sub/weights.bin"), vec![7u8; 12 << 20]).expect("write");
    fs::write(on(volume, SCORE).join("value"), " 0.93\n").expect("write");
    // Before the upload, nothing reads as finished.
    let early = corral(
        env,
        &["hash", "--store", store, "--message-file", "/dev/null", OUT],
    );
    assert!(!early.status.success());
    let why = String::from_utf8_lossy(&early.stderr);
    assert!(why.contains("never finished"), "{why}");

    upload(env, store, volume, &[OUT, SCORE]);
    let hashed = report(env, "hash", store, &[OUT, SCORE]);
    assert_eq!(
        hashed["sha256"],
        serde_json::json!([
            corral_local::artifacts::hash(&data).expect("hash"),
            corral_local::artifacts::hash(&on(volume, SCORE)).expect("hash"),
        ]),
        "the store's hash is the disk's"
    );
    let read = report(env, "read", store, &[SCORE]);
    assert_eq!(read["text"], serde_json::json!(["0.93"]));

    // The next step's pod: its input fetched into its own volume, whole.
    let step2 = tempfile::tempdir().expect("volume");
    let vol2 = step2.path().to_string_lossy().into_owned();
    ok(corral(
        env,
        &[
            "prepare", "--store", store, "--volume", &vol2, "--input", OUT,
        ],
    ));
    let fetched = on(step2.path(), OUT);
    assert_eq!(fs::read_to_string(fetched.join("n")).expect("n"), "3\n");
    assert_eq!(
        corral_local::artifacts::hash(&fetched).expect("hash"),
        corral_local::artifacts::hash(&data).expect("hash")
    );

    // A served model's replica: one file below an output, fetched alone.
    let replica = tempfile::tempdir().expect("volume");
    let vol_r = replica.path().to_string_lossy().into_owned();
    let file = format!("{OUT}/n");
    ok(corral(
        env,
        &[
            "prepare", "--store", store, "--volume", &vol_r, "--input", &file,
        ],
    ));
    assert_eq!(
        fs::read_to_string(on(replica.path(), &file)).expect("n"),
        "3\n"
    );
    assert!(
        !on(replica.path(), OUT).join("sub").exists(),
        "only the file"
    );

    // A retried step starts with empty outputs: the first attempt's files are gone.
    let step3 = tempfile::tempdir().expect("volume");
    let vol3 = step3.path().to_string_lossy().into_owned();
    ok(corral(
        env,
        &["prepare", "--store", store, "--volume", &vol3, OUT],
    ));
    let again = corral(
        env,
        &[
            "prepare", "--store", store, "--volume", &vol3, "--input", OUT,
        ],
    );
    assert!(!again.status.success(), "emptied: no finished upload");
    fs::write(on(step3.path(), OUT).join("m"), "4").expect("write");
    upload(env, store, step3.path(), &[OUT]);
    let step4 = tempfile::tempdir().expect("volume");
    let vol4 = step4.path().to_string_lossy().into_owned();
    ok(corral(
        env,
        &[
            "prepare", "--store", store, "--volume", &vol4, "--input", OUT,
        ],
    ));
    let names: Vec<String> = fs::read_dir(on(step4.path(), OUT))
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["m".to_string()]);

    // A path outside the artifacts is refused, naming it.
    let outside = corral(
        env,
        &[
            "prepare", "--store", store, "--volume", &vol4, "--input", "/etc",
        ],
    );
    assert!(!outside.status.success());
    assert!(
        String::from_utf8_lossy(&outside.stderr).contains("/etc: not under the artifacts' mount"),
        "{outside:?}"
    );
}

#[test]
fn a_directory_store_keeps_a_steps_outputs_for_the_next_step() {
    let store = tempfile::tempdir().expect("store");
    let url = format!("file://{}/team-a", store.path().display());
    round_trip(&[], &url);
}

#[test]
fn an_unknown_store_is_refused_naming_the_valid_ones() {
    let out = corral(
        &[],
        &["hash", "--store", "gs://b/p", "/corral/artifacts/r/s/o"],
    );
    assert!(!out.status.success());
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(
        why.contains("valid: s3://BUCKET/PREFIX, file:///DIR"),
        "{why}"
    );
}

#[test]
fn an_s3_store_keeps_a_steps_outputs_for_the_next_step() {
    use corral_kube::testenv::S3Server;
    if !S3Server::available() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "moto_server is missing: pip install 'moto[server]' (CI installs it)"
        );
        eprintln!("skipped: moto_server is missing");
        return;
    }
    let s3 = S3Server::start("artifacts").expect("moto's S3 server");
    round_trip(&s3.env(), "s3://artifacts/corral/team-a");
}
