//! The OpenAPI 3 document of the API (`/openapi.json`), written by hand next to the routes;
//! a test checks that every route of [`ROUTES`] is served and documented.

use corral_api::training_job::{TrainingJobSpec, TrainingJobStatus};
use serde_json::{Value, json};

mod serving;

/// Every route: method and path, as in the document.
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/api/v1/namespaces/{namespace}/trainingjobs"),
    ("get", "/api/v1/namespaces/{namespace}/trainingjobs"),
    ("post", "/api/v1/namespaces/{namespace}/submissions"),
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
    (
        "post",
        "/api/v1/namespaces/{namespace}/trainingjobs/{name}/replicas/{replica}/exec",
    ),
    ("get", "/api/v1/trainingjobs"),
    ("post", "/api/v1/namespaces/{namespace}/pipelineruns"),
    ("get", "/api/v1/namespaces/{namespace}/pipelineruns"),
    ("get", "/api/v1/namespaces/{namespace}/pipelineruns/{name}"),
    (
        "delete",
        "/api/v1/namespaces/{namespace}/pipelineruns/{name}",
    ),
    (
        "get",
        "/api/v1/namespaces/{namespace}/pipelineruns/{name}/describe",
    ),
    ("get", "/api/v1/pipelineruns"),
    ("post", "/api/v1/namespaces/{namespace}/pipelines"),
    ("get", "/api/v1/namespaces/{namespace}/pipelines"),
    ("get", "/api/v1/namespaces/{namespace}/pipelines/{name}"),
    ("delete", "/api/v1/namespaces/{namespace}/pipelines/{name}"),
    (
        "get",
        "/api/v1/namespaces/{namespace}/pipelines/{name}/versions",
    ),
    ("get", "/api/v1/pipelines"),
    ("get", "/api/v1/namespaces/{namespace}/servedmodels"),
    ("get", "/api/v1/servedmodels"),
    ("get", "/api/v1/namespaces/{namespace}/servedmodels/{name}"),
    (
        "delete",
        "/api/v1/namespaces/{namespace}/servedmodels/{name}",
    ),
    (
        "post",
        "/api/v1/namespaces/{namespace}/servedmodels/{name}/traffic",
    ),
    ("get", "/serve/{namespace}/{name}"),
    ("post", "/serve/{namespace}/{name}"),
    ("get", "/api/v1/queues"),
    ("get", "/api/v1/nodes"),
    ("get", "/api/v1/top"),
    ("get", "/api/v1/usage"),
    ("get", "/api/v1/series"),
    ("get", "/api/v1/whoami"),
    ("get", "/api/v1/audit"),
    ("get", "/api/v1/watch"),
    ("get", "/metrics"),
    ("get", "/healthz"),
    ("get", "/openapi.json"),
];

/// The audit trail's answer: its entries and the cap.
fn audit_schema() -> Value {
    let text = || json!({"type": "string"});
    let entry = json!({"type": "object", "properties": {
        "seq": u64_schema(), "atMs": u64_schema(), "who": text(), "scope": text(),
        "action": text(), "target": text(), "status": u32_schema(), "outcome": text(),
    }});
    json!({"type": "object", "properties": {
        "cap": u32_schema(),
        "items": {"type": "array", "items": entry},
    }})
}

/// A non-negative integer that fits in 32 bits (counts, indices, pids).
fn u32_schema() -> Value {
    json!({"type": "integer", "format": "uint32"})
}

/// A non-negative 64-bit integer (bytes, milli-CPUs, GPU totals).
fn u64_schema() -> Value {
    json!({"type": "integer", "format": "uint64"})
}

