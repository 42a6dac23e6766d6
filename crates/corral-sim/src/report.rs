//! Output: a text table, JSON, and a self-contained HTML report with inline SVG charts.

use crate::engine::SimResult;
use crate::metrics::PolicyMetrics;

fn h(s: f64) -> String {
    format!("{:.2}", s / 3600.0)
}

/// A fixed-width table, times in hours.
pub fn table(metrics: &[PolicyMetrics], references: &[Reference]) -> String {
    let mut out = format!(
        "{:<22} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>8} {:>6} {:>6} {:>7} {:>7} {:>6}\n",
        "policy",
        "done",
        "avg JCT",
        "ref JCT",
        "p50 JCT",
        "p95 JCT",
        "p99 JCT",
        "makespan",
        "queue",
        "util",
        "eff",
        "rho",
        "preempt",
        "migr"
    );
    out.push_str(&format!(
        "{:<22} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>8} {:>6} {:>6} {:>7} {:>7} {:>6}\n",
        "", "", "(h)", "(h)", "(h)", "(h)", "(h)", "(h)", "(h)", "", "", "mean", "", ""
    ));
    for m in metrics {
        // The published simulator's avg JCT for the policy, where one is given.
        let reference = references
            .iter()
            .find(|r| r.policy == m.policy)
            .map_or_else(|| "-".to_string(), |r| h(r.avg_jct_s));
        out.push_str(&format!(
            "{:<22} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>8} {:>6.3} {:>6.3} {:>7.2} {:>7} {:>6}\n",
            m.policy,
            m.jobs_completed,
            h(m.avg_jct_s),
            reference,
            h(m.median_jct_s),
            h(m.p95_jct_s),
            h(m.p99_jct_s),
            h(m.makespan_s),
            h(m.avg_queueing_delay_s),
            m.utilization,
            m.effective_utilization,
            m.rho_mean,
            m.preemptions,
            m.migrations
        ));
    }
    out
}

/// One JSON object per policy, in an array.
pub fn json(metrics: &[PolicyMetrics]) -> String {
    serde_json::to_string_pretty(metrics).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

const COLORS: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#bcbd22", "#7f7f7f",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A line chart: one polyline per series of `(x, y)` points. With `logx` the x axis is
/// logarithmic (decade ticks; points at x <= 0 are left out).
fn svg_chart(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    series: &[(String, Vec<(f64, f64)>)],
    logx: bool,
) -> String {
    let (w, hgt, l, r, t, b) = (820.0, 360.0, 70.0, 200.0, 30.0, 45.0);
    let xs = || {
        series
            .iter()
            .flat_map(|s| s.1.iter().map(|p| p.0))
            .filter(move |x| !logx || *x > 0.0)
    };
    let (xmin, xmax) = if logx {
        let lo = xs().fold(f64::INFINITY, f64::min);
        let hi = xs().fold(0.0, f64::max);
        if lo.is_finite() && hi > 0.0 {
            (
                10f64.powf(lo.log10().floor()),
                10f64
                    .powf(hi.log10().ceil())
                    .max(10f64.powf(lo.log10().floor() + 1.0)),
            )
        } else {
            (0.01, 1.0)
        }
    } else {
        (0.0, xs().fold(0.0, f64::max).max(1e-9))
    };
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(1e-9);
    let pw = w - l - r;
    let ph = hgt - t - b;
    let fx = |x: f64| -> f64 {
        if logx {
            (x.log10() - xmin.log10()) / (xmax.log10() - xmin.log10())
        } else {
            (x - xmin) / (xmax - xmin)
        }
    };
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{hgt}\" font-family=\"sans-serif\" font-size=\"11\">\
<text x=\"{}\" y=\"18\" font-size=\"14\" text-anchor=\"middle\">{}</text>\
<rect x=\"{l}\" y=\"{t}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#888\"/>",
        l + pw / 2.0,
        esc(title)
    );
    let fmt = |v: f64| -> String {
        if v >= 100.0 || v == 0.0 {
            format!("{v:.0}")
        } else if v >= 1.0 {
            format!("{v:.1}")
        } else {
            format!("{v:.2}")
        }
    };
    for i in 0..=4 {
        let f = f64::from(i) / 4.0;
        let y = t + ph - f * ph;
        s.push_str(&format!(
            "<line x1=\"{l}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#eee\"/>\
<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            l + pw,
            l - 5.0,
            y + 4.0,
            fmt(f * ymax),
        ));
    }
    let xticks: Vec<f64> = if logx {
        let (a, b) = (xmin.log10().round() as i32, xmax.log10().round() as i32);
        (a..=b).map(|e| 10f64.powi(e)).collect()
    } else {
        (0..=4)
            .map(|i| xmin + f64::from(i) / 4.0 * (xmax - xmin))
            .collect()
    };
    for v in xticks {
        let x = l + fx(v) * pw;
        s.push_str(&format!(
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{t}\" y2=\"{}\" stroke=\"#eee\"/>\
<text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            t + ph,
            t + ph + 15.0,
            fmt(v)
        ));
    }
    s.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\
<text transform=\"translate(15,{}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        l + pw / 2.0,
        hgt - 8.0,
        esc(xlabel),
        t + ph / 2.0,
        esc(ylabel)
    ));
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let pts: Vec<String> = pts
            .iter()
            .filter(|p| !logx || p.0 > 0.0)
            .map(|&(x, y)| format!("{:.1},{:.1}", l + fx(x) * pw, t + ph - y / ymax * ph))
            .collect();
        s.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"1.5\" points=\"{}\"/>\
<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"3\" fill=\"{c}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            pts.join(" "),
            l + pw + 10.0,
            t + 10.0 + 16.0 * i as f64,
            l + pw + 26.0,
            t + 14.0 + 16.0 * i as f64,
            esc(name)
        ));
    }
    s.push_str("</svg>");
    s
}

