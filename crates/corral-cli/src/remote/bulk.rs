//! The verbs that act on several jobs at once: delete, suspend, resume, by name, `--all`
//! or a label selector, confirmed before more than one job changes.

use std::process::ExitCode;

use clap::Args;
use corral_local::cluster::JobState;
use corral_server::api_client::{Client, ClientError};
use serde_json::Value;

use super::common_args::{ConnArgs, NamespaceArgs};
use super::print::fail;
use crate::output::plural;

#[derive(Args, Debug)]
pub struct JobArgs {
    #[arg(
        value_name = "NAME",
        required_unless_present_any = ["all", "selector"],
        add = super::completion::job_names()
    )]
    pub names: Vec<String>,
    /// Every job of the namespace.
    #[arg(long, conflicts_with_all = ["names", "selector"])]
    pub all: bool,
    /// Jobs whose labels match, e.g. `team=nlp,stage!=prod` (`=`, `==`, `!=`; a bare key:
    /// has the label).
    #[arg(short = 'l', long, value_name = "SELECTOR", conflicts_with = "names")]
    pub selector: Option<String>,
    /// Do not ask before acting on more than one job.
    #[arg(short, long)]
    pub yes: bool,
    #[command(flatten)]
    pub namespace: NamespaceArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// The jobs a command acts on: the names given, or with `--all` / `-l` those of the
/// namespace that match, confirmed by the user when more than one would go.
fn targets(
    args: &JobArgs,
    client: &Client,
    ns: &str,
    verb: &str,
    confirm: &Confirm<'_>,
) -> Result<Vec<String>, String> {
    if !args.all && args.selector.is_none() {
        return Ok(args.names.clone());
    }
    let selector = match &args.selector {
        Some(s) => Some(Selector::parse(s)?),
        None => None,
    };
    let jobs = client.list(Some(ns)).map_err(|e| e.to_string())?;
    let mut names = Vec::new();
    // A job already being deleted is on its way out: acting on it again would only fail
    // once it is gone.
    for j in jobs.into_iter().filter(|j| j.state != JobState::Deleting) {
        if let Some(sel) = &selector {
            let job = match client.get(ns, &j.name) {
                Ok(job) => job,
                Err(e) if is_not_found(&e) => continue,
                Err(e) => return Err(e.to_string()),
            };
            if !sel.matches_object(&job) {
                continue;
            }
        }
        names.push(j.name);
    }
    if names.len() > 1 && !args.yes {
        let question = format!(
            "{verb} {} in namespace {ns}: {}?",
            plural(names.len() as u64, "job"),
            names.join(", ")
        );
        if !confirm(&question)? {
            return Err("answered no, so nothing changed".into());
        }
    }
    Ok(names)
}

fn is_not_found(e: &ClientError) -> bool {
    matches!(e, ClientError::Api { status: 404, .. })
}

/// Asks the user a yes/no question; `Err` when nobody can be asked.
pub type Confirm<'a> = dyn Fn(&str) -> Result<bool, String> + 'a;

/// Asks on the terminal; without one (a script), refuses and names `--yes`.
pub fn confirm_on_terminal(question: &str) -> Result<bool, String> {
    use std::io::IsTerminal;
    if !std::io::stdin().is_terminal() {
        return Err(format!(
            "{question} Not asked (no terminal): pass --yes to go ahead"
        ));
    }
    eprint!("{question} [y/N] ");
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .map_err(|e| format!("cannot read the answer: {e}"))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// A label selector: `k=v`, `k==v`, `k!=v`, `k` (has it), `!k` (has it not), comma-joined
/// (all must hold), as kubectl's equality-based selectors.
#[derive(Debug, PartialEq)]
pub struct Selector(Vec<(String, SelectorOp)>);

#[derive(Debug, PartialEq)]
enum SelectorOp {
    Is(String),
    IsNot(String),
    Exists,
    Absent,
}

impl Selector {
    pub fn parse(text: &str) -> Result<Selector, String> {
        let mut out = Vec::new();
        for part in text.split(',').map(str::trim) {
            let bad = || {
                format!(
                    "`{part}` is not a selector term; use `key=value`, `key!=value`, `key` or `!key`"
                )
            };
            let (key, op) = if let Some((k, v)) = part.split_once("!=") {
                (k, SelectorOp::IsNot(v.trim().to_string()))
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (k, SelectorOp::Is(v.trim().to_string()))
            } else if let Some(k) = part.strip_prefix('!') {
                (k, SelectorOp::Absent)
            } else {
                (part, SelectorOp::Exists)
            };
            let key = key.trim();
            if key.is_empty() || key.contains(['=', '!', ' ']) {
                return Err(bad());
            }
            out.push((key.to_string(), op));
        }
        Ok(Selector(out))
    }

    /// Whether an object's `metadata.labels` match (a TrainingJob as the API answers it).
    pub fn matches_object(&self, object: &Value) -> bool {
        let labels = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object);
        self.matches(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str))
    }

    pub fn matches<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|(k, op)| match op {
            SelectorOp::Is(v) => label(k) == Some(v.as_str()),
            SelectorOp::IsNot(v) => label(k) != Some(v.as_str()),
            SelectorOp::Exists => label(k).is_some(),
            SelectorOp::Absent => label(k).is_none(),
        })
    }
}

