//! End-to-end tests of `reconnect_interop_server` against an independently written gRPC
//! implementation: Python `grpcio` (pinned, installed by `tests/interop/setup_grpc.sh` into
//! `<target>/grpc-venv`), driven by the scripts in `tests/interop/`.
//!
//! Each test starts its own server on random free ports and runs one Python script, which prints
//! `RESULT key=value` lines; the assertions are here. Every child process sits in a [`Proc`],
//! which kills it on drop, so a failing assertion never leaves a server or client behind, and
//! every wait is bounded.
//!
//! The Python channels dial `127.0.0.1`, never `localhost`: grpcio resolves `localhost` to `::1`
//! and `127.0.0.1` and tries both within one connection attempt, so each backoff attempt would
//! reach the retry port twice and the server would record a ~0 ms interval (see
//! `tests/interop/grpcio_client.py`).
//!
//! If the venv cannot be installed, the tests fail: they are never skipped.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock, RwLockReadGuard};
use std::thread;
use std::time::{Duration, Instant};

const SERVER: &str = env!("CARGO_BIN_EXE_reconnect_interop_server");
const BACKOFFD: &str = env!("CARGO_BIN_EXE_backoffd");
/// The one test whose verdict depends on timing (case 1) runs alone: it takes this lock for
/// writing, every other test for reading. Two cores are shared by everything here.
static TIMING: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    TIMING.read().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------------------------
// Child processes

#[derive(Default)]
struct Captured {
    stdout: Vec<String>,
    stderr: Vec<String>,
}

/// A child process with its stdout and stderr captured line by line; killed on drop.
struct Proc {
    name: String,
    child: Child,
    out: Arc<(Mutex<Captured>, Condvar)>,
    readers: Vec<thread::JoinHandle<()>>,
}

impl Proc {
    fn spawn(name: &str, mut cmd: Command) -> Proc {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Should the test process itself be killed (no unwinding, no Drop), the kernel kills the
        // child when the spawning thread goes away.
        // SAFETY: prctl(2) is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(
                || match libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                },
            );
        }
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        let out = Arc::new((Mutex::new(Captured::default()), Condvar::new()));
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let readers = vec![
            reader(stdout, out.clone(), |c| &mut c.stdout),
            reader(stderr, out.clone(), |c| &mut c.stderr),
        ];
        Proc {
            name: name.to_owned(),
            child,
            out,
            readers,
        }
    }

    fn stdout(&self) -> Vec<String> {
        self.out.0.lock().unwrap().stdout.clone()
    }

    fn stderr(&self) -> Vec<String> {
        self.out.0.lock().unwrap().stderr.clone()
    }

    /// Everything captured so far, for failure messages.
    fn dump(&self) -> String {
        let c = self.out.0.lock().unwrap();
        format!(
            "--- {} stdout ---\n{}\n--- {} stderr ---\n{}",
            self.name,
            c.stdout.join("\n"),
            self.name,
            c.stderr.join("\n")
        )
    }

    /// The first line (stdout or stderr) containing `needle`, waiting at most `timeout`.
    fn wait_line(&self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        let (lock, cv) = &*self.out;
        let mut c = lock.lock().unwrap();
        loop {
            if let Some(line) = c
                .stdout
                .iter()
                .chain(&c.stderr)
                .find(|l| l.contains(needle))
            {
                return line.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                drop(c);
                panic!("{} never printed {needle:?}\n{}", self.name, self.dump());
            }
            c = cv.wait_timeout(c, left).unwrap().0;
        }
    }

    /// Waits for the exit (at most `timeout`, else kills it and panics) and for the output.
    fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "{} still running after {timeout:?}\n{}",
                    self.name,
                    self.dump()
                );
            }
            thread::sleep(Duration::from_millis(10));
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        status
    }

    /// Waits for a successful exit and returns the `RESULT key=value` lines.
    fn results(&mut self, timeout: Duration) -> Results {
        let status = self.wait(timeout);
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

    fn sigterm(&self) {
        // SAFETY: kill(2) on our own child's pid, which has not been waited for yet.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn reader<R: Read + Send + 'static>(
    pipe: R,
    out: Arc<(Mutex<Captured>, Condvar)>,
    field: fn(&mut Captured) -> &mut Vec<String>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            let (lock, cv) = &*out;
            field(&mut lock.lock().unwrap()).push(line);
            cv.notify_all();
        }
    })
}

