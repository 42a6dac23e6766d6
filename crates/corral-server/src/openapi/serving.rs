//! The served models' routes in the OpenAPI document (docs/serving.md): the
//! `servedmodels` API and the router's URL of a model.

use corral_api::served_model::{ServedModelSpec, ServedModelStatus};
use serde_json::{Value, json};

use super::{job_op, json_response, list_of, reference, responses};

/// The ServedModel schema (the CRD's structural schema, status with its revisions).
pub(super) fn served_model_schema() -> Value {
    let crd = corral_api::crd::crd::<ServedModelSpec, ServedModelStatus>(&[], json!([]));
    crd.pointer("/spec/versions/0/schema/openAPIV3Schema")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}))
}

/// `GET .../servedmodels/{name}`: the model and each replica job.
pub(super) fn served_model_details() -> Value {
    json!({"type": "object", "properties": {
        "model": reference("ServedModel"),
        "replicas": {"type": "array", "items": {"type": "object", "properties": {
            "job": {"type": "string", "description": "`<model>-serving-<i>`"},
            "revision": {"type": "string", "nullable": true, "description": "`<model>-00002`; null until the router has the replica"},
            "state": {"type": "string"},
            "ready": {"type": "boolean", "description": "in the router's rotation"},
            "outstanding": super::u32_schema(),
        }}},
    }})
}

pub(super) fn paths() -> Vec<(&'static str, Value)> {
    let ns = json!({"$ref": "#/components/parameters/namespace"});
    let model = json_response(
        "The model",
        json!({"type": "object", "properties": {"model": reference("ServedModel")}}),
    );
    let any_method = |id: &str| {
        json!({
            "operationId": id,
            "summary": "A request to one of the model's replicas (any method; GET and POST shown): the part after the model's prefix, with the query and headers, is what the replica sees. New requests are split between the model's revisions by their traffic percent, then go to the replica of the revision with the fewest outstanding; held while none is ready (a cold start, up to 120 s, then 503); retried on another replica as docs/serving.md says; the answer streams through as the replica sends it",
            "parameters": [{"$ref": "#/components/parameters/namespace"}, {"$ref": "#/components/parameters/name"}],
            "responses": {
                "200": {"description": "The replica's answer, whatever its status and type"},
                "404": json_response("No such served model", reference("Error")),
                "413": json_response("The body is larger than the model's spec.maxRequestBytes", reference("Error")),
                "502": json_response("Every replica tried failed", reference("Error")),
                "503": json_response("No replica became ready in time", reference("Error")),
            },
        })
    };
    vec![
        (
            "/api/v1/namespaces/{namespace}/servedmodels",
            json!({"get": {
                "operationId": "listServedModels",
                "summary": "The namespace's served models with their status (revisions, traffic, replicas). They are submitted (and changed: a change of what the replicas run is a new revision) through POST trainingjobs or submissions",
                "parameters": [ns],
                "responses": responses(("200", json_response("Served models", list_of("ServedModel"))), &[401, 403]),
            }}),
        ),
        (
            "/api/v1/servedmodels",
            json!({"get": {
                "operationId": "listAllServedModels",
                "summary": "Served models of every namespace the token may see, with their status",
                "responses": responses(("200", json_response("Served models", list_of("ServedModel"))), &[401]),
            }}),
        ),
        (
            "/api/v1/namespaces/{namespace}/servedmodels/{name}",
            json!({
                "get": job_op("getServedModel", "The model with its status and each replica job (revision, state, in rotation, outstanding requests)", json_response("The model", reference("ServedModelDetails")), &[]),
                "delete": job_op("deleteServedModel", "Delete a model: its replica jobs stop with their grace period, its revisions and code snapshots go", json_response("Deleted", json!({"type": "object"})), &[]),
            }),
        ),
        (
            "/api/v1/namespaces/{namespace}/servedmodels/{name}/traffic",
            json!({"post": {
                "operationId": "setServedModelTraffic",
                "summary": "Set spec.canaryTrafficPercent: the latest revision's percent of new requests, the stable revision getting the rest (`corral serve canary NAME PERCENT`); null promotes the latest (every request once it has a replica ready; the old revision drains) (`corral serve promote`); 0 rolls back to the stable revision (`corral serve rollback`)",
                "parameters": [{"$ref": "#/components/parameters/namespace"}, {"$ref": "#/components/parameters/name"}],
                "requestBody": {"required": true, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["canaryTrafficPercent"], "additionalProperties": false,
                    "properties": {"canaryTrafficPercent": {"type": "integer", "format": "uint32", "minimum": 0, "maximum": 100, "nullable": true}},
                }}}},
                "responses": responses(("200", model), &[400, 401, 403, 404]),
            }}),
        ),
        (
            "/serve/{namespace}/{name}",
            json!({"get": any_method("serveModelGet"), "post": any_method("serveModelPost")}),
        ),
    ]
}
