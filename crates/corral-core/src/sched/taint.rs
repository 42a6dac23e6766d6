//! Node taints and job tolerations, matched by Kubernetes' rules (`v1.Toleration.
//! ToleratesTaint`), in one place for every shell: a shell converts its platform's objects
//! into these types and never matches them itself.
//!
//! - A toleration with an empty `effect` matches every effect; otherwise the effects must
//!   be equal.
//! - A toleration with an empty `key` matches every key (with `Exists`: every taint);
//!   otherwise the keys must be equal.
//! - `Exists` matches any value; `Equal` matches the taint's value exactly (an absent value
//!   is the empty value).
//! - Only `NoSchedule` and `NoExecute` taints keep new pods off a node; `PreferNoSchedule`
//!   only says where not to prefer, so it never blocks.
//! - A job's replicas of several roles (each with its own pod template) land on a node only
//!   when every role tolerates every taint of the node that blocks: the job's tolerations
//!   are the intersection over its roles ([`common_tolerations`]).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// What a taint does to pods that do not tolerate it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TaintEffect {
    /// New pods do not land on the node.
    NoSchedule,
    /// The scheduler avoids the node when it can; never a reason to keep a pod off.
    PreferNoSchedule,
    /// New pods do not land on the node, and running ones are evicted.
    NoExecute,
}

impl TaintEffect {
    /// Whether a taint of this effect keeps a pod that does not tolerate it off the node.
    pub fn keeps_pods_off(self) -> bool {
        matches!(self, TaintEffect::NoSchedule | TaintEffect::NoExecute)
    }

    /// Kubernetes' spelling (`NoSchedule`, `PreferNoSchedule`, `NoExecute`), or `None`.
    pub fn parse(s: &str) -> Option<TaintEffect> {
        match s {
            "NoSchedule" => Some(TaintEffect::NoSchedule),
            "PreferNoSchedule" => Some(TaintEffect::PreferNoSchedule),
            "NoExecute" => Some(TaintEffect::NoExecute),
            _ => None,
        }
    }
}

impl fmt::Display for TaintEffect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        })
    }
}

/// A node's taint: `key[=value]:effect`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Taint {
    pub key: String,
    /// Empty when the taint has no value.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    pub effect: TaintEffect,
}

impl Taint {
    pub fn new(key: impl Into<String>, value: impl Into<String>, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect,
        }
    }

    /// `key=value:Effect` or `key:Effect` (kubectl's spelling), or `None`.
    pub fn parse(s: &str) -> Option<Taint> {
        let (kv, effect) = s.rsplit_once(':')?;
        let effect = TaintEffect::parse(effect)?;
        let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
        (!key.is_empty()).then(|| Taint::new(key, value, effect))
    }

    /// Whether the taint keeps pods that do not tolerate it off its node.
    pub fn keeps_pods_off(&self) -> bool {
        self.effect.keeps_pods_off()
    }
}

impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect)
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect)
        }
    }
}

/// How a toleration compares values.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum TolerationOperator {
    /// Any value (and, with an empty key, any taint).
    Exists,
    /// The taint's value, exactly (Kubernetes' default).
    #[default]
    Equal,
}

/// A pod's toleration of taints.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Toleration {
    /// Empty: every key.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    #[serde(default)]
    pub operator: TolerationOperator,
    /// Compared with `Equal` only.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// `None`: every effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    /// `key` with any value, for `effect` (`None`: every effect).
    pub fn exists(key: impl Into<String>, effect: Option<TaintEffect>) -> Toleration {
        Toleration {
            key: key.into(),
            operator: TolerationOperator::Exists,
            value: String::new(),
            effect,
        }
    }

    /// `key=value`, for `effect` (`None`: every effect).
    pub fn equal(
        key: impl Into<String>,
        value: impl Into<String>,
        effect: Option<TaintEffect>,
    ) -> Toleration {
        Toleration {
            key: key.into(),
            operator: TolerationOperator::Equal,
            value: value.into(),
            effect,
        }
    }

    /// Exactly this taint (its key, value and effect).
    pub fn of(taint: &Taint) -> Toleration {
        Toleration::equal(taint.key.clone(), taint.value.clone(), Some(taint.effect))
    }

    /// Kubernetes' `ToleratesTaint`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value == taint.value,
        }
    }

    /// The toleration that tolerates exactly the taints both tolerate, if any: what one
    /// toleration matches is a box (key: any or one; value: any or one; effect: any or
    /// one), and two boxes meet in a box.
    fn meet(&self, other: &Toleration) -> Option<Toleration> {
        fn one<'a>(a: Option<&'a str>, b: Option<&'a str>) -> Option<Option<&'a str>> {
            match (a, b) {
                (None, x) | (x, None) => Some(x),
                (Some(x), Some(y)) => (x == y).then_some(Some(x)),
            }
        }
        fn key(t: &Toleration) -> Option<&str> {
            (!t.key.is_empty()).then_some(t.key.as_str())
        }
        fn value(t: &Toleration) -> Option<&str> {
            (t.operator == TolerationOperator::Equal).then_some(t.value.as_str())
        }
        let key = one(key(self), key(other))?;
        let value = one(value(self), value(other))?;
        let effect = match (self.effect, other.effect) {
            (None, e) | (e, None) => e,
            (Some(a), Some(b)) => (a == b).then_some(Some(a))?,
        };
        Some(Toleration {
            key: key.unwrap_or("").to_string(),
            operator: if value.is_some() {
                TolerationOperator::Equal
            } else {
                TolerationOperator::Exists
            },
            value: value.unwrap_or("").to_string(),
            effect,
        })
    }

    /// Whether every taint `other` tolerates, this one tolerates too.
    fn covers(&self, other: &Toleration) -> bool {
        self.meet(other).as_ref() == Some(other)
    }
}

