//! A small blocking client of the API (ureq): what the CLI calls. Server errors come back as
//! [`ClientError::Api`] with the server's message and field errors, shown as the user's
//! problem and its fix, never as an HTTP dump.

mod exec;
mod pipelines;
mod serving;
pub use exec::ExecCall;

use std::fmt;
use std::io::Write;
use std::time::Duration;

use corral_local::cluster::{
    JobDetails, JobSummary, NodeInfo, QueueInfo, ReplicaUsageRow, SubmitResult,
};
use serde::de::DeserializeOwned;
use serde_json::Value;
use ureq::Agent;

use crate::error::{ErrorBody, ErrorEnvelope};
pub use crate::tls_client::Trust;

/// Largest response read into memory (a list of many thousands of jobs).
const MAX_RESPONSE_BYTES: u64 = 512 << 20;

/// Why a call failed.
#[derive(Debug)]
pub enum ClientError {
    /// The server could not be reached.
    Connect { server: String, message: String },
    /// The server's certificate is not one this client trusts (see [`Trust`]).
    Untrusted { server: String, message: String },
    /// The server refused the request: its status and error body.
    Api { status: u16, error: ErrorBody },
    /// The server answered something this client does not understand.
    Protocol(String),
    /// The output could not be written.
    Output(std::io::Error),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Connect { server, message } => write!(
                f,
                "cannot reach the Corral server at {server} ({message}); start one with \
                 `corral up`, or point --server / CORRAL_SERVER at it"
            ),
            ClientError::Untrusted { server, message } => write!(
                f,
                "the Corral server at {server} is not trusted ({message}). Pin its \
                 certificate with --fingerprint (the SHA-256 fingerprint `corral up` \
                 printed), or give the CA that issued it with --ca-file; `corral login` \
                 keeps either beside the server and token"
            ),
            ClientError::Api { error, .. } => {
                f.write_str(&error.message)?;
                for field in &error.fields {
                    f.write_str("\n  ")?;
                    if let Some(d) = field.document {
                        write!(f, "document {d}: ")?;
                    }
                    if field.path.is_empty() {
                        f.write_str(&field.message)?;
                    } else {
                        write!(f, "{}: {}", field.path, field.message)?;
                    }
                }
                Ok(())
            }
            ClientError::Protocol(m) => write!(f, "unexpected answer from the server: {m}"),
            ClientError::Output(e) => write!(f, "cannot write output: {e}"),
        }
    }
}

impl std::error::Error for ClientError {}

impl ClientError {
    /// The API's error code (`NotFound`, `Invalid`, ...), if the server answered one.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Api { error, .. } => Some(&error.code),
            _ => None,
        }
    }

    /// The HTTP status, if the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A connection to one Corral server.
#[derive(Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    agent: Agent,
}

/// Which replica's log, and whether to follow it.
#[derive(Clone, Debug, Default)]
pub struct LogRequest {
    pub replica: Option<String>,
    pub role: Option<String>,
    pub index: Option<u32>,
    pub follow: bool,
    /// The incarnation before the current one.
    pub previous: bool,
    /// Only the last N lines.
    pub tail: Option<u64>,
    /// Each line with the time it arrived.
    pub timestamps: bool,
    /// Only lines that arrived in the last N seconds.
    pub since_seconds: Option<u64>,
}

