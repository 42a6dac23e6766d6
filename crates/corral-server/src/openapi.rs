//! The OpenAPI 3 document of the API (`/openapi.json`), written by hand next to the routes;
//! a test checks that every route of [`ROUTES`] is served and documented.

use corral_api::training_job::{TrainingJobSpec, TrainingJobStatus};
use serde_json::{Value, json};

/// Every route: method and path, as in the document.
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/api/v1/namespaces/{namespace}/trainingjobs"),
    ("get", "/api/v1/namespaces/{namespace}/trainingjobs"),
    ("get", "/api/v1/namespaces/{namespace}/trainingjobs/{name}"),
    (
        "delete",
        "/api/v1/namespaces/{namespace}/trainingjobs/{name}",
    ),
    (
        "get",
        "/api/v1/namespaces/{namespace}/trainingjobs/{name}/describe",
    ),
    (
        "post",
        "/api/v1/namespaces/{namespace}/trainingjobs/{name}/suspend",
    ),
    (
        "post",
        "/api/v1/namespaces/{namespace}/trainingjobs/{name}/resume",
    ),
    (
        "get",
        "/api/v1/namespaces/{namespace}/trainingjobs/{name}/logs",
    ),
    ("get", "/api/v1/trainingjobs"),
    ("get", "/api/v1/queues"),
    ("get", "/api/v1/nodes"),
    ("get", "/api/v1/top"),
    ("get", "/metrics"),
    ("get", "/healthz"),
    ("get", "/openapi.json"),
];

fn reference(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn json_response(description: &str, schema: Value) -> Value {
    json!({ "description": description, "content": { "application/json": { "schema": schema } } })
}

fn list_of(name: &str) -> Value {
    json!({
        "type": "object",
        "required": ["items"],
        "properties": { "items": { "type": "array", "items": reference(name) } },
    })
}

fn errors(codes: &[u16]) -> Vec<(String, Value)> {
    codes
        .iter()
        .map(|c| {
            let what = match c {
                400 => "Invalid input; `fields` names each field and what would be valid",
                401 => "No API token, or an unknown one",
                403 => "The token may not act in this namespace",
                404 => "No such job (or route)",
                409 => "The job exists already, or cannot do that now",
                413 => "The request body is larger than the server accepts",
                _ => "Server error",
            };
            (c.to_string(), json_response(what, reference("Error")))
        })
        .collect()
}

fn responses(ok: (&str, Value), codes: &[u16]) -> Value {
    let mut map = serde_json::Map::new();
    map.insert(ok.0.to_string(), ok.1);
    for (code, v) in errors(codes) {
        map.insert(code, v);
    }
    Value::Object(map)
}

fn job_op(id: &str, summary: &str, ok: Value, extra: &[Value]) -> Value {
    let mut params = vec![
        json!({"$ref": "#/components/parameters/namespace"}),
        json!({"$ref": "#/components/parameters/name"}),
    ];
    params.extend(extra.iter().cloned());
    json!({
        "operationId": id,
        "summary": summary,
        "parameters": params,
        "responses": responses(("200", ok), &[400, 401, 403, 404, 409]),
    })
}

/// The TrainingJob schema (the CRD's structural schema).
fn training_job_schema() -> Value {
    let crd = corral_api::crd::crd::<TrainingJobSpec, TrainingJobStatus>(&[], json!([]));
    crd.pointer("/spec/versions/0/schema/openAPIV3Schema")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}))
}

