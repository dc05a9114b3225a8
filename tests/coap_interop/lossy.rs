//! Case 6 of tests/coap_interop.rs: no duplicate execution on a lossy network.

use super::*;

const AIOCOAP_POSTS: usize = 50;
const LIBCOAP_POSTS: usize = 10;

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
    let mut net = LossyNetwork::start();
    let outcomes = post_through(&net);
    let (executed, answered) = check_executions(&net, &outcomes);
    check_wire(&mut net, &outcomes, &executed, answered);
}

/// The aiocoap server behind the proxy, with a lossy relay on each side of the proxy.
struct LossyNetwork {
    server: Proc,
    port: u16,
    _proxy: Proxy,
    /// The proxy's own address, which the libcoap clients use (they drop datagrams
    /// themselves).
    addr: SocketAddr,
    up_relay: Proc,
    client_relay: Proc,
    /// The client-side relay's address, which the aiocoap clients use.
    via: SocketAddr,
}

impl LossyNetwork {
    fn start() -> LossyNetwork {
        let (server, port) = aiocoap_server();
        let server_addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let (up_relay, up_via) = lossy_relay("lossy relay proxy->server", server_addr, 0.15, 7);
        let (proxy, addr) = super::peers::proxy(
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
        let (client_relay, via) = lossy_relay("lossy relay clients->proxy", addr, 0.15, 8);
        LossyNetwork {
            server,
            port,
            _proxy: proxy,
            addr,
            up_relay,
            client_relay,
            via,
        }
    }
}

/// Runs every client's POSTs to their end; what each POST's client saw, by tag.
fn post_through(net: &LossyNetwork) -> Vec<(String, Outcome)> {
    let (addr, via) = (net.addr, net.via);
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

    outcomes
}

/// Checks what the server executed against what the clients saw; returns the executions
/// (tag, value) and how many POSTs were answered.
fn check_executions(
    net: &LossyNetwork,
    outcomes: &[(String, Outcome)],
) -> (Vec<(String, u64)>, usize) {
    let (server, port) = (&net.server, net.port);
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
    for (tag, outcome) in outcomes {
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

    (executed, answered)
}

/// The network really was lossy, client retransmissions reached the proxy, and the proxy's
/// messages on both legs are one per exchange.
fn check_wire(
    net: &mut LossyNetwork,
    outcomes: &[(String, Outcome)],
    executed: &[(String, u64)],
    answered: usize,
) {
    let (up_relay, client_relay) = (&mut net.up_relay, &mut net.client_relay);
    let client_wire = seen(client_relay);
    let upstream_wire = seen(up_relay);
    let (lost_up, lost_down) = relay_drops(up_relay);
    let (lost_c2p, lost_p2c) = relay_drops(client_relay);
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