/// Gives every integer schema its range (`minimum`, `maximum`) from its format, and a
/// standard OpenAPI format (`int32`/`int64`), so that clients know what to expect: Rust's
/// unsigned formats (which schemars writes) are not OpenAPI's.
fn document_integer_ranges(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if map.get("type").and_then(Value::as_str) == Some("integer") {
                let format = map.get("format").and_then(Value::as_str).unwrap_or("int64");
                let (min, max, format): (Value, Value, &str) = match format {
                    "int32" => (json!(i32::MIN), json!(i32::MAX), "int32"),
                    "uint8" => (json!(0), json!(u8::MAX), "int32"),
                    "uint16" => (json!(0), json!(u16::MAX), "int32"),
                    "uint32" | "uint" => (json!(0), json!(u32::MAX), "int64"),
                    "uint64" => (json!(0), json!(u64::MAX), "int64"),
                    _ => (json!(i64::MIN), json!(i64::MAX), "int64"),
                };
                map.insert("format".into(), json!(format));
                map.entry("minimum").or_insert(min);
                map.entry("maximum").or_insert(max);
            }
            for child in map.values_mut() {
                document_integer_ranges(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(document_integer_ranges),
        _ => {}
    }
}

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
    let mut doc = unranged_document();
    document_integer_ranges(&mut doc);
    doc
}

