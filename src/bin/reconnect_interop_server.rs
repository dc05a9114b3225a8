//! `reconnect_interop_server`: the name existing CI scripts call; same as `backoffd reconnect-server`.

// The application is built in whole, as in `backoffd` (src/main.rs); this binary runs one of
// its commands, so the rest of it is unused here.
#[allow(dead_code)]
#[path = "../cli/mod.rs"]
mod cli;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = cli::reconnect_server::main;
    std::process::exit(cli::run_alone("reconnect_interop_server", command, &args));
}