/// A script's `RESULT` lines.
struct Results {
    map: HashMap<String, String>,
    dump: String,
}

impl Results {
    fn get(&self, key: &str) -> &str {
        self.map
            .get(key)
            .unwrap_or_else(|| panic!("no RESULT {key}\n{}", self.dump))
    }

    fn int(&self, key: &str) -> f64 {
        self.get(key)
            .parse()
            .unwrap_or_else(|e| panic!("RESULT {key}: {e}\n{}", self.dump))
    }

    fn list(&self, key: &str) -> Vec<i32> {
        let v = self.get(key);
        v.split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().unwrap())
            .collect()
    }

    fn expect(&self, key: &str, want: &str) {
        assert_eq!(self.get(key), want, "RESULT {key}\n{}", self.dump);
    }
}

// ---------------------------------------------------------------------------------------------
// Python grpcio

/// The venv's interpreter, installed (once per test process) by setup_grpc.sh.
fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        // <target>/release/reconnect_interop_server -> <target>/grpc-venv
        let target = Path::new(SERVER).parent().and_then(Path::parent).unwrap();
        let venv = target.join("grpc-venv");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/setup_grpc.sh");
        let mut cmd = Command::new("bash");
        cmd.arg(&script).arg(&venv);
        let mut setup = Proc::spawn("setup_grpc.sh", cmd);
        let status = setup.wait(Duration::from_secs(600));
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
fn py(script: &str, args: &[&str], env: &[(&str, &str)]) -> Proc {
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
    Proc::spawn(&format!("{script} {}", args.join(" ")), cmd)
}

fn grpcio(args: &[&str]) -> Proc {
    py("grpcio_client.py", args, &[])
}

// ---------------------------------------------------------------------------------------------
// The server

/// A free TCP port on the wildcard address (both families where possible).
fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("[::]:0").or_else(|_| TcpListener::bind("0.0.0.0:0")))
        .collect::<Result<_, _>>()
        .expect("bind a free port");
    std::array::from_fn(|i| listeners[i].local_addr().unwrap().port())
}

struct Server {
    proc: Proc,
    control: u16,
    retry: u16,
}

