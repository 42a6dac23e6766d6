//! The custom test harness shared by the process tests: the test binary is also the replica
//! shim, so the executor runs `<this binary> shim <replica dir>` for every replica.

use corral_local::executor::ShimCommand;

/// Runs as the shim when the first argument is `shim`, else runs `tests` (libtest-mimic:
/// the usual filters and flags work; a panicking test fails).
pub fn main(tests: Vec<(&'static str, fn())>) -> std::process::ExitCode {
    let rest: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if rest.first().is_some_and(|a| a == "shim") {
        std::process::exit(corral_local::shim::run(rest.into_iter().skip(1)));
    }
    let args = libtest_mimic::Arguments::from_args();
    let trials = tests
        .into_iter()
        .map(|(name, test)| {
            libtest_mimic::Trial::test(name, move || {
                test();
                Ok(())
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}

/// This test binary as the shim.
pub fn shim() -> ShimCommand {
    ShimCommand {
        program: std::env::current_exe().expect("the test binary"),
        args_prefix: vec!["shim".into()],
    }
}
