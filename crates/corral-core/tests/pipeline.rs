//! The pipeline decisions: dependencies, parallelism, conditions, caching, and that a run
//! ends exactly once, on hand-written runs and on random DAGs run by a fake shell.

use std::collections::{BTreeMap, BTreeSet};

use corral_api::pipeline::{
    ArtifactRecord, ParameterSpec, ParameterType, PipelineRun, PipelineRunSpec, PipelineSpec,
    RunPhase, StepPhase, StepSpec, TaskSpec,
};
use corral_core::control::pipeline::{CacheHit, Decision, Facts, Observed, decide};
use jiff::Timestamp;
use proptest::prelude::*;

fn step(name: &str, needs: &[&str]) -> StepSpec {
    StepSpec {
        name: name.into(),
        depends_on: needs.iter().map(|s| s.to_string()).collect(),
        inputs: BTreeMap::new(),
        outputs: vec!["out".into()],
        when: vec![],
        retries: 0,
        cache: None,
        job: None,
        task: Some(TaskSpec {
            command: vec!["true".into()],
            ..TaskSpec::default()
        }),
        with_items: vec![],
        with_param: None,
        parallelism: None,
        iteration_of: None,
    }
}

fn run(steps: Vec<StepSpec>, parallelism: Option<u32>) -> PipelineRun {
    PipelineRun::new(
        "r",
        PipelineRunSpec {
            pipeline_spec: PipelineSpec {
                parameters: vec![],
                steps,
                parallelism,
                on_exit: None,
            },
            pipeline_ref: None,
            params: BTreeMap::new(),
        },
    )
}

fn now() -> Timestamp {
    Timestamp::UNIX_EPOCH
}

/// A fake shell: answers every want (hashes, a cache with `cached` keys, contents) and
/// decides again, as the embedded shell does.
fn settle(
    run: &PipelineRun,
    jobs: &BTreeMap<String, Observed>,
    cached: &BTreeMap<String, CacheHit>,
) -> Decision {
    settle_reading(run, jobs, cached, "yes")
}

/// [`settle`], every artifact read holding `text`.
fn settle_reading(
    run: &PipelineRun,
    jobs: &BTreeMap<String, Observed>,
    cached: &BTreeMap<String, CacheHit>,
    text: &str,
) -> Decision {
    let mut facts = Facts::default();
    for _ in 0..100 {
        let d = decide(run, jobs, &facts, now());
        if d.wants.is_empty() {
            return d;
        }
        for (s, outs) in d.wants.hash {
            let recs = outs
                .iter()
                .map(|o| {
                    let a = ArtifactRecord {
                        path: format!("/a/{s}/{o}"),
                        sha256: format!("h-{s}-{o}"),
                    };
                    (o.clone(), a)
                })
                .collect();
            facts.outputs.insert(s, recs);
        }
        for k in d.wants.lookup {
            let hit = cached.get(&k).cloned();
            facts.cache.insert(k, hit);
        }
        for p in d.wants.read {
            facts.contents.insert(p, text.into());
        }
    }
    panic!("the decision kept wanting facts");
}

#[test]
fn a_chain_runs_one_step_after_another_and_succeeds() {
    let mut r = run(
        vec![step("a", &[]), step("b", &["a"]), step("c", &["b"])],
        None,
    );
    let mut jobs = BTreeMap::new();
    let none = BTreeMap::new();
    for name in ["a", "b", "c"] {
        let d = settle(&r, &jobs, &none);
        let created: Vec<&str> = d.create.iter().map(|l| l.step.as_str()).collect();
        assert_eq!(created, vec![name]);
        assert_eq!(d.create[0].job.metadata.name, format!("r-{name}"));
        r.status = Some(d.status);
        jobs.insert(name.to_string(), Observed::Succeeded);
    }
    let d = settle(&r, &jobs, &none);
    assert!(d.finished);
    assert_eq!(d.status.phase, RunPhase::Succeeded);
    assert_eq!(d.record.len(), 1, "c's result is recorded for the cache");
    r.status = Some(d.status);
    let again = settle(&r, &jobs, &none);
    assert!(!again.finished, "a run ends exactly once");
}