/// Whether `tolerations` let a pod onto a node with `taints`: every taint that keeps pods
/// off is tolerated by one of them.
pub fn tolerates_all(tolerations: &[Toleration], taints: &[Taint]) -> bool {
    taints
        .iter()
        .all(|t| !t.keeps_pods_off() || tolerations.iter().any(|tol| tol.tolerates(t)))
}

/// The first taint of `taints` that keeps a pod with `tolerations` off the node.
pub fn first_untolerated<'a>(tolerations: &[Toleration], taints: &'a [Taint]) -> Option<&'a Taint> {
    taints
        .iter()
        .find(|t| t.keeps_pods_off() && !tolerations.iter().any(|tol| tol.tolerates(t)))
}

/// The tolerations of a job's pod templates by role name (a role not listed tolerates
/// nothing), as a shell reads them.
pub type JobTolerations = BTreeMap<String, Vec<Toleration>>;

/// Tolerations that tolerate exactly the taints every one of `roles` tolerates (a role
/// missing from `by_role` tolerates nothing): the job's tolerations, since its replicas of
/// every role must be able to land on the nodes the scheduler picks for the job.
pub fn common_tolerations<'a>(
    by_role: &JobTolerations,
    roles: impl IntoIterator<Item = &'a str>,
) -> Vec<Toleration> {
    let mut acc: Option<Vec<Toleration>> = None;
    for role in roles {
        let mine = by_role.get(role).map(Vec::as_slice).unwrap_or(&[]);
        let next = match acc {
            None => mine.to_vec(),
            Some(prev) => prev
                .iter()
                .flat_map(|a| mine.iter().filter_map(move |b| a.meet(b)))
                .collect(),
        };
        let next = minimal(next);
        let done = next.is_empty();
        acc = Some(next);
        if done {
            break;
        }
    }
    acc.unwrap_or_default()
}

