//! Alibaba cluster-trace-gpu-v2023 ("Beware of Fragmentation", ATC 2023).
//!
//! Nodes (`openb_node_list_gpu_node.csv`): `sn,cpu_milli,memory_mib,gpu,model`.
//! Pods (`openb_pod_list_*.csv`): `name,cpu_milli,memory_mib,num_gpu,gpu_milli` followed,
//! in most files, by `gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time`.
//! Columns are found by their header names, so the short `multigpu50` file parses too.
//! Pods keep the trace's order (the order of arrival).

use super::{at, fields};

/// One node of the cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct AliNode {
    pub name: String,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub gpus: u32,
    /// GPU type (`T4`, `V100M16`, `G2`, ...).
    pub model: String,
}

/// One pod request.
#[derive(Clone, Debug, PartialEq)]
pub struct AliPod {
    pub name: String,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub num_gpu: u32,
    /// Share of one GPU (1000 = whole) for sharing pods (`num_gpu == 1`).
    pub gpu_milli: u32,
    /// Allowed GPU types; empty: any.
    pub gpu_spec: Vec<String>,
    /// Seconds from the trace start (0 when the file has no `creation_time`).
    pub creation_s: f64,
}

impl AliPod {
    /// Whether this pod asks for part of one GPU (Corral rounds it up to a whole one).
    pub fn is_fractional(&self) -> bool {
        self.num_gpu == 1 && self.gpu_milli < 1000
    }

    /// Whole GPUs the pod takes when GPUs are not shared.
    pub fn whole_gpus(&self) -> u32 {
        self.num_gpu
    }

    /// Whether the pod may run on GPU type `model`.
    pub fn allows(&self, model: &str) -> bool {
        self.gpu_spec.is_empty() || self.gpu_spec.iter().any(|t| t == model)
    }
}

/// Column positions of the named header fields; errors name the missing one.
pub(crate) fn columns<const N: usize>(
    header: &str,
    file: &str,
    required: [&str; N],
) -> Result<([usize; N], Vec<String>), String> {
    let names: Vec<String> = header
        .trim_start_matches('\u{feff}')
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    let mut idx = [0; N];
    for (k, want) in required.iter().enumerate() {
        idx[k] = names.iter().position(|n| n == want).ok_or_else(|| {
            at(
                file,
                1,
                1,
                format_args!(
                    "the header has no `{want}` column (expected {})",
                    required.join(",")
                ),
            )
        })?;
    }
    Ok((idx, names))
}

pub(crate) fn num<T: std::str::FromStr>(
    f: &[(usize, &str)],
    i: usize,
    file: &str,
    ln: usize,
    name: &str,
    ok: impl Fn(&T) -> bool,
    want: &str,
) -> Result<T, String> {
    let (col, s) = f[i];
    s.trim()
        .parse::<T>()
        .ok()
        .filter(|v| ok(v))
        .ok_or_else(|| at(file, ln, col, format_args!("{name} `{s}` is not {want}")))
}

/// A data line: its 1-based number and its `(column, field)`s.
pub(crate) type Row<'a> = (usize, Vec<(usize, &'a str)>);

/// Data lines with their 1-based line numbers and fields, checking the field count.
pub(crate) fn rows<'a>(text: &'a str, file: &str, ncols: usize) -> Result<Vec<Row<'a>>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        let ln = i + 1;
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let f = fields(line, ',');
        if f.len() != ncols {
            return Err(at(
                file,
                ln,
                1,
                format_args!(
                    "expected {ncols} comma-separated fields as in the header, found {}",
                    f.len()
                ),
            ));
        }
        out.push((ln, f));
    }
    Ok(out)
}

/// Parses the node list.
pub fn parse_nodes(text: &str, file: &str) -> Result<Vec<AliNode>, String> {
    let header = text.lines().next().ok_or_else(|| {
        at(
            file,
            1,
            1,
            "empty file: expected sn,cpu_milli,memory_mib,gpu,model",
        )
    })?;
    let ([sn, cpu, mem, gpu, model], names) = columns(
        header,
        file,
        ["sn", "cpu_milli", "memory_mib", "gpu", "model"],
    )?;
    let mut nodes = Vec::new();
    for (ln, f) in rows(text, file, names.len())? {
        let gpus: u32 = num(&f, gpu, file, ln, "gpu", |g| *g <= 64, "in 0..=64")?;
        let model_s = f[model].1.trim();
        if gpus > 0 && model_s.is_empty() {
            return Err(at(file, ln, f[model].0, "a node with GPUs has no model"));
        }
        nodes.push(AliNode {
            name: f[sn].1.trim().to_string(),
            cpu_milli: num(&f, cpu, file, ln, "cpu_milli", |_| true, "a whole number")?,
            memory_mib: num(&f, mem, file, ln, "memory_mib", |_| true, "a whole number")?,
            gpus,
            model: model_s.to_string(),
        });
    }
    if nodes.is_empty() {
        return Err(at(file, 2, 1, "no nodes"));
    }
    Ok(nodes)
}

