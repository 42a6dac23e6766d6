//! `corral-shim <replica dir>`: supervises one replica (see `corral_local::shim`). The
//! embedded cluster starts one per replica, so it is a binary of its own: a few hundred
//! relocations to load instead of the `corral` binary's tens of thousands, which halves the
//! CPU time of every replica start. `corral shim <replica dir>` runs the same code.

fn main() {
    std::process::exit(corral_local::shim::run(std::env::args_os().skip(1)));
}
