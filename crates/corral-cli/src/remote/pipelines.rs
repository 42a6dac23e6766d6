//! Pipeline runs on the command line, in kubectl's words: `corral get pipelineruns`,
//! `corral describe pipelinerun/NAME` (each step's phase, in DAG order, indented by
//! depth), `corral delete pipelinerun/NAME`. Runs are submitted with `corral submit`.

use std::collections::BTreeMap;
use std::process::ExitCode;

use corral_api::PipelineRun;
use corral_local::cluster::PipelineRunDetails;
use corral_server::api_client::Client;
use jiff::Timestamp;

use super::common_args::Output;
use super::print::{fail, out, print_structured};
use super::render::{age, table};

/// The names a verb acts on when they are pipeline runs: `pipelineruns [NAME...]`
/// (also `pipelinerun`, `pr`) or `pipelinerun/NAME...`; `None` when they are jobs.
pub fn run_names(names: &[String]) -> Option<Vec<String>> {
    let first = names.first()?;
    if ["pipelineruns", "pipelinerun", "pr"].contains(&first.as_str()) {
        return Some(names[1..].to_vec());
    }
    names
        .iter()
        .map(|n| n.strip_prefix("pipelinerun/").map(str::to_string))
        .collect()
}

fn progress(run: &PipelineRun) -> (String, String) {
    let status = run.status.clone().unwrap_or_default();
    let total = run.expanded_spec().steps.len();
    let done = status
        .steps
        .values()
        .filter(|s| s.phase.is_finished())
        .count();
    let cached = status
        .steps
        .values()
        .filter(|s| s.phase == corral_api::pipeline::StepPhase::Cached)
        .count();
    (format!("{done}/{total}"), cached.to_string())
}

/// `corral get pipelineruns [NAME...]`
pub fn get(client: &Client, ns: Option<&str>, names: &[String], output: Output) -> ExitCode {
    let runs = match client.pipeline_runs(ns) {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    let runs: Vec<PipelineRun> = runs
        .into_iter()
        .filter(|r| names.is_empty() || names.contains(&r.metadata.name))
        .collect();
    if let Some(missing) = names
        .iter()
        .find(|n| !runs.iter().any(|r| &r.metadata.name == *n))
    {
        return fail(&format!("PipelineRun {missing} not found"));
    }
    if !output.is_table() && output != Output::Name {
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": runs});
        return print_structured(&list, output);
    }
    if output == Output::Name {
        let text: String = runs
            .iter()
            .map(|r| format!("pipelinerun/{}\n", r.metadata.name))
            .collect();
        return out(&text);
    }
    if runs.is_empty() {
        eprintln!("No pipeline runs.");
        return ExitCode::SUCCESS;
    }
    let now = Timestamp::now();
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let (steps, cached) = progress(r);
            let status = r.status.clone().unwrap_or_default();
            let mut row = Vec::new();
            if ns.is_none() {
                row.push(r.metadata.namespace_or_default().to_string());
            }
            row.extend([
                r.metadata.name.clone(),
                status.phase.as_str().to_string(),
                steps,
                cached,
                r.metadata
                    .creation_timestamp
                    .map_or_else(|| "-".into(), |t| age(t, now)),
                status.message.unwrap_or_default(),
            ]);
            row
        })
        .collect();
    let mut header = vec!["NAME", "PHASE", "STEPS", "CACHED", "AGE", "MESSAGE"];
    if ns.is_none() {
        header.insert(0, "NAMESPACE");
    }
    out(&table(&header, &rows))
}

