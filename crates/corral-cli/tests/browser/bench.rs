//! The dashboard's benchmark: the jobs page with 10,000 jobs (`CORRAL_BENCH_JOBS`) in
//! headless Chromium, and the asset bundle's size. Prints one JSON object; asserts no
//! time (the machine is shared and noisy): `withinTarget` says whether the page was
//! ready under the 1 s.
//!
//! `cargo test --release -p corral --test browser -- bench-dashboard`

use std::time::Instant;

use libtest_mimic::Failed;
use serde_json::{Value, json};

use super::TestCluster;
use super::driver::Browser;

const TARGET_MS: f64 = 1000.0;
const BUNDLE_TARGET_GZIPPED: usize = 300 * 1000;
const LOADS: usize = 3;

fn parked(i: usize) -> String {
    format!(
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: bench-{i:05}}}
spec:
  framework: {framework}
  runPolicy: {{suspend: true}}
  replicas:
    worker:
      count: 1
      resources: {{cpu: 100m, memory: 64Mi}}
      template: {{command: [sleep, '1']}}
",
        framework = if i.is_multiple_of(3) {
            "pytorch"
        } else {
            "generic"
        },
    )
}

/// Milliseconds from `t0` in the page until the next frame after `#jobs-count` or the
/// first row changed, once `action` (a statement) ran.
fn timed(b: &Browser, action: &str) -> Result<f64, Failed> {
    let script = format!(
        "const done = arguments[arguments.length - 1];
         const watched = [document.querySelector('#jobs-count'), document.querySelector('#jobs tbody')];
         const t0 = performance.now();
         const obs = new MutationObserver(() => {{ obs.disconnect(); requestAnimationFrame(() => done(performance.now() - t0)); }});
         for (const w of watched) obs.observe(w, {{childList: true, subtree: true, characterData: true}});
         {action}"
    );
    b.js_async(&script)?
        .as_f64()
        .ok_or_else(|| "the page returned no time".into())
}

pub fn run() -> Result<(), Failed> {
    let jobs: usize = std::env::var("CORRAL_BENCH_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let c = TestCluster::start("")?;
    let started = Instant::now();
    let batch = 500;
    let batches: Vec<Vec<usize>> = (0..jobs)
        .collect::<Vec<_>>()
        .chunks(batch)
        .map(<[usize]>::to_vec)
        .collect();
    std::thread::scope(|s| -> Result<(), Failed> {
        let handles: Vec<_> = batches
            .chunks(batches.len().div_ceil(4).max(1))
            .map(|mine| {
                let client = c.client(None);
                s.spawn(move || -> Result<(), String> {
                    for b in mine {
                        let text: Vec<String> = b.iter().map(|&i| parked(i)).collect();
                        // Ten namespaces, a batch in each in turn.
                        let ns = format!("team-{}", b[0] / batch % 10);
                        client
                            .submit(&ns, &text.join("---\n"))
                            .map_err(|e| e.to_string())?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| "a submitter panicked")??;
        }
        Ok(())
    })?;
    let submit_s = started.elapsed().as_secs_f64();
    let b = Browser::start()?;
    let mut loads = Vec::new();
    for n in 0..LOADS {
        // A new query string: a whole new page load each time.
        b.goto(&c.url(&format!("/?load={n}#/jobs")))?;
        let ready = b.wait(
            "the jobs page ready",
            "const m = performance.getEntriesByName('corral-jobs-ready'); return m.length ? m[0].startTime : 0",
        )?;
        loads.push(ready.as_f64().unwrap_or(f64::NAN));
    }
    let shown = b.js("return document.querySelector('#jobs-count').innerText")?;
    let search_ms = timed(
        &b,
        "const i = document.querySelector('#search'); i.value = 'bench-0999'; i.dispatchEvent(new Event('input', {bubbles: true}));",
    )?;
    let clear_ms = timed(
        &b,
        "const i = document.querySelector('#search'); i.value = ''; i.dispatchEvent(new Event('input', {bubbles: true}));",
    )?;
    let sort_ms = timed(&b, "document.querySelector('#sort-name').click();")?;
    let next_page_ms = timed(&b, "document.querySelector('#page-next').click();")?;
    let mut sorted = loads.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let bundle = corral_dashboard::bundle_size();
    let report: Value = json!({
        "benchmark": "dashboard",
        "jobs": jobs,
        "shown": shown,
        "submitSeconds": submit_s,
        "jobsPageReadyMs": {"median": median, "runs": loads},
        "searchMs": search_ms,
        "clearSearchMs": clear_ms,
        "sortMs": sort_ms,
        "nextPageMs": next_page_ms,
        "targetMs": TARGET_MS,
        "withinTarget": median < TARGET_MS,
        "bundle": bundle,
        "bundleTargetGzippedBytes": BUNDLE_TARGET_GZIPPED,
        "bundleWithinTarget": bundle.gzipped_bytes < BUNDLE_TARGET_GZIPPED,
        "browser": b.js("return navigator.userAgent")?,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
