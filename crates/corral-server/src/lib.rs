//! HTTP API (JSON, OpenAPI), Prometheus /metrics and the `corral up` server over the embedded
//! cluster of corral-local.
