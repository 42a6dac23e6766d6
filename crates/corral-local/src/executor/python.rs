//! Python environments for replicas without an image: `template.python` lists requirement
//! lines (and optionally a Python version); the replica's shim builds one environment per
//! distinct set with uv before the command runs, in `<data>/python/<key>/`, and puts its
//! `bin` first on PATH (`VIRTUAL_ENV` set, as `activate` would).
//!
//! - One environment per set: the key is a hash of the normalized set (version, sorted
//!   requirements); the directory holds the set itself (`corral-spec.txt`) and is reused only
//!   when it is the same set, so a hash collision builds another directory, never shares one.
//! - Built once: the build holds an exclusive lock on `<key>.lock`; a second replica
//!   asking for the same set at the same time waits, then finds it ready (`corral-ready`).
//! - A set that does not resolve, or an index that cannot be reached, fails the replica
//!   with uv's own message (the exit file's `error`, `setup_failed`): the control plane
//!   fails the job without a retry, since a retry would fail the same way. The build's
//!   output is in `build.log` beside the environment and in the replica's log.

use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use corral_api::training_job::PythonEnv;
use serde::{Deserialize, Serialize};

const SPEC_FILE: &str = "corral-spec.txt";
const READY_FILE: &str = "corral-ready";
const REQUIREMENTS_FILE: &str = "requirements.txt";
/// The build's output, beside the environment.
pub const BUILD_LOG: &str = "build.log";

/// What the shim needs to build (or reuse) a replica's environment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PythonLaunch {
    pub uv: PathBuf,
    /// `<data>/python`: environments, locks and uv's cache.
    pub envs_dir: PathBuf,
    pub version: Option<String>,
    /// Normalized: trimmed, sorted, without duplicates.
    pub requirements: Vec<String>,
    /// The tenant group the environment is built for (see [`crate::tenancy`]): `envs_dir`
    /// is then its own, and the interpreter must be one its uid can run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_gid: Option<u32>,
}

/// The requirements of a requirements file: one per line, without comments and blank
/// lines. Options (`-r`, `-c`, `--index-url`, ...) are refused: an included file would not be
/// covered by the environment's hash, and an index is the cluster's choice.
pub fn requirement_lines(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = match line.find(" #") {
            Some(at) => &line[..at],
            None => line,
        }
        .trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with('-') {
            return Err(format!(
                "line {}: `{line}` is an option; list one package per line (options and \
                 included files are not followed)",
                i + 1
            ));
        }
        out.push(line.to_string());
    }
    Ok(out)
}

impl PythonLaunch {
    /// The set of `env`; its `requirementsFile` is read from the job's code snapshot
    /// `code` (the snapshot never changes, so neither does the set).
    pub fn new(
        uv: PathBuf,
        envs_dir: PathBuf,
        env: &PythonEnv,
        code: Option<&Path>,
    ) -> Result<Self, String> {
        let mut requirements: Vec<String> = env
            .requirements
            .iter()
            .map(|r| r.trim().to_string())
            .collect();
        if let Some(file) = &env.requirements_file {
            let code = code.ok_or_else(|| {
                format!("python.requirementsFile `{file}`: the job has no code snapshot")
            })?;
            let path = code.join(file);
            let text = fs::read_to_string(&path)
                .map_err(|e| format!("python.requirementsFile {}: {e}", path.display()))?;
            requirements.extend(
                requirement_lines(&text)
                    .map_err(|e| format!("python.requirementsFile `{file}`: {e}"))?,
            );
        }
        requirements.sort();
        requirements.dedup();
        Ok(PythonLaunch {
            uv,
            envs_dir,
            version: env.version.clone(),
            requirements,
            tenant_gid: None,
        })
    }

    /// The set as one text: what decides which environment is whose.
    fn spec_text(&self) -> String {
        let mut text = format!("python {}\n", self.version.as_deref().unwrap_or("default"));
        for r in &self.requirements {
            text.push_str(r);
            text.push('\n');
        }
        text
    }

