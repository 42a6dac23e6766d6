//! The HTTP API's contract: malformed input and oversized bodies answer with JSON
//! errors and field paths, unknown jobs and routes are JSON 404s, and the OpenAPI
//! document lists every route.

use super::*;

pub(super) fn malformed_input_is_400_with_field_paths() -> TestResult {
    let c = TestCluster::start("")?;
    let url = c.url("/api/v1/namespaces/default/trainingjobs");
    let typo = "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {name: typo}
spec:
  framework: pytorch
  replicas:
    wokrer:
      count: 2
      template: {command: [python3, x.py]}
";
    let (status, body) = raw("POST", &url, None, Some(typo.as_bytes()))?;
    check(status == 400, format!("{status} {body}"))?;
    let v = json(&body)?;
    check(
        v.pointer("/error/code") == Some(&Value::from("Invalid")),
        body.clone(),
    )?;
    let fields = v
        .pointer("/error/fields")
        .and_then(Value::as_array)
        .ok_or("no fields")?;
    check(
        fields.iter().any(|f| {
            f.get("path")
                .and_then(Value::as_str)
                .is_some_and(|p| p.starts_with("spec.replicas"))
        }),
        format!("no spec.replicas field error: {body}"),
    )?;
    // The client prints `path: message` lines.
    let err = c
        .client(None)
        .submit("default", typo)
        .err()
        .ok_or("accepted")?;
    check(
        err.to_string()
            .lines()
            .any(|l| l.trim_start().starts_with("spec.replicas")),
        err.to_string(),
    )?;

    for bad in [
        "spec: [unclosed",
        "",
        "kind: TrainingJob\n",
        "\u{0}\u{1}binary",
    ] {
        let (status, body) = raw("POST", &url, None, Some(bad.as_bytes()))?;
        check(
            status == 400 && error_code(&body) == "Invalid",
            format!("{bad:?}: {status} {body}"),
        )?;
    }
    let (status, body) = raw("POST", &url, None, Some(&[0xff, 0xfe, 0x00]))?;
    check(status == 400, format!("not UTF-8: {status} {body}"))?;
    let (status, body) = raw(
        "GET",
        &c.url("/api/v1/namespaces/Not_A_Label/trainingjobs"),
        None,
        None,
    )?;
    check(status == 200 || status == 400, format!("{status} {body}"))?;
    Ok(())
}

pub(super) fn huge_body_is_413_with_json() -> TestResult {
    let c = TestCluster::start("")?;
    let mut huge = String::from("# padding\n");
    while huge.len() <= corral_server::DEFAULT_BODY_LIMIT + 1024 {
        huge.push_str("# aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n");
    }
    // Announced by Content-Length: refused before the body is read.
    let (status, body) = raw_headers_only(
        c.server.addr(),
        "/api/v1/namespaces/default/trainingjobs",
        huge.len(),
    )?;
    check(status == 413, format!("{status} {body}"))?;
    check(error_code(&body) == "PayloadTooLarge", body.clone())?;
    let err = c
        .client(None)
        .submit("default", &huge)
        .err()
        .ok_or("accepted")?;
    check(
        err.status() == Some(413) && err.to_string().contains("larger than"),
        err.to_string(),
    )?;
    Ok(())
}

