//! Trace parsers. Each returns jobs sorted by arrival (ties: trace order), numbered `0..n`.
//! Errors name the file, line and column; bad input never panics.

pub mod alibaba;
pub mod gavel;
pub mod philly;
pub mod sia;

use crate::job::SimJob;

/// Trace formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Gavel,
    Philly,
    /// Alibaba cluster-trace-gpu-v2023: the fragmentation experiment, not the engine.
    Alibaba,
    /// Sia's workloads, durations and speeds derived from its profiles ([`sia`]).
    Sia,
}

impl Format {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "gavel" => Ok(Format::Gavel),
            "philly" => Ok(Format::Philly),
            "alibaba" => Ok(Format::Alibaba),
            "sia" => Ok(Format::Sia),
            _ => Err(format!(
                "unknown trace format `{s}`: expected gavel, philly, sia or alibaba"
            )),
        }
    }

    /// Guesses the format from the file's first line (Sia's workload header), else from
    /// its name.
    pub fn sniff(path: &str, first_line: &str) -> Option<Self> {
        if sia::is_workload(first_line) {
            Some(Format::Sia)
        } else {
            Self::guess(path)
        }
    }

    /// Guesses the format from the file name.
    pub fn guess(path: &str) -> Option<Self> {
        if path.ends_with(".trace") {
            Some(Format::Gavel)
        } else if path.contains("openb_pod_list") {
            Some(Format::Alibaba)
        } else if path.contains("philly") {
            Some(Format::Philly)
        } else {
            None
        }
    }
}

/// `file:line:column: message` (line and column from 1).
pub(crate) fn at(file: &str, line: usize, col: usize, msg: impl std::fmt::Display) -> String {
    format!("{file}:{line}:{col}: {msg}")
}

/// Splits `line` on `sep`, yielding `(column, field)` with 1-based character columns.
pub(crate) fn fields(line: &str, sep: char) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut col = 1;
    for f in line.split(sep) {
        out.push((col, f));
        col += f.chars().count() + 1;
    }
    out
}

/// Sorts by arrival (stable) and renumbers.
pub(crate) fn finish(mut jobs: Vec<SimJob>) -> Vec<SimJob> {
    jobs.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
    for (i, j) in jobs.iter_mut().enumerate() {
        j.id = i;
    }
    jobs
}