/// The report of `corral describe pipelinerun/NAME`.
pub fn describe_text(d: &PipelineRunDetails) -> String {
    let run = &d.run;
    let status = run.status.clone().unwrap_or_default();
    let mut s = String::new();
    s.push_str(&format!("Name:        {}\n", run.metadata.name));
    s.push_str(&format!(
        "Namespace:   {}\n",
        run.metadata.namespace_or_default()
    ));
    if let Some(r) = &run.spec.pipeline_ref {
        let version = r
            .generation
            .map_or_else(String::new, |g| format!(" (generation {g})"));
        s.push_str(&format!("Pipeline:    {}{version}\n", r.name));
    }
    s.push_str(&format!("Phase:       {}\n", status.phase.as_str()));
    if let Some(m) = &status.message {
        s.push_str(&format!("Message:     {m}\n"));
    }
    let params: Vec<String> = run
        .spec
        .pipeline_spec
        .parameters
        .iter()
        .map(|p| {
            let v = run.spec.params.get(&p.name).or(p.default.as_ref());
            format!("{}={}", p.name, v.map_or("-".into(), |v| v.to_string()))
        })
        .collect();
    if !params.is_empty() {
        s.push_str(&format!("Parameters:  {}\n", params.join(", ")));
    }
    // Depth in the DAG: one more than the deepest step it needs (rows come in DAG order).
    let mut depth: BTreeMap<&str, usize> = BTreeMap::new();
    let rows: Vec<Vec<String>> = d
        .steps
        .iter()
        .map(|st| {
            let level = st
                .needs
                .iter()
                .filter_map(|n| depth.get(n.as_str()))
                .max()
                .map_or(0, |d| d + 1);
            depth.insert(&st.name, level);
            let name = if level == 0 {
                st.name.clone()
            } else {
                format!("{}└─ {}", "   ".repeat(level - 1), st.name)
            };
            let job = match (&st.job, &st.job_state) {
                (Some(j), Some(state)) => format!("{j} ({state})"),
                (Some(j), None) => j.clone(),
                (None, _) => "-".into(),
            };
            let note = match (&st.cached_from, &st.message) {
                (Some(from), _) => format!("reused {from}"),
                (None, Some(m)) => m.clone(),
                (None, None) => String::new(),
            };
            let needs = if st.needs.is_empty() {
                "-".to_string()
            } else {
                st.needs.join(",")
            };
            vec![name, st.phase.as_str().to_string(), job, needs, note]
        })
        .collect();
    s.push_str("Steps:\n");
    for line in table(&["STEP", "PHASE", "JOB", "NEEDS", "NOTE"], &rows).lines() {
        s.push_str(&format!("  {line}\n"));
    }
    let outputs: Vec<String> = status
        .steps
        .iter()
        .flat_map(|(step, st)| {
            st.outputs
                .iter()
                .map(move |(o, a)| format!("  {step}.{o}: {} {}", a.path, a.sha256))
        })
        .collect();
    if !outputs.is_empty() {
        s.push_str("Artifacts:\n");
        for o in outputs {
            s.push_str(&o);
            s.push('\n');
        }
    }
    if !d.events.is_empty() {
        s.push_str("Events:\n");
        for e in &d.events {
            s.push_str(&format!("  {}  {}\n", e.time, e.message));
        }
    }
    s
}

/// `corral describe pipelinerun/NAME...`
pub fn describe(client: &Client, ns: &str, names: &[String], output: Output) -> ExitCode {
    let names = if names.is_empty() {
        match client.pipeline_runs(Some(ns)) {
            Ok(runs) => runs.into_iter().map(|r| r.metadata.name).collect(),
            Err(e) => return fail(&e),
        }
    } else {
        names.to_vec()
    };
    let mut code = ExitCode::SUCCESS;
    for (i, name) in names.iter().enumerate() {
        let printed = match client.describe_pipeline_run(ns, name) {
            Ok(d) if output.is_table() => {
                let sep = if i > 0 { "\n" } else { "" };
                out(&format!("{sep}{}", describe_text(&d)))
            }
            Ok(_) if output == Output::Name => out(&format!("pipelinerun/{name}\n")),
            Ok(d) => print_structured(&d, output),
            Err(e) => fail(&e),
        };
        if printed != ExitCode::SUCCESS {
            code = printed;
        }
    }
    code
}

/// `corral delete pipelinerun/NAME...`: the runs and their steps' jobs.
pub fn delete(client: &Client, ns: &str, names: &[String]) -> ExitCode {
    if names.is_empty() {
        return fail(&"name the pipeline runs to delete: `corral delete pipelinerun/NAME`");
    }
    let mut code = ExitCode::SUCCESS;
    for name in names {
        match client.delete_pipeline_run(ns, name) {
            Ok(_) => println!("pipelinerun/{name} deleted"),
            Err(e) => code = fail(&e),
        }
    }
    code
}
