//! Starting the real `backoffd` binary (any subcommand) in a [`Proc`], and the one proxy
//! launcher: `backoffd proxy` with the addresses it logged once listening.

use std::net::SocketAddr;
use std::process::Command;

use super::Proc;

/// `backoffd <args>` logging at `log_level` (`RUST_LOG`), as a command still to spawn.
///
/// `BACKOFFD_BIN`, when set, names another build to run instead of this one: how
/// `cargo bench --bench attack` measures the figures *before* a fix, with a binary built at
/// the earlier commit, beside the ones after.
pub fn command(args: &[&str], log_level: &str) -> Command {
    let bin = std::env::var_os("BACKOFFD_BIN");
    let mut command = Command::new(
        bin.as_deref()
            .unwrap_or(env!("CARGO_BIN_EXE_backoffd").as_ref()),
    );
    command.args(args).env("RUST_LOG", log_level);
    command
}

/// Starts `backoffd <args>` logging at `log_level`, without waiting for anything.
pub fn spawn(args: &[&str], log_level: &str) -> Proc {
    Proc::spawn(
        &format!("backoffd {}", args.join(" ")),
        &mut command(args, log_level),
    )
}

/// Starts `backoffd <args>` at debug level and waits for a log line containing `marker`;
/// returns the daemon and the address that follows the marker on that line.
pub fn start(args: &[&str], marker: &str) -> (Proc, SocketAddr) {
    let mut daemon = spawn(args, "debug");
    let addr = daemon.wait_addr(marker);
    (daemon, addr)
}

/// As [`spawn`], with at most `limit` open descriptors (`RLIMIT_NOFILE`, soft and hard), as
/// `prlimit --nofile` would set.
pub fn spawn_with_fd_limit(args: &[&str], log_level: &str, limit: u64) -> Proc {
    use std::os::unix::process::CommandExt;
    let mut command = command(args, log_level);
    let rlim = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: setrlimit is async-signal-safe, and the closure touches nothing else.
    unsafe {
        command.pre_exec(move || match libc::setrlimit(libc::RLIMIT_NOFILE, &rlim) {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        });
    }
    Proc::spawn(&format!("backoffd {}", args.join(" ")), &mut command)
}

/// A running `backoffd proxy` and the addresses it logged.
pub struct Proxy {
    pub proc: Proc,
    /// The CoAP listener (`--listen`), or the coaps one when that is the only one.
    pub coap: SocketAddr,
    /// The coaps listener (`--listen-dtls`), when given.
    pub coaps: Option<SocketAddr>,
    /// The CoAP-over-TCP listener (`--listen-tcp`), when given.
    pub tcp: Option<SocketAddr>,
    /// The CoAP-over-TLS listener (`--listen-tls`), when given.
    pub tls: Option<SocketAddr>,
    /// The CoAP-over-WebSockets listener (`--listen-ws`), when given.
    pub ws: Option<SocketAddr>,
    /// The HTTP cross-proxy's listener, when `--http-listen` was given.
    pub http: Option<SocketAddr>,
    /// The metrics endpoint, when `--metrics` was given.
    pub metrics: Option<SocketAddr>,
}

/// Starts `backoffd proxy <args>` logging at `log_level` and waits until it logged each
/// listener its flags ask for, in the order it binds them: the HTTP cross-proxy
/// (`--http-listen`), the CoAP proxy and its coaps listener (always one line), the metrics
/// endpoint (`--metrics`). Later
/// [`Proc::wait_log`] calls see only the lines after those.
pub fn proxy(log_level: &str, args: &[&str]) -> Proxy {
    let mut argv = vec!["proxy"];
    argv.extend_from_slice(args);
    let mut proc = spawn(&argv, log_level);
    let has = |flag: &str| args.contains(&flag);
    let http = has("--http-listen").then(|| proc.wait_addr("HTTP cross-proxy listening on "));
    let line = proc.wait_log("CoAP proxy ", std::time::Duration::from_secs(15));
    let after = |marker: &str| {
        let rest = line.split(marker).nth(1)?;
        rest.split_whitespace().next()?.parse::<SocketAddr>().ok()
    };
    let coaps = after("coaps listening on ");
    let tcp = after("coap+tcp listening on ");
    let tls = after("coaps+tcp listening on ");
    let ws = after("coap+ws listening on ");
    let coap = after("CoAP proxy listening on ")
        .or(coaps)
        .or(tcp)
        .or(tls)
        .or(ws)
        .unwrap_or_else(|| panic!("no listener address in {line:?}"));
    let metrics = has("--metrics").then(|| proc.wait_addr("metrics listening on "));
    Proxy {
        proc,
        coap,
        coaps,
        tcp,
        tls,
        ws,
        http,
        metrics,
    }
}

/// `backoffd proxy --listen <loopback, any port> --upstream UPSTREAM --metrics <any port>
/// [extra]` at info level: the daemon, its CoAP address and its metrics address.
pub fn proxy_with_metrics(upstream: SocketAddr, extra: &[&str]) -> (Proc, SocketAddr, SocketAddr) {
    let p = upstream_proxy(upstream, &["--metrics", "127.0.0.1:0"], extra);
    (p.proc, p.coap, p.metrics.unwrap())
}

/// [`proxy_with_metrics`] with the HTTP cross-proxy on too (`--http-listen`, any port):
/// the daemon, its CoAP, HTTP and metrics addresses.
pub fn proxy_with_http(
    upstream: SocketAddr,
    extra: &[&str],
) -> (Proc, SocketAddr, SocketAddr, SocketAddr) {
    let on = ["--http-listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0"];
    let p = upstream_proxy(upstream, &on, extra);
    (p.proc, p.coap, p.http.unwrap(), p.metrics.unwrap())
}

fn upstream_proxy(upstream: SocketAddr, on: &[&str], extra: &[&str]) -> Proxy {
    let up = upstream.to_string();
    let mut args = vec!["--listen", "127.0.0.1:0", "--upstream", &up];
    args.extend_from_slice(on);
    args.extend_from_slice(extra);
    proxy("info", &args)
}