fn unranged_document() -> Value {
    let ns_param = json!({"$ref": "#/components/parameters/namespace"});
    let changed = json_response(
        "Done",
        json!({"type": "object", "properties": {
            "namespace": {"type": "string"}, "name": {"type": "string"},
            "result": {"type": "string", "enum": ["deleted", "suspended", "resumed"]}}}),
    );
    // Kept apart from the document: one literal that deep exceeds the macro recursion limit.
    let replica_info = json!({"type": "object", "properties": {
        "name": {"type": "string"}, "role": {"type": "string"}, "index": u32_schema(),
        "incarnation": {"type": "string"}, "phase": {"type": "string"},
        "exitCode": {"type": "integer", "format": "int32", "nullable": true}, "reason": {"type": "string", "nullable": true},
        "message": {"type": "string", "description": "why the command could not run, when it could not"},
        "pid": {"type": "integer", "format": "uint32", "nullable": true}, "gpus": {"type": "array", "items": u32_schema()},
        "port": {"type": "integer", "format": "uint16", "nullable": true},
        "restarts": {"type": "integer", "format": "uint32", "description": "earlier incarnations of this replica: restarts of the gang and of the replica alone"},
        "started": {"type": "string", "format": "date-time", "nullable": true},
        "logPath": {"type": "string", "nullable": true}}});
    // Kept apart from the document, as `replica_info`.
    let exec_op = json!({"post": {
        "operationId": "execInReplica",
        "summary": "Run a command inside a running replica (`corral exec`; the MPI launcher's rsh agent `corral rsh` starts orted in the workers with it): the replica's environment, working directory, cgroup, process group and user. Allowed by a user's token for its namespace, and by a replica's own token (`cj1.<namespace>.<job>.<mac>`, an MPI launcher's CORRAL_TOKEN) for the replicas of its own job only; a replica's token is refused (403) by every other route. The command is killed when the client goes away, and with the replica",
        "parameters": [
            {"$ref": "#/components/parameters/namespace"},
            {"$ref": "#/components/parameters/name"},
            {"name": "replica", "in": "path", "required": true, "schema": {"type": "string"}, "description": "`<role>-<index>` or `<job>-<role>-<index>`"},
        ],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {
            "type": "object", "required": ["command"], "additionalProperties": false, "properties": {
                "command": {"type": "array", "minItems": 1, "items": {"type": "string"}, "description": "the program and its arguments (no shell: use [\"sh\", \"-c\", \"...\"])"},
                "stdin": {"type": "string", "nullable": true, "description": "the command's whole input; absent: /dev/null"},
            }}}}},
        "responses": responses(("200", json!({"description": "The command ran: a stream of frames, each one byte of kind, a 4-byte big-endian length and that many bytes; kind 1 stdout, 2 stderr, 3 the exit status (4-byte big-endian signed: the code, or 128 + signal; 127 when the program was not found), always last", "content": {"application/vnd.corral.exec-frames": {"schema": {"type": "string", "format": "binary"}}}})), &[400, 401, 403, 404, 409]),
    }});
    let mut doc = json!({
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
                    "parameters": [ns_param.clone(), {"name": "dryRun", "in": "query", "schema": {"type": "string", "enum": ["All"]}, "description": "`All`: check everything a submit checks (against the cluster's priority classes, queues and nodes) and store nothing; `uid` is empty"}],
                    "requestBody": {"required": true, "content": {
                        "application/yaml": {"schema": {"type": "string"}},
                        "application/json": {"schema": reference("TrainingJob")},
                        "text/plain": {"schema": {"type": "string"}},
                    }},
                    "responses": responses(("201", json_response("Submitted", reference("Submitted"))), &[400, 401, 403, 409, 413]),
                },
                "get": {
                    "operationId": "listTrainingJobs",
                    "summary": "The namespace's jobs, by name",
                    "parameters": [ns_param.clone()],
                    "responses": responses(("200", json_response("Jobs", list_of("JobSummary"))), &[401, 403]),
                },
            },
            "/api/v1/namespaces/{namespace}/submissions": {
                "post": {
                    "operationId": "submitTrainingJobsWithCode",
                    "summary": "Submit jobs with a code snapshot (`corral submit --code DIR`): replicas run from a read-only copy of it, kept with each job and removed with it; the job's `corral.dev/code` annotation names its digest. All or nothing; a request larger than the server's codeSnapshots.maxBytes is refused (413) before it is read when it has a Content-Length",
                    "parameters": [ns_param.clone()],
                    "requestBody": {"required": true, "content": {
                        "multipart/form-data": {
                            "schema": {"type": "object", "required": ["manifest", "digest", "code"], "properties": {
                                "manifest": {"type": "string", "description": "what POST trainingjobs takes: TrainingJobs or Kubeflow jobs, YAML or JSON"},
                                "digest": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$", "description": "SHA-256 of the `code` part's bytes"},
                                "code": {"type": "string", "format": "binary", "description": "the directory as a tar.gz archive: regular files and directories, relative paths"},
                            }},
                        },
                    }},
                    "responses": responses(("201", json_response("Submitted", reference("Submitted"))), &[400, 401, 403, 409, 413]),
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
                        {"name": "index", "in": "query", "schema": {"type": "integer", "format": "int64", "minimum": 0, "maximum": corral_api::validate::MAX_REPLICAS_PER_ROLE - 1}, "description": "with `role`: the replica's index in its role (default 0)"},
                        {"name": "follow", "in": "query", "schema": {"type": "boolean", "default": false}, "description": "stream until the job ends, into each new incarnation after a restart (each introduced by a `==> ... <==` line)"},
                        {"name": "previous", "in": "query", "schema": {"type": "boolean", "default": false}, "description": "the incarnation before the current one; not with `follow`"},
                        {"name": "tail", "in": "query", "schema": {"type": "integer", "format": "int64", "minimum": 0, "maximum": u64::MAX}, "description": "only the last N lines"},
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
            "/api/v1/whoami": {
                "get": {
                    "operationId": "whoami",
                    "summary": "The namespace the token acts in (null: every namespace); clients use it when no namespace is given",
                    "responses": responses(("200", json_response("Caller", json!({"type": "object", "properties": {"namespace": {"type": "string", "nullable": true}}}))), &[401]),
                },
            },
            "/api/v1/audit": {
                "get": {
                    "operationId": "audit",
                    "summary": "The audit trail: the newest writes through the API (who: the token's name and namespace; what; when; the outcome), oldest first; a token of every namespace only. The store keeps the newest 10,000",
                    "parameters": [{"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "format": "uint32", "minimum": 1, "maximum": 10000}}],
                    "responses": responses(("200", json_response("AuditTrail", audit_schema())), &[401, 403]),
                },
            },
            "/api/v1/watch": {
                "get": {
                    "operationId": "watch",
                    "summary": "Changes pushed as server-sent events (text/event-stream): `jobs` (first every job the token may see with `reset: true`, then `upsert`ed rows, `remove`d `namespace/name` keys and changed pending `reasons`, null where a job no longer waits) and `event` (one job event, as in describe; the stream starts with those of the latest 200 events the token may see). A namespace's token is sent only its namespace",
                    "parameters": [{"name": "timeoutSeconds", "in": "query", "required": false, "schema": u64_schema(), "description": "end the stream after this many seconds; absent: never"}],
                    "responses": {"200": {"description": "The event stream", "content": {"text/event-stream": {"schema": {"type": "string"}}}}, "401": {"description": "Tokens are configured and none (or an unknown one) was given"}},
                },
            },
            "/metrics": {
                "get": {
                    "operationId": "metrics",
                    "summary": "Prometheus metrics (corral_ prefix): jobs by queue and state, GPUs, queue quotas and usage, counters, and CPU/memory/GPU of every running replica the token may see. The format follows the Accept header: OpenMetrics 1.0 when preferred, else the text format 0.0.4",
                    "responses": {"200": {"description": "The metrics", "content": {"text/plain": {"schema": {"type": "string"}}, "application/openmetrics-text": {"schema": {"type": "string"}}}}, "401": {"description": "Tokens are configured and none (or an unknown one) was given"}},
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
                                    "document": {"type": "integer", "format": "uint32", "minimum": 1, "description": "1-based document of the input, when it held several"},
                                    "object": {"type": "string", "description": "e.g. `TrainingJob mnist`"},
                                },
                            }},
                        },
                    }},
                },
                "SubmitResult": {"type": "object", "properties": {
                    "namespace": {"type": "string"}, "name": {"type": "string"}, "uid": {"type": "string"},
                    "convertedFrom": {"type": "string", "nullable": true},
                    "kind": {"type": "string", "enum": ["PipelineRun", "Pipeline", "ServedModel"], "description": "`PipelineRun` for a run, `Pipeline` for a stored pipeline, `ServedModel` for a served model; absent for a TrainingJob"},
                    "revision": {"type": "string", "description": "a served model's revision after this submission (`<model>-00002`), or a pipeline's version (`generation 2`)"},
                    "newRevision": {"type": "boolean", "description": "the submission made that revision (a new model, or what its replicas run changed); absent: another field changed, or nothing did"},
                    "warnings": {"type": "array", "items": {"type": "string"}, "description": "`path: message` of what the job asks that this cluster accepts but does not honour (e.g. a pod template's tolerations); each is also a Warning event of the job"},
                }},
                "Submitted": {"type": "object", "required": ["items", "warnings"], "properties": {
                    "items": {"type": "array", "items": reference("SubmitResult")},
                    "warnings": {"type": "array", "items": {"type": "string"}, "description": "every job's warnings, each naming its job; also sent as `Warning: 299 - \"...\"` headers (RFC 7234), which kubectl prints"},
                }},
                "JobSummary": {"type": "object", "properties": {
                    "namespace": {"type": "string"}, "name": {"type": "string"}, "uid": {"type": "string"},
                    "framework": {"type": "string"}, "queue": {"type": "string"},
                    "state": {"type": "string", "enum": ["Queued", "Admitted", "Running", "Restarting", "Preempting", "BackOff", "Suspended", "Succeeded", "Failed", "Deleting"]},
                    "replicasReady": u32_schema(), "replicasTotal": u32_schema(),
                    "gpus": u64_schema(), "created": {"type": "string", "format": "date-time"},
                    "restarts": u32_schema(), "preemptions": u32_schema(),
                }},
                "TrainingJob": training_job_schema(),
                "JobDetails": {"type": "object", "properties": {
                    "summary": reference("JobSummary"),
                    "job": reference("TrainingJob"),
                    "admission": {"type": "object", "nullable": true, "properties": {
                        "pool": {"type": "string"}, "gpuType": {"type": "string", "nullable": true},
                        "admittedAt": {"type": "string", "format": "date-time"},
                        "placements": {"type": "array", "items": {"type": "object", "properties": {
                            "role": {"type": "string"}, "index": u32_schema(), "node": {"type": "string"},
                            "gpuIndices": {"type": "array", "items": u32_schema()}}}},
                    }},
                    "replicas": {"type": "array", "items": replica_info},
                    "events": {"type": "array", "items": {"type": "object", "properties": {
                        "time": {"type": "string", "format": "date-time"}, "namespace": {"type": "string"}, "job": {"type": "string"},
                        "type": {"type": "string", "enum": ["Normal", "Warning"]}, "reason": {"type": "string"}, "message": {"type": "string"}}}},
                    "pendingReason": {"type": "string", "nullable": true},
                }},
                "QueueInfo": {"type": "object", "properties": {
                    "name": {"type": "string"}, "cohort": {"type": "string", "nullable": true}, "weight": u32_schema(),
                    "pending": u32_schema(), "admitted": u32_schema(),
                    "usage": {"type": "array", "items": {"type": "object", "properties": {
                        "pool": {"type": "string"}, "used": reference("ResourceAmount"),
                        "nominal": {"allOf": [reference("QuotaLimits")], "nullable": true, "description": "absent: the queue has no quota in this pool"},
                        "borrowingLimit": {"allOf": [reference("QuotaLimits")], "description": "absent: no limit"}}}},
                }},
                "ResourceAmount": {"type": "object", "properties": {
                    "gpu": u64_schema(), "cpuMilli": u64_schema(), "memoryBytes": u64_schema()}},
                "QuotaLimits": {"type": "object", "description": "A quota; a resource that is absent is unlimited", "properties": {
                    "gpu": u64_schema(), "cpuMilli": u64_schema(), "memoryBytes": u64_schema()}},
                "NodeInfo": {"type": "object", "properties": {
                    "name": {"type": "string"}, "pool": {"type": "string", "nullable": true}, "gpuType": {"type": "string", "nullable": true},
                    "gpus": {"type": "array", "items": {"type": "object", "properties": {
                        "index": u32_schema(), "name": {"type": "string"}, "memoryBytes": {"type": "integer", "format": "uint64", "nullable": true},
                        "usedBy": {"type": "string", "nullable": true, "description": "namespace/job"}}}},
                    "cpuMilli": u64_schema(), "memoryBytes": u64_schema(),
                    "cpuMilliAllocated": u64_schema(), "memoryBytesAllocated": u64_schema(),
                    "extended": {"type": "object", "additionalProperties": u64_schema()},
                }},
                "ReplicaUsage": {"type": "object", "properties": {
                    "namespace": {"type": "string"}, "job": {"type": "string"}, "replica": {"type": "string"},
                    "pid": {"type": "integer", "format": "uint32", "nullable": true}, "cpuSeconds": {"type": "number", "minimum": 0, "nullable": true},
                    "memoryBytes": {"type": "integer", "format": "uint64", "nullable": true}, "gpus": {"type": "array", "items": u32_schema()},
                }},
            },
        },
    });
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        paths.insert(
            "/api/v1/namespaces/{namespace}/trainingjobs/{name}/replicas/{replica}/exec".into(),
            exec_op,
        );
        let (usage, series) = history_paths();
        paths.insert("/api/v1/usage".into(), usage);
        paths.insert("/api/v1/series".into(), series);
        for (path, op) in pipeline_paths().into_iter().chain(serving::paths()) {
            paths.insert(path.into(), op);
        }
    }
    if let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    {
        schemas.insert("Pipeline".into(), json!({"type": "object", "description": "A Pipeline (apiVersion corral.dev/v1alpha1) kept for runs to name (`spec.pipelineRef`): its spec is a PipelineRun's pipelineSpec; `metadata.generation` counts its versions (docs/pipelines.md)"}));
        schemas.insert("PipelineRun".into(), json!({"type": "object", "description": "A PipelineRun (apiVersion corral.dev/v1alpha1) with its status: the run's phase and each step's (docs/pipelines.md)"}));
        schemas.insert("PipelineRunDetails".into(), json!({"type": "object", "properties": {
            "run": reference("PipelineRun"),
            "steps": {"type": "array", "items": {"type": "object", "properties": {
                "name": {"type": "string"},
                "phase": {"type": "string", "enum": ["Pending", "Running", "Succeeded", "Failed", "Skipped", "Cached"]},
                "needs": {"type": "array", "items": {"type": "string"}},
                "job": {"type": "string"}, "jobState": {"type": "string"},
                "cachedFrom": {"type": "string", "description": "`<run>/<step>` whose outputs it reuses"},
                "message": {"type": "string"}}}},
            "events": {"type": "array", "items": {"type": "object"}},
        }}));
        schemas.insert("ServedModel".into(), serving::served_model_schema());
        schemas.insert("ServedModelDetails".into(), serving::served_model_details());
        for (name, schema) in history_schemas() {
            schemas.insert(name.into(), schema);
        }
    }
    doc
}

