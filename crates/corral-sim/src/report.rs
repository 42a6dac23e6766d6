//! Output: a text table, JSON, and a self-contained HTML report with inline SVG charts.

use crate::engine::SimResult;
use crate::metrics::PolicyMetrics;

fn h(s: f64) -> String {
    format!("{:.2}", s / 3600.0)
}

/// A fixed-width table, times in hours.
pub fn table(metrics: &[PolicyMetrics]) -> String {
    let mut out = format!(
        "{:<22} {:>6} {:>9} {:>9} {:>9} {:>9} {:>10} {:>8} {:>6} {:>6} {:>7} {:>7} {:>6}\n",
        "policy",
        "done",
        "avg JCT",
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
        "{:<22} {:>6} {:>9} {:>9} {:>9} {:>9} {:>10} {:>8} {:>6} {:>6} {:>7} {:>7} {:>6}\n",
        "", "", "(h)", "(h)", "(h)", "(h)", "(h)", "(h)", "", "", "mean", "", ""
    ));
    for m in metrics {
        out.push_str(&format!(
            "{:<22} {:>6} {:>9} {:>9} {:>9} {:>9} {:>10} {:>8} {:>6.3} {:>6.3} {:>7.2} {:>7} {:>6}\n",
            m.policy,
            m.jobs_completed,
            h(m.avg_jct_s),
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

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A line chart: one polyline per series of `(x, y)` points.
fn svg_chart(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> String {
    let (w, hgt, l, r, t, b) = (720.0, 360.0, 70.0, 160.0, 30.0, 45.0);
    let xmax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .fold(0.0, f64::max)
        .max(1e-9);
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(1e-9);
    let pw = w - l - r;
    let ph = hgt - t - b;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{hgt}\" font-family=\"sans-serif\" font-size=\"11\">\
<text x=\"{}\" y=\"18\" font-size=\"14\" text-anchor=\"middle\">{}</text>\
<rect x=\"{l}\" y=\"{t}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#888\"/>",
        l + pw / 2.0,
        esc(title)
    );
    for i in 0..=4 {
        let f = f64::from(i) / 4.0;
        let y = t + ph - f * ph;
        let x = l + f * pw;
        s.push_str(&format!(
            "<line x1=\"{l}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#eee\"/>\
<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{:.3}</text>\
<text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{:.3}</text>",
            l + pw,
            l - 5.0,
            y + 4.0,
            f * ymax,
            t + ph + 15.0,
            f * xmax
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
            .map(|&(x, y)| format!("{:.1},{:.1}", l + x / xmax * pw, t + ph - y / ymax * ph))
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

/// A self-contained HTML page: the metrics table and SVG charts (JCT CDF per policy,
/// allocation and effective utilisation over time, queue length over time).
pub fn html(
    title: &str,
    metrics: &[PolicyMetrics],
    results: &[SimResult],
    arrivals: &[f64],
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
    let mut rows = String::new();
    for m in metrics {
        rows.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.3}</td><td>{:.3}</td><td>{:.2}</td><td>{}</td><td>{}</td></tr>",
            esc(&m.policy), m.jobs_completed, m.avg_jct_s / 3600.0, m.median_jct_s / 3600.0, m.p95_jct_s / 3600.0,
            m.p99_jct_s / 3600.0, m.makespan_s / 3600.0, m.avg_queueing_delay_s / 3600.0, m.utilization,
            m.effective_utilization, m.rho_mean, m.preemptions, m.migrations
        ));
    }
    format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{t}</title>\
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}td:first-child{{text-align:left}}</style></head><body>\
<h1>{t}</h1><table><tr><th>policy</th><th>done</th><th>avg JCT (h)</th><th>p50 (h)</th><th>p95 (h)</th><th>p99 (h)</th><th>makespan (h)</th><th>queueing (h)</th><th>util</th><th>effective util</th><th>rho mean</th><th>preemptions</th><th>migrations</th></tr>{rows}</table>\
<h2>Job completion time</h2>{}<h2>Utilisation</h2>{}{}<h2>Queue</h2>{}</body></html>\n",
        svg_chart("JCT CDF", "JCT (hours)", "fraction of jobs", &cdf),
        svg_chart("GPUs allocated", "time (hours)", "fraction of GPUs", &alloc),
        svg_chart(
            "Effective utilisation (progress kept)",
            "time (hours)",
            "fraction of GPUs",
            &eff
        ),
        svg_chart("Jobs waiting", "time (hours)", "jobs", &queue),
        t = esc(title)
    )
}
