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

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

mod peers;

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

// ------------------------------------------------------------------------------------------
// 1-3: plain GETs, piggybacked and separate.
// ------------------------------------------------------------------------------------------

/// aiocoap client -> proxy -> aiocoap server: the server's piggybacked 2.05 reaches the client
/// piggybacked on the ACK of its CON.
#[test]
fn aiocoap_get_is_piggybacked() {
    let (_server, port) = aiocoap_server();
    let upstream = format!("127.0.0.1:{port}");
    // A generous ack-delay: the claim is "a quick upstream answer is piggybacked", and a
    // loaded CI machine must not turn a quick answer into a slow one.
    let (_proxy, addr) = proxy(
        "127.0.0.1:0",
        &["--upstream", &upstream, "--ack-delay", "1s"],
    );
    let (tap, via) = tap("tap client->proxy", addr);

    let client = aiocoap_client(&["request", "get", &format!("coap://{via}/hello")], T10);
    assert_line(&client, "CODE 2.05 18");
    assert_line(&client, "TEXT hello from aiocoap");
    assert_piggybacked(&tap, "2.05");
}

/// aiocoap client -> proxy (--ack-delay 100ms) -> aiocoap server whose resource takes 1.5 s:
/// upstream, aiocoap sends an empty ACK and a separate CON 2.05, which the proxy ACKs; the
/// request goes upstream once; the client gets an empty ACK after ~100 ms and the answer as a
/// separate CON with its own token, which it ACKs.
#[test]
fn slow_resource_answer_arrives_separately() {
    let (_server, port) = aiocoap_server();
    let server_addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (up_tap, up_via) = tap("tap proxy->server", server_addr);
    let (_proxy, addr) = proxy(
        "127.0.0.1:0",
        &["--upstream", &up_via.to_string(), "--ack-delay", "100ms"],
    );
    let (client_tap, via) = tap("tap client->proxy", addr);

    let started = Instant::now();
    let client = aiocoap_client(&["request", "get", &format!("coap://{via}/slow")], T20);
    assert!(started.elapsed() >= Duration::from_millis(1400));
    assert_line(&client, "TEXT slow hello after 1.5 s");
    assert!(
        client.stdout_text().contains("CODE 2.05"),
        "{}",
        client.dump()
    );

    // Upstream leg.
    let up = wait_seen(&up_tap, "the proxy's ACK of the separate response", |s| {
        s.iter().any(|d| d.is(true, "ACK", "0.00"))
    });
    let forwarded: Vec<&Seen> = up.iter().filter(|d| d.is(true, "CON", "0.01")).collect();
    assert_eq!(forwarded.len(), 1, "forwarded exactly once: {up:#?}");
    let empty = up.iter().find(|d| d.is(false, "ACK", "0.00"));
    assert_eq!(
        empty.map(|d| d.mid),
        Some(forwarded[0].mid),
        "server's empty ACK: {up:#?}"
    );
    let separate = up
        .iter()
        .find(|d| d.is(false, "CON", "2.05"))
        .unwrap_or_else(|| panic!("no separate CON 2.05 from the server: {up:#?}"));
    assert_eq!(separate.token, forwarded[0].token);
    assert!(
        up.iter()
            .any(|d| d.is(true, "ACK", "0.00") && d.mid == separate.mid),
        "the proxy ACKs the separate response: {up:#?}"
    );

    // Client leg.
    let down = wait_seen(
        &client_tap,
        "the client's ACK of the separate response",
        |s| s.iter().any(|d| d.is(true, "ACK", "0.00")),
    );
    let request = down
        .iter()
        .find(|d| d.is(true, "CON", "0.01"))
        .expect("request");
    assert!(
        down.iter()
            .any(|d| d.is(false, "ACK", "0.00") && d.mid == request.mid),
        "empty ACK to the client's CON: {down:#?}"
    );
    assert!(
        !down.iter().any(|d| d.is(false, "ACK", "2.05")),
        "after an empty ACK the answer must not be piggybacked: {down:#?}"
    );
    let answer = down
        .iter()
        .find(|d| d.is(false, "CON", "2.05"))
        .unwrap_or_else(|| panic!("no separate CON 2.05 to the client: {down:#?}"));
    assert_eq!(
        answer.token, request.token,
        "the client's token is restored"
    );
    assert!(
        down.iter()
            .any(|d| d.is(true, "ACK", "0.00") && d.mid == answer.mid),
        "the client ACKs the separate response: {down:#?}"
    );
}