impl Server {
    fn start() -> Server {
        let [control, retry] = free_ports();
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

    fn start_with(bin: &str, args: &[&str], control: u16, retry: u16) -> Server {
        let mut cmd = Command::new(bin);
        cmd.args(args).env("RUST_LOG", "debug");
        let proc = Proc::spawn("reconnect_interop_server", cmd);
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

    fn ports(&self) -> (String, String) {
        (self.control.to_string(), self.retry.to_string())
    }

    fn log(&self) -> Vec<String> {
        self.proc.stderr()
    }

    fn count(&self, needle: &str) -> usize {
        self.log().iter().filter(|l| l.contains(needle)).count()
    }

    /// Control connections accepted (the debug line `control connection N from PEER`).
    fn control_accepts(&self) -> usize {
        self.log()
            .iter()
            .filter(|l| l.contains("control connection ") && !l.contains(" closed: "))
            .count()
    }

    /// SIGTERM; returns the exit status and how long the exit took.
    fn terminate(&mut self, timeout: Duration) -> (ExitStatus, Duration) {
        let t0 = Instant::now();
        self.proc.sigterm();
        let status = self.proc.wait(timeout);
        (status, t0.elapsed())
    }
}

/// The verifier's expectation for interval `i` (1-based), recomputed independently of the
/// server: E_1 = 1000, E_{i+1} = min(E_i * 1.6, cap); allowed [E*0.8-100, E*1.2+100].
fn allowed_range(i: usize, cap_ms: f64) -> (f64, f64) {
    let mut e = 1000.0f64;
    for _ in 1..i {
        e = (e * 1.6).min(cap_ms);
    }
    (e * 0.8 - 100.0, e * 1.2 + 100.0)
}

// ---------------------------------------------------------------------------------------------
// Cases

/// 1. A real grpcio channel reconnecting with its own backoff (max 2 s) passes Verify.
#[test]
fn grpcio_reconnect_backoff_passes() {
    let _alone = TIMING.write().unwrap_or_else(|e| e.into_inner());
    python();
    let server = Server::start();
    let (control, retry) = server.ports();
    let r = grpcio(&[
        "backoff",
        "--control",
        &control,
        "--retry",
        &retry,
        "--max-backoff",
        "2000",
        "--seconds",
        "10",
    ])
    .results(Duration::from_secs(40));
    let backoff_ms = r.list("backoff_ms");
    println!(
        "case 1: passed={} backoff_ms={backoff_ms:?}",
        r.get("passed")
    );
    assert!(!r.map.contains_key("unexpectedly_ready"), "{}", r.dump);
    r.expect("passed", "true");
    assert!(backoff_ms.len() >= 3, "too few reconnects: {backoff_ms:?}");
    for (i, &b) in backoff_ms.iter().enumerate() {
        let (lo, hi) = allowed_range(i + 1, 2000.0);
        assert!(
            (lo..=hi).contains(&f64::from(b)),
            "interval {} = {b} ms outside [{lo}, {hi}]",
            i + 1
        );
    }
    let log = server.log().join("\n");
    assert!(
        log.contains(&format!("test tcp server listening on 0.0.0.0:{retry}")),
        "{log}"
    );
    assert_eq!(
        server.count("reconnect server: new connection"),
        backoff_ms.len() + 1,
        "one accept per attempt (127.0.0.1 only)\n{log}"
    );
    assert!(log.contains("retry  1:backoff"), "{log}");
    assert!(!log.contains("mismatched peer"), "{log}");
}

/// 2. A client that reconnects every 300 ms, ignoring backoff, fails, and the log says which
///    interval broke which bound.
#[test]
fn raw_tcp_every_300ms_fails_verify() {
    let _shared = shared();
    let server = Server::start();
    let (control, retry) = server.ports();
    let r = grpcio(&[
        "raw-retry",
        "--control",
        &control,
        "--retry",
        &retry,
        "--interval",
        "0.3",
        "--count",
        "6",
    ])
    .results(Duration::from_secs(30));
    r.expect("passed", "false");
    r.expect("closed_by_server", "6");
    let backoff_ms = r.list("backoff_ms");
    assert_eq!(backoff_ms.len(), 5, "{}", r.dump);
    assert!(
        backoff_ms.iter().all(|b| (250..700).contains(b)),
        "{backoff_ms:?}"
    );
    let why = server
        .proc
        .wait_line("interval 1: ", Duration::from_secs(5));
    assert!(
        why.contains(&format!(
            "interval 1: {} ms outside [700.00, 1300.00] ms",
            backoff_ms[0]
        )),
        "{why}"
    );
    assert!(server.count("reconnect server: new connection") == 6);
    assert!(server.count("Stop: passed=false") == 1);
}

/// 3. A second client's Start is parked until the first client's Stop, then answered.
#[test]
fn second_start_waits_for_first_stop() {
    let _shared = shared();
    let server = Server::start();
    let (control, _) = server.ports();
    let r = grpcio(&["two-clients", "--control", &control, "--park", "1.5"])
        .results(Duration::from_secs(40));
    r.expect("b_done_before_stop", "false");
    r.expect("b_code", "OK");
    let after_sent = r.int("b_done_after_stop_sent_ms");
    let after_returned = r.int("b_done_after_stop_returned_ms");
    println!("case 3: B answered {after_sent} ms after A's Stop was sent");
    assert!(
        after_sent >= 0.0,
        "B's Start returned before A's Stop was sent"
    );
    assert!(
        after_returned < 2000.0,
        "B's Start was not released promptly"
    );
    r.expect("b_stop_code", "OK");
    assert_eq!(
        server.count("Start parked until the active session's Stop"),
        1
    );
    assert!(server.control_accepts() >= 2, "separate connections");
}

/// 4. Waiters that give up (deadline, future.cancel(), channel closed, process killed) do not
///    become ghost sessions, and neither does the session of a client that died.
#[test]
fn cancelled_waiter_leaves_no_ghost_session() {
    let _shared = shared();
    let server = Server::start();
    let (control, _) = server.ports();
    let r = grpcio(&["cancel-waiter", "--control", &control]).results(Duration::from_secs(40));
    let b = r.get("b_code");
    assert!(
        b == "DEADLINE_EXCEEDED" || b == "CANCELLED",
        "B: {b}\n{}",
        r.dump
    );
    let b_elapsed = r.int("b_elapsed_ms");
    assert!(
        (900.0..3000.0).contains(&b_elapsed),
        "B gave up after {b_elapsed} ms"
    );
    r.expect("b2_done_before_cancel", "false");
    r.expect("b2_cancelled", "true");
    r.expect("b2_code", "CANCELLED");
    r.expect("b3_done_before_close", "false");
    r.expect("b3_code", "CANCELLED");
    r.expect("a_stop_code", "OK");
    r.expect("c_code", "OK");
    let c_elapsed = r.int("c_elapsed_ms");
    println!("case 4: B {b} after {b_elapsed} ms; C's Start took {c_elapsed} ms");
    assert!(
        c_elapsed < 1000.0,
        "C was parked behind a ghost: {c_elapsed} ms"
    );
    r.expect("c_stop_code", "OK");
    assert_eq!(
        server.count("Start parked until the active session's Stop"),
        3
    );

    // A client process that dies (SIGKILL: no RST_STREAM, no GOAWAY) while it owns the session
    // and has a second Start parked: the next client is not blocked by either.
    let holder = grpcio(&["hold-session", "--control", &control]);
    holder.wait_line("RESULT ready=true", Duration::from_secs(20));
    drop(holder);
    let r = grpcio(&["start-stop", "--control", &control, "--probes", "0"])
        .results(Duration::from_secs(20));
    let start_ms = r.int("start_ms");
    assert!(
        start_ms < 1000.0,
        "Start after a dead client took {start_ms} ms"
    );
    assert_eq!(
        server.count("Start parked until the active session's Stop"),
        4
    );
}

/// 5. 200 grpcio calls on one connection with repeated custom metadata (a `-bin` value that
///    grpcio Huffman-codes; grpcio's own headers, indexed in the dynamic table, with a changing
///    grpc-timeout that keeps evicting entries) and keepalive PINGs (100 ms keepalive time, 1 s
///    timeout) in pauses between bursts of calls, then idle with PINGs only: one healthy
///    connection throughout. Then 100 calls from h2/hpack, which Huffman-codes and indexes the
///    custom metadata as well, each after a PING whose ACK must echo it.
#[test]
fn many_calls_metadata_and_pings_on_one_connection() {
    let _shared = shared();
    let server = Server::start();
    let (control, _) = server.ports();
    let mut client = py(
        "grpcio_client.py",
        &["many-calls", "--control", &control, "--calls", "200"],
        &[
            ("GRPC_VERBOSITY", "debug"),
            ("GRPC_TRACE", "http_keepalive"),
        ],
    );
    let r = client.results(Duration::from_secs(60));
    r.expect("calls_ok", "200");
    r.expect("failures", "");
    r.expect("after_idle_code", "OK");
    let states = r.get("states");
    assert_eq!(
        states.matches("READY").count(),
        1,
        "the channel reconnected: {states}"
    );
    assert!(!states.contains("TRANSIENT_FAILURE"), "{states}");
    // chttp2 logs this when the ACK of one of its keepalive PINGs arrives.
    let acked = client
        .stderr()
        .iter()
        .filter(|l| l.contains("Finish keepalive ping"))
        .count();
    println!(
        "case 5: 200 calls in {} s, {acked} keepalive PINGs acked",
        r.get("calls_seconds")
    );
    assert!(
        acked >= 5,
        "too few keepalive PINGs acked: {acked}\n{}",
        r.dump
    );
    assert_eq!(server.control_accepts(), 1, "{}", server.log().join("\n"));
    assert_eq!(server.count("Stop: passed=true backoff_ms=[]"), 201);

    // The same over h2/hpack, whose encoder Huffman-codes and indexes the custom metadata too,
    // with a PING before every call.
    let r = py(
        "raw_h2.py",
        &["many-calls", "--control", &control, "--calls", "100"],
        &[],
    )
    .results(Duration::from_secs(30));
    r.expect("calls_ok", "100");
    r.expect("pings_acked", "100");
    r.expect("bad", "");
    assert_eq!(server.control_accepts(), 2);
    assert_eq!(server.count("Stop: passed=true backoff_ms=[]"), 301);
    let log = server.log().join("\n");
    assert!(!log.contains("closing with"), "connection error:\n{log}");
}

/// 6. Unknown methods are UNIMPLEMENTED; a request without a gRPC content-type is HTTP 415,
///    and the same connection goes on serving gRPC.
#[test]
fn unknown_method_and_wrong_content_type() {
    let _shared = shared();
    let server = Server::start();
    let (control, _) = server.ports();
    let r = grpcio(&["unknown-method", "--control", &control]).results(Duration::from_secs(20));
    for call in ["ReconnectService_Frobnicate", "NoSuchService_Start"] {
        r.expect(&format!("{call}_code"), "UNIMPLEMENTED");
        r.expect(&format!("{call}_code_num"), "12");
    }
    let r = py("raw_h2.py", &["content-type", "--control", &control], &[])
        .results(Duration::from_secs(20));
    for bad in ["json", "text", "grpcfoo", "none"] {
        r.expect(&format!("{bad}_status"), "415");
    }
    for good in ["grpc", "grpc_proto"] {
        r.expect(&format!("{good}_status"), "200");
        r.expect(&format!("{good}_grpc_status"), "0");
    }
}

/// Reads HTTP/2 frames until EOF (or `timeout`); returns (type, payload) pairs and whether EOF
/// was reached.
fn read_frames(stream: &mut TcpStream, timeout: Duration) -> (Vec<(u8, Vec<u8>)>, bool) {
    let deadline = Instant::now() + timeout;
    let mut data = Vec::new();
    let mut eof = false;
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match stream.read(&mut buf) {
            Ok(0) => {
                eof = true;
                break;
            }
            Ok(n) => data.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                eof = true;
                break;
            }
            Err(_) => break,
        }
    }
    let mut frames = Vec::new();
    let mut rest = &data[..];
    while rest.len() >= 9 {
        let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        if rest.len() < 9 + len {
            break;
        }
        frames.push((rest[3], rest[9..9 + len].to_vec()));
        rest = &rest[9 + len..];
    }
    (frames, eof)
}