/// Parses at most `limit` pods (all when `None`), in trace order.
pub fn parse_pods(text: &str, file: &str, limit: Option<usize>) -> Result<Vec<AliPod>, String> {
    let header = text.lines().next().ok_or_else(|| {
        at(
            file,
            1,
            1,
            "empty file: expected name,cpu_milli,memory_mib,num_gpu,gpu_milli,...",
        )
    })?;
    let ([name, cpu, mem, ngpu, milli], names) = columns(
        header,
        file,
        ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"],
    )?;
    let spec = names.iter().position(|n| n == "gpu_spec");
    let created = names.iter().position(|n| n == "creation_time");
    let mut pods = Vec::new();
    for (ln, f) in rows(text, file, names.len())? {
        if limit.is_some_and(|l| pods.len() >= l) {
            break;
        }
        let num_gpu: u32 = num(&f, ngpu, file, ln, "num_gpu", |g| *g <= 64, "in 0..=64")?;
        let gpu_milli: u32 = num(
            &f,
            milli,
            file,
            ln,
            "gpu_milli",
            |m| *m <= 1000,
            "in 0..=1000",
        )?;
        if num_gpu > 0 && gpu_milli == 0 {
            return Err(at(
                file,
                ln,
                f[milli].0,
                "gpu_milli is 0 for a pod with GPUs",
            ));
        }
        let gpu_spec = match spec {
            Some(i) => {
                let mut v: Vec<String> = f[i]
                    .1
                    .split('|')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect();
                v.sort();
                v.dedup();
                v
            }
            None => Vec::new(),
        };
        let creation_s = match created {
            Some(i) => num(
                &f,
                i,
                file,
                ln,
                "creation_time",
                |v: &f64| v.is_finite() && *v >= 0.0,
                "a number >= 0",
            )?,
            None => 0.0,
        };
        pods.push(AliPod {
            name: f[name].1.trim().to_string(),
            cpu_milli: num(&f, cpu, file, ln, "cpu_milli", |_| true, "a whole number")?,
            memory_mib: num(&f, mem, file, ln, "memory_mib", |_| true, "a whole number")?,
            num_gpu,
            gpu_milli,
            gpu_spec,
            creation_s,
        });
    }
    Ok(pods)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        let n = parse_nodes(
            "sn,cpu_milli,memory_mib,gpu,model\na,64000,262144,2,P100\r\nb,8000,100,0,\n",
            "n.csv",
        )
        .unwrap();
        assert_eq!(n.len(), 2);
        assert_eq!(n[0].gpus, 2);
        assert_eq!(n[0].model, "P100");
        let p = parse_pods(
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
             p0,12000,16384,1,460,V100M32|V100M16|V100M32,LS,Running,5,9,5\n\
             p1,1000,10,0,0,,BE,Running,7,9,7\n",
            "p.csv",
            None,
        )
        .unwrap();
        assert_eq!(p.len(), 2);
        assert!(p[0].is_fractional());
        assert_eq!(p[0].gpu_spec, ["V100M16", "V100M32"]);
        assert!(p[0].allows("V100M16") && !p[0].allows("T4"));
        assert!(p[1].allows("T4"));
        assert_eq!(p[1].creation_s, 7.0);
        // The short header of multigpu50.
        let p = parse_pods(
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,8,1000\n",
            "p.csv",
            None,
        )
        .unwrap();
        assert_eq!(p[0].num_gpu, 8);
    }

    #[test]
    fn errors() {
        let h = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n";
        let e = parse_pods(&format!("{h}p,1,1,x,1000\n"), "p.csv", None).unwrap_err();
        assert_eq!(e, "p.csv:2:7: num_gpu `x` is not in 0..=64");
        let e = parse_pods(&format!("{h}p,1,1,1,1001\n"), "p.csv", None).unwrap_err();
        assert_eq!(e, "p.csv:2:9: gpu_milli `1001` is not in 0..=1000");
        let e = parse_pods(&format!("{h}p,1,1\n"), "p.csv", None).unwrap_err();
        assert!(e.starts_with("p.csv:2:1: expected 5"), "{e}");
        let e = parse_pods("name,cpu\n", "p.csv", None).unwrap_err();
        assert!(
            e.starts_with("p.csv:1:1: the header has no `cpu_milli`"),
            "{e}"
        );
        assert!(parse_pods("", "p.csv", None).is_err());
        let e =
            parse_nodes("sn,cpu_milli,memory_mib,gpu,model\na,1,1,-2,T4\n", "n.csv").unwrap_err();
        assert_eq!(e, "n.csv:2:7: gpu `-2` is not in 0..=64");
        assert!(parse_nodes("sn,cpu_milli,memory_mib,gpu,model\n", "n.csv").is_err());
    }
}
