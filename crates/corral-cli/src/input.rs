//! Reading the user's files (or standard input for `-`).

use std::io::Read;

use corral_api::document::{Document, MAX_INPUT_BYTES, parse_documents};
use corral_api::validate::ValidationContext;

/// The text of a file, or of standard input for `-`, refusing what is too large to be a spec.
pub fn read(path: &str) -> Result<String, String> {
    let mut buf = Vec::new();
    let limit = MAX_INPUT_BYTES as u64 + 1;
    let read = if path == "-" {
        std::io::stdin().lock().take(limit).read_to_end(&mut buf)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(limit).read_to_end(&mut buf))
    };
    read.map_err(|e| format!("cannot read: {e}"))?;
    if buf.len() > MAX_INPUT_BYTES {
        return Err(format!(
            "larger than {} MiB; not a job spec",
            MAX_INPUT_BYTES >> 20
        ));
    }
    String::from_utf8(buf)
        .map_err(|e| format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()))
}

/// The NodePools, Queues, JobPriorityClasses and Pipelines of all inputs, so that documents of
/// one file may refer to those of another.
pub fn shared_context(texts: &[&str], base: &ValidationContext) -> ValidationContext {
    let mut ctx = base.clone();
    for text in texts {
        for parsed in parse_documents(text, base).into_iter().flatten() {
            match parsed.document {
                Document::NodePool(p) => ctx.node_pools.push(p),
                Document::Queue(q) => ctx.queues.push(q),
                Document::JobPriorityClass(p) => ctx.priority_classes.push(p),
                Document::Pipeline(p) => ctx.pipelines.push(*p),
                Document::TrainingJob(_) | Document::PipelineRun(_) | Document::ServedModel(_) => {}
            }
        }
    }
    ctx
}