#[test]
fn a_failed_step_fails_the_run_with_its_reason_and_starts_nothing_more() {
    let mut r = run(
        vec![step("a", &[]), step("b", &[]), step("c", &["a"])],
        None,
    );
    let d = settle(&r, &BTreeMap::new(), &BTreeMap::new());
    assert_eq!(d.create.len(), 2);
    r.status = Some(d.status);
    let jobs = BTreeMap::from([
        (
            "a".to_string(),
            Observed::Failed("BackoffLimitExceeded: exit 3".into()),
        ),
        ("b".to_string(), Observed::Active),
    ]);
    let d = settle(&r, &jobs, &BTreeMap::new());
    assert!(d.create.is_empty());
    assert!(!d.finished, "b still runs");
    r.status = Some(d.status);
    let jobs = BTreeMap::from([
        (
            "a".to_string(),
            Observed::Failed("BackoffLimitExceeded: exit 3".into()),
        ),
        ("b".to_string(), Observed::Succeeded),
    ]);
    let d = settle(&r, &jobs, &BTreeMap::new());
    assert!(d.finished);
    assert_eq!(d.status.phase, RunPhase::Failed);
    let message = d.status.message.unwrap_or_default();
    assert!(
        message.contains("step a failed: BackoffLimitExceeded: exit 3"),
        "{message}"
    );
    assert_eq!(d.status.steps["c"].phase, StepPhase::Pending);
}

#[test]
fn a_cache_hit_reuses_the_outputs_and_its_dependents_follow() {
    let mut b = step("b", &[]);
    b.inputs.insert("x".into(), "steps.a.outputs.out".into());
    let r = run(vec![step("a", &[]), b], None);
    // First run, to learn the keys.
    let d = settle(&r, &BTreeMap::new(), &BTreeMap::new());
    let key_a = d.status.steps["a"].cache_key.clone().unwrap_or_default();
    let hit = CacheHit {
        from: "old/a".into(),
        outputs: BTreeMap::from([(
            "out".to_string(),
            ArtifactRecord {
                path: "/old/a/out".into(),
                sha256: "h".into(),
            },
        )]),
    };
    let d = settle(&r, &BTreeMap::new(), &BTreeMap::from([(key_a, hit)]));
    assert_eq!(d.status.steps["a"].phase, StepPhase::Cached);
    assert_eq!(d.status.steps["a"].cached_from.as_deref(), Some("old/a"));
    let created: Vec<&str> = d.create.iter().map(|l| l.step.as_str()).collect();
    assert_eq!(created, vec!["b"], "b runs at once on a's cached outputs");
}

#[test]
fn a_condition_that_does_not_hold_skips_the_step_and_those_that_need_it() {
    let mut a = step("a", &[]);
    a.when.push(corral_api::pipeline::WhenCondition {
        value: "params.go".into(),
        equals: Some("true".into()),
        ..Default::default()
    });
    let mut r = run(vec![a, step("b", &["a"])], None);
    r.spec
        .pipeline_spec
        .parameters
        .push(corral_api::pipeline::ParameterSpec {
            name: "go".into(),
            type_: corral_api::pipeline::ParameterType::Bool,
            default: Some(serde_json::json!(false)),
        });
    let d = settle(&r, &BTreeMap::new(), &BTreeMap::new());
    assert_eq!(d.status.steps["a"].phase, StepPhase::Skipped);
    assert_eq!(d.status.steps["b"].phase, StepPhase::Skipped);
    assert_eq!(d.status.phase, RunPhase::Succeeded);
}

