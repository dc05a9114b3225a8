//! The `backoffd` command line: subcommand dispatch. Each subcommand has its own file.

pub mod config_file;
mod demo;
pub mod flags;
mod proxy;
pub mod reconnect_client;
pub mod reconnect_server;
mod serve;
mod timer_bench;

use flags::UsageError;

const HELP: &str = "\
backoffd: a single-threaded mio daemon with a CoAP forwarding proxy, gRPC's connection-backoff
interop server and client, and a precise hashed timer wheel.

Usage: backoffd <command> [options]

Commands:
  demo              run everything on loopback with built-in defaults and report (start here)
  proxy             CoAP forwarding proxy with its own upstream retry policy
  reconnect-client  gRPC connection-backoff interop client (also: reconnect_interop_client;
                    its TLS retry channel accepts any certificate: for that test's target only)
  reconnect-server  gRPC connection-backoff interop server (also: reconnect_interop_server)
  serve             any combination of the above plus metrics, in one process and one loop
  timer-bench       measure the reactor's timer wake-up precision on this host

Run `backoffd <command> --help` for a command's options.
";

/// Runs the `backoffd` command line; returns the process exit code.
pub fn main(args: &[String]) -> i32 {
    init_logging();
    let (command, rest) = match args.get(1) {
        Some(c) => (c.as_str(), &args[2..]),
        None => {
            eprint!("{HELP}");
            return 2;
        }
    };
    let result = match command {
        "demo" => demo::main(rest),
        "proxy" => proxy::main(rest),
        "reconnect-client" => reconnect_client::main(rest),
        "reconnect-server" => reconnect_server::main(rest),
        "serve" => serve::main(rest),
        "timer-bench" => timer_bench::main(rest),
        "-h" | "--help" | "help" => {
            print!("{HELP}");
            Ok(0)
        }
        "-V" | "--version" => {
            println!("backoffd {}", env!("CARGO_PKG_VERSION"));
            Ok(0)
        }
        other => Err(UsageError(format!(
            "unknown command {other:?} (see backoffd --help)"
        ))),
    };
    result.unwrap_or_else(|e| {
        match command {
            "demo" | "proxy" | "reconnect-client" | "reconnect-server" | "serve"
            | "timer-bench" => {
                eprintln!("backoffd {command}: {e}")
            }
            _ => eprintln!("backoffd: {e}"),
        }
        2
    })
}

/// Logs to stderr; `RUST_LOG` overrides the default level (`info`).
pub fn init_logging() {
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_micros()
        .try_init();
}