fn time_param(name: &str, default: &str) -> Value {
    json!({"name": name, "in": "query", "schema": {"type": "string"},
        "description": format!("an RFC 3339 time or a date (YYYY-MM-DD, UTC midnight); default: {default}")})
}

/// The usage ledger and the history store's series.
/// The pipeline run routes (docs/pipelines.md).
fn pipeline_paths() -> Vec<(&'static str, Value)> {
    let ns = json!({"$ref": "#/components/parameters/namespace"});
    let changed = json_response("Deleted", json!({"type": "object"}));
    vec![
        (
            "/api/v1/namespaces/{namespace}/pipelineruns",
            json!({
                "post": {
                    "operationId": "submitPipelineRuns",
                    "summary": "Submit PipelineRuns (the same documents, and the same answer, as POST trainingjobs)",
                    "parameters": [ns.clone()],
                    "requestBody": {"required": true, "content": {
                        "application/yaml": {"schema": {"type": "string"}},
                        "application/json": {"schema": reference("PipelineRun")},
                    }},
                    "responses": responses(("201", json_response("Submitted", reference("Submitted"))), &[400, 401, 403, 409, 413]),
                },
                "get": {
                    "operationId": "listPipelineRuns",
                    "summary": "The namespace's pipeline runs with their status",
                    "parameters": [ns],
                    "responses": responses(("200", json_response("Runs", list_of("PipelineRun"))), &[401, 403]),
                },
            }),
        ),
        (
            "/api/v1/namespaces/{namespace}/pipelineruns/{name}",
            json!({
                "get": job_op("getPipelineRun", "The run with its status", json_response("The run", reference("PipelineRun")), &[]),
                "delete": job_op("deletePipelineRun", "Delete a run and its steps' jobs (its artifacts stay, for the cache)", changed.clone(), &[]),
            }),
        ),
        (
            "/api/v1/namespaces/{namespace}/pipelineruns/{name}/describe",
            json!({
                "get": job_op("describePipelineRun", "Each step in DAG order: phase, what it needs, its job and the job's state; the run's events", json_response("Details", reference("PipelineRunDetails")), &[]),
            }),
        ),
        (
            "/api/v1/pipelineruns",
            json!({
                "get": {
                    "operationId": "listAllPipelineRuns",
                    "summary": "Pipeline runs of every namespace the token may see",
                    "responses": responses(("200", json_response("Runs", list_of("PipelineRun"))), &[401]),
                },
            }),
        ),
        (
            "/api/v1/namespaces/{namespace}/pipelines",
            json!({
                "post": {
                    "operationId": "submitPipelines",
                    "summary": "Submit Pipelines (the same documents, and the same answer, as POST trainingjobs): a new name is stored, a changed one is a new version (generation)",
                    "parameters": [ns.clone()],
                    "requestBody": {"required": true, "content": {
                        "application/yaml": {"schema": {"type": "string"}},
                        "application/json": {"schema": reference("Pipeline")},
                    }},
                    "responses": responses(("201", json_response("Submitted", reference("Submitted"))), &[400, 401, 403, 409, 413]),
                },
                "get": {
                    "operationId": "listPipelines",
                    "summary": "The namespace's stored pipelines",
                    "parameters": [ns],
                    "responses": responses(("200", json_response("Pipelines", list_of("Pipeline"))), &[401, 403]),
                },
            }),
        ),
        (
            "/api/v1/namespaces/{namespace}/pipelines/{name}",
            json!({
                "get": job_op("getPipeline", "The stored pipeline (its current version)", json_response("The pipeline", reference("Pipeline")), &[]),
                "delete": job_op("deletePipeline", "Delete a stored pipeline, every version of it and their code snapshots (the runs made from it keep their copies)", changed, &[]),
            }),
        ),
        (
            "/api/v1/namespaces/{namespace}/pipelines/{name}/versions",
            json!({
                "get": job_op("listPipelineVersions", "Every kept version of a stored pipeline, oldest first (the current one last); a run names one by spec.pipelineRef.generation", json_response("Pipeline versions", list_of("Pipeline")), &[]),
            }),
        ),
        (
            "/api/v1/pipelines",
            json!({
                "get": {
                    "operationId": "listAllPipelines",
                    "summary": "Stored pipelines of every namespace the token may see",
                    "responses": responses(("200", json_response("Pipelines", list_of("Pipeline"))), &[401]),
                },
            }),
        ),
    ]
}

