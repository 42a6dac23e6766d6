//! GPU type names: one canonical spelling, and the rule by which the names people write
//! (`H100`, `a100-40gb`, NVML's `NVIDIA H100 80GB HBM3`) select the GPU types that exist.
//!
//! **Canonical form**: the `nvidia.com/gpu.product` node label that NVIDIA's GPU feature
//! discovery writes on Kubernetes nodes: NVML's product name with every character outside
//! `[A-Za-z0-9-_. ]` dropped and each run of spaces turned into one `-`
//! (`NVIDIA H100 80GB HBM3` -> `NVIDIA-H100-80GB-HBM3`, `Tesla V100-SXM2-16GB` ->
//! `Tesla-V100-SXM2-16GB`). Canonicalising a canonical name changes nothing, so the
//! embedded shell (NVML), the operator (node labels) and the simulator (trace names such as
//! `V100`) all speak it.
//!
//! **Matching**: a requested name is cut into words at `-`, `_` and spaces, compared without
//! regard to case, and the brand words `NVIDIA`, `Tesla`, `Quadro` and `GeForce` are ignored.
//! A name that spells a type that exists (same canonical form, any case) selects that type
//! alone; any other name selects every GPU type whose words include all of its words. So
//! `NVIDIA-H200` selects only `NVIDIA-H200` where that exists, while `H200` selects it and
//! `NVIDIA-H200-NVL`; `H100` selects
//! `NVIDIA-H100-80GB-HBM3`, `NVIDIA-H100-PCIe` and `NVIDIA-H100-NVL`; `h100-80gb` selects only
//! the first (the PCIe card's name does not say 80GB, so it is not selected); `A100` selects
//! both the 40GB and the 80GB pools when both exist (an ambiguous alias matches all of them:
//! the job may run on either); a full name selects exactly its own type. Words are compared
//! whole: `A10` never selects an `A100`, `H20` never an `H200`, `L40` never an `L40S`, `B200`
//! never a `GB200`. This is the one rule of every shell (the scheduler's pool filter,
//! validation, the operator and the simulator).

/// Words that name the maker or product line, not the card; ignored when matching.
const BRAND_WORDS: [&str; 4] = ["NVIDIA", "TESLA", "QUADRO", "GEFORCE"];

/// The canonical spelling (the `nvidia.com/gpu.product` label form) of a GPU product name.
pub fn canonical(name: &str) -> String {
    let kept: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ' '))
        .collect();
    kept.split_whitespace().collect::<Vec<_>>().join("-")
}

/// The words of a name, upper-case, without brand words.
fn words(name: &str) -> Vec<String> {
    canonical(name)
        .split(['-', '_'])
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_uppercase)
        .filter(|w| !BRAND_WORDS.contains(&w.as_str()))
        .collect()
}

/// Whether the words of the requested name (as a job writes it in `gpuTypes`) are all
/// words of `gpu_type`. Which types a name selects also depends on which exist: see
/// [`resolve`].
pub fn matches(requested: &str, gpu_type: &str) -> bool {
    let want = words(requested);
    if want.is_empty() {
        return false;
    }
    let have = words(gpu_type);
    want.iter().all(|w| have.contains(w))
}

/// Whether two names spell the same GPU type (equal canonical forms, ignoring case): how a
/// node is assigned to a declared pool, whose `gpuType` names one type exactly.
pub fn same_type(a: &str, b: &str) -> bool {
    canonical(a).eq_ignore_ascii_case(&canonical(b))
}

/// The types among `types` (the types that exist) that `requested` selects, in their
/// given order: the one it spells, if it spells one, else all that [`matches`] accepts.
pub fn resolve<'a>(requested: &str, types: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let types: Vec<&str> = types.into_iter().collect();
    let exact: Vec<&str> = types
        .iter()
        .copied()
        .filter(|t| same_type(requested, t))
        .collect();
    if !exact.is_empty() {
        return exact;
    }
    types
        .into_iter()
        .filter(|t| matches(requested, t))
        .collect()
}