/// At most `n` points, evenly picked.
fn thin<T: Copy>(v: &[T], n: usize) -> Vec<T> {
    if v.len() <= n {
        return v.to_vec();
    }
    (0..n).map(|i| v[i * (v.len() - 1) / (n - 1)]).collect()
}

/// Moving average over windows of `k` samples, to make utilisation readable.
fn smooth(v: &[(f64, f64)], k: usize) -> Vec<(f64, f64)> {
    if k <= 1 {
        return v.to_vec();
    }
    v.chunks(k)
        .map(|c| (c[0].0, c.iter().map(|p| p.1).sum::<f64>() / c.len() as f64))
        .collect()
}

/// What the report says about where its numbers came from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Inputs {
    pub title: String,
    /// `(label, value)` lines: trace, cluster, seed, Corral version, round, costs.
    pub lines: Vec<(String, String)>,
    /// Notes on how the trace was read.
    pub notes: Vec<String>,
}

/// A published simulator's result for one policy on the same trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Reference {
    /// The policy's name in this simulator.
    pub policy: String,
    pub avg_jct_s: f64,
    pub makespan_s: Option<f64>,
    /// Whose number it is (e.g. "Gavel's simulator").
    pub source: String,
    /// Why the two differ, where they do by design.
    pub note: String,
    /// Corral's average JCT for the policy under the reference's cost model (no restart
    /// cost), when the run itself charged one.
    pub ours_at_their_costs_s: Option<f64>,
}

/// One column of the metrics table: header, unit, one-line meaning, value, whether lower
/// is better (None: not ranked).
struct Column {
    header: &'static str,
    meaning: &'static str,
    value: fn(&PolicyMetrics) -> f64,
    digits: usize,
    lower_better: Option<bool>,
}

const COLUMNS: [Column; 12] = [
    Column {
        header: "jobs done",
        meaning: "jobs that finished (of those the cluster can run at all)",
        value: |m| m.jobs_completed as f64,
        digits: 0,
        lower_better: Some(false),
    },
    Column {
        header: "avg JCT (h)",
        meaning: "mean job completion time: finish minus arrival, hours",
        value: |m| m.avg_jct_s / 3600.0,
        digits: 2,
        lower_better: Some(true),
    },
    Column {
        header: "p50 JCT (h)",
        meaning: "median job completion time, hours",
        value: |m| m.median_jct_s / 3600.0,
        digits: 2,
        lower_better: Some(true),
    },
    Column {
        header: "p95 JCT (h)",
        meaning: "95th-percentile job completion time, hours (the slow tail)",
        value: |m| m.p95_jct_s / 3600.0,
        digits: 2,
        lower_better: Some(true),
    },
    Column {
        header: "p99 JCT (h)",
        meaning: "99th-percentile job completion time, hours",
        value: |m| m.p99_jct_s / 3600.0,
        digits: 2,
        lower_better: Some(true),
    },
    Column {
        header: "makespan (h)",
        meaning: "first arrival to last completion, hours",
        value: |m| m.makespan_s / 3600.0,
        digits: 2,
        lower_better: Some(true),
    },
    Column {
        header: "queueing (h)",
        meaning: "mean wait from arrival to first start, hours",
        value: |m| m.avg_queueing_delay_s / 3600.0,
        digits: 2,
        lower_better: Some(true),
    },
    Column {
        header: "utilisation",
        meaning: "GPU-seconds held by jobs / (GPUs x makespan), 0-1 (Gavel's definition)",
        value: |m| m.utilization,
        digits: 3,
        lower_better: None,
    },
    Column {
        header: "effective util.",
        meaning: "as utilisation, counting only progress kept (no restart time, no lost work), 0-1",
        value: |m| m.effective_utilization,
        digits: 3,
        lower_better: Some(false),
    },
    Column {
        header: "rho (mean)",
        meaning: "finish-time fairness (Themis): JCT / JCT on a fair 1/N share of the cluster; \
                  below 1 beats a fair share, lower is fairer",
        value: |m| m.rho_mean,
        digits: 2,
        lower_better: Some(true),
    },
    Column {
        header: "preemptions",
        meaning: "times a running job was stopped (each restart costs time)",
        value: |m| m.preemptions as f64,
        digits: 0,
        lower_better: Some(true),
    },
    Column {
        header: "migrations",
        meaning: "times a running job was moved to other GPUs",
        value: |m| m.migrations as f64,
        digits: 0,
        lower_better: Some(true),
    },
];

