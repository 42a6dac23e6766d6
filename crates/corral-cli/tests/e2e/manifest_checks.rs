//! What a manifest is checked for: `validate` and `submit` agree on bad manifests, GPU
//! type names and capacity warnings (with `doctor` and `plan` on the same machine), and
//! what Kubernetes accepts but Corral does not honour is a warning.

use super::*;

/// Every manifest of the shared table: `submit` refuses it with every problem at once, each
/// with its field path; `validate` against the same server prints exactly what `submit`
/// prints; neither stores anything. Offline, `validate` says which checks it could not run.
pub(super) fn validate_and_submit_agree_on_bad_manifests() -> TestResult {
    use common::bad_manifests::{CASES, CLUSTER};
    use corral_server::api_client::ClientError;
    let c = TestCluster::start(CLUSTER)?;
    let client = c.client(None);
    let dir = tempfile::tempdir()?;
    let ns = remote::NamespaceArgs::default();
    let mut messages = String::new();
    for case in CASES {
        let file = dir
            .path()
            .join(format!("{}.yaml", case.name.replace(' ', "-")));
        std::fs::write(&file, case.yaml)?;
        let file = file.display().to_string();

        let err = match client.submit("default", case.yaml) {
            Ok(r) => return Err(format!("{}: submit accepted it: {r:?}", case.name).into()),
            Err(e) => e,
        };
        let ClientError::Api { status, error } = &err else {
            return Err(format!("{}: {err}", case.name).into());
        };
        check(*status == 400, format!("{}: status {status}", case.name))?;
        messages.push_str(&format!("## {}\n{err}\n\n", case.name));
        let mut got: Vec<String> = error
            .fields
            .iter()
            .map(|f| match f.document {
                Some(d) if case.paths.iter().any(|p| p.contains(':')) => format!("{d}:{}", f.path),
                _ => f.path.clone(),
            })
            .collect();
        got.sort();
        let mut want: Vec<String> = case.paths.iter().map(|p| p.to_string()).collect();
        want.sort();
        check(
            got == want,
            format!("{}: submit named {got:?}, not {want:?}:\n{err}", case.name),
        )?;

        let report =
            manifests::validate_report(std::slice::from_ref(&file), true, Some(&client), &ns);
        check(report.failed, format!("{}: validate passed it", case.name))?;
        check(
            report.err == format!("{file}: {err}\n"),
            format!(
                "{}: validate and submit differ:\nvalidate: {}\nsubmit:   {file}: {err}",
                case.name, report.err
            ),
        )?;
    }
    check(
        client.list(Some("default"))?.is_empty(),
        "a refused submission stored nothing",
    )?;
    insta::assert_snapshot!("bad_manifests", messages);

    // Offline: what the files alone show, and a note on what could not be checked.
    let file = dir.path().join("offline.yaml");
    std::fs::write(&file, CASES[0].yaml)?;
    let report = manifests::validate_report(&[file.display().to_string()], false, None, &ns);
    check(!report.failed, format!("offline: {report:?}"))?;
    check(
        report.err.contains("note: checked offline (--offline), so these checks did not run: that the priority class and queue exist"),
        format!("offline note: {}", report.err),
    )?;
    Ok(())
}

