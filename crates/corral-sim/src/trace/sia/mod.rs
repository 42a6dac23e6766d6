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
//!
//! The reader's parts: `machines` (Sia's machines and the GPU types they stand for),
//! `profiles` (the profile files and their parsing), `work` (steps from the validation
//! profiles), `calibration`, `speed` (seconds per iteration of a placement) and
//! `workload` (the workload file, and the jobs built from it and the profiles).

mod calibration;
mod machines;
mod profiles;
mod speed;
#[cfg(test)]
mod tests;
mod work;
mod workload;

use std::path::Path;

use crate::job::SimJob;

pub use calibration::{restart_s, slowdown};
pub use machines::{MACHINES, Machine, compact_placement, machine_for_type};
use profiles::read;
pub use profiles::{
    EpochRow, MachineProfile, ModelProfile, ProfileRow, Profiles, Validation, parse_placements,
    parse_scalability, parse_validation,
};
pub use speed::Source;
pub use workload::{WORKLOAD_HEADER, WorkloadRow, build_jobs, is_workload, parse_workload};

/// Sia's default cluster (the paper's): 6 `aws` nodes of 4 T4, 2 `dgx-ext` nodes of 8 A100,
/// 3 `rtx` nodes of 8 RTX 2080 Ti: 64 GPUs.
pub const DEFAULT_CLUSTER: &str = "t4:24/4,a100:16/8,rtx2080ti:24/8";

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