fn history_paths() -> (Value, Value) {
    let usage = json!({"get": {
        "operationId": "usage",
        "summary": "The usage ledger: GPU-seconds, GPU-hours and CPU-seconds per period (UTC day or month), namespace, queue and GPU type (or per job), within [from, to); and each budgeted queue's standing. A namespace's token sees its own namespace only",
        "parameters": [
            time_param("from", "the start of this month"),
            time_param("to", "now"),
            {"name": "period", "in": "query", "schema": {"type": "string", "enum": ["day", "month"]}, "description": "default: day"},
            {"name": "by", "in": "query", "schema": {"type": "string", "enum": ["queue", "job"]}, "description": "default: queue"},
            {"name": "namespace", "in": "query", "schema": {"type": "string"}, "description": "only this namespace (a namespace's token: its own, the default)"},
        ],
        "responses": responses(("200", json_response("Usage", reference("UsageReport"))), &[400, 401, 403]),
    }});
    let series = json!({"get": {
        "operationId": "series",
        "summary": "The history store's time series, one sample a minute, kept a week and capped: per GPU (kind=gpu), per running replica (kind=replica; a namespace's token sees its own namespace's) and GPUs used and free per GPU type (kind=gpus)",
        "parameters": [
            {"name": "kind", "in": "query", "required": true, "schema": {"type": "string", "enum": ["gpu", "replica", "gpus"]}},
            time_param("from", "an hour before `to`"),
            time_param("to", "now"),
            {"name": "namespace", "in": "query", "schema": {"type": "string"}, "description": "replicas of this namespace only"},
            {"name": "job", "in": "query", "schema": {"type": "string"}, "description": "replicas of this job of `namespace` only"},
        ],
        "responses": responses(("200", json_response("Series", reference("SeriesReport"))), &[400, 401, 403, 503]),
    }});
    (usage, series)
}

