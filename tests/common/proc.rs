//! The one guard for every child process a test starts (the `backoffd` binaries, libcoap's
//! tools, the Python peers, node, chromium): its output captured line by line for assertions
//! and failure messages, the child and its whole process group killed and reaped on drop, so
//! a failing assertion never leaves a process behind and every wait is bounded.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What a child printed so far, and how many of its two output streams are still open.
#[derive(Default)]
struct Captured {
    stdout: Vec<String>,
    stderr: Vec<String>,
    open_streams: usize,
}

type Shared = Arc<(Mutex<Captured>, Condvar)>;

/// A child process with its stdout and stderr captured; killed with its group on drop.
pub struct Proc {
    pub name: String,
    pub child: Child,
    /// Held open: the Python peers exit when their stdin closes (if this process dies).
    _stdin: Option<ChildStdin>,
    out: Shared,
    /// How many stderr lines [`wait_log`](Self::wait_log) and friends have consumed.
    log_cursor: usize,
    pub status: Option<ExitStatus>,
}

impl Proc {
    /// Starts `cmd` in its own process group, which the guard kills on drop.
    pub fn spawn(name: &str, cmd: &mut Command) -> Proc {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        // SAFETY: prctl(2) is async-signal-safe. If this test process dies without running
        // the guards' drops (killed by a CI timeout), the kernel kills the child.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            })
        };
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let out: Shared = Arc::default();
        out.0.lock().unwrap().open_streams = 2;
        collect(child.stdout.take().unwrap(), out.clone(), |c| &mut c.stdout);
        collect(child.stderr.take().unwrap(), out.clone(), |c| &mut c.stderr);
        Proc {
            name: name.to_string(),
            _stdin: child.stdin.take(),
            child,
            out,
            log_cursor: 0,
            status: None,
        }
    }

    fn captured(&self) -> MutexGuard<'_, Captured> {
        self.out.0.lock().unwrap()
    }

    pub fn stdout(&self) -> Vec<String> {
        self.captured().stdout.clone()
    }

    pub fn stderr(&self) -> Vec<String> {
        self.captured().stderr.clone()
    }

    pub fn stdout_text(&self) -> String {
        self.stdout().join("\n")
    }

    /// Last lines of both streams, for failure messages.
    pub fn dump(&self) -> String {
        let tail = |lines: Vec<String>| {
            let skip = lines.len().saturating_sub(60);
            lines[skip..].join("\n    ")
        };
        format!(
            "--- {} (status {:?})\n  stdout:\n    {}\n  stderr:\n    {}",
            self.name,
            self.status,
            tail(self.stdout()),
            tail(self.stderr())
        )
    }

    pub fn exited(&mut self) -> bool {
        if self.status.is_none() {
            self.status = self.child.try_wait().unwrap_or(None);
        }
        self.status.is_some()
    }

    /// Waits until `check` finds something in (stdout, stderr); panics on timeout or exit.
    pub fn wait_for<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        check: impl Fn(&[String], &[String]) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            let exited = self.exited();
            if let Some(found) = self.check(&check) {
                return found;
            }
            if exited {
                self.join_readers();
                if let Some(found) = self.check(&check) {
                    return found;
                }
                panic!("{} exited before {what}\n{}", self.name, self.dump());
            }
            if Instant::now() >= deadline {
                panic!(
                    "{} did not show {what} within {timeout:?}\n{}",
                    self.name,
                    self.dump()
                );
            }
            self.await_output(Duration::from_millis(10));
        }
    }

    fn check<T>(&self, check: impl Fn(&[String], &[String]) -> Option<T>) -> Option<T> {
        let c = self.captured();
        check(&c.stdout, &c.stderr)
    }

    /// Blocks until the child prints something or `at_most` passes.
    fn await_output(&self, at_most: Duration) {
        let (lock, cv) = &*self.out;
        drop(cv.wait_timeout(lock.lock().unwrap(), at_most).unwrap());
    }

    /// The first stdout line starting with `prefix`, rest of the line.
    pub fn wait_stdout(&mut self, prefix: &str, timeout: Duration) -> String {
        self.wait_for(&format!("{prefix:?} on stdout"), timeout, |out, _| {
            out.iter()
                .find_map(|l| l.strip_prefix(prefix).map(|r| r.trim().to_string()))
        })
    }

    /// Waits until stdout has `n` lines equal to `line`.
    pub fn wait_stdout_count(&mut self, line: &str, n: usize, timeout: Duration) {
        self.wait_for(&format!("{n} x {line:?} on stdout"), timeout, |out, _| {
            (out.iter().filter(|l| l.trim() == line).count() >= n).then_some(())
        })
    }

    /// The first line on either stream containing `needle`, waiting at most `timeout`.
    pub fn wait_line(&mut self, needle: &str, timeout: Duration) -> String {
        self.wait_for(&format!("{needle:?}"), timeout, |out, err| {
            out.iter().chain(err).find(|l| l.contains(needle)).cloned()
        })
    }

    /// The next stderr line, in order, not consumed yet; `None` once `timeout` passed or the
    /// stream ended without one.
    pub fn next_log(&mut self, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let c = self.captured();
                if let Some(line) = c.stderr.get(self.log_cursor).cloned() {
                    drop(c);
                    self.log_cursor += 1;
                    return Some(line);
                }
                if c.open_streams == 0 {
                    return None;
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.await_output(left.min(Duration::from_millis(10)));
        }
    }

    /// Every stderr line printed and not consumed yet, consumed now.
    pub fn drain_log(&mut self) -> Vec<String> {
        let lines = self.captured().stderr[self.log_cursor..].to_vec();
        self.log_cursor += lines.len();
        lines
    }

    /// The next stderr line containing `needle` within `timeout`, consuming the lines up to
    /// it (a later call finds only a later line); panics otherwise.
    pub fn wait_log(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_log(left) {
                Some(line) if line.contains(needle) => return line,
                Some(line) => seen.push(line),
                None => panic!("{} never logged {needle:?}; it logged {seen:#?}", self.name),
            }
        }
    }

    /// Waits for a later log line containing `marker` and returns the address after it.
    pub fn wait_addr(&mut self, marker: &str) -> SocketAddr {
        self.wait_log(marker, Duration::from_secs(15))
            .split(marker)
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address after {marker:?}"))
    }

    /// Waits for exit; on timeout kills the process group and returns `None`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while !self.exited() {
            if Instant::now() >= deadline {
                self.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.join_readers();
        self.status
    }

    /// Waits for the exit within `timeout` and for the output; panics (killing the child)
    /// if it is still running then.
    pub fn expect_exit(&mut self, timeout: Duration) -> ExitStatus {
        self.wait_exit(timeout).unwrap_or_else(|| {
            panic!(
                "{} still running after {timeout:?}\n{}",
                self.name,
                self.dump()
            )
        })
    }

    /// Waits for a successful exit within `timeout`; panics with the output otherwise.
    pub fn finish_ok(&mut self, timeout: Duration) -> &mut Self {
        match self.wait_exit(timeout) {
            Some(s) if s.success() => self,
            Some(s) => panic!("{} failed ({s})\n{}", self.name, self.dump()),
            None => panic!(
                "{} did not finish within {timeout:?}\n{}",
                self.name,
                self.dump()
            ),
        }
    }

    /// Sends SIGTERM (to the child only, not its group).
    pub fn sigterm(&self) {
        // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
    }

    /// SIGTERM, then the exit within `timeout` (killed otherwise).
    pub fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if !self.exited() {
            self.sigterm();
        }
        self.wait_exit(timeout)
    }

    /// SIGTERM, then the exit code (`None`: killed by a signal, or still running after a
    /// minute and killed then).
    pub fn terminate_code(&mut self) -> Option<i32> {
        self.terminate(Duration::from_secs(60))
            .and_then(|status| status.code())
    }

    /// Kills the child's process group (the child and anything it started), then reaps it.
    pub fn kill(&mut self) {
        if self.status.is_none() {
            // SAFETY: kill(2) on the process group we created for our own child.
            unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
        self.join_readers();
    }

    /// Waits (briefly: a stray grandchild may hold a pipe open) until both output streams
    /// are read to the end, so that everything the child printed is captured.
    pub fn join_readers(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        let (lock, cv) = &*self.out;
        let mut c = lock.lock().unwrap();
        while c.open_streams > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            c = cv.wait_timeout(c, left).unwrap().0;
        }
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
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.exited() {
            // SAFETY: kill(2) on the process group we created for our own child.
            unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
        if std::thread::panicking() {
            eprintln!("{}", self.dump());
        }
        // The reader threads end at EOF once the group is dead.
    }
}

/// Appends each line of `stream` to the field `into` picks, waking waiters, until EOF.
fn collect(
    stream: impl Read + Send + 'static,
    out: Shared,
    into: fn(&mut Captured) -> &mut Vec<String>,
) {
    std::thread::spawn(move || {
        let (lock, cv) = &*out;
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            into(&mut lock.lock().unwrap()).push(line);
            cv.notify_all();
        }
        lock.lock().unwrap().open_streams -= 1;
        cv.notify_all();
    });
}
