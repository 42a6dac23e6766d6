//! Sia's workloads and throughput profiles (Jayaram Subramanya et al., "Sia: Heterogeneity-
//! aware, goodput-optimized ML-cluster scheduling", SOSP 2023).
//!
//! A workload (`workloads/{philly,saturn}/workload-N.csv`) is
//! `name,time,application,num_replicas,batch_size`: arrival in seconds, the model (a
//! directory of the profiles, `traces/<model>/`), the GPUs the job asks for and its global
//! batch size. Sia's workloads give no durations; this reader derives them from the
//! profiles, as Sia's own simulator does for a job that keeps its requested GPUs and batch
//! size (no adaptation):
//!
//! - **Work** (steps): the iterations Sia's simulator makes the job run, at the job's
//!   global batch size (its `Job.step`, sia-simulator/job.py lines 414-511 of
//!   siasosp23/artifacts at aaf7a0de): each epoch `e` of the model's budget (the rows of
//!   `validation-<batch>.csv`: cifar10 100, imagenet 90, deepspeech2 80, yolov3 50, ncf 10,
//!   bert and gpt_pmp 2) needs `progress(e+1) - progress(e)` of progress (the least over the
//!   batch sizes, in iterations at the smallest validated batch), made at
//!   `gain = (var + sqr) / (var / scale + sqr)` per iteration, `scale` = batch / smallest
//!   batch, with the epoch's gradient statistics linear between validated batch sizes; see
//!   [`Validation::iterations_at`]. A batch size outside the validated ones is an error.
//! - **Calibration**: Sia divides every throughput by a per-model slowdown fitted to real
//!   runs ([`slowdown`]: cifar10 1.8, ncf 1.5, the others 1.2), and charges each model its
//!   own checkpoint-restore time on every allocation, the first included ([`restart_s`]:
//!   15 s for ncf to 250 s for imagenet), which the jobs carry as their restart cost.
//! - **Speed** on a GPU type (steps/s): 1 / (iteration time x slowdown) of the job's placement on that
//!   machine, from `placements-<machine>.csv` and `scalability-<machine>.csv`. The
//!   placement is the compact one (full nodes, then the remainder:
//!   6 GPUs on 4-GPU nodes = `42`, normalised like Sia to its smallest rotation, `24`).
//!   The local batch is `ceil(batch / GPUs)`; when it exceeds the largest local batch
//!   profiled for the placement, the job accumulates gradients as in Sia
//!   (`accum = ceil(local / max_local) - 1`, atomic batch `ceil(local / (accum + 1))`,
//!   iteration time `step + (step - sync) x accum`). `step_time` is the whole iteration and
//!   already includes `sync_time` (the profiles show it: on 6 single-GPU T4 nodes cifar10's
//!   step is 0.141 s with 0.099 s of sync, and 0.042 s of compute, the one-GPU step time),
//!   so the time is not `step + sync`. Step and sync times are interpolated linearly in the
//!   local batch between profiled rows and held at the ends.
//!   When the placement itself is not profiled the `(nodes, replicas)` group of
//!   `scalability-<machine>.csv` with the same node and GPU count is used, else the nearest
//!   measured group (fewest replicas away, then nodes); each such fallback is reported in
//!   the reader's notes.
//! - A model without profiles for a machine cannot run on that GPU type (`gpt_pmp` has only
//!   `dgx-ext` and `rtx`): its throughput has no entry for the type, which every policy
//!   reads as "cannot run there". `gpt_pmp` is pipeline-parallel in Sia (`PMPApplication`);
//!   here it is treated like the data-parallel models (no workload of the traces uses it).
//!
//! GPU types of the simulated cluster map to Sia's machines: `t4` = `aws` (4 per node),
//! `v100` = `azure` (8), `a100` = `dgx-ext` (8; `dgx` names the smaller A100 profile set),
//! `rtx6000` = `quad` (Quadro RTX 6000, 4), `rtx2080ti` = `rtx` (8); the machine names work
//! as type names too. Sia's default cluster is [`DEFAULT_CLUSTER`].

use std::collections::BTreeMap;
use std::path::Path;

use super::alibaba::{columns, num, rows};
use super::{at, fields, finish};
use crate::job::{SimJob, Throughput};

/// The header of a Sia workload file.
pub const WORKLOAD_HEADER: &str = "name,time,application,num_replicas,batch_size";

/// Sia's default cluster (the paper's): 6 `aws` nodes of 4 T4, 2 `dgx-ext` nodes of 8 A100,
/// 3 `rtx` nodes of 8 RTX 2080 Ti: 64 GPUs.
pub const DEFAULT_CLUSTER: &str = "t4:24/4,a100:16/8,rtx2080ti:24/8";