fn history_schemas() -> Vec<(&'static str, Value)> {
    let number = json!({"type": "number", "minimum": 0});
    vec![
        (
            "UsageRow",
            json!({"type": "object", "properties": {
            "period": {"type": "string", "description": "2026-11-26 (by day) or 2026-11 (by month), UTC"},
            "namespace": {"type": "string"}, "queue": {"type": "string"},
            "job": {"type": "string", "description": "namespace/name, in a report by job"},
            "gpuType": {"type": "string", "description": "empty for GPUs of nodes without a type"},
            "gpuSeconds": number, "gpuHours": number, "cpuSeconds": number}}),
        ),
        (
            "BudgetRow",
            json!({"type": "object", "properties": {
            "queue": {"type": "string"}, "period": {"type": "string", "enum": ["day", "week", "month"]},
            "budgetGpuHours": number, "usedGpuHours": number,
            "renewsAt": {"type": "string", "format": "date-time"}, "exhausted": {"type": "boolean"}}}),
        ),
        (
            "UsageReport",
            json!({"type": "object", "properties": {
            "from": {"type": "string", "format": "date-time"}, "to": {"type": "string", "format": "date-time"},
            "period": {"type": "string", "enum": ["day", "month"]}, "by": {"type": "string", "enum": ["queue", "job"]},
            "namespace": {"type": "string"},
            "items": {"type": "array", "items": reference("UsageRow")},
            "budgets": {"type": "array", "items": reference("BudgetRow")}}}),
        ),
        (
            "Series",
            json!({"type": "object", "properties": {
            "key": {"type": "string", "description": "gpu: node/index; replica: namespace/job/replica; gpus: the GPU type"},
            "namespace": {"type": "string"},
            "times": {"type": "array", "items": {"type": "integer", "format": "int64"}, "description": "Unix seconds, one a sampled minute"},
            "values": {"type": "object", "description": "gpu: utilizationPercent, memoryUsedBytes; replica: cpuCores, memoryBytes, gpuUtilizationPercent, gpuMemoryBytes; gpus: used, free. Each aligned with times, null where not read",
                "additionalProperties": {"type": "array", "items": {"type": "number", "nullable": true}}}}}),
        ),
        (
            "SeriesReport",
            json!({"type": "object", "properties": {
            "kind": {"type": "string"}, "from": {"type": "string", "format": "date-time"}, "to": {"type": "string", "format": "date-time"},
            "stepSeconds": u32_schema(), "retentionMinutes": {"type": "integer", "format": "int64"},
            "maxSamples": {"type": "integer", "format": "int64"},
            "series": {"type": "array", "items": reference("Series")}}}),
        ),
    ]
}
