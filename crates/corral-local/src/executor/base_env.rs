//! The environment every replica starts from, before the launch contract's variables.

use std::path::Path;

/// `PATH` when the server has none.
pub(crate) const DEFAULT_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The environment every replica starts from, before the launch contract's variables and
/// the job's own `env`: `PATH` (the server's, so that the programs it finds are found),
/// `LANG` (the server's, else `C.UTF-8`), `HOME` inside the replica's own directory,
/// `TMPDIR` (and `TMP`, `TEMP`, which some programs read instead) its job's scratch
/// directory `tmp` (see [`super::scratch`]), and the variables the operator allows with `passEnv` (a tenant also gets
/// USER and LOGNAME, set where its identity is). Nothing else of the server's environment:
/// a token or cloud key there is no tenant's business.
pub fn base_env(replica_dir: &Path, tmp: &Path, pass_env: &[String]) -> Vec<(String, String)> {
    let server = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let mut env = vec![
        (
            "PATH".to_string(),
            server("PATH").unwrap_or_else(|| DEFAULT_PATH.to_string()),
        ),
        (
            "LANG".to_string(),
            server("LANG").unwrap_or_else(|| "C.UTF-8".to_string()),
        ),
        ("HOME".to_string(), replica_dir.display().to_string()),
        ("TMPDIR".to_string(), tmp.display().to_string()),
        ("TMP".to_string(), tmp.display().to_string()),
        ("TEMP".to_string(), tmp.display().to_string()),
    ];
    for name in pass_env {
        if let Some(value) = std::env::var_os(name) {
            env.retain(|(k, _)| k != name);
            env.push((name.clone(), value.to_string_lossy().into_owned()));
        }
    }
    env
}

/// The replica's own directory for the files Corral and it exchange (progress, stop
/// notice), inside its directory.
pub const TMP_DIR: &str = "tmp";