const SETTINGS: u8 = 4;
const GOAWAY: u8 = 7;
const WINDOW_UPDATE: u8 = 8;
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// 7. Garbage instead of the preface gets GOAWAY and a close; a client dribbling one byte per
///    second is harmless; meanwhile a grpcio session works and the retry port accepts on time.
#[test]
fn malformed_control_input_does_not_disturb_others() {
    let _shared = shared();
    let server = Server::start();
    let (control, retry) = server.ports();
    let addr = format!("127.0.0.1:{control}");

    // The slow client: one preface byte per second, in its own thread, until told to stop.
    let stop_slow = Arc::new(AtomicBool::new(false));
    let slow_sent = Arc::new(AtomicUsize::new(0));
    let mut slow = TcpStream::connect(&addr).unwrap();
    let slow_writer = {
        let mut w = slow.try_clone().unwrap();
        let (stop, sent) = (stop_slow.clone(), slow_sent.clone());
        thread::spawn(move || {
            for &byte in PREFACE {
                if stop.load(Ordering::SeqCst) || w.write_all(&[byte]).is_err() {
                    return;
                }
                sent.fetch_add(1, Ordering::SeqCst);
                thread::sleep(Duration::from_secs(1));
            }
        })
    };

    // The session, probing the retry port twice one second apart, runs alongside.
    let mut session = grpcio(&[
        "start-stop",
        "--control",
        &control,
        "--retry",
        &retry,
        "--probes",
        "2",
        "--spacing",
        "1.0",
    ]);

    // Garbage of several kinds, each on its own connection, while the session runs.
    let garbage: [&[u8]; 4] = [
        b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
        &[0xff; 64],
        b"PRI * HTTP/1.1\r\n\r\nSM\r\n\r\n",
        // A valid preface, then a frame header announcing a 16 MiB SETTINGS frame on stream 1.
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\xff\xff\xff\x04\x00\x00\x00\x00\x01",
    ];
    for bytes in garbage {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.write_all(bytes).unwrap();
        let (frames, eof) = read_frames(&mut s, Duration::from_secs(5));
        let kinds: Vec<u8> = frames.iter().map(|f| f.0).collect();
        assert!(
            kinds.contains(&GOAWAY),
            "no GOAWAY after {bytes:?}: frames {kinds:?}"
        );
        assert!(eof, "not closed after {bytes:?}");
        let goaway = &frames.iter().find(|f| f.0 == GOAWAY).unwrap().1;
        let code = u32::from_be_bytes(goaway[4..8].try_into().unwrap());
        assert_ne!(code, 0, "GOAWAY for garbage should carry an error code");
        thread::sleep(Duration::from_millis(200));
    }

    let r = session.results(Duration::from_secs(30));
    let (start_ms, stop_ms) = (r.int("start_ms"), r.int("stop_ms"));
    assert!(start_ms < 1000.0 && stop_ms < 1000.0, "{}", r.dump);
    r.expect("probes_closed", "2");
    r.expect("passed", "true");
    let backoff_ms = r.list("backoff_ms");
    assert_eq!(backoff_ms.len(), 1, "{}", r.dump);
    assert!((950..1300).contains(&backoff_ms[0]), "{backoff_ms:?}");
    println!("case 7: Start {start_ms} ms, Stop {stop_ms} ms, retry interval {backoff_ms:?}");

    // Let the slow client dribble on for a few seconds in all; it is still connected and got
    // nothing but the server's connection start: SETTINGS and the WINDOW_UPDATE that raises
    // the connection window.
    let deadline = Instant::now() + Duration::from_secs(10);
    while slow_sent.load(Ordering::SeqCst) < 5 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
    }
    let (frames, eof) = read_frames(&mut slow, Duration::from_millis(300));
    assert!(!eof, "the slow client was disconnected");
    assert!(
        frames
            .iter()
            .all(|f| f.0 == SETTINGS || f.0 == WINDOW_UPDATE),
        "slow client got {:?}",
        frames.iter().map(|f| f.0).collect::<Vec<_>>()
    );
    stop_slow.store(true, Ordering::SeqCst);
    slow_writer.join().unwrap();
    let sent = slow_sent.load(Ordering::SeqCst);
    assert!(sent >= 5, "the slow client sent only {sent} bytes");
    let _ = slow.shutdown(Shutdown::Both);
    assert_eq!(server.count("reconnect server: new connection"), 2);
}

