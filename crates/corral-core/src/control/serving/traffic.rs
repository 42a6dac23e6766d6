//! Revisions and the traffic split between them, as KServe's canary rollout does it: the
//! latest revision gets `canaryTrafficPercent` of the requests (all of them when the field
//! is left out), the revision last promoted (the stable one) the rest; every other revision
//! gets none and drains.
//!
//! What the router is told (the *traffic*) differs from what the spec asks (the *target*)
//! only while one of the two has no replica ready and the other has: its share goes to the
//! other, so that a rollout or a canary never holds a request that a ready revision could
//! answer. A rollout (the latest at 100%) promotes the latest once it has a replica ready;
//! the old revision then gets no new request and its replicas stop once the requests under
//! way on them have finished.

use corral_api::ServedModel;
use sha2::{Digest, Sha256};

/// What makes a new revision: what the replicas run (template, resources, readiness,
/// queue, priority class) and carry (the model's annotations: its code snapshot's digest).
/// Scaling, limits and the traffic split are the model's, not a revision's.
pub fn revision_hash(model: &ServedModel) -> String {
    let s = &model.spec;
    let doc = serde_json::json!({
        "template": s.template,
        "resources": s.resources,
        "readiness": s.readiness,
        "queue": s.queue,
        "priorityClass": s.priority_class,
        "annotations": model.metadata.annotations,
    });
    format!("sha256:{:x}", Sha256::digest(doc.to_string()))
}

/// Whether `written` (a model as written now) runs what `kept` (a revision's model, as it
/// was pinned) runs, in every shell: the same [`revision_hash`] with the pinned origins set
/// aside, the same `spec.model`, and, where the shell pinned `written` anew, the same
/// origin (the same run, path and content). The embedded cluster pins a model at every
/// submit, so a re-run's new output is a new revision; the operator pins only when
/// `spec.model` changed (a resource has no submit moment, and the run may be gone since)
/// and passes `written` unpinned, so the revision's pin stands.
pub fn same_revision(kept: &ServedModel, written: &ServedModel) -> bool {
    use corral_api::served_model::{MODEL_ORIGIN_ANNOTATION, ModelOrigin};
    let unpinned = |m: &ServedModel| {
        let mut m = m.clone();
        m.metadata.annotations.remove(MODEL_ORIGIN_ANNOTATION);
        revision_hash(&m)
    };
    let pins_agree = match ModelOrigin::of(&written.metadata.annotations) {
        None => true,
        Some(fresh) => ModelOrigin::of(&kept.metadata.annotations)
            .is_some_and(|k| (k.uid, k.path, k.sha256) == (fresh.uid, fresh.path, fresh.sha256)),
    };
    kept.spec.model == written.spec.model && unpinned(kept) == unpinned(written) && pins_agree
}

/// Which of a model's revisions (oldest first, each promoted or not) is the stable one:
/// the newest promoted, or the first when none was (it served alone).
pub fn stable_index(promoted: &[bool]) -> Option<usize> {
    promoted
        .iter()
        .rposition(|p| *p)
        .or(if promoted.is_empty() { None } else { Some(0) })
}

/// One revision's share of the requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Share {
    /// What the spec asks for, in percent.
    pub target: u32,
    /// What the router sends it now, in percent.
    pub traffic: u32,
    /// The share of the model's load its autoscaler sizes it for, in percent (0: not
    /// routed; it drains and goes).
    pub sized_for: u32,
}

/// The split between the latest and the stable revision. `ready_*`: replicas of each in
/// rotation. Returns (latest's share, stable's share); equal names get one 100% share.
/// Traffic shares always sum to 100.
pub fn split(
    canary_percent: Option<u32>,
    same: bool,
    ready_latest: u32,
    ready_stable: u32,
) -> (Share, Share) {
    if same {
        let all = Share {
            target: 100,
            traffic: 100,
            sized_for: 100,
        };
        return (all, all);
    }
    let latest = canary_percent.unwrap_or(100).min(100);
    let stable = 100 - latest;
    // A revision with nothing ready gives its share to the other, if that one has: the
    // stable one stands in for the latest (a rollout, a canary starting), the latest for
    // the stable one only while it is meant to get requests (not after a rollback).
    let traffic_latest = if latest > 0 && ready_latest == 0 && ready_stable > 0 {
        0
    } else if latest > 0 && stable > 0 && ready_stable == 0 && ready_latest > 0 {
        100
    } else {
        latest
    };
    (
        Share {
            target: latest,
            traffic: traffic_latest,
            // Sized for what it is meant to carry, so that it is ready to take it.
            sized_for: latest,
        },
        Share {
            target: stable,
            traffic: 100 - traffic_latest,
            // Sized for what it carries now: during a rollout, everything until the
            // latest is ready.
            sized_for: stable.max(100 - traffic_latest),
        },
    )
}

/// Whether the latest revision becomes the stable one: every request is meant for it and
/// the router sends them all to it (it has a replica ready).
pub fn promotes(canary_percent: Option<u32>, latest: Share) -> bool {
    canary_percent.unwrap_or(100) >= 100 && latest.traffic == 100
}

