//! A pass that runs out of its budget (`--pass-budget-ms`) starts no more job's writes; the
//! jobs left are planned again by the next pass, whole: none is half applied.

mod common;

use std::time::Duration;

use common::passes::*;
use corral_kube::apply::{Applier, RateLimiter};
use corral_kube::operator::reconcile_once;
use corral_kube::plan::PlanConfig;
use serde_json::json;

#[tokio::test]
async fn jobs_left_by_a_spent_budget_are_applied_whole_by_the_next_pass() {
    let fake = cluster(&["n1", "n2"]);
    for name in ["a", "b", "c"] {
        fake.insert(JOBS, job(name, 1, 2, json!({})));
    }
    // A budget spent before the first job: nothing is written, every job is left.
    let spent = Applier::new(fake.client(), None, RateLimiter::unlimited())
        .with_budget(Some(Duration::ZERO));
    fake.clear_log();
    let (plan, report) = reconcile_once(&spent, &PlanConfig::default(), t(0))
        .await
        .expect("observe");
    assert_eq!(plan.jobs.iter().filter(|j| !j.is_empty()).count(), 3);
    assert_eq!(report.deferred, 3);
    assert!(
        !fake.log().iter().any(|l| !l.starts_with("GET")),
        "nothing written: {:?}",
        fake.log()
    );
    for name in ["a", "b", "c"] {
        assert!(pods_of(&fake, name).is_empty());
        assert!(job_status(&fake, name).is_null());
    }

    // The next pass, with room in its budget, applies each job whole.
    let roomy = Applier::new(fake.client(), None, RateLimiter::unlimited())
        .with_budget(Some(Duration::from_secs(60)));
    let (_, report) = reconcile_once(&roomy, &PlanConfig::default(), t(1))
        .await
        .expect("observe");
    assert_eq!(report.deferred, 0);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    for name in ["a", "b", "c"] {
        assert_eq!(pods_of(&fake, name).len(), 2, "{name}: the whole gang");
        assert_eq!(condition(&fake, name, "Admitted").as_deref(), Some("True"));
        assert!(job_status(&fake, name)["admission"].is_object());
    }
}