/// An elective, safe-to-forward option from the experimental range (RFC 7252 §12.2) that
/// the server ignores, padding a GET so that its answer (libcoap's 147-byte index) fits the
/// 3x an unproven client may be sent at once (`proxy/validation.rs`). Without it the answer
/// waits for the client to answer the proxy's ping, and libcoap 4.3.1's client at times
/// ignores a ping that comes right after its request: then the answer goes separately after
/// 1 s, as designed, and this test of the piggybacked path would see that instead.
const PADDING: &str = "65000,padding-padding-padding-padding-padding-padding";

/// coap-client-notls -> proxy -> coap-server-notls: GET `/` piggybacked; then the same over
/// IPv6 loopback on both legs.
#[test]
fn libcoap_get_is_piggybacked() {
    let (_server, port) = libcoap_server("127.0.0.1");
    let upstream = format!("127.0.0.1:{port}");
    let (_proxy, addr) = proxy(
        "127.0.0.1:0",
        &["--upstream", &upstream, "--ack-delay", "1s"],
    );
    let (tap, via) = tap("tap client->proxy", addr);
    let get = ["-B", "10", "-O", PADDING, &format!("coap://{via}/")];
    let client = coap_client_ok(&get, T20);
    assert!(
        client.stdout_text().contains(LIBCOAP_INDEX),
        "{}",
        client.dump()
    );
    assert_piggybacked(&tap, "2.05");

    let (_server6, port6) = libcoap_server("::1");
    let upstream6 = format!("[::1]:{port6}");
    let (_proxy6, addr6) = proxy("[::1]:0", &["--upstream", &upstream6]);
    assert!(addr6.is_ipv6());
    let client6 = coap_client_ok(&["-B", "10", &format!("coap://{addr6}/")], T20);
    assert!(
        client6.stdout_text().contains(LIBCOAP_INDEX),
        "{}",
        client6.dump()
    );
}

/// coap-client-notls -> proxy (--ack-delay 100ms) -> coap-server-notls `/async?1`, which libcoap
/// answers after 1 s with an empty ACK first and a separate response: the client gets `done`,
/// on the client leg as an empty ACK and then a separate CON with its token.
#[test]
fn libcoap_delayed_answer_arrives_separately() {
    let (_server, port) = libcoap_server("127.0.0.1");
    let upstream = format!("127.0.0.1:{port}");
    let (_proxy, addr) = proxy(
        "127.0.0.1:0",
        &["--upstream", &upstream, "--ack-delay", "100ms"],
    );
    let (tap, via) = tap("tap client->proxy", addr);
    let client = coap_client_ok(&["-B", "10", &format!("coap://{via}/async?1")], T20);
    assert!(client.stdout_text().contains("done"), "{}", client.dump());
    let wire = wait_seen(&tap, "the client's ACK of the separate response", |s| {
        s.iter().any(|d| d.is(true, "ACK", "0.00"))
    });
    let request = wire
        .iter()
        .find(|d| d.is(true, "CON", "0.01"))
        .expect("request");
    assert!(
        wire.iter()
            .any(|d| d.is(false, "ACK", "0.00") && d.mid == request.mid),
        "empty ACK to the client's CON: {wire:#?}"
    );
    let answer = wire
        .iter()
        .find(|d| d.is(false, "CON", "2.05"))
        .unwrap_or_else(|| panic!("no separate CON 2.05: {wire:#?}"));
    assert_eq!(answer.token, request.token);
    assert_eq!(
        count_seen(&wire, true, "CON", "0.01"),
        1,
        "no retransmission needed: {wire:#?}"
    );
}

// ------------------------------------------------------------------------------------------
// 4: block-wise, each client implementation against the other server implementation.
// ------------------------------------------------------------------------------------------

fn count_seen(wire: &[Seen], forward: bool, ty: &str, code: &str) -> usize {
    wire.iter().filter(|d| d.is(forward, ty, code)).count()
}

