//! Answers held for a proof of address at their bound (issue 40, row 1), against the real
//! binary at default flags, with real peers: 20 forged sources send 250 NON GETs each of a
//! 1,000-byte resource (about 90 KB) and never acknowledge anything, which fills the 4 MiB
//! of answers held for proofs. A new libcoap client (`coap-client-notls`, which ACKs CONs
//! and repeats a request with an Echo value) and a new aiocoap client (which RSTs pings) then
//! still get their answer in full, within their own 2-3 s bounds; before, both got a bare
//! 5.03 and could never prove themselves. The forged sources stay within 3x plus one datagram.
//!
//! The forged sources are 20 loopback addresses (127.0.0.2 to 127.0.0.21; Linux routes all
//! of 127/8 to the loopback interface): a spoofer writes any address, and the proxy counts
//! its shares per source network (`--source-prefix`, /32 for IPv4), so 20 ports of one
//! address would share one share. The new clients are on 127.0.0.1.

mod common;
mod peers;

use std::net::{Ipv4Addr, UdpSocket};
use std::thread;
use std::time::{Duration, Instant};

use backoffd::coap::option::URI_PATH;
use backoffd::coap::{Code, MessageBuilder, MessageType};
use common::exposition::scrape;
use common::upstream::Script;
use peers::{aiocoap_client, coap_client_ok};

const BODY: usize = 1000;
/// What an unproven source may be sent past 3x what it sent.
const ONE_DATAGRAM: usize = 1152;

/// An 18-byte NON GET of the resource, MID and token `i`.
fn get(i: u16) -> Vec<u8> {
    let mut out = Vec::new();
    let token = u32::from(i).to_be_bytes();
    let mut b = MessageBuilder::new(&mut out, MessageType::Non, Code::GET, i, &token);
    b.option(URI_PATH, b"resource");
    b.finish().unwrap();
    out
}

#[test]
fn after_a_forged_flood_fills_the_held_answers_new_libcoap_and_aiocoap_clients_are_served() {
    let up = Script::new().payload(&[b'x'; BODY]).start();
    let (_daemon, proxy, metrics) = common::daemon::proxy_with_metrics(up.addr, &[]);
    let forged: Vec<UdpSocket> = (0..20u8)
        .map(|i| {
            let s = UdpSocket::bind((Ipv4Addr::new(127, 0, 0, 2 + i), 0)).unwrap();
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect();
    let mut sent = vec![0usize; forged.len()];
    let flood = Instant::now();
    for i in 0..250 {
        for (s, sent) in forged.iter().zip(&mut sent) {
            *sent += s.send_to(&get(i), proxy).unwrap();
        }
        // 250 rounds in about 250 ms: no socket buffer on the way overflows.
        thread::sleep(Duration::from_millis(1));
    }
    let mut received = vec![0usize; forged.len()];
    let mut drain = || {
        let mut buf = [0u8; 2048];
        for (s, r) in forged.iter().zip(received.iter_mut()) {
            while let Ok(n) = s.recv(&mut buf) {
                *r += n;
            }
        }
    };
    // +1 s: every answer went upstream and came back; most wait for proofs that never come.
    while flood.elapsed() < Duration::from_secs(1) {
        drain();
        thread::sleep(Duration::from_millis(20));
    }
    let held = scrape(metrics).get("backoffd_coap_exchange_answer_bytes");
    eprintln!(
        "{} B of forged requests; held for proofs at +1 s: {held} B",
        sent.iter().sum::<usize>()
    );
    assert!(held > 3_500_000.0, "the flood fills the backlog: {held} B");
    let uri = format!("coap://{proxy}/resource");
    let started = Instant::now();
    let libcoap = coap_client_ok(&["-m", "get", "-B", "3", &uri], Duration::from_secs(5));
    let body = libcoap.stdout_text();
    eprintln!(
        "libcoap: {} B in {:.2?}",
        body.trim_end().len(),
        started.elapsed()
    );
    assert_eq!(body.trim_end().len(), BODY, "{}", libcoap.dump());
    let started = Instant::now();
    let aiocoap = aiocoap_client(&["request", "get", &uri], Duration::from_secs(4));
    eprintln!(
        "aiocoap: {:?} in {:.2?}",
        aiocoap.stdout().first(),
        started.elapsed()
    );
    assert!(
        aiocoap.stdout_text().contains(&format!("CODE 2.05 {BODY}")),
        "{}",
        aiocoap.dump()
    );
    let m = scrape(metrics);
    let count = |s: &str| m.get(&format!("backoffd_coap_{s}"));
    assert_eq!(count("refusals_total{cause=\"proof_backlog\"}"), 0.0);
    assert!(count("held_answers_given_up_total{cause=\"evicted\"}") > 0.0);
    // The forged sources' probes went unacknowledged: what was held for them is given up.
    while flood.elapsed() < Duration::from_secs(6) {
        drain();
        thread::sleep(Duration::from_millis(20));
    }
    let m = scrape(metrics);
    assert_eq!(m.get("backoffd_coap_exchange_answer_bytes"), 0.0);
    for ((s, r), i) in sent.iter().zip(&received).zip(2..) {
        assert!(
            *r <= 3 * s + ONE_DATAGRAM,
            "127.0.0.{i}: {r} B > 3 x {s} B + one datagram"
        );
    }
}