/// Sorted, without duplicates and without tolerations another one covers.
fn minimal(mut list: Vec<Toleration>) -> Vec<Toleration> {
    list.sort();
    list.dedup();
    let keep: Vec<bool> = (0..list.len())
        .map(|i| {
            !list
                .iter()
                .enumerate()
                .any(|(j, other)| j != i && other.covers(&list[i]))
        })
        .collect();
    list.into_iter()
        .zip(keep)
        .filter_map(|(t, k)| k.then_some(t))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaintEffect::{NoExecute, NoSchedule, PreferNoSchedule};

    fn taint(key: &str, value: &str, effect: TaintEffect) -> Taint {
        Taint::new(key, value, effect)
    }

    /// Kubernetes' rules, one row each: (toleration, taint, tolerated).
    #[test]
    fn toleration_matching_follows_kubernetes() {
        let gpu = taint("nvidia.com/gpu", "present", NoSchedule);
        let rows: Vec<(Toleration, &Taint, bool)> = vec![
            // Empty key with Exists tolerates every taint.
            (Toleration::exists("", None), &gpu, true),
            // ... but only of its effect when it names one.
            (Toleration::exists("", Some(NoExecute)), &gpu, false),
            (Toleration::exists("", Some(NoSchedule)), &gpu, true),
            // Exists: any value of the key.
            (Toleration::exists("nvidia.com/gpu", None), &gpu, true),
            (Toleration::exists("other", None), &gpu, false),
            // Equal compares values; an empty effect matches all effects.
            (
                Toleration::equal("nvidia.com/gpu", "present", None),
                &gpu,
                true,
            ),
            (
                Toleration::equal("nvidia.com/gpu", "absent", None),
                &gpu,
                false,
            ),
            (Toleration::equal("nvidia.com/gpu", "", None), &gpu, false),
            (
                Toleration::equal("nvidia.com/gpu", "present", Some(NoSchedule)),
                &gpu,
                true,
            ),
            (
                Toleration::equal("nvidia.com/gpu", "present", Some(PreferNoSchedule)),
                &gpu,
                false,
            ),
            (Toleration::equal("other", "present", None), &gpu, false),
        ];
        for (tol, t, want) in rows {
            assert_eq!(tol.tolerates(t), want, "{tol:?} vs {t}");
        }
        // A taint without value is matched by Equal with the empty value.
        let bare = taint("dedicated", "", NoExecute);
        assert!(Toleration::equal("dedicated", "", None).tolerates(&bare));
        assert!(!Toleration::equal("dedicated", "x", None).tolerates(&bare));
    }

    #[test]
    fn only_no_schedule_and_no_execute_keep_pods_off() {
        let soft = taint("spot", "true", PreferNoSchedule);
        let hard = taint("spot", "true", NoSchedule);
        let evict = taint("spot", "true", NoExecute);
        assert!(tolerates_all(&[], std::slice::from_ref(&soft)));
        assert!(!tolerates_all(&[], std::slice::from_ref(&hard)));
        assert!(!tolerates_all(&[], std::slice::from_ref(&evict)));
        assert_eq!(
            first_untolerated(&[], &[soft.clone(), evict.clone()]),
            Some(&evict)
        );
        let tol = [Toleration::exists("spot", None)];
        assert!(tolerates_all(&tol, &[soft, hard, evict]));
        assert!(tolerates_all(&[], &[]));
    }

    #[test]
    fn spelling_round_trips() {
        for s in ["a=b:NoSchedule", "a:NoExecute", "k.io/x=y:PreferNoSchedule"] {
            assert_eq!(Taint::parse(s).map(|t| t.to_string()).as_deref(), Some(s));
        }
        assert_eq!(Taint::parse("a=b:Sometimes"), None);
        assert_eq!(Taint::parse("spot"), None);
        assert_eq!(Taint::parse(":NoSchedule"), None);
    }

    #[test]
    fn roles_intersect() {
        let mut by_role = JobTolerations::new();
        by_role.insert("chief".into(), vec![Toleration::exists("", None)]);
        by_role.insert(
            "worker".into(),
            vec![Toleration::equal("gpu", "a", Some(NoSchedule))],
        );
        let common = common_tolerations(&by_role, ["chief", "worker"]);
        assert_eq!(common, [Toleration::equal("gpu", "a", Some(NoSchedule))]);
        // A role without tolerations tolerates nothing, and so does the job.
        assert!(common_tolerations(&by_role, ["chief", "ps"]).is_empty());
        // No roles: nothing.
        assert!(common_tolerations(&by_role, []).is_empty());
        assert_eq!(
            common_tolerations(&by_role, ["chief"]),
            [Toleration::exists("", None)]
        );
    }

    /// A small deterministic generator (no dependency): xorshift.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
            &xs[(self.next() % xs.len() as u64) as usize]
        }
    }

    fn toleration(r: &mut Rng) -> Toleration {
        let effects = [
            None,
            Some(NoSchedule),
            Some(PreferNoSchedule),
            Some(NoExecute),
        ];
        Toleration {
            key: r.pick(&["", "a", "b"]).to_string(),
            operator: *r.pick(&[TolerationOperator::Exists, TolerationOperator::Equal]),
            value: r.pick(&["", "x", "y"]).to_string(),
            effect: *r.pick(&effects),
        }
    }

    fn any_taint(r: &mut Rng) -> Taint {
        Taint::new(
            *r.pick(&["a", "b", "c"]),
            *r.pick(&["", "x", "y"]),
            *r.pick(&[NoSchedule, PreferNoSchedule, NoExecute]),
        )
    }

    /// Property: the job's common tolerations tolerate a taint exactly when every role's
    /// own tolerations do (the intersection is exact), over random roles and taints.
    #[test]
    fn common_tolerations_are_exactly_the_intersection() {
        let mut r = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..2000 {
            let roles = ["chief", "worker", "ps"];
            let n_roles = 1 + (r.next() % 3) as usize;
            let mut by_role = JobTolerations::new();
            for role in &roles[..n_roles] {
                // Sometimes a role lists nothing at all.
                if r.next().is_multiple_of(8) {
                    continue;
                }
                let n = (r.next() % 4) as usize;
                by_role.insert(
                    role.to_string(),
                    (0..n).map(|_| toleration(&mut r)).collect(),
                );
            }
            let common = common_tolerations(&by_role, roles[..n_roles].iter().copied());
            for _ in 0..8 {
                let t = any_taint(&mut r);
                let every_role = roles[..n_roles].iter().all(|role| {
                    by_role
                        .get(*role)
                        .is_some_and(|tols| tols.iter().any(|tol| tol.tolerates(&t)))
                });
                let job = common.iter().any(|tol| tol.tolerates(&t));
                assert_eq!(job, every_role, "{by_role:?} -> {common:?} vs {t}");
            }
        }
    }
}
