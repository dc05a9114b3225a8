//! The `backoffd` binary. The application, the command line and everything it runs, is the
//! [`cli`] module; the library under it holds the protocol cores, the reactor and the
//! components. The two interop binaries in `src/bin/` build the same module and run one of its
//! commands.

mod cli;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    std::process::exit(cli::main(&args));
}
