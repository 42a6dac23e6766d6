//! `corral submit --as-pipeline`: each compiled Kubeflow pipeline of the input is stored as a
//! Pipeline (kind `Pipeline`, named after `pipelineInfo.name`), for `corral run NAME` later,
//! instead of being run at once, as `kfp pipeline upload` keeps one. The conversion is the
//! server's own (`corral_api::kfp::convert`); what it cannot take is refused here with the
//! same field paths. The other documents of the input are sent as they are.

use corral_api::document::raw_documents;
use corral_api::kfp;
use corral_api::pipeline::Pipeline;

/// `text` with each compiled Kubeflow pipeline replaced by the Pipeline it is, as YAML
/// documents; an error when the input holds none, or one that does not convert.
pub fn as_pipelines(text: &str) -> Result<String, String> {
    let docs = raw_documents(text)?;
    let mut out = String::new();
    let mut converted = 0;
    for doc in &docs {
        let is_kfp = doc.as_object().is_some_and(kfp::is_pipeline_spec);
        let doc = if is_kfp {
            let run = kfp::convert(doc).map_err(|errors| {
                let lines: Vec<String> = errors
                    .iter()
                    .map(|e| format!("  {}: {}", e.path, e.message))
                    .collect();
                format!("{} cannot be stored:\n{}", kfp::WHAT, lines.join("\n"))
            })?;
            let generated = run.metadata.generate_name.unwrap_or_default();
            let name = generated.trim_end_matches('-');
            converted += 1;
            let pipeline = Pipeline::new(name, run.spec.pipeline_spec);
            serde_json::to_value(&pipeline).map_err(|e| e.to_string())?
        } else {
            doc.clone()
        };
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&doc).map_err(|e| e.to_string())?);
    }
    if converted == 0 {
        return Err(
            "--as-pipeline stores compiled Kubeflow pipelines (the YAML that kfp.compiler \
             writes), and this input has none"
                .into(),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_api::document::{Document, parse_documents};
    use corral_api::validate::ValidationContext;

    const TWO_STEPS: &str = include_str!("../../corral-api/tests/fixtures/kfp/two_steps.yaml");

    #[test]
    fn a_compiled_pipeline_becomes_a_stored_pipeline_of_its_name() {
        let text = as_pipelines(TWO_STEPS).expect("converts");
        let parsed = parse_documents(&text, &ValidationContext::default());
        let Ok(p) = &parsed[0] else {
            panic!("{parsed:?}");
        };
        let Document::Pipeline(pipeline) = &p.document else {
            panic!("not a Pipeline: {text}");
        };
        assert_eq!(pipeline.metadata.name, "two-steps");
        let names: Vec<&str> = pipeline
            .spec
            .steps
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(names, ["consume", "produce"]);
        assert_eq!(pipeline.spec.parameters[0].name, "greeting");
    }

    #[test]
    fn an_input_without_a_compiled_pipeline_is_refused() {
        let e = as_pipelines("kind: Queue\nmetadata: {name: q}\n").expect_err("refused");
        assert!(e.contains("has none"), "{e}");
        let broken = TWO_STEPS.replace("executorLabel: exec-consume", "dag: {tasks: {}}");
        let e = as_pipelines(&broken).expect_err("refused");
        assert!(e.contains("components.comp-consume: "), "{e}");
    }
}
