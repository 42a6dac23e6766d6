//! The conformance story with real processes, and the platform's failures the story leaves
//! out because only the embedded shell has them (ports running out).

use super::*;

fn state_in(c: &Cluster, ns: &str, name: &str) -> Option<JobState> {
    Some(c.describe(ns, name).ok()??.summary.state)
}

pub fn the_conformance_story_with_real_processes() {
    use corral_core::control::conformance::{self, JobOutcome, ScenarioStep};
    let classes: String = conformance::priority_classes()
        .iter()
        .map(|c| format!("---\n{}", serde_json::to_string(c).expect("class")))
        .collect::<Vec<_>>()
        .join("\n");
    let extra = format!(
        "node: {{gpus: {}}}\npreemptionProtectionSeconds: 0\n{classes}\n",
        conformance::NODE_GPUS
    );
    let (mut h, mut c) = Harness::new(WAITS, 32200, &extra);
    let marks = h.path("marks");
    std::fs::create_dir_all(&marks).expect("mkdir");
    let script = format!(
        "while true; do [ -e {m}/finish-$CORRAL_JOB ] && exit 0; \
         [ -e {m}/fail-$CORRAL_REPLICA-$CORRAL_INCARNATION ] && exit 1; sleep 0.05; done",
        m = marks.display()
    );
    // A job that cannot start runs a program that does not exist (the shim exits 127); one
    // slow to stop ignores SIGTERM and ends only when SIGKILLed after the grace period.
    let command_of = |name: &str| -> Vec<String> {
        if conformance::cannot_start(name) {
            return vec!["/nonexistent/corral-conformance-train".to_string()];
        }
        let script = if conformance::slow_to_stop(name) {
            format!("trap '' TERM; {script}")
        } else {
            script.clone()
        };
        vec!["/bin/sh".to_string(), "-c".to_string(), script]
    };
    let ns = conformance::NAMESPACE;
    let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
    let mut submitted: Vec<&str> = Vec::new();
    let mut trace = Vec::new();
    for step in conformance::steps() {
        match &step {
            ScenarioStep::Submit(names) => {
                let items: Vec<serde_json::Value> = names
                    .iter()
                    .map(|n| {
                        let job = conformance::job(n, &command_of(n)).expect("job");
                        serde_json::to_value(&job).expect("json")
                    })
                    .collect();
                let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
                c.submit(&list.to_string(), ns, h.now).expect("submit");
                submitted.extend(names.iter().copied());
            }
            ScenarioStep::FailWorker(name, index) => {
                let d = c.describe(ns, name).expect("d").expect("job");
                let r = d
                    .replicas
                    .iter()
                    .find(|r| r.index == *index && r.phase == "Running")
                    .expect("a running worker");
                let mark = marks.join(format!("fail-{name}-worker-{index}-{}", r.incarnation));
                std::fs::write(mark, "").expect("mark");
            }
            ScenarioStep::Finish(name) => {
                std::fs::write(marks.join(format!("finish-{name}")), "").expect("mark");
            }
            ScenarioStep::Suspend(name) => {
                c.suspend(ns, name, h.now).expect("suspend");
            }
            ScenarioStep::Resume(name) => {
                c.resume(ns, name, h.now).expect("resume");
            }
            ScenarioStep::Delete(name) => {
                c.delete(ns, name, h.now).expect("delete");
            }
            ScenarioStep::GpuTurnsUnhealthy(name) => {
                let d = c.describe(ns, name).expect("d").expect("job");
                let gpu = d
                    .replicas
                    .iter()
                    .find(|r| r.index == 0 && r.phase == "Running")
                    .and_then(|r| r.gpus.first().copied())
                    .unwrap_or_else(|| panic!("worker-0 runs on a GPU: {:?}", d.replicas));
                // Where NVML is present it is read every few seconds and would say
                // otherwise; this machine has none (the node's GPUs are `node.gpus`).
                c.observe_unhealthy_gpus([gpu].into());
            }
            ScenarioStep::GpusHeal => c.observe_unhealthy_gpus(Default::default()),
        }
        // Settled: nothing happened and nothing is due for a few passes in a row, over at
        // least a second (a replica told to finish may take a while on a loaded machine).
        let deadline = Instant::now() + WAITS.deadline;
        let mut quiet = 0;
        let mut quiet_since = Instant::now();
        while quiet < 8 || quiet_since.elapsed() < Duration::from_secs(1) {
            let r = h.tick(&mut c);
            let busy = !(r.started.is_empty()
                && r.stopped.is_empty()
                && r.admitted.is_empty()
                && r.preempted.is_empty()
                && r.finished.is_empty()
                && r.deleted.is_empty())
                || r.next_tick_in.is_some()
                // A victim slow to exit: nothing happens until its grace period is over.
                || submitted.iter().any(|n| {
                    matches!(
                        state_in(&c, ns, n),
                        Some(JobState::Preempting | JobState::Admitted | JobState::Deleting)
                    )
                });
            if busy {
                quiet = 0;
                quiet_since = Instant::now();
            } else {
                quiet += 1;
            }
            assert!(Instant::now() < deadline, "step {step:?} did not settle");
            // No GPU is ever given to a replica while a live process of another holds it
            // (a preempted replica slow to exit keeps its GPUs until it has gone).
            let mut holders: std::collections::BTreeMap<u32, String> = Default::default();
            for name in &submitted {
                let Some(d) = c.describe(ns, name).expect("describe") else {
                    continue;
                };
                for r in d.replicas.iter().filter(|r| r.pid.is_some_and(alive)) {
                    for g in &r.gpus {
                        if let Some(other) = holders.insert(*g, r.name.clone()) {
                            assert!(
                                other == r.name,
                                "GPU {g} held by {other} and {} at once after {step:?}",
                                r.name
                            );
                        }
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut outcome = std::collections::BTreeMap::new();
        for name in &submitted {
            let d = c.describe(ns, name).expect("describe");
            let (state, admitted, events) = match &d {
                Some(d) => (
                    Some(d.summary.state),
                    d.admission.is_some(),
                    d.events.clone(),
                ),
                None => (None, false, Vec::new()),
            };
            let from = seen.get(*name).copied().unwrap_or(0).min(events.len());
            let recent = JobOutcome::new(
                state,
                admitted,
                events[from..].iter().map(|e| e.reason.as_str()),
            );
            seen.insert(name.to_string(), events.len());
            outcome.insert(name.to_string(), recent);
        }
        trace.push(outcome);
    }
    let differences = conformance::differences(&trace);
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

/// Ports run out (other programs on the machine hold all but two of the cluster's range):
/// a replica that cannot get a port of its own is a start that cannot be made, with the
/// same outcome as any other (`ControlPlane::start_failed`): the job backs off with the
/// reason, gives its admission back, and starts once a port is free again.
pub fn a_replica_without_a_free_port_backs_off_and_starts_once_one_is_free() {
    // Below Linux's ephemeral range (32768-60999): an outgoing connection of any program
    // may hold a port there, and this test needs 48 of them free (a clean CI run failed so).
    const BASE: u16 = 30750;
    let (mut h, mut c) = Harness::new(WAITS, BASE, "");
    let held: Vec<std::net::TcpListener> = (BASE + 2..=BASE + 49)
        .filter_map(|p| std::net::TcpListener::bind(("0.0.0.0", p)).ok())
        .collect();
    assert_eq!(held.len(), 48, "the test holds 48 of the 50 ports");
    let mark = h.path("finish");
    let wait = format!("while [ ! -e {} ]; do sleep 0.05; done", mark.display());
    c.submit(&job("first", 2, "", &wait), "default", h.now)
        .expect("submit first");
    h.until(&mut c, "first runs", |c| {
        state(c, "first") == Some(JobState::Running)
    });
    c.submit(&job("second", 1, "", "true"), "default", h.now)
        .expect("submit second");
    h.until(&mut c, "second backs off", |c| {
        state(c, "second") == Some(JobState::BackOff)
    });
    let d = c.describe("default", "second").expect("d").expect("job");
    assert!(d.admission.is_none(), "the admission was given back");
    let backoff: Vec<_> = d
        .events
        .iter()
        .filter(|e| e.reason == "StartBackOff")
        .collect();
    assert!(
        backoff
            .first()
            .is_some_and(|e| e.message.contains("no port of its own is free")),
        "{:?}",
        d.events
    );
    // first ends and gives its ports back: second starts after its back-off (10 s).
    std::fs::write(&mark, "").expect("mark");
    h.until(&mut c, "second succeeds", |c| {
        state(c, "second") == Some(JobState::Succeeded)
    });
    drop(held);
}