pub(super) fn openapi_lists_every_route() -> TestResult {
    let c = TestCluster::start("")?;
    let (status, body) = raw("GET", &c.url("/openapi.json"), None, None)?;
    check(status == 200, format!("{status}"))?;
    let doc = json(&body)?;
    check(
        doc.get("openapi")
            .and_then(Value::as_str)
            .is_some_and(|v| v.starts_with("3.")),
        "not OpenAPI 3",
    )?;
    let paths = doc
        .get("paths")
        .and_then(Value::as_object)
        .ok_or("no paths")?;
    let mut documented = 0;
    for (path, ops) in paths {
        for method in ops.as_object().ok_or("bad path item")?.keys() {
            documented += 1;
            check(
                corral_server::openapi::ROUTES.contains(&(method.as_str(), path.as_str())),
                format!("{method} {path} is documented but not in ROUTES"),
            )?;
        }
    }
    check(
        documented == corral_server::openapi::ROUTES.len(),
        "ROUTES and the document differ",
    )?;
    // Every route is served (no fallback 404 "no route", no 405).
    for (method, path) in corral_server::openapi::ROUTES {
        let mut url = c.url(
            &path
                .replace("{namespace}", "default")
                .replace("{name}", "nothing"),
        );
        // A watch streams until told to stop.
        if path.ends_with("/watch") {
            url.push_str("?timeoutSeconds=1");
        }
        let body = (*method == "post").then_some(&b"x: 1"[..]);
        let (status, text) = raw(&method.to_uppercase(), &url, None, body)?;
        check(
            status != 405 && !text.contains("no route"),
            format!("{method} {path}: {status} {text}"),
        )?;
    }
    // Every $ref resolves.
    let text = body.as_str();
    for part in text.split("\"$ref\":\"#/").skip(1) {
        let target = part.split('"').next().unwrap_or_default();
        check(
            doc.pointer(&format!("/{target}")).is_some(),
            format!("dangling $ref {target}"),
        )?;
    }
    // Every integer has a documented range.
    fn unranged(v: &Value, at: &str, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if m.get("type").and_then(Value::as_str) == Some("integer")
                    && !(m.contains_key("minimum") && m.contains_key("maximum"))
                {
                    out.push(at.to_string());
                }
                for (k, c) in m {
                    unranged(c, &format!("{at}/{k}"), out);
                }
            }
            Value::Array(a) => {
                for (i, c) in a.iter().enumerate() {
                    unranged(c, &format!("{at}/{i}"), out);
                }
            }
            _ => {}
        }
    }
    let mut missing = Vec::new();
    unranged(&doc, "", &mut missing);
    check(
        missing.is_empty(),
        format!("integers without minimum and maximum: {missing:?}"),
    )?;
    let quota = doc.pointer("/components/schemas/QuotaLimits/description");
    check(
        quota
            .and_then(Value::as_str)
            .is_some_and(|d| d.contains("absent is unlimited")),
        "unlimited quotas are absent values",
    )?;
    // A schema linter: openapi-spec-validator (pip), as CI installs it.
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("openapi.json");
    std::fs::write(&path, &body)?;
    let lint = std::process::Command::new("python3")
        .args(["-m", "openapi_spec_validator"])
        .arg(&path)
        .output();
    let lint = match lint {
        Ok(o) if String::from_utf8_lossy(&o.stderr).contains("No module named") => None,
        Ok(o) => Some(o),
        Err(_) => None,
    };
    let Some(lint) = lint else {
        let required = std::env::var("CORRAL_REQUIRE_OPENAPI_LINT").as_deref() == Ok("1");
        check(
            !required,
            "openapi-spec-validator is not installed (pip install openapi-spec-validator)",
        )?;
        common::prerequisite(
            false,
            "openapi-spec-validator is not installed (pip install openapi-spec-validator)",
        );
        return Ok(());
    };
    check(
        lint.status.success(),
        format!(
            "openapi-spec-validator: {}{}",
            String::from_utf8_lossy(&lint.stdout),
            String::from_utf8_lossy(&lint.stderr)
        ),
    )?;
    Ok(())
}

pub(super) fn unknown_job_and_route_are_json_404() -> TestResult {
    let c = TestCluster::start("")?;
    let (status, body) = raw(
        "GET",
        &c.url("/api/v1/namespaces/default/trainingjobs/ghost"),
        None,
        None,
    )?;
    check(
        status == 404 && error_code(&body) == "NotFound",
        format!("{status} {body}"),
    )?;
    let (status, body) = raw("GET", &c.url("/api/v1/nothing"), None, None)?;
    check(
        status == 404 && error_code(&body) == "NotFound",
        format!("{status} {body}"),
    )?;
    let (status, body) = raw("DELETE", &c.url("/api/v1/queues"), None, None)?;
    check(
        status == 405 && error_code(&body) == "MethodNotAllowed",
        format!("{status} {body}"),
    )?;
    let (status, body) = raw("GET", &c.url("/healthz"), None, None)?;
    check(status == 200, format!("{status} {body}"))?;
    let err = Client::new("http://127.0.0.1:1", None)
        .list(None)
        .err()
        .ok_or("connected to port 1")?;
    check(err.to_string().contains("corral up"), err.to_string())?;
    Ok(())
}
