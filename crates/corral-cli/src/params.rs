//! `corral submit -p NAME=VALUE`: a pipeline run's parameters given on the command line, as
//! `argo submit -p` and `kfp run -p` take them. Each is set on every pipeline run of the
//! input: a PipelineRun's `spec.params`, or the value of a compiled Kubeflow pipeline's
//! parameter (its `root.inputDefinitions` default, what that run then takes). The server
//! checks the names and types as for any run (`spec.params.NAME`).

use corral_api::document::raw_documents;
use serde_json::Value;

/// One `-p NAME=VALUE`: the value read as YAML reads a scalar (or a flow list: a fan-out's
/// items), so `-p lr=0.1` is a number, `-p tag=v2` a string, `-p items=[1,2]` a list.
pub fn parse_param(arg: &str) -> Result<(String, Value), String> {
    let Some((name, text)) = arg.split_once('=') else {
        return Err(format!("`{arg}` is not NAME=VALUE (e.g. -p lr=0.1)"));
    };
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("`{arg}` has no parameter name (e.g. -p lr=0.1)"));
    }
    let value = if text.trim().is_empty() {
        Value::String(String::new())
    } else {
        let options = serde_saphyr::options! { strict_booleans: true };
        serde_saphyr::from_str_with_options::<Value>(text, options)
            .unwrap_or_else(|_| Value::String(text.to_string()))
    };
    Ok((name.to_string(), value))
}

/// `text` with `params` set on each of its pipeline runs, as YAML documents; an error when
/// it holds no pipeline run, or a compiled pipeline declares no such parameter.
pub fn with_params(text: &str, params: &[(String, Value)]) -> Result<String, String> {
    let mut docs = raw_documents(text)?;
    let mut runs = 0;
    for doc in &mut docs {
        if corral_api::kfp::is_pipeline_spec(doc.as_object().unwrap_or(&Default::default())) {
            runs += 1;
            let declared = doc
                .pointer_mut("/root/inputDefinitions/parameters")
                .and_then(Value::as_object_mut);
            let Some(declared) = declared else {
                return Err(no_such(&params[0].0, &[]));
            };
            for (name, value) in params {
                let names: Vec<String> = declared.keys().cloned().collect();
                let Some(def) = declared.get_mut(name).and_then(Value::as_object_mut) else {
                    return Err(no_such(name, &names));
                };
                def.insert("defaultValue".into(), value.clone());
            }
        } else if doc.get("kind").and_then(Value::as_str) == Some("PipelineRun") {
            runs += 1;
            let Some(spec) = doc.get_mut("spec").and_then(Value::as_object_mut) else {
                continue;
            };
            let set = spec
                .entry("params")
                .or_insert_with(|| Value::Object(Default::default()));
            if let Some(set) = set.as_object_mut() {
                for (name, value) in params {
                    set.insert(name.clone(), value.clone());
                }
            }
        }
    }
    if runs == 0 {
        return Err(
            "-p sets a pipeline run's parameters, and this input has no PipelineRun (or \
             compiled Kubeflow pipeline)"
                .into(),
        );
    }
    let mut out = String::new();
    for doc in &docs {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(doc).map_err(|e| e.to_string())?);
    }
    Ok(out)
}

fn no_such(name: &str, declared: &[String]) -> String {
    format!(
        "-p {name}: the pipeline declares no parameter `{name}` (it declares: {})",
        if declared.is_empty() {
            "none".to_string()
        } else {
            declared.join(", ")
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "apiVersion: corral.dev/v1alpha1
kind: PipelineRun
metadata: {name: r}
spec:
  params: {lr: 0.5}
  pipelineSpec:
    params: [{name: lr, type: number}, {name: tag, type: string}]
    steps:
      - {name: a, task: {command: ['true']}}
";

    #[test]
    fn values_read_as_yaml_scalars() {
        assert_eq!(parse_param("lr=0.1").ok(), Some(("lr".into(), 0.1.into())));
        assert_eq!(
            parse_param("tag=v2").ok(),
            Some(("tag".into(), "v2".into()))
        );
        assert_eq!(parse_param("on=on").ok(), Some(("on".into(), "on".into())));
        assert_eq!(
            parse_param("items=[1, 2]").ok(),
            Some(("items".into(), serde_json::json!([1, 2])))
        );
        assert_eq!(parse_param("e=").ok(), Some(("e".into(), "".into())));
        assert!(parse_param("novalue").is_err());
        assert!(parse_param("=3").is_err());
    }

    #[test]
    fn a_runs_params_are_set_and_the_rest_kept() {
        let params = [
            parse_param("lr=0.1").expect("lr"),
            parse_param("tag=x").expect("tag"),
        ];
        let out = with_params(RUN, &params).expect("set");
        let docs = raw_documents(&out).expect("yaml");
        assert_eq!(docs.len(), 1);
        assert_eq!(
            docs[0]["spec"]["params"],
            serde_json::json!({"lr": 0.1, "tag": "x"})
        );
        assert_eq!(docs[0]["spec"]["pipelineSpec"]["steps"][0]["name"], "a");
    }

    #[test]
    fn an_input_without_a_run_is_refused() {
        let job = "apiVersion: corral.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: j}\n";
        let e = with_params(job, &[parse_param("lr=1").expect("lr")]).expect_err("no run");
        assert!(e.contains("no PipelineRun"), "{e}");
    }

    #[test]
    fn a_compiled_kubeflow_pipeline_takes_the_value_of_a_declared_parameter() {
        let ir = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../corral-api/tests/fixtures/kfp/two_steps.yaml"
        ))
        .expect("fixture");
        let out = with_params(&ir, &[parse_param("greeting=bonjour").expect("p")]).expect("set");
        let docs = raw_documents(&out).expect("yaml");
        assert_eq!(
            docs[0]["root"]["inputDefinitions"]["parameters"]["greeting"]["defaultValue"],
            "bonjour"
        );
        // Still a compiled pipeline, converted by the server as it is.
        let parsed = corral_api::document::parse_documents(
            &out,
            &corral_api::validate::ValidationContext::default(),
        );
        assert!(parsed.iter().all(Result::is_ok));
        let e = with_params(&ir, &[parse_param("colour=red").expect("p")]).expect_err("unknown");
        assert!(
            e.contains("declares no parameter `colour` (it declares: greeting)"),
            "{e}"
        );
    }
}
