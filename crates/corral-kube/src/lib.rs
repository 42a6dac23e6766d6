//! The Kubernetes shell: an operator that watches TrainingJobs, Pods and Nodes, calls
//! corral-core, and applies its decisions as Services, Pods, Bindings, status and Events.
