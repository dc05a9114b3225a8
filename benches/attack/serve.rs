//! Issue 13's probes of `serve`'s other ports: rows 7, 12 and 13 (`control_flood`,
//! `metrics_idle`, `retry_flood`).

use std::io::Write;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use backoffd::coap::option::URI_PATH;
use backoffd::grpc::proto::testing::ReconnectInfo;
use backoffd::http2::frame::{encode_data, encode_headers, encode_ping};
use backoffd::http2::hpack::Encoder;
use prost::Message as _;

use super::http2::{call_headers, reconnect_server, H2};
use super::reflection::common::http::{connect, read_answers};
use super::reflection::common::{daemon, free_port};
use super::{answer, ms, percentile, request, upstream};

// ---------------------------------------------------------------------------------------------
// Row 7: `serve` under a control-port flood

pub fn control_flood() -> Vec<(String, String)> {
    let stop = Arc::new(AtomicBool::new(false));
    let (up, _) = upstream(16, false, stop.clone());
    let (control, retry) = (free_port().to_string(), free_port().to_string());
    let upstream_flag = up.to_string();
    let (_daemon, proxy) = daemon::start(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &upstream_flag,
            "--control_port",
            &control,
            "--retry_port",
            &retry,
        ],
        "CoAP proxy listening on ",
    );
    let control: SocketAddr = format!("127.0.0.1:{control}").parse().unwrap();
    let quiet = coap_round_trips(proxy, 1000);
    let flooding = Arc::new(AtomicBool::new(true));
    let flooders: Vec<_> = (0..4)
        .map(|_| {
            let flooding = flooding.clone();
            thread::spawn(move || ping_flood(control, &flooding))
        })
        .collect();
    let busy = coap_round_trips(proxy, 1000);
    flooding.store(false, Ordering::Relaxed);
    let flooded: u64 = flooders.into_iter().map(|f| f.join().unwrap()).sum();
    stop.store(true, Ordering::Relaxed);
    let row = |rtt: &[Duration]| {
        format!(
            "p50 {} p99 {} max {}",
            ms(percentile(rtt, 0.5)),
            ms(percentile(rtt, 0.99)),
            ms(percentile(rtt, 1.0))
        )
    };
    vec![
        ("CoAP round trips, quiet".into(), row(&quiet)),
        (
            format!(
                "CoAP round trips, 4 connections flooding PINGs ({} MB written)",
                flooded >> 20
            ),
            row(&busy),
        ),
    ]
}

/// `n` CON GETs one after another; their round trips, sorted.
fn coap_round_trips(proxy: SocketAddr, n: u16) -> Vec<Duration> {
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut rtt: Vec<Duration> = (0..n)
        .map(|i| {
            let token = i.to_be_bytes();
            let sent = Instant::now();
            client
                .send_to(&request(i, &token, &[(URI_PATH, b"x")]), proxy)
                .unwrap();
            let got = answer(&client, &token, Duration::from_secs(1));
            thread::sleep(Duration::from_millis(1));
            got.map_or(Duration::from_secs(1), |(_, at)| at - sent)
        })
        .collect();
    rtt.sort();
    rtt
}

/// PING frames as fast as the socket takes them, reconnecting when cut off; bytes written.
fn ping_flood(control: SocketAddr, flooding: &AtomicBool) -> u64 {
    let mut frames = Vec::new();
    for i in 0..4096u64 {
        encode_ping(&mut frames, false, i.to_be_bytes());
    }
    let mut written = 0;
    while flooding.load(Ordering::Relaxed) {
        let mut h2 = H2::open(control);
        while flooding.load(Ordering::Relaxed) && h2.goaway().is_none() {
            match h2.socket.write_all(&frames) {
                Ok(()) => written += frames.len() as u64,
                Err(_) => break,
            }
        }
    }
    written
}

// ---------------------------------------------------------------------------------------------
// Row 12: the metrics endpoint's cap

pub fn metrics_idle() -> Vec<(String, String)> {
    let (_daemon, metrics) = daemon::start(
        &["serve", "--metrics", "127.0.0.1:0"],
        "metrics listening on ",
    );
    let _idle: Vec<TcpStream> = (0..64)
        .map(|_| {
            let mut c = connect(metrics);
            c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            read_answers(&mut c, &[false]);
            c
        })
        .collect();
    let started = Instant::now();
    let mut c = connect(metrics);
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let status = read_answers(&mut c, &[false])[0].status;
    vec![(
        "a scrape with 64 idle keep-alive connections open".into(),
        format!("{status} in {}", ms(started.elapsed())),
    )]
}

// ---------------------------------------------------------------------------------------------
// Row 13: the retry port's record of one session

pub fn retry_flood() -> Vec<(String, String)> {
    const CONNECTS: usize = 20_000;
    let (mut daemon, control, retry) = reconnect_server(&[]);
    let mut h2 = H2::open(control);
    let mut encoder = Encoder::new();
    let call = |encoder: &mut Encoder, stream: u32, method: &str| {
        let mut out = Vec::new();
        encode_headers(
            &mut out,
            stream,
            &call_headers(encoder, method),
            false,
            16_384,
        );
        encode_data(&mut out, stream, &[0; 5], true, 16_384);
        out
    };
    h2.socket
        .write_all(&call(&mut encoder, 1, "Start"))
        .unwrap();
    daemon.wait_log("test tcp server listening", Duration::from_secs(5));
    daemon.drain_log();
    let retry = SocketAddr::from(([127, 0, 0, 1], retry));
    let started = Instant::now();
    let connected = (0..CONNECTS)
        .filter(|_| TcpStream::connect(retry).is_ok())
        .count();
    let took = started.elapsed();
    thread::sleep(Duration::from_millis(300));
    h2.data.lock().unwrap().clear();
    h2.socket.write_all(&call(&mut encoder, 3, "Stop")).unwrap();
    thread::sleep(Duration::from_secs(1));
    let data = h2.data.lock().unwrap().clone();
    let info = data
        .get(5..)
        .and_then(|m| ReconnectInfo::decode(m).ok())
        .unwrap_or_default();
    let lines: Vec<String> = daemon.drain_log();
    let ours = lines
        .iter()
        .filter(|l| !l.contains("reconnect server: new connection") && !l.contains("retry "))
        .count();
    vec![
        (
            format!(
                "{connected} connects to the retry port in one session ({})",
                ms(took)
            ),
            format!(
                "Stop returned {} intervals (10,000 accepts kept), passed={}",
                info.backoff_ms.len(),
                info.passed
            ),
        ),
        (
            "info lines logged from the first connect to Stop: in all / not the reference's".into(),
            format!("{} / {ours}", lines.len()),
        ),
    ]
}