/// One of Sia's profiled machines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Machine {
    /// The profile suffix (`placements-<name>.csv`).
    pub name: &'static str,
    /// GPU type names that map to this machine (lower case).
    pub gpu_types: &'static [&'static str],
    pub gpus_per_node: u32,
}

/// The machines of Sia's profiles.
pub const MACHINES: [Machine; 6] = [
    Machine {
        name: "aws",
        gpu_types: &["t4"],
        gpus_per_node: 4,
    },
    Machine {
        name: "azure",
        gpu_types: &["v100"],
        gpus_per_node: 8,
    },
    Machine {
        name: "dgx-ext",
        gpu_types: &["a100"],
        gpus_per_node: 8,
    },
    Machine {
        name: "dgx",
        gpu_types: &[],
        gpus_per_node: 8,
    },
    Machine {
        name: "quad",
        gpu_types: &["rtx6000", "quadro-rtx-6000"],
        gpus_per_node: 4,
    },
    Machine {
        name: "rtx",
        gpu_types: &["rtx2080ti", "2080ti"],
        gpus_per_node: 8,
    },
];

/// The machine whose profiles a cluster GPU type uses.
pub fn machine_for_type(gpu_type: &str) -> Result<Machine, String> {
    let t = gpu_type.to_ascii_lowercase();
    MACHINES
        .iter()
        .find(|m| m.name == t || m.gpu_types.contains(&t.as_str()))
        .copied()
        .ok_or_else(|| {
            format!(
                "GPU type `{gpu_type}` has no Sia profiles: expected t4 (aws), v100 (azure), \
                 a100 (dgx-ext), dgx, rtx6000 (quad) or rtx2080ti (rtx)"
            )
        })
}

/// One profiled row: per-GPU batch and seconds per iteration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProfileRow {
    pub local_bsz: f64,
    /// The whole iteration, synchronisation included.
    pub step_s: f64,
    /// The part of `step_s` spent synchronising gradients.
    pub sync_s: f64,
}

/// A model's profile on one machine.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MachineProfile {
    /// Placement (`24`: one node with 2 GPUs, one with 4) -> rows by local batch.
    pub placements: BTreeMap<String, Vec<ProfileRow>>,
    /// `(nodes, replicas)` -> rows by local batch.
    pub scalability: BTreeMap<(u32, u32), Vec<ProfileRow>>,
}

/// One epoch of a validation profile.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpochRow {
    /// Training progress at the end of the epoch, in iterations at the model's smallest
    /// validated batch (Sia's `progress` column).
    pub progress: f64,
    /// Gradient square norm and variance during the epoch (the statistical-efficiency
    /// model's inputs).
    pub grad_sqr: f64,
    pub grad_var: f64,
}

/// The validation profiles of a model: per validated global batch size, one row per epoch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Validation {
    pub epochs: BTreeMap<u32, Vec<EpochRow>>,
}

/// The profiles of one model.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelProfile {
    /// Machine name -> profile; a machine missing here cannot run the model.
    pub machines: BTreeMap<String, MachineProfile>,
    pub validation: Validation,
}

/// Profiles of the models a workload uses, read from Sia's `traces/` directory.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Profiles {
    /// Where they were read from (for messages).
    pub dir: String,
    pub models: BTreeMap<String, ModelProfile>,
    /// Every model directory found (for "did you mean" in errors).
    pub available: Vec<String>,
}

/// Sorts rows by local batch; repeated measurements of one local batch are averaged.
fn sort_rows(v: &mut Vec<ProfileRow>) {
    v.sort_by(|a, b| a.local_bsz.total_cmp(&b.local_bsz));
    let mut out: Vec<(ProfileRow, f64)> = Vec::with_capacity(v.len());
    for r in v.iter() {
        match out.last_mut() {
            Some((a, n)) if a.local_bsz == r.local_bsz => {
                a.step_s += r.step_s;
                a.sync_s += r.sync_s;
                *n += 1.0;
            }
            _ => out.push((*r, 1.0)),
        }
    }
    *v = out
        .into_iter()
        .map(|(r, n)| ProfileRow {
            local_bsz: r.local_bsz,
            step_s: r.step_s / n,
            sync_s: r.sync_s / n,
        })
        .collect();
}

fn positive(v: &f64) -> bool {
    v.is_finite() && *v >= 0.0
}

