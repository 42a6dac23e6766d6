//! The client of the pipeline run routes (`corral get pipelineruns`, `corral describe
//! pipelinerun/NAME`, `corral delete pipelinerun/NAME`) and the stored pipelines' (`corral
//! get pipelines`, `corral delete pipeline/NAME`).

use corral_api::{Pipeline, PipelineRun};
use corral_local::cluster::PipelineRunDetails;

use super::{Client, ClientError, changed, encode};

impl Client {
    fn runs_path(namespace: &str) -> String {
        format!("/api/v1/namespaces/{}/pipelineruns", encode(namespace))
    }

    fn run_path(namespace: &str, name: &str) -> String {
        format!("{}/{}", Self::runs_path(namespace), encode(name))
    }

    /// Runs of one namespace, or of every namespace the token may see.
    pub fn pipeline_runs(&self, namespace: Option<&str>) -> Result<Vec<PipelineRun>, ClientError> {
        match namespace {
            Some(ns) => self.get_items(&Self::runs_path(ns)),
            None => self.get_items("/api/v1/pipelineruns"),
        }
    }

    pub fn describe_pipeline_run(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<PipelineRunDetails, ClientError> {
        let v = self.get_value(&format!("{}/describe", Self::run_path(namespace, name)))?;
        serde_json::from_value(v).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Deletes a run and its steps' jobs.
    pub fn delete_pipeline_run(&self, namespace: &str, name: &str) -> Result<bool, ClientError> {
        let req = self.auth(
            self.agent
                .delete(self.url(&Self::run_path(namespace, name))),
        );
        self.finish(req.call()).map(|text| changed(&text))
    }

    fn pipeline_path(namespace: &str, name: &str) -> String {
        format!(
            "/api/v1/namespaces/{}/pipelines/{}",
            encode(namespace),
            encode(name)
        )
    }

    /// Stored pipelines of one namespace, or of every namespace the token may see.
    pub fn pipelines(&self, namespace: Option<&str>) -> Result<Vec<Pipeline>, ClientError> {
        match namespace {
            Some(ns) => self.get_items(&format!("/api/v1/namespaces/{}/pipelines", encode(ns))),
            None => self.get_items("/api/v1/pipelines"),
        }
    }

    pub fn pipeline(&self, namespace: &str, name: &str) -> Result<Pipeline, ClientError> {
        let v = self.get_value(&Self::pipeline_path(namespace, name))?;
        serde_json::from_value(v).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Every kept version of a stored pipeline, oldest first.
    pub fn pipeline_versions(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Vec<Pipeline>, ClientError> {
        self.get_items(&format!(
            "{}/versions",
            Self::pipeline_path(namespace, name)
        ))
    }

    /// Deletes a stored pipeline (the runs made from it stay).
    pub fn delete_pipeline(&self, namespace: &str, name: &str) -> Result<bool, ClientError> {
        let req = self.auth(
            self.agent
                .delete(self.url(&Self::pipeline_path(namespace, name))),
        );
        self.finish(req.call()).map(|text| changed(&text))
    }
}
