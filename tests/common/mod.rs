//! Helpers shared by the integration tests: spawning the real binary and reading its address.

#![allow(dead_code)]

pub mod exposition;
pub mod http;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A running `backoffd` process, killed on drop.
pub struct Daemon {
    pub child: Child,
    pub stderr: mpsc::Receiver<String>,
}

impl Daemon {
    /// Starts `backoffd <args>` and waits for a log line containing `marker`; returns the
    /// daemon and the address that follows the marker on that line.
    pub fn start(args: &[&str], marker: &str) -> (Daemon, SocketAddr) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_backoffd"))
            .args(args)
            .env("RUST_LOG", "debug")
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
        let mut daemon = Daemon { child, stderr: rx };
        let addr = daemon.wait_for_addr(marker);
        (daemon, addr)
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