/// 8. SIGTERM while a Start is parked: that call fails UNAVAILABLE "shutting down" and the
///    server exits 0 within 3 s.
#[test]
fn sigterm_fails_parked_start_and_exits_promptly() {
    let _shared = shared();
    let mut server = Server::start();
    let (control, _) = server.ports();
    let mut client = grpcio(&["hold-session", "--control", &control]);
    client.wait_line("RESULT ready=true", Duration::from_secs(20));
    let (status, took) = server.terminate(Duration::from_secs(10));
    println!("case 8: server exited with {status} {took:?} after SIGTERM");
    assert_eq!(status.code(), Some(0), "{}", server.proc.dump());
    assert!(took < Duration::from_secs(3), "exit took {took:?}");
    let r = client.results(Duration::from_secs(20));
    r.expect("b_parked", "true");
    r.expect("b_code", "UNAVAILABLE");
    r.expect("b_details", "shutting down");
    assert!(server.count("signal received") == 1);
}

/// Runs the server with `args`, expecting a usage error: non-zero exit and one stderr line
/// naming `flag`.
fn expect_usage_error(args: &[&str], flag: &str) {
    let mut cmd = Command::new(SERVER);
    cmd.args(args);
    let mut p = Proc::spawn("reconnect_interop_server", cmd);
    let status = p.wait(Duration::from_secs(5));
    assert!(!status.success(), "{args:?} was accepted");
    let err = p.stderr();
    assert_eq!(err.len(), 1, "{args:?}: {err:?}");
    assert!(err[0].contains(flag), "{args:?}: {err:?}");
}

