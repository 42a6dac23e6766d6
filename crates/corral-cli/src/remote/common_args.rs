//! The arguments every remote command shares: where the server is and who asks, the
//! namespace it acts in, and how it prints.

use clap::{Args, ValueEnum};
use corral_server::api_client::{Client, Trust};

/// `--server`, `--token` and `-n` given before the command (`corral --server URL list`),
/// as kubectl takes its global flags anywhere: the defaults of every remote command, below
/// the command's own flags and above the environment.
#[derive(Clone, Debug, Default)]
pub struct GlobalFlags {
    pub server: Option<String>,
    pub token: Option<String>,
    pub namespace: Option<String>,
}

static GLOBAL_FLAGS: std::sync::OnceLock<GlobalFlags> = std::sync::OnceLock::new();

/// Sets the flags given before the command (once, before it runs).
pub fn set_global_flags(flags: GlobalFlags) {
    let _ = GLOBAL_FLAGS.set(flags);
}

fn global_flags() -> Option<&'static GlobalFlags> {
    GLOBAL_FLAGS.get()
}

/// Where the server is, who is asking, and how its certificate is trusted.
#[derive(Args, Clone, Debug, Default)]
pub struct ConnArgs {
    /// The server (default: $CORRAL_SERVER, else the one `corral login` kept, else
    /// http://127.0.0.1:7443).
    #[arg(long, value_name = "URL", global = true)]
    pub server: Option<String>,
    /// API token (default: $CORRAL_TOKEN, else the one `corral login` kept for this server).
    #[arg(long, value_name = "TOKEN", global = true)]
    pub token: Option<String>,
    /// Trust an https server whose certificate this CA (PEM) issued (default:
    /// $CORRAL_CA_FILE, else what `corral login` kept for this server).
    #[arg(
        long,
        value_name = "FILE",
        global = true,
        conflicts_with = "fingerprint"
    )]
    pub ca_file: Option<std::path::PathBuf>,
    /// Trust exactly the https server certificate with this SHA-256 fingerprint (default:
    /// $CORRAL_FINGERPRINT, else what `corral login` kept for this server).
    #[arg(long, value_name = "SHA256", global = true)]
    pub fingerprint: Option<String>,
}

impl ConnArgs {
    /// The client; a client configuration, CA file or fingerprint that cannot be used ends
    /// the command with its error (no request is sent without the trust asked for).
    pub fn client(&self) -> Client {
        match self.try_client() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
    }

    pub fn try_client(&self) -> Result<Client, String> {
        let env = |name: &str| std::env::var(name).ok().filter(|s| !s.is_empty());
        let kept = super::login::load()?;
        let server = self
            .server
            .clone()
            .or_else(|| global_flags().and_then(|g| g.server.clone()))
            .or_else(|| env("CORRAL_SERVER"))
            .or_else(|| kept.as_ref().map(|k| k.server.clone()))
            .unwrap_or_else(|| corral_server::DEFAULT_SERVER.to_string());
        // What login kept is for its own server only.
        let kept = kept.filter(|k| same_server(&k.server, &server));
        let token = self
            .token
            .clone()
            .or_else(|| global_flags().and_then(|g| g.token.clone()))
            .or_else(|| std::env::var("CORRAL_TOKEN").ok())
            .or_else(|| kept.as_ref().and_then(|k| k.token.clone()));
        let trust = match (
            self.ca_file
                .clone()
                .or_else(|| env("CORRAL_CA_FILE").map(Into::into)),
            self.fingerprint
                .clone()
                .or_else(|| env("CORRAL_FINGERPRINT")),
        ) {
            (Some(_), Some(_)) => {
                return Err("give either a CA file or a fingerprint, not both".into());
            }
            (Some(ca), None) => Trust::CaFile(ca),
            (None, Some(f)) => Trust::Fingerprint(f),
            (None, None) => kept.map(|k| k.trust()).unwrap_or_default(),
        };
        Client::with_trust(&server, token.as_deref(), &trust)
    }
}

/// Whether two server URLs name the same server (a bare `host:port` is `http://`).
fn same_server(a: &str, b: &str) -> bool {
    let norm = |s: &str| {
        let s = s.trim().trim_end_matches('/');
        if s.contains("://") {
            s.to_string()
        } else {
            format!("http://{s}")
        }
    };
    norm(a) == norm(b)
}

/// The namespace a command acts in.
#[derive(Args, Clone, Debug, Default)]
pub struct NamespaceArgs {
    /// Namespace (default: $CORRAL_NAMESPACE, else the API token's namespace, else `default`).
    #[arg(short, long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

impl NamespaceArgs {
    /// `-n`, else $CORRAL_NAMESPACE.
    pub fn given(&self) -> Option<String> {
        self.namespace
            .clone()
            .or_else(|| global_flags().and_then(|g| g.namespace.clone()))
            .or_else(|| {
                std::env::var("CORRAL_NAMESPACE")
                    .ok()
                    .filter(|s| !s.is_empty())
            })
    }

    pub fn get(&self) -> String {
        self.given().unwrap_or_else(|| "default".to_string())
    }

    /// `-n`, else $CORRAL_NAMESPACE, else the namespace of the client's token (as kubectl
    /// uses its context's), else `default`.
    pub fn resolve(&self, client: &Client) -> String {
        self.given()
            .or_else(|| client.token_namespace().ok().flatten())
            .unwrap_or_else(|| "default".to_string())
    }
}

/// The one namespace that every document of `text` names, if they all name the same one (as
/// kubectl submits a file to the namespace it declares when no -n is given).
pub fn declared_namespace(text: &str) -> Option<String> {
    let docs = corral_api::document::raw_documents(text).ok()?;
    let mut found: Option<String> = None;
    for d in &docs {
        let ns = d.pointer("/metadata/namespace")?.as_str()?;
        match &found {
            Some(f) if f != ns => return None,
            _ => found = Some(ns.to_string()),
        }
    }
    found
}

/// How to print.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns.
    #[default]
    Table,
    /// The table with more columns (jobs: preemptions, creation time, uid).
    Wide,
    Json,
    Yaml,
    /// `trainingjob/<name>`, one a line (for scripts: `corral get -o name | xargs ...`).
    Name,
}

impl Output {
    /// Table or wide: columns for people.
    pub(crate) fn is_table(self) -> bool {
        matches!(self, Output::Table | Output::Wide)
    }
}
