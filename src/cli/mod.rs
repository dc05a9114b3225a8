//! The `backoffd` command line: subcommand dispatch. Each subcommand has its own file.

pub mod config_file;
mod demo;
pub mod flags;
mod proxy;
pub mod reconnect_client;
pub mod reconnect_server;
mod relay;
mod serve;
mod timer_bench;

use std::net::{SocketAddr, ToSocketAddrs};

use crate::metrics::{MetricsConfig, MetricsServer};
use crate::reactor::Reactor;
use flags::{Flags, UsageError};

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
  relay             stateless UDP relay: the baseline the proxy benchmark compares against
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
        "relay" => relay::main(rest),
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
            "demo" | "proxy" | "reconnect-client" | "reconnect-server" | "relay" | "serve"
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

/// Resolves `HOST:PORT` once at start-up (the loop never does blocking name lookups).
fn resolve(flag: &str, hostport: &str) -> Result<SocketAddr, UsageError> {
    hostport
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            UsageError(format!(
                "--{flag}: cannot resolve {hostport:?} (expected HOST:PORT)"
            ))
        })
}

/// `--metrics HOST:PORT`: where the metrics endpoint listens, if anywhere.
fn metrics_flag(flags: &Flags) -> Result<Option<SocketAddr>, UsageError> {
    let hostport = flags.get::<String>("metrics")?;
    hostport.map(|h| resolve("metrics", &h)).transpose()
}

/// Adds the metrics endpoint to the loop, if one was asked for; the error says what failed.
fn add_metrics(reactor: &mut Reactor, addr: Option<SocketAddr>) -> Result<(), String> {
    let Some(addr) = addr else {
        return Ok(());
    };
    let config = MetricsConfig {
        addr,
        ..MetricsConfig::default()
    };
    let server =
        MetricsServer::bind(config).map_err(|e| format!("cannot bind --metrics {addr}: {e}"))?;
    reactor
        .add(Box::new(server))
        .map(drop)
        .map_err(|e| format!("cannot start the metrics endpoint: {e}"))
}