/// Parses `placements-<machine>.csv` (`placement,local_bsz,step_time,sync_time` in any order).
pub fn parse_placements(
    text: &str,
    file: &str,
) -> Result<BTreeMap<String, Vec<ProfileRow>>, String> {
    let header = text.lines().next().ok_or_else(|| {
        at(
            file,
            1,
            1,
            "empty file: expected placement,local_bsz,step_time,sync_time",
        )
    })?;
    let ([p, l, s, y], names) = columns(
        header,
        file,
        ["placement", "local_bsz", "step_time", "sync_time"],
    )?;
    let mut out: BTreeMap<String, Vec<ProfileRow>> = BTreeMap::new();
    for (ln, f) in rows(text, file, names.len())? {
        let (pcol, pl) = f[p];
        let pl = pl.trim();
        if pl.is_empty() || !pl.bytes().all(|b| (b'1'..=b'9').contains(&b)) {
            return Err(at(
                file,
                ln,
                pcol,
                format_args!(
                    "placement `{pl}` is not a string of digits 1-9 (GPUs per node, e.g. 24)"
                ),
            ));
        }
        let row = profile_row(&f, [l, s, y], file, ln)?;
        out.entry(pl.to_string()).or_default().push(row);
    }
    for v in out.values_mut() {
        sort_rows(v);
    }
    Ok(out)
}

/// The `local_bsz`, `step_time` and `sync_time` columns of a profile row.
fn profile_row(
    f: &[(usize, &str)],
    [l, s, y]: [usize; 3],
    file: &str,
    ln: usize,
) -> Result<ProfileRow, String> {
    let above_zero = |v: &f64| v.is_finite() && *v > 0.0;
    Ok(ProfileRow {
        local_bsz: num(f, l, file, ln, "local_bsz", above_zero, "a number > 0")?,
        step_s: num(f, s, file, ln, "step_time", above_zero, "a number > 0")?,
        sync_s: num(f, y, file, ln, "sync_time", positive, "a number >= 0")?,
    })
}

/// Parses `scalability-<machine>.csv` (`num_nodes,num_replicas,local_bsz,step_time,sync_time`).
pub fn parse_scalability(
    text: &str,
    file: &str,
) -> Result<BTreeMap<(u32, u32), Vec<ProfileRow>>, String> {
    let header = text.lines().next().ok_or_else(|| {
        at(
            file,
            1,
            1,
            "empty file: expected num_nodes,num_replicas,local_bsz,step_time,sync_time",
        )
    })?;
    let ([n, r, l, s, y], names) = columns(
        header,
        file,
        [
            "num_nodes",
            "num_replicas",
            "local_bsz",
            "step_time",
            "sync_time",
        ],
    )?;
    let mut out: BTreeMap<(u32, u32), Vec<ProfileRow>> = BTreeMap::new();
    for (ln, f) in rows(text, file, names.len())? {
        let nodes: u32 = num(
            &f,
            n,
            file,
            ln,
            "num_nodes",
            |v| (1..=4096).contains(v),
            "in 1..=4096",
        )?;
        let reps: u32 = num(
            &f,
            r,
            file,
            ln,
            "num_replicas",
            |v| (1..=65536).contains(v),
            "in 1..=65536",
        )?;
        let row = profile_row(&f, [l, s, y], file, ln)?;
        out.entry((nodes, reps)).or_default().push(row);
    }
    for v in out.values_mut() {
        sort_rows(v);
    }
    Ok(out)
}

/// Parses one `validation-<batch>.csv`: one row per epoch.
pub fn parse_validation(text: &str, file: &str) -> Result<Vec<EpochRow>, String> {
    let header = text.lines().next().ok_or_else(|| {
        at(
            file,
            1,
            1,
            "empty file: expected progress,iteration,metric,grad_sqr,grad_var",
        )
    })?;
    let ([p, sq, var], names) = columns(header, file, ["progress", "grad_sqr", "grad_var"])?;
    let mut out = Vec::new();
    let mut last = 0.0;
    for (ln, f) in rows(text, file, names.len())? {
        let progress: f64 = num(
            &f,
            p,
            file,
            ln,
            "progress",
            |v: &f64| v.is_finite() && *v > last,
            "a number greater than the previous epoch's",
        )?;
        last = progress;
        let grad_sqr: f64 = num(
            &f,
            sq,
            file,
            ln,
            "grad_sqr",
            |v: &f64| v.is_finite() && *v >= 0.0,
            "a number >= 0",
        )?;
        let grad_var: f64 = num(
            &f,
            var,
            file,
            ln,
            "grad_var",
            |v: &f64| v.is_finite() && *v >= 0.0,
            "a number >= 0",
        )?;
        if grad_sqr + grad_var <= 0.0 {
            return Err(at(
                file,
                ln,
                1,
                "grad_sqr and grad_var are both 0: the statistical efficiency is undefined",
            ));
        }
        out.push(EpochRow {
            progress,
            grad_sqr,
            grad_var,
        });
    }
    if out.is_empty() {
        return Err(at(file, 2, 1, "no epochs: expected one row per epoch"));
    }
    Ok(out)
}