fn encode(segment: &str) -> String {
    let mut out = String::new();
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Client {
    /// `server` as `http://host:port` (a bare `host:port` gets `http://`).
    /// An `https://` server is trusted by the public CAs; see [`Client::with_trust`].
    pub fn new(server: &str, token: Option<&str>) -> Self {
        // The public roots need no file: nothing to fail.
        Self::with_trust(server, token, &Trust::PublicRoots)
            .unwrap_or_else(|_| unreachable!("the public roots need no configuration"))
    }

    /// A client that believes the `https://` servers `trust` names. Fails on a CA file that
    /// cannot be read or a fingerprint that is not one, naming it.
    pub fn with_trust(server: &str, token: Option<&str>, trust: &Trust) -> Result<Self, String> {
        let server = server.trim().trim_end_matches('/');
        let base = if server.contains("://") {
            server.to_string()
        } else {
            format!("http://{server}")
        };
        let config = Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(5)))
            .user_agent(concat!("corral/", env!("CARGO_PKG_VERSION")))
            .build();
        use ureq::unversioned::transport::{Connector, TcpConnector};
        let agent: Agent = match crate::tls_client::client_config(trust)? {
            None => config.into(),
            Some(tls) => Agent::with_parts(
                config,
                ().chain(TcpConnector::default())
                    .chain(crate::tls_client::PinnedTls(tls)),
                ureq::unversioned::resolver::DefaultResolver::default(),
            ),
        };
        Ok(Client {
            base,
            token: token.filter(|t| !t.is_empty()).map(str::to_string),
            agent,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn jobs_path(namespace: &str) -> String {
        format!("/api/v1/namespaces/{}/trainingjobs", encode(namespace))
    }

    fn job_path(namespace: &str, name: &str) -> String {
        format!("{}/{}", Self::jobs_path(namespace), encode(name))
    }

    fn connect_error(&self, e: ureq::Error) -> ClientError {
        // A refused certificate comes as rustls' error, or as an I/O error carrying it
        // (the handshake runs over ureq's transport).
        let tls = match &e {
            ureq::Error::Rustls(_) => true,
            ureq::Error::Io(io) => io
                .get_ref()
                .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()),
            _ => false,
        };
        let server = self.base.clone();
        let mut message = e.to_string();
        if self.base.starts_with("http://") && matches!(e, ureq::Error::Protocol(_)) {
            message.push_str("; if the server serves HTTPS, use an https:// URL");
        }
        if tls {
            ClientError::Untrusted { server, message }
        } else {
            ClientError::Connect { server, message }
        }
    }

    fn auth<B>(&self, req: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(t) => req.header("Authorization", &format!("Bearer {t}")),
            None => req,
        }
    }

    /// The body of a response, or the server's error.
    fn finish(
        &self,
        response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<String, ClientError> {
        let mut response = response.map_err(|e| self.connect_error(e))?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE_BYTES)
            .read_to_string()
            .map_err(|e| ClientError::Protocol(format!("cannot read the response: {e}")))?;
        if (200..300).contains(&status) {
            return Ok(text);
        }
        Err(api_error(status, &text))
    }

    fn get_text(&self, path: &str) -> Result<String, ClientError> {
        let req = self.auth(self.agent.get(self.url(path)));
        let response = req.call();
        self.finish(response)
    }

    /// GET a JSON document.
    pub fn get_value(&self, path: &str) -> Result<Value, ClientError> {
        parse(&self.get_text(path)?)
    }

    fn get_items<T: DeserializeOwned>(&self, path: &str) -> Result<Vec<T>, ClientError> {
        // Straight into the rows, without a `Value` in between (10,000 jobs are 2.5 MB).
        #[derive(serde::Deserialize)]
        struct Items<T> {
            items: Vec<T>,
        }
        let text = self.get_text(path)?;
        serde_json::from_str::<Items<T>>(&text)
            .map(|i| i.items)
            .map_err(|e| ClientError::Protocol(format!("unexpected answer: {e}")))
    }

    /// The newest `limit` entries of the audit trail, oldest first (an admin token).
    pub fn audit(&self, limit: usize) -> Result<Vec<corral_local::store::AuditEntry>, ClientError> {
        self.get_items(&format!("/api/v1/audit?limit={limit}"))
    }

    /// Submits YAML or JSON text (TrainingJobs or Kubeflow jobs) into `namespace`.
    pub fn submit(&self, namespace: &str, text: &str) -> Result<Vec<SubmitResult>, ClientError> {
        self.submit_with(namespace, text, false)
    }

    /// What `submit` would say of `text`, storing nothing (`?dryRun=All`): the same checks,
    /// against the server's priority classes, queues and nodes. The `uid`s are empty.
    pub fn submit_dry_run(
        &self,
        namespace: &str,
        text: &str,
    ) -> Result<Vec<SubmitResult>, ClientError> {
        self.submit_with(namespace, text, true)
    }

    fn submit_with(
        &self,
        namespace: &str,
        text: &str,
        dry_run: bool,
    ) -> Result<Vec<SubmitResult>, ClientError> {
        let mut path = Self::jobs_path(namespace);
        if dry_run {
            path.push_str("?dryRun=All");
        }
        let content_type = if text.trim_start().starts_with('{') {
            "application/json"
        } else {
            "application/yaml"
        };
        let mut req = self
            .auth(self.agent.post(self.url(&path)))
            .header("Content-Type", content_type);
        if text.len() > 64 * 1024 {
            // Lets the server refuse a body that is too large before it is sent (413), instead
            // of closing the connection under the upload.
            req = req.header("Expect", "100-continue");
        }
        let response = req.send(text);
        let v = parse(&self.finish(response)?)?;
        let items = v.get("items").cloned().unwrap_or(Value::Array(Vec::new()));
        serde_json::from_value(items).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Submits jobs with a code snapshot: `body` is a multipart/form-data body with the
    /// parts `manifest`, `code` and `digest` (see the `submissions` route), separated by
    /// `boundary`. Sent with its length and `Expect: 100-continue`, so that a server that
    /// refuses its size says so before the upload.
    pub fn submit_with_code(
        &self,
        namespace: &str,
        boundary: &str,
        body: &std::fs::File,
    ) -> Result<Vec<SubmitResult>, ClientError> {
        let path = format!("/api/v1/namespaces/{}/submissions", encode(namespace));
        let req = self
            .auth(self.agent.post(self.url(&path)))
            .header(
                "Content-Type",
                &format!("multipart/form-data; boundary={boundary}"),
            )
            .header("Expect", "100-continue");
        let response = req.send(body);
        let v = parse(&self.finish(response)?)?;
        let items = v.get("items").cloned().unwrap_or(Value::Array(Vec::new()));
        serde_json::from_value(items).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// The namespace this client's token acts in; `None` without a token, or for a token of
    /// every namespace.
    pub fn token_namespace(&self) -> Result<Option<String>, ClientError> {
        if self.token.is_none() {
            return Ok(None);
        }
        let v = self.get_value("/api/v1/whoami")?;
        Ok(v.get("namespace")
            .and_then(Value::as_str)
            .map(str::to_string))
    }

    /// The list's JSON as the server sent it, unparsed: what `corral bench api` times as
    /// the server's share of a list.
    pub fn list_text(&self, namespace: &str) -> Result<String, ClientError> {
        self.get_text(&Self::jobs_path(namespace))
    }

    /// Jobs of one namespace, or of every namespace the token may see.
    pub fn list(&self, namespace: Option<&str>) -> Result<Vec<JobSummary>, ClientError> {
        match namespace {
            Some(ns) => self.get_items(&Self::jobs_path(ns)),
            None => self.get_items("/api/v1/trainingjobs"),
        }
    }

    /// The job object (TrainingJob with status), as the server sends it.
    pub fn get(&self, namespace: &str, name: &str) -> Result<Value, ClientError> {
        self.get_value(&Self::job_path(namespace, name))
    }

    pub fn describe(&self, namespace: &str, name: &str) -> Result<JobDetails, ClientError> {
        let v = self.describe_value(namespace, name)?;
        serde_json::from_value(v).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    pub fn describe_value(&self, namespace: &str, name: &str) -> Result<Value, ClientError> {
        self.get_value(&format!("{}/describe", Self::job_path(namespace, name)))
    }

    /// Deletes a job; `Ok(false)` when it was being deleted already.
    pub fn delete(&self, namespace: &str, name: &str) -> Result<bool, ClientError> {
        let req = self.auth(
            self.agent
                .delete(self.url(&Self::job_path(namespace, name))),
        );
        let response = req.call();
        self.finish(response).map(|text| changed(&text))
    }

    fn post_empty(&self, path: &str) -> Result<bool, ClientError> {
        let req = self.auth(self.agent.post(self.url(path)));
        let response = req.send_empty();
        self.finish(response).map(|text| changed(&text))
    }

    /// Suspends a job; `Ok(false)` when it was suspended already.
    pub fn suspend(&self, namespace: &str, name: &str) -> Result<bool, ClientError> {
        self.post_empty(&format!("{}/suspend", Self::job_path(namespace, name)))
    }

    /// Resumes a job; `Ok(false)` when it was not suspended.
    pub fn resume(&self, namespace: &str, name: &str) -> Result<bool, ClientError> {
        self.post_empty(&format!("{}/resume", Self::job_path(namespace, name)))
    }

    pub fn queues(&self) -> Result<Vec<QueueInfo>, ClientError> {
        self.get_items("/api/v1/queues")
    }

    /// `/api/v1/usage` with these query parameters (`from`, `to`, `period`, `by`,
    /// `namespace`; see [`crate::routes::UsageQuery`]).
    pub fn usage(
        &self,
        params: &[(&str, &str)],
    ) -> Result<crate::routes::UsageReport, ClientError> {
        let query: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{k}={}", encode(v)))
            .collect();
        let path = if query.is_empty() {
            "/api/v1/usage".to_string()
        } else {
            format!("/api/v1/usage?{}", query.join("&"))
        };
        let text = self.get_text(&path)?;
        serde_json::from_str(&text)
            .map_err(|e| ClientError::Protocol(format!("unexpected answer: {e}")))
    }

    pub fn nodes(&self) -> Result<Vec<NodeInfo>, ClientError> {
        self.get_items("/api/v1/nodes")
    }

    pub fn top(&self) -> Result<Vec<ReplicaUsageRow>, ClientError> {
        self.get_items("/api/v1/top")
    }

    /// `/metrics` as text.
    pub fn metrics(&self) -> Result<String, ClientError> {
        self.get_text("/metrics")
    }

    /// Whether the server answers `/healthz`.
    pub fn healthy(&self) -> bool {
        self.health().is_ok()
    }

    /// `/healthz`, or why it could not be reached (a certificate not trusted, ...).
    pub fn health(&self) -> Result<(), ClientError> {
        self.get_text("/healthz").map(|_| ())
    }

    /// Copies a replica's log to `out` as it arrives (with `follow`, until the job ends).
    pub fn logs(
        &self,
        namespace: &str,
        name: &str,
        request: &LogRequest,
        out: &mut dyn Write,
    ) -> Result<(), ClientError> {
        let mut query = Vec::new();
        if let Some(r) = &request.replica {
            query.push(format!("replica={}", encode(r)));
        }
        if let Some(r) = &request.role {
            query.push(format!("role={}", encode(r)));
        }
        if let Some(i) = request.index {
            query.push(format!("index={i}"));
        }
        if request.follow {
            query.push("follow=true".into());
        }
        if request.previous {
            query.push("previous=true".into());
        }
        if let Some(n) = request.tail {
            query.push(format!("tail={n}"));
        }
        if request.timestamps {
            query.push("timestamps=true".into());
        }
        if let Some(s) = request.since_seconds {
            query.push(format!("sinceSeconds={s}"));
        }
        let mut path = format!("{}/logs", Self::job_path(namespace, name));
        if !query.is_empty() {
            path.push('?');
            path.push_str(&query.join("&"));
        }
        let req = self.auth(self.agent.get(self.url(&path)));
        let mut response = req.call().map_err(|e| self.connect_error(e))?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            let text = response.body_mut().read_to_string().unwrap_or_default();
            return Err(api_error(status, &text));
        }
        let mut reader = response.into_body().into_reader();
        let mut buf = [0u8; 16 * 1024];
        loop {
            let n = std::io::Read::read(&mut reader, &mut buf)
                .map_err(|e| ClientError::Protocol(format!("the log stream broke: {e}")))?;
            if n == 0 {
                break;
            }
            match out.write_all(&buf[..n]).and_then(|()| out.flush()) {
                Ok(()) => {}
                // `corral logs | head`: the reader went away.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
                Err(e) => return Err(ClientError::Output(e)),
            }
        }
        Ok(())
    }
}

fn parse(text: &str) -> Result<Value, ClientError> {
    serde_json::from_str(text).map_err(|e| ClientError::Protocol(format!("not JSON: {e}")))
}

fn api_error(status: u16, text: &str) -> ClientError {
    match serde_json::from_str::<ErrorEnvelope>(text) {
        Ok(env) => ClientError::Api {
            status,
            error: env.error,
        },
        Err(_) => {
            let snippet: String = text.chars().take(200).collect();
            ClientError::Api {
                status,
                error: ErrorBody {
                    code: format!("HTTP{status}"),
                    message: format!("the server answered {status}: {}", snippet.trim()),
                    fields: Vec::new(),
                },
            }
        }
    }
}

/// A delete's, suspend's or resume's `changed` (absent, from an older server: it changed).
fn changed(response: &str) -> bool {
    serde_json::from_str::<Value>(response)
        .ok()
        .and_then(|v| v.get("changed").and_then(Value::as_bool))
        .unwrap_or(true)
}