    /// The directory name of the set (before collision suffixes).
    pub fn key(&self) -> String {
        let text = self.spec_text();
        format!(
            "{:016x}{:016x}",
            fnv1a(0xcbf2_9ce4_8422_2325, &text),
            fnv1a(0x6c62_272e_07bb_0142, &text)
        )
    }
}

fn fnv1a(seed: u64, s: &str) -> u64 {
    s.bytes().fold(seed, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Why an environment could not be made.
#[derive(Debug)]
pub enum BuildError {
    /// uv refused the set or could not reach the index: its message. Permanent.
    Resolve(String),
    /// Corral's own trouble (files, locks, uv missing).
    Io(String),
}

/// The ready environment of `launch`: built now unless it exists. `log` receives the
/// build's output as it should appear in the replica's log.
pub fn prepare(launch: &PythonLaunch, log: &mut dyn FnMut(&[u8])) -> Result<PathBuf, BuildError> {
    let io_err = |what: &str, e: io::Error| BuildError::Io(format!("{what}: {e}"));
    fs::create_dir_all(&launch.envs_dir)
        .map_err(|e| io_err(&launch.envs_dir.display().to_string(), e))?;
    if let Some(gid) = launch.tenant_gid {
        // Its group reads and runs what is built here; nobody else, and it changes nothing.
        crate::tenancy::set_owner_mode(&launch.envs_dir, 0, gid, 0o750)
            .map_err(|e| io_err(&launch.envs_dir.display().to_string(), e))?;
    }
    let key = launch.key();
    let lock_path = launch.envs_dir.join(format!("{key}.lock"));
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| io_err(&lock_path.display().to_string(), e))?;
    // Held until this function returns (the file closes): one build per set at a time.
    lock.lock()
        .map_err(|e| io_err(&format!("locking {}", lock_path.display()), e))?;
    let spec = launch.spec_text();
    let mut n = 0u32;
    let dir = loop {
        let dir = if n == 0 {
            launch.envs_dir.join(&key)
        } else {
            launch.envs_dir.join(format!("{key}-{n}"))
        };
        match fs::read_to_string(dir.join(SPEC_FILE)) {
            Ok(existing) if existing == spec => {
                if dir.join(READY_FILE).exists() {
                    log(
                        format!("corral: python environment {} (cached)\n", dir.display())
                            .as_bytes(),
                    );
                    return Ok(dir);
                }
                // A build that did not finish: start over.
                let _ = fs::remove_dir_all(&dir);
                break dir;
            }
            Ok(_) => n += 1,
            Err(_) => {
                let _ = fs::remove_dir_all(&dir);
                break dir;
            }
        }
    };
    log(format!("corral: building python environment {}\n", dir.display()).as_bytes());
    let result = build(launch, &dir, &spec, log);
    if result.is_err() {
        // Only the build log stays (the Started event names it); without the set file the
        // next ask starts over.
        let _ = fs::remove_file(dir.join(SPEC_FILE));
        let _ = fs::remove_dir_all(dir.join("venv"));
    }
    result.map(|()| dir)
}

fn build(
    launch: &PythonLaunch,
    dir: &Path,
    spec: &str,
    log: &mut dyn FnMut(&[u8]),
) -> Result<(), BuildError> {
    let io_err = |what: &Path, e: io::Error| BuildError::Io(format!("{}: {e}", what.display()));
    fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    fs::write(dir.join(SPEC_FILE), spec).map_err(|e| io_err(dir, e))?;
    let requirements = dir.join(REQUIREMENTS_FILE);
    fs::write(&requirements, launch.requirements.join("\n") + "\n")
        .map_err(|e| io_err(&requirements, e))?;
    let mut build_log = fs::File::create(dir.join(BUILD_LOG)).map_err(|e| io_err(dir, e))?;
    let venv = dir.join("venv");
    let mut steps: Vec<Vec<std::ffi::OsString>> = Vec::new();
    let mut create: Vec<std::ffi::OsString> = vec!["venv".into(), "--quiet".into()];
    match launch.tenant_gid {
        // The venv links to its interpreter, which the tenant runs: it is chosen here among
        // those its group may run, not left to uv's discovery, which a wrapper around uv
        // (pyenv's shim puts its own Python first on uv's PATH) can steer to one in root's
        // home.
        Some(gid) => match tenant_interpreter(launch, gid)? {
            Some(python) => {
                create.push("--python".into());
                create.push(python.into());
            }
            None => {
                // None installed that it may run: uv downloads the version asked for,
                // beside the environments (UV_PYTHON_INSTALL_DIR, readable by the group).
                create.push("--managed-python".into());
                create.push("--python".into());
                create.push(launch.version.clone().unwrap_or_default().into());
            }
        },
        None => {
            if let Some(v) = &launch.version {
                create.push("--python".into());
                create.push(v.into());
            }
        }
    }
    create.push(venv.clone().into());
    steps.push(create);
    steps.push(vec![
        "pip".into(),
        "install".into(),
        "--python".into(),
        venv.join("bin/python").into(),
        "-r".into(),
        requirements.into(),
    ]);
    for args in steps {
        let out = uv_command(launch)
            .args(&args)
            .output()
            .map_err(|e| BuildError::Io(format!("running {}: {e}", launch.uv.display())))?;
        for part in [&out.stdout, &out.stderr] {
            let _ = build_log.write_all(part);
            log(part);
        }
        if !out.status.success() {
            let text = String::from_utf8_lossy(&out.stderr);
            let message: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            return Err(BuildError::Resolve(format!(
                "the python environment could not be built (uv {}): {}",
                args.first().and_then(|a| a.to_str()).unwrap_or(""),
                message.join(" ")
            )));
        }
    }
    if let Some(gid) = launch.tenant_gid {
        let python = venv.join("bin/python");
        let real = fs::canonicalize(&python).map_err(|e| io_err(&python, e))?;
        if let Some(blocked) = crate::tenancy::closed_to_group(&real, gid) {
            return Err(BuildError::Resolve(format!(
                "the python environment's interpreter {} cannot be run by the job's user \
                 (uid and gid {gid}): {} is not open to it. Install Python where every user \
                 may run it (e.g. /usr/bin/python3), or name a version with \
                 template.python.version so that uv downloads one",
                real.display(),
                blocked.display()
            )));
        }
    }
    fs::write(dir.join(READY_FILE), b"").map_err(|e| io_err(dir, e))?;
    Ok(())
}

/// uv with the environment every build step shares.
fn uv_command(launch: &PythonLaunch) -> Command {
    let mut cmd = Command::new(&launch.uv);
    cmd.env("UV_CACHE_DIR", launch.envs_dir.join(".uv-cache"))
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    if let Some(gid) = launch.tenant_gid {
        // A Python uv downloads goes beside the environments, where the tenant may run it;
        // and its search starts where the tenant may enter.
        cmd.env("UV_PYTHON_INSTALL_DIR", launch.envs_dir.join(".pythons"));
        if let Ok(path) = std::env::var("PATH") {
            cmd.env("PATH", crate::tenancy::search_path_for_group(&path, gid));
        }
    }
    cmd
}

/// One installed interpreter as `uv python list --output-format json` lists it.
#[derive(Deserialize)]
struct ListedPython {
    path: PathBuf,
}

/// The installed interpreter matching the launch's version (any, without one) that group
/// `gid` may run, as uv ranks them (newest first); `None` when there is none and a version
/// was asked for (uv then downloads it). uv matches the version request, corral only
/// drops the interpreters the tenant could not run.
fn tenant_interpreter(launch: &PythonLaunch, gid: u32) -> Result<Option<PathBuf>, BuildError> {
    let mut cmd = uv_command(launch);
    cmd.args(["python", "list", "--only-installed", "--all-versions"])
        .args(["--output-format", "json"]);
    if let Some(v) = &launch.version {
        cmd.arg(v);
    }
    let out = cmd
        .output()
        .map_err(|e| BuildError::Io(format!("running {}: {e}", launch.uv.display())))?;
    if !out.status.success() {
        return Err(BuildError::Resolve(format!(
            "the python environment could not be built (uv python list): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let listed: Vec<ListedPython> = serde_json::from_slice(&out.stdout).map_err(|e| {
        BuildError::Io(format!(
            "reading the interpreters `uv python list` found: {e}"
        ))
    })?;
    let mut blocked = Vec::new();
    for python in listed {
        let Ok(real) = fs::canonicalize(&python.path) else {
            continue;
        };
        match crate::tenancy::closed_to_group(&real, gid) {
            None => return Ok(Some(python.path)),
            Some(at) => blocked.push(format!("{} ({} is closed)", real.display(), at.display())),
        }
    }
    if launch.version.is_some() {
        return Ok(None);
    }
    blocked.dedup();
    Err(BuildError::Resolve(format!(
        "no Python interpreter installed here can be run by the job's user (gid {gid}){}. \
         Install Python where every user may run it (e.g. /usr/bin/python3), or name a \
         version with template.python.version so that uv downloads one",
        if blocked.is_empty() {
            String::new()
        } else {
            format!(": {}", blocked.join(", "))
        }
    )))
}

/// The environment's variables over `env`: its `bin` first on PATH, `VIRTUAL_ENV`.
pub fn activate(env: &mut Vec<(String, String)>, dir: &Path) {
    let venv = dir.join("venv");
    let bin = venv.join("bin").display().to_string();
    match env.iter_mut().find(|(k, _)| k == "PATH") {
        Some((_, path)) => *path = format!("{bin}:{path}"),
        None => env.push(("PATH".into(), format!("{bin}:{}", super::DEFAULT_PATH))),
    }
    env.retain(|(k, _)| k != "VIRTUAL_ENV");
    env.push(("VIRTUAL_ENV".into(), venv.display().to_string()));
}

/// `uv` on PATH, if any.
pub fn find_uv() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("uv"))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(version: Option<&str>, reqs: &[&str]) -> PythonLaunch {
        PythonLaunch::new(
            "uv".into(),
            "/d".into(),
            &PythonEnv {
                version: version.map(String::from),
                requirements: reqs.iter().map(|r| r.to_string()).collect(),
                requirements_file: None,
            },
            None,
        )
        .expect("no file")
    }

    #[test]
    fn a_requirements_file_joins_the_set_by_its_content() {
        let code = tempfile::tempdir().expect("tmp");
        std::fs::write(
            code.path().join("req.txt"),
            "# pinned\nb==1  # inline\n\na==2\n",
        )
        .expect("write");
        let env = PythonEnv {
            version: None,
            requirements: Vec::new(),
            requirements_file: Some("req.txt".into()),
        };
        let from_file =
            PythonLaunch::new("uv".into(), "/d".into(), &env, Some(code.path())).expect("read");
        assert_eq!(from_file.requirements, ["a==2", "b==1"]);
        assert_eq!(from_file.key(), launch(None, &["a==2", "b==1"]).key());
        std::fs::write(code.path().join("req.txt"), "b==2\n").expect("write");
        let changed =
            PythonLaunch::new("uv".into(), "/d".into(), &env, Some(code.path())).expect("read");
        assert_ne!(
            changed.key(),
            from_file.key(),
            "the hash covers the content"
        );
        assert!(PythonLaunch::new("uv".into(), "/d".into(), &env, None).is_err());
        let e = requirement_lines("-r other.txt\n").expect_err("option");
        assert!(e.contains("line 1"), "{e}");
    }

    #[test]
    fn the_key_is_the_set_not_its_order() {
        assert_eq!(
            launch(None, &["b==1", "a==2"]).key(),
            launch(None, &[" a==2", "b==1", "b==1"]).key()
        );
        assert_ne!(launch(None, &["a==1"]).key(), launch(None, &["a==2"]).key());
        assert_ne!(
            launch(Some("3.11"), &["a==1"]).key(),
            launch(Some("3.12"), &["a==1"]).key()
        );
    }

    #[test]
    fn activation_puts_the_environment_first() {
        let mut env = vec![("PATH".to_string(), "/usr/bin".to_string())];
        activate(&mut env, Path::new("/e/k"));
        assert_eq!(env[0].1, "/e/k/venv/bin:/usr/bin");
        assert!(env.contains(&("VIRTUAL_ENV".to_string(), "/e/k/venv".to_string())));
    }
}