impl Validation {
    /// Sia's `init_batch_size`: the smallest validated batch.
    pub fn init_batch(&self) -> Option<u32> {
        self.epochs.keys().next().copied()
    }

    /// Sia's `max_batch_size`: the largest validated batch.
    pub fn max_batch(&self) -> Option<u32> {
        self.epochs.keys().next_back().copied()
    }

    /// Sia's `max_epochs`: the shortest validation file (the explicit budgets in Sia's
    /// `APPLICATIONS` table equal it for every model of the profiles).
    pub fn max_epochs(&self) -> usize {
        self.epochs.values().map(Vec::len).min().unwrap_or(0)
    }

    /// Progress at the start of `epoch` (Sia's `get_progress`: the least over the batch
    /// sizes of the progress after epoch `epoch - 1`).
    fn progress(&self, epoch: usize) -> f64 {
        if epoch == 0 {
            return 0.0;
        }
        self.epochs
            .values()
            .filter_map(|v| v.get(epoch - 1))
            .map(|r| r.progress)
            .fold(f64::INFINITY, f64::min)
    }

    /// Gradient statistics of `epoch` at global batch `batch`, linear between validated
    /// batch sizes (Sia's `get_grad_stats`).
    fn grad_stats(&self, batch: f64, epoch: usize) -> Option<(f64, f64)> {
        let lo = self
            .epochs
            .iter()
            .rev()
            .find(|(b, _)| f64::from(**b) <= batch)?;
        let hi = self.epochs.iter().find(|(b, _)| f64::from(**b) >= batch)?;
        let (l, h) = (lo.1.get(epoch)?, hi.1.get(epoch)?);
        if lo.0 == hi.0 {
            return Some((l.grad_sqr, l.grad_var));
        }
        let (a, b) = (f64::from(*lo.0), f64::from(*hi.0));
        let w = |x: f64, y: f64| ((batch - a) * y + (b - batch) * x) / (b - a);
        Some((w(l.grad_sqr, h.grad_sqr), w(l.grad_var, h.grad_var)))
    }

    /// Iterations a run at global batch `batch` needs to finish training, as Sia's simulator
    /// counts them (siasosp23/artifacts at aaf7a0de, sia-simulator/job.py, `Job.step`, lines
    /// 414-511): epoch `e` needs `progress(e + 1) - progress(e)` of progress, made at `gain`
    /// per iteration, where `gain = (var + sqr) / (var / scale + sqr)` with `scale = batch /
    /// init_batch` and the epoch's gradient statistics; the run ends after the last epoch
    /// of the budget (`get_completion_epoch` without a target metric: `max_epochs - 1`).
    /// None when `batch` is outside the validated batch sizes.
    pub fn iterations_at(&self, batch: f64) -> Option<f64> {
        let init = f64::from(self.init_batch()?);
        if batch < init || batch > f64::from(self.max_batch()?) {
            return None;
        }
        let scale = batch / init;
        let mut total = 0.0;
        for e in 0..self.max_epochs() {
            let (sqr, var) = self.grad_stats(batch, e)?;
            let gain = (var + sqr) / (var / scale + sqr);
            if !(gain.is_finite() && gain > 0.0) {
                return None;
            }
            total += (self.progress(e + 1) - self.progress(e)) / gain;
        }
        (total.is_finite() && total > 0.0).then_some(total)
    }

    fn range(&self) -> String {
        match (self.init_batch(), self.max_batch()) {
            (Some(a), Some(b)) => format!("{a}..={b}"),
            _ => "none".into(),
        }
    }
}

/// Sia's calibration of its simulator to real runs (sia-simulator/simulator_config.py,
/// `SLOWDOWNS`, line 31; applied as `1 / slowdown` to every throughput in job.py line 105):
/// real runs were this many times slower than the profiles say.
pub fn slowdown(model: &str) -> Option<f64> {
    Some(match model {
        "cifar10" => 1.8,
        "imagenet" | "yolov3" | "bert" | "deepspeech2" => 1.2,
        "ncf" => 1.5,
        "gpt_pmp" => 1.0,
        _ => return None,
    })
}

/// Seconds a model's job spends checkpointing and restoring on each (re)allocation, first
/// start included (sia-simulator/applications.py, `Application.__init__`, lines 56-69:
/// `rescale_time`; job.py `reallocate` line 536 charges it on every new placement).
pub fn restart_s(model: &str) -> f64 {
    match model {
        "cifar10" => 50.0,
        "deepspeech2" => 25.0,
        "bert" => 120.0,
        "yolov3" => 80.0,
        "imagenet" => 250.0,
        "ncf" => 15.0,
        _ => 30.0,
    }
}

