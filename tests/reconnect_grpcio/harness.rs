//! The harness of tests/reconnect_grpcio.rs: the grpcio venv and its scripts, their `RESULT`
//! lines, and `reconnect_interop_server` on free ports. Processes sit in tests/common's [`Proc`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::common::{free_wildcard_ports, Proc};
use super::SERVER;

impl Proc {
    /// Waits for a successful exit and returns the `RESULT key=value` lines.
    pub fn results(&mut self, timeout: Duration) -> Results {
        let status = self.expect_exit(timeout);
        assert!(
            status.success(),
            "{} failed: {status}\n{}",
            self.name,
            self.dump()
        );
        let map = self
            .stdout()
            .iter()
            .filter_map(|l| l.strip_prefix("RESULT "))
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Results {
            map,
            dump: self.dump(),
        }
    }
}

/// A script's `RESULT` lines.
pub struct Results {
    pub map: HashMap<String, String>,
    pub dump: String,
}

impl Results {
    pub fn get(&self, key: &str) -> &str {
        self.map
            .get(key)
            .unwrap_or_else(|| panic!("no RESULT {key}\n{}", self.dump))
    }

    pub fn int(&self, key: &str) -> f64 {
        self.get(key)
            .parse()
            .unwrap_or_else(|e| panic!("RESULT {key}: {e}\n{}", self.dump))
    }

    pub fn list(&self, key: &str) -> Vec<i32> {
        let v = self.get(key);
        v.split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().unwrap())
            .collect()
    }

    pub fn expect(&self, key: &str, want: &str) {
        assert_eq!(self.get(key), want, "RESULT {key}\n{}", self.dump);
    }
}

// ---------------------------------------------------------------------------------------------
// Python grpcio

/// The venv's interpreter, installed (once per test process) by setup_grpc.sh.
pub fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        // <target>/release/reconnect_interop_server -> <target>/grpc-venv
        let target = Path::new(SERVER).parent().and_then(Path::parent).unwrap();
        let venv = target.join("grpc-venv");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/setup_grpc.sh");
        let mut cmd = Command::new("bash");
        cmd.arg(&script).arg(&venv);
        let mut setup = Proc::spawn("setup_grpc.sh", &mut cmd);
        let status = setup.expect_exit(Duration::from_secs(600));
        assert!(
            status.success(),
            "tests/interop/setup_grpc.sh could not install grpcio ({status}); these tests need \
             it and are not skipped\n{}",
            setup.dump()
        );
        venv.join("bin/python")
    })
}

/// Runs `tests/interop/<script> <args>` with the venv's Python.
pub fn py(script: &str, args: &[&str], env: &[(&str, &str)]) -> Proc {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop")
        .join(script);
    let mut cmd = Command::new(python());
    cmd.arg(path)
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    Proc::spawn(&format!("{script} {}", args.join(" ")), &mut cmd)
}

pub fn grpcio(args: &[&str]) -> Proc {
    py("grpcio_client.py", args, &[])
}

// ---------------------------------------------------------------------------------------------
// The server

pub struct Server {
    pub proc: Proc,
    control: u16,
    retry: u16,
}

impl Server {
    pub fn start() -> Server {
        let [control, retry] = free_wildcard_ports();
        Self::start_with(
            SERVER,
            &[
                &format!("--control_port={control}"),
                &format!("--retry_port={retry}"),
            ],
            control,
            retry,
        )
    }

    pub fn start_with(bin: &str, args: &[&str], control: u16, retry: u16) -> Server {
        let mut cmd = Command::new(bin);
        cmd.args(args).env("RUST_LOG", "debug");
        let mut proc = Proc::spawn("reconnect_interop_server", &mut cmd);
        proc.wait_line(
            &format!("Server listening on 0.0.0.0:{control}"),
            Duration::from_secs(10),
        );
        Server {
            proc,
            control,
            retry,
        }
    }

    pub fn ports(&self) -> (String, String) {
        (self.control.to_string(), self.retry.to_string())
    }

    pub fn log(&self) -> Vec<String> {
        self.proc.stderr()
    }

    pub fn count(&self, needle: &str) -> usize {
        self.log().iter().filter(|l| l.contains(needle)).count()
    }

    /// Control connections accepted (the debug line `control connection N from PEER`).
    pub fn control_accepts(&self) -> usize {
        self.log()
            .iter()
            .filter(|l| l.contains("control connection ") && !l.contains(" closed: "))
            .count()
    }

    /// SIGTERM; returns the exit status and how long the exit took.
    pub fn terminate(&mut self, timeout: Duration) -> (ExitStatus, Duration) {
        let t0 = Instant::now();
        self.proc.sigterm();
        let status = self.proc.expect_exit(timeout);
        (status, t0.elapsed())
    }
}

/// The verifier's expectation for interval `i` (1-based), recomputed independently of the
/// server: E_1 = 1000, E_{i+1} = min(E_i * 1.6, cap); allowed [E*0.8-100, E*1.2+100].
pub fn allowed_range(i: usize, cap_ms: f64) -> (f64, f64) {
    let mut e = 1000.0f64;
    for _ in 1..i {
        e = (e * 1.6).min(cap_ms);
    }
    (e * 0.8 - 100.0, e * 1.2 + 100.0)
}
