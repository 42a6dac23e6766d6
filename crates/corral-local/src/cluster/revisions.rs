//! Served models' revisions, embedded: what the store keeps of each (the model as it was,
//! its hash, when it was promoted), a new one when a submission changes what the replicas
//! run (the core's [`same_revision`]), the traffic split's percent set from the API, and the
//! core's promotions and retirements recorded. No decision is made here.

use corral_api::served_model::{ModelOrigin, ServedModel, revision_name};
use corral_core::control::Effect;
use corral_core::control::serving::{revision_hash, same_revision, stable_index};
use jiff::Timestamp;

use super::engine::Cluster;
use super::serving::code_id;
use super::{ClusterError, FieldProblem};
use crate::store::StoredRevision;

/// Where revision `number`'s code snapshot is kept: the first keeps the model's own id
/// (stores made before revisions hold it there), later ones add their number (names are
/// DNS labels, without dots: no other id has this form).
pub(super) fn revision_code_id(namespace: &str, model: &str, number: u32) -> String {
    if number <= 1 {
        code_id(namespace, model)
    } else {
        format!("{}.{number}", code_id(namespace, model))
    }
}

/// The job outputs (or step artifacts) these revisions serve from.
pub(super) fn origins<'a>(revisions: impl Iterator<Item = &'a StoredRevision>) -> Vec<ModelOrigin> {
    revisions
        .filter_map(|r| ModelOrigin::of(&r.model.metadata.annotations))
        .collect()
}

/// The newest revision (what the spec says now).
pub(super) fn latest(revisions: &[StoredRevision]) -> Option<&StoredRevision> {
    revisions.iter().max_by_key(|r| r.number)
}

/// The newest promoted revision (the first one if none was: it served alone).
pub(super) fn stable(revisions: &[StoredRevision]) -> Option<&StoredRevision> {
    let mut oldest_first: Vec<&StoredRevision> = revisions.iter().collect();
    oldest_first.sort_by_key(|r| r.number);
    let promoted: Vec<bool> = oldest_first
        .iter()
        .map(|r| r.promoted_at.is_some())
        .collect();
    stable_index(&promoted).map(|i| oldest_first[i])
}

/// What a submission did to a served model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Revised {
    /// A new revision, by name.
    New(String),
    /// What the replicas run is unchanged: the latest revision, by name.
    Same(String),
}

impl Cluster {
    /// Revision 1 of a model just stored (or stored before revisions existed), promoted
    /// at once: it is the only one.
    pub(super) fn first_revision(
        &mut self,
        model: &ServedModel,
        now: Timestamp,
    ) -> Result<String, ClusterError> {
        let ns = model.metadata.namespace_or_default().to_string();
        let revision = StoredRevision {
            number: 1,
            hash: revision_hash(model),
            model: model.clone(),
            promoted_at: Some(now),
        };
        self.store
            .insert_served_revision(&ns, &revision, None)
            .map_err(|e| ClusterError::Store(e.to_string()))?;
        let name = revision_name(&model.metadata.name, 1);
        self.served
            .revisions
            .insert(super::serving::key(model), vec![revision]);
        Ok(name)
    }

    /// Replaces a stored model's spec with `model`'s: a new revision when what the replicas
    /// run changed (its code snapshot placed from `staged`, if any), else the same one.
    pub(super) fn revise(
        &mut self,
        model: ServedModel,
        staged: Option<&std::path::Path>,
    ) -> Result<Revised, ClusterError> {
        let k = super::serving::key(&model);
        let ns = model.metadata.namespace_or_default().to_string();
        let name = model.metadata.name.clone();
        let list = self.served.revisions.get(&k).cloned().unwrap_or_default();
        let hash = revision_hash(&model);
        let store_err = |e: crate::store::StoreError| ClusterError::Store(e.to_string());
        if let Some(l) = latest(&list)
            && same_revision(&l.model, &model)
        {
            self.store
                .update_served_model(&ns, &model)
                .map_err(store_err)?;
            self.served.models.insert(k, model);
            return Ok(Revised::Same(revision_name(&name, l.number)));
        }
        let number = latest(&list).map_or(1, |l| l.number + 1);
        let code = revision_code_id(&ns, &name, number);
        if let Some(staged) = staged {
            self.code_store()
                .place(staged, &code)
                .map_err(|e| ClusterError::Store(format!("placing the code snapshot: {e}")))?;
        }
        let revision = StoredRevision {
            number,
            hash,
            model: model.clone(),
            promoted_at: None,
        };
        if let Err(e) = self
            .store
            .insert_served_revision(&ns, &revision, Some(&model))
        {
            if staged.is_some() {
                let _ = self.code_store().remove(&code);
            }
            return Err(store_err(e));
        }
        self.served
            .revisions
            .entry(k.clone())
            .or_default()
            .push(revision);
        self.served.models.insert(k, model);
        Ok(Revised::New(revision_name(&name, number)))
    }

