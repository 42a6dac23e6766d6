//! A valid object survives a YAML round trip unchanged, and stays valid.

use std::collections::BTreeMap;

use corral_api::document::{Document, parse_documents};
use corral_api::validate::ValidationContext;
use corral_api::*;
use proptest::prelude::*;

fn text() -> impl Strategy<Value = String> {
    // Characters YAML treats specially: quotes, colons, hashes, newlines, unicode, leading
    // dashes, and words YAML 1.1 reads as booleans or numbers.
    prop_oneof![
        "[ -~]{0,24}",
        Just("yes".to_string()),
        Just("no".to_string()),
        Just("0755".to_string()),
        Just("1.10".to_string()),
        Just("- dash: x # y".to_string()),
        Just("line one\nline two".to_string()),
        Just("ünïcødé ✓".to_string()),
        Just("null".to_string()),
        Just("~".to_string()),
    ]
}

fn cpu() -> impl Strategy<Value = Quantity> {
    prop_oneof![
        (1u32..64).prop_map(|n| format!("{n}")),
        (1u32..64000).prop_map(|n| format!("{n}m")),
        (1u32..9).prop_map(|n| format!("{n}.5")),
    ]
    .prop_map(|s| Quantity::parse(&s).expect("generated quantity is valid"))
}

fn replica(role: Role, fw: Framework) -> impl Strategy<Value = ReplicaSpec> {
    let max: u32 = if fw.singleton_roles().contains(&role) {
        1
    } else {
        6
    };
    (
        1u32..=max,
        proptest::option::of(cpu()),
        0u32..=8,
        prop::collection::vec(text(), 1..4),
        prop::collection::vec(("[A-Z][A-Z0-9_]{0,8}", text()), 0..3),
        proptest::option::of(prop_oneof![
            Just(RestartPolicy::Never),
            Just(RestartPolicy::OnFailure),
            Just(RestartPolicy::ExitCode),
            Just(RestartPolicy::Always)
        ]),
    )
        .prop_map(|(count, cpu, gpu, mut command, env, restart_policy)| {
            if command[0].trim().is_empty() {
                command[0] = "python3".into();
            }
            let mut seen = std::collections::BTreeSet::new();
            let env = env
                .into_iter()
                .filter(|(n, _)| seen.insert(n.clone()))
                .map(|(n, v)| EnvVar::literal(&n, &v))
                .collect();
            ReplicaSpec {
                count,
                resources: Resources {
                    cpu,
                    memory: Some(Quantity::parse("4Gi").expect("valid")),
                    gpu,
                    ..Default::default()
                },
                template: ReplicaTemplate {
                    command,
                    env,
                    ..Default::default()
                },
                restart_policy,
            }
        })
}

fn training_job() -> impl Strategy<Value = TrainingJob> {
    prop_oneof![
        Just(Framework::PyTorch),
        Just(Framework::TensorFlow),
        Just(Framework::Mpi),
        Just(Framework::Jax),
        Just(Framework::XGBoost),
        Just(Framework::Generic)
    ]
    .prop_flat_map(|fw| {
        // Every framework's required role, plus any others it allows.
        let required = match fw {
            Framework::PyTorch | Framework::XGBoost => Role::Master,
            Framework::TensorFlow => Role::Chief,
            Framework::Mpi => Role::Launcher,
            Framework::Jax | Framework::Generic => Role::Worker,
        };
        let roles: Vec<Role> = fw.roles().to_vec();
        (
            Just(fw),
            prop::sample::subsequence(roles.clone(), 0..=roles.len()),
            "[a-z][a-z0-9]{0,20}",
            prop::collection::vec(replica(required, fw), 1),
        )
            .prop_flat_map(move |(fw, extra, name, first)| {
                let extra: Vec<Role> = extra.into_iter().filter(|r| *r != required).collect();
                let specs: Vec<_> = extra.iter().map(|r| replica(*r, fw)).collect();
                (Just(fw), Just(name), Just(first), Just(extra), specs)
            })
            .prop_map(move |(fw, name, first, extra, specs)| {
                let mut replicas = BTreeMap::new();
                replicas.insert(required, Box::new(first.into_iter().next().expect("one")));
                replicas.extend(extra.into_iter().zip(specs.into_iter().map(Box::new)));
                let mut job = TrainingJob::new(
                    &name,
                    TrainingJobSpec {
                        framework: fw,
                        replicas,
                        run_policy: RunPolicy::default(),
                        success_policy: None,
                        queue: None,
                        priority_class: None,
                        elastic: None,
                        nproc_per_node: None,
                        mpi: None,
                        port: None,
                    },
                );
                job.metadata.labels.insert("team".into(), "vision".into());
                job
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn valid_training_job_survives_yaml_round_trip(job in training_job(), defaults in any::<bool>()) {
        let mut job = job;
        if defaults {
            job.spec.apply_defaults();
        }
        let yaml = serde_saphyr::to_string(&job).expect("serialize");
        let parsed = parse_documents(&yaml, &ValidationContext::default());
        prop_assert_eq!(parsed.len(), 1);
        match parsed.into_iter().next() {
            Some(Ok(p)) => prop_assert_eq!(p.document, Document::TrainingJob(Box::new(job)), "yaml:\n{}", yaml),
            other => prop_assert!(false, "round trip failed: {:?}\nyaml:\n{}", other, yaml),
        }
    }

    #[test]
    fn apply_defaults_is_idempotent(job in training_job()) {
        let mut once = job.spec.clone();
        once.apply_defaults();
        let mut twice = once.clone();
        twice.apply_defaults();
        prop_assert_eq!(once, twice);
    }
}