/// Whether `requested` selects `gpu_type` among the types that exist ([`resolve`]).
pub fn selects<'a>(
    requested: &str,
    gpu_type: &str,
    existing: impl IntoIterator<Item = &'a str>,
) -> bool {
    resolve(requested, existing)
        .iter()
        .any(|t| same_type(t, gpu_type))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// NVML product names of NVIDIA's data-centre GPUs from Volta to Blackwell, with the
    /// product label GPU feature discovery makes of each.
    pub(crate) const CARDS: &[(&str, &str)] = &[
        ("Tesla V100-SXM2-16GB", "Tesla-V100-SXM2-16GB"),
        ("Tesla V100-SXM2-32GB", "Tesla-V100-SXM2-32GB"),
        ("Tesla V100-PCIE-16GB", "Tesla-V100-PCIE-16GB"),
        ("Tesla V100-PCIE-32GB", "Tesla-V100-PCIE-32GB"),
        ("Tesla V100S-PCIE-32GB", "Tesla-V100S-PCIE-32GB"),
        ("Tesla T4", "Tesla-T4"),
        ("NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"),
        ("NVIDIA A100-PCIE-40GB", "NVIDIA-A100-PCIE-40GB"),
        ("NVIDIA A100 80GB PCIe", "NVIDIA-A100-80GB-PCIe"),
        ("NVIDIA A30", "NVIDIA-A30"),
        ("NVIDIA A10", "NVIDIA-A10"),
        ("NVIDIA A40", "NVIDIA-A40"),
        ("NVIDIA A16", "NVIDIA-A16"),
        ("NVIDIA L4", "NVIDIA-L4"),
        ("NVIDIA L40", "NVIDIA-L40"),
        ("NVIDIA L40S", "NVIDIA-L40S"),
        ("NVIDIA H100 PCIe", "NVIDIA-H100-PCIe"),
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("NVIDIA H100 NVL", "NVIDIA-H100-NVL"),
        ("NVIDIA H800", "NVIDIA-H800"),
        ("NVIDIA H200", "NVIDIA-H200"),
        ("NVIDIA H200 NVL", "NVIDIA-H200-NVL"),
        ("NVIDIA H20", "NVIDIA-H20"),
        ("NVIDIA GH200 480GB", "NVIDIA-GH200-480GB"),
        ("NVIDIA GH200 144G HBM3e", "NVIDIA-GH200-144G-HBM3e"),
        ("NVIDIA B200", "NVIDIA-B200"),
        ("NVIDIA GB200", "NVIDIA-GB200"),
        ("NVIDIA B100", "NVIDIA-B100"),
        (
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
        ),
    ];

    fn labels() -> Vec<&'static str> {
        CARDS.iter().map(|c| c.1).collect()
    }

    #[test]
    fn nvml_names_become_product_labels() {
        for (nvml, label) in CARDS {
            assert_eq!(canonical(nvml), *label, "{nvml}");
            assert_eq!(canonical(label), *label, "canonical of a label is itself");
            assert!(matches(nvml, label) && matches(label, nvml), "{nvml}");
            assert!(same_type(nvml, label));
        }
        // GFD drops what a label cannot hold and collapses runs of spaces.
        assert_eq!(canonical("  NVIDIA  H100 (80GB)  "), "NVIDIA-H100-80GB");
    }

    #[test]
    fn a_full_name_selects_only_its_own_card() {
        for (nvml, label) in CARDS {
            assert_eq!(resolve(nvml, labels()), vec![*label], "{nvml}");
            assert_eq!(
                resolve(&label.to_lowercase(), labels()),
                vec![*label],
                "case does not matter"
            );
        }
    }

    #[test]
    fn short_aliases_select_every_card_of_the_model() {
        let cases: &[(&str, &[&str])] = &[
            (
                "H100",
                &[
                    "NVIDIA-H100-PCIe",
                    "NVIDIA-H100-80GB-HBM3",
                    "NVIDIA-H100-NVL",
                ],
            ),
            ("h100-80gb", &["NVIDIA-H100-80GB-HBM3"]),
            ("H100-SXM", &[]),
            (
                "A100",
                &[
                    "NVIDIA-A100-SXM4-40GB",
                    "NVIDIA-A100-SXM4-80GB",
                    "NVIDIA-A100-PCIE-40GB",
                    "NVIDIA-A100-80GB-PCIe",
                ],
            ),
            (
                "a100-40gb",
                &["NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB"],
            ),
            (
                "A100-80GB",
                &["NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-80GB-PCIe"],
            ),
            (
                "V100",
                &[
                    "Tesla-V100-SXM2-16GB",
                    "Tesla-V100-SXM2-32GB",
                    "Tesla-V100-PCIE-16GB",
                    "Tesla-V100-PCIE-32GB",
                ],
            ),
            (
                "v100-32gb",
                &["Tesla-V100-SXM2-32GB", "Tesla-V100-PCIE-32GB"],
            ),
            ("T4", &["Tesla-T4"]),
            ("A10", &["NVIDIA-A10"]),
            ("L40", &["NVIDIA-L40"]),
            ("L40S", &["NVIDIA-L40S"]),
            ("H20", &["NVIDIA-H20"]),
            ("H200", &["NVIDIA-H200", "NVIDIA-H200-NVL"]),
            ("NVIDIA-H200", &["NVIDIA-H200"]),
            ("nvidia h100 nvl", &["NVIDIA-H100-NVL"]),
            ("GH200", &["NVIDIA-GH200-480GB", "NVIDIA-GH200-144G-HBM3e"]),
            ("B200", &["NVIDIA-B200"]),
            ("GB200", &["NVIDIA-GB200"]),
            ("K80", &[]),
            ("NVIDIA", &[]),
            ("", &[]),
        ];
        for (alias, want) in cases {
            assert_eq!(resolve(alias, labels()), want.to_vec(), "{alias}");
        }
    }

    #[test]
    fn an_exact_name_that_does_not_exist_falls_back_to_words() {
        // Only the NVL card exists: `NVIDIA-H200` is then an alias for it.
        assert_eq!(
            resolve("NVIDIA-H200", ["NVIDIA-H200-NVL"]),
            vec!["NVIDIA-H200-NVL"]
        );
        assert!(selects("H100", "NVIDIA-H100-80GB-HBM3", labels()));
        assert!(!selects("NVIDIA-H200", "NVIDIA-H200-NVL", labels()));
    }

    #[test]
    fn trace_names_match_themselves_only() {
        // The simulator's pools are named like its traces; nothing changes for them.
        let sim = ["K80", "P100", "V100"];
        for t in sim {
            assert_eq!(resolve(t, sim), vec![t]);
        }
    }

    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            proptest::sample::select(CARDS.iter().map(|c| c.0.to_string()).collect::<Vec<_>>()),
            "[A-Za-z0-9 ._()-]{0,30}",
        ]
    }

    proptest! {
        #[test]
        fn canonical_is_idempotent_and_label_safe(n in name()) {
            let c = canonical(&n);
            prop_assert_eq!(canonical(&c), c.clone());
            prop_assert!(!c.contains(' '));
            // Runs of spaces become one dash.
            prop_assert!(n.contains('-') || !c.contains("--"));
            prop_assert!(c.chars().all(|ch| ch.is_ascii_alphanumeric() || "-_.".contains(ch)));
        }

        #[test]
        fn every_name_selects_itself_and_its_canonical_form(n in name()) {
            let has_words = !words(&n).is_empty();
            prop_assert_eq!(matches(&n, &n), has_words);
            prop_assert_eq!(matches(&n, &canonical(&n)), has_words);
            prop_assert_eq!(matches(&n.to_lowercase(), &n), has_words);
        }

        #[test]
        fn a_longer_request_selects_no_more(n in name(), extra in "[A-Za-z0-9]{1,6}") {
            // Adding a word can only narrow what a request selects.
            let narrower = format!("{n}-{extra}");
            for t in labels() {
                prop_assert!(!matches(&narrower, t) || matches(&n, t) || words(&n).is_empty());
            }
        }
    }
}
