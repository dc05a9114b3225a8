//! Listeners under connection floods (issue 13, rows 6 and 12), against the real binary.
//!
//! Row 6: with descriptors exhausted, `accept` fails with `EMFILE` and the pending connection
//! stays in the kernel's backlog. An edge-triggered listener gets no new edge for it, so before
//! the fix a client that connected during the exhaustion waited until yet another client came.
//! Now a failed accept pauses accepting briefly and a timer resumes it.
//!
//! Row 12: the metrics endpoint's idle keep-alive connections, one request each, used to hold
//! every slot of its cap; now a new connection replaces the one idle the longest.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::daemon;
use common::http::{connect, read_answers};

/// Open descriptors the daemon may have: its own handful (epoll, timerfd, signalfd, the
/// listeners, standard streams) plus room for a few connections.
const FD_LIMIT: u64 = 24;

/// Connections that hold descriptors, more than [`FD_LIMIT`] leaves room for.
fn flood(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .filter_map(|_| TcpStream::connect(addr).ok())
        .collect()
}

/// Sends a GET and waits for its answer; the time it took.
fn healthz_round_trip(mut conn: TcpStream) -> Duration {
    let started = Instant::now();
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let answers = read_answers(&mut conn, &[false]);
    assert_eq!(answers[0].status, 200, "{answers:?}");
    started.elapsed()
}

#[test]
fn a_client_that_connected_while_descriptors_ran_out_is_served_once_they_are_back() {
    let mut daemon =
        daemon::spawn_with_fd_limit(&["serve", "--metrics", "127.0.0.1:0"], "info", FD_LIMIT);
    let metrics = daemon.wait_addr("metrics listening on ");
    let attackers = flood(metrics, 2 * FD_LIMIT as usize);
    daemon.wait_log("metrics accept:", Duration::from_secs(5));
    // This one waits in the backlog: the daemon has no descriptor to accept it with.
    let legit = connect(metrics);
    std::thread::sleep(Duration::from_millis(200));
    drop(attackers);
    let took = healthz_round_trip(legit);
    eprintln!("answered {took:?} after the attackers left");
    assert!(
        took < Duration::from_secs(5),
        "the waiting client was accepted only after {took:?}"
    );
    // One warning stood for the whole exhaustion, not one per failed accept.
    let warnings = daemon
        .drain_log()
        .iter()
        .filter(|l| l.contains("accept:"))
        .count();
    assert!(warnings <= 1, "{warnings} more accept warnings");
}

#[test]
fn at_the_metrics_cap_an_idle_keep_alive_connection_makes_room() {
    let (_daemon, metrics) = daemon::start(
        &["serve", "--metrics", "127.0.0.1:0"],
        "metrics listening on ",
    );
    // 64 scrapers, one request each, all kept alive: every slot of the cap is idle.
    let idle: Vec<TcpStream> = (0..64)
        .map(|_| {
            let mut c = connect(metrics);
            c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            assert_eq!(read_answers(&mut c, &[false])[0].status, 200);
            c
        })
        .collect();
    let took = healthz_round_trip(connect(metrics));
    assert!(took < Duration::from_secs(5), "a scrape waited {took:?}");
    // The oldest idle connection was the one closed.
    let mut oldest = &idle[0];
    oldest
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let read = oldest.read(&mut [0u8; 1]);
    assert!(
        matches!(read, Ok(0)),
        "the oldest idle one is closed: {read:?}"
    );
    let mut newest = &idle[63];
    newest
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let read = newest.read(&mut [0u8; 1]);
    assert!(read.is_err(), "the newest idle one is kept: {read:?}");
}