/// Numeric comparisons read the value as a number (an Elif: the earlier branch negated and
/// its own); a value that is no number fails them, and says so.
#[test]
fn numeric_conditions_compare_numbers() {
    use corral_api::pipeline::WhenCondition;
    let on = |value: &str| WhenCondition {
        value: value.into(),
        ..Default::default()
    };
    let mut good = step("good", &[]);
    good.when.push(WhenCondition {
        greater_than: Some(0.5),
        ..on("params.score")
    });
    let mut fair = step("fair", &[]);
    fair.when.push(WhenCondition {
        less_than_or_equal: Some(0.5),
        ..on("params.score")
    });
    fair.when.push(WhenCondition {
        greater_than: Some(0.2),
        ..on("params.score")
    });
    let mut long = step("long", &[]);
    long.when.push(WhenCondition {
        greater_than_or_equal: Some(3.0),
        ..on("params.epochs")
    });
    let mut named = step("named", &[]);
    named.when.push(WhenCondition {
        less_than: Some(1.0),
        ..on("params.name")
    });
    let mut r = run(vec![good, fair, long, named], None);
    for (name, type_, default) in [
        ("score", ParameterType::Float, serde_json::json!(0.3)),
        ("epochs", ParameterType::Int, serde_json::json!(3)),
        ("name", ParameterType::String, serde_json::json!("abc")),
    ] {
        r.spec.pipeline_spec.parameters.push(ParameterSpec {
            name: name.into(),
            type_,
            default: Some(default),
        });
    }
    let d = settle(&r, &BTreeMap::new(), &BTreeMap::new());
    let step = |n: &str| &d.status.steps[n];
    assert_eq!(step("good").phase, StepPhase::Skipped);
    let why = step("good").message.clone().unwrap_or_default();
    assert!(why.contains("params.score is `0.3`, not > 0.5"), "{why}");
    assert_ne!(step("fair").phase, StepPhase::Skipped);
    assert_ne!(step("long").phase, StepPhase::Skipped, "3 >= 3");
    assert_eq!(step("named").phase, StepPhase::Skipped);
    let why = step("named").message.clone().unwrap_or_default();
    assert!(why.contains("not a number"), "{why}");
    let created: Vec<&str> = d.create.iter().map(|l| l.step.as_str()).collect();
    assert_eq!(created, ["fair", "long"]);
}

#[test]
fn the_key_changes_with_a_parameter_only_for_the_steps_that_read_it() {
    let mut b = step("b", &[]);
    b.inputs.insert("n".into(), "params.n".into());
    let mut r = run(vec![step("a", &[]), b], None);
    r.spec
        .pipeline_spec
        .parameters
        .push(corral_api::pipeline::ParameterSpec {
            name: "n".into(),
            type_: corral_api::pipeline::ParameterType::Int,
            default: Some(serde_json::json!(1)),
        });
    let keys = |r: &PipelineRun| {
        let d = settle(r, &BTreeMap::new(), &BTreeMap::new());
        (
            d.status.steps["a"].cache_key.clone(),
            d.status.steps["b"].cache_key.clone(),
        )
    };
    let first = keys(&r);
    r.spec.params.insert("n".into(), serde_json::json!(2));
    let second = keys(&r);
    assert_eq!(first.0, second.0);
    assert_ne!(first.1, second.1);
}

