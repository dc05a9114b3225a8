//! The reconnect interop client end to end: against our `reconnect_interop_server` binary,
//! against an independently written grpcio (Python) ReconnectService, and against a TLS server
//! that completes the handshake and sends HTTP/2 SETTINGS (the backoff must reset to 1 s).

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use backoffd::reactor::{Config, Reactor, WakeMode};
use backoffd::reconnect::client::{ClientConfig, Failure, Outcome, ReconnectClient};
use backoffd::reconnect::server::{ReconnectServer, ServerConfig};
use common::{free_port, Proc};

const CLIENT: &str = env!("CARGO_BIN_EXE_reconnect_interop_client");
const SERVER: &str = env!("CARGO_BIN_EXE_reconnect_interop_server");
const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Runs the client binary to completion (killed after `limit`) and returns its exit code and
/// its log.
fn run_client(args: &[String], limit: Duration) -> (Option<i32>, String) {
    let mut command = Command::new(CLIENT);
    command.args(args).env("RUST_LOG", "info");
    let mut client = Proc::spawn("reconnect_interop_client", &mut command);
    let status = client.wait_exit(limit);
    (status.and_then(|s| s.code()), client.stderr().join("\n"))
}

fn client_args(control: u16, retry: u16, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        format!("--server_control_port={control}"),
        format!("--server_retry_port={retry}"),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// The `backoff_ms: [...]` line's list.
fn backoff_ms(log: &str) -> Vec<i32> {
    let line = log
        .lines()
        .find_map(|l| l.split("backoff_ms: [").nth(1))
        .unwrap_or_else(|| panic!("no backoff_ms line in:\n{log}"));
    line.trim_end_matches(']')
        .split(", ")
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect()
}

/// Our server binary on fresh ports; returns it and its (control, retry) ports.
fn our_server(extra: &[&str]) -> (Proc, u16, u16) {
    let (control, retry) = (free_port(), free_port());
    let mut command = Command::new(SERVER);
    command
        .arg(format!("--control_port={control}"))
        .arg(format!("--retry_port={retry}"))
        .args(extra);
    let mut server = Proc::spawn("reconnect_interop_server", &mut command);
    server.wait_line("Server listening", Duration::from_secs(10));
    (server, control, retry)
}

#[test]
fn passes_against_our_reconnect_interop_server() {
    let (_server, control, retry) = our_server(&[]);
    let args = client_args(
        control,
        retry,
        &[
            "--max_reconnect_backoff_ms=2000",
            "--test_duration_s=10",
            "--seed=11",
        ],
    );
    let (code, log) = run_client(&args, Duration::from_secs(40));
    println!("{log}");
    assert_eq!(code, Some(0), "{log}");
    for line in [
        "for the whole test",
        "Starting connections with retries.",
        "attempt 1: planned at +0.000s",
        "Done retrying, getting final data from server",
        "own check: all",
        "server verdict: passed=true",
        "Passed",
    ] {
        assert!(log.contains(line), "missing {line:?}");
    }
    // 0, 1, ~2.6, then ~2 s apart: at least 5 intervals in 10 s.
    let backoff = backoff_ms(&log);
    assert!(backoff.len() >= 5, "{backoff:?}");
    assert!((700..=1300).contains(&backoff[0]), "{backoff:?}");
}

#[test]
fn a_false_verdict_exits_1_and_says_so() {
    // Strict server: fewer than 50 intervals fail, whatever the client does.
    let (_server, control, retry) = our_server(&["--min_intervals=50"]);
    let args = client_args(control, retry, &["--test_duration_s=2"]);
    let (code, log) = run_client(&args, Duration::from_secs(30));
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("passed=false"), "{log}");
    assert!(!log.contains("Passed"), "{log}");
}

#[test]
fn an_unreachable_server_exits_1_naming_the_control_channel() {
    let port = free_port();
    let args = client_args(port, free_port(), &["--server_host=127.0.0.1"]);
    let (code, log) = run_client(&args, Duration::from_secs(20));
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("server unreachable"), "{log}");
    assert!(log.contains(&format!("127.0.0.1:{port}")), "{log}");
}

