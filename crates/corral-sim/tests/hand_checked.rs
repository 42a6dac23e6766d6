//! Small traces with answers worked out by hand.

use corral_sim::cluster::ClusterSpec;
use corral_sim::policy::{fifo::Fifo, las::Las, sjf::Sjf};
use corral_sim::{EngineConfig, Policy, PolicyKind, SimJob, Throughput, run_policy};

fn job(id: usize, arrival: f64, secs: f64) -> SimJob {
    SimJob {
        id,
        name: format!("j{id}"),
        arrival_s: arrival,
        gpus: 1,
        steps: secs,
        throughput: Throughput::Uniform(1.0),
        job_type: "t".into(),
        queue: "default".into(),
        allowed_types: Vec::new(),
        restart_s: None,
        start_s: 0.0,
        elastic: None,
    }
}

fn cfg(round_s: f64) -> EngineConfig {
    EngineConfig {
        round_s,
        restart_s: 30.0,
        checkpoint_s: 600.0,
        seed: 1,
    }
}

fn one_gpu() -> corral_sim::SimCluster {
    ClusterSpec::parse_flag("v100:1", 1)
        .unwrap()
        .build()
        .unwrap()
}

/// A long job (1000 s) and a short one (100 s) arrive together on one GPU.
fn two_jobs() -> Vec<SimJob> {
    vec![job(0, 0.0, 1000.0), job(1, 0.0, 100.0)]
}

fn avg_jct(p: &mut dyn Policy, jobs: &[SimJob], round_s: f64) -> (f64, corral_sim::PolicyMetrics) {
    let (_, m) = run_policy(jobs, &one_gpu(), p, &cfg(round_s), &mut |_| {}).unwrap();
    (m.avg_jct_s, m)
}

#[test]
fn two_jobs_one_gpu_fifo_runs_long_first() {
    // FIFO: long 0..1000, short 1000..1100 -> JCTs 1000 and 1100.
    let mut fifo = Fifo::new(0);
    fifo.realloc_min_s = 0.0;
    let (avg, m) = avg_jct(&mut fifo, &two_jobs(), 10.0);
    assert!((avg - 1050.0).abs() < 1e-6, "{avg}");
    assert!((m.makespan_s - 1100.0).abs() < 1e-6);
    assert_eq!(m.preemptions, 0);
    assert!((m.avg_queueing_delay_s - 500.0).abs() < 1e-6);
}

#[test]
fn two_jobs_one_gpu_fifo_with_gavel_reallocation_interval() {
    // Gavel recomputes FIFO's allocation at most every 1920 s: the short job starts at
    // 1920 -> JCTs 1000 and 2020.
    let (avg, _) = avg_jct(&mut Fifo::new(0), &two_jobs(), 10.0);
    assert!((avg - 1510.0).abs() < 1e-6, "{avg}");
}

#[test]
fn two_jobs_one_gpu_sjf_runs_short_first() {
    // SJF: short 0..100, long 100..1100 -> JCTs 100 and 1100.
    let (avg, m) = avg_jct(&mut Sjf, &two_jobs(), 10.0);
    assert!((avg - 600.0).abs() < 1e-6, "{avg}");
    assert!((m.makespan_s - 1100.0).abs() < 1e-6);
}

#[test]
fn two_jobs_one_gpu_corral_is_fifo_within_a_queue() {
    // Same priority and queue: the core admits by submit time; job 0 is first.
    let mut p = PolicyKind::Corral.build(0);
    let (avg, m) = avg_jct(p.as_mut(), &two_jobs(), 10.0);
    assert!((avg - 1050.0).abs() < 1e-6, "{avg}");
    assert_eq!(m.jobs_completed, 2);
}

