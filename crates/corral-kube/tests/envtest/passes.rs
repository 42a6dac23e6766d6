//! The operator's passes, run in-process with its ServiceAccount's identity: Corral's
//! reconcile and the Kubeflow integration's.

use corral_kube::apply::{Applier, RateLimiter};
use corral_kube::kubeflow::{self, Mode};
use corral_kube::operator::reconcile_once;
use corral_kube::plan::PlanConfig;
use jiff::Timestamp;
use kube::runtime::events::{Recorder, Reporter};

use crate::harness::Env;

pub(crate) struct Operator {
    applier: Applier,
    recorder: Recorder,
}

pub(crate) fn operator(env: &Env) -> Operator {
    let reporter = Reporter {
        controller: "corral".into(),
        instance: Some("envtest".into()),
    };
    Operator {
        applier: Applier::new(
            env.operator.clone(),
            Some(Recorder::new(env.operator.clone(), reporter.clone())),
            RateLimiter::unlimited(),
        ),
        recorder: Recorder::new(env.operator.clone(), reporter),
    }
}

impl Operator {
    pub(crate) fn applier(&self) -> &Applier {
        &self.applier
    }
}

/// One operator pass with the ServiceAccount's identity; every write must succeed.
pub(crate) async fn pass(op: &Operator, now: Timestamp) {
    let (_, report) = reconcile_once(&op.applier, &PlanConfig::default(), now)
        .await
        .expect("the operator's lists are allowed");
    assert!(
        report.errors.is_empty(),
        "apply errors: {:?}",
        report.errors
    );
}

pub(crate) async fn kubeflow_pass(op: &Operator, mode: Mode, now: Timestamp) -> usize {
    let (actions, report) =
        kubeflow::apply::reconcile_once(&op.applier.client, Some(&op.recorder), mode, now)
            .await
            .expect("the integration's lists are allowed");
    assert!(
        report.errors.is_empty(),
        "kubeflow apply errors: {:?}",
        report.errors
    );
    actions.len()
}

/// One operator pass that may report errors (a write the server refuses is the point).
pub(crate) async fn pass_allowing_errors(op: &Operator, now: Timestamp) -> Vec<String> {
    let (_, report) = reconcile_once(&op.applier, &PlanConfig::default(), now)
        .await
        .expect("the operator's lists are allowed");
    report.errors.iter().map(|e| e.to_string()).collect()
}
