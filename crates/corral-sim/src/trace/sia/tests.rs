use std::collections::BTreeMap;

use super::*;

const PLACEMENTS: &str = "local_bsz,step_time,sync_time,placement\n\
    32,0.1,0.0,4\n64,0.2,0.0,4\n32,0.3,0.1,44\n64,0.5,0.1,44\n";
const SCALABILITY: &str = "num_nodes,num_replicas,local_bsz,step_time,sync_time\n\
    3,12,32,1.0,0.5\n3,12,64,2.0,0.5\n";

fn profiles() -> Profiles {
    let mut mp = ModelProfile::default();
    mp.machines.insert(
        "aws".into(),
        MachineProfile {
            placements: parse_placements(PLACEMENTS, "p.csv").unwrap(),
            scalability: parse_scalability(SCALABILITY, "s.csv").unwrap(),
        },
    );
    let row = |progress, grad_sqr, grad_var| EpochRow {
        progress,
        grad_sqr,
        grad_var,
    };
    mp.validation
        .epochs
        .insert(128, vec![row(500.0, 1.0, 1.0), row(1000.0, 1.0, 3.0)]);
    mp.validation
        .epochs
        .insert(512, vec![row(400.0, 1.0, 1.0), row(1000.0, 1.0, 3.0)]);
    let mut p = Profiles {
        dir: "traces".into(),
        available: vec!["cifar10".into(), "only_rtx".into()],
        ..Profiles::default()
    };
    p.models.insert("cifar10".into(), mp);
    let mut rtx_only = ModelProfile::default();
    rtx_only.machines.insert(
        "rtx".into(),
        MachineProfile {
            placements: parse_placements(
                "placement,local_bsz,step_time,sync_time\n8,4,0.5,0.1\n",
                "r.csv",
            )
            .unwrap(),
            scalability: BTreeMap::new(),
        },
    );
    rtx_only.validation.epochs.insert(
        32,
        vec![EpochRow {
            progress: 100.0,
            grad_sqr: 1.0,
            grad_var: 1.0,
        }],
    );
    p.models.insert("only_rtx".into(), rtx_only);
    p
}

fn jobs(text: &str, types: &[&str]) -> Result<(Vec<SimJob>, Vec<String>), String> {
    let rows = parse_workload(text, "w.csv", None)?;
    let types: Vec<String> = types.iter().map(|s| s.to_string()).collect();
    build_jobs(&rows, "w.csv", &profiles(), &types)
}

#[test]
fn placements_are_compact_and_rotated() {
    assert_eq!(compact_placement(6, 4), "24");
    assert_eq!(compact_placement(12, 8), "48");
    assert_eq!(compact_placement(16, 8), "88");
    assert_eq!(compact_placement(10, 4), "244");
    assert_eq!(compact_placement(3, 8), "3");
}

#[test]
fn durations_from_profiles() {
    let h = format!("{WORKLOAD_HEADER}\n");
    // cifar10 runs 1.8x slower than profiled (Sia's calibration) and restarts in 50 s.
    // 4 GPUs, batch 128 (the smallest: scale 1, gain 1): work = progress(2) = 1000
    // iterations; local 32 on placement `4`: 0.1 s per iteration.
    let (j, notes) = jobs(&format!("{h}a,10,cifar10,4,128\n"), &["t4"]).unwrap();
    assert!((j[0].steps - 1000.0).abs() < 1e-9, "{}", j[0].steps);
    assert!((j[0].throughput.on("t4") - 1.0 / (0.1 * 1.8)).abs() < 1e-9);
    assert_eq!((j[0].restart_s, j[0].start_s), (Some(50.0), 50.0));
    assert!(notes.is_empty(), "{notes:?}");
    // Batch 512, scale 4: epoch 0 needs progress 400 (the least of 500 and 400) at gain
    // (1 + 1) / (1/4 + 1) = 1.6 -> 250 iterations; epoch 1 needs 600 at gain
    // (3 + 1) / (3/4 + 1) = 16/7 -> 262.5. Together 512.5.
    let (j, _) = jobs(&format!("{h}a,10,cifar10,4,512\n"), &["t4"]).unwrap();
    assert!((j[0].steps - 512.5).abs() < 1e-9, "{}", j[0].steps);
    // Batch 320 (scale 2.5; the statistics are the same at both batch sizes):
    // 400 / (2 / 1.4) + 600 / (4 / 2.2) = 280 + 330 = 610. Local 80 > max 64:
    // accumulate once, atomic 40: step 0.125, iteration 0.125 + 0.125 = 0.25 s.
    let (j, _) = jobs(&format!("{h}a,10,cifar10,4,320\n"), &["t4"]).unwrap();
    assert!((j[0].steps - 610.0).abs() < 1e-9, "{}", j[0].steps);
    // The job adapts its batch as Sia's do: at batch 128 it needs 1000 iterations of 0.1 s
    // (610 of its own at batch 320 take 1000 there), faster than 610 of 0.25 s at 320.
    let adapted = 610.0 / 1000.0 / (0.1 * 1.8);
    assert!(adapted > 1.0 / (0.25 * 1.8));
    assert!((j[0].throughput.on("t4") - adapted).abs() < 1e-9);
    // 12 GPUs = placement 444, not profiled: the scalability group (3, 12); local 32.
    let (j, notes) = jobs(&format!("{h}a,10,cifar10,12,384\n"), &["aws"]).unwrap();
    assert!((1.0 / j[0].throughput.on("aws") - 1.8).abs() < 1e-9);
    assert_eq!(notes.len(), 1, "{notes:?}");
    // 2 GPUs: nearest group is `4` (1 node, 4 GPUs), reported.
    let (_, notes) = jobs(&format!("{h}a,10,cifar10,2,128\n"), &["t4"]).unwrap();
    assert!(notes[0].contains("nearest"), "{notes:?}");
}