#[test]
fn las_preemption_pays_restart_and_checkpoint_loss() {
    // A: 10000 s from t=0. B: 500 s, arrives at 3650, joins at the 3700 boundary. At 3700
    // A has 3700 GPU-s (second LAS queue), B none: B preempts A. A checkpointed at 3600, so
    // it loses 100 s; B runs 3700..4200; A restarts at 4200, pays 30 s, has 6400 s left:
    // done at 10630.
    let jobs = vec![job(0, 0.0, 10_000.0), job(1, 3650.0, 500.0)];
    let (r, m) = run_policy(
        &jobs,
        &one_gpu(),
        &mut Las::default(),
        &cfg(100.0),
        &mut |_| {},
    )
    .unwrap();
    assert!((r.states[1].finished_at.unwrap() - 4200.0).abs() < 1e-6);
    assert!(
        (r.states[0].finished_at.unwrap() - 10_630.0).abs() < 1e-6,
        "{:?}",
        r.states[0].finished_at
    );
    assert_eq!((m.preemptions, m.restarts, m.migrations), (1, 1, 0));
    // Allocated: 10630 s minus nothing idle; kept progress 10500 s.
    assert!(
        (r.productive_gpu_s - 10_500.0).abs() < 1e-6,
        "{}",
        r.productive_gpu_s
    );
}

#[test]
fn faster_type_finishes_sooner_for_heterogeneity_aware_policies() {
    // One k80 and one v100; the job runs 4x faster on v100. SJF picks the fastest type.
    let mut per = std::collections::BTreeMap::new();
    per.insert("k80".to_string(), 1.0);
    per.insert("v100".to_string(), 4.0);
    let mut j = job(0, 0.0, 4000.0);
    j.throughput = Throughput::PerType(per);
    let c = ClusterSpec::parse_flag("k80:1,v100:1", 1)
        .unwrap()
        .build()
        .unwrap();
    let (_, m) = run_policy(&[j], &c, &mut Sjf, &cfg(10.0), &mut |_| {}).unwrap();
    assert!((m.avg_jct_s - 1000.0).abs() < 1e-6, "{}", m.avg_jct_s);
}

#[test]
fn gandiva_time_slices_one_gpu_round_robin() {
    // Two 1000 s jobs at t=0 on one GPU, 100 s rounds, restart 30 s, no checkpoint loss:
    // A gets the GPU, B time-shares it (quantum set to one round). A runs 0..100 (100 s of
    // work), B 100..200 (100 s, first start: no restart), then each turn is 30 s restart +
    // 70 s work. A: 100 + 12 x 70 = 940 after its turn at 2400; its turn at 2600 finishes
    // it at 2600 + 30 + 60 = 2690. B: 940 after its turn at 2500; at 2700 it has the GPU
    // alone: done at 2790. Every turn change preempts one job and restarts the other: 26
    // preemptions, 26 restarts.
    use corral_sim::policy::gandiva::Gandiva;
    let jobs = vec![job(0, 0.0, 1000.0), job(1, 0.0, 1000.0)];
    let cfg = EngineConfig {
        round_s: 100.0,
        restart_s: 30.0,
        checkpoint_s: 0.0,
        seed: 0,
    };
    let mut g = Gandiva::default();
    g.quantum_s = 100.0;
    let (r, m) = run_policy(&jobs, &one_gpu(), &mut g, &cfg, &mut |_| {}).unwrap();
    assert!(
        (r.states[0].finished_at.unwrap() - 2690.0).abs() < 1e-6,
        "{:?}",
        r.states[0].finished_at
    );
    assert!(
        (r.states[1].finished_at.unwrap() - 2790.0).abs() < 1e-6,
        "{:?}",
        r.states[1].finished_at
    );
    assert_eq!((m.preemptions, m.restarts, m.migrations), (26, 26, 0));
}

