//! The table of manifests that can never run on [`CLUSTER`], shared by the tests of
//! `corral submit` and `corral validate`: both must refuse each one with the same errors,
//! all of them at once, each with its field path.

/// A cluster without GPUs, with one priority class and one declared queue (plus the
/// implicit `default`).
pub const CLUSTER: &str = "apiVersion: corral.dev/v1alpha1
kind: CorralConfig
node: {gpus: 0}
---
apiVersion: corral.dev/v1alpha1
kind: JobPriorityClass
metadata: {name: production}
spec: {value: 1000}
---
apiVersion: corral.dev/v1alpha1
kind: Queue
metadata: {name: team-a}
spec: {}
";

pub struct BadManifest {
    pub name: &'static str,
    pub yaml: &'static str,
    /// Every field path the refusal names (document number first when the input has
    /// several), in any order.
    pub paths: &'static [&'static str],
}

/// A job named `$name` with `$spec` spliced into its spec, and one role of `$count`
/// workers with extra `$resources`.
macro_rules! job {
    ($name:literal, $spec:literal, $count:literal, $resources:literal) => {
        concat!(
            "apiVersion: corral.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: ",
            $name,
            "}\nspec:\n  framework: generic\n",
            $spec,
            "  replicas:\n    worker:\n      count: ",
            $count,
            "\n      resources: {cpu: 100m, memory: 64Mi",
            $resources,
            "}\n      template: {command: [sleep, '1']}\n"
        )
    };
}

pub const CASES: &[BadManifest] = &[
    BadManifest {
        name: "unknown priority class",
        yaml: job!("pc", "  priorityClass: urgent\n", "1", ""),
        paths: &["spec.priorityClass"],
    },
    BadManifest {
        name: "GPU job on a cluster without GPUs",
        yaml: job!("gpu", "", "1", ", gpu: 1"),
        paths: &["spec.replicas.worker.resources.gpu"],
    },
    BadManifest {
        name: "unknown queue",
        yaml: job!("q", "  queue: team-z\n", "1", ""),
        paths: &["spec.queue"],
    },
    BadManifest {
        name: "GPU type no node has",
        yaml: job!(
            "gputype",
            "",
            "1",
            ", gpu: 1, gpuTypes: [NVIDIA-H100-80GB-HBM3]"
        ),
        // One mistake, one error: the type's, which says what the cluster has.
        paths: &["spec.replicas.worker.resources.gpuTypes[0]"],
    },
    BadManifest {
        name: "valueFrom, which only Kubernetes resolves",
        yaml: "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {name: secret}
spec:
  framework: generic
  replicas:
    worker:
      count: 1
      template:
        command: [sleep, '1']
        env: [{name: TOKEN, valueFrom: {secretKeyRef: {name: s, key: k}}}]
",
        paths: &["spec.replicas.worker.template.env[0].valueFrom"],
    },
    BadManifest {
        name: "four problems at once",
        yaml: job!(
            "many",
            "  priorityClass: urgent\n  queue: team-z\n",
            "0",
            ", gpu: 2"
        ),
        paths: &[
            "spec.priorityClass",
            "spec.queue",
            "spec.replicas.worker.count",
            "spec.replicas.worker.resources.gpu",
        ],
    },
    BadManifest {
        name: "the second of two documents",
        yaml: concat!(
            job!("fine", "", "1", ""),
            "---\n",
            job!("second", "  priorityClass: urgent\n", "1", "")
        ),
        paths: &["2:spec.priorityClass"],
    },
];
