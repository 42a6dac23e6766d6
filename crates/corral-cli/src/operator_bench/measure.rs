//! What the bench reads besides the pods: a process's CPU time and memory (/proc), the
//! operator's writes (the API server's audit log) and the API server's request counter
//! (its /metrics).

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use corral_kube::testenv::{OPERATOR_USER, raw};
use kube::Client;
use serde_json::Value;

/// User + system CPU seconds of process `pid` so far.
pub fn cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces), from field 3 (state) on.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the system; it has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (ticks > 0).then(|| (utime + stime) / ticks as f64)
}

/// A field of /proc/PID/status in MB (`VmRSS`: resident now, `VmHWM`: its peak).
pub fn memory_mb(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status
        .lines()
        .find(|l| l.strip_prefix(field).is_some_and(|r| r.starts_with(':')))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024.0 / 1e6)
}

/// The audit log's length now: where the writes after this moment start.
pub fn audit_offset(log: &Path) -> u64 {
    std::fs::metadata(log).map(|m| m.len()).unwrap_or(0)
}

/// The operator's writes between two offsets of the audit log, by `verb resource[/sub]`
/// (the policy logs only its create, update, patch and delete calls: one event each at
/// ResponseComplete).
pub fn operator_writes(log: &Path, from: u64, to: u64) -> Result<BTreeMap<String, u64>, String> {
    let mut file = std::fs::File::open(log).map_err(|e| format!("{}: {e}", log.display()))?;
    file.seek(SeekFrom::Start(from))
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let mut text = String::new();
    file.take(to.saturating_sub(from))
        .read_to_string(&mut text)
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let mut writes = BTreeMap::new();
    for line in text.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if event["user"]["username"] != OPERATOR_USER || event["stage"] != "ResponseComplete" {
            continue;
        }
        let object = &event["objectRef"];
        let mut resource = object["resource"].as_str().unwrap_or("?").to_string();
        if let Some(sub) = object["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        let verb = event["verb"].as_str().unwrap_or("?");
        *writes.entry(format!("{verb} {resource}")).or_insert(0) += 1;
    }
    Ok(writes)
}

/// The API server's `apiserver_request_total`, summed over its labels: every request it
/// answered, from anyone.
pub async fn apiserver_requests(admin: &Client) -> Result<f64, String> {
    let (code, body) = raw(admin, "GET", "/metrics", None)
        .await
        .map_err(|e| format!("kube-apiserver /metrics: {e}"))?;
    let Value::String(text) = body else {
        return Err(format!(
            "kube-apiserver /metrics answered {code} without text"
        ));
    };
    Ok(text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// The operator's own counters from its /metrics: passes, their summed seconds, and the
/// passes that rebuilt the control plane by why (`rebuilds{reason}`).
pub fn operator_counters(port: u16) -> BTreeMap<String, f64> {
    let url = format!("http://127.0.0.1:{port}/metrics");
    let text = ureq::get(&url)
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
        .unwrap_or_default();
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let key = match name {
            "corral_scheduler_cycles_total" => "passes".to_string(),
            "corral_scheduler_cycle_duration_seconds_sum" => "pass_secs".to_string(),
            "corral_plan_duration_seconds_sum" => "plan_secs".to_string(),
            // The pass histogram's buckets are 0.5 ms x 2^k: these two bound 1 s and 2 s.
            "corral_scheduler_cycle_duration_seconds_bucket{le=\"1.024\"}" => {
                "passes_within_1s".to_string()
            }
            "corral_scheduler_cycle_duration_seconds_bucket{le=\"2.048\"}" => {
                "passes_within_2s".to_string()
            }
            n => match n
                .strip_prefix("corral_plane_rebuilds_total{reason=\"")
                .and_then(|r| r.strip_suffix("\"}"))
            {
                Some(reason) => format!("rebuilds{{{reason}}}"),
                None => continue,
            },
        };
        out.insert(key, value);
    }
    out
}

/// The `q`-quantile (0..=1) of sorted seconds, nearest rank.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&xs, 0.5), Some(50.0));
        assert_eq!(quantile(&xs, 0.99), Some(99.0));
        assert_eq!(quantile(&[3.0], 0.99), Some(3.0));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn writes_of_the_operator_only_by_verb_and_resource() {
        let dir = tempfile::tempdir().expect("dir");
        let log = dir.path().join("audit.log");
        let op = OPERATOR_USER;
        let lines = [
            format!(r#"{{"stage":"ResponseComplete","verb":"create","user":{{"username":"{op}"}},"objectRef":{{"resource":"pods"}}}}"#),
            format!(r#"{{"stage":"ResponseComplete","verb":"create","user":{{"username":"{op}"}},"objectRef":{{"resource":"pods","subresource":"binding"}}}}"#),
            format!(r#"{{"stage":"ResponseStarted","verb":"create","user":{{"username":"{op}"}},"objectRef":{{"resource":"pods"}}}}"#),
            r#"{"stage":"ResponseComplete","verb":"create","user":{"username":"admin"},"objectRef":{"resource":"pods"}}"#.to_string(),
        ];
        std::fs::write(&log, lines.join("\n") + "\n").expect("write");
        let all = operator_writes(&log, 0, audit_offset(&log)).expect("read");
        assert_eq!(all.get("create pods"), Some(&1));
        assert_eq!(all.get("create pods/binding"), Some(&1));
        assert_eq!(all.len(), 2);
        let first_len = lines[0].len() as u64 + 1;
        let rest = operator_writes(&log, first_len, audit_offset(&log)).expect("read");
        assert_eq!(rest.get("create pods"), None);
    }
}
