//! Revisions and the traffic split over random histories (updates, canary percents,
//! promotions, rollbacks, load and replicas becoming ready at random): the router's shares
//! always sum to 100; a revision that gets no traffic and has nothing under way is scaled
//! away; while requests flow, a ready replica that gets them is never all removed.

use std::collections::BTreeMap;

use corral_api::ServedModelSpec;
use corral_api::served_model::ServedModel;
use corral_core::control::serving::{
    LoadSample, ModelPlan, ModelView, ReplicaAction, ReplicaView, RevisionView, Serving,
};
use jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;

fn spec(min: u32, max: u32) -> ServedModelSpec {
    let m: ServedModel = serde_saphyr::from_str(&format!(
        "apiVersion: corral.dev/v1alpha1
kind: ServedModel
metadata: {{name: m}}
spec:
  template: {{command: [python3, server.py]}}
  autoscaling: {{minReplicas: {min}, maxReplicas: {max}, targetInFlight: 2, stableWindowSeconds: 6, panicWindowSeconds: 2, scaleToZeroAfterSeconds: 4}}
"
    ))
    .expect("test model");
    m.spec
}

/// What happens before one pass.
#[derive(Clone, Debug)]
enum Event {
    Nothing,
    /// A new revision (the template changed).
    Update,
    /// `corral serve canary|promote|rollback`.
    Canary(Option<u32>),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => Just(Event::Nothing),
        1 => Just(Event::Update),
        1 => prop_oneof![Just(None), Just(Some(0)), (1u32..100).prop_map(Some)].prop_map(Event::Canary),
    ]
}

/// A simulated shell: revisions with their replicas, a router that counts what it sends to
/// each revision, replicas becoming ready when the dice say so.
struct World {
    serving: Serving,
    spec: ServedModelSpec,
    latest: u32,
    stable: u32,
    /// Revision number -> replicas (index, ready).
    replicas: BTreeMap<u32, Vec<(u32, bool)>>,
    /// Revisions kept (the store's), until the core retires them.
    kept: std::collections::BTreeSet<u32>,
    /// The router's last shares, by revision number.
    traffic: BTreeMap<u32, u32>,
    now: Timestamp,
}

fn name(n: u32) -> String {
    format!("m-{n:05}")
}

impl World {
    fn new(min: u32, max: u32) -> Self {
        World {
            serving: Serving::new(),
            spec: spec(min, max),
            latest: 1,
            stable: 1,
            replicas: BTreeMap::new(),
            kept: std::collections::BTreeSet::from([1]),
            traffic: BTreeMap::from([(1, 100)]),
            now: Timestamp::from_second(1_800_000_000).expect("valid"),
        }
    }

    fn views(&self, in_flight: u32) -> Vec<RevisionView> {
        let none = Vec::new();
        let mut numbers = self.kept.clone();
        numbers.extend(self.replicas.keys());
        numbers
            .iter()
            .map(|n| (n, self.replicas.get(n).unwrap_or(&none)))
            .map(|(n, rs)| RevisionView {
                name: name(*n),
                replicas: rs
                    .iter()
                    .map(|&(index, ready)| ReplicaView {
                        index,
                        ready,
                        finished: false,
                        deleting: false,
                        in_flight: 0,
                    })
                    .collect(),
                // What the router sent it, if it has anyone to send it to.
                in_flight: if rs.iter().any(|r| r.1) {
                    (in_flight * self.traffic.get(n).copied().unwrap_or(0)).div_ceil(100)
                } else {
                    0
                },
            })
            .collect()
    }

