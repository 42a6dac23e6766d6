//! What the operator's watch caches keep of each object: the fields its passes read. A pod
//! as the API server sends it carries its whole template (env, command, volumes, probes) and
//! the managed-fields ledger, several KB each; with thousands of pods stored that was most
//! of the operator's memory, and each pass copies the caches into its `World`.

use k8s_openapi::api::core::v1::{Container, Node, Pod};
use kube::Resource;

/// The annotation `kubectl apply` keeps: a second copy of the whole object.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Any object: without its managed fields and `kubectl apply`'s copy of itself.
pub fn object<K: Resource>(o: &mut K) {
    let meta = o.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

/// A pod: what placement, replica state and start failures read (labels, owners, node,
/// requests, tolerations, phase, container states); its annotations and the rest of its
/// template are dropped.
pub fn pod(p: &mut Pod) {
    object(p);
    p.metadata.annotations = None;
    if let Some(spec) = p.spec.as_mut() {
        spec.volumes = None;
        spec.affinity = None;
        spec.ephemeral_containers = None;
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            container(c);
        }
    }
}

/// A node: without the list of images its kubelet holds (often the largest part of it).
pub fn node(n: &mut Node) {
    object(n);
    if let Some(s) = n.status.as_mut() {
        s.images = None;
    }
}

/// A container: its name, image, requests and restart policy (a sidecar's) are kept.
fn container(c: &mut Container) {
    c.env = None;
    c.env_from = None;
    c.command = None;
    c.args = None;
    c.volume_mounts = None;
    c.volume_devices = None;
    c.ports = None;
    c.liveness_probe = None;
    c.readiness_probe = None;
    c.startup_probe = None;
    c.lifecycle = None;
    c.security_context = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe;
    use serde_json::json;

    /// What the passes read of a pod is the same before and after slimming.
    #[test]
    fn a_slim_pod_reads_as_the_whole_one() {
        let whole: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": "j-worker-0", "namespace": "ml", "uid": "u1",
                "labels": {"corral.dev/job-name": "j", "corral.dev/role": "worker",
                           "corral.dev/index": "0", "corral.dev/incarnation": "2"},
                "annotations": {LAST_APPLIED: "{...}", "x": "y"},
                "managedFields": [{"manager": "corral", "operation": "Update"}]
            },
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "main", "image": "busybox", "command": ["sh"],
                                "env": [{"name": "A", "value": "b"}],
                                "resources": {"requests": {"cpu": "2", "memory": "1Gi",
                                                           "nvidia.com/gpu": "1"}}}],
                "initContainers": [{"name": "side", "restartPolicy": "Always",
                                    "resources": {"requests": {"cpu": "500m"}}}],
                "volumes": [{"name": "v", "emptyDir": {}}],
                "overhead": {"cpu": "100m"}
            },
            "status": {"phase": "Failed", "containerStatuses": [{
                "name": "main", "image": "busybox", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"terminated": {"exitCode": 128,
                    "reason": "StartError", "message": "exec: not found"}}}]}
        }))
        .expect("pod");
        let mut slim = whole.clone();
        pod(&mut slim);
        assert_eq!(observe::pod_requests(&slim), observe::pod_requests(&whole));
        assert_eq!(observe::pod_node(&slim), observe::pod_node(&whole));
        assert_eq!(observe::replica_of(&slim), observe::replica_of(&whole));
        assert_eq!(observe::observe_pod(&slim), observe::observe_pod(&whole));
        assert_eq!(
            observe::pod_start_failure(&slim).map(|f| f.message),
            observe::pod_start_failure(&whole).map(|f| f.message)
        );
        assert!(slim.metadata.managed_fields.is_none());
        let size = |p: &Pod| serde_json::to_string(p).map(|s| s.len()).unwrap_or(0);
        assert!(size(&slim) < size(&whole));
    }
}