fn gpu_job(name: &str, gpus: u32, types: &str) -> String {
    format!(
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  framework: generic
  replicas:
    worker:
      count: 1
      restartPolicy: Never
      resources: {{cpu: 100m, memory: 64Mi, gpu: {gpus}, gpuTypes: [{types}]}}
      template: {{command: [sleep, \"30\"]}}
"
    )
}

/// Issue 16 on a machine shaped like the one it was found on: one GPU that the node
/// override spells as NVML does. Jobs asking for the product label or the alias run; an
/// A100 job is refused saying what exists; a 2-GPU replica is refused (by `validate`
/// against the server and by the submit alike) naming the field and the shortfall; `corral
/// doctor` reports every area and who holds the data directory; `corral plan` sees this
/// machine as `corral up` does.
pub(super) fn gpu_type_names_capacity_warnings_doctor_and_plan() -> TestResult {
    let c = TestCluster::start(
        "kind: CorralConfig\nnode: {gpus: 1, gpuType: NVIDIA H100 80GB HBM3, cpu: \"4\", memory: 8Gi}\n",
    )?;
    let client = c.client(None);
    let nodes = client.nodes()?;
    check(
        nodes[0].gpu_type.as_deref() == Some("NVIDIA-H100-80GB-HBM3"),
        format!("the node's type is canonical: {:?}", nodes[0].gpu_type),
    )?;

    let err = client
        .submit("default", &gpu_job("a100", 1, "A100"))
        .err()
        .ok_or("an A100 job on an H100 machine was accepted")?
        .to_string();
    check(
        err.contains("this cluster has GPU type NVIDIA-H100-80GB-HBM3 (1 per node)"),
        format!("the refusal says what exists: {err}"),
    )?;

    let dir = tempfile::tempdir()?;
    let ns = remote::NamespaceArgs::default();
    let two = dir.path().join("two.yaml");
    std::fs::write(&two, gpu_job("two", 2, "H100"))?;
    let report = manifests::validate_report(&[two.display().to_string()], true, Some(&client), &ns);
    // The machine can never hold it: `validate` against the server refuses it as the
    // submit does, naming the field, in the control plane's words.
    let words = "a replica needs 2 GPUs but the largest node has 1; use at most 1 per replica, and more replicas";
    check(
        report.failed,
        format!("a 2-GPU replica on a 1-GPU machine is refused: {report:?}"),
    )?;
    check(
        report.err.contains("spec.replicas.worker.resources.gpu") && report.err.contains(words),
        format!("validate names the field and the shortfall: {}", report.err),
    )?;
    let err = client
        .submit("default", &gpu_job("two", 2, "H100"))
        .err()
        .ok_or("a 2-GPU replica on a 1-GPU machine was accepted")?
        .to_string();
    check(
        err.contains("spec.replicas.worker.resources.gpu") && err.contains(words),
        format!("the submit refuses it in the same words: {err}"),
    )?;

    for (name, types) in [("by-label", "NVIDIA-H100-80GB-HBM3"), ("by-alias", "h100")] {
        client.submit("default", &gpu_job(name, 1, types))?;
    }
    wait_for_state(
        &client,
        "default",
        "by-label",
        Duration::from_secs(20),
        |s| s == JobState::Running,
    )?;
    client.delete("default", "by-label")?;
    wait_for_state(
        &client,
        "default",
        "by-alias",
        Duration::from_secs(20),
        |s| s == JobState::Running,
    )?;

    // The server holds its data directory: doctor says who, with the fix.
    let data = c.dir.path().join("data");
    let r = doctor::report(&doctor::DoctorArgs {
        data_dir: Some(data.clone()),
        config: None,
        output: None,
    })?;
    for area in ["gpu", "cgroups", "containers", "ports", "data"] {
        check(
            r.findings.iter().any(|f| f.area == area),
            format!("doctor reports {area}: {}", r.text()),
        )?;
    }
    let held = r
        .findings
        .iter()
        .find(|f| f.area == "data")
        .ok_or("no data finding")?;
    check(
        held.what.contains(&format!("(pid {})", std::process::id())) && held.fix.is_some(),
        format!("doctor names the holder: {held:?}"),
    )?;
    let json = serde_json::to_value(&r)?;
    check(json["allOk"].is_boolean(), format!("{json}"))?;
    check(
        r.text().lines().all(|l| {
            l.starts_with("OK ") || l.starts_with("WARN") || l.trim_start().starts_with("fix:")
        }),
        r.text(),
    )?;

    // plan with no pools: this machine, from the embedded shell's inventory.
    let job = dir.path().join("cpu.yaml");
    std::fs::write(
        &job,
        parked_job("cpu-only").replace("  runPolicy: {suspend: true}\n", ""),
    )?;
    let out = plan::run(&plan::PlanArgs {
        files: &[job.display().to_string()],
        config: None,
        nodes: &[],
        default_nodes: 1,
        node_cpu: 8,
        node_memory_gib: 16,
    })?;
    let inv = corral_local::inventory::inventory();
    let want = if inv.gpus.is_empty() {
        "no GPUs".to_string()
    } else {
        format!("{} x {}", inv.gpus.len(), inv.gpus[0].gpu_type)
    };
    check(
        out.contains(&format!("this machine: {} CPUs", inv.cpus)) && out.contains(&want),
        format!("plan sees this machine as up does ({want}):\n{out}"),
    )?;
    Ok(())
}

pub(super) fn what_kubernetes_accepts_but_is_not_honoured_is_a_warning() -> TestResult {
    let c = TestCluster::start("")?;
    // Kubeflow's own shape: tolerations, a node selector, a volume, a gang minimum.
    let manifest = "apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: tolerated}
spec:
  runPolicy:
    suspend: true
    schedulingPolicy: {scheduleTimeoutSeconds: 60}
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          tolerations: [{key: gpu, operator: Exists}]
          nodeSelector: {disk: ssd}
          volumes: [{name: data, emptyDir: {}}]
          containers:
            - name: pytorch
              image: busybox
              command: [sleep, '1']
              ports: [{name: pytorchjob-port, containerPort: 23456}]
";
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut response = agent
        .post(c.url("/api/v1/namespaces/default/trainingjobs"))
        .header("Content-Type", "application/yaml")
        .send(manifest)?;
    let status = response.status().as_u16();
    let headers: Vec<String> = response
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_string))
        .collect();
    let body = json(&response.body_mut().read_to_string()?)?;
    check(status == 201, format!("{status}: {body}"))?;
    let warnings: Vec<String> = body["warnings"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|w| w.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    for path in [
        "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds",
        "spec.replicas.master.template.podTemplate.spec.tolerations",
        "spec.replicas.master.template.podTemplate.spec.nodeSelector",
        "spec.replicas.master.template.podTemplate.spec.volumes",
    ] {
        check(
            warnings
                .iter()
                .any(|w| w.starts_with("TrainingJob tolerated: ") && w.contains(path)),
            format!("no warning for {path}: {warnings:?}"),
        )?;
    }
    // The container's port is Corral's to choose: not worth a warning.
    check(
        !warnings.iter().any(|w| w.contains("ports")),
        format!("{warnings:?}"),
    )?;
    check(
        headers.len() == warnings.len() && headers.iter().all(|h| h.starts_with("299 - \"")),
        format!("Warning headers: {headers:?}"),
    )?;
    let d = c.client(None).describe("default", "tolerated")?;
    let events = d
        .events
        .iter()
        .filter(|e| {
            e.reason == "FieldIgnored" && e.type_ == corral_core::control::EventType::Warning
        })
        .count();
    check(events == warnings.len(), format!("{:#?}", d.events))?;
    // A dry run (`corral validate` against the server) says the same.
    let dry = c.client(None).submit_dry_run(
        "default",
        &manifest.replace("name: tolerated", "name: tolerated-too"),
    )?;
    check(
        dry.len() == 1 && dry[0].warnings.len() == warnings.len(),
        format!("{dry:?}"),
    )?;
    Ok(())
}
