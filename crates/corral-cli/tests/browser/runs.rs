//! A pipeline run on the dashboard: listed on the runs page, and its page draws the DAG
//! (laid out by dagre) with each step's phase, as the API describes the run; a stored
//! pipeline listed with the runs made from it, which name it and its version.

use super::driver::{self, Browser};
use super::{TestCluster, TestResult, check};

/// A diamond: prepare, then left and right side by side, then join.
const DIAMOND: &str = "
apiVersion: corral.dev/v1alpha1
kind: PipelineRun
metadata: {name: diamond}
spec:
  pipelineSpec:
    steps:
      - {name: prepare, task: {command: [sleep, '0.2'], resources: {cpu: 10m, memory: 16Mi}}}
      - {name: left, dependsOn: [prepare], task: {command: [sleep, '0.2'], resources: {cpu: 10m, memory: 16Mi}}}
      - {name: right, dependsOn: [prepare], task: {command: [sleep, '0.2'], resources: {cpu: 10m, memory: 16Mi}}}
      - {name: join, dependsOn: [left, right], task: {command: ['true'], resources: {cpu: 10m, memory: 16Mi}}}
";

pub(super) fn a_pipeline_run_is_drawn_as_its_dag() -> TestResult {
    if !driver::available() {
        return Ok(());
    }
    let c = TestCluster::start("")?;
    c.client(None).submit("default", DIAMOND)?;
    let b = Browser::start()?;
    b.goto(&c.url("/#/runs"))?;
    b.wait(
        "the run in the runs table",
        "return document.querySelector('#runs a[href=\"#/runs/default/diamond\"]')",
    )?;
    b.click("#runs a[href=\"#/runs/default/diamond\"]")?;
    // Every step drawn, each Succeeded once the run has ended, without a reload.
    let phases = b.wait(
        "the DAG with four succeeded steps",
        "const s = [...document.querySelectorAll('#dag g.step')];
         return s.length === 4 && s.every(g => g.dataset.phase === 'Succeeded')
           ? s.map(g => g.dataset.step).sort().join(',') : ''",
    )?;
    check(
        phases.as_str() == Some("join,left,prepare,right"),
        format!("{phases}"),
    )?;
    let edges = b.js("return document.querySelectorAll('#dag path.edge').length")?;
    check(edges.as_u64() == Some(4), format!("{edges} edges, not 4"))?;
    // Laid out left to right: a step right of what it needs; left and right side by side.
    let x = |step: &str| -> Result<f64, libtest_mimic::Failed> {
        let v = b.js(&format!(
            "const g = document.querySelector('#dag g.step[data-step=\"{step}\"]');
             const m = g.getAttribute('transform').match(/translate\\(([-\\d.]+),([-\\d.]+)\\)/);
             return [Number(m[1]), Number(m[2])]"
        ))?;
        Ok(v[0].as_f64().unwrap_or(f64::NAN))
    };
    let (prepare, left, right, join) = (x("prepare")?, x("left")?, x("right")?, x("join")?);
    check(
        prepare < left && left == right && right < join,
        format!("x: prepare {prepare}, left {left}, right {right}, join {join}"),
    )?;
    // A step links to its job's page.
    b.click("#dag a g.step[data-step=\"join\"]")?;
    b.wait(
        "the join step's job page",
        "return location.hash === '#/jobs/default/diamond-join'",
    )?;
    b.goto(&c.url("/#/runs/default/diamond"))?;
    b.wait(
        "the run's page again",
        "return document.querySelectorAll('#dag g.step').length === 4",
    )?;
    b.screenshot("pipeline-run")?;
    Ok(())
}

const STORED: &str = "
apiVersion: corral.dev/v1alpha1
kind: Pipeline
metadata: {name: nightly}
spec:
  parameters:
    - {name: tag, type: string}
  steps:
    - {name: only, inputs: {tag: params.tag}, task: {command: ['true'], resources: {cpu: 10m, memory: 16Mi}}}
---
apiVersion: corral.dev/v1alpha1
kind: PipelineRun
metadata: {name: nightly-1}
spec:
  pipelineRef: {name: nightly}
  params: {tag: a}
";

pub(super) fn a_stored_pipeline_is_listed_with_the_runs_made_from_it() -> TestResult {
    if !driver::available() {
        return Ok(());
    }
    let c = TestCluster::start("")?;
    c.client(None).submit("default", STORED)?;
    let b = Browser::start()?;
    b.goto(&c.url("/#/runs"))?;
    let row = b.wait(
        "the pipeline with its run",
        "const r = document.querySelector('#pipelines tr[data-pipeline=\"nightly\"]');
         return r && r.querySelector('.runs-made a[href=\"#/runs/default/nightly-1\"]')
           ? r.innerText : ''",
    )?;
    let row = row.as_str().unwrap_or_default();
    check(
        row.contains("tag (required)") && row.contains("\t1\t"),
        format!("the pipeline's row: {row:?}"),
    )?;
    let made = b.wait(
        "the run names its pipeline",
        "const a = document.querySelector('#runs a[href=\"#/runs/default/nightly-1\"]');
         return a ? a.closest('tr').innerText : ''",
    )?;
    check(
        made.as_str()
            .is_some_and(|t| t.contains("nightly (generation 1)")),
        format!("the run's row: {made}"),
    )?;
    b.click("#pipelines .runs-made a")?;
    b.wait(
        "the run's page says where it came from",
        "const p = document.querySelector('#run-pipeline');
         return p && p.innerText.includes('from pipeline nightly (generation 1)')",
    )?;
    Ok(())
}