#[test]
fn the_exit_handler_runs_after_a_failure_and_its_own_failure_fails_a_success() {
    let exit = step("notify", &[]);
    // The run fails: the exit handler runs, told so, and the run ends with the step's reason.
    let mut r = run(vec![step("a", &[])], None);
    r.spec.pipeline_spec.on_exit = Some(Box::new(exit.clone()));
    let d = settle(&r, &BTreeMap::new(), &BTreeMap::new());
    r.status = Some(d.status);
    let jobs = BTreeMap::from([("a".to_string(), Observed::Failed("exit 1".into()))]);
    let d = settle(&r, &jobs, &BTreeMap::new());
    assert!(!d.finished, "the exit handler runs first");
    assert_eq!(d.create.len(), 1);
    let env = &d.create[0]
        .job
        .spec
        .replicas
        .values()
        .next()
        .unwrap()
        .template
        .env;
    assert!(
        env.iter()
            .any(|e| e.name == "CORRAL_RUN_PHASE" && e.value.as_deref() == Some("Failed"))
    );
    // And in Kubeflow's words (a KFP exit task's dsl.PipelineTaskFinalStatus).
    let status = env
        .iter()
        .find(|e| e.name == "CORRAL_RUN_STATUS")
        .and_then(|e| e.value.as_deref())
        .expect("CORRAL_RUN_STATUS");
    let status: serde_json::Value = serde_json::from_str(status).expect("JSON");
    assert_eq!(status["state"], "FAILED");
    assert_eq!(status["pipelineTaskName"], "notify");
    assert_eq!(status["pipelineJobResourceName"], r.metadata.name.as_str());
    assert_eq!(status["error"]["message"], "step a failed: exit 1");
    r.status = Some(d.status);
    let mut jobs = jobs;
    jobs.insert("notify".into(), Observed::Succeeded);
    let d = settle(&r, &jobs, &BTreeMap::new());
    assert!(d.finished);
    assert_eq!(d.status.phase, RunPhase::Failed);
    assert_eq!(d.status.message.as_deref(), Some("step a failed: exit 1"));

    // The run succeeds, the exit handler fails: the run fails, saying so.
    let mut r = run(vec![step("a", &[])], None);
    r.spec.pipeline_spec.on_exit = Some(Box::new(exit));
    let d = settle(&r, &BTreeMap::new(), &BTreeMap::new());
    r.status = Some(d.status);
    let mut jobs = BTreeMap::from([("a".to_string(), Observed::Succeeded)]);
    let d = settle(&r, &jobs, &BTreeMap::new());
    assert_eq!(d.create.len(), 1);
    let succeeded = d.create[0].job.spec.replicas.values().next().map(|r| {
        r.template
            .env
            .iter()
            .find(|e| e.name == "CORRAL_RUN_STATUS")
            .and_then(|e| e.value.clone())
    });
    let succeeded: serde_json::Value =
        serde_json::from_str(&succeeded.flatten().expect("status")).expect("JSON");
    assert_eq!(succeeded["state"], "SUCCEEDED");
    assert_eq!(succeeded["error"], serde_json::json!({}));
    r.status = Some(d.status);
    jobs.insert("notify".into(), Observed::Failed("exit 2".into()));
    let d = settle(&r, &jobs, &BTreeMap::new());
    assert_eq!(d.status.phase, RunPhase::Failed);
    assert_eq!(
        d.status.message.as_deref(),
        Some("exit handler notify failed: exit 2")
    );
}

proptest! {
    /// Random DAGs (a step needs some earlier ones), random parallelism and outcomes: never
    /// more than `parallelism` steps in flight, no step starts before its needs have
    /// outputs, and the run ends exactly once.
    #[test]
    fn random_dags_respect_dependencies_and_parallelism(
        needs in proptest::collection::vec(proptest::collection::vec(any::<prop::sample::Index>(), 0..3), 1..12),
        parallelism in proptest::option::of(1u32..4),
        with_exit in any::<bool>(),
        outcomes in proptest::collection::vec(0u8..10, 200),
    ) {
        let steps: Vec<StepSpec> = needs.iter().enumerate().map(|(i, ns)| {
            let deps: Vec<String> = if i == 0 { vec![] } else {
                let mut d: Vec<String> = ns.iter().map(|x| format!("s{}", x.index(i))).collect();
                d.sort();
                d.dedup();
                d
            };
            let deps: Vec<&str> = deps.iter().map(String::as_str).collect();
            step(&format!("s{i}"), &deps)
        }).collect();
        let mut r = run(steps.clone(), parallelism);
        if with_exit {
            r.spec.pipeline_spec.on_exit = Some(Box::new(step("exit", &[])));
        }
        let mut jobs: BTreeMap<String, Observed> = BTreeMap::new();
        let mut ended = 0;
        let mut outcomes = outcomes.into_iter();
        for _ in 0..100 {
            let d = settle(&r, &jobs, &BTreeMap::new());
            for l in &d.create {
                if l.step == "exit" {
                    // Only once every other step has ended.
                    prop_assert!(d.status.steps.iter().all(|(n, s)| n == "exit" || s.phase != StepPhase::Running));
                    jobs.insert(l.step.clone(), Observed::Active);
                    continue;
                }
                let s = steps.iter().find(|s| s.name == l.step).unwrap();
                for n in s.needs() {
                    prop_assert!(d.status.steps[&n].phase.has_outputs(), "{} started before {}", l.step, n);
                }
                jobs.insert(l.step.clone(), Observed::Active);
            }
            let running = d.status.steps.values().filter(|s| s.phase == StepPhase::Running).count();
            prop_assert!(running <= parallelism.map_or(usize::MAX, |p| p as usize));
            if d.finished { ended += 1; }
            r.status = Some(d.status);
            // Some running steps end.
            for (name, o) in jobs.iter_mut() {
                if *o == Observed::Active && r.status.as_ref().unwrap().steps[name].phase == StepPhase::Running {
                    match outcomes.next().unwrap_or(0) {
                        0 => *o = Observed::Failed("boom".into()),
                        1..=5 => *o = Observed::Succeeded,
                        _ => {}
                    }
                }
            }
        }
        prop_assert_eq!(ended, 1, "the run ends exactly once");
        prop_assert!(r.status.unwrap().phase.is_finished());
    }
}