#[test]
fn usage_errors_exit_2_with_one_line_naming_the_flag() {
    for (args, flag) in [
        (&["--server_retry_port=2"][..], "--server_control_port"),
        (&["--server_control_port=1"][..], "--server_retry_port"),
        (
            &["--server_control_port=1", "--server_retry_port=0"][..],
            "--server_retry_port",
        ),
        (
            &[
                "-server_control_port",
                "1",
                "-server_retry_port",
                "2",
                "--test_duration_s=0",
            ][..],
            "--test_duration_s",
        ),
        (
            &[
                "--server_control_port=1",
                "--server_retry_port=2",
                "--max_reconnect_backoff_ms=x",
            ][..],
            "--max_reconnect_backoff_ms",
        ),
        (&["--frobnicate"][..], "--frobnicate"),
    ] {
        let out = Command::new(CLIENT).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(flag), "{args:?}: {err}");
    }
    let out = Command::new(CLIENT).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Usage") && help.contains("ANY server certificate"));
}

// ----- against grpcio (Python) -----

/// The venv's python, set up once per test process (tests run in parallel threads; the
/// script is idempotent but two first-time installs must not race).
fn grpc_python() -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/setup_grpc.sh");
        let setup = Command::new("bash")
            .arg(script)
            .stderr(Stdio::inherit())
            .output()
            .expect("run tests/interop/setup_grpc.sh");
        assert!(
            setup.status.success(),
            "tests/interop/setup_grpc.sh failed: grpcio is needed for this test"
        );
        String::from_utf8(setup.stdout).unwrap().trim().to_owned()
    })
}

/// The grpcio ReconnectService of tests/interop, on ports it picks.
fn python_server(extra: &[&str]) -> (Proc, u16, u16) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut command = Command::new(grpc_python());
    command
        .arg(root.join("tests/interop/py_reconnect_server.py"))
        .args(["--control_port=0", "--retry_port=0"])
        .args(extra);
    let mut server = Proc::spawn("py_reconnect_server.py", &mut command);
    let line = server.wait_for("its ports", Duration::from_secs(60), |out, _| {
        out.first().cloned()
    });
    let port = |key: &str| -> u16 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in {line:?}"))
            .parse()
            .unwrap()
    };
    let (control, retry) = (port("control="), port("retry="));
    (server, control, retry)
}

#[test]
fn passes_against_a_grpcio_reconnect_server() {
    let (_server, control, retry) = python_server(&[]);
    let args = client_args(
        control,
        retry,
        &[
            "--server_host=127.0.0.1",
            "--max_reconnect_backoff_ms=2000",
            "--test_duration_s=10",
        ],
    );
    let (code, log) = run_client(&args, Duration::from_secs(40));
    println!("{log}");
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("server verdict: passed=true") && log.contains("Passed"));
    assert!(backoff_ms(&log).len() >= 5, "{log}");
}

#[test]
fn a_start_error_from_grpcio_exits_1_with_its_decoded_message() {
    let (_server, control, retry) =
        python_server(&["--start_status=9", "--start_message=not now: 100% busy ✗"]);
    let args = client_args(control, retry, &["--server_host=127.0.0.1"]);
    let (code, log) = run_client(&args, Duration::from_secs(20));
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains("Start failed: FAILED_PRECONDITION: not now: 100% busy ✗"),
        "{log}"
    );
}

// ----- a TLS server that lets one attempt succeed -----

/// Accepts connections on loopback: the `success`-th (0-based) gets a TLS handshake (any
/// certificate: one generated now), ALPN h2, an HTTP/2 SETTINGS frame, then a close after
/// `hold`; every other connection is closed at once, like the interop server's retry port.
fn tls_settings_server(success: usize, hold: Duration) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let cert = rcgen::generate_simple_self_signed(vec!["retry.test".into()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.key_pair.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let config = Arc::new(config);
    std::thread::spawn(move || {
        for (i, stream) in listener.incoming().enumerate() {
            let Ok(tcp) = stream else { continue };
            if i != success {
                continue; // dropped: closed at once
            }
            let conn = rustls::ServerConnection::new(Arc::clone(&config)).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            while tls.conn.is_handshaking() {
                tls.conn.complete_io(&mut tls.sock).unwrap();
            }
            assert_eq!(tls.conn.alpn_protocol(), Some(&b"h2"[..]));
            // An empty SETTINGS frame: length 0, type 4, flags 0, stream 0 (RFC 9113 §6.5).
            tls.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).unwrap();
            tls.flush().unwrap();
            // Read the client's preface and SETTINGS while holding the connection.
            tls.sock.set_read_timeout(Some(hold)).unwrap();
            let mut buf = [0u8; 4096];
            let started = Instant::now();
            while started.elapsed() < hold && matches!(tls.read(&mut buf), Ok(1..)) {}
            tls.conn.send_close_notify();
            let _ = tls.conn.complete_io(&mut tls.sock);
        }
    });
    port
}

