//! Shell completion of job names: `corral logs <TAB>` asks the server for the namespace's
//! jobs (the server, token and namespace from $CORRAL_SERVER, $CORRAL_TOKEN and
//! $CORRAL_NAMESPACE, as without flags; a completion cannot see the flags typed so far).
//! A server that does not answer completes nothing, never an error on the terminal.

use std::ffi::OsStr;

use clap_complete::engine::{ArgValueCompleter, CompletionCandidate};

use super::common_args::{ConnArgs, NamespaceArgs};

/// The completer of an argument that names a job.
pub fn job_names() -> ArgValueCompleter {
    ArgValueCompleter::new(complete_job_names)
}

fn complete_job_names(current: &OsStr) -> Vec<CompletionCandidate> {
    let Some(prefix) = current.to_str() else {
        return Vec::new();
    };
    let Ok(client) = ConnArgs::default().try_client() else {
        return Vec::new();
    };
    let namespace = NamespaceArgs::default().resolve(&client);
    let Ok(jobs) = client.list(Some(&namespace)) else {
        return Vec::new();
    };
    jobs.into_iter()
        .filter(|j| j.name.starts_with(prefix))
        .map(|j| CompletionCandidate::new(j.name).help(Some(j.state.to_string().into())))
        .collect()
}

/// The script that registers `corral`'s completion in `shell` (bash, zsh, fish, elvish,
/// powershell): it calls `corral` back for each completion, so that job names complete.
pub fn registration(shell: clap_complete::Shell) -> Result<String, String> {
    let name = shell.to_string();
    let shells = clap_complete::env::Shells::builtins();
    let completer = shells
        .completer(&name)
        .ok_or_else(|| format!("no completion for shell {name}"))?;
    let mut script = Vec::new();
    completer
        .write_registration(COMPLETE_VAR, "corral", "corral", "corral", &mut script)
        .map_err(|e| format!("cannot write the {name} completion script: {e}"))?;
    String::from_utf8(script).map_err(|e| e.to_string())
}

/// The variable under which the shell asks `corral` for completions.
pub const COMPLETE_VAR: &str = "COMPLETE";
