//! Sia's profiles of a model (`traces/<model>/`): iteration times per placement and per
//! `(nodes, replicas)` group on each machine, and the validation runs per batch size.

use std::collections::BTreeMap;
use std::path::Path;

use crate::trace::alibaba::{columns, num, rows};
use crate::trace::at;

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
pub(super) fn sort_rows(v: &mut Vec<ProfileRow>) {
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

pub(super) fn positive(v: &f64) -> bool {
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
pub(super) fn profile_row(
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

pub(super) fn read(path: &Path) -> Result<String, String> {
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