/// aiocoap client -> proxy -> coap-server-notls: a 4 KiB PUT to `/example_data` (Block1,
/// aiocoap's 1024-byte blocks) and a 4 KiB GET of it (Block2), byte for byte; each block is
/// its own exchange through the proxy.
#[test]
fn blockwise_4k_aiocoap_client_through_proxy_to_libcoap_server() {
    let dir = scratch("blockwise-aiocoap-client");
    let body = big_body();
    let body_path = dir.join("body.bin");
    let got_path = dir.join("got.bin");
    std::fs::write(&body_path, &body).unwrap();
    let (_server, port) = libcoap_server("127.0.0.1");
    let (_proxy, addr) = proxy("127.0.0.1:0", &["--upstream", &format!("127.0.0.1:{port}")]);
    let (tap, via) = tap("tap client->proxy", addr);
    let uri = format!("coap://{via}/example_data");

    let put = aiocoap_client(
        &["request", "put", &uri, "--in", body_path.to_str().unwrap()],
        T20,
    );
    // libcoap answers the last block with 2.01 Created (or 2.04 Changed once it exists).
    assert!(
        put.stdout()
            .iter()
            .any(|l| l.starts_with("CODE 2.01") || l.starts_with("CODE 2.04")),
        "{}",
        put.dump()
    );
    let get = aiocoap_client(
        &["request", "get", &uri, "--out", got_path.to_str().unwrap()],
        T20,
    );
    assert_line(&get, &format!("CODE 2.05 {BIG}"));
    assert_same_bytes(&std::fs::read(&got_path).unwrap(), &body, "GET after PUT");

    let wire = seen(&tap);
    assert!(
        count_seen(&wire, true, "CON", "0.03") >= 4,
        "PUT in >= 4 blocks: {wire:#?}"
    );
    assert!(
        count_seen(&wire, false, "ACK", "2.31") >= 3,
        "2.31 Continue relayed: {wire:#?}"
    );
    assert!(
        count_seen(&wire, true, "CON", "0.01") >= 4,
        "GET in >= 4 blocks: {wire:#?}"
    );
}

/// coap-client-notls (-b 256) -> proxy -> aiocoap server: a 4 KiB GET of `/big` (Block2) and
/// a 4 KiB PUT to `/upload` (Block1) read back with a GET, byte for byte.
#[test]
fn blockwise_4k_libcoap_client_through_proxy_to_aiocoap_server() {
    let dir = scratch("blockwise-libcoap-client");
    let body = big_body();
    let body_path = dir.join("body.bin");
    std::fs::write(&body_path, &body).unwrap();
    let (mut server, port) = aiocoap_server();
    let (_proxy, addr) = proxy("127.0.0.1:0", &["--upstream", &format!("127.0.0.1:{port}")]);
    let (tap, via) = tap("tap client->proxy", addr);

    let big_path = dir.join("big.bin");
    let big = big_path.to_str().unwrap();
    coap_client_ok(
        &[
            "-B",
            "15",
            "-b",
            "256",
            "-o",
            big,
            &format!("coap://{via}/big"),
        ],
        T20,
    );
    assert_same_bytes(&std::fs::read(&big_path).unwrap(), &body, "GET /big");
    let gets = count_seen(&seen(&tap), true, "CON", "0.01");
    assert!(gets >= 16, "16 blocks of 256 bytes, saw {gets} GETs");

    let upload = format!("coap://{via}/upload");
    let put = coap_client_ok(
        &[
            "-B",
            "15",
            "-b",
            "256",
            "-m",
            "put",
            "-f",
            body_path.to_str().unwrap(),
            &upload,
        ],
        T20,
    );
    assert!(
        put.stdout_text().contains(&format!("stored {BIG}")),
        "{}",
        put.dump()
    );
    assert_eq!(server.wait_stdout("UPLOAD ", T10), BIG.to_string());
    let back_path = dir.join("back.bin");
    coap_client_ok(
        &[
            "-B",
            "15",
            "-b",
            "256",
            "-o",
            back_path.to_str().unwrap(),
            &upload,
        ],
        T20,
    );
    assert_same_bytes(&std::fs::read(&back_path).unwrap(), &body, "GET after PUT");
    let wire = seen(&tap);
    assert!(
        count_seen(&wire, true, "CON", "0.03") >= 16,
        "PUT in 16 blocks: {wire:#?}"
    );
    assert!(
        count_seen(&wire, false, "ACK", "2.31") >= 15,
        "2.31 Continue relayed: {wire:#?}"
    );
}

// ------------------------------------------------------------------------------------------
// 5: Observe.
// ------------------------------------------------------------------------------------------

