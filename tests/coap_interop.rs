//! Interop suite: the real `backoffd proxy` between independently written CoAP peers.
//!
//! Peers: aiocoap (Python, pinned from PyPI) driven by the scripts in tests/interop/*.py, and
//! Debian's libcoap 4.3.1 command-line tools `coap-client-notls` / `coap-server-notls`.
//! `tests/interop/setup.sh` installs both once per run (quick when present) and fails loudly;
//! it never skips. Every peer and the proxy bind loopback only, on kernel-chosen or freshly
//! probed free ports; every child runs in its own process group, which its guard kills on
//! drop (also when a test panics, after printing the child's output); every wait is bounded.
//!
//! Wire-level claims (piggybacked vs. separate answers, block-wise exchanges, datagram loss)
//! are checked on a *tap*: tests/interop/lossy_relay.py placed between two hops, which logs
//! each datagram's CoAP header (with `--loss 0` it only observes).
//!
//! Who plays which side (each implementation is client and server at least once):
//!
//! | test                                                          | client  | server  |
//! |---------------------------------------------------------------|---------|---------|
//! | aiocoap_get_is_piggybacked                                    | aiocoap | aiocoap |
//! | slow_resource_answer_arrives_separately                       | aiocoap | aiocoap |
//! | libcoap_get_is_piggybacked (IPv4 and IPv6)                    | libcoap | libcoap |
//! | libcoap_delayed_answer_arrives_separately                     | libcoap | libcoap |
//! | blockwise_4k_aiocoap_client_through_proxy_to_libcoap_server   | aiocoap | libcoap |
//! | blockwise_4k_libcoap_client_through_proxy_to_aiocoap_server   | libcoap | aiocoap |
//! | observe_relays_notifications_until_cancelled                  | both    | aiocoap |
//! | lossy_network_posts_execute_exactly_once                      | both    | aiocoap |
//! | forward_proxy_serves_allowed_targets_and_refuses_others_...   | both    | libcoap; aiocoap not allowed |
//! | the_cache_serves_within_max_age_revalidates_with_the_etag_... | aiocoap | aiocoap |
//! | a_blockwise_get_of_a_cached_resource_needs_no_upstream_traffic | libcoap | aiocoap |
//! | three_observers_through_the_cache_make_one_upstream_registration | aiocoap | aiocoap |
//! | the_cache_in_front_of_libcoap_serves_hits_and_a_put_invalidates | libcoap | libcoap |
//!
//! The cases live in tests/coap_interop/, one module per concern; the assertions they share
//! are here.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

mod common;
mod peers;

#[path = "coap_interop/blockwise.rs"]
mod blockwise;
#[path = "coap_interop/cache.rs"]
mod cache;
#[path = "coap_interop/gets.rs"]
mod gets;
#[path = "coap_interop/lossy.rs"]
mod lossy;

use peers::*;

// ------------------------------------------------------------------------------------------
// Assertions on outputs.
// ------------------------------------------------------------------------------------------

const T10: Duration = Duration::from_secs(10);
const T20: Duration = Duration::from_secs(20);

/// The text libcoap's example server answers on `/`.
const LIBCOAP_INDEX: &str = "This is a test server made with libcoap";

fn assert_line(p: &Proc, line: &str) {
    assert!(
        p.stdout().iter().any(|l| l == line),
        "{} did not print {line:?}\n{}",
        p.name,
        p.dump()
    );
}

/// `NOTIFY <n>` lines of an aiocoap observe run, or the lines of `coap-client -s -w`.
fn numbers(lines: &[String], prefix: &str) -> Vec<u64> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix(prefix))
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            l.trim()
                .parse()
                .unwrap_or_else(|_| panic!("not a number: {l:?}"))
        })
        .collect()
}

fn assert_increasing(values: &[u64], who: &str) {
    assert!(
        values.windows(2).all(|w| w[0] < w[1]),
        "{who}: values not strictly increasing: {values:?}"
    );
}

fn assert_same_bytes(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let first = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{what}: got {} bytes, want {}; first difference at {first:?}",
            got.len(),
            want.len()
        );
    }
}

/// A tap in front of the proxy saw one GET and its answer `answer_code` piggybacked: an ACK
/// with the request's MID and token, and no empty ACK.
fn assert_piggybacked(tap: &Proc, answer_code: &str) {
    let wire = wait_seen(tap, &format!("an ACK {answer_code}"), |s| {
        s.iter().any(|d| d.is(false, "ACK", answer_code))
    });
    let requests: Vec<&Seen> = wire.iter().filter(|d| d.is(true, "CON", "0.01")).collect();
    assert_eq!(requests.len(), 1, "one GET, no retransmission: {wire:#?}");
    let ack = wire
        .iter()
        .find(|d| d.is(false, "ACK", answer_code))
        .unwrap();
    assert_eq!(
        (ack.mid, &ack.token),
        (requests[0].mid, &requests[0].token),
        "the answer rides on the ACK of the request: {wire:#?}"
    );
    assert!(
        !wire.iter().any(|d| d.is(false, "ACK", "0.00")),
        "no empty ACK for a quick answer: {wire:#?}"
    );
}

/// How many datagrams of this direction, type and code a tap saw.
fn count_seen(wire: &[Seen], forward: bool, ty: &str, code: &str) -> usize {
    wire.iter().filter(|d| d.is(forward, ty, code)).count()
}
