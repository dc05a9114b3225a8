//! Helpers shared by the integration tests: spawning the real binary and reading its address.

#![allow(dead_code)]

pub mod exposition;
pub mod http;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Starts `backoffd proxy --upstream UPSTREAM --metrics <any port> [extra]` on loopback;
/// returns the daemon, its CoAP address and its metrics address.
pub fn proxy_with_metrics(
    upstream: SocketAddr,
    extra: &[&str],
) -> (Daemon, SocketAddr, SocketAddr) {
    let mut daemon = spawn_proxy(upstream, extra);
    let coap = daemon.wait_for_addr("CoAP proxy listening on ");
    let metrics = daemon.wait_for_addr("metrics listening on ");
    (daemon, coap, metrics)
}

/// [`proxy_with_metrics`] with the HTTP cross-proxy on too (`--http-listen`, any port):
/// the daemon, its CoAP, HTTP and metrics addresses.
pub fn proxy_with_http(
    upstream: SocketAddr,
    extra: &[&str],
) -> (Daemon, SocketAddr, SocketAddr, SocketAddr) {
    let mut args = vec!["--http-listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let mut daemon = spawn_proxy(upstream, &args);
    // The cross-proxy binds and logs first.
    let http = daemon.wait_for_addr("HTTP cross-proxy listening on ");
    let coap = daemon.wait_for_addr("CoAP proxy listening on ");
    let metrics = daemon.wait_for_addr("metrics listening on ");
    (daemon, coap, http, metrics)
}

fn spawn_proxy(upstream: SocketAddr, extra: &[&str]) -> Daemon {
    let up = upstream.to_string();
    let mut args = vec![
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
        "--metrics",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    Daemon::spawn(&args, "info")
}

/// A running `backoffd` process, killed on drop.
pub struct Daemon {
    pub child: Child,
    pub stderr: mpsc::Receiver<String>,
}

impl Daemon {
    /// Starts `backoffd <args>` and waits for a log line containing `marker`; returns the
    /// daemon and the address that follows the marker on that line.
    pub fn start(args: &[&str], marker: &str) -> (Daemon, SocketAddr) {
        let mut daemon = Daemon::spawn(args, "debug");
        let addr = daemon.wait_for_addr(marker);
        (daemon, addr)
    }

    /// Starts `backoffd <args>` logging at `log_level`, without waiting for anything.
    pub fn spawn(args: &[&str], log_level: &str) -> Daemon {
        Self::spawn_command(
            Command::new(env!("CARGO_BIN_EXE_backoffd")),
            args,
            log_level,
        )
    }

    /// As [`spawn`](Self::spawn), with at most `limit` open descriptors (`RLIMIT_NOFILE`,
    /// soft and hard), as `prlimit --nofile` would set.
    pub fn spawn_with_fd_limit(args: &[&str], log_level: &str, limit: u64) -> Daemon {
        use std::os::unix::process::CommandExt;
        let mut command = Command::new(env!("CARGO_BIN_EXE_backoffd"));
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
        Self::spawn_command(command, args, log_level)
    }

    fn spawn_command(mut command: Command, args: &[&str], log_level: &str) -> Daemon {
        let mut child = command
            .args(args)
            .env("RUST_LOG", log_level)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn backoffd");
        let (tx, rx) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Daemon { child, stderr: rx }
    }

    /// A `/proc/<pid>/status` field in KiB, such as `VmRSS:` or `VmHWM:`.
    pub fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("/proc/<pid>/status");
        let line = status
            .lines()
            .find(|l| l.starts_with(field))
            .unwrap_or_else(|| panic!("no {field} line"));
        line.split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .expect("a number of kB")
    }

    /// Waits for a later log line containing `marker` and returns the address after it.
    pub fn wait_for_addr(&mut self, marker: &str) -> SocketAddr {
        self.wait_for(marker, Duration::from_secs(10))
            .split(marker)
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address after {marker:?}"))
    }

    /// The first stderr line containing `needle` within `timeout` (panics otherwise).
    pub fn wait_for(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = std::time::Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(line) => seen.push(line),
                Err(_) => panic!("backoffd never logged {needle:?}; it logged {seen:#?}"),
            }
        }
    }

    /// Sends SIGTERM and returns the exit code.
    pub fn terminate(mut self) -> Option<i32> {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().expect("wait");
        status.code()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port that was free a moment ago for both TCP and UDP (bound and released):
/// some servers, libcoap's among them, bind both.
pub fn free_port() -> u16 {
    loop {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("a free loopback port");
        let port = udp.local_addr().expect("bound").port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}
