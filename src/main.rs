//! The `backoffd` binary: everything lives in the library; this only forwards the arguments.

fn main() {
    let args: Vec<String> = std::env::args().collect();
    std::process::exit(backoffd::cli::main(&args));
}