#[test]
fn gandiva_migrates_a_job_to_make_room_for_a_two_gpu_job() {
    // Two nodes of 2 GPUs. X (200 s), Y and W (10000 s each) arrive at 0: packing puts X
    // and Y on node 0 (the partly used node first), W on node 1. X finishes at 200, when Z
    // (2 GPUs, 1000 s) arrives: one GPU is free on each node. Gandiva moves Y to node 1
    // (one migration; Y pays the 30 s restart) and runs Z on node 0 from 200 to 1200.
    // Y: 200 s done by 200, then 30 + 9800: done at 10030; W at 10000.
    use corral_sim::policy::gandiva::Gandiva;
    let mut z = job(3, 200.0, 1000.0);
    z.gpus = 2;
    let jobs = vec![
        job(0, 0.0, 200.0),
        job(1, 0.0, 10_000.0),
        job(2, 0.0, 10_000.0),
        z,
    ];
    let cfg = EngineConfig {
        round_s: 100.0,
        restart_s: 30.0,
        checkpoint_s: 0.0,
        seed: 0,
    };
    let c = ClusterSpec::parse_flag("v100:4/2", 1)
        .unwrap()
        .build()
        .unwrap();
    let (r, m) = run_policy(&jobs, &c, &mut Gandiva::default(), &cfg, &mut |_| {}).unwrap();
    let done: Vec<f64> = r.states.iter().map(|s| s.finished_at.unwrap()).collect();
    assert_eq!(done, [200.0, 10_030.0, 10_000.0, 1200.0]);
    assert_eq!((m.preemptions, m.migrations), (0, 1));
    assert_eq!(r.states[1].migrations, 1);
}

#[test]
fn corral_preempts_and_requeues_through_the_control_plane() {
    // The LAS trace above, run by the production control plane. At 3700 A has held 3700
    // GPU-s by the plane's ledger (least-attained-service level 1), B none: B preempts A.
    // A's replica stops, A re-enters its queue in the same round and waits; B runs
    // 3700..4200; A restarts at 4200, pays 30 s, has 6400 s left (checkpoint at 3600): done
    // at 10630.
    use corral_sim::corral_policy::CorralPolicy;
    let jobs = vec![job(0, 0.0, 10_000.0), job(1, 3650.0, 500.0)];
    let mut p = CorralPolicy::default();
    let (r, m) = run_policy(&jobs, &one_gpu(), &mut p, &cfg(100.0), &mut |_| {}).unwrap();
    assert!((r.states[1].finished_at.unwrap() - 4200.0).abs() < 1e-6);
    assert!(
        (r.states[0].finished_at.unwrap() - 10_630.0).abs() < 1e-6,
        "{:?}",
        r.states[0].finished_at
    );
    assert_eq!((m.preemptions, m.restarts, m.migrations), (1, 1, 0));
    // What the plane said: A admitted twice, B once; one preemption, one requeue.
    assert_eq!(p.events.get("Admitted"), Some(&3), "{:?}", p.events);
    assert_eq!(p.events.get("Preempted"), Some(&1), "{:?}", p.events);
    assert_eq!(p.events.get("Requeued"), Some(&1), "{:?}", p.events);
    assert!(p.rejected.is_empty());
    assert_eq!(p.unsettled_cycles, 0);
    let plane = p.plane().expect("the plane");
    let a = plane.job("sim/job-0").expect("A is still known");
    assert_eq!(a.status.as_ref().map(|s| s.preemption_count), Some(1));
    // B finished and was deleted: finished jobs cost the plane nothing.
    assert!(plane.job("sim/job-1").is_none());
    // The ledger counted what each held: A 0..3700 and 4200..10600 (the last step), B
    // 3700..4200.
    let held: f64 = plane.ledger().queues()["default"].values().sum();
    assert!((held - 10_600.0).abs() < 1e-6, "{held}");
}

#[test]
fn corral_more_cycles_per_round_change_nothing_when_nothing_else_fits() {
    // With one GPU a preempted job has nowhere else to go: further cycles in the same round
    // (as a shell that ticks faster than the round) admit nothing more.
    use corral_sim::corral_policy::CorralPolicy;
    let jobs = vec![job(0, 0.0, 10_000.0), job(1, 3650.0, 500.0)];
    let mut p = CorralPolicy::default();
    p.cycles_per_round = 3;
    let (r, m) = run_policy(&jobs, &one_gpu(), &mut p, &cfg(100.0), &mut |_| {}).unwrap();
    assert!((r.states[0].finished_at.unwrap() - 10_630.0).abs() < 1e-6);
    assert_eq!((m.preemptions, m.restarts, m.migrations), (1, 1, 0));
    assert_eq!(p.events.get("Admitted"), Some(&3), "{:?}", p.events);
}