fn fan_out(name: &str, items: usize, parallelism: Option<u32>) -> StepSpec {
    StepSpec {
        with_items: (0..items)
            .map(|i| serde_json::json!(format!("shard-{i}")))
            .collect(),
        parallelism,
        ..step(name, &["prep"])
    }
}

#[test]
fn a_fan_out_runs_once_per_item_with_the_item_in_its_env_and_its_dependents_wait_for_all() {
    let mut r = run(
        vec![
            step("prep", &[]),
            fan_out("shard", 3, None),
            step("merge", &["shard"]),
        ],
        None,
    );
    let mut jobs = BTreeMap::new();
    let none = BTreeMap::new();
    r.status = Some(settle(&r, &jobs, &none).status);
    jobs.insert("prep".to_string(), Observed::Succeeded);
    let d = settle(&r, &jobs, &none);
    let created: Vec<&str> = d.create.iter().map(|l| l.step.as_str()).collect();
    assert_eq!(created, vec!["shard-0", "shard-1", "shard-2"]);
    for (i, l) in d.create.iter().enumerate() {
        assert_eq!(l.job.metadata.name, format!("r-shard-{i}"));
        let env = &l.job.spec.replicas.values().next().unwrap().template.env;
        let get = |n: &str| {
            env.iter()
                .find(|e| e.name == n)
                .and_then(|e| e.value.clone())
        };
        assert_eq!(
            get("CORRAL_ITEM").as_deref(),
            Some(format!("shard-{i}").as_str())
        );
        assert_eq!(get("CORRAL_ITEM_INDEX"), Some(i.to_string()));
    }
    // Each item has its own cache key (its env is part of its job's spec).
    let keys: BTreeSet<_> = d
        .status
        .steps
        .values()
        .filter_map(|s| s.cache_key.clone())
        .collect();
    assert_eq!(keys.len(), 4, "prep and three distinct shard keys");
    r.status = Some(d.status);
    for name in ["shard-0", "shard-2"] {
        jobs.insert(name.to_string(), Observed::Succeeded);
    }
    jobs.insert("shard-1".to_string(), Observed::Active);
    let d = settle(&r, &jobs, &none);
    assert!(d.create.is_empty(), "merge waits for every iteration");
    r.status = Some(d.status);
    jobs.insert("shard-1".to_string(), Observed::Succeeded);
    let d = settle(&r, &jobs, &none);
    let created: Vec<&str> = d.create.iter().map(|l| l.step.as_str()).collect();
    assert_eq!(created, vec!["merge"]);
}

