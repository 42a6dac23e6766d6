//! The simulated cluster: GPU types and nodes, from `k80:12,p100:12,v100:12` or a YAML file.
//!
//! Flag form: comma-separated `TYPE:GPUS`, optionally `TYPE:GPUS/PER_NODE`; otherwise nodes
//! hold `--gpus-per-node` GPUs (default 1, as in Gavel's simulations). YAML form:
//!
//! ```yaml
//! gpus_per_node: 8          # default for pools that do not say
//! pools:
//!   - gpu_type: a100
//!     gpus: 64
//!   - gpu_type: t4
//!     nodes: 6
//!     gpus_per_node: 4
//! ```

use serde::Deserialize;

/// One simulated machine.
#[derive(Clone, Debug, PartialEq)]
pub struct SimNode {
    pub name: String,
    /// Index into [`SimCluster::types`].
    pub gpu_type: usize,
    pub gpus: u32,
}

/// GPU types in the order given, and nodes grouped by type.
#[derive(Clone, Debug, PartialEq)]
pub struct SimCluster {
    pub types: Vec<String>,
    pub nodes: Vec<SimNode>,
}

/// One pool of the cluster description.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSpec {
    pub gpu_type: String,
    #[serde(default)]
    pub gpus: Option<u32>,
    #[serde(default)]
    pub nodes: Option<u32>,
    #[serde(default)]
    pub gpus_per_node: Option<u32>,
}

/// A cluster description.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    #[serde(default = "one")]
    pub gpus_per_node: u32,
    pub pools: Vec<PoolSpec>,
}

fn one() -> u32 {
    1
}

impl ClusterSpec {
    /// Parses `k80:12,p100:12,v100:12` (optionally `v100:64/8`).
    pub fn parse_flag(s: &str, gpus_per_node: u32) -> Result<Self, String> {
        let mut pools = Vec::new();
        for (i, part) in s.split(',').enumerate() {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let err = |m: &str| format!("--cluster item {} `{part}`: {m}", i + 1);
            let (ty, rest) = part
                .split_once(':')
                .ok_or_else(|| err("expected TYPE:GPUS, e.g. v100:12"))?;
            let (gpus, per) = match rest.split_once('/') {
                Some((g, p)) => (g, Some(p)),
                None => (rest, None),
            };
            let gpus: u32 = gpus
                .trim()
                .parse()
                .map_err(|_| err("GPU count is not a whole number"))?;
            let per = match per {
                Some(p) => Some(
                    p.trim()
                        .parse::<u32>()
                        .map_err(|_| err("GPUs per node is not a whole number"))?,
                ),
                None => None,
            };
            pools.push(PoolSpec {
                gpu_type: ty.trim().to_string(),
                gpus: Some(gpus),
                nodes: None,
                gpus_per_node: per,
            });
        }
        let spec = ClusterSpec {
            gpus_per_node,
            pools,
        };
        spec.build().map(|_| spec)
    }

    /// Parses a YAML cluster file's text; `file` names it in errors.
    pub fn parse_yaml(text: &str, file: &str) -> Result<Self, String> {
        let spec: ClusterSpec = serde_saphyr::from_str(text).map_err(|e| format!("{file}: {e}"))?;
        spec.build().map_err(|e| format!("{file}: {e}"))?;
        Ok(spec)
    }

    /// Builds the nodes. Node names are `<type>-<i>`.
    pub fn build(&self) -> Result<SimCluster, String> {
        if self.pools.is_empty() {
            return Err("the cluster has no GPU pools".into());
        }
        let mut types: Vec<String> = Vec::new();
        let mut nodes = Vec::new();
        for p in &self.pools {
            if p.gpu_type.is_empty() {
                return Err("a pool has an empty GPU type".into());
            }
            let per = p.gpus_per_node.unwrap_or(self.gpus_per_node);
            if per == 0 || per > 64 {
                return Err(format!(
                    "pool {}: GPUs per node must be 1..=64, not {per}",
                    p.gpu_type
                ));
            }
            let (full, last) = match (p.gpus, p.nodes) {
                (Some(g), None) => (g / per, g % per),
                (None, Some(n)) => (n, 0),
                (Some(g), Some(n)) if g == n * per => (n, 0),
                (Some(_), Some(_)) => {
                    return Err(format!(
                        "pool {}: gpus must equal nodes x gpus_per_node",
                        p.gpu_type
                    ));
                }
                (None, None) => {
                    return Err(format!("pool {}: give gpus or nodes", p.gpu_type));
                }
            };
            let t = match types.iter().position(|x| *x == p.gpu_type) {
                Some(t) => t,
                None => {
                    types.push(p.gpu_type.clone());
                    types.len() - 1
                }
            };
            let start = nodes.iter().filter(|n: &&SimNode| n.gpu_type == t).count();
            let sizes = (0..full).map(|_| per).chain((last > 0).then_some(last));
            for (i, g) in sizes.enumerate() {
                nodes.push(SimNode {
                    name: format!("{}-{}", p.gpu_type, start + i),
                    gpu_type: t,
                    gpus: g,
                });
            }
        }
        if nodes.is_empty() {
            return Err("the cluster has no GPUs".into());
        }
        Ok(SimCluster { types, nodes })
    }
}

impl SimCluster {
    /// GPUs per type, parallel to `types`.
    pub fn gpus_per_type(&self) -> Vec<u32> {
        let mut v = vec![0; self.types.len()];
        for n in &self.nodes {
            v[n.gpu_type] += n.gpus;
        }
        v
    }

    pub fn total_gpus(&self) -> u32 {
        self.nodes.iter().map(|n| n.gpus).sum()
    }

    pub fn type_index(&self, name: &str) -> Option<usize> {
        self.types.iter().position(|t| t == name)
    }

    /// `k80:12,p100:12,v100:12`.
    pub fn describe(&self) -> String {
        let g = self.gpus_per_type();
        self.types
            .iter()
            .zip(g)
            .map(|(t, g)| format!("{t}:{g}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_form() {
        let c = ClusterSpec::parse_flag("k80:12,p100:12,v100:12", 1)
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(c.types, ["k80", "p100", "v100"]);
        assert_eq!(c.nodes.len(), 36);
        assert_eq!(c.gpus_per_type(), [12, 12, 12]);
        let c = ClusterSpec::parse_flag("v100:20/8", 1)
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(
            c.nodes.iter().map(|n| n.gpus).collect::<Vec<_>>(),
            [8, 8, 4]
        );
        assert!(ClusterSpec::parse_flag("v100", 1).is_err());
        assert!(ClusterSpec::parse_flag("v100:x", 1).is_err());
        assert!(ClusterSpec::parse_flag("v100:4", 0).is_err());
    }

    #[test]
    fn yaml_form() {
        let spec = ClusterSpec::parse_yaml(
            "gpus_per_node: 8\npools:\n  - gpu_type: a100\n    gpus: 16\n  - gpu_type: t4\n    nodes: 2\n    gpus_per_node: 4\n",
            "c.yaml",
        )
        .unwrap();
        let c = spec.build().unwrap();
        assert_eq!(c.gpus_per_type(), [16, 8]);
        assert!(ClusterSpec::parse_yaml("pools: [{gpu_type: a}]", "c.yaml").is_err());
    }
}