#[test]
fn missing_profile_means_cannot_run_there() {
    let h = format!("{WORKLOAD_HEADER}\n");
    let (j, _) = jobs(&format!("{h}g,0,only_rtx,8,32\n"), &["t4", "rtx2080ti"]).unwrap();
    assert_eq!(j[0].throughput.on("t4"), 0.0);
    assert!(!j[0].can_run_on("t4"));
    assert!(j[0].can_run_on("rtx2080ti"));
}

#[test]
fn errors_name_line_column_and_field() {
    let h = format!("{WORKLOAD_HEADER}\n");
    let e = jobs("name,time,app\n", &["t4"]).unwrap_err();
    assert_eq!(
        e,
        format!("w.csv:1:1: expected the header {WORKLOAD_HEADER}")
    );
    let e = jobs(
        &format!("{h}a,10,cifar10,4,128\nb,11,nope,4,128\n"),
        &["t4"],
    )
    .unwrap_err();
    assert!(
        e.starts_with("w.csv:3:6: application `nope` has no profiles in traces"),
        "{e}"
    );
    assert!(e.contains("models there: cifar10, only_rtx"), "{e}");
    let e = jobs(&format!("{h}a,x,cifar10,4,128\n"), &["t4"]).unwrap_err();
    assert_eq!(e, "w.csv:2:3: time `x` is not a number of seconds >= 0");
    let e = jobs(&format!("{h}a,1,cifar10,0,128\n"), &["t4"]).unwrap_err();
    assert_eq!(e, "w.csv:2:13: num_replicas `0` is not in 1..=4096");
    let e = jobs(&format!("{h}a,1,cifar10,4,64\n"), &["t4"]).unwrap_err();
    assert!(e.starts_with("w.csv:2:15: batch_size 64 is outside"), "{e}");
    assert!(e.contains("128..=512"), "{e}");
    let e = jobs(&format!("{h}a,1,cifar10,4\n"), &["t4"]).unwrap_err();
    assert!(e.starts_with("w.csv:2:1: expected 5"), "{e}");
    let e = jobs(&format!("{h}a,1,cifar10,4,128\n"), &["k80"]).unwrap_err();
    assert!(e.contains("GPU type `k80` has no Sia profiles"), "{e}");
    let e = parse_placements(
        "placement,local_bsz,step_time,sync_time\n4,32,fast,0\n",
        "p.csv",
    )
    .unwrap_err();
    assert_eq!(e, "p.csv:2:6: step_time `fast` is not a number > 0");
    let e = parse_placements("local_bsz,step_time\n", "p.csv").unwrap_err();
    assert!(
        e.starts_with("p.csv:1:1: the header has no `placement` column"),
        "{e}"
    );
    let e = parse_placements(
        "placement,local_bsz,step_time,sync_time\n4x,32,1,0\n",
        "p.csv",
    )
    .unwrap_err();
    assert!(e.starts_with("p.csv:2:1: placement `4x`"), "{e}");
}

#[test]
fn header_sniffing() {
    assert!(is_workload(&format!("{WORKLOAD_HEADER}\na,1,m,1,1\n")));
    assert!(!is_workload(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
    ));
}
