//! Sia's workload files, and the jobs built from their rows and the models' profiles.

use std::collections::BTreeMap;

use crate::job::{Elastic, SimJob, Throughput};
use crate::trace::alibaba::num;
use crate::trace::{at, fields, finish};

use super::calibration::{restart_s, slowdown};
use super::machines::{Machine, machine_for_type};
use super::profiles::{Profiles, positive};
use super::speed::Source;

/// The header of a Sia workload file.
pub const WORKLOAD_HEADER: &str = "name,time,application,num_replicas,batch_size";

/// One line of a workload file.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadRow {
    pub line: usize,
    pub name: String,
    pub time_s: f64,
    pub application: String,
    /// Column of `application` (for errors).
    pub application_col: usize,
    pub num_replicas: u32,
    pub batch_size: u32,
    /// Column of `batch_size` (for errors).
    pub batch_col: usize,
}

/// Whether `text` starts with the Sia workload header.
pub fn is_workload(text: &str) -> bool {
    text.lines()
        .next()
        .is_some_and(|h| h.trim_start_matches('\u{feff}').trim() == WORKLOAD_HEADER)
}

/// Parses the workload's lines (at most `limit`), without the profiles.
pub fn parse_workload(
    text: &str,
    file: &str,
    limit: Option<usize>,
) -> Result<Vec<WorkloadRow>, String> {
    let header = text.lines().next().unwrap_or("");
    if header.trim_start_matches('\u{feff}').trim() != WORKLOAD_HEADER {
        return Err(at(
            file,
            1,
            1,
            format_args!("expected the header {WORKLOAD_HEADER}"),
        ));
    }
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        if limit.is_some_and(|l| out.len() >= l) {
            break;
        }
        let ln = i + 1;
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let f = fields(line, ',');
        if f.len() != 5 {
            return Err(at(
                file,
                ln,
                1,
                format_args!(
                    "expected 5 comma-separated fields ({WORKLOAD_HEADER}), found {}",
                    f.len()
                ),
            ));
        }
        let time_s: f64 = num(
            &f,
            1,
            file,
            ln,
            "time",
            positive,
            "a number of seconds >= 0",
        )?;
        let num_replicas: u32 = num(
            &f,
            3,
            file,
            ln,
            "num_replicas",
            |v| (1..=4096).contains(v),
            "in 1..=4096",
        )?;
        let batch_size: u32 = num(
            &f,
            4,
            file,
            ln,
            "batch_size",
            |v| *v >= 1,
            "a whole number >= 1",
        )?;
        let application = f[2].1.trim().to_string();
        if application.is_empty()
            || application.contains(['/', '\\'])
            || application.starts_with('.')
        {
            return Err(at(
                file,
                ln,
                f[2].0,
                format_args!("application `{application}` is not a model name (e.g. cifar10)"),
            ));
        }
        out.push(WorkloadRow {
            line: ln,
            name: f[0].1.trim().to_string(),
            time_s,
            application,
            application_col: f[2].0,
            num_replicas,
            batch_size,
            batch_col: f[4].0,
        });
    }
    Ok(out)
}