/// A self-contained HTML page: the inputs, the metrics table (best per metric marked,
/// every metric explained), published simulators' results for the same trace where given,
/// and SVG charts (JCT CDF on a log time axis, allocation and effective utilisation over
/// time, queue length over time), each with its units and a line on how to read it.
pub fn html(
    inputs: &Inputs,
    metrics: &[PolicyMetrics],
    results: &[SimResult],
    arrivals: &[f64],
    references: &[Reference],
) -> String {
    let mut cdf = Vec::new();
    let mut alloc = Vec::new();
    let mut eff = Vec::new();
    let mut queue = Vec::new();
    for r in results {
        let mut jct: Vec<f64> = r
            .states
            .iter()
            .zip(arrivals)
            .filter_map(|(s, a)| s.finished_at.map(|f| (f - a) / 3600.0))
            .collect();
        jct.sort_by(f64::total_cmp);
        let n = jct.len().max(1) as f64;
        let pts: Vec<(f64, f64)> = jct
            .iter()
            .enumerate()
            .map(|(i, &x)| (x, (i + 1) as f64 / n))
            .collect();
        cdf.push((r.policy.clone(), thin(&pts, 400)));
        let k = (r.samples.len() / 300).max(1);
        let g = f64::from(r.total_gpus.max(1));
        let a: Vec<(f64, f64)> = r
            .samples
            .iter()
            .map(|s| (s.t / 3600.0, f64::from(s.allocated) / g))
            .collect();
        let e: Vec<(f64, f64)> = r
            .samples
            .iter()
            .map(|s| (s.t / 3600.0, s.effective.max(0.0)))
            .collect();
        let q: Vec<(f64, f64)> = r
            .samples
            .iter()
            .map(|s| (s.t / 3600.0, f64::from(s.queued)))
            .collect();
        alloc.push((r.policy.clone(), smooth(&a, k)));
        eff.push((r.policy.clone(), smooth(&e, k)));
        queue.push((r.policy.clone(), smooth(&q, k)));
    }
    // Best per ranked column (ties all marked).
    let best: Vec<Option<f64>> = COLUMNS
        .iter()
        .map(|c| {
            let lower = c.lower_better?;
            let vals = metrics.iter().map(|m| (c.value)(m));
            if metrics.len() < 2 {
                return None;
            }
            let (lo, hi) = vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
                (a.min(v), b.max(v))
            });
            // All equal: nothing to mark.
            if format!("{lo:.*}", c.digits) == format!("{hi:.*}", c.digits) {
                return None;
            }
            Some(if lower { lo } else { hi })
        })
        .collect();
    let mut head = String::from("<tr><th>policy</th>");
    for c in &COLUMNS {
        head.push_str(&format!(
            "<th title=\"{}\">{}</th>",
            esc(c.meaning),
            esc(c.header)
        ));
    }
    head.push_str("</tr>");
    let mut rows = String::new();
    for m in metrics {
        rows.push_str(&format!("<tr><td>{}</td>", esc(&m.policy)));
        for (c, b) in COLUMNS.iter().zip(&best) {
            let v = (c.value)(m);
            let text = format!("{v:.*}", c.digits);
            let is_best = b.is_some_and(|b| format!("{b:.*}", c.digits) == text);
            if is_best {
                rows.push_str(&format!("<td class=\"best\">{text} &#9733;</td>"));
            } else {
                rows.push_str(&format!("<td>{text}</td>"));
            }
        }
        rows.push_str("</tr>");
    }
    let mut glossary = String::from("<ul class=\"gloss\">");
    for c in &COLUMNS {
        let rank = match c.lower_better {
            Some(true) => " (lower is better)",
            Some(false) => " (higher is better)",
            None => " (not ranked: holding GPUs is not the same as using them well)",
        };
        glossary.push_str(&format!(
            "<li><b>{}</b>: {}{rank}</li>",
            esc(c.header),
            esc(c.meaning)
        ));
    }
    glossary.push_str("</ul>");
    let mut inputs_html = String::from("<table class=\"inputs\">");
    for (k, v) in &inputs.lines {
        inputs_html.push_str(&format!("<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v)));
    }
    inputs_html.push_str("</table>");
    if !inputs.notes.is_empty() {
        inputs_html.push_str("<ul class=\"notes\">");
        for n in &inputs.notes {
            inputs_html.push_str(&format!("<li>{}</li>", esc(n)));
        }
        inputs_html.push_str("</ul>");
    }
    let refs = if references.is_empty() {
        String::new()
    } else {
        let mut r = String::from(
            "<h2>Against the published simulator</h2><p>The same trace and cluster in the \
             published simulator, policy by policy. Differences of more than 10% are \
             explained in the last column.</p><table><tr><th>policy</th><th>source</th>\
             <th>their avg JCT (h)</th><th>Corral sim avg JCT (h)</th><th>difference</th>\
             <th>Corral sim avg JCT, no restart cost (h)</th><th>difference</th>\
             <th>their makespan (h)</th><th>Corral sim makespan (h)</th><th>why they differ</th></tr>",
        );
        for x in references {
            let ours = metrics.iter().find(|m| m.policy == x.policy);
            let (oj, diff, om) = match ours {
                Some(m) => (
                    format!("{:.2}", m.avg_jct_s / 3600.0),
                    format!("{:+.1}%", (m.avg_jct_s / x.avg_jct_s - 1.0) * 100.0),
                    format!("{:.1}", m.makespan_s / 3600.0),
                ),
                None => ("not run".into(), String::new(), String::new()),
            };
            let (zj, zdiff) = match x.ours_at_their_costs_s {
                Some(v) => (
                    format!("{:.2}", v / 3600.0),
                    format!("{:+.1}%", (v / x.avg_jct_s - 1.0) * 100.0),
                ),
                None => ("(same run)".into(), String::new()),
            };
            r.push_str(&format!(
                "<tr><td>{}</td><td class=\"src\">{}</td><td>{:.2}</td><td>{oj}</td><td>{diff}</td><td>{zj}</td><td>{zdiff}</td><td>{}</td><td>{om}</td><td class=\"why\">{}</td></tr>",
                esc(&x.policy),
                esc(&x.source),
                x.avg_jct_s / 3600.0,
                x.makespan_s
                    .map_or(String::new(), |v| format!("{:.1}", v / 3600.0)),
                esc(&x.note)
            ));
        }
        r.push_str("</table>");
        r
    };
    format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{t}</title>\
<style>body{{font-family:sans-serif;margin:2em;max-width:1300px}}table{{border-collapse:collapse;margin:0.5em 0}}\
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right;white-space:nowrap}}th{{white-space:normal}}td:first-child,th:first-child{{text-align:left}}\
td.best{{font-weight:bold;background:#e6f4e6}}td.src{{white-space:normal;text-align:left;max-width:160px}}td.why{{text-align:left;min-width:300px;max-width:520px;font-size:90%;white-space:normal}}\
.inputs th{{text-align:left;background:#f4f4f4}}.inputs td{{text-align:left}}\
.gloss,.notes{{font-size:90%;color:#333}}p.cap{{font-size:90%;color:#333;max-width:820px}}</style></head><body>\
<h1>{t}</h1><h2>Inputs</h2>{inputs_html}\
<h2>Results</h2><p class=\"cap\">&#9733; and green: the best policy for that metric. Hover a header for its meaning; \
all are explained below the table.</p><table>{head}{rows}</table>{glossary}{refs}\
<h2>Job completion time</h2>{}<p class=\"cap\">Share of jobs (y) finished within a given time of their arrival (x, hours, \
logarithmic: short and long jobs both visible). A curve further left and higher is better.</p>\
<h2>Utilisation</h2>{}<p class=\"cap\">Share of the cluster's GPUs held by jobs, over simulated time (hours since the first \
arrival).</p>{}<p class=\"cap\">Share of the cluster's GPUs doing work that was kept (held GPUs minus restart time \
and work lost to preemption), over simulated time (hours).</p>\
<h2>Queue</h2>{}<p class=\"cap\">Jobs that have arrived and are not running, over simulated time (hours).</p></body></html>\n",
        svg_chart(
            "JCT CDF",
            "job completion time (hours, log scale)",
            "fraction of jobs (0-1)",
            &cdf,
            true
        ),
        svg_chart(
            "GPUs allocated",
            "simulated time (hours)",
            "fraction of GPUs (0-1)",
            &alloc,
            false
        ),
        svg_chart(
            "Effective utilisation (progress kept)",
            "simulated time (hours)",
            "fraction of GPUs (0-1)",
            &eff,
            false
        ),
        svg_chart(
            "Jobs waiting",
            "simulated time (hours)",
            "jobs (count)",
            &queue,
            false
        ),
        t = esc(&inputs.title)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(policy: &str, avg_jct_s: f64) -> PolicyMetrics {
        PolicyMetrics {
            policy: policy.into(),
            jobs: 2,
            jobs_completed: 2,
            jobs_unschedulable: 0,
            avg_jct_s,
            median_jct_s: avg_jct_s,
            p95_jct_s: avg_jct_s,
            p99_jct_s: avg_jct_s,
            max_jct_s: avg_jct_s,
            makespan_s: 7200.0,
            avg_queueing_delay_s: 0.0,
            utilization: 0.5,
            effective_utilization: 0.5,
            rho_mean: 1.0,
            rho_p95: 1.0,
            rho_max: 1.0,
            preemptions: 0,
            migrations: 0,
            restarts: 0,
            rounds: 1,
        }
    }

    #[test]
    fn the_table_puts_the_published_jct_beside_ours_where_there_is_one() {
        let refs = [Reference {
            policy: "b".into(),
            avg_jct_s: 5400.0,
            makespan_s: None,
            source: "Gavel's simulator".into(),
            note: "why".into(),
            ours_at_their_costs_s: None,
        }];
        let t = table(&[metrics("a", 3600.0), metrics("b", 7200.0)], &refs);
        let row = |p: &str| {
            t.lines()
                .find(|l| l.starts_with(&format!("{p} ")))
                .map(|l| l.split_whitespace().take(4).collect::<Vec<_>>())
        };
        assert!(
            t.lines().next().is_some_and(|h| h.contains("ref JCT")),
            "{t}"
        );
        assert_eq!(row("a"), Some(vec!["a", "2", "1.00", "-"]), "{t}");
        assert_eq!(row("b"), Some(vec!["b", "2", "2.00", "1.50"]), "{t}");
    }

    #[test]
    fn html_shows_inputs_explains_metrics_marks_the_best_and_uses_a_log_jct_axis() {
        let inputs = Inputs {
            title: "t".into(),
            lines: vec![
                ("trace".into(), "dev-seed1.trace".into()),
                ("Corral version".into(), "9.9.9".into()),
            ],
            notes: vec!["a note".into()],
        };
        let ms = [metrics("a", 3600.0), metrics("b", 7200.0)];
        let refs = [Reference {
            policy: "b".into(),
            avg_jct_s: 3600.0,
            makespan_s: None,
            source: "Gavel's simulator".into(),
            note: "why".into(),
            ours_at_their_costs_s: Some(5400.0),
        }];
        let page = html(&inputs, &ms, &[], &[], &refs);
        assert!(page.contains("<th>Corral version</th><td>9.9.9</td>"));
        assert!(page.contains("<li>a note</li>"));
        // Policy a has the best average JCT (1.00 h); b is not marked; equal columns are not.
        assert!(
            page.contains("<td class=\"best\">1.00 &#9733;</td>"),
            "{page}"
        );
        assert!(!page.contains("2.00 &#9733;"));
        assert!(!page.contains("<td class=\"best\">2 &#9733;</td>"));
        // Every metric is explained, with its unit.
        for c in &COLUMNS {
            assert!(
                page.contains(&format!("<li><b>{}</b>", esc(c.header))),
                "{}",
                c.header
            );
        }
        assert!(page.contains("hours, log scale"));
        // The reference row: theirs 1.00 h, ours 2.00 h (+100%), at their costs 1.50 h.
        assert!(
            page.contains("<td>1.00</td><td>2.00</td><td>+100.0%</td><td>1.50</td><td>+50.0%</td>"),
            "{page}"
        );
    }

    #[test]
    fn log_axis_has_decade_ticks() {
        let s = svg_chart(
            "c",
            "x",
            "y",
            &[("p".into(), vec![(0.5, 0.1), (30.0, 1.0)])],
            true,
        );
        for tick in [">0.10<", ">1.0<", ">10.0<", ">100<"] {
            assert!(s.contains(tick), "{tick}: {s}");
        }
    }
}