/// Runs the client in this process against our server in the same loop (for Start and Stop)
/// and a retry port of the test's choosing. Our server's own retry port sees nothing, so its
/// verdict is the reference's default pass.
fn run_in_process(retry_port: u16, duration: Duration, seed: u64) -> Outcome {
    let _ = env_logger::builder()
        .is_test(true)
        .filter_level(log::LevelFilter::Info)
        .try_init();
    let server = ReconnectServer::bind(ServerConfig::new(0, 0)).unwrap();
    let control_port = server.control_addr().unwrap().port();
    let (client, outcome) = ReconnectClient::new(ClientConfig {
        server_host: "127.0.0.1".into(),
        server_ip: LOCALHOST,
        control_port,
        retry_port,
        max_reconnect_backoff_ms: 0,
        test_duration: duration,
        seed,
        stop_timeout: Some(Duration::from_secs(10)),
    });
    let mut reactor = Reactor::new(Config {
        wake: WakeMode::Timerfd,
        signals: false,
        drain_timeout: Duration::from_secs(2),
    })
    .unwrap();
    reactor.add(Box::new(server)).unwrap();
    reactor.add(Box::new(client)).unwrap();
    reactor.run().unwrap();
    let outcome = outcome.borrow_mut().take().expect("the client finished");
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    outcome
}

#[test]
fn refused_connections_fail_at_once_and_keep_the_schedule() {
    // A port nobody listens on: every connect is refused straight away.
    let outcome = run_in_process(free_port(), Duration::from_millis(3500), 6);
    let a = &outcome.attempts;
    assert_eq!(a.len(), 3, "{a:?}");
    assert_eq!(
        a[1].planned_start - a[0].actual_start,
        Duration::from_secs(1)
    );
    let second = a[2].planned_start - a[1].actual_start;
    assert!(
        Duration::from_millis(1280) <= second && second <= Duration::from_millis(1920),
        "{second:?}"
    );
    for r in a {
        let late = r.actual_start - r.planned_start;
        assert!(
            late < Duration::from_millis(50),
            "{r:?} started {late:?} late"
        );
    }
}

#[test]
fn settings_over_tls_reset_the_backoff_to_one_second() {
    let hold = Duration::from_millis(300);
    let retry_port = tls_settings_server(1, hold);
    let outcome = run_in_process(retry_port, Duration::from_millis(4500), 4);
    let a = &outcome.attempts;
    for r in a {
        println!("{r:?}");
    }
    assert!(a.len() >= 4, "{a:?}");
    // 1: closed at once. 2 (1 s later): TLS, SETTINGS, held, closed. 3: at once after that
    // close, with a fresh backoff. 4: INITIAL_BACKOFF after 3, not 2.56 s +- 20 %.
    assert_eq!(
        a[1].planned_start - a[0].actual_start,
        Duration::from_secs(1)
    );
    let held = a[2].actual_start - a[1].actual_start;
    assert!(hold <= held && held < Duration::from_secs(1), "{held:?}");
    assert_eq!(a[2].planned_start, a[2].actual_start, "reconnect at once");
    assert_eq!(
        a[3].planned_start - a[2].actual_start,
        Duration::from_secs(1),
        "backoff reset to INITIAL_BACKOFF"
    );
    if let Some(fifth) = a.get(4) {
        let gap = fifth.planned_start - a[3].actual_start;
        assert!(
            Duration::from_millis(1280) <= gap && gap <= Duration::from_millis(1920),
            "{gap:?}"
        );
    }
}

#[test]
fn failure_reasons_read_well() {
    assert_eq!(
        Failure::NotPassed {
            backoff_ms: vec![1000, 5000]
        }
        .to_string(),
        "the server's verdict is passed=false (backoff_ms [1000, 5000])"
    );
}