/// aiocoap client observes `/clock` (changes every 200 ms) on an aiocoap server through the
/// proxy: >= 3 notifications after the registration answer, increasing; after the client
/// cancels (aiocoap answers the next notification with RST) the proxy's RST of the next
/// upstream notification ends the server's observation. Then `coap-client-notls -s 2`
/// observes the same resource through the proxy.
#[test]
fn observe_relays_notifications_until_cancelled() {
    let (mut server, port) = aiocoap_server();
    let (_proxy, addr) = proxy("127.0.0.1:0", &["--upstream", &format!("127.0.0.1:{port}")]);
    let uri = format!("coap://{addr}/clock");

    let client = aiocoap_client(&["observe", &uri, "--count", "5", "--linger", "1"], T20);
    let values = numbers(&client.stdout(), "NOTIFY ");
    assert!(
        values.len() >= 5,
        "registration + 4 notifications: {values:?}"
    );
    assert_increasing(&values, "aiocoap observe");
    assert_line(&client, "CANCELLED");
    server.wait_stdout_count("OBSERVERS 1", 1, T10);
    server.wait_stdout_count("OBSERVERS 0", 1, T10);

    let lc = coap_client_ok(&["-B", "10", "-s", "2", "-w", &uri], T20);
    let values = numbers(&lc.stdout(), "");
    assert!(values.len() >= 4, "coap-client -s 2 saw {values:?}");
    assert_increasing(&values, "coap-client observe");
    server.wait_stdout_count("OBSERVERS 1", 2, T10);
    server.wait_stdout_count("OBSERVERS 0", 2, T10);
}

// ------------------------------------------------------------------------------------------
// 6: no duplicate execution on a lossy network.
// ------------------------------------------------------------------------------------------

/// What one POST's client saw.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// 2.04 with the counter value the server returned.
    Answered(u64),
    /// Anything else: a 5.04 from the proxy, the client's own timeout, ...
    Failed(String),
}

/// `STATS ... dropped_to_target=<n> ... dropped_to_source=<n>` of a terminated relay.
fn relay_drops(relay: &mut Proc) -> (u64, u64) {
    relay.terminate(T10);
    let stats = relay.wait_stdout("STATS ", T10);
    let field = |name: &str| -> u64 {
        stats
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {stats:?}"))
    };
    (field("dropped_to_target"), field("dropped_to_source"))
}

