//! Golden and field-by-field tests of the launch contract (`corral_core::launch`) against the
//! formats the Kubeflow operators write. Each test cites the source file it follows:
//! - kubeflow/training-operator pkg/controller.v1/tensorflow/tensorflow.go (TF_CONFIG)
//! - kubeflow/training-operator pkg/controller.v1/pytorch/envvar.go, master.go, elastic.go
//! - kubeflow/mpi-operator pkg/controller/mpi_job_controller.go (hostfile, OMPI/Intel/MPICH)
//! - kubeflow/training-operator pkg/controller.v1/jax/envvar.go
//! - kubeflow/training-operator pkg/controller.v1/xgboost/pod.go
//!
//! Golden files live in tests/golden/; run with CORRAL_UPDATE_GOLDEN=1 to rewrite them after
//! a deliberate change (and review the diff).

use std::collections::BTreeMap;
use std::path::PathBuf;

use corral_api::training_job::{
    ElasticPolicy, EnvVar, Framework, MpiImplementation, MpiOptions, ReplicaSpec, ReplicaTemplate,
    Role, TrainingJob, TrainingJobSpec,
};
use corral_core::launch::{
    Addresses, Endpoint, LaunchError, LaunchOptions, LaunchSpec, kubernetes_host, mpi_hostfile,
    replica_env, tf_config,
};
use corral_core::lifecycle::ReplicaId;
use serde_json::Value;

fn job(name: &str, framework: Framework, roles: &[(Role, u32)]) -> TrainingJob {
    let replicas = roles
        .iter()
        .map(|&(role, count)| {
            (
                role,
                Box::new(ReplicaSpec {
                    count,
                    resources: Default::default(),
                    template: ReplicaTemplate::default(),
                    restart_policy: None,
                }),
            )
        })
        .collect();
    let mut j = TrainingJob::new(
        name,
        TrainingJobSpec {
            framework,
            replicas,
            run_policy: Default::default(),
            success_policy: None,
            queue: None,
            priority_class: None,
            elastic: None,
            nproc_per_node: None,
            mpi: None,
            port: None,
        },
    );
    j.metadata.namespace = Some("ml".to_string());
    j
}

fn rid(role: Role, index: u32) -> ReplicaId {
    ReplicaId::new(role, index)
}

/// Every replica's launch spec, rendered as `# name (endpoint)` then `NAME=value` lines and
/// files, in replica order.
fn render_all(job: &TrainingJob, addrs: &Addresses) -> String {
    let mut out = String::new();
    for (id, _) in addrs.iter() {
        let spec = replica_env(job, *id, addrs, &LaunchOptions::default()).expect("launch spec");
        out.push_str(&render(&spec));
    }
    out
}

fn render(spec: &LaunchSpec) -> String {
    let mut out = format!("# {} ({})\n", spec.name, spec.endpoint);
    for v in &spec.env {
        out.push_str(&format!(
            "{}={}\n",
            v.name,
            v.value.as_deref().unwrap_or("<valueFrom>")
        ));
    }
    for f in &spec.files {
        out.push_str(&format!(
            "--- file {} (mode {:o})\n{}",
            f.path, f.mode, f.contents
        ));
    }
    out.push('\n');
    out
}

fn golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("CORRAL_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with CORRAL_UPDATE_GOLDEN=1 to create it",
            path.display()
        )
    });
    if expected != actual {
        let mut diff = String::new();
        let (e, a): (Vec<_>, Vec<_>) = (expected.lines().collect(), actual.lines().collect());
        for i in 0..e.len().max(a.len()) {
            match (e.get(i), a.get(i)) {
                (Some(x), Some(y)) if x == y => {}
                (x, y) => diff.push_str(&format!(
                    "line {}:\n  - {}\n  + {}\n",
                    i + 1,
                    x.unwrap_or(&"<none>"),
                    y.unwrap_or(&"<none>")
                )),
            }
        }
        panic!("{} differs from the output:\n{diff}", path.display());
    }
}

fn env_of(job: &TrainingJob, id: ReplicaId, addrs: &Addresses) -> BTreeMap<String, String> {
    replica_env(job, id, addrs, &LaunchOptions::default())
        .expect("launch spec")
        .env
        .into_iter()
        .map(|v| (v.name, v.value.unwrap_or_default()))
        .collect()
}

