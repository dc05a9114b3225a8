//! End-to-end tests of `reconnect_interop_server` against an independently written gRPC
//! implementation: Python `grpcio` (pinned, installed by `tests/interop/setup_grpc.sh` into
//! `<target>/grpc-venv`), driven by the scripts in `tests/interop/`.
//!
//! Each test starts its own server on random free ports and runs one Python script, which prints
//! `RESULT key=value` lines; the assertions are here. Every child process sits in tests/common's `Proc`,
//! which kills it on drop, so a failing assertion never leaves a server or client behind, and
//! every wait is bounded.
//!
//! The Python channels dial `127.0.0.1`, never `localhost`: grpcio resolves `localhost` to `::1`
//! and `127.0.0.1` and tries both within one connection attempt, so each backoff attempt would
//! reach the retry port twice and the server would record a ~0 ms interval (see
//! `tests/interop/grpcio_client.py`).
//!
//! If the venv cannot be installed, the tests fail: they are never skipped.

mod common;
#[path = "reconnect_grpcio/connection.rs"]
mod connection;
#[path = "reconnect_grpcio/flags.rs"]
mod flags;
#[path = "reconnect_grpcio/harness.rs"]
mod harness;

use std::sync::{RwLock, RwLockReadGuard};
use std::time::Duration;

use harness::{allowed_range, grpcio, python, Server};

const SERVER: &str = env!("CARGO_BIN_EXE_reconnect_interop_server");
const BACKOFFD: &str = env!("CARGO_BIN_EXE_backoffd");
/// The one test whose verdict depends on timing (case 1) runs alone: it takes this lock for
/// writing, every other test for reading. Two cores are shared by everything here.
static TIMING: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    TIMING.read().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------------------------
// Cases: the backoff verdict and the control sessions

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
    let mut server = Server::start();
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
    let mut holder = grpcio(&["hold-session", "--control", &control]);
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

/// The Python side's own protobuf codec (packed and unpacked `backoff_ms`, unknown fields).
#[test]
fn python_codec_self_test() {
    let _shared = shared();
    grpcio(&["selftest"])
        .results(Duration::from_secs(20))
        .expect("codec", "ok");
}
