//! Sia's calibration of its profiles to real runs: a slowdown per model, and the
//! checkpoint-restore time each model pays on every allocation.

/// Sia's calibration of its simulator to real runs (sia-simulator/simulator_config.py,
/// `SLOWDOWNS`, line 31; applied as `1 / slowdown` to every throughput in job.py line 105):
/// real runs were this many times slower than the profiles say.
pub fn slowdown(model: &str) -> Option<f64> {
    Some(match model {
        "cifar10" => 1.8,
        "imagenet" | "yolov3" | "bert" | "deepspeech2" => 1.2,
        "ncf" => 1.5,
        "gpt_pmp" => 1.0,
        _ => return None,
    })
}

/// Seconds a model's job spends checkpointing and restoring on each (re)allocation, first
/// start included (sia-simulator/applications.py, `Application.__init__`, lines 56-69:
/// `rescale_time`; job.py `reallocate` line 536 charges it on every new placement).
pub fn restart_s(model: &str) -> f64 {
    match model {
        "cifar10" => 50.0,
        "deepspeech2" => 25.0,
        "bert" => 120.0,
        "yolov3" => 80.0,
        "imagenet" => 250.0,
        "ncf" => 15.0,
        _ => 30.0,
    }
}