// Source: kubeflow/training-operator pkg/controller.v1/tensorflow/tensorflow.go
// (genTFConfigJSONStr, genClusterSpec): cluster = role -> ["<job>-<role>-<i>.<ns>.svc:<port>"]
// without the evaluator, task = {type, index}, environment = "cloud"; Go marshals the
// cluster map with sorted keys and the structs in field order.
#[test]
fn tf_config_chief_ps_worker_evaluator() {
    let j = job(
        "mnist",
        Framework::TensorFlow,
        &[
            (Role::Chief, 1),
            (Role::Ps, 2),
            (Role::Worker, 2),
            (Role::Evaluator, 1),
        ],
    );
    let addrs = Addresses::kubernetes(&j, None);
    golden("tf_chief_ps_worker_evaluator.txt", &render_all(&j, &addrs));

    let raw = tf_config(&j, rid(Role::Worker, 1), &addrs).unwrap();
    assert_eq!(
        raw,
        concat!(
            r#"{"cluster":{"chief":["mnist-chief-0.mnist.ml.svc:2222"],"#,
            r#""ps":["mnist-ps-0.mnist.ml.svc:2222","mnist-ps-1.mnist.ml.svc:2222"],"#,
            r#""worker":["mnist-worker-0.mnist.ml.svc:2222","mnist-worker-1.mnist.ml.svc:2222"]},"#,
            r#""task":{"type":"worker","index":1},"environment":"cloud"}"#
        )
    );
    for (role, count) in [
        (Role::Chief, 1),
        (Role::Ps, 2),
        (Role::Worker, 2),
        (Role::Evaluator, 1),
    ] {
        for index in 0..count {
            let env = env_of(&j, rid(role, index), &addrs);
            let v: Value = serde_json::from_str(&env["TF_CONFIG"]).expect("TF_CONFIG is JSON");
            let top: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(top, ["cluster", "task", "environment"]);
            let cluster = v["cluster"].as_object().unwrap();
            let roles: Vec<&str> = cluster.keys().map(String::as_str).collect();
            assert_eq!(
                roles,
                ["chief", "ps", "worker"],
                "evaluator is not in the cluster"
            );
            assert_eq!(cluster["ps"][1], "mnist-ps-1.mnist.ml.svc:2222");
            assert_eq!(cluster["worker"].as_array().unwrap().len(), 2);
            assert_eq!(v["task"]["type"], role.as_str());
            assert_eq!(v["task"]["index"], index);
            assert_eq!(v["environment"], "cloud");
        }
    }
}

// Source: kubeflow/training-operator pkg/controller.v1/tensorflow/tfjob_controller.go
// (isDistributed): a single replica gets no TF_CONFIG.
#[test]
fn tf_single_replica_gets_no_tf_config() {
    let j = job("one", Framework::TensorFlow, &[(Role::Worker, 1)]);
    let addrs = Addresses::kubernetes(&j, None);
    assert!(!env_of(&j, rid(Role::Worker, 0), &addrs).contains_key("TF_CONFIG"));
}

// Source: kubeflow/training-operator pkg/controller.v1/pytorch/envvar.go (setPodEnv:
// WORLD_SIZE = replicas x int(nprocPerNode), RANK = index (+1 for workers), PET_NODE_RANK,
// PET_NPROC_PER_NODE, PET_NNODES = replicas when not elastic) and master.go (MASTER_PORT,
// MASTER_ADDR = <job>-master-0, plus the PET_MASTER_* forms torchrun reads).
#[test]
fn pytorch_static_env() {
    let mut j = job(
        "ddp",
        Framework::PyTorch,
        &[(Role::Master, 1), (Role::Worker, 2)],
    );
    j.spec.nproc_per_node = Some("8".to_string());
    let addrs = Addresses::kubernetes(&j, None);
    golden("pytorch_static.txt", &render_all(&j, &addrs));

    let env = env_of(&j, rid(Role::Worker, 1), &addrs);
    assert_eq!(env["MASTER_ADDR"], "ddp-master-0.ddp.ml.svc");
    assert_eq!(env["MASTER_PORT"], "23456");
    assert_eq!(env["PET_MASTER_ADDR"], env["MASTER_ADDR"]);
    assert_eq!(env["PET_MASTER_PORT"], "23456");
    assert_eq!(env["WORLD_SIZE"], "24");
    assert_eq!(env["RANK"], "2");
    assert_eq!(env["PET_NODE_RANK"], "2");
    assert_eq!(env["PET_NNODES"], "3");
    assert_eq!(env["PET_NPROC_PER_NODE"], "8");
    assert!(!env.contains_key("PET_RDZV_ENDPOINT"));
    assert_eq!(env_of(&j, rid(Role::Master, 0), &addrs)["RANK"], "0");
}