    /// Sets the latest revision's share of requests (`spec.canaryTrafficPercent`): `None`
    /// promotes it (every request, once it is ready), `Some(0)` rolls back to the stable
    /// revision. Returns the model as it is now.
    pub fn set_canary_percent(
        &mut self,
        namespace: &str,
        name: &str,
        percent: Option<u32>,
    ) -> Result<ServedModel, ClusterError> {
        let k = format!("{namespace}/{name}");
        let Some(mut model) = self.served.models.get(&k).cloned() else {
            return Err(ClusterError::NotFound {
                namespace: namespace.to_string(),
                name: name.to_string(),
            });
        };
        if let Some(p) = percent
            && p > 100
        {
            return Err(ClusterError::Invalid(vec![super::DocumentProblem {
                index: 0,
                what: Some(format!("ServedModel {name}")),
                errors: vec![FieldProblem {
                    path: "spec.canaryTrafficPercent".into(),
                    message: format!(
                        "{p} is more than 100 (percent of requests for the latest revision)"
                    ),
                }],
            }]));
        }
        model.spec.canary_traffic_percent = percent;
        self.store
            .update_served_model(namespace, &model)
            .map_err(|e| ClusterError::Store(e.to_string()))?;
        self.served.models.insert(k, model.clone());
        Ok(model)
    }

    /// Records what the core decided of a model's revisions in this pass: the latest
    /// promoted, revisions retired (their record and code snapshot go).
    pub(super) fn record_revisions(
        &mut self,
        model: &ServedModel,
        promoted: Option<u32>,
        retired: &[u32],
        now: Timestamp,
    ) -> Vec<String> {
        let k = super::serving::key(model);
        let ns = model.metadata.namespace_or_default();
        let name = &model.metadata.name;
        let mut errors = Vec::new();
        if let Some(n) = promoted {
            match self.store.promote_served_revision(ns, name, n, now) {
                Ok(()) => {
                    if let Some(r) = self
                        .served
                        .revisions
                        .get_mut(&k)
                        .and_then(|l| l.iter_mut().find(|r| r.number == n))
                    {
                        r.promoted_at = Some(now);
                    }
                }
                Err(e) => errors.push(format!("served model {k}: promoting {n}: {e}")),
            }
        }
        let released = origins(
            self.served
                .revisions
                .get(&k)
                .into_iter()
                .flatten()
                .filter(|r| retired.contains(&r.number)),
        );
        for &n in retired {
            if let Err(e) = self.store.remove_served_revisions(ns, name, Some(n)) {
                errors.push(format!("served model {k}: retiring {n}: {e}"));
                continue;
            }
            let _ = self.code_store().remove(&revision_code_id(ns, name, n));
            if let Some(l) = self.served.revisions.get_mut(&k) {
                l.retain(|r| r.number != n);
            }
        }
        // A retired revision no longer holds the output it served.
        self.release_outputs(ns, &released, now);
        errors
    }

    /// Outputs that revisions no longer kept served (`released`): those of jobs already
    /// gone that no kept revision serves go (the core's
    /// [`outputs_released`](corral_core::control::serving::outputs_released)); one that
    /// cannot be removed is said in an event of its job.
    pub(super) fn release_outputs(
        &mut self,
        namespace: &str,
        released: &[ModelOrigin],
        now: Timestamp,
    ) {
        let remaining = self.model_pins();
        let exists = |o: &ModelOrigin| {
            self.uid_of(&format!("{namespace}/{}", o.training_job)) == Some(o.uid.as_str())
        };
        let gone: Vec<ModelOrigin> =
            corral_core::control::serving::outputs_released(released, &remaining, exists)
                .into_iter()
                .cloned()
                .collect();
        for o in gone {
            if let Err(e) = self.discard_job_output(namespace, &o.training_job, &o.uid, now) {
                self.event(
                    namespace,
                    &o.training_job,
                    now,
                    corral_core::control::EventType::Warning,
                    "OutputKept",
                    format!("no served model serves it any more, but {e}"),
                );
            }
        }
    }

    /// A deleted model's revisions go with it.
    pub(super) fn forget_revisions(&mut self, namespace: &str, name: &str) -> Effect {
        let k = format!("{namespace}/{name}");
        for r in self.served.revisions.remove(&k).unwrap_or_default() {
            let _ = self
                .code_store()
                .remove(&revision_code_id(namespace, name, r.number));
        }
        let _ = self.store.remove_served_revisions(namespace, name, None);
        Effect::Made
    }

    /// The job outputs every kept revision of every served model serves from.
    pub(super) fn model_pins(&self) -> Vec<ModelOrigin> {
        origins(self.served.revisions.values().flatten())
    }

    /// A gone job's output directory is let go, unless a served model serves from it
    /// (the core's [`output_pinned`](corral_core::control::serving::output_pinned)): it
    /// stays for `artifacts.jobOutputRetentionSeconds` from now, marked by its modification
    /// time, and the artifact collection removes it then (at once with no retention).
    pub(super) fn discard_job_output(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        now: jiff::Timestamp,
    ) -> Result<(), String> {
        if corral_core::control::serving::output_pinned(uid, &self.model_pins()) {
            return Ok(());
        }
        let dir = crate::artifacts::job_output_dir(&self.config.data_dir, namespace, name, uid);
        let failed = |e: std::io::Error| format!("its output {}: {e}", dir.display());
        if self
            .config
            .file
            .settings
            .artifacts
            .job_output_retention_seconds
            > 0
        {
            let let_go = std::time::SystemTime::from(now);
            return match std::fs::File::open(&dir).and_then(|f| f.set_modified(let_go)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(failed(e)),
                _ => Ok(()),
            };
        }
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(failed(e)),
            _ => Ok(()),
        }
    }
}