#[test]
fn las_starvation_guard_promotes_a_starved_job() {
    // One GPU, 100 s rounds, no restart cost; one LAS threshold at 100 GPU-s. X (5000 s)
    // and A (1000 s) arrive at 0. X runs 0..100 and drops to the second queue; A runs
    // 100..200 and drops too; from 200 X wins the tie (earlier job) every time.
    // Without the guard X runs to the end (5100) and A after it (6000). With the guard
    // (promote after waiting as long as it ran since its last promotion) a job that waited
    // one round after running one goes back to the first queue: X at 200, A at 300, X at
    // 400, ..., A at 1900 (19 promotions): they alternate, A is done at 2000 and X, alone
    // from then, at 6000.
    let jobs = vec![job(0, 0.0, 5000.0), job(1, 0.0, 1000.0)];
    let cfg = EngineConfig {
        round_s: 100.0,
        restart_s: 0.0,
        checkpoint_s: 0.0,
        seed: 0,
    };
    let run = |knob: f64| {
        let mut las = Las::default();
        las.thresholds = vec![100.0];
        las.promote_knob = knob;
        let (r, _) = run_policy(&jobs, &one_gpu(), &mut las, &cfg, &mut |_| {}).unwrap();
        let done: Vec<f64> = r.states.iter().map(|s| s.finished_at.unwrap()).collect();
        (done, las.promotions)
    };
    assert_eq!(run(f64::INFINITY), (vec![5100.0, 6000.0], 0));
    assert_eq!(run(1.0), (vec![6000.0, 2000.0], 19));
}

#[test]
fn max_sum_throughput_puts_each_job_where_the_sum_is_largest() {
    // One k80 and one v100. A: 1000 steps, 1 step/s on k80, 4 on v100; B: 1000 steps, 2 on
    // k80, 3 on v100. Total throughput is largest with A on v100 and B on k80 (4 + 2 = 6,
    // against 1 + 3 = 4): A is done at 250 s (100 s rounds, no restarts). Then the v100
    // idles, and Gavel's round mechanism gives GPUs left over to jobs without allocation
    // there: B moves to it at 300 with 600 steps done and does the 400 left at 3 steps/s:
    // done at 433.3 s, after one migration.
    let per = |k80: f64, v100: f64| {
        let mut m = std::collections::BTreeMap::new();
        m.insert("k80".to_string(), k80);
        m.insert("v100".to_string(), v100);
        Throughput::PerType(m)
    };
    let mut a = job(0, 0.0, 1000.0);
    a.throughput = per(1.0, 4.0);
    let mut b = job(1, 0.0, 1000.0);
    b.throughput = per(2.0, 3.0);
    let c = ClusterSpec::parse_flag("k80:1,v100:1", 1)
        .unwrap()
        .build()
        .unwrap();
    let cfg = EngineConfig {
        round_s: 100.0,
        restart_s: 0.0,
        checkpoint_s: 0.0,
        seed: 0,
    };
    let mut p = PolicyKind::MaxSumThroughput.build(0);
    let (r, m) = run_policy(&[a, b], &c, p.as_mut(), &cfg, &mut |_| {}).unwrap();
    let done: Vec<f64> = r.states.iter().map(|s| s.finished_at.unwrap()).collect();
    assert_eq!(done[0], 250.0);
    assert!((done[1] - 433.333_333).abs() < 1e-3, "{done:?}");
    assert_eq!((m.preemptions, m.migrations), (0, 1));
    assert_eq!(m.policy, "max_sum_throughput_perf");
}