/// `part` percent of `n`, rounded up (any load on a routed revision counts).
pub fn percent_of(n: u64, part: u32) -> u64 {
    (n * u64::from(part)).div_ceil(100)
}

#[cfg(test)]
mod tests {
    use corral_api::served_model::{MODEL_ORIGIN_ANNOTATION, ModelOrigin};

    fn model(image: &str, min: u32, origin: Option<(&str, &str)>) -> ServedModel {
        let mut m: ServedModel = serde_json::from_value(serde_json::json!({
            "apiVersion": "corral.dev/v1alpha1", "kind": "ServedModel",
            "metadata": {"name": "m", "namespace": "ml"},
            "spec": {"template": {"image": image, "command": ["serve"]},
                     "autoscaling": {"minReplicas": min},
                     "model": {"pipelineRun": "r1", "step": "train", "output": "model"}},
        }))
        .expect("model");
        if let Some((uid, sha256)) = origin {
            let o: ModelOrigin = serde_json::from_value(serde_json::json!({
                "uid": uid, "path": "/a/r1/train/model", "sha256": sha256,
            }))
            .expect("origin");
            m.metadata.annotations.insert(
                MODEL_ORIGIN_ANNOTATION.into(),
                serde_json::to_string(&o).expect("json"),
            );
        }
        m
    }

    #[test]
    fn a_revision_is_what_the_replicas_run_and_what_was_pinned_anew() {
        let kept = model("v1", 1, Some(("u1", "sha256:a")));
        // Scaling is the model's, not a revision's; an unpinned write keeps the pin.
        assert!(same_revision(&kept, &model("v1", 0, None)));
        assert!(!same_revision(&kept, &model("v2", 1, None)));
        // Pinned anew (a submit): the same output is the same revision, a re-run's is not.
        assert!(same_revision(
            &kept,
            &model("v1", 1, Some(("u1", "sha256:a")))
        ));
        assert!(!same_revision(
            &kept,
            &model("v1", 1, Some(("u2", "sha256:a")))
        ));
        assert!(!same_revision(
            &kept,
            &model("v1", 1, Some(("u1", "sha256:b")))
        ));
        let mut other = model("v1", 1, None);
        other.spec.model = None;
        assert!(!same_revision(&kept, &other), "spec.model changed");
    }

    #[test]
    fn the_stable_revision_is_the_newest_promoted_or_the_first() {
        assert_eq!(stable_index(&[]), None);
        assert_eq!(stable_index(&[false, false]), Some(0));
        assert_eq!(stable_index(&[true, false, true, false]), Some(2));
    }

    use super::*;

    #[test]
    fn a_canary_splits_once_both_are_ready() {
        let (l, s) = split(Some(10), false, 1, 2);
        assert_eq!((l.traffic, s.traffic), (10, 90));
        assert_eq!((l.sized_for, s.sized_for), (10, 90));
    }

    #[test]
    fn a_revision_with_nothing_ready_gives_its_share_to_the_other() {
        let (l, s) = split(Some(10), false, 0, 2);
        assert_eq!((l.traffic, s.traffic), (0, 100));
        assert_eq!(l.sized_for, 10, "the canary still gets its replicas");
        let (l, s) = split(Some(10), false, 1, 0);
        assert_eq!((l.traffic, s.traffic), (100, 0));
        // Neither ready (a cold start): as the spec says, each holds its own.
        let (l, s) = split(Some(10), false, 0, 0);
        assert_eq!((l.traffic, s.traffic), (10, 90));
    }

    #[test]
    fn a_rollout_keeps_the_old_revision_until_the_new_is_ready() {
        let (l, s) = split(None, false, 0, 1);
        assert_eq!((l.traffic, s.traffic), (0, 100));
        assert_eq!((l.sized_for, s.sized_for), (100, 100));
        assert!(!promotes(None, l));
        let (l, s) = split(None, false, 1, 1);
        assert_eq!((l.traffic, s.traffic), (100, 0));
        assert_eq!(s.sized_for, 0, "the old revision drains");
        assert!(promotes(None, l));
    }

    #[test]
    fn a_rollback_sends_everything_to_the_stable_revision() {
        let (l, s) = split(Some(0), false, 1, 1);
        assert_eq!((l.traffic, l.sized_for), (0, 0));
        assert_eq!(s.traffic, 100);
        assert!(!promotes(Some(0), l));
        // Even while the stable one has nothing ready (it holds the requests).
        let (l, s) = split(Some(0), false, 1, 0);
        assert_eq!((l.traffic, s.traffic), (0, 100));
    }

    #[test]
    fn the_hash_follows_the_template_not_the_scaling() {
        let text = "apiVersion: corral.dev/v1alpha1\nkind: ServedModel\nmetadata: {name: m}\nspec:\n  template: {command: [python3, a.py]}\n";
        let mut m: ServedModel = serde_saphyr::from_str(text).expect("valid");
        let h = revision_hash(&m);
        m.spec.autoscaling.max_replicas = Some(9);
        m.spec.canary_traffic_percent = Some(10);
        assert_eq!(revision_hash(&m), h);
        m.spec.template.command = vec!["python3".into(), "b.py".into()];
        assert_ne!(revision_hash(&m), h);
        assert!(h.starts_with("sha256:"));
    }
}
