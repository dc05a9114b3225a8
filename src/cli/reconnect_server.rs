//! `reconnect_interop_server` / `backoffd reconnect-server`: drop-in for grpc's C++ server.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use super::flags::{value, DurationArg, Flags, Parsed, Spec, UsageError};
use backoffd::reactor::{self, Reactor, WakeMode};
use backoffd::reconnect::server::{ReconnectServer, ServerConfig};
use backoffd::reconnect::ServiceConfig;

/// The `--help` text of the reconnect interop server.
pub const HELP: &str = "\
Usage: reconnect_interop_server --control_port=PORT --retry_port=PORT [options]
       backoffd reconnect-server --control_port=PORT --retry_port=PORT [options]

gRPC's connection-backoff interop test server: grpc.testing.ReconnectService (Start/Stop) over
plaintext HTTP/2 on the control port, and on the retry port a TCP listener that timestamps and
closes every connection; Stop verifies the intervals exactly like the C++ reference.
Flags may be written --flag=V, --flag V, -flag=V or -flag V.

Options:
  --control_port PORT    plaintext gRPC port (required, non-zero)
  --retry_port PORT      port the client reconnects to (required, non-zero; bound at first Start)
  --min_intervals N      strict mode: fail a Stop that saw fewer intervals (default 0, like the
                         reference: 0 or 1 connections pass)
  --max_control_connections N
                         control-port connections open at once; more are closed at once
                         (default 64)
  --drain D              on SIGINT/SIGTERM, time to say goodbye (default 2s)
  --wake SRC             timer wake-up source: timerfd (default), epoll, or pwait2 (Linux
                         5.11+, else timerfd)
  --metrics HOST:PORT    serve GET /metrics (Prometheus text) and /healthz over HTTP/1.1 there,
                         e.g. 127.0.0.1:9102 (keep it on loopback or a private net)
  -h, --help             this help
";

const SPEC: &[Spec] = &[
    value("control_port"),
    value("retry_port"),
    value("min_intervals"),
    value("max_control_connections"),
    value("drain"),
    value("wake"),
    value("metrics"),
];

/// A parsed and validated `reconnect-server` command line.
#[derive(Debug)]
pub struct ServerArgs {
    config: ServerConfig,
    wake: WakeMode,
    drain: Duration,
    metrics: Option<SocketAddr>,
}

/// Runs the server; returns the process exit code.
pub fn main(args: &[String]) -> Result<i32, UsageError> {
    Ok(match parse(args)?.or_print_help(HELP) {
        Some(a) => run(a.config, a.wake, a.drain, a.metrics),
        None => 0,
    })
}

/// The server's settings from its flags (shared with `serve`'s `[reconnect]` section).
pub(super) fn config_from_flags(flags: &Flags) -> Result<ServerConfig, UsageError> {
    let control_port = flags.required_port("control_port")?;
    let retry_port = flags.required_port("retry_port")?;
    if control_port == retry_port {
        return Err(UsageError(
            "--retry_port must differ from --control_port".into(),
        ));
    }
    let defaults = ServerConfig::new(control_port, retry_port);
    Ok(ServerConfig {
        service: ServiceConfig {
            min_intervals: flags.get_or("min_intervals", 0)?,
            ..defaults.service
        },
        max_connections: flags.get_or("max_control_connections", defaults.max_connections)?,
        ..defaults
    })
}

/// Parses and validates the command line; binds nothing.
pub fn parse(args: &[String]) -> Result<Parsed<ServerArgs>, UsageError> {
    let flags = Flags::parse(args, SPEC)?;
    if flags.help {
        return Ok(Parsed::Help);
    }
    let config = config_from_flags(&flags)?;
    let drain = flags
        .get_or("drain", DurationArg(Duration::from_secs(2)))?
        .0;
    let wake = flags.get_or("wake", WakeMode::Timerfd)?;
    let metrics = super::metrics_flag(&flags)?;
    Ok(Parsed::Run(ServerArgs {
        config,
        wake,
        drain,
        metrics,
    }))
}

fn run(config: ServerConfig, wake: WakeMode, drain: Duration, metrics: Option<SocketAddr>) -> i32 {
    let port = config.control_port;
    let server = match ReconnectServer::bind(config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("reconnect_interop_server: cannot listen on control port {port}: {e}");
            return 1;
        }
    };
    let reactor = Reactor::new(reactor::Config {
        wake,
        signals: true,
        drain_timeout: drain,
    });
    let result = reactor.and_then(|mut r| {
        let mut sources = Vec::new();
        r.add(super::reported(server, &mut sources))?;
        super::add_metrics(&mut r, metrics, sources).map_err(io::Error::other)?;
        r.run()
    });
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("reconnect_interop_server: {e}");
            1
        }
    }
}