    fn pass(&mut self, in_flight: u32, readies: u8) -> ModelPlan {
        self.now += SignedDuration::from_millis(500);
        for (i, r) in self
            .replicas
            .values_mut()
            .flat_map(|v| v.iter_mut())
            .enumerate()
        {
            r.1 |= readies & (1 << (i % 8)) != 0;
        }
        self.serving.observe_load(
            "ns/m",
            LoadSample {
                at: self.now,
                in_flight,
                arrived: u64::from(in_flight),
            },
        );
        let views = self.views(in_flight);
        let (latest, stable) = (name(self.latest), name(self.stable));
        let plan = self.serving.decide(
            "ns/m",
            ModelView {
                spec: &self.spec,
                latest: &latest,
                stable: &stable,
                revisions: &views,
            },
            self.now,
        );
        if plan.promoted {
            self.stable = self.latest;
        }
        self.traffic.clear();
        for r in &plan.revisions {
            let n: u32 = r.name[2..].parse().expect("a revision name");
            self.traffic.insert(n, r.share.traffic);
            let rs = self.replicas.entry(n).or_default();
            for a in &r.actions {
                match *a {
                    ReplicaAction::Create(i) => rs.push((i, false)),
                    // Out of rotation: it stays until it is removed.
                    ReplicaAction::Drain(i) => {
                        if let Some(x) = rs.iter_mut().find(|x| x.0 == i) {
                            x.1 = false;
                        }
                    }
                    ReplicaAction::Remove(i) => rs.retain(|x| x.0 != i),
                }
            }
        }
        self.replicas.retain(|_, rs| !rs.is_empty());
        for r in &plan.retired {
            self.kept.remove(&r[2..].parse().expect("a revision name"));
        }
        plan
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn the_split_holds_over_any_history(
        min in 0u32..3,
        span in 1u32..4,
        steps in prop::collection::vec((event(), 0u32..12, any::<u8>()), 1..120),
    ) {
        let mut w = World::new(min, min.max(1) + span - 1);
        let mut drained_before: Vec<String> = Vec::new();
        for (event, in_flight, readies) in steps {
            match event {
                Event::Nothing => {}
                Event::Update => {
                    w.latest += 1;
                    w.kept.insert(w.latest);
                }
                Event::Canary(p) => w.spec.canary_traffic_percent = p,
            }
            let routed_ready_before = [w.latest, w.stable].iter().any(|n| {
                w.replicas.get(n).is_some_and(|rs| rs.iter().any(|r| r.1))
            });
            let views = w.views(in_flight);
            let plan = w.pass(in_flight, readies);

            // Shares sum to 100, target and traffic alike.
            let traffic: u32 = plan.revisions.iter().map(|r| r.share.traffic).sum();
            prop_assert_eq!(traffic, 100, "{:?}", plan.revisions);

            // A revision that drained in the last pass and has nothing under way goes.
            for r in &plan.revisions {
                let idle = views.iter().find(|v| v.name == r.name).is_none_or(|v| v.in_flight == 0);
                if r.share.sized_for == 0 && drained_before.contains(&r.name) && idle {
                    prop_assert_eq!(r.desired, 0);
                    prop_assert!(!w.replicas.contains_key(&r.name[2..].parse::<u32>().expect("a revision name")));
                }
            }
            drained_before = plan.revisions.iter().filter(|r| r.share.sized_for == 0).map(|r| r.name.clone()).collect();

            // Requests flowing to a ready revision keep a ready replica that gets them.
            if in_flight > 0 && routed_ready_before {
                let kept = plan.revisions.iter().any(|r| {
                    r.share.traffic > 0
                        && w.replicas.get(&r.name[2..].parse::<u32>().expect("a revision name"))
                            .is_some_and(|rs| rs.iter().any(|x| x.1))
                });
                prop_assert!(kept, "no ready replica gets the requests: {:?}", plan.revisions);
            }
        }
    }
}

#[test]
fn a_rollout_serves_from_the_old_revision_until_the_new_is_ready_then_drains_it() {
    let mut w = World::new(1, 1);
    // Revision 1 up and ready.
    w.pass(1, 0);
    let plan = w.pass(1, 0xff);
    assert_eq!(plan.ready, 1);
    // An update: revision 2 gets a replica, revision 1 keeps every request.
    w.latest = 2;
    w.kept.insert(2);
    let plan = w.pass(1, 0);
    let share = |p: &ModelPlan, n: &str| {
        p.revisions
            .iter()
            .find(|r| r.name == n)
            .map(|r| r.share.traffic)
    };
    assert_eq!(share(&plan, "m-00001"), Some(100));
    assert_eq!(share(&plan, "m-00002"), Some(0));
    assert!(w.replicas.contains_key(&2));
    // Revision 2 ready: promoted, every request goes to it; revision 1 drains.
    let plan = w.pass(1, 0xff);
    assert!(plan.promoted);
    assert_eq!(plan.stable, "m-00002");
    assert_eq!(share(&plan, "m-00002"), Some(100));
    assert!(w.replicas.contains_key(&1), "kept for one pass");
    // Nothing under way on revision 1 any more: its replica goes, then the revision.
    w.traffic.insert(1, 0);
    w.pass(1, 0xff);
    assert!(!w.replicas.contains_key(&1));
    let plan = w.pass(1, 0xff);
    assert_eq!(plan.retired, vec!["m-00001".to_string()]);
}

#[test]
fn a_draining_revision_keeps_its_replicas_while_requests_are_under_way() {
    let mut w = World::new(1, 1);
    w.pass(2, 0);
    w.pass(2, 0xff);
    w.latest = 2;
    w.kept.insert(2);
    w.pass(2, 0);
    let plan = w.pass(2, 0xff);
    assert!(plan.promoted);
    // The router still counts requests on revision 1 (sent before it was told).
    w.traffic.insert(1, 100);
    let plan = w.pass(2, 0xff);
    let old = plan
        .revisions
        .iter()
        .find(|r| r.name == "m-00001")
        .expect("still there");
    assert_eq!((old.desired, old.in_flight), (1, 2));
    assert!(old.actions.is_empty());
}

#[test]
fn a_canary_gets_its_share_and_a_rollback_takes_it_away() {
    let mut w = World::new(1, 4);
    w.pass(4, 0xff);
    w.pass(4, 0xff);
    w.spec.canary_traffic_percent = Some(10);
    w.latest = 2;
    w.kept.insert(2);
    w.pass(4, 0);
    let plan = w.pass(4, 0xff);
    assert!(!plan.promoted);
    let shares: Vec<(String, u32)> = plan
        .revisions
        .iter()
        .map(|r| (r.name.clone(), r.share.traffic))
        .collect();
    assert_eq!(
        shares,
        vec![("m-00001".to_string(), 90), ("m-00002".to_string(), 10)]
    );
    // Rollback: 0% to the latest, which drains and goes; the stable keeps everything.
    w.spec.canary_traffic_percent = Some(0);
    w.traffic.insert(2, 0);
    w.pass(4, 0xff);
    w.pass(4, 0xff);
    assert!(!w.replicas.contains_key(&2));
    assert_eq!(w.stable, 1);
}