/// The document.
pub fn document() -> Value {
    let ns_param = json!({"$ref": "#/components/parameters/namespace"});
    let changed = json_response(
        "Done",
        json!({"type": "object", "properties": {
            "namespace": {"type": "string"}, "name": {"type": "string"},
            "result": {"type": "string", "enum": ["deleted", "suspended", "resumed"]}}}),
    );
    // Kept apart from the document: one literal that deep exceeds the macro recursion limit.
    let replica_info = json!({"type": "object", "properties": {
        "name": {"type": "string"}, "role": {"type": "string"}, "index": {"type": "integer"},
        "incarnation": {"type": "string"}, "phase": {"type": "string"},
        "exitCode": {"type": "integer", "nullable": true}, "reason": {"type": "string", "nullable": true},
        "message": {"type": "string", "description": "why the command could not run, when it could not"},
        "pid": {"type": "integer", "nullable": true}, "gpus": {"type": "array", "items": {"type": "integer"}},
        "port": {"type": "integer", "nullable": true}, "restarts": {"type": "integer"},
        "started": {"type": "string", "format": "date-time", "nullable": true},
        "logPath": {"type": "string", "nullable": true}}});
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "Corral API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Distributed ML training on shared GPU clusters: submit TrainingJobs (or Kubeflow TFJob/PyTorchJob/MPIJob/XGBoostJob/JAXJob manifests) into per-team queues and watch them run. With API tokens configured, send `Authorization: Bearer <token>`; a namespace's token acts in that namespace only.",
        },
        "servers": [{"url": crate::DEFAULT_SERVER}],
        "security": [{"bearer": []}, {}],
        "paths": {
            "/api/v1/namespaces/{namespace}/trainingjobs": {
                "post": {
                    "operationId": "submitTrainingJobs",
                    "summary": "Submit TrainingJobs or Kubeflow jobs (YAML or JSON, several documents; all or nothing)",
                    "parameters": [ns_param.clone()],
                    "requestBody": {"required": true, "content": {
                        "application/yaml": {"schema": {"type": "string"}},
                        "application/json": {"schema": reference("TrainingJob")},
                        "text/plain": {"schema": {"type": "string"}},
                    }},
                    "responses": responses(("201", json_response("Submitted", list_of("SubmitResult"))), &[400, 401, 403, 409, 413]),
                },
                "get": {
                    "operationId": "listTrainingJobs",
                    "summary": "The namespace's jobs, by name",
                    "parameters": [ns_param.clone()],
                    "responses": responses(("200", json_response("Jobs", list_of("JobSummary"))), &[401, 403]),
                },
            },
            "/api/v1/namespaces/{namespace}/trainingjobs/{name}": {
                "get": job_op("getTrainingJob", "The job with its recorded status", json_response("The job", reference("TrainingJob")), &[]),
                "delete": job_op("deleteTrainingJob", "Delete a job: its replicas stop, then it is removed (logs are kept)", changed.clone(), &[]),
            },
            "/api/v1/namespaces/{namespace}/trainingjobs/{name}/describe": {
                "get": job_op("describeTrainingJob", "Conditions, events, replicas, placement, and why it is pending", json_response("Details", reference("JobDetails")), &[]),
            },
            "/api/v1/namespaces/{namespace}/trainingjobs/{name}/suspend": {
                "post": job_op("suspendTrainingJob", "Stop the replicas and give the admission back; the job keeps its history", changed.clone(), &[]),
            },
            "/api/v1/namespaces/{namespace}/trainingjobs/{name}/resume": {
                "post": job_op("resumeTrainingJob", "Return a suspended job to its queue", changed, &[]),
            },
            "/api/v1/namespaces/{namespace}/trainingjobs/{name}/logs": {
                "get": {
                    "operationId": "trainingJobLogs",
                    "summary": "A replica's output (stdout and stderr); with follow=true, streamed until the job ends",
                    "parameters": [
                        ns_param,
                        {"$ref": "#/components/parameters/name"},
                        {"name": "replica", "in": "query", "schema": {"type": "string"}, "description": "`<role>-<index>` or `<job>-<role>-<index>`; default: the first replica"},
                        {"name": "role", "in": "query", "schema": {"type": "string"}},
                        {"name": "index", "in": "query", "schema": {"type": "integer", "minimum": 0}},
                        {"name": "follow", "in": "query", "schema": {"type": "boolean", "default": false}},
                    ],
                    "responses": responses(("200", json!({"description": "The log", "content": {"text/plain": {"schema": {"type": "string"}}}})), &[400, 401, 403, 404]),
                },
            },
            "/api/v1/trainingjobs": {
                "get": {
                    "operationId": "listAllTrainingJobs",
                    "summary": "Jobs of every namespace the token may see",
                    "responses": responses(("200", json_response("Jobs", list_of("JobSummary"))), &[401]),
                },
            },
            "/api/v1/queues": {
                "get": {
                    "operationId": "listQueues",
                    "summary": "Queues: usage per node pool, pending and admitted jobs",
                    "responses": responses(("200", json_response("Queues", list_of("QueueInfo"))), &[401]),
                },
            },
            "/api/v1/nodes": {
                "get": {
                    "operationId": "listNodes",
                    "summary": "Nodes: GPU inventory and which job holds each GPU",
                    "responses": responses(("200", json_response("Nodes", list_of("NodeInfo"))), &[401]),
                },
            },
            "/api/v1/top": {
                "get": {
                    "operationId": "top",
                    "summary": "CPU time, memory and GPUs of every running replica the token may see",
                    "responses": responses(("200", json_response("Replicas", list_of("ReplicaUsage"))), &[401]),
                },
            },
            "/metrics": {
                "get": {
                    "operationId": "metrics",
                    "summary": "Prometheus metrics (corral_ prefix): jobs by queue and state, GPUs, counters, and CPU/memory/GPU of every running replica the token may see",
                    "responses": {"200": {"description": "OpenMetrics text", "content": {"application/openmetrics-text": {"schema": {"type": "string"}}}}, "401": {"description": "Tokens are configured and none (or an unknown one) was given"}},
                },
            },
            "/healthz": {
                "get": {
                    "operationId": "healthz",
                    "summary": "Liveness",
                    "security": [],
                    "responses": {"200": json_response("Serving", json!({"type": "object", "properties": {"status": {"type": "string"}}}))},
                },
            },
            "/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document",
                    "security": [],
                    "responses": {"200": {"description": "OpenAPI 3 document", "content": {"application/json": {"schema": {"type": "object"}}}}},
                },
            },
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "parameters": {
                "namespace": {"name": "namespace", "in": "path", "required": true, "schema": {"type": "string"}, "description": "Namespace (a DNS label); jobs without one go to `default`"},
                "name": {"name": "name", "in": "path", "required": true, "schema": {"type": "string"}},
            },
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {"error": {
                        "type": "object",
                        "required": ["code", "message"],
                        "properties": {
                            "code": {"type": "string", "enum": ["Invalid", "Unauthorized", "Forbidden", "NotFound", "MethodNotAllowed", "AlreadyExists", "Conflict", "PayloadTooLarge", "Internal"]},
                            "message": {"type": "string"},
                            "fields": {"type": "array", "items": {
                                "type": "object",
                                "required": ["path", "message"],
                                "properties": {
                                    "path": {"type": "string", "description": "e.g. spec.replicas.worker.count; empty for the document as a whole"},
                                    "message": {"type": "string"},
                                    "document": {"type": "integer", "description": "1-based document of the input, when it held several"},
                                    "object": {"type": "string", "description": "e.g. `TrainingJob mnist`"},
                                },
                            }},
                        },
                    }},
                },
                "SubmitResult": {"type": "object", "properties": {
                    "namespace": {"type": "string"}, "name": {"type": "string"}, "uid": {"type": "string"},
                    "convertedFrom": {"type": "string", "nullable": true},
                }},
                "JobSummary": {"type": "object", "properties": {
                    "namespace": {"type": "string"}, "name": {"type": "string"}, "uid": {"type": "string"},
                    "framework": {"type": "string"}, "queue": {"type": "string"},
                    "state": {"type": "string", "enum": ["Queued", "Admitted", "Running", "Restarting", "Preempting", "Suspended", "Succeeded", "Failed", "Deleting"]},
                    "replicasReady": {"type": "integer"}, "replicasTotal": {"type": "integer"},
                    "gpus": {"type": "integer"}, "created": {"type": "string", "format": "date-time"},
                    "restarts": {"type": "integer"}, "preemptions": {"type": "integer"},
                }},
                "TrainingJob": training_job_schema(),
                "JobDetails": {"type": "object", "properties": {
                    "summary": reference("JobSummary"),
                    "job": reference("TrainingJob"),
                    "admission": {"type": "object", "nullable": true, "properties": {
                        "pool": {"type": "string"}, "gpuType": {"type": "string", "nullable": true},
                        "admittedAt": {"type": "string", "format": "date-time"},
                        "placements": {"type": "array", "items": {"type": "object", "properties": {
                            "role": {"type": "string"}, "index": {"type": "integer"}, "node": {"type": "string"},
                            "gpuIndices": {"type": "array", "items": {"type": "integer"}}}}},
                    }},
                    "replicas": {"type": "array", "items": replica_info},
                    "events": {"type": "array", "items": {"type": "object", "properties": {
                        "time": {"type": "string", "format": "date-time"}, "namespace": {"type": "string"}, "job": {"type": "string"},
                        "type": {"type": "string", "enum": ["Normal", "Warning"]}, "reason": {"type": "string"}, "message": {"type": "string"}}}},
                    "pendingReason": {"type": "string", "nullable": true},
                }},
                "QueueInfo": {"type": "object", "properties": {
                    "name": {"type": "string"}, "cohort": {"type": "string", "nullable": true}, "weight": {"type": "integer"},
                    "pending": {"type": "integer"}, "admitted": {"type": "integer"},
                    "usage": {"type": "array", "items": {"type": "object", "properties": {
                        "pool": {"type": "string"}, "used": reference("ResourceAmount"),
                        "nominal": {"allOf": [reference("ResourceAmount")], "nullable": true}}}},
                }},
                "ResourceAmount": {"type": "object", "properties": {
                    "gpu": {"type": "integer"}, "cpuMilli": {"type": "integer"}, "memoryBytes": {"type": "integer"}}},
                "NodeInfo": {"type": "object", "properties": {
                    "name": {"type": "string"}, "pool": {"type": "string", "nullable": true}, "gpuType": {"type": "string", "nullable": true},
                    "gpus": {"type": "array", "items": {"type": "object", "properties": {
                        "index": {"type": "integer"}, "name": {"type": "string"}, "memoryBytes": {"type": "integer", "nullable": true},
                        "usedBy": {"type": "string", "nullable": true, "description": "namespace/job"}}}},
                    "cpuMilli": {"type": "integer"}, "memoryBytes": {"type": "integer"},
                    "cpuMilliAllocated": {"type": "integer"}, "memoryBytesAllocated": {"type": "integer"},
                    "extended": {"type": "object", "additionalProperties": {"type": "integer"}},
                }},
                "ReplicaUsage": {"type": "object", "properties": {
                    "namespace": {"type": "string"}, "job": {"type": "string"}, "replica": {"type": "string"},
                    "pid": {"type": "integer", "nullable": true}, "cpuSeconds": {"type": "number", "nullable": true},
                    "memoryBytes": {"type": "integer", "nullable": true}, "gpus": {"type": "array", "items": {"type": "integer"}},
                }},
            },
        },
    })
}
