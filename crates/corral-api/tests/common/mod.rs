#![allow(dead_code)]

use corral_api::document::{Document, parse_documents};
use corral_api::validate::ValidationContext;

/// Every error of every document, as `path: message` lines.
pub fn errors(text: &str) -> Vec<String> {
    parse_documents(text, &ValidationContext::default())
        .into_iter()
        .filter_map(Result::err)
        .flat_map(|e| e.errors.0.into_iter().map(|f| f.to_string()))
        .collect()
}

/// The documents of a text that must be valid.
pub fn valid(text: &str) -> Vec<Document> {
    parse_documents(text, &ValidationContext::default())
        .into_iter()
        .map(|r| match r {
            Ok(p) => p.document,
            Err(e) => panic!("expected valid input, got {e}"),
        })
        .collect()
}

pub fn assert_has(errors: &[String], path: &str, needle: &str) {
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with(&format!("{path}:")) && e.contains(needle)),
        "expected an error at `{path}` containing `{needle}`; got:\n{}",
        errors.join("\n")
    );
}

pub fn shared_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared")
}