/// An aiocoap server's `/counter` (POST increments it and returns the new value) behind the
/// proxy, on a network that drops datagrams:
/// - 50 aiocoap POSTs from 10 client sockets through a seeded relay dropping 15 % each way
///   between clients and proxy, and another between proxy and server (each relay drops the
///   same bytes at most twice, so every exchange can get through). aiocoap retransmits after
///   0.5-0.75 s, so client retransmissions arrive while the proxy is still retrying upstream
///   (its POST policy here: 500 ms, up to 4 retries, 20 s total). Every 10th POST makes the
///   server think 0.3 s, so it is answered separately on both legs (empty ACK, then CON);
/// - at the same time, 10 `coap-client-notls -l 20%` POSTs straight to the proxy (libcoap drops
///   20 % of its own datagrams, requests and ACKs alike).
///
/// Every POST carries a unique tag; the server logs each execution. Checked: no tag executed
/// twice; the counter equals the number of executions; every answered POST's value is the
/// value the server produced for that tag (so no value is repeated to two POSTs), and every
/// executed value was answered except for POSTs whose client saw a failure (so none is
/// skipped through the proxy's fault); on the wire, the proxy answers each client request
/// with one message (one MID per client and token, retransmitted as is) and sends each
/// upstream request with one MID and token (retransmitted as is).
#[test]
fn lossy_network_posts_execute_exactly_once() {
    const AIOCOAP_POSTS: usize = 50;
    const LIBCOAP_POSTS: usize = 10;
    let (server, port) = aiocoap_server();
    let server_addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (mut up_relay, up_via) = lossy_relay("lossy relay proxy->server", server_addr, 0.15, 7);
    let (_proxy, addr) = proxy(
        "127.0.0.1:0",
        &[
            "--upstream",
            &up_via.to_string(),
            "--non-idempotent-timeout",
            "500ms",
            "--non-idempotent-max-retries",
            "4",
            "--non-idempotent-total-timeout",
            "20s",
            "--seed",
            "42",
        ],
    );
    let (mut client_relay, via) = lossy_relay("lossy relay clients->proxy", addr, 0.15, 8);

    let counter = format!("coap://{addr}/counter");
    let mut libcoap: Vec<(String, Proc)> = (0..LIBCOAP_POSTS)
        .map(|i| {
            let tag = format!("lc-{i}");
            let p = coap_client(&[
                "-B", "30", "-v", "4", "-l", "20%", "-m", "post", "-e", &tag, &counter,
            ]);
            (tag, p)
        })
        .collect();
    let aiocoap = aiocoap_client(
        &[
            "post-many",
            &format!("coap://{via}/counter"),
            "--n",
            &AIOCOAP_POSTS.to_string(),
            "--tag",
            "ai",
            "--clients",
            "10",
            "--separate-every",
            "10",
            "--ack-timeout",
            "0.5",
            "--max-retransmit",
            "5",
            "--request-timeout",
            "40",
        ],
        Duration::from_secs(60),
    );

    let mut outcomes: Vec<(String, Outcome)> = Vec::new();
    for line in aiocoap.stdout() {
        let w: Vec<&str> = line.splitn(4, ' ').collect();
        match w.as_slice() {
            ["ANSWER", tag, "2.04", value] => {
                outcomes.push((tag.to_string(), Outcome::Answered(value.parse().unwrap())))
            }
            ["ANSWER", tag, code, rest @ ..] => {
                outcomes.push((tag.to_string(), Outcome::Failed(format!("{code} {rest:?}"))))
            }
            ["FAIL", tag, rest @ ..] => {
                outcomes.push((tag.to_string(), Outcome::Failed(rest.join(" "))))
            }
            _ => {}
        }
    }
    assert_line(&aiocoap, "DONE");
    for (tag, p) in &mut libcoap {
        // coap-client exits 0 whatever the response code; it prints a 2.04's payload on
        // stdout and an error code on stderr (-v 4).
        let status = p.wait_exit(Duration::from_secs(40));
        let out = p.stdout_text();
        let outcome = match (status, out.trim().parse::<u64>()) {
            (Some(s), Ok(v)) if s.success() => Outcome::Answered(v),
            _ => Outcome::Failed(format!("{status:?} {out:?} {:?}", p.stderr())),
        };
        outcomes.push((tag.clone(), outcome));
    }
    assert_eq!(
        outcomes.len(),
        AIOCOAP_POSTS + LIBCOAP_POSTS,
        "every POST has an outcome: {outcomes:#?}"
    );

    // What the server executed, in order.
    let executed: Vec<(String, u64)> = server
        .stdout()
        .iter()
        .filter_map(|l| {
            let mut w = l.strip_prefix("EXEC ")?.split(' ');
            Some((w.next()?.to_string(), w.next()?.parse().ok()?))
        })
        .collect();
    let mut tags: Vec<&str> = executed.iter().map(|(t, _)| t.as_str()).collect();
    tags.sort_unstable();
    let before = tags.len();
    tags.dedup();
    assert_eq!(
        tags.len(),
        before,
        "a POST was executed twice: {executed:?}"
    );
    assert!(
        executed
            .iter()
            .enumerate()
            .all(|(i, (_, v))| *v == i as u64 + 1),
        "server values 1..=n in order: {executed:?}"
    );
    let direct = aiocoap_client(
        &[
            "request",
            "get",
            &format!("coap://127.0.0.1:{port}/counter"),
        ],
        T10,
    );
    assert_line(&direct, &format!("TEXT {}", executed.len()));

    let answered = outcomes
        .iter()
        .filter(|(_, o)| matches!(o, Outcome::Answered(_)))
        .count();
    for (tag, outcome) in &outcomes {
        let exec = executed.iter().find(|(t, _)| t == tag).map(|(_, v)| *v);
        match outcome {
            Outcome::Answered(v) => assert_eq!(
                exec,
                Some(*v),
                "{tag} was answered {v}, but the server executed it as {exec:?}"
            ),
            Outcome::Failed(_) => {}
        }
    }
    for (tag, v) in &executed {
        let outcome = outcomes.iter().find(|(t, _)| t == tag).map(|(_, o)| o);
        assert!(
            matches!(outcome, Some(Outcome::Answered(a)) if a == v)
                || matches!(outcome, Some(Outcome::Failed(_))),
            "value {v} (executed for {tag}) never reached its client, which saw {outcome:?}"
        );
    }
    // A proxy that answered nothing would pass the checks above: most POSTs must get through.
    assert!(
        answered * 10 >= outcomes.len() * 8,
        "only {answered} of {} POSTs answered: {outcomes:#?}",
        outcomes.len()
    );

    // The network really was lossy, and client retransmissions really reached the proxy.
    let client_wire = seen(&client_relay);
    let upstream_wire = seen(&up_relay);
    let (lost_up, lost_down) = relay_drops(&mut up_relay);
    let (lost_c2p, lost_p2c) = relay_drops(&mut client_relay);
    assert!(
        lost_up > 0 && lost_down > 0 && lost_c2p > 0 && lost_p2c > 0,
        "drops: proxy->server {lost_up}, server->proxy {lost_down}, clients->proxy {lost_c2p}, \
         proxy->clients {lost_p2c}"
    );
    let delivered =
        |wire: &[Seen], forward: bool, ty: &str, code: &str| -> Vec<(u16, String, u16)> {
            wire.iter()
                .filter(|d| d.is(forward, ty, code) && !d.dropped)
                .map(|d| (d.peer, d.token.clone(), d.mid))
                .collect()
        };
    let requests = delivered(&client_wire, true, "CON", "0.02");
    let distinct = |mut v: Vec<(u16, String, u16)>| {
        v.sort_unstable();
        v.dedup();
        v
    };
    let client_requests = distinct(requests.clone());
    assert!(
        requests.len() > client_requests.len(),
        "some client retransmission reached the proxy"
    );
    // One separate answer (one MID) per client request, however often it is retransmitted.
    let separate = distinct(delivered(&client_wire, false, "CON", "2.04"));
    let mut per_request: Vec<(u16, String)> =
        separate.iter().map(|(p, t, _)| (*p, t.clone())).collect();
    per_request.dedup();
    assert_eq!(
        per_request.len(),
        separate.len(),
        "a client request was answered by two different messages: {separate:?}"
    );
    assert!(!separate.is_empty(), "separate answers were exercised");
    // Upstream: one MID per token (retransmissions reuse it), one token per MID, and no more
    // upstream requests than client requests.
    let upstream = distinct(delivered(&upstream_wire, true, "CON", "0.02"));
    let mut tokens: Vec<&String> = upstream.iter().map(|(_, t, _)| t).collect();
    tokens.dedup();
    let mut mids: Vec<u16> = upstream.iter().map(|(_, _, m)| *m).collect();
    mids.sort_unstable();
    mids.dedup();
    assert_eq!(
        tokens.len(),
        upstream.len(),
        "an upstream token with two MIDs: {upstream:?}"
    );
    assert_eq!(
        mids.len(),
        upstream.len(),
        "an upstream MID with two tokens: {upstream:?}"
    );
    assert!(
        upstream.len() <= client_requests.len() + LIBCOAP_POSTS,
        "{} upstream requests for {} client requests",
        upstream.len(),
        client_requests.len() + LIBCOAP_POSTS
    );
    eprintln!(
        "lossy: {answered}/{} answered, {} executed; drops {lost_up}/{lost_down} upstream, \
         {lost_c2p}/{lost_p2c} client side; {} client retransmissions delivered, {} separate \
         answers",
        outcomes.len(),
        executed.len(),
        requests.len() - client_requests.len(),
        separate.len()
    );
}

