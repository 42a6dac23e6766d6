//! The client of the `servedmodels` API (`corral get|describe|delete servedmodel`).

use serde_json::Value;

use super::{Client, ClientError, encode};

impl Client {
    fn served_models_path(namespace: &str) -> String {
        format!("/api/v1/namespaces/{}/servedmodels", encode(namespace))
    }

    /// The namespace's served models, with their status.
    pub fn served_models(&self, namespace: &str) -> Result<Vec<Value>, ClientError> {
        let v = self.get_value(&Self::served_models_path(namespace))?;
        Ok(v.get("items")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default())
    }

    /// `{"model": ServedModel, "replicas": [{job, state, ready, outstanding}]}`.
    pub fn served_model(&self, namespace: &str, name: &str) -> Result<Value, ClientError> {
        self.get_value(&format!(
            "{}/{}",
            Self::served_models_path(namespace),
            encode(name)
        ))
    }

    pub fn delete_served_model(&self, namespace: &str, name: &str) -> Result<(), ClientError> {
        let path = format!("{}/{}", Self::served_models_path(namespace), encode(name));
        let req = self.auth(self.agent.delete(self.url(&path)));
        self.finish(req.call()).map(|_| ())
    }
}
