//! CLI code that needs no job: its tables and byte sizes, the quickstart's progress
//! and manifest, `up`'s refusal to listen openly without tokens, and `corral bench api`.

use super::*;

pub(super) fn cli_tables_and_up_options() -> TestResult {
    let t = remote::table(
        &["NAME", "STATE"],
        &[
            vec!["a-long-name".into(), "Running".into()],
            vec!["b".into(), "Queued".into()],
        ],
    );
    check(
        t == "NAME          STATE\na-long-name   Running\nb             Queued\n",
        t.clone(),
    )?;
    check(remote::bytes(1536) == "1.5Ki", remote::bytes(1536))?;
    let log =
        "[rank 0] step 1/300 loss 5.5\n[rank 0] step 50/300 loss 0.1\nRESULT ok weights=[2.000]\n";
    let (step, result) = quickstart::progress_of(log);
    check(step == Some((50, 300)), format!("{step:?}"))?;
    check(
        result.as_deref() == Some("RESULT ok weights=[2.000]"),
        format!("{result:?}"),
    )?;
    let text = quickstart::job_yaml(4, "python3", Path::new("/tmp/x y"));
    let parsed = corral_api::document::parse_documents(
        &text,
        &corral_api::validate::ValidationContext::default(),
    );
    check(
        parsed.len() == 1 && parsed.iter().all(Result::is_ok),
        format!("{parsed:?}"),
    )?;
    let args = up::UpArgs {
        data_dir: Some(tempfile::tempdir()?.path().join("d")),
        config: None,
        listen: "0.0.0.0:7443".parse()?,
        tick_ms: 200,
        stop_replicas_on_exit: false,
        tls_cert: None,
        tls_key: None,
        allow_plain_http_beyond_loopback: false,
    };
    let err = up::options(&args)
        .err()
        .ok_or("listening on 0.0.0.0 without tokens was allowed")?;
    check(err.contains("tokens"), err)?;
    Ok(())
}

pub(super) fn api_bench_smoke() -> TestResult {
    let options = corral_server::api_bench::ApiBenchOptions {
        server_program: PathBuf::from(env!("CARGO_BIN_EXE_corral")),
        startup_jobs: 1,
        ratio_pairs: 3,
        startup_replicas: 2,
        throughput: false,
        rate: 100,
        duration: Duration::from_millis(500),
        clients: 2,
        list_jobs: 60,
        history_jobs: 3,
    };
    let v = corral_server::api_bench::api_bench(&options)?;
    for (pointer, want) in [
        ("/submit/lost", 0),
        ("/submit/failed", 0),
        ("/list/jobs", 60),
        ("/list_small_namespace/jobs", 10),
        ("/history/jobs", 3),
        ("/startup_with_history/jobs", 3),
        ("/startup_idle_alongside/jobs", 3),
    ] {
        check(
            v.pointer(pointer) == Some(&Value::from(want)),
            v.to_string(),
        )?;
    }
    // The server is a process of its own, measured alone.
    let rss = v
        .pointer("/idle_rss_mb")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    check(rss > 0.0, v.to_string())?;
    let interval: Vec<f64> = v
        .pointer("/startup_history_ratio_90_percent_interval")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    check(
        interval.len() == 2 && 0.0 < interval[0] && interval[0] <= interval[1],
        format!("the history ratio comes with its interval: {v}"),
    )?;
    Ok(())
}