// ------------------------------------------------------------------------------------------
// 7: forward proxy with an allowlist.
// ------------------------------------------------------------------------------------------

/// `--forward --allow 127.0.0.1:<libcoap server>`: coap-client-notls `-P` (Proxy-Uri) and
/// aiocoap's forward-proxy client (Proxy-Scheme + Uri-Host + Uri-Port) both reach the allowed
/// libcoap server; a real aiocoap server that is not in the allowlist gets 4.03 for both.
///
/// libcoap 4.3.1 needs the scheme in `-P`: `-P coap://127.0.0.1:<port>`; a bare
/// `-P 127.0.0.1:<port>` is refused with "invalid CoAP Proxy definition".
#[test]
fn forward_proxy_serves_allowed_targets_and_refuses_others_with_4_03() {
    let (_allowed, allowed_port) = libcoap_server("127.0.0.1");
    let (_other, other_port) = aiocoap_server();
    let allow = format!("127.0.0.1:{allowed_port}");
    let (_proxy, addr) = proxy("127.0.0.1:0", &["--forward", "--allow", &allow]);
    let via = format!("coap://{addr}");
    let allowed_uri = format!("coap://127.0.0.1:{allowed_port}/");
    let other_uri = format!("coap://127.0.0.1:{other_port}/hello");

    let ok = coap_client_ok(&["-B", "10", "-P", &via, &allowed_uri], T20);
    assert!(ok.stdout_text().contains(LIBCOAP_INDEX), "{}", ok.dump());
    let denied = coap_client_ok(&["-B", "10", "-v", "4", "-P", &via, &other_uri], T20);
    let said = format!("{}\n{}", denied.stdout_text(), denied.stderr().join("\n"));
    assert!(said.contains("4.03"), "expected 4.03:\n{}", denied.dump());
    assert!(!said.contains("hello from aiocoap"), "{}", denied.dump());

    let ok = aiocoap_client(&["request", "get", &allowed_uri, "--proxy", &via], T10);
    assert!(ok.stdout_text().contains("CODE 2.05"), "{}", ok.dump());
    assert!(ok.stdout_text().contains(LIBCOAP_INDEX), "{}", ok.dump());
    let denied = aiocoap_client(&["request", "get", &other_uri, "--proxy", &via], T10);
    assert!(
        denied.stdout_text().contains("CODE 4.03"),
        "{}",
        denied.dump()
    );
}