/// Linear interpolation of `(step, sync)` at `x` in rows sorted by local batch; held at the
/// ends.
fn interpolate(rows: &[ProfileRow], x: f64) -> Option<(f64, f64)> {
    let first = rows.first()?;
    let last = rows.last()?;
    if x <= first.local_bsz {
        return Some((first.step_s, first.sync_s));
    }
    if x >= last.local_bsz {
        return Some((last.step_s, last.sync_s));
    }
    let i = rows.partition_point(|r| r.local_bsz <= x);
    let (a, b) = (&rows[i - 1], &rows[i]);
    let w = (x - a.local_bsz) / (b.local_bsz - a.local_bsz);
    Some((
        a.step_s + w * (b.step_s - a.step_s),
        a.sync_s + w * (b.sync_s - a.sync_s),
    ))
}

/// The compact placement of `gpus` on nodes of `per_node`, as Sia names it: GPUs per node,
/// rotated to the lexicographically smallest form (`6` on 4-GPU nodes: `24`).
pub fn compact_placement(gpus: u32, per_node: u32) -> String {
    let per_node = per_node.max(1);
    let mut p: Vec<u32> = vec![per_node; (gpus / per_node) as usize];
    if !gpus.is_multiple_of(per_node) {
        p.push(gpus % per_node);
    }
    let best = (0..p.len())
        .map(|i| {
            let mut r = p[i..].to_vec();
            r.extend_from_slice(&p[..i]);
            r
        })
        .min()
        .unwrap_or_default();
    best.iter().map(u32::to_string).collect()
}

/// How a throughput was derived.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// The placement is profiled.
    Placement(String),
    /// The `(nodes, replicas)` group of the scalability profile.
    Scalability(u32, u32),
    /// No exact profile: the nearest measured `(nodes, replicas)` group.
    Nearest {
        wanted: (u32, u32),
        used: (u32, u32),
    },
}

impl MachineProfile {
    /// Seconds per iteration of a job with `gpus` GPUs and global batch `batch` on nodes of
    /// `per_node` GPUs, and where the numbers came from.
    ///
    /// The local batch follows Sia's `Job.update_local_bsz` (sia-simulator/job.py lines
    /// 317-385): `ceil(batch / GPUs)`, accumulated when above the placement's largest
    /// profiled local batch, at least one accumulation step for a single-GPU job above the
    /// smallest validated batch, and the atomic batch capped so that the whole batch stays
    /// within `max_batch`. Also returns the global batch that results (what the job really
    /// trains with, for its statistical efficiency).
    pub fn iteration_s(
        &self,
        gpus: u32,
        batch: u32,
        per_node: u32,
        init_batch: u32,
        max_batch: u32,
    ) -> Option<(f64, f64, Source)> {
        let placement = compact_placement(gpus, per_node);
        let nodes = placement.len() as u32;
        let (rows, source, max_local) = if let Some(r) = self.placements.get(&placement) {
            let max = r.last()?.local_bsz;
            (r.as_slice(), Source::Placement(placement), max)
        } else {
            // Sia's bound on the local batch for unprofiled placements: the largest in any
            // scalability group at least this big.
            let bigger = self
                .scalability
                .iter()
                .filter(|((n, r), _)| *n >= nodes && *r >= gpus)
                .filter_map(|(_, v)| v.last().map(|r| r.local_bsz))
                .fold(f64::NAN, f64::max);
            let (key, rows) = match self.scalability.get_key_value(&(nodes, gpus)) {
                Some((k, v)) => (*k, v),
                None => {
                    // Nearest measured group: placements grouped by (nodes, replicas), and
                    // the scalability groups.
                    let mut cands: Vec<((u32, u32), &Vec<ProfileRow>)> =
                        self.scalability.iter().map(|(k, v)| (*k, v)).collect();
                    for (p, v) in &self.placements {
                        let k = (p.len() as u32, p.bytes().map(|b| u32::from(b - b'0')).sum());
                        cands.push((k, v));
                    }
                    cands.into_iter().min_by_key(|((n, r), _)| {
                        (r.abs_diff(gpus), *r < gpus, n.abs_diff(nodes), *n)
                    })?
                }
            };
            let max = if bigger.is_nan() {
                rows.last()?.local_bsz
            } else {
                bigger
            };
            let source = if key == (nodes, gpus) {
                Source::Scalability(nodes, gpus)
            } else {
                Source::Nearest {
                    wanted: (nodes, gpus),
                    used: key,
                }
            };
            (rows.as_slice(), source, max)
        };
        let n = f64::from(gpus);
        let local = (f64::from(batch) / n - 1e-8).ceil().max(1.0);
        let mut accum = ((local / max_local - 1e-8).ceil() - 1.0).max(0.0);
        if gpus == 1 && batch > init_batch {
            accum = accum.max(1.0);
        }
        let atomic = (local / (accum + 1.0) - 1e-8)
            .ceil()
            .min((f64::from(max_batch) / (n * (accum + 1.0))).floor())
            .max(1.0);
        let (step, sync) = interpolate(rows, atomic)?;
        let t = step + (step - sync).max(0.0) * accum;
        let effective = n * atomic * (accum + 1.0);
        (t.is_finite() && t > 0.0).then_some((t, effective, source))
    }
}

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
        let mut per_type = BTreeMap::new();
        for (t, m) in gpu_types.iter().zip(&machines) {
            let Some(mp) = model.machines.get(m.name) else {
                continue;
            };
            let Some((secs, effective, source)) = mp.iteration_s(
                r.num_replicas,
                r.batch_size,
                m.gpus_per_node,
                init_batch,
                max_batch,
            ) else {
                continue;
            };
            let Some(work) = v.iterations_at(effective) else {
                continue;
            };
            let note = match source {
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
        });
    }
    Ok((finish(jobs), notes))
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