fn each_job(
    args: &JobArgs,
    verb: &str,
    confirm: &Confirm<'_>,
    f: impl Fn(&Client, &str, &str) -> Result<bool, ClientError>,
) -> ExitCode {
    let client = args.conn.client();
    let ns = args.namespace.resolve(&client);
    let names = match targets(args, &client, &ns, verb_base(verb), confirm) {
        Ok(n) => n,
        Err(e) => return fail(&e),
    };
    if names.is_empty() {
        eprintln!("No jobs in namespace {ns} match.");
        return ExitCode::SUCCESS;
    }
    let mut code = ExitCode::SUCCESS;
    let selected = args.all || args.selector.is_some();
    for name in &names {
        match f(&client, &ns, name) {
            Ok(true) => println!("trainingjob/{name} {verb}"),
            Ok(false) => println!("trainingjob/{name} {}", already(verb)),
            // Selected from a list that another client changed since: the job went meanwhile,
            // which is no fault of this command.
            Err(e) if selected && is_not_found(&e) => {
                eprintln!("trainingjob/{name} was deleted meanwhile")
            }
            Err(e) => {
                eprintln!("error: {e}");
                code = ExitCode::FAILURE;
            }
        }
    }
    code
}

/// What a verb that changed nothing found (another client deleted or suspended first).
fn already(done: &str) -> &str {
    match done {
        "deleted" => "was being deleted already",
        "suspended" => "was suspended already",
        "resumed" => "was not suspended (unchanged)",
        other => other,
    }
}

/// `delete` of `deleted`, for the question before acting.
fn verb_base(done: &str) -> &str {
    match done {
        "deleted" => "delete",
        "suspended" => "suspend",
        "resumed" => "resume",
        other => other,
    }
}

/// `corral delete NAME...`
pub fn run_delete(args: &JobArgs) -> ExitCode {
    delete_with(args, &confirm_on_terminal)
}

/// `corral delete`, asking with `confirm` before more than one job goes.
pub fn delete_with(args: &JobArgs, confirm: &Confirm<'_>) -> ExitCode {
    if let Some(runs) = super::pipelines::run_names(&args.names) {
        let client = args.conn.client();
        let ns = args.namespace.resolve(&client);
        return super::pipelines::delete(&client, &ns, &runs);
    }
    if let Some(names) = super::stored_pipelines::pipeline_names(&args.names) {
        let client = args.conn.client();
        let ns = args.namespace.resolve(&client);
        return super::stored_pipelines::delete(&client, &ns, &names);
    }
    if let Some(names) = super::serving::served_model_names(&args.names) {
        let client = args.conn.client();
        let ns = args.namespace.resolve(&client);
        return super::serving::delete(&client, &ns, &names);
    }
    each_job(args, "deleted", confirm, |c, ns, n| c.delete(ns, n))
}

/// `corral suspend NAME...`
pub fn run_suspend(args: &JobArgs) -> ExitCode {
    each_job(args, "suspended", &confirm_on_terminal, |c, ns, n| {
        c.suspend(ns, n)
    })
}

/// `corral resume NAME...`
pub fn run_resume(args: &JobArgs) -> ExitCode {
    each_job(args, "resumed", &confirm_on_terminal, |c, ns, n| {
        c.resume(ns, n)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors() {
        let labels = |k: &str| match k {
            "team" => Some("nlp"),
            "stage" => Some("dev"),
            _ => None,
        };
        for (sel, want) in [
            ("team=nlp", true),
            ("team==nlp", true),
            ("team=vision", false),
            ("team=nlp,stage!=prod", true),
            ("team=nlp,stage!=dev", false),
            ("stage", true),
            ("owner", false),
            ("!owner", true),
        ] {
            let s = Selector::parse(sel).expect("valid");
            assert_eq!(s.matches(labels), want, "{sel}");
        }
        for bad in ["", "=x", "a b=c"] {
            let e = Selector::parse(bad).expect_err(bad);
            assert!(e.contains("is not a selector term"), "{e}");
        }
    }
}