// Source: kubeflow/training-operator pkg/controller.v1/pytorch/elastic.go
// (PET_RDZV_ENDPOINT = <rdzvHost or <job>-worker-0>:<rdzvPort or worker port>,
// PET_RDZV_BACKEND default c10d, PET_NNODES = min:max, PET_MAX_RESTARTS, PET_RDZV_ID,
// PET_RDZV_CONF = k=v,k=v).
#[test]
fn pytorch_elastic_env() {
    let mut j = job("elastic", Framework::PyTorch, &[(Role::Worker, 2)]);
    j.spec.elastic = Some(ElasticPolicy {
        min_replicas: Some(1),
        max_replicas: Some(4),
        rdzv_id: Some("run-7".to_string()),
        rdzv_conf: [("join_timeout", "600"), ("last_call_timeout", "30")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        max_restarts: Some(3),
        ..Default::default()
    });
    j.spec.nproc_per_node = Some("4".to_string());
    let addrs = Addresses::kubernetes(&j, None);
    // Replicas up to max exist as addresses (the job may grow).
    assert!(addrs.get(rid(Role::Worker, 3)).is_some());
    golden("pytorch_elastic.txt", &render_all(&j, &addrs));

    let env = env_of(&j, rid(Role::Worker, 3), &addrs);
    assert_eq!(env["PET_NNODES"], "1:4");
    assert_eq!(
        env["PET_RDZV_ENDPOINT"],
        "elastic-worker-0.elastic.ml.svc:23456"
    );
    assert_eq!(env["PET_RDZV_BACKEND"], "c10d");
    assert_eq!(env["PET_MAX_RESTARTS"], "3");
    assert_eq!(env["PET_RDZV_ID"], "run-7");
    assert_eq!(
        env["PET_RDZV_CONF"],
        "join_timeout=600,last_call_timeout=30"
    );
    assert_eq!(env["PET_NPROC_PER_NODE"], "4");
    assert!(
        !env.contains_key("MASTER_ADDR"),
        "rendezvous replaces the master"
    );
    assert!(!env.contains_key("PET_STANDALONE"));
}

// Source: kubeflow/mpi-operator pkg/controller/mpi_job_controller.go (newConfigMap: one
// `<host> slots=<slotsPerWorker>` line per worker for Open MPI; newLauncherPodTemplate:
// ompiEnvVars, OMPI_MCA_orte_set_default_slots, nvidiaDisableEnvVars; K_MPI_JOB_ROLE).
#[test]
fn mpi_openmpi_hostfile_and_env() {
    let mut j = job(
        "allreduce",
        Framework::Mpi,
        &[(Role::Launcher, 1), (Role::Worker, 3)],
    );
    j.spec.mpi = Some(MpiOptions {
        slots_per_worker: Some(4),
        ..Default::default()
    });
    let addrs = Addresses::kubernetes(&j, None);
    golden("mpi_openmpi.txt", &render_all(&j, &addrs));

    let hostfile = mpi_hostfile(&j, &addrs).unwrap();
    assert_eq!(
        hostfile,
        "allreduce-worker-0.allreduce.ml.svc slots=4\n\
         allreduce-worker-1.allreduce.ml.svc slots=4\n\
         allreduce-worker-2.allreduce.ml.svc slots=4\n"
    );
    let launcher = replica_env(
        &j,
        rid(Role::Launcher, 0),
        &addrs,
        &LaunchOptions::default(),
    )
    .unwrap();
    assert_eq!(launcher.files.len(), 1);
    assert_eq!(launcher.files[0].path, "/etc/mpi/hostfile");
    assert_eq!(launcher.files[0].contents, hostfile);
    assert_eq!(
        launcher.env_value("OMPI_MCA_orte_default_hostfile"),
        Some("/etc/mpi/hostfile")
    );
    assert_eq!(
        launcher.env_value("OMPI_MCA_orte_keep_fqdn_hostnames"),
        Some("true")
    );
    assert_eq!(
        launcher.env_value("OMPI_MCA_orte_set_default_slots"),
        Some("4")
    );
    assert_eq!(launcher.env_value("K_MPI_JOB_ROLE"), Some("launcher"));
    assert_eq!(launcher.env_value("NVIDIA_VISIBLE_DEVICES"), Some(""));
    let worker = env_of(&j, rid(Role::Worker, 2), &addrs);
    assert_eq!(worker["K_MPI_JOB_ROLE"], "worker");
    assert!(!worker.contains_key("OMPI_MCA_orte_default_hostfile"));
}

// Source: kubeflow/mpi-operator v1 (pkg/controllers/v1/mpi_job_controller.go, newLauncher:
// OMPI_MCA_plm_rsh_agent=/etc/mpi/kubexec.sh, which runs `kubectl exec <pod> -- sh -c`).
// Embedded there is no sshd: the agent execs into the named replica, so the hostfile names
// replicas, every one on the same address.
#[test]
fn mpi_with_an_rsh_agent_names_replicas_and_the_agent() {
    let mut j = job(
        "allreduce",
        Framework::Mpi,
        &[(Role::Launcher, 1), (Role::Worker, 2)],
    );
    j.spec.mpi = Some(MpiOptions {
        slots_per_worker: Some(2),
        ..Default::default()
    });
    let addrs = Addresses::local(&j, "127.0.0.1", |_| None);
    let opts = LaunchOptions {
        gpu_indices: Some(vec![]),
        mpi_config_dir: "/data/run/launcher".into(),
        mpi_rsh_agent: Some("/usr/bin/corral rsh".into()),
        replica_tmp_dir: Some("/data/run/replica/tmp".into()),
    };
    let launcher = replica_env(&j, rid(Role::Launcher, 0), &addrs, &opts).unwrap();
    golden("mpi_openmpi_rsh_agent_launcher.txt", &render(&launcher));
    assert_eq!(
        launcher.files[0].contents,
        "allreduce-worker-0 slots=2\nallreduce-worker-1 slots=2\n"
    );
    assert_eq!(
        launcher.env_value("OMPI_MCA_plm_rsh_agent"),
        Some("/usr/bin/corral rsh")
    );
    assert_eq!(
        launcher.env_value("OMPI_MCA_plm_rsh_no_tree_spawn"),
        Some("true")
    );
    // ssh's options would reach the agent as a host name.
    assert_eq!(launcher.env_value("OMPI_MCA_plm_rsh_args"), None);
    assert!(launcher.exec_credentials);
    let worker = replica_env(&j, rid(Role::Worker, 1), &addrs, &opts).unwrap();
    assert!(!worker.exec_credentials);
    assert_eq!(worker.env_value("OMPI_MCA_plm_rsh_agent"), None);
    // On one machine each worker's orted keeps its session directory in the worker's own
    // directory (two under one host name and TMPDIR removed each other's: a hung mpirun).
    // Never the launcher's: mpirun would hand its setting to every orted.
    assert_eq!(
        worker.env_value("OMPI_MCA_orte_tmpdir_base"),
        Some("/data/run/replica/tmp")
    );
    assert_eq!(launcher.env_value("OMPI_MCA_orte_tmpdir_base"), None);
    // Without an agent (Kubernetes: sshd in the workers) nothing gets credentials.
    let k8s = Addresses::kubernetes(&j, None);
    let launcher =
        replica_env(&j, rid(Role::Launcher, 0), &k8s, &LaunchOptions::default()).unwrap();
    assert!(!launcher.exec_credentials);
}

// Source: kubeflow/mpi-operator pkg/controller/mpi_job_controller.go (newConfigMap: Intel
// MPI and MPICH write `<host>:<slots>`; intelEnvVars: I_MPI_HYDRA_HOST_FILE, I_MPI_PERHOST;
// mpichEnvVars: HYDRA_HOST_FILE; runLauncherAsWorker lists the launcher first and keeps its
// GPUs).
#[test]
fn mpi_intel_and_mpich_hostfiles() {
    for (implementation, file_var) in [
        (MpiImplementation::Intel, "I_MPI_HYDRA_HOST_FILE"),
        (MpiImplementation::Mpich, "HYDRA_HOST_FILE"),
    ] {
        let mut j = job(
            "hpc",
            Framework::Mpi,
            &[(Role::Launcher, 1), (Role::Worker, 2)],
        );
        j.spec.mpi = Some(MpiOptions {
            slots_per_worker: Some(2),
            implementation: Some(implementation),
            run_launcher_as_worker: true,
            ..Default::default()
        });
        let addrs = Addresses::kubernetes(&j, Some("cluster.local"));
        assert_eq!(
            mpi_hostfile(&j, &addrs).unwrap(),
            "hpc-launcher-0.hpc.ml.svc.cluster.local:2\n\
             hpc-worker-0.hpc.ml.svc.cluster.local:2\n\
             hpc-worker-1.hpc.ml.svc.cluster.local:2\n",
            "{implementation:?}"
        );
        let launcher = replica_env(
            &j,
            rid(Role::Launcher, 0),
            &addrs,
            &LaunchOptions::default(),
        )
        .unwrap();
        assert_eq!(launcher.env_value(file_var), Some("/etc/mpi/hostfile"));
        assert_eq!(launcher.env_value("NVIDIA_VISIBLE_DEVICES"), None);
        assert_eq!(
            launcher.env_value("I_MPI_PERHOST"),
            (implementation == MpiImplementation::Intel).then_some("2")
        );
        if implementation == MpiImplementation::Intel {
            golden("mpi_intel_launcher.txt", &render(&launcher));
        }
    }
}

// Source: kubeflow/training-operator pkg/controller.v1/jax/envvar.go (setPodEnv:
// PYTHONUNBUFFERED, COORDINATOR_PORT, COORDINATOR_ADDRESS = <job>-worker-0, NUM_PROCESSES,
// PROCESS_ID), plus the JAX_* forms.
#[test]
fn jax_env() {
    let j = job("jx", Framework::Jax, &[(Role::Worker, 3)]);
    let addrs = Addresses::kubernetes(&j, None);
    golden("jax.txt", &render_all(&j, &addrs));
    let env = env_of(&j, rid(Role::Worker, 2), &addrs);
    assert_eq!(env["COORDINATOR_ADDRESS"], "jx-worker-0.jx.ml.svc");
    assert_eq!(env["COORDINATOR_PORT"], "6666");
    assert_eq!(env["NUM_PROCESSES"], "3");
    assert_eq!(env["PROCESS_ID"], "2");
    assert_eq!(env["JAX_COORDINATOR_ADDRESS"], "jx-worker-0.jx.ml.svc:6666");
    assert_eq!(env["JAX_NUM_PROCESSES"], "3");
    assert_eq!(env["JAX_PROCESS_ID"], "2");
}

// Source: kubeflow/training-operator pkg/controller.v1/xgboost/pod.go (SetPodEnv:
// MASTER_PORT, MASTER_ADDR = <job>-master-0, WORLD_SIZE, RANK = index + masters for
// workers, PYTHONUNBUFFERED, and for LightGBM WORKER_PORT, WORKER_ADDRS).
#[test]
fn xgboost_env() {
    let j = job(
        "xgb",
        Framework::XGBoost,
        &[(Role::Master, 1), (Role::Worker, 2)],
    );
    let addrs = Addresses::kubernetes(&j, None);
    golden("xgboost.txt", &render_all(&j, &addrs));
    let env = env_of(&j, rid(Role::Worker, 1), &addrs);
    assert_eq!(env["MASTER_ADDR"], "xgb-master-0.xgb.ml.svc");
    assert_eq!(env["MASTER_PORT"], "9999");
    assert_eq!(env["WORLD_SIZE"], "3");
    assert_eq!(env["RANK"], "2");
    assert_eq!(env["WORKER_PORT"], "9999");
    assert_eq!(
        env["WORKER_ADDRS"],
        "xgb-worker-0.xgb.ml.svc,xgb-worker-1.xgb.ml.svc"
    );
}

#[test]
fn local_addresses_and_gpu_pinning() {
    let j = job(
        "loc",
        Framework::PyTorch,
        &[(Role::Master, 1), (Role::Worker, 1)],
    );
    let mut next = 40000;
    let addrs = Addresses::local(&j, "127.0.0.1", |_| {
        next += 1;
        Some(next)
    });
    let opts = LaunchOptions {
        gpu_indices: Some(vec![2, 3]),
        ..Default::default()
    };
    let spec = replica_env(&j, rid(Role::Worker, 0), &addrs, &opts).unwrap();
    assert_eq!(spec.env_value("MASTER_ADDR"), Some("127.0.0.1"));
    assert_eq!(spec.env_value("MASTER_PORT"), Some("40001"));
    assert_eq!(spec.endpoint, Endpoint::new("127.0.0.1", Some(40002)));
    assert_eq!(spec.ports, vec![40002]);
    assert_eq!(spec.env_value("CUDA_VISIBLE_DEVICES"), Some("2,3"));
    assert_eq!(spec.env_value("NVIDIA_VISIBLE_DEVICES"), Some("2,3"));
    let none = LaunchOptions {
        gpu_indices: Some(vec![]),
        ..Default::default()
    };
    let spec = replica_env(&j, rid(Role::Master, 0), &addrs, &none).unwrap();
    assert_eq!(spec.env_value("CUDA_VISIBLE_DEVICES"), Some(""));
    assert_eq!(spec.env_value("NVIDIA_VISIBLE_DEVICES"), Some("none"));
    // Kubernetes: the device plugin decides; Corral sets nothing.
    let spec = replica_env(&j, rid(Role::Master, 0), &addrs, &LaunchOptions::default()).unwrap();
    assert_eq!(spec.env_value("CUDA_VISIBLE_DEVICES"), None);
}

#[test]
fn contract_variables_override_the_users_and_are_reported() {
    let mut j = job(
        "u",
        Framework::PyTorch,
        &[(Role::Master, 1), (Role::Worker, 1)],
    );
    let t = &mut j.spec.replicas.get_mut(&Role::Worker).unwrap().template;
    t.env = vec![
        EnvVar::literal("FOO", "bar"),
        EnvVar::literal("MASTER_ADDR", "elsewhere"),
        EnvVar::literal("NCCL_DEBUG", "INFO"),
    ];
    let addrs = Addresses::kubernetes(&j, None);
    let spec = replica_env(&j, rid(Role::Worker, 0), &addrs, &LaunchOptions::default()).unwrap();
    assert_eq!(spec.overridden_env, vec!["MASTER_ADDR".to_string()]);
    assert_eq!(spec.env[0].name, "FOO");
    assert_eq!(spec.env[1].name, "NCCL_DEBUG");
    assert_eq!(spec.env_value("MASTER_ADDR"), Some("u-master-0.u.ml.svc"));
    assert_eq!(
        spec.env.iter().filter(|v| v.name == "MASTER_ADDR").count(),
        1
    );
}

#[test]
fn errors_name_the_replica() {
    let j = job(
        "e",
        Framework::TensorFlow,
        &[(Role::Ps, 1), (Role::Worker, 2)],
    );
    let addrs = Addresses::kubernetes(&j, None);
    let opts = LaunchOptions::default();
    assert_eq!(
        replica_env(&j, rid(Role::Worker, 2), &addrs, &opts),
        Err(LaunchError::NoSuchReplica("e-worker-2".to_string()))
    );
    assert_eq!(
        replica_env(&j, rid(Role::Chief, 0), &addrs, &opts),
        Err(LaunchError::NoSuchReplica("e-chief-0".to_string()))
    );
    let mut partial = Addresses::new();
    partial.insert(rid(Role::Worker, 0), Endpoint::new("h", Some(1)));
    assert_eq!(
        replica_env(&j, rid(Role::Worker, 0), &partial, &opts),
        Err(LaunchError::MissingAddress("e-ps-0".to_string()))
    );
    let portless = Addresses::local(&j, "127.0.0.1", |_| None);
    assert_eq!(
        replica_env(&j, rid(Role::Worker, 0), &portless, &opts),
        Err(LaunchError::MissingPort("e-ps-0".to_string()))
    );
}

#[test]
fn kubernetes_host_form() {
    let id = rid(Role::Worker, 3);
    assert_eq!(
        kubernetes_host("job", "ns", id, None),
        "job-worker-3.job.ns.svc"
    );
    assert_eq!(
        kubernetes_host("job", "ns", id, Some("cluster.local")),
        "job-worker-3.job.ns.svc.cluster.local"
    );
    let mut j = job("p", Framework::TensorFlow, &[(Role::Worker, 1)]);
    j.spec.port = Some(3333);
    j.metadata.namespace = None;
    let addrs = Addresses::kubernetes(&j, None);
    assert_eq!(
        addrs.get(rid(Role::Worker, 0)),
        Some(&Endpoint::new("p-worker-0.p.default.svc", Some(3333)))
    );
}
