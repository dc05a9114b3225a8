//! `reconnect_interop_client`: the name existing CI scripts call; same as `backoffd reconnect-client`.

fn main() {
    backoffd::cli::init_logging();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = backoffd::cli::reconnect_client::main(&args).unwrap_or_else(|e| {
        eprintln!("reconnect_interop_client: {e}");
        2
    });
    std::process::exit(code);
}
