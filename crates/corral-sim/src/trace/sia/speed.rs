//! Seconds per iteration of a job's placement on a machine, interpolated from the profiles
//! (the **Speed** of the reader's description), and which profile they came from.

use super::machines::compact_placement;
use super::profiles::{MachineProfile, ProfileRow};

/// Linear interpolation of `(step, sync)` at `x` in rows sorted by local batch; held at the
/// ends.
pub(super) fn interpolate(rows: &[ProfileRow], x: f64) -> Option<(f64, f64)> {
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
