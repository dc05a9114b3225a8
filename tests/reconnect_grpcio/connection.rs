//! Cases 5-7 of tests/reconnect_grpcio.rs: many calls, wrong calls and malformed input on the
//! control connection.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::harness::{grpcio, py, Server};
use super::shared;

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

    let mut slow = SlowClient::start(&addr);

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

    garbage_gets_goaway_and_a_close(&addr);

    let r = session.results(Duration::from_secs(30));
    let (start_ms, stop_ms) = (r.int("start_ms"), r.int("stop_ms"));
    assert!(start_ms < 1000.0 && stop_ms < 1000.0, "{}", r.dump);
    r.expect("probes_closed", "2");
    r.expect("passed", "true");
    let backoff_ms = r.list("backoff_ms");
    assert_eq!(backoff_ms.len(), 1, "{}", r.dump);
    assert!((950..1300).contains(&backoff_ms[0]), "{backoff_ms:?}");
    println!("case 7: Start {start_ms} ms, Stop {stop_ms} ms, retry interval {backoff_ms:?}");

    slow.check_harmless();
    assert_eq!(server.count("reconnect server: new connection"), 2);
}

/// Garbage of several kinds, each on its own connection (while a session runs), gets GOAWAY
/// with an error code and a close.
fn garbage_gets_goaway_and_a_close(addr: &str) {
    let garbage: [&[u8]; 4] = [
        b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
        &[0xff; 64],
        b"PRI * HTTP/1.1\r\n\r\nSM\r\n\r\n",
        // A valid preface, then a frame header announcing a 16 MiB SETTINGS frame on stream 1.
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\xff\xff\xff\x04\x00\x00\x00\x00\x01",
    ];
    for bytes in garbage {
        let mut s = TcpStream::connect(addr).unwrap();
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
}

/// A client sending the preface one byte per second, from its own thread, until stopped.
struct SlowClient {
    stream: TcpStream,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
    writer: Option<thread::JoinHandle<()>>,
}

impl SlowClient {
    fn start(addr: &str) -> SlowClient {
        let stream = TcpStream::connect(addr).unwrap();
        let (stop, sent) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
        );
        let mut w = stream.try_clone().unwrap();
        let (stopped, counter) = (stop.clone(), sent.clone());
        let writer = thread::spawn(move || {
            for &byte in PREFACE {
                if stopped.load(Ordering::SeqCst) || w.write_all(&[byte]).is_err() {
                    return;
                }
                counter.fetch_add(1, Ordering::SeqCst);
                thread::sleep(Duration::from_secs(1));
            }
        });
        SlowClient {
            stream,
            stop,
            sent,
            writer: Some(writer),
        }
    }

    /// Lets the client dribble on for a few seconds in all; it must still be connected and
    /// have got nothing but the server's connection start: SETTINGS and the WINDOW_UPDATE that
    /// raises the connection window. Then stops it.
    fn check_harmless(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.sent.load(Ordering::SeqCst) < 5 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(50));
        }
        let (frames, eof) = read_frames(&mut self.stream, Duration::from_millis(300));
        assert!(!eof, "the slow client was disconnected");
        assert!(
            frames
                .iter()
                .all(|f| f.0 == SETTINGS || f.0 == WINDOW_UPDATE),
            "slow client got {:?}",
            frames.iter().map(|f| f.0).collect::<Vec<_>>()
        );
        self.stop.store(true, Ordering::SeqCst);
        self.writer.take().unwrap().join().unwrap();
        let sent = self.sent.load(Ordering::SeqCst);
        assert!(sent >= 5, "the slow client sent only {sent} bytes");
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}
