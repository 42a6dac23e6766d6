//! Stored pipelines on the command line: `corral get pipelines`, `corral describe
//! pipeline/NAME` (its parameters, its steps in DAG order and the runs made from it),
//! `corral delete pipeline/NAME`, and `corral run PIPELINE -p NAME=VALUE`, which starts a run
//! of the current version (as `kfp run create` and `argo submit --from` do). Pipelines are
//! stored with `corral submit`.

use std::process::ExitCode;

use clap::Args;
use corral_api::Pipeline;
use corral_server::api_client::Client;
use jiff::Timestamp;
use serde_json::{Map, Value, json};

use super::common_args::{ConnArgs, NamespaceArgs, Output};
use super::print::{fail, out, print_structured};
use super::render::{age, table};

/// The names a verb acts on when they are stored pipelines: `pipelines [NAME...]` (also
/// `pipeline`, `pl`) or `pipeline/NAME...`; `None` when they are something else.
pub fn pipeline_names(names: &[String]) -> Option<Vec<String>> {
    let first = names.first()?;
    if ["pipelines", "pipeline", "pl"].contains(&first.as_str()) {
        return Some(names[1..].to_vec());
    }
    names
        .iter()
        .map(|n| n.strip_prefix("pipeline/").map(str::to_string))
        .collect()
}

fn generation(p: &Pipeline) -> String {
    p.metadata
        .generation
        .map_or_else(|| "-".into(), |g| g.to_string())
}

/// `corral get pipelines [NAME...]`
pub fn get(client: &Client, ns: Option<&str>, names: &[String], output: Output) -> ExitCode {
    let pipelines = match client.pipelines(ns) {
        Ok(p) => p,
        Err(e) => return fail(&e),
    };
    let pipelines: Vec<Pipeline> = pipelines
        .into_iter()
        .filter(|p| names.is_empty() || names.contains(&p.metadata.name))
        .collect();
    if let Some(missing) = names
        .iter()
        .find(|n| !pipelines.iter().any(|p| &p.metadata.name == *n))
    {
        return fail(&format!(
            "Pipeline {missing} not found; `corral get pipelines` lists them"
        ));
    }
    match output {
        Output::Name => {
            let text: String = pipelines
                .iter()
                .map(|p| format!("pipeline/{}\n", p.metadata.name))
                .collect();
            return out(&text);
        }
        // One named: the object itself, as kubectl prints it.
        o if !o.is_table() && names.len() == 1 && pipelines.len() == 1 => {
            return print_structured(&pipelines[0], o);
        }
        o if !o.is_table() => {
            let list = json!({"apiVersion": "v1", "kind": "List", "items": pipelines});
            return print_structured(&list, o);
        }
        _ => {}
    }
    if pipelines.is_empty() {
        eprintln!("No pipelines.");
        return ExitCode::SUCCESS;
    }
    let now = Timestamp::now();
    let rows: Vec<Vec<String>> = pipelines
        .iter()
        .map(|p| {
            let mut row = Vec::new();
            if ns.is_none() {
                row.push(p.metadata.namespace_or_default().to_string());
            }
            row.extend([
                p.metadata.name.clone(),
                generation(p),
                p.spec.steps.len().to_string(),
                p.spec
                    .parameters
                    .iter()
                    .map(|x| x.name.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                p.metadata
                    .creation_timestamp
                    .map_or_else(|| "-".into(), |t| age(t, now)),
            ]);
            row
        })
        .collect();
    let mut header = vec!["NAME", "GENERATION", "STEPS", "PARAMETERS", "AGE"];
    if ns.is_none() {
        header.insert(0, "NAMESPACE");
    }
    out(&table(&header, &rows))
}

/// The report of `corral describe pipeline/NAME`: the pipeline, its kept versions and the
/// runs made from it.
pub fn describe_text(
    p: &Pipeline,
    versions: &[Pipeline],
    runs: &[corral_api::PipelineRun],
) -> String {
    let mut s = String::new();
    s.push_str(&format!("Name:        {}\n", p.metadata.name));
    s.push_str(&format!(
        "Namespace:   {}\n",
        p.metadata.namespace_or_default()
    ));
    s.push_str(&format!("Generation:  {}\n", generation(p)));
    if let Some(code) = p.metadata.annotations.get("corral.dev/code") {
        s.push_str(&format!("Code:        {code}\n"));
    }
    if !p.spec.parameters.is_empty() {
        s.push_str("Parameters:\n");
        let rows: Vec<Vec<String>> = p
            .spec
            .parameters
            .iter()
            .map(|x| {
                vec![
                    x.name.clone(),
                    x.type_.as_str().to_string(),
                    x.default
                        .as_ref()
                        .map_or_else(|| "(required)".into(), Value::to_string),
                ]
            })
            .collect();
        for line in table(&["NAME", "TYPE", "DEFAULT"], &rows).lines() {
            s.push_str(&format!("  {line}\n"));
        }
    }
    let now = Timestamp::now();
    if versions.len() > 1 {
        let rows: Vec<Vec<String>> = versions
            .iter()
            .map(|v| {
                vec![
                    generation(v),
                    v.metadata
                        .annotations
                        .get("corral.dev/code")
                        .map_or_else(|| "-".into(), |c| c.chars().take(19).collect()),
                    v.spec.steps.len().to_string(),
                    if v.metadata.generation == p.metadata.generation {
                        "current".into()
                    } else {
                        format!(
                            "corral run {} --generation {}",
                            p.metadata.name,
                            generation(v)
                        )
                    },
                ]
            })
            .collect();
        s.push_str("Versions:\n");
        for line in table(&["GENERATION", "CODE", "STEPS", "RUN WITH"], &rows).lines() {
            s.push_str(&format!("  {line}\n"));
        }
    }
    let order = p.spec.topological_order().unwrap_or_default();
    let rows: Vec<Vec<String>> = order
        .iter()
        .filter_map(|&i| p.spec.steps.get(i))
        .map(|st| {
            let needs = st.needs();
            let fan_out = match (&st.with_param, st.with_items.len()) {
                (Some(param), _) => format!("each of params.{param}"),
                (None, 0) => "-".into(),
                (None, n) => format!("{n} items"),
            };
            vec![
                st.name.clone(),
                if needs.is_empty() {
                    "-".into()
                } else {
                    needs.join(",")
                },
                fan_out,
            ]
        })
        .collect();
    s.push_str("Steps:\n");
    for line in table(&["STEP", "NEEDS", "FAN-OUT"], &rows).lines() {
        s.push_str(&format!("  {line}\n"));
    }
    if runs.is_empty() {
        s.push_str(&format!(
            "Runs:        none (`corral run {}` starts one)\n",
            p.metadata.name
        ));
        return s;
    }
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let status = r.status.clone().unwrap_or_default();
            vec![
                r.metadata.name.clone(),
                r.spec
                    .pipeline_ref
                    .as_ref()
                    .and_then(|x| x.generation)
                    .map_or_else(|| "-".into(), |g| g.to_string()),
                status.phase.as_str().to_string(),
                r.metadata
                    .creation_timestamp
                    .map_or_else(|| "-".into(), |t| age(t, now)),
            ]
        })
        .collect();
    s.push_str("Runs:\n");
    for line in table(&["NAME", "GENERATION", "PHASE", "AGE"], &rows).lines() {
        s.push_str(&format!("  {line}\n"));
    }
    s
}

