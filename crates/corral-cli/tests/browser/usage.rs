//! GPU-hour accounting on the dashboard: the usage page charts and tables what the ledger
//! says a finished job held, as `GET /api/v1/usage` does; the overview charts GPUs in use
//! from the server's history.

use super::driver::{self, Browser};
use super::{TestCluster, TestResult, check};

const GPUS: &str = "
apiVersion: corral.dev/v1alpha1
kind: CorralConfig
node: {gpus: 2, gpuType: FAKE-GPU}
";

const HOLDER: &str = "
apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {name: holder}
spec:
  framework: generic
  replicas:
    worker: {count: 1, resources: {gpu: 2, cpu: 100m, memory: 32Mi}, template: {command: [sleep, '1']}}
";

pub(super) fn the_usage_page_charts_what_the_ledger_counted() -> TestResult {
    if !driver::available() {
        return Ok(());
    }
    let c = TestCluster::start(GPUS)?;
    let api = c.client(None);
    api.submit("default", HOLDER)?;
    // The job holds 2 GPUs for about a second, then its interval is closed in the ledger.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let held = loop {
        let usage = api.get_value("/api/v1/usage")?;
        let gpu_hours: f64 = usage["items"]
            .as_array()
            .map(|items| items.iter().filter_map(|i| i["gpuHours"].as_f64()).sum())
            .unwrap_or(0.0);
        let done = api
            .describe("default", "holder")
            .is_ok_and(|d| d.summary.state.is_finished());
        if done && gpu_hours > 0.0 {
            break gpu_hours;
        }
        check(
            std::time::Instant::now() < deadline,
            "the job did not finish with usage",
        )?;
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let b = Browser::start()?;
    b.goto(&c.url("/#/usage"))?;
    let shown = b.wait(
        "the namespace's GPU-hours in the totals",
        "const td = document.querySelector('#usage-totals tr[data-namespace=\"default\"] td.gpu-hours');
         return td ? td.innerText : ''",
    )?;
    let shown: f64 = shown.as_str().unwrap_or("").parse().unwrap_or(-1.0);
    check(
        (shown - held).abs() <= held * 0.5 + 1e-4,
        format!("the page says {shown} GPU-hours, the API {held}"),
    )?;
    b.wait(
        "the usage chart, drawn",
        "const c = document.querySelector('#usage-chart');
         return c && c.dataset.series === '1' && c.querySelector('canvas')",
    )?;
    b.screenshot("usage")?;
    b.goto(&c.url("/#/"))?;
    b.wait(
        "the GPUs-in-use chart on the overview",
        "const c = document.querySelector('#chart-gpus');
         return c && c.querySelector('canvas') && c.dataset.series === '1'",
    )?;
    b.screenshot("overview-chart")?;
    b.goto(&c.url("/#/jobs/default/holder"))?;
    b.wait(
        "the job's replica charts section",
        "return document.querySelector('#replica-charts')",
    )?;
    Ok(())
}