/// A step reading a fan-out's output gets every iteration's, collected in item order: a
/// JSON list of their paths, hashed together for its cache key and lineage.
#[test]
fn a_fan_outs_outputs_are_collected_in_item_order_for_the_step_that_reads_them() {
    let mut merge = step("merge", &[]);
    merge
        .inputs
        .insert("parts".into(), "steps.shard.outputs.out".into());
    let mut r = run(
        vec![step("prep", &[]), fan_out("shard", 3, None), merge],
        None,
    );
    let mut jobs = BTreeMap::new();
    let none = BTreeMap::new();
    r.status = Some(settle(&r, &jobs, &none).status);
    jobs.insert("prep".to_string(), Observed::Succeeded);
    let d = settle(&r, &jobs, &none);
    r.status = Some(d.status);
    // Two of three done: merge waits (it needs every iteration through its input alone).
    jobs.insert("shard-0".to_string(), Observed::Succeeded);
    jobs.insert("shard-2".to_string(), Observed::Succeeded);
    jobs.insert("shard-1".to_string(), Observed::Active);
    let d = settle(&r, &jobs, &none);
    assert!(d.create.is_empty(), "merge started before shard-1 ended");
    r.status = Some(d.status);
    jobs.insert("shard-1".to_string(), Observed::Succeeded);
    let d = settle(&r, &jobs, &none);
    assert_eq!(d.create.len(), 1);
    let launch = &d.create[0];
    assert_eq!(launch.step, "merge");
    let parts = match launch.inputs.get("parts") {
        Some(corral_core::control::pipeline::StepInput::Artifact(p)) => p.clone(),
        other => panic!("parts: {other:?}"),
    };
    assert_eq!(
        parts,
        r#"["/a/shard-0/out","/a/shard-1/out","/a/shard-2/out"]"#
    );
    // Its key follows every iteration's content: another hash for one item, another key.
    let key = d.status.steps["merge"].cache_key.clone();
    let mut changed = d.status.clone();
    if let Some(st) = changed.steps.get_mut("shard-1") {
        for a in st.outputs.values_mut() {
            a.sha256 = "h-other".into();
        }
    }
    changed.steps.remove("merge");
    let mut r2 = r.clone();
    r2.status = Some(changed);
    let d2 = settle(&r2, &jobs, &none);
    assert_ne!(d2.status.steps["merge"].cache_key, key);
    // Recorded with its lineage once it succeeded: the collected record.
    r.status = Some(d.status);
    jobs.insert("merge".to_string(), Observed::Succeeded);
    let d = settle(&r, &jobs, &none);
    let rec = d
        .record
        .iter()
        .find(|x| x.step == "merge")
        .expect("merge recorded");
    assert_eq!(rec.inputs["parts"].path, parts);
    assert_eq!(d.status.phase, RunPhase::Succeeded);
}