/// `corral describe pipeline/NAME...`
pub fn describe(client: &Client, ns: &str, names: &[String], output: Output) -> ExitCode {
    let names = if names.is_empty() {
        match client.pipelines(Some(ns)) {
            Ok(p) => p.into_iter().map(|p| p.metadata.name).collect(),
            Err(e) => return fail(&e),
        }
    } else {
        names.to_vec()
    };
    let runs = match client.pipeline_runs(Some(ns)) {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    let mut code = ExitCode::SUCCESS;
    for (i, name) in names.iter().enumerate() {
        let printed = match client.pipeline(ns, name) {
            Ok(p) if output.is_table() => {
                let made: Vec<corral_api::PipelineRun> = runs
                    .iter()
                    .filter(|r| {
                        r.spec
                            .pipeline_ref
                            .as_ref()
                            .is_some_and(|x| &x.name == name)
                    })
                    .cloned()
                    .collect();
                // A server that keeps no versions answers 404: the current one alone.
                let versions = client.pipeline_versions(ns, name).unwrap_or_default();
                let sep = if i > 0 { "\n" } else { "" };
                out(&format!("{sep}{}", describe_text(&p, &versions, &made)))
            }
            Ok(_) if output == Output::Name => out(&format!("pipeline/{name}\n")),
            Ok(p) => print_structured(&p, output),
            Err(e) => fail(&e),
        };
        if printed != ExitCode::SUCCESS {
            code = printed;
        }
    }
    code
}

/// `corral delete pipeline/NAME...`: the runs made from them stay.
pub fn delete(client: &Client, ns: &str, names: &[String]) -> ExitCode {
    if names.is_empty() {
        return fail(&"name the pipelines to delete: `corral delete pipeline/NAME`");
    }
    let mut code = ExitCode::SUCCESS;
    for name in names {
        match client.delete_pipeline(ns, name) {
            Ok(_) => println!("pipeline/{name} deleted"),
            Err(e) => code = fail(&e),
        }
    }
    code
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The stored Pipeline to run (`corral get pipelines` lists them).
    #[arg(value_name = "PIPELINE")]
    pub pipeline: String,
    /// A parameter of the run, NAME=VALUE (repeatable; VALUE read as YAML: `lr=0.1` is a
    /// number, `lrs=[0.1,0.2]` a list).
    #[arg(short = 'p', long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// The run's name (default: the pipeline's name, a dash and five generated characters).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Run this version of the pipeline only: refused unless it is the current one.
    #[arg(long, value_name = "N")]
    pub generation: Option<i64>,
    #[command(flatten)]
    pub namespace: NamespaceArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// The PipelineRun `corral run` submits.
pub fn run_document(args: &RunArgs) -> Result<Value, String> {
    let mut params = Map::new();
    for p in &args.params {
        let (name, value) = crate::params::parse_param(p)?;
        params.insert(name, value);
    }
    let metadata = match &args.name {
        Some(name) => json!({"name": name}),
        None => json!({"generateName": format!("{}-", args.pipeline)}),
    };
    let mut reference = json!({"name": args.pipeline});
    if let Some(g) = args.generation {
        reference["generation"] = json!(g);
    }
    Ok(json!({
        "apiVersion": corral_api::meta::API_VERSION,
        "kind": "PipelineRun",
        "metadata": metadata,
        "spec": {"pipelineRef": reference, "params": params},
    }))
}

/// `corral run PIPELINE [-p NAME=VALUE]...`
pub fn run_pipeline(args: &RunArgs) -> ExitCode {
    let doc = match run_document(args) {
        Ok(d) => d,
        Err(e) => return fail(&e),
    };
    let client = args.conn.client();
    let ns = args.namespace.resolve(&client);
    match client.submit(&ns, &doc.to_string()) {
        Ok(results) => {
            for r in results {
                println!(
                    "pipelinerun/{} submitted in namespace {} (pipeline {}); `corral describe \
                     pipelinerun/{}` follows it",
                    r.name, r.namespace, args.pipeline, r.name
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
    }
}
