//! No input panics the parser, converter or validator (the fuzz target in fuzz/ explores
//! further; this runs in every test run). Inputs are mutations of real documents, so they
//! reach deep into validation rather than stopping at the YAML parser.

use corral_api::document::parse_documents;
use corral_api::validate::ValidationContext;
use proptest::prelude::*;

const SEEDS: &[&str] = &[
    include_str!("../../../examples/pytorch/job.yaml"),
    include_str!("../../../examples/pytorch/elastic.pytorchjob.yaml"),
    include_str!("../../../examples/cluster.yaml"),
    include_str!("../../../examples/tensorflow/job.yaml"),
    include_str!("../../../examples/tensorflow/tfjob.yaml"),
    include_str!("../../../examples/mpi/job.yaml"),
    include_str!("../../../examples/mpi/mpijob.yaml"),
    include_str!("fixtures/kubeflow/pytorch-elastic.yaml"),
    include_str!("fixtures/kubeflow/tfjob-chief-eval.yaml"),
    include_str!("fixtures/kubeflow/mpi-horovod.yaml"),
];

/// Replaces a span of a seed document with arbitrary text.
fn mutated() -> impl Strategy<Value = String> {
    (
        0..SEEDS.len(),
        any::<prop::sample::Index>(),
        0usize..40,
        "(?s).{0,30}",
    )
        .prop_map(|(seed, at, len, insert)| {
            let s = SEEDS[seed];
            let mut start = at.index(s.len());
            while !s.is_char_boundary(start) {
                start -= 1;
            }
            let mut end = (start + len).min(s.len());
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}{}{}", &s[..start], insert, &s[end..])
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn mutated_documents_never_panic(text in mutated()) {
        for doc in parse_documents(&text, &ValidationContext::default()).into_iter().flatten() {
            let _ = doc.document.to_value();
        }
    }

    #[test]
    fn arbitrary_text_never_panics(text in "(?s).{0,200}") {
        let _ = parse_documents(&text, &ValidationContext::default());
    }
}
