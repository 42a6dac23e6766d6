//! The client's own configuration (`corral login`): the server, the token and how its
//! certificate is trusted (a CA file or a pinned SHA-256 fingerprint), kept in
//! `$CORRAL_CLIENT_CONFIG`, else `$XDG_CONFIG_HOME/corral/client.yaml`, else
//! `~/.config/corral/client.yaml`, readable by its owner alone (it holds the token).
//! Flags and environment variables win over it; its token and trust apply only to its own
//! server, never to another one named with --server.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde::{Deserialize, Serialize};

use corral_server::api_client::{Client, Trust};

/// What `corral login` keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientConfig {
    pub server: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
}

impl ClientConfig {
    /// The trust it names (a CA file wins over nothing, a pin over nothing; both is refused
    /// when written).
    pub fn trust(&self) -> Trust {
        match (&self.ca_file, &self.fingerprint) {
            (_, Some(f)) => Trust::Fingerprint(f.clone()),
            (Some(ca), None) => Trust::CaFile(ca.clone()),
            (None, None) => Trust::PublicRoots,
        }
    }
}

/// Where the client configuration is.
pub fn config_path() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(p) = var("CORRAL_CLIENT_CONFIG") {
        return Some(PathBuf::from(p));
    }
    if let Some(d) = var("XDG_CONFIG_HOME") {
        return Some(PathBuf::from(d).join("corral/client.yaml"));
    }
    var("HOME").map(|h| PathBuf::from(h).join(".config/corral/client.yaml"))
}

/// The client configuration, if there is one; an unreadable or invalid one is an error
/// naming the file.
pub fn load() -> Result<Option<ClientConfig>, String> {
    let Some(path) = config_path() else {
        return Ok(None);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    serde_saphyr::from_str(&text)
        .map(Some)
        .map_err(|e| format!("{}: {e} (rewrite it with `corral login`)", path.display()))
}

/// `corral login`.
#[derive(Args, Debug)]
pub struct LoginArgs {
    /// The server, e.g. https://gpu-box:7443.
    #[arg(long, value_name = "URL")]
    pub server: String,
    /// API token.
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Trust the server's certificate when this CA (PEM) issued it.
    #[arg(long, value_name = "FILE", conflicts_with = "fingerprint")]
    pub ca_file: Option<PathBuf>,
    /// Trust exactly the certificate with this SHA-256 fingerprint (what `corral up`
    /// printed for its self-signed certificate).
    #[arg(long, value_name = "SHA256")]
    pub fingerprint: Option<String>,
}

/// Checks the server with the given trust (and token), then keeps them.
pub fn run_login(args: &LoginArgs) -> ExitCode {
    match login(args) {
        Ok(path) => {
            println!("Logged in to {}; kept in {}", args.server, path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn login(args: &LoginArgs) -> Result<PathBuf, String> {
    let config = ClientConfig {
        server: args.server.trim().trim_end_matches('/').to_string(),
        token: args.token.clone().filter(|t| !t.is_empty()),
        ca_file: match &args.ca_file {
            Some(f) => Some(
                std::fs::canonicalize(f).map_err(|e| format!("--ca-file {}: {e}", f.display()))?,
            ),
            None => None,
        },
        fingerprint: args.fingerprint.clone(),
    };
    let client = Client::with_trust(&config.server, config.token.as_deref(), &config.trust())?;
    // The certificate is checked by any request, the token by one that needs it.
    client.health().map_err(|e| e.to_string())?;
    client.token_namespace().map_err(|e| e.to_string())?;
    let path = config_path().ok_or("no HOME, XDG_CONFIG_HOME or CORRAL_CLIENT_CONFIG is set")?;
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let text = serde_saphyr::to_string(&config).map_err(|e| e.to_string())?;
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)?;
        // An older file may have been looser.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        f.write_all(text.as_bytes())
    };
    write().map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}
