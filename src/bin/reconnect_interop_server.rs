//! `reconnect_interop_server`: the name existing CI scripts call; same as `backoffd reconnect-server`.

fn main() {
    backoffd::cli::init_logging();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = backoffd::cli::reconnect_server::main(&args).unwrap_or_else(|e| {
        eprintln!("reconnect_interop_server: {e}");
        2
    });
    std::process::exit(code);
}
