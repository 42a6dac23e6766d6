//! Any bytes through the parser, Kubeflow converter and validator: errors are fine, panics
//! are not. Run: `cargo fuzz run parse_validate` (see README).
#![no_main]

use corral_api::document::parse_documents;
use corral_api::validate::ValidationContext;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        for doc in parse_documents(text, &ValidationContext::default()).into_iter().flatten() {
            // Valid documents must also print and apply defaults without panicking.
            let _ = doc.document.to_value();
            if let corral_api::document::Document::TrainingJob(mut job) = doc.document {
                job.spec.apply_defaults();
            }
        }
    }
});