/// Builds the jobs of a workload from its rows and the models' profiles, for a cluster of
/// `gpu_types`. Returns the jobs and notes (deduplicated) on throughputs that are not from
/// an exactly profiled placement.
pub fn build_jobs(
    rows: &[WorkloadRow],
    file: &str,
    profiles: &Profiles,
    gpu_types: &[String],
) -> Result<(Vec<SimJob>, Vec<String>), String> {
    let machines: Vec<Machine> = gpu_types
        .iter()
        .map(|t| machine_for_type(t))
        .collect::<Result<_, _>>()?;
    let mut notes: Vec<String> = Vec::new();
    let mut jobs = Vec::new();
    for r in rows {
        let Some(model) = profiles.models.get(&r.application) else {
            return Err(at(
                file,
                r.line,
                r.application_col,
                format_args!(
                    "application `{}` has no profiles in {} (models there: {})",
                    r.application,
                    profiles.dir,
                    if profiles.available.is_empty() {
                        "none".to_string()
                    } else {
                        profiles.available.join(", ")
                    }
                ),
            ));
        };
        let v = &model.validation;
        let (Some(init_batch), Some(max_batch)) = (v.init_batch(), v.max_batch()) else {
            return Err(at(
                file,
                r.line,
                r.application_col,
                format_args!("{} has no validation profiles", r.application),
            ));
        };
        // Work in iterations at the requested batch; a machine where the job really trains
        // with another global batch (rounding of the local batch) gets its speed scaled by
        // the ratio of the iterations the two batches need.
        let steps = v.iterations_at(f64::from(r.batch_size)).ok_or_else(|| {
            at(
                file,
                r.line,
                r.batch_col,
                format_args!(
                    "batch_size {} is outside the batch sizes validated for {} ({}): \
                     the run's length cannot be derived",
                    r.batch_size,
                    r.application,
                    model.validation.range()
                ),
            )
        })?;
        let slow = slowdown(&r.application).unwrap_or_else(|| {
            let n = format!(
                "{}: no slowdown factor in Sia's simulator_config.SLOWDOWNS; profiles used as measured",
                r.application
            );
            if !notes.contains(&n) {
                notes.push(n);
            }
            1.0
        });
        // Speed per GPU type with `gpus` GPUs training at global batch `batch`; notes only
        // for the requested size and batch.
        let speed_at = |gpus: u32, batch: u32, notes: &mut Vec<String>| {
            let mut per_type = BTreeMap::new();
            for (t, m) in gpu_types.iter().zip(&machines) {
                let Some(mp) = model.machines.get(m.name) else {
                    continue;
                };
                let Some((secs, effective, source)) =
                    mp.iteration_s(gpus, batch, m.gpus_per_node, init_batch, max_batch)
                else {
                    continue;
                };
                let Some(work) = v.iterations_at(effective) else {
                    continue;
                };
                let note = match source {
                    _ if gpus != r.num_replicas || batch != r.batch_size => None,
                    Source::Placement(_) => None,
                    Source::Scalability(n, g) => Some(format!(
                        "{} on {t} ({}): {} GPUs from the scalability profile ({n} nodes, {g} GPUs)",
                        r.application, m.name, r.num_replicas
                    )),
                    Source::Nearest { wanted, used } => Some(format!(
                        "{} on {t} ({}): no profile for {} nodes x {} GPUs; used the nearest, {} nodes x {} GPUs",
                        r.application, m.name, wanted.0, wanted.1, used.0, used.1
                    )),
                };
                if let Some(n) = note
                    && !notes.contains(&n)
                {
                    notes.push(n);
                }
                per_type.insert(t.clone(), steps / work / (secs * slow));
            }
            per_type
        };
        let _ = speed_at(r.num_replicas, r.batch_size, &mut notes);
        // Sia's jobs adapt their batch size to the GPUs they get: with each size a job
        // trains at the global batch that makes the most progress a second (Sia's goodput;
        // chosen once per size here, per epoch there). The candidates: the requested batch
        // and a sqrt(2) grid over the validated range.
        let adaptive_at = |gpus: u32| {
            let mut batches = vec![r.batch_size];
            let mut b = f64::from(init_batch);
            while b <= f64::from(max_batch) + 0.5 {
                batches.push(b.round() as u32);
                b *= std::f64::consts::SQRT_2;
            }
            let mut best: BTreeMap<String, f64> = BTreeMap::new();
            for batch in batches {
                for (t, speed) in speed_at(gpus, batch, &mut Vec::new()) {
                    let e = best.entry(t).or_insert(0.0);
                    *e = e.max(speed);
                }
            }
            best
        };
        // A job may also run with fewer GPUs than it asks (never more: the workload says
        // how many it wants), at the speed the profiles give that size.
        let speeds: Vec<BTreeMap<String, f64>> = (1..=r.num_replicas).map(adaptive_at).collect();
        let per_type = speeds.last().cloned().unwrap_or_default();
        jobs.push(SimJob {
            id: 0,
            name: if r.name.is_empty() {
                format!("sia-{}", r.line)
            } else {
                r.name.clone()
            },
            arrival_s: r.time_s,
            gpus: r.num_replicas,
            steps,
            throughput: Throughput::PerType(per_type),
            job_type: format!("{} (batch size {})", r.application, r.batch_size),
            queue: "default".into(),
            allowed_types: Vec::new(),
            restart_s: Some(restart_s(&r.application)),
            start_s: restart_s(&r.application),
            elastic: Some(Elastic {
                min: 1,
                max: r.num_replicas,
                speeds,
            }),
        });
    }
    Ok((finish(jobs), notes))
}
