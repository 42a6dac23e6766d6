//! Standalone shim binary (tests and debugging). In production the same code runs as the
//! hidden subcommand `corral shim <replica dir>`.

fn main() {
    std::process::exit(corral_local::shim::run(std::env::args_os().skip(1)));
}