/// A fan-out over an earlier step's output: its items are read once that step has ended
/// (the JSON list in its one file), recorded in the run's status, and its iterations run
/// from the next decision on; a list that is not one fails the step, an empty one skips it.
#[test]
fn a_fan_out_over_a_steps_output_runs_once_per_item_it_wrote() {
    let mut shard = step("shard", &[]);
    shard.with_param = Some("steps.plan.outputs.out".into());
    let mut r = run(
        vec![step("plan", &[]), shard, step("merge", &["shard"])],
        None,
    );
    let none = BTreeMap::new();
    let decide_with = |r: &PipelineRun, jobs: &BTreeMap<String, Observed>, text: &str| {
        settle_reading(r, jobs, &none, text)
    };
    let mut jobs = BTreeMap::new();
    let d = decide_with(&r, &jobs, "");
    let created: Vec<&str> = d.create.iter().map(|l| l.step.as_str()).collect();
    assert_eq!(created, ["plan"], "shard waits for plan");
    r.status = Some(d.status);
    jobs.insert("plan".to_string(), Observed::Succeeded);
    let d = decide_with(&r, &jobs, r#"["a", 2, {"k": 3}]"#);
    assert!(d.create.is_empty());
    assert_eq!(d.status.fan_outs["shard"].len(), 3);
    r.status = Some(d.status);
    let d = decide_with(&r, &jobs, "unused");
    let created: Vec<&str> = d.create.iter().map(|l| l.step.as_str()).collect();
    assert_eq!(created, ["shard-0", "shard-1", "shard-2"]);
    let item = |i: usize| {
        let env = &d.create[i]
            .job
            .spec
            .replicas
            .values()
            .next()
            .unwrap()
            .template
            .env;
        env.iter()
            .find(|e| e.name == "CORRAL_ITEM")
            .and_then(|e| e.value.clone())
    };
    assert_eq!(item(0).as_deref(), Some("a"));
    assert_eq!(item(2).as_deref(), Some(r#"{"k":3}"#));
    // merge waits for every iteration, then runs; the run succeeds.
    r.status = Some(d.status);
    for i in 0..3 {
        jobs.insert(format!("shard-{i}"), Observed::Succeeded);
    }
    let d = decide_with(&r, &jobs, "unused");
    let created: Vec<&str> = d.create.iter().map(|l| l.step.as_str()).collect();
    assert_eq!(created, ["merge"]);
    r.status = Some(d.status);
    jobs.insert("merge".to_string(), Observed::Succeeded);
    let d = decide_with(&r, &jobs, "unused");
    assert_eq!(d.status.phase, RunPhase::Succeeded, "{:?}", d.status);
    assert!(
        !d.status.steps.contains_key("shard"),
        "its iterations took its place"
    );

    // Not a list: the step fails, and the run with it.
    let mut bad = run(
        vec![step("plan", &[]), {
            let mut s = step("shard", &[]);
            s.with_param = Some("steps.plan.outputs.out".into());
            s
        }],
        None,
    );
    let jobs = BTreeMap::from([("plan".to_string(), Observed::Succeeded)]);
    let fresh = bad.clone();
    bad.status = Some(decide_with(&bad, &BTreeMap::new(), "").status);
    let d = decide_with(&bad, &jobs, "{not a list");
    assert_eq!(d.status.phase, RunPhase::Failed, "{:?}", d.status);
    assert!(
        d.status.steps["shard"]
            .message
            .as_deref()
            .is_some_and(|m| m.contains("is not a JSON list")),
        "{:?}",
        d.status.steps["shard"]
    );
    // Empty: skipped, and so is what needs it.
    let mut empty = fresh.clone();
    empty.status = Some(decide_with(&fresh, &BTreeMap::new(), "").status);
    let d = decide_with(&empty, &jobs, "[]");
    assert_eq!(d.status.steps["shard"].phase, StepPhase::Skipped);
}

/// An input `steps.<step>.outputs.<output>.value` is the text of that output's one file (an
/// output parameter): read by the shell before the step starts, given as a value.
#[test]
fn a_value_input_is_the_text_of_an_earlier_steps_output() {
    let mut usr = step("use", &[]);
    usr.inputs
        .insert("n".into(), "steps.make.outputs.out.value".into());
    let mut r = run(vec![step("make", &[]), usr], None);
    assert_eq!(r.spec.pipeline_spec.steps[1].needs(), ["make"]);
    let mut jobs = BTreeMap::new();
    let none = BTreeMap::new();
    r.status = Some(settle_reading(&r, &jobs, &none, "42").status);
    jobs.insert("make".to_string(), Observed::Succeeded);
    let d = settle_reading(&r, &jobs, &none, "42");
    let launch = d
        .create
        .iter()
        .find(|l| l.step == "use")
        .expect("use starts");
    assert_eq!(
        launch.inputs.get("n"),
        Some(&corral_core::control::pipeline::StepInput::Value(
            "42".into()
        ))
    );
}

#[test]
fn first_steps_are_what_a_run_starts_with() {
    let r = run(
        vec![StepSpec {
            depends_on: vec![],
            ..fan_out("shard", 50, Some(8))
        }],
        None,
    );
    let jobs = corral_core::control::pipeline::first_steps(&r, now());
    assert_eq!(jobs.len(), 8, "the fan-out's bound");
    assert_eq!(jobs[0].metadata.name, "r-shard-0");
}

proptest! {
    /// A 50-wide fan-out under its own bound and the run's: never more iterations in flight
    /// than the fan-out allows, never more steps than the run allows, and every item runs
    /// once.
    #[test]
    fn a_fan_out_never_runs_more_than_its_bound(
        bound in 1u32..10,
        run_bound in proptest::option::of(1u32..12),
        outcomes in proptest::collection::vec(0u8..4, 2000),
    ) {
        let mut r = run(
            vec![step("prep", &[]), fan_out("shard", 50, Some(bound)), step("merge", &["shard"])],
            run_bound,
        );
        let mut jobs: BTreeMap<String, Observed> = BTreeMap::new();
        let mut started: BTreeMap<String, usize> = BTreeMap::new();
        let mut outcomes = outcomes.into_iter();
        for _ in 0..400 {
            let d = settle(&r, &jobs, &BTreeMap::new());
            for l in &d.create {
                *started.entry(l.step.clone()).or_default() += 1;
                jobs.insert(l.step.clone(), Observed::Active);
            }
            let running: Vec<&String> = d.status.steps.iter()
                .filter(|(_, s)| s.phase == StepPhase::Running)
                .map(|(n, _)| n)
                .collect();
            let shards = running.iter().filter(|n| n.starts_with("shard-")).count();
            prop_assert!(shards <= bound as usize, "{} shards in flight, bound {}", shards, bound);
            prop_assert!(running.len() <= run_bound.map_or(usize::MAX, |b| b as usize));
            let finished = d.finished;
            r.status = Some(d.status);
            if finished { break; }
            for (name, o) in jobs.iter_mut() {
                if *o == Observed::Active && outcomes.next().unwrap_or(1) >= 2 {
                    *o = Observed::Succeeded;
                }
                let _ = name;
            }
        }
        let status = r.status.unwrap();
        prop_assert_eq!(status.phase, RunPhase::Succeeded);
        prop_assert_eq!(started.len(), 52);
        prop_assert!(started.values().all(|n| *n == 1), "an item ran twice");
    }
}

#[test]
fn a_refused_run_fails_once_saying_why_and_starts_nothing() {
    use corral_core::control::pipeline::refused;
    let r = run(vec![step("a", &[])], None);
    let d = refused(&r, "spec.x: wrong".into(), now());
    assert!(d.finished && d.create.is_empty());
    assert_eq!(d.status.phase, RunPhase::Failed);
    assert_eq!(d.status.message.as_deref(), Some("Invalid: spec.x: wrong"));
    assert_eq!(d.status.start_time, Some(now()));
    // Ended already: nothing changes, no second ending.
    let mut ended = r.clone();
    ended.status = Some(d.status.clone());
    let again = refused(&ended, "other".into(), now());
    assert!(!again.finished);
    assert_eq!(again.status, d.status);
}

#[test]
fn only_steps_that_succeeded_under_a_key_are_results_for_the_cache() {
    use corral_core::control::pipeline::recorded_results;
    let mut r = run(vec![step("a", &[]), step("b", &[]), step("c", &[])], None);
    let out = BTreeMap::from([(
        "out".to_string(),
        ArtifactRecord {
            path: "/p".into(),
            sha256: "sha256:1".into(),
        },
    )]);
    let status = r.status.get_or_insert_default();
    for (name, phase, key) in [
        ("a", StepPhase::Succeeded, Some("k1")),
        ("b", StepPhase::Cached, Some("k2")),
        ("c", StepPhase::Succeeded, None),
    ] {
        let st = status.steps.entry(name.into()).or_default();
        st.phase = phase;
        st.cache_key = key.map(str::to_string);
        st.outputs = out.clone();
    }
    let got = recorded_results(&r);
    assert_eq!(got, vec![("a", "k1", &out)]);
}
