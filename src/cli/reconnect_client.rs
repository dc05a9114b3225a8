//! `reconnect_interop_client` / `backoffd reconnect-client`: drop-in for grpc's C++ client.

use std::time::Duration;

use rand::{Rng, SeedableRng};

use super::flags::{value, Flags, Parsed, Spec, UsageError};
use backoffd::reactor::{self, Reactor, WakeMode};
use backoffd::reconnect::client::{resolve, ClientConfig, ReconnectClient};

/// The `--help` text of the reconnect interop client.
pub const HELP: &str = "\
Usage: reconnect_interop_client --server_control_port=PORT --server_retry_port=PORT [options]
       backoffd reconnect-client --server_control_port=PORT --server_retry_port=PORT [options]

gRPC's connection-backoff interop test client: Start on the control port (plaintext HTTP/2,
no deadline), then TLS connections to the retry port with gRPC's backoff (1 s, x1.6, 20 %
jitter, max_reconnect_backoff_ms cap, each attempt given max(deadline, 20 s)) for the test
duration, then Stop. Prints the server's backoff_ms, checks it with the server's rules, logs
`Passed` and exits 0 iff the server's verdict is passed; exits 1 otherwise, 2 on usage errors.
The retry channel accepts ANY server certificate: it is only for this test's target.
Flags may be written --flag=V, --flag V, -flag=V or -flag V.

Options:
  --server_control_port PORT      the server's control port (required, non-zero)
  --server_retry_port PORT        the server's retry port (required, non-zero)
  --server_host HOST              server name or address (default localhost); resolved once,
                                  the first address is used for the whole test
  --max_reconnect_backoff_ms MS   backoff cap sent to the server and used here (default 0:
                                  120000)
  --test_duration_s S             how long to keep reconnecting (default 540, the reference's)
  --seed N                        seed of the backoff jitter (default: random, logged)
  -h, --help                      this help
";

const SPEC: &[Spec] = &[
    value("server_control_port"),
    value("server_retry_port"),
    value("server_host"),
    value("max_reconnect_backoff_ms"),
    value("test_duration_s"),
    value("seed"),
];

/// Deadline of the final Stop call; the reference sets none.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// A parsed and validated `reconnect-client` command line (the server host not yet resolved).
#[derive(Debug)]
pub struct ClientArgs {
    control_port: u16,
    retry_port: u16,
    server_host: String,
    max_reconnect_backoff_ms: i32,
    test_duration_s: u64,
    seed: Option<u64>,
}

/// Runs the client; returns the process exit code.
pub fn main(args: &[String]) -> Result<i32, UsageError> {
    let Some(a) = parse(args)?.or_print_help(HELP) else {
        return Ok(0);
    };
    let seed = match a.seed {
        Some(seed) => seed,
        None => rand::rngs::StdRng::from_os_rng().random(),
    };
    let server_ip = match resolve(&a.server_host) {
        Ok(ip) => ip,
        Err(e) => {
            log::error!(
                "FAILED: server unreachable: cannot resolve {}: {e}",
                a.server_host
            );
            return Ok(1);
        }
    };
    let config = ClientConfig {
        server_host: a.server_host,
        server_ip,
        control_port: a.control_port,
        retry_port: a.retry_port,
        max_reconnect_backoff_ms: a.max_reconnect_backoff_ms,
        test_duration: Duration::from_secs(a.test_duration_s),
        seed,
        stop_timeout: Some(STOP_TIMEOUT),
    };
    Ok(run(config))
}

/// Parses and validates the command line; resolves and connects to nothing.
pub fn parse(args: &[String]) -> Result<Parsed<ClientArgs>, UsageError> {
    let flags = Flags::parse(args, SPEC)?;
    if flags.help {
        return Ok(Parsed::Help);
    }
    let control_port = flags.required_port("server_control_port")?;
    let retry_port = flags.required_port("server_retry_port")?;
    let server_host: String = flags.get_or("server_host", "localhost".to_owned())?;
    if server_host.is_empty() {
        return Err(UsageError("--server_host must not be empty".into()));
    }
    let max_reconnect_backoff_ms: i32 = flags.get_or("max_reconnect_backoff_ms", 0)?;
    if max_reconnect_backoff_ms < 0 {
        return Err(UsageError(
            "--max_reconnect_backoff_ms must be 0 (default) or positive".into(),
        ));
    }
    let test_duration_s: u64 = flags.get_or("test_duration_s", 540)?;
    if test_duration_s == 0 {
        return Err(UsageError("--test_duration_s must be at least 1".into()));
    }
    let seed = flags.get::<u64>("seed")?;
    Ok(Parsed::Run(ClientArgs {
        control_port,
        retry_port,
        server_host,
        max_reconnect_backoff_ms,
        test_duration_s,
        seed,
    }))
}

fn run(config: ClientConfig) -> i32 {
    let (client, outcome) = ReconnectClient::new(config);
    let reactor = Reactor::new(reactor::Config {
        wake: WakeMode::Timerfd,
        signals: true,
        drain_timeout: Duration::from_secs(2),
    });
    let result = reactor.and_then(|mut r| {
        r.add(Box::new(client))?;
        r.run()
    });
    if let Err(e) = result {
        log::error!("FAILED: event loop: {e}");
        return 1;
    }
    let outcome = outcome.borrow_mut().take();
    outcome.map_or(1, |o| o.exit_code())
}
