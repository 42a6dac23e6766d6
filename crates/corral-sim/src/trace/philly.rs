//! The Philly trace: `timestamp,duration,num_gpus,gpu_time,cluster`.
//!
//! No GPU type is recorded, so every job runs at 1 step/s on every type and its steps are
//! its duration in seconds.

use super::{at, fields, finish};
use crate::job::{SimJob, Throughput};

/// Days from 1970-01-01 to the civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `YYYY-MM-DD HH:MM:SS` -> seconds since the epoch.
fn parse_timestamp(s: &str) -> Option<i64> {
    let (date, time) = s.trim().split_once(' ')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':').map(|x| x.parse::<i64>().ok());
    let (h, mi, se) = (t.next()??, t.next()??, t.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    Some(days_from_civil(y, m, day) * 86_400 + h * 3600 + mi * 60 + se)
}

/// Parses at most `limit` data lines (all when `None`).
pub fn parse(text: &str, file: &str, limit: Option<usize>) -> Result<Vec<SimJob>, String> {
    let mut raw = Vec::new();
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h)) if h.trim_start().starts_with("timestamp") => {}
        _ => {
            return Err(at(
                file,
                1,
                1,
                "expected the header timestamp,duration,num_gpus,gpu_time,cluster",
            ));
        }
    }
    for (i, line) in lines {
        if limit.is_some_and(|l| raw.len() >= l) {
            break;
        }
        let ln = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let f = fields(line, ',');
        if f.len() != 5 {
            return Err(at(
                file,
                ln,
                1,
                format_args!("expected 5 comma-separated fields, found {}", f.len()),
            ));
        }
        let ts = parse_timestamp(f[0].1).ok_or_else(|| {
            at(
                file,
                ln,
                f[0].0,
                format_args!("timestamp `{}` is not YYYY-MM-DD HH:MM:SS", f[0].1),
            )
        })?;
        let dur: f64 = f[1]
            .1
            .trim()
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| {
                at(
                    file,
                    ln,
                    f[1].0,
                    format_args!("duration `{}` is not a number >= 0", f[1].1),
                )
            })?;
        let gpus: u32 = f[2]
            .1
            .trim()
            .parse()
            .ok()
            .filter(|g| (1..=4096).contains(g))
            .ok_or_else(|| {
                at(
                    file,
                    ln,
                    f[2].0,
                    format_args!("num_gpus `{}` is not in 1..=4096", f[2].1),
                )
            })?;
        raw.push((ts, dur, gpus, f[4].1.trim().to_string(), i));
    }
    let t0 = raw.iter().map(|r| r.0).min().unwrap_or(0);
    let jobs = raw
        .into_iter()
        .map(|(ts, dur, gpus, team, line)| SimJob {
            id: 0,
            name: format!("philly-{line}"),
            arrival_s: (ts - t0) as f64,
            gpus,
            steps: dur,
            throughput: Throughput::Uniform(1.0),
            job_type: "philly".into(),
            queue: team,
            allowed_types: Vec::new(),
            restart_s: None,
            start_s: 0.0,
            elastic: None,
        })
        .collect();
    Ok(finish(jobs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_sorts() {
        let t = "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,a\n2017-10-09 06:13:03,2951.0,2,5902.0,b\n";
        let jobs = parse(t, "p.csv", None).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].queue, "b");
        assert_eq!(jobs[0].arrival_s, 0.0);
        assert_eq!(jobs[1].arrival_s, 48.0 * 60.0 + 52.0);
        assert_eq!(jobs[0].gpus, 2);
        assert_eq!(parse_timestamp("1970-01-02 00:00:00"), Some(86_400));
    }

    #[test]
    fn errors() {
        let h = "timestamp,duration,num_gpus,gpu_time,cluster\n";
        let e = parse(
            &format!("{h}2017-10-09 07:01:55,x,1,66.0,a\n"),
            "p.csv",
            None,
        )
        .unwrap_err();
        assert_eq!(e, "p.csv:2:21: duration `x` is not a number >= 0");
        let e = parse(
            &format!("{h}2017-13-09 07:01:55,1,1,66.0,a\n"),
            "p.csv",
            None,
        )
        .unwrap_err();
        assert!(e.starts_with("p.csv:2:1:"), "{e}");
        assert!(parse("nope", "p.csv", None).is_err());
        assert!(parse("", "p.csv", None).is_err());
    }
}
