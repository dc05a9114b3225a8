//! `backoffd relay`: the stateless UDP relay the proxy benchmark compares against.

use std::net::SocketAddr;

use super::flags::{value, Flags, Parsed, Spec, UsageError};
use backoffd::reactor::{self, Reactor};
use backoffd::relay::Relay;

const HELP: &str = "\
Usage: backoffd relay --listen HOST:PORT --upstream HOST:PORT

A stateless UDP relay on the same reactor as the proxy, for benchmarks only: datagrams from a
client go to the upstream unchanged, datagrams from the upstream go to the most recent client.
It shows what the proxy's system calls cost without the proxy's state (benches/proxy_throughput.rs).
Not a CoAP proxy: it has no retries, no deduplication and no routing by client.

Options:
  --listen HOST:PORT     client-facing address (required)
  --upstream HOST:PORT   where datagrams go (required)
  -h, --help             this help
";

const SPEC: &[Spec] = &[value("listen"), value("upstream")];

/// Runs the relay until SIGINT/SIGTERM; returns the process exit code.
pub fn main(args: &[String]) -> Result<i32, UsageError> {
    Ok(match parse(args)?.or_print_help(HELP) {
        Some((listen, upstream)) => run(listen, upstream),
        None => 0,
    })
}

/// Parses and validates the command line: (listen, upstream). Binds nothing.
pub fn parse(args: &[String]) -> Result<Parsed<(SocketAddr, SocketAddr)>, UsageError> {
    let flags = Flags::parse(args, SPEC)?;
    if flags.help {
        return Ok(Parsed::Help);
    }
    let listen = required_addr(&flags, "listen")?;
    let upstream = required_addr(&flags, "upstream")?;
    Ok(Parsed::Run((listen, upstream)))
}

fn required_addr(flags: &Flags, name: &str) -> Result<SocketAddr, UsageError> {
    super::addr_flag(flags, name)?
        .ok_or_else(|| UsageError(format!("--{name} HOST:PORT is required")))
}

fn run(listen: SocketAddr, upstream: SocketAddr) -> i32 {
    let relay = match Relay::bind(listen, upstream) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("backoffd relay: cannot bind {listen}: {e}");
            return 1;
        }
    };
    if let Ok(addr) = relay.local_addr() {
        log::info!("relay listening on {addr} (to {upstream})");
    }
    let result = Reactor::new(reactor::Config::default()).and_then(|mut r| {
        r.add(Box::new(relay))?;
        r.run()
    });
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("backoffd relay: {e}");
            1
        }
    }
}