/// aiocoap client -> proxy with `--cache-size 1MiB` -> aiocoap's /tagged (ETag, Max-Age 2 s),
/// counted at the upstream (RFC 7252 §5.6): a second GET within Max-Age never reaches it;
/// after expiry it sees one GET carrying the stored ETag and answers 2.03, and the client
/// still gets the body; a PUT makes the next GET go upstream, and that GET gets the new value.
#[test]
fn the_cache_serves_within_max_age_revalidates_with_the_etag_and_a_put_invalidates() {
    let (mut server, port) = aiocoap_server_with(&["--tagged-max-age", "2"]);
    let upstream = format!("127.0.0.1:{port}");
    let (_proxy, addr) = proxy(
        "127.0.0.1:0",
        &["--upstream", &upstream, "--cache-size", "1MiB"],
    );
    let uri = format!("coap://{addr}/tagged");
    let get = |body: &str| {
        let client = aiocoap_client(&["request", "get", &uri], T10);
        assert_line(&client, &format!("TEXT {body}"));
    };
    let upstream_gets = |server: &Proc| {
        let lines = server.stdout();
        let gets = lines.iter().filter_map(|l| l.strip_prefix("TAGGED GET "));
        gets.map(str::to_owned).collect::<Vec<_>>()
    };
    get("v1");
    get("v1");
    assert_eq!(upstream_gets(&server), ["-"], "the second GET was a hit");
    std::thread::sleep(Duration::from_millis(2200));
    get("v1");
    server.wait_stdout_count("TAGGED VALID", 1, T10);
    let tag1 = b"tag1"
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>();
    assert_eq!(
        upstream_gets(&server),
        ["-".to_owned(), tag1],
        "revalidated with the ETag"
    );
    get("v1");
    assert_eq!(
        upstream_gets(&server).len(),
        2,
        "fresh again after the 2.03"
    );
    let body = scratch("cache_put").join("v2");
    std::fs::write(&body, b"v2").unwrap();
    let put = aiocoap_client(
        &["request", "put", &uri, "--in", body.to_str().unwrap()],
        T10,
    );
    assert_line(&put, "CODE 2.04 0");
    get("v2");
    assert_eq!(
        upstream_gets(&server).len(),
        3,
        "the PUT made the entry stale"
    );
}

/// libcoap client (256-byte blocks) -> proxy with `--cache-size 1MiB` -> tap -> aiocoap's
/// /big (4 KiB, Block2, no ETag): the first block-wise GET fills the cache block by block
/// (RFC 7959 §2.10); the second gets the same bytes and sends nothing upstream.
#[test]
fn a_blockwise_get_of_a_cached_resource_needs_no_upstream_traffic() {
    let dir = scratch("blockwise-cached");
    let (_server, port) = aiocoap_server();
    let server: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (up_tap, up_via) = tap("tap proxy->server", server);
    let upstream = up_via.to_string();
    let (_proxy, addr) = proxy(
        "127.0.0.1:0",
        &["--upstream", &upstream, "--cache-size", "1MiB"],
    );
    let fetch = |name: &str| {
        let out = dir.join(name);
        let path = out.to_str().unwrap();
        let uri = format!("coap://{addr}/big");
        coap_client_ok(&["-B", "15", "-b", "256", "-o", path, &uri], T20);
        assert_same_bytes(&std::fs::read(&out).unwrap(), &big_body(), name);
    };
    fetch("first.bin");
    let upstream_gets = || count_seen(&seen(&up_tap), true, "CON", "0.01");
    let filled = wait_seen(&up_tap, "16 block GETs", |s| {
        count_seen(s, true, "CON", "0.01") >= 16
    });
    fetch("second.bin");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        upstream_gets(),
        count_seen(&filled, true, "CON", "0.01"),
        "the second transfer came from the cache"
    );
}