impl Profiles {
    /// Reads the profiles of `models` for `machines` from `dir` (Sia's `traces/`). A model
    /// without a directory is left out (the workload's reader reports it with its line); a
    /// missing `placements-<machine>.csv` means the model cannot run on that machine.
    pub fn load(dir: &Path, models: &[String], machines: &[&str]) -> Result<Profiles, String> {
        let entries = std::fs::read_dir(dir).map_err(|e| {
            format!(
                "{}: {e} (the Sia profiles directory: give --profiles DIR)",
                dir.display()
            )
        })?;
        let mut available: Vec<String> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect();
        available.sort();
        let mut out = Profiles {
            dir: dir.display().to_string(),
            models: BTreeMap::new(),
            available,
        };
        for model in models {
            if out.models.contains_key(model) || !out.available.contains(model) {
                continue;
            }
            let mdir = dir.join(model);
            let mut mp = ModelProfile::default();
            for &m in machines {
                let pf = mdir.join(format!("placements-{m}.csv"));
                if !pf.exists() {
                    continue;
                }
                let placements = parse_placements(&read(&pf)?, &pf.display().to_string())?;
                let sf = mdir.join(format!("scalability-{m}.csv"));
                let scalability = if sf.exists() {
                    parse_scalability(&read(&sf)?, &sf.display().to_string())?
                } else {
                    BTreeMap::new()
                };
                mp.machines.insert(
                    m.to_string(),
                    MachineProfile {
                        placements,
                        scalability,
                    },
                );
            }
            let mut files: Vec<(u32, std::path::PathBuf)> = std::fs::read_dir(&mdir)
                .map_err(|e| format!("{}: {e}", mdir.display()))?
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().to_str()?.to_string();
                    let b = name
                        .strip_prefix("validation-")?
                        .strip_suffix(".csv")?
                        .parse()
                        .ok()?;
                    Some((b, e.path()))
                })
                .collect();
            files.sort();
            if files.is_empty() {
                return Err(format!(
                    "{}: no validation-<batch size>.csv files: the length of a {model} run \
                     cannot be derived",
                    mdir.display()
                ));
            }
            for (b, p) in &files {
                let rows = parse_validation(&read(p)?, &p.display().to_string())?;
                mp.validation.epochs.insert(*b, rows);
            }
            out.models.insert(model.clone(), mp);
        }
        Ok(out)
    }
}

/// Reads a workload and the profiles it needs: `profiles_dir` defaults to
/// `<workload>/../../traces` (Sia's layout: `workloads/<set>/workload-N.csv` beside
/// `traces/<model>/`). Returns the jobs and the reader's notes.
pub fn load(
    workload: &str,
    profiles_dir: Option<&str>,
    gpu_types: &[String],
    limit: Option<usize>,
) -> Result<(Vec<SimJob>, Vec<String>), String> {
    let text = read(Path::new(workload))?;
    let rows = parse_workload(&text, workload, limit)?;
    let dir = match profiles_dir {
        Some(d) => Path::new(d).to_path_buf(),
        None => default_profiles_dir(workload),
    };
    let machines: Vec<Machine> = gpu_types
        .iter()
        .map(|t| machine_for_type(t))
        .collect::<Result<_, _>>()?;
    let mut names: Vec<&str> = machines.iter().map(|m| m.name).collect();
    names.sort_unstable();
    names.dedup();
    let mut models: Vec<String> = rows.iter().map(|r| r.application.clone()).collect();
    models.sort();
    models.dedup();
    let profiles = Profiles::load(&dir, &models, &names)?;
    build_jobs(&rows, workload, &profiles, gpu_types)
}

