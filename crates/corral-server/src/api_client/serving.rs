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

    /// Sets the latest revision's percent of requests (`None`: promote it); answers
    /// `{"model": ServedModel}`.
    pub fn set_canary_percent(
        &self,
        namespace: &str,
        name: &str,
        percent: Option<u32>,
    ) -> Result<Value, ClientError> {
        let path = format!(
            "{}/{}/traffic",
            Self::served_models_path(namespace),
            encode(name)
        );
        let body = serde_json::json!({ "canaryTrafficPercent": percent }).to_string();
        let req = self
            .auth(self.agent.post(self.url(&path)))
            .header("content-type", "application/json");
        let text = self.finish(req.send(body.as_bytes()))?;
        serde_json::from_str(&text)
            .map_err(|e| ClientError::Protocol(format!("cannot read the response: {e}")))
    }

    pub fn delete_served_model(&self, namespace: &str, name: &str) -> Result<(), ClientError> {
        let path = format!("{}/{}", Self::served_models_path(namespace), encode(name));
        let req = self.auth(self.agent.delete(self.url(&path)));
        self.finish(req.call()).map(|_| ())
    }
}