/// Three aiocoap observers of /clock through the proxy with `--cache-size 1MiB` (RFC 7641 §5):
/// the second and third join the first's upstream registration, so aiocoap never counts more
/// than one observer; each gets increasing notifications with its own token, and when all
/// three have cancelled the upstream registration ends (OBSERVERS 0).
#[test]
fn three_observers_through_the_cache_make_one_upstream_registration() {
    let (mut server, port) = aiocoap_server();
    let upstream = format!("127.0.0.1:{port}");
    let (_proxy, addr) = proxy(
        "127.0.0.1:0",
        &["--upstream", &upstream, "--cache-size", "1MiB"],
    );
    let uri = format!("coap://{addr}/clock");
    let observe = |n: usize| {
        Proc::spawn(
            &format!("aiocoap observer {n}"),
            Command::new(&peers().python)
                .arg(script("aiocoap_client.py"))
                .args([
                    "--timeout",
                    "15",
                    "observe",
                    &uri,
                    "--count",
                    "6",
                    "--linger",
                    "1",
                ]),
        )
    };
    let mut first = observe(1);
    server.wait_stdout_count("OBSERVERS 1", 1, T10);
    first.wait_stdout("NOTIFY ", T10);
    let mut others = [observe(2), observe(3)];
    for client in others.iter_mut().chain([&mut first]) {
        client.finish_ok(T20);
        let values = numbers(&client.stdout(), "NOTIFY ");
        assert!(values.len() >= 6, "{}: {values:?}", client.name);
        assert_increasing(&values, &client.name);
        assert_line(client, "CANCELLED");
    }
    server.wait_stdout_count("OBSERVERS 0", 1, T10);
    let counts: Vec<String> = server
        .stdout()
        .into_iter()
        .filter(|l| l.starts_with("OBSERVERS"))
        .collect();
    assert_eq!(
        counts,
        ["OBSERVERS 1", "OBSERVERS 0"],
        "one upstream registration"
    );
}

/// libcoap client -> proxy with `--cache-size 1MiB` -> tap -> coap-server-notls, counted on
/// the upstream side: `/` (Max-Age from libcoap) asked twice reaches the server once; a PUT to
/// `/example_data` makes the next GET of it go upstream and get the new body, and the GET after
/// that is a hit again.
#[test]
fn the_cache_in_front_of_libcoap_serves_hits_and_a_put_invalidates() {
    let (_server, port) = libcoap_server("127.0.0.1");
    let server: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (up_tap, up_via) = tap("tap proxy->server", server);
    let upstream = up_via.to_string();
    let (_proxy, addr) = proxy(
        "127.0.0.1:0",
        &["--upstream", &upstream, "--cache-size", "1MiB"],
    );
    let get = |path: &str| coap_client_ok(&["-B", "5", &format!("coap://{addr}{path}")], T10);
    let put = |body: &str| {
        let uri = format!("coap://{addr}/example_data");
        coap_client_ok(&["-B", "5", "-m", "put", "-e", body, &uri], T10);
    };
    let gets_upstream = |n: usize| {
        wait_seen(&up_tap, &format!("{n} GETs"), |s| {
            count_seen(s, true, "CON", "0.01") >= n
        });
        std::thread::sleep(Duration::from_millis(200));
        count_seen(&seen(&up_tap), true, "CON", "0.01")
    };
    assert!(get("/").stdout_text().contains(LIBCOAP_INDEX));
    assert!(get("/").stdout_text().contains(LIBCOAP_INDEX));
    assert_eq!(gets_upstream(1), 1, "the second GET of / was a hit");
    put("first");
    assert!(get("/example_data").stdout_text().contains("first"));
    assert!(get("/example_data").stdout_text().contains("first"));
    assert_eq!(
        gets_upstream(2),
        2,
        "the second GET of /example_data was a hit"
    );
    put("second");
    assert!(get("/example_data").stdout_text().contains("second"));
    assert_eq!(gets_upstream(3), 3, "the PUT made the entry stale");
}