/// 9. Missing or zero ports are usage errors naming the flag; all four flag spellings work
///    (checked end to end: the retry port given is the one bound at Start).
#[test]
fn flags_missing_zero_and_four_spellings() {
    let _shared = shared();
    expect_usage_error(&[], "--control_port");
    expect_usage_error(&["--retry_port=5001"], "--control_port");
    expect_usage_error(&["--control_port=5000"], "--retry_port");
    expect_usage_error(&["--control_port=0", "--retry_port=5001"], "--control_port");
    expect_usage_error(&["--control_port=5000", "--retry_port=0"], "--retry_port");
    expect_usage_error(&["-control_port", "5000", "-retry_port"], "--retry_port");

    type Spell = fn(&str, u16) -> Vec<String>;
    let spellings: [(&str, Spell); 4] = [
        ("--x=V", |n, p| vec![format!("--{n}={p}")]),
        ("--x V", |n, p| vec![format!("--{n}"), p.to_string()]),
        ("-x=V", |n, p| vec![format!("-{n}={p}")]),
        ("-x V", |n, p| vec![format!("-{n}"), p.to_string()]),
    ];
    for (i, (name, spell)) in spellings.iter().enumerate() {
        let [control, retry] = free_ports();
        let mut args = spell("control_port", control);
        args.extend(spell("retry_port", retry));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        // The last spelling also goes through `backoffd reconnect-server`.
        let mut server = if i == 3 {
            let mut all = vec!["reconnect-server"];
            all.extend(&args);
            Server::start_with(BACKOFFD, &all, control, retry)
        } else {
            Server::start_with(SERVER, &args, control, retry)
        };
        let (c, q) = server.ports();
        let r = grpcio(&[
            "start-stop",
            "--control",
            &c,
            "--retry",
            &q,
            "--probes",
            "0",
        ])
        .results(Duration::from_secs(20));
        r.expect("passed", "true");
        server.proc.wait_line(
            &format!("test tcp server listening on 0.0.0.0:{retry}"),
            Duration::from_secs(5),
        );
        let (status, _) = server.terminate(Duration::from_secs(10));
        assert_eq!(status.code(), Some(0), "{name}: {}", server.proc.dump());
    }
}

/// The Python side's own protobuf codec (packed and unpacked `backoff_ms`, unknown fields).
#[test]
fn python_codec_self_test() {
    let _shared = shared();
    grpcio(&["selftest"])
        .results(Duration::from_secs(20))
        .expect("codec", "ok");
}
