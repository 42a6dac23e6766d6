//! The Kubernetes shell: an operator that watches TrainingJobs, Pods and Nodes, calls
//! corral-core, and applies its decisions as Services, Pods, Bindings, status and Events.
//!
//! An explicit pipeline (Stackable / linkerd style); only the first and last steps touch
//! the API server:
//! 1. **observe** ([`observe`]): TrainingJobs, Pods of every scheduler, Nodes, Queues,
//!    NodePools and JobPriorityClasses become a [`World`], read by pure functions (a node's
//!    allocatable and what is in use on it, replica states from pods, a job's node selector
//!    and tolerations; GPU type from `nvidia.com/gpu.product`). The watch caches keep only
//!    the fields the passes read ([`slim`]).
//! 2. **plan** ([`plan::Planner`]): the core's control plane
//!    (`corral_core::control::ControlPlane`, the same as embedded), kept while this replica
//!    leads and fed what changed in the world (or restored from it when the feed cannot
//!    say), is stepped once; its step becomes a [`plan::JobPlan`] per job (admission to
//!    record, status, objects to create, pods to bind and delete, events). See [`plan`] for
//!    its stages.
//! 3. **build** ([`build`], pure): TrainingJob + placement + launch contract -> headless
//!    Service and Pods (k8s-openapi types), golden-tested from YAML fixtures.
//! 4. **apply** ([`apply`]): status with the admission in it (server-side apply with field
//!    manager `corral` and a resourceVersion precondition), Service (server-side apply),
//!    Pods (create: a name held by another incarnation is never taken over; on their node
//!    when the whole gang fits now), Bindings (`pods/{name}/binding`, for pods made in an
//!    earlier pass, a gang all together or not at all), deletions with the grace period and
//!    a UID precondition, Events; up to `--apply-window` jobs at once.
//!
//! Durable state lives in the API server only: the admission (with its placements) in the
//! job's `status.admission` (written with the status that announces it; the
//! `corral.dev/admission` annotation of earlier operators is still read, [`record`]),
//! counts and conditions in its status, the incarnation of every replica in its pod's
//! labels, and the usage ledger (what each admission held) in ConfigMaps of the
//! operator's namespace ([`ledger`]). An operator that restarts anywhere in
//! the pipeline re-reads them and repeats only idempotent steps.
//!
//! After each pass, [`pipelines`] moves PipelineRuns on by the core's decision: their steps
//! become TrainingJobs the next pass admits like any other; [`serving`] scales
//! ServedModels by the core's autoscaler (their replicas are TrainingJobs too) and feeds
//! the router the operator serves them through.
//!
//! Beside the pipeline, [`webhook`] refuses at `kubectl apply` what the pipeline could
//! never run (with `--webhook-cert-dir`), in the embedded shell's words.

pub mod apply;
pub mod build;
pub mod consts;
pub mod crds;
pub mod dynamic_objects;
pub mod fence;
pub mod kserve;
pub mod kubeflow;
pub mod leader;
pub mod ledger;
pub mod logging;
pub mod metrics;
pub mod observe;
pub mod operator;
pub mod operator_args;
pub mod own_writes;
pub mod owners;
pub mod pipelines;
pub mod plan;
pub mod progress;
pub mod read_api;
pub mod record;
pub mod serving;
pub mod slim;
pub mod stop_notice;
pub mod testenv;
pub mod webhook;

pub use observe::World;
pub use operator::{OperatorArgs, run_operator};
