//! Gavel's trace format (10 TAB-separated fields per line) and throughput matrix.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{at, fields, finish};
use crate::job::{SimJob, Throughput};

/// Co-location throughputs of one `(job type, scale factor)`: GPU type -> other job type ->
/// (this job's, the other's) steps/s.
pub type Colocated = BTreeMap<String, BTreeMap<String, (f64, f64)>>;

/// `(job type, scale factor)` -> GPU type -> isolated steps/s of the whole job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Throughputs {
    pub isolated: BTreeMap<(String, u32), BTreeMap<String, f64>>,
    /// `(job type, scale factor)` -> GPU type -> other job type -> (this, other) steps/s
    /// when sharing the GPUs.
    pub colocated: BTreeMap<(String, u32), Colocated>,
}

/// Parses `"('LM (batch size 20)', 1)"`.
fn parse_key(k: &str) -> Option<(String, u32)> {
    let k = k.trim().strip_prefix('(')?.strip_suffix(')')?;
    let q = k.chars().next()?;
    if q != '\'' && q != '"' {
        return None;
    }
    let rest = &k[1..];
    let end = rest.find(q)?;
    let name = rest[..end].to_string();
    let sf = rest[end + 1..]
        .trim()
        .strip_prefix(',')?
        .trim()
        .parse()
        .ok()?;
    Some((name, sf))
}

impl Throughputs {
    /// Parses `simulation_throughputs.json`; `*_unconsolidated` worker types are skipped.
    pub fn parse(text: &str, file: &str) -> Result<Self, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| {
            at(
                file,
                e.line(),
                e.column(),
                format_args!("invalid JSON: {e}"),
            )
        })?;
        let Value::Object(workers) = v else {
            return Err(format!("{file}: expected an object of GPU types"));
        };
        let mut out = Throughputs::default();
        for (worker, jobs) in &workers {
            if worker.ends_with("_unconsolidated") {
                continue;
            }
            let Value::Object(jobs) = jobs else {
                return Err(format!("{file}: `{worker}` is not an object"));
            };
            for (key, entry) in jobs {
                let k = parse_key(key).ok_or_else(|| {
                    format!("{file}: `{worker}`: key `{key}` is not ('job type', scale factor)")
                })?;
                let iso = entry.get("null").and_then(Value::as_f64).ok_or_else(|| {
                    format!("{file}: `{worker}` `{key}`: no numeric \"null\" entry")
                })?;
                out.isolated
                    .entry(k.clone())
                    .or_default()
                    .insert(worker.clone(), iso);
                if let Value::Object(others) = entry {
                    for (ok, pair) in others {
                        if ok == "null" {
                            continue;
                        }
                        let (Some(o), Some(a), Some(b)) = (
                            parse_key(ok),
                            pair.get(0).and_then(Value::as_f64),
                            pair.get(1).and_then(Value::as_f64),
                        ) else {
                            continue;
                        };
                        out.colocated
                            .entry(k.clone())
                            .or_default()
                            .entry(worker.clone())
                            .or_default()
                            .insert(o.0, (a, b));
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Parses a Gavel trace. Every `(job_type, scale_factor)` must have throughputs.
pub fn parse_trace(text: &str, file: &str, tput: &Throughputs) -> Result<Vec<SimJob>, String> {
    let mut jobs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let ln = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let f = fields(line, '\t');
        if f.len() != 10 {
            return Err(at(
                file,
                ln,
                1,
                format_args!("expected 10 TAB-separated fields, found {}", f.len()),
            ));
        }
        let num = |idx: usize, what: &str| -> Result<f64, String> {
            let (col, s) = f[idx];
            s.trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| at(file, ln, col, format_args!("{what} `{s}` is not a number")))
        };
        let int = |idx: usize, what: &str| -> Result<u64, String> {
            let (col, s) = f[idx];
            s.trim().parse::<u64>().map_err(|_| {
                at(
                    file,
                    ln,
                    col,
                    format_args!("{what} `{s}` is not a whole number"),
                )
            })
        };
        let job_type = f[0].1.to_string();
        let steps = int(5, "total_steps")?;
        let sf = int(6, "scale_factor")?;
        if sf == 0 || sf > 1024 {
            return Err(at(
                file,
                ln,
                f[6].0,
                format_args!("scale_factor {sf} is out of range"),
            ));
        }
        let arrival = num(9, "arrival_time")?;
        if arrival < 0.0 {
            return Err(at(file, ln, f[9].0, "arrival_time is negative"));
        }
        let key = (job_type.clone(), sf as u32);
        let per_type = tput.isolated.get(&key).ok_or_else(|| {
            at(
                file,
                ln,
                1,
                format_args!("no throughputs for ('{job_type}', {sf}) in the throughput file"),
            )
        })?;
        jobs.push(SimJob {
            id: 0,
            name: format!("job-{i}"),
            arrival_s: arrival,
            gpus: sf as u32,
            steps: steps as f64,
            throughput: Throughput::PerType(per_type.clone()),
            job_type,
            queue: "default".into(),
            allowed_types: Vec::new(),
            restart_s: None,
            start_s: 0.0,
            elastic: None,
        });
    }
    Ok(finish(jobs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert_eq!(
            parse_key("('LM (batch size 20)', 1)"),
            Some(("LM (batch size 20)".into(), 1))
        );
        assert_eq!(parse_key("LM"), None);
    }

    #[test]
    fn errors_name_line_and_column() {
        let t = Throughputs::parse(
            r#"{"v100": {"('A', 1)": {"null": 2.0}}, "k80": {"('A', 1)": {"null": 1.0}}}"#,
            "t.json",
        )
        .unwrap();
        let good = "A\tcmd\tdir\t--n\t1\t100\t1\t1\t-1.000000\t0.0\n";
        let jobs = parse_trace(good, "x.trace", &t).unwrap();
        assert_eq!(jobs[0].throughput.on("v100"), 2.0);
        let bad = format!("{good}A\tcmd\tdir\t--n\t1\tlots\t1\t1\t-1.000000\t5.0\n");
        let e = parse_trace(&bad, "x.trace", &t).unwrap_err();
        assert_eq!(e, "x.trace:2:17: total_steps `lots` is not a whole number");
        let e = parse_trace("A\tb\n", "x.trace", &t).unwrap_err();
        assert!(e.starts_with("x.trace:1:1:"), "{e}");
        let e = parse_trace("B\tcmd\tdir\t--n\t1\t100\t1\t1\t-1\t0\n", "x.trace", &t).unwrap_err();
        assert!(e.contains("no throughputs"), "{e}");
        assert!(
            Throughputs::parse("{", "t.json")
                .unwrap_err()
                .starts_with("t.json:1:")
        );
    }
}