#[test]
fn a_job_restart_cost_replaces_the_engines_and_first_starts_pay_start_s() {
    // One GPU, 100 s rounds. A (1000 s, start cost 50 s) runs from 0: done at 1050.
    let mut a = job(0, 0.0, 1000.0);
    a.start_s = 50.0;
    let (r, _) = run_policy(&[a], &one_gpu(), &mut Sjf, &cfg(100.0), &mut |_| {}).unwrap();
    assert_eq!(r.states[0].finished_at, Some(1050.0));
    // The LAS preemption above, with A's own restart cost of 250 s (longer than a round):
    // A restarts at 4200 and pays 4200..4450 across three rounds, then has 6400 s left:
    // done at 10850 (not 10630 with the engine's 30 s).
    let mut a = job(0, 0.0, 10_000.0);
    a.restart_s = Some(250.0);
    let jobs = vec![a, job(1, 3650.0, 500.0)];
    let (r, m) = run_policy(
        &jobs,
        &one_gpu(),
        &mut Las::default(),
        &cfg(100.0),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(r.states[1].finished_at, Some(4200.0));
    assert!(
        (r.states[0].finished_at.unwrap() - 10_850.0).abs() < 1e-6,
        "{:?}",
        r.states[0].finished_at
    );
    assert_eq!((m.preemptions, m.restarts), (1, 1));
}

#[test]
fn corral_a_job_no_cluster_could_hold_is_reported_unschedulable_not_refused_midway() {
    // Two GPUs for one job on a one-GPU cluster: the engine reports it unschedulable before
    // it arrives, as for every policy, so the plane (which refuses what never fits where
    // nodes are fixed) never sees it; the other job runs as if it were alone.
    use corral_sim::corral_policy::CorralPolicy;
    let mut wide = job(1, 0.0, 100.0);
    wide.gpus = 2;
    let jobs = vec![job(0, 0.0, 500.0), wide];
    let mut p = CorralPolicy::default();
    let (r, m) = run_policy(&jobs, &one_gpu(), &mut p, &cfg(100.0), &mut |_| {}).unwrap();
    assert_eq!(m.jobs_unschedulable, 1);
    assert!(r.states[1].finished_at.is_none());
    assert!((r.states[0].finished_at.unwrap() - 500.0).abs() < 1e-6);
    assert!(p.rejected.is_empty(), "{:?}", p.rejected);
}

#[test]
fn corral_elastic_runs_a_job_smaller_beside_another_and_grows_it_back() {
    // A: 4 GPUs, 4000 steps at 1 step/s per GPU (elastic 1..4); B: 2 GPUs, 200 s, both at
    // t=0 on one 4-GPU node. Rigid: A runs first; at 900 s it has 3600 GPU-s, the first
    // least-attained-service level, and B (none) preempts it: B 900..1100, A restarts
    // (30 s) and ends at 1230 -> average 1165 s.
    // Elastic: A is admitted at 1 GPU and grows to the 2 B leaves; B runs 0..200; then A
    // grows to 4 (a restart: 30 s). A has 400 steps by 200 s, 3600 left at 4/s: ~1130 s.
    let cluster = ClusterSpec::parse_flag("v100:4", 4)
        .unwrap()
        .build()
        .unwrap();
    let mut a = job(0, 0.0, 4000.0);
    a.gpus = 4;
    a.throughput = Throughput::Uniform(4.0);
    a.elastic = Some(corral_sim::job::Elastic {
        min: 1,
        max: 4,
        speeds: (1..=4)
            .map(|g| std::collections::BTreeMap::from([("v100".to_string(), f64::from(g))]))
            .collect(),
    });
    let mut b = job(1, 0.0, 200.0);
    b.gpus = 2;
    let jobs = vec![a, b];
    let cfg = EngineConfig {
        checkpoint_s: 0.0,
        ..cfg(10.0)
    };
    let run = |kind: PolicyKind| {
        let mut p = kind.build(0);
        run_policy(&jobs, &cluster, p.as_mut(), &cfg, &mut |_| {})
            .unwrap()
            .1
    };
    let rigid = run(PolicyKind::Corral);
    assert!(
        (rigid.avg_jct_s - 1165.0).abs() < 1e-6,
        "{}",
        rigid.avg_jct_s
    );
    let elastic = run(PolicyKind::CorralElastic);
    assert_eq!(elastic.jobs_completed, 2);
    assert!(
        (elastic.avg_jct_s - 665.0).abs() <= 20.0,
        "B at 200 s, A near 1130 s: {}",
        elastic.avg_jct_s
    );
}
