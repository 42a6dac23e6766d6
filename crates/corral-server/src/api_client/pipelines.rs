//! The client of the pipeline run routes (`corral get pipelineruns`, `corral describe
//! pipelinerun/NAME`, `corral delete pipelinerun/NAME`).

use corral_api::PipelineRun;
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
}