/// `<workload>/../../traces`.
pub fn default_profiles_dir(workload: &str) -> std::path::PathBuf {
    let p = Path::new(workload);
    let base = p
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .unwrap_or(Path::new("."));
    base.join("traces")
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLACEMENTS: &str = "local_bsz,step_time,sync_time,placement\n\
        32,0.1,0.0,4\n64,0.2,0.0,4\n32,0.3,0.1,44\n64,0.5,0.1,44\n";
    const SCALABILITY: &str = "num_nodes,num_replicas,local_bsz,step_time,sync_time\n\
        3,12,32,1.0,0.5\n3,12,64,2.0,0.5\n";

    fn profiles() -> Profiles {
        let mut mp = ModelProfile::default();
        mp.machines.insert(
            "aws".into(),
            MachineProfile {
                placements: parse_placements(PLACEMENTS, "p.csv").unwrap(),
                scalability: parse_scalability(SCALABILITY, "s.csv").unwrap(),
            },
        );
        let row = |progress, grad_sqr, grad_var| EpochRow {
            progress,
            grad_sqr,
            grad_var,
        };
        mp.validation
            .epochs
            .insert(128, vec![row(500.0, 1.0, 1.0), row(1000.0, 1.0, 3.0)]);
        mp.validation
            .epochs
            .insert(512, vec![row(400.0, 1.0, 1.0), row(1000.0, 1.0, 3.0)]);
        let mut p = Profiles {
            dir: "traces".into(),
            available: vec!["cifar10".into(), "only_rtx".into()],
            ..Profiles::default()
        };
        p.models.insert("cifar10".into(), mp);
        let mut rtx_only = ModelProfile::default();
        rtx_only.machines.insert(
            "rtx".into(),
            MachineProfile {
                placements: parse_placements(
                    "placement,local_bsz,step_time,sync_time\n8,4,0.5,0.1\n",
                    "r.csv",
                )
                .unwrap(),
                scalability: BTreeMap::new(),
            },
        );
        rtx_only.validation.epochs.insert(
            32,
            vec![EpochRow {
                progress: 100.0,
                grad_sqr: 1.0,
                grad_var: 1.0,
            }],
        );
        p.models.insert("only_rtx".into(), rtx_only);
        p
    }

    fn jobs(text: &str, types: &[&str]) -> Result<(Vec<SimJob>, Vec<String>), String> {
        let rows = parse_workload(text, "w.csv", None)?;
        let types: Vec<String> = types.iter().map(|s| s.to_string()).collect();
        build_jobs(&rows, "w.csv", &profiles(), &types)
    }

    #[test]
    fn placements_are_compact_and_rotated() {
        assert_eq!(compact_placement(6, 4), "24");
        assert_eq!(compact_placement(12, 8), "48");
        assert_eq!(compact_placement(16, 8), "88");
        assert_eq!(compact_placement(10, 4), "244");
        assert_eq!(compact_placement(3, 8), "3");
    }

    #[test]
    fn durations_from_profiles() {
        let h = format!("{WORKLOAD_HEADER}\n");
        // cifar10 runs 1.8x slower than profiled (Sia's calibration) and restarts in 50 s.
        // 4 GPUs, batch 128 (the smallest: scale 1, gain 1): work = progress(2) = 1000
        // iterations; local 32 on placement `4`: 0.1 s per iteration.
        let (j, notes) = jobs(&format!("{h}a,10,cifar10,4,128\n"), &["t4"]).unwrap();
        assert!((j[0].steps - 1000.0).abs() < 1e-9, "{}", j[0].steps);
        assert!((j[0].throughput.on("t4") - 1.0 / (0.1 * 1.8)).abs() < 1e-9);
        assert_eq!((j[0].restart_s, j[0].start_s), (Some(50.0), 50.0));
        assert!(notes.is_empty(), "{notes:?}");
        // Batch 512, scale 4: epoch 0 needs progress 400 (the least of 500 and 400) at gain
        // (1 + 1) / (1/4 + 1) = 1.6 -> 250 iterations; epoch 1 needs 600 at gain
        // (3 + 1) / (3/4 + 1) = 16/7 -> 262.5. Together 512.5.
        let (j, _) = jobs(&format!("{h}a,10,cifar10,4,512\n"), &["t4"]).unwrap();
        assert!((j[0].steps - 512.5).abs() < 1e-9, "{}", j[0].steps);
        // Batch 320 (scale 2.5; the statistics are the same at both batch sizes):
        // 400 / (2 / 1.4) + 600 / (4 / 2.2) = 280 + 330 = 610. Local 80 > max 64:
        // accumulate once, atomic 40: step 0.125, iteration 0.125 + 0.125 = 0.25 s.
        let (j, _) = jobs(&format!("{h}a,10,cifar10,4,320\n"), &["t4"]).unwrap();
        assert!((j[0].steps - 610.0).abs() < 1e-9, "{}", j[0].steps);
        assert!((1.0 / j[0].throughput.on("t4") - 0.25 * 1.8).abs() < 1e-9);
        // 12 GPUs = placement 444, not profiled: the scalability group (3, 12); local 32.
        let (j, notes) = jobs(&format!("{h}a,10,cifar10,12,384\n"), &["aws"]).unwrap();
        assert!((1.0 / j[0].throughput.on("aws") - 1.8).abs() < 1e-9);
        assert_eq!(notes.len(), 1, "{notes:?}");
        // 2 GPUs: nearest group is `4` (1 node, 4 GPUs), reported.
        let (_, notes) = jobs(&format!("{h}a,10,cifar10,2,128\n"), &["t4"]).unwrap();
        assert!(notes[0].contains("nearest"), "{notes:?}");
    }

    #[test]
    fn missing_profile_means_cannot_run_there() {
        let h = format!("{WORKLOAD_HEADER}\n");
        let (j, _) = jobs(&format!("{h}g,0,only_rtx,8,32\n"), &["t4", "rtx2080ti"]).unwrap();
        assert_eq!(j[0].throughput.on("t4"), 0.0);
        assert!(!j[0].can_run_on("t4"));
        assert!(j[0].can_run_on("rtx2080ti"));
    }

    #[test]
    fn errors_name_line_column_and_field() {
        let h = format!("{WORKLOAD_HEADER}\n");
        let e = jobs("name,time,app\n", &["t4"]).unwrap_err();
        assert_eq!(
            e,
            format!("w.csv:1:1: expected the header {WORKLOAD_HEADER}")
        );
        let e = jobs(
            &format!("{h}a,10,cifar10,4,128\nb,11,nope,4,128\n"),
            &["t4"],
        )
        .unwrap_err();
        assert!(
            e.starts_with("w.csv:3:6: application `nope` has no profiles in traces"),
            "{e}"
        );
        assert!(e.contains("models there: cifar10, only_rtx"), "{e}");
        let e = jobs(&format!("{h}a,x,cifar10,4,128\n"), &["t4"]).unwrap_err();
        assert_eq!(e, "w.csv:2:3: time `x` is not a number of seconds >= 0");
        let e = jobs(&format!("{h}a,1,cifar10,0,128\n"), &["t4"]).unwrap_err();
        assert_eq!(e, "w.csv:2:13: num_replicas `0` is not in 1..=4096");
        let e = jobs(&format!("{h}a,1,cifar10,4,64\n"), &["t4"]).unwrap_err();
        assert!(e.starts_with("w.csv:2:15: batch_size 64 is outside"), "{e}");
        assert!(e.contains("128..=512"), "{e}");
        let e = jobs(&format!("{h}a,1,cifar10,4\n"), &["t4"]).unwrap_err();
        assert!(e.starts_with("w.csv:2:1: expected 5"), "{e}");
        let e = jobs(&format!("{h}a,1,cifar10,4,128\n"), &["k80"]).unwrap_err();
        assert!(e.contains("GPU type `k80` has no Sia profiles"), "{e}");
        let e = parse_placements(
            "placement,local_bsz,step_time,sync_time\n4,32,fast,0\n",
            "p.csv",
        )
        .unwrap_err();
        assert_eq!(e, "p.csv:2:6: step_time `fast` is not a number > 0");
        let e = parse_placements("local_bsz,step_time\n", "p.csv").unwrap_err();
        assert!(
            e.starts_with("p.csv:1:1: the header has no `placement` column"),
            "{e}"
        );
        let e = parse_placements(
            "placement,local_bsz,step_time,sync_time\n4x,32,1,0\n",
            "p.csv",
        )
        .unwrap_err();
        assert!(e.starts_with("p.csv:2:1: placement `4x`"), "{e}");
    }

    #[test]
    fn header_sniffing() {
        assert!(is_workload(&format!("{WORKLOAD_HEADER}\na,1,m,1,1\n")));
        assert!(!is_workload(
            "timestamp,duration,num_gpus,gpu_time,cluster\n"
        ));
    }
}
