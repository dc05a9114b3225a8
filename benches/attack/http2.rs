//! Issue 13's HTTP/2 probes on the control port: rows 2 and 8 to 11 (`grpc_memory`,
//! `rapid_reset`, `settings_flood`, `empty_frames`, `non_reader`), and their HTTP/2 client.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use backoffd::http2::error::ErrorCode;
use backoffd::http2::frame::{
    encode_data, encode_headers, encode_ping, encode_rst_stream, encode_settings, PREFACE,
};
use backoffd::http2::hpack::Encoder;

use super::ms;
use super::reflection::common::exposition::scrape;
use super::reflection::common::http::connect;
use super::reflection::common::{daemon, free_port, Proc};

// ---------------------------------------------------------------------------------------------
// HTTP/2 helpers

/// A control-port connection past the preface, with a thread watching what the server sends:
/// GOAWAY (and its code), RST_STREAM, the connection-level flow-control credit (WINDOW_UPDATE
/// on stream 0 added to the initial 65,535), PING ACKs, DATA payloads, and the end.
pub struct H2 {
    pub socket: TcpStream,
    goaway: Arc<AtomicU64>,
    resets: Arc<AtomicU64>,
    credit: Arc<AtomicU64>,
    pongs: mpsc::Receiver<Instant>,
    pub data: Arc<Mutex<Vec<u8>>>,
    closed: Arc<AtomicBool>,
}

const NO_GOAWAY: u64 = u64::MAX;

impl H2 {
    pub fn open(addr: SocketAddr) -> H2 {
        let mut socket = TcpStream::connect(addr).unwrap();
        let mut hello = PREFACE.to_vec();
        encode_settings(&mut hello, &[]);
        socket.write_all(&hello).unwrap();
        let (pong, pongs) = mpsc::channel();
        let h2 = H2 {
            socket,
            goaway: Arc::new(AtomicU64::new(NO_GOAWAY)),
            resets: Arc::new(AtomicU64::new(0)),
            credit: Arc::new(AtomicU64::new(65_535)),
            pongs,
            data: Arc::default(),
            closed: Arc::default(),
        };
        let mut reader = h2.socket.try_clone().unwrap();
        let (g, r, c) = (h2.goaway.clone(), h2.resets.clone(), h2.credit.clone());
        let (data, closed) = (h2.data.clone(), h2.closed.clone());
        thread::spawn(move || {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 65536];
            while let Ok(n) = reader.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                while buf.len() >= 9 {
                    let len = u32::from_be_bytes([0, buf[0], buf[1], buf[2]]) as usize;
                    if buf.len() < 9 + len {
                        break;
                    }
                    let payload = &buf[9..9 + len];
                    match buf[3] {
                        0x0 => data.lock().unwrap().extend_from_slice(payload),
                        0x3 => {
                            r.fetch_add(1, Ordering::Relaxed);
                        }
                        0x6 if buf[4] & 1 == 1 => {
                            let _ = pong.send(Instant::now());
                        }
                        0x8 if len == 4 && buf[5..9] == [0, 0, 0, 0] => {
                            let add = u32::from_be_bytes(payload.try_into().unwrap());
                            c.fetch_add(u64::from(add & 0x7fff_ffff), Ordering::Relaxed);
                        }
                        0x7 if len >= 8 => {
                            let code = u32::from_be_bytes(payload[4..8].try_into().unwrap());
                            g.store(u64::from(code), Ordering::Relaxed);
                        }
                        _ => {}
                    }
                    buf.drain(..9 + len);
                }
            }
            closed.store(true, Ordering::Relaxed);
        });
        h2
    }

    pub fn goaway(&self) -> Option<u64> {
        Some(self.goaway.load(Ordering::Relaxed)).filter(|&c| c != NO_GOAWAY)
    }

    /// The GOAWAY's error code by name, or "none".
    pub fn goaway_name(&self) -> String {
        self.goaway().map_or("none".into(), |c| {
            let code = ErrorCode(c as u32);
            code.name().map_or(format!("{c:#x}"), str::to_owned)
        })
    }

    /// One PING's round trip (a second if none comes back).
    pub fn ping_rtt(&mut self) -> Duration {
        let mut ping = Vec::new();
        encode_ping(&mut ping, false, [7; 8]);
        let sent = Instant::now();
        self.socket.write_all(&ping).unwrap();
        match self.pongs.recv_timeout(Duration::from_secs(1)) {
            Ok(at) => at - sent,
            Err(_) => Duration::from_secs(1),
        }
    }

    /// Waits up to `timeout` for the server to end the connection; how long it took.
    pub fn wait_closed(&self, timeout: Duration) -> Option<Duration> {
        let started = Instant::now();
        while started.elapsed() < timeout {
            if self.closed.load(Ordering::Relaxed) {
                return Some(started.elapsed());
            }
            thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

/// SO_RCVBUF on a connected socket: it also stops the kernel autotuning the buffer.
fn shrink_receive_buffer(socket: &TcpStream, bytes: libc::c_int) {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid descriptor and a c_int option value of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt(SO_RCVBUF)");
}

/// A frame's 9-byte header (RFC 9113 §4.1) and payload, for frames the library has no
/// encoder for, or that it would not write.
fn raw_frame(dst: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    dst.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    dst.extend_from_slice(&[kind, flags]);
    dst.extend_from_slice(&stream.to_be_bytes());
    dst.extend_from_slice(payload);
}

/// A HEADERS block for a unary call to ReconnectService's `method`.
pub fn call_headers(encoder: &mut Encoder, method: &str) -> Vec<u8> {
    let path = format!("/grpc.testing.ReconnectService/{method}");
    let fields: [(&[u8], &[u8]); 6] = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path.as_bytes()),
        (b":authority", b"localhost"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ];
    let mut block = Vec::new();
    encoder.encode(fields, &mut block);
    block
}

pub fn reconnect_server(extra: &[&str]) -> (Proc, SocketAddr, u16) {
    let (control, retry) = (free_port(), free_port());
    let (c, r) = (control.to_string(), retry.to_string());
    let mut args = vec!["reconnect-server", "--control_port", &c, "--retry_port", &r];
    args.extend_from_slice(extra);
    let mut daemon = daemon::spawn(&args, "info");
    daemon.wait_log("Server listening on", Duration::from_secs(10));
    (daemon, SocketAddr::from(([127, 0, 0, 1], control)), retry)
}

// ---------------------------------------------------------------------------------------------
// Row 2: gRPC memory

pub fn grpc_memory() -> Vec<(String, String)> {
    const MESSAGE: usize = 4 << 20;
    const CHUNK: usize = 16_384;
    let (daemon, control, _) = reconnect_server(&[]);
    let before = daemon.status_kib("VmRSS:");
    let mut h2 = H2::open(control);
    let mut encoder = Encoder::new();
    let mut out = Vec::new();
    for i in 0..10u32 {
        let block = call_headers(&mut encoder, "Start");
        encode_headers(&mut out, 2 * i + 1, &block, false, 16_384);
    }
    let _ = h2.socket.write_all(&out);
    // Each stream announces a 4 MiB message and sends all but its last byte, within the
    // connection's flow-control credit (streams start with 256 KiB each and get more as the
    // server reads; the connection's credit is the tighter bound, so it is the one tracked).
    let (mut sent, mut stalled) = (0usize, Instant::now());
    let total = 10 * (MESSAGE - CHUNK);
    while sent < total && h2.goaway().is_none() && stalled.elapsed() < Duration::from_secs(2) {
        let credit = h2.credit.load(Ordering::Relaxed) as usize;
        if credit < sent + CHUNK {
            thread::sleep(Duration::from_millis(1));
            continue;
        }
        let (stream, offset) = ((sent / CHUNK) % 10, (sent / CHUNK / 10) * CHUNK);
        let mut body = vec![0u8; CHUNK];
        if offset == 0 {
            body[..5].copy_from_slice(&[0, 0, 0x40, 0, 0]);
        }
        out.clear();
        encode_data(&mut out, 2 * stream as u32 + 1, &body, false, 16_384);
        if h2.socket.write_all(&out).is_err() {
            break;
        }
        sent += CHUNK;
        stalled = Instant::now();
    }
    thread::sleep(Duration::from_millis(300));
    let after = daemon.status_kib("VmRSS:");
    vec![(
        "10 streams of unfinished 4 MiB messages".into(),
        format!(
            "{:.1} MB sent before the server stopped taking; RSS +{:.1} MB; {} streams reset, \
             GOAWAY {}",
            sent as f64 / 1e6,
            after.saturating_sub(before) as f64 / 1024.0,
            h2.resets.load(Ordering::Relaxed),
            h2.goaway_name()
        ),
    )]
}

// ---------------------------------------------------------------------------------------------
// Row 8: Rapid Reset

pub fn rapid_reset() -> Vec<(String, String)> {
    let (_daemon, control, _) = {
        let metrics = format!("127.0.0.1:{}", free_port());
        let (d, c, r) = reconnect_server(&["--metrics", &metrics]);
        (d, (c, metrics.parse::<SocketAddr>().unwrap()), r)
    };
    let (control, metrics) = control;
    let mut h2 = H2::open(control);
    let mut encoder = Encoder::new();
    let started = Instant::now();
    let (mut pairs, mut batch) = (0u32, Vec::new());
    while pairs < 300_000 && h2.goaway().is_none() && started.elapsed() < Duration::from_secs(10) {
        batch.clear();
        for _ in 0..1000 {
            let stream = 2 * pairs + 1;
            encode_headers(
                &mut batch,
                stream,
                &call_headers(&mut encoder, "Start"),
                false,
                16_384,
            );
            encode_rst_stream(&mut batch, stream, ErrorCode::CANCEL);
            pairs += 1;
        }
        if h2.socket.write_all(&batch).is_err() {
            break;
        }
    }
    thread::sleep(Duration::from_millis(200));
    let starts = scrape(metrics).get("backoffd_reconnect_starts_total");
    vec![
        (
            "HEADERS+RST_STREAM pairs written before the cut-off".into(),
            format!("{pairs} in {}", ms(started.elapsed())),
        ),
        ("GOAWAY code".into(), h2.goaway_name()),
        ("Starts dispatched".into(), starts.to_string()),
    ]
}

// ---------------------------------------------------------------------------------------------
// Row 9: SETTINGS amplification

pub fn settings_flood() -> Vec<(String, String)> {
    let (_daemon, control, _) = reconnect_server(&[]);
    let mut flooder = H2::open(control);
    let mut encoder = Encoder::new();
    let mut out = Vec::new();
    for i in 0..100u32 {
        let block = call_headers(&mut encoder, "Start");
        encode_headers(&mut out, 2 * i + 1, &block, false, 16_384);
    }
    flooder.socket.write_all(&out).unwrap();
    // 2,730 entries fill a 16 KiB frame; each changes every open stream's window (§6.9.2).
    let entries: Vec<(u16, u32)> = (0..2730).map(|i| (0x4, 65_535 + i % 2)).collect();
    let mut frame = Vec::new();
    encode_settings(&mut frame, &entries);
    let mut legit = H2::open(control);
    let quiet = (0..10).map(|_| legit.ping_rtt()).max().unwrap();
    let flooding = Arc::new(AtomicBool::new(true));
    let still = flooding.clone();
    let writer = thread::spawn(move || {
        let mut frames = 0;
        while frames < 300 && flooder.goaway().is_none() && flooder.socket.write_all(&frame).is_ok()
        {
            frames += 1;
        }
        still.store(false, Ordering::Relaxed);
        thread::sleep(Duration::from_millis(100));
        (frames, flooder.goaway())
    });
    let mut busy = Duration::ZERO;
    while flooding.load(Ordering::Relaxed) {
        busy = busy.max(legit.ping_rtt());
        thread::sleep(Duration::from_millis(20));
    }
    let (frames, goaway) = writer.join().unwrap();
    let goaway = goaway.map_or("none", |c| ErrorCode(c as u32).name().unwrap_or("?"));
    vec![
        (
            "16 KiB SETTINGS frames (2,730 INITIAL_WINDOW_SIZE each, 100 open streams) written \
             until the GOAWAY came back"
                .into(),
            format!("{frames} of 300; GOAWAY {goaway}"),
        ),
        (
            "another connection's PING round trip, quiet / during the flood (max)".into(),
            format!("{} / {}", ms(quiet), ms(busy)),
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// Row 10: empty frames and unfinished header blocks

pub fn empty_frames() -> Vec<(String, String)> {
    const HEADERS: u8 = 0x1;
    const CONTINUATION: u8 = 0x9;
    let (_daemon, control, _) = reconnect_server(&[]);
    let mut encoder = Encoder::new();
    let block = call_headers(&mut encoder, "Start");
    // A header block that never ends, then empty CONTINUATIONs, 1,000 per write.
    let mut flooder = H2::open(control);
    let mut open = Vec::new();
    raw_frame(&mut open, HEADERS, 0, 1, &block);
    flooder.socket.write_all(&open).unwrap();
    let mut batch = Vec::new();
    for _ in 0..1000 {
        raw_frame(&mut batch, CONTINUATION, 0, 1, &[]);
    }
    let mut written = 0u32;
    while written < 1_000_000 && flooder.goaway().is_none() {
        if flooder.socket.write_all(&batch).is_err() {
            break;
        }
        written += 1000;
    }
    // A header block that is started and left alone.
    let mut idle = H2::open(control);
    let mut start = Vec::new();
    raw_frame(&mut start, HEADERS, 0, 1, &block);
    idle.socket.write_all(&start).unwrap();
    let closed = idle.wait_closed(Duration::from_secs(15));
    vec![
        (
            "empty CONTINUATION frames written until the GOAWAY came back (1,000 per write; \
             the server reads none after its cut-off, the rest wait in socket buffers)"
                .into(),
            format!("{written}; GOAWAY {}", flooder.goaway_name()),
        ),
        (
            "a header block left unfinished: the connection ends after".into(),
            format!(
                "{}; GOAWAY {}",
                closed.map_or("more than 15 s".into(), ms),
                idle.goaway_name()
            ),
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// Row 11: peers that never read, and idle connections

pub fn non_reader() -> Vec<(String, String)> {
    let mut daemon = daemon::spawn(&["serve", "--metrics", "127.0.0.1:0"], "debug");
    let metrics = daemon.wait_addr("metrics listening on ");
    let before = daemon.status_kib("VmRSS:");
    // Five connections pipeline 5,000 scrapes each (16 MB of answers) and read none of them;
    // a 4 KiB receive buffer keeps the kernel from holding it all for them.
    let scrapes = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(5000);
    let stuck: Vec<TcpStream> = (0..5)
        .map(|_| {
            let mut c = connect(metrics);
            shrink_receive_buffer(&c, 4096);
            c.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
            let _ = c.write_all(&scrapes);
            c
        })
        .collect();
    thread::sleep(Duration::from_secs(1));
    let held = daemon.status_kib("VmRSS:").saturating_sub(before);
    let started = Instant::now();
    let mut why: Vec<String> = (0..stuck.len())
        .map(|_| daemon.wait_log("closed: ", Duration::from_secs(40)))
        .map(|line| line.split("closed: ").nth(1).unwrap_or_default().to_owned())
        .collect();
    let after = started.elapsed();
    why.dedup();
    drop(stuck);
    // The control port's cap: 100 handshaked connections that open no stream.
    let (_server, control, _) = reconnect_server(&[]);
    let idle: Vec<H2> = (0..100).map(|_| H2::open(control)).collect();
    thread::sleep(Duration::from_millis(500));
    let kept = idle
        .iter()
        .filter(|c| !c.closed.load(Ordering::Relaxed))
        .count();
    vec![
        (
            "5 connections pipelining 5,000 scrapes each, never reading: RSS held".into(),
            format!("+{:.1} MB", held as f64 / 1024.0),
        ),
        (
            "... all five closed by the server within".into(),
            format!("{:.1} s ({})", after.as_secs_f64() + 1.0, why.join(", ")),
        ),
        (
            "100 handshaked control connections with no stream: kept (idle ones end after 600 s)"
                .into(),
            kept.to_string(),
        ),
    ]
}
