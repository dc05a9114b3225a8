//! OSCORE (RFC 8613) end to end through the real `backoffd proxy`, between a real OSCORE stack
//! on both sides: the proxy holds no keys, forwards the OSCORE option (number 9: critical but
//! safe-to-forward, so a proxy must pass it, RFC 7252 §5.7.1) and the encrypted payload both
//! ways, and the endpoints prove by unprotecting every message that nothing was changed.
//!
//! Who plays which side:
//!
//! | test                             | client         | proxy                      | server  |
//! |----------------------------------|----------------|----------------------------|---------|
//! | oscore_through_the_reverse_proxy | aiocoap OSCORE | `--upstream SERVER`        | aiocoap |
//! | oscore_through_the_forward_proxy | aiocoap OSCORE | `--forward --allow SERVER` | aiocoap |
//!
//! The server is aiocoap.oscore_sitewrapper.OscoreSiteWrapper around a resource site.
//!
//! The client is tests/interop/oscore_client.py, the server tests/interop/oscore_server.py,
//! both aiocoap 0.4.17 with its `oscore` extra, installed by tests/interop/setup.sh like the
//! other interop peers (never skipped: if it cannot install, the tests fail). Both load
//! RFC 8613 Appendix C.1.1's test context (static test keys) into a fresh directory per run.
//! Each test runs four checks in one client run: a GET of a small resource, a 1500-byte POST
//! echoed byte for byte (inner Block1 and Block2), a 4096-byte GET (inner Block2; the client's
//! sha256 must equal the server's), and an Observe registration with 3 notifications. The
//! proxy runs at its defaults apart from the addresses (`--listen`, `--upstream` or
//! `--forward --allow`, `--metrics`); its metrics must show every request forwarded, every
//! answer relayed from the server and none made by the proxy (no 4.02, no 5.02, ...).
//!
//! Forward mode: aiocoap 0.4.17's OSCORE protection keeps only Uri-Host on the outer message;
//! the client puts Proxy-Scheme and Uri-Port back there (RFC 8613 §4.1.3.3, class U), see
//! `ProxyClassUContext` in oscore_client.py.
//!
//! libcoap is not a second client stack here: Debian's libcoap3-bin is 4.3.1, built without
//! OSCORE (libcoap's OSCORE support and coap-client's `-E oscore_conf_file` came in a later
//! release). The usage lines of `coap-client-notls -h`, `coap-client-gnutls -h` and
//! `coap-client-openssl -h` (all "v4.3.1", "Build: 4.3.1") list
//! `[-a addr] [-b [num,]size] [-e text] [-f file] [-l loss] [-m method] [-o file] [-p port]
//! [-r] [-s duration] [-t type] [-v num] [-w] [-A type] [-B seconds] [G count] [-H hoplimit]
//! [-K interval] [-N] [-O num,text] [-P scheme://address[:port]] [-T token] [-U] [-X size]`
//! and no `-E`, and none of libcoap-3-{notls,gnutls,openssl}.so.3.0.0 contains the string
//! "oscore".
//!
//! Every peer and the proxy bind 127.0.0.1; every child runs in its own process group, which
//! its guard kills on drop; every wait is bounded (a test takes about 2 s).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

mod common;
mod peers;

use common::exposition::{scrape, Exposition};
use peers::*;

/// The whole client run: four checks, each a few round trips on loopback.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(20);
/// The POST body: longer than one 1024-byte block, so it goes in two (inner Block1), and its
/// echo comes back in two (inner Block2).
const POST_SIZE: usize = 1500;
/// Notifications after the registration's own answer.
const NOTIFICATIONS: usize = 3;
/// Client requests at least: /hello 1, /echo 2 blocks, /big 4 blocks, /clock 1.
const MIN_REQUESTS: f64 = 8.0;

/// Codes the proxy makes itself; with both endpoints up and the OSCORE option forwarded, it
/// must make none of them.
const OWN_CODES: [&str; 10] = [
    "4.00", "4.02", "4.03", "4.04", "4.13", "5.02", "5.03", "5.04", "5.05", "5.08",
];

/// Reverse mode: client -> `backoffd proxy --upstream <server>` -> server. The client
/// addresses the proxy as if it were the origin server.
#[test]
fn oscore_through_the_reverse_proxy() {
    let dir = scratch("oscore-reverse");
    let (server, big) = oscore_server(&dir);
    let upstream = format!("127.0.0.1:{}", server.1);
    let (_proxy, addr, metrics) = proxy_with_metrics(&["--upstream", &upstream]);
    let client = oscore_client(&dir, &format!("coap://{addr}"), None);
    check("reverse", &client, &server.0, &big, &scrape(metrics));
    drop((server, client));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Forward mode: client -> `backoffd proxy --forward --allow <server>` -> server. The client
/// names the server in Proxy-Scheme, Uri-Host and Uri-Port on the outer message; aiocoap alone
/// would send Uri-Host only (see `ProxyClassUContext` in oscore_client.py), a request for the
/// proxy itself, which it answers unprotected (aiocoap then fails with NotAProtectedMessage).
#[test]
fn oscore_through_the_forward_proxy() {
    let dir = scratch("oscore-forward");
    let (server, big) = oscore_server(&dir);
    let origin = format!("127.0.0.1:{}", server.1);
    let (_proxy, addr, metrics) = proxy_with_metrics(&["--forward", "--allow", &origin]);
    let via = format!("coap://{addr}");
    let client = oscore_client(&dir, &format!("coap://{origin}"), Some(&via));
    check("forward", &client, &server.0, &big, &scrape(metrics));
    drop((server, client));
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------------------------------------
// Peers and the proxy.
// ------------------------------------------------------------------------------------------

/// What the server holds at /big: its length and sha256, as it printed them.
struct Big {
    len: usize,
    sha256: String,
}

/// tests/interop/oscore_server.py on 127.0.0.1 and a kernel-chosen port, its security context
/// in `<dir>/server`; returns it, its port, and what it holds at /big.
fn oscore_server(dir: &Path) -> ((Proc, u16), Big) {
    let context = dir.join("server");
    let mut p = Proc::spawn(
        "aiocoap OSCORE server",
        Command::new(&peers().python)
            .arg(script("oscore_server.py"))
            .arg("--context-dir")
            .arg(&context),
    );
    let port = p.wait_stdout("READY ", START).parse().unwrap();
    let big = p.wait_stdout("BIG ", START);
    let (len, sha256) = big.split_once(' ').expect("BIG <len> <sha256>");
    let big = Big {
        len: len.parse().unwrap(),
        sha256: sha256.to_string(),
    };
    ((p, port), big)
}

/// `backoffd proxy --listen 127.0.0.1:0 --metrics 127.0.0.1:0 <args>`, otherwise at its
/// defaults; returns it, its CoAP address and its metrics address.
fn proxy_with_metrics(args: &[&str]) -> (Proc, SocketAddr, SocketAddr) {
    let mut all = vec!["--metrics", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let (p, addr) = proxy("127.0.0.1:0", &all);
    let metrics = p.metrics.expect("a metrics listener");
    (p.proc, addr, metrics)
}

/// Runs tests/interop/oscore_client.py (context in `<dir>/client`) against `origin`, through
/// the forward proxy `proxy` if given; it must finish within [`CLIENT_TIMEOUT`], but its exit
/// status is judged by [`check`], which says which check failed.
fn oscore_client(dir: &Path, origin: &str, proxy: Option<&str>) -> Proc {
    let mut cmd = Command::new(&peers().python);
    cmd.arg(script("oscore_client.py"))
        .arg("--context-dir")
        .arg(dir.join("client"))
        .args(["--origin", origin])
        .args(["--post-size", &POST_SIZE.to_string()])
        .args(["--notifications", &NOTIFICATIONS.to_string()])
        .args(["--timeout", &(CLIENT_TIMEOUT.as_secs() - 2).to_string()]);
    if let Some(proxy) = proxy {
        cmd.args(["--proxy", proxy]);
    }
    let mut p = Proc::spawn(&format!("aiocoap OSCORE client via {origin}"), &mut cmd);
    if p.wait_exit(CLIENT_TIMEOUT).is_none() {
        panic!(
            "the OSCORE client did not finish within {CLIENT_TIMEOUT:?}\n{}",
            p.dump()
        );
    }
    p
}

// ------------------------------------------------------------------------------------------
// Checks.
// ------------------------------------------------------------------------------------------

/// Writes a line to this process's stderr itself, past the test harness's capture of
/// `println!`/`eprintln!`, so that the figures show in the CI log of a passing run too.
macro_rules! report {
    ($($arg:tt)*) => {{
        use std::io::Write;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

/// The rest of the client's line starting with `prefix` (panics with its output if none).
fn line<'a>(client: &'a [String], p: &Proc, prefix: &str) -> &'a str {
    client
        .iter()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("the client printed no {prefix:?} line\n{}", p.dump()))
}

/// The value of `name=` in a line of `key=value` words.
fn field<'a>(line: &'a str, name: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {name}= in {line:?}"))
}

/// Prints the figures, then asserts the client's four checks, what the server saw, and the
/// proxy's counters.
fn check(mode: &str, client: &Proc, server: &Proc, big: &Big, m: &Exposition) {
    let out = client.stdout();
    let lines = ClientLines::of(&out, client);
    let proxy = ProxyCounters::of(m);
    report_figures(mode, &lines, big, &proxy);
    check_client(client, &lines, big);
    check_server(server);
    check_proxy(&proxy);
}

/// The client's result lines, each without its prefix, and the values it was notified of.
struct ClientLines<'a> {
    hello: &'a str,
    echo: &'a str,
    got_big: &'a str,
    observe: &'a str,
    done: &'a str,
    notify: Vec<u64>,
}

impl<'a> ClientLines<'a> {
    fn of(out: &'a [String], client: &Proc) -> ClientLines<'a> {
        ClientLines {
            hello: line(out, client, "GET /hello "),
            echo: line(out, client, "POST /echo "),
            got_big: line(out, client, "GET /big "),
            observe: line(out, client, "OBSERVE "),
            done: line(out, client, "DONE "),
            notify: out
                .iter()
                .filter_map(|l| l.strip_prefix("NOTIFY "))
                .map(|v| v.trim().parse().expect("a number"))
                .collect(),
        }
    }
}

/// The proxy's counters the checks look at.
struct ProxyCounters {
    requests: f64,
    forwarded: f64,
    relayed: f64,
    notifications: f64,
    /// The proxy's own answers, by code, if any.
    own: Vec<(&'static str, f64)>,
}

impl ProxyCounters {
    fn of(m: &Exposition) -> ProxyCounters {
        let counter = |name: &str| m.get(&format!("backoffd_coap_{name}"));
        let (requests, forwarded) = (counter("requests_total"), counter("forwarded_total"));
        let relayed = counter("answers_total{code=\"2.xx\"}");
        let notifications = counter("notifications_relayed_total");
        let own: Vec<(&str, f64)> = OWN_CODES
            .iter()
            .map(|c| (*c, counter(&format!("answers_total{{code=\"{c}\"}}"))))
            .filter(|(_, n)| *n > 0.0)
            .collect();
        ProxyCounters {
            requests,
            forwarded,
            relayed,
            notifications,
            own,
        }
    }
}

/// Prints what the client got and the proxy counted.
fn report_figures(mode: &str, lines: &ClientLines, big: &Big, proxy: &ProxyCounters) {
    let ClientLines {
        hello,
        echo,
        got_big,
        observe,
        done,
        notify,
    } = lines;
    let ProxyCounters {
        requests,
        forwarded,
        relayed,
        notifications,
        own,
    } = proxy;
    report!("OSCORE {mode}: requests ok {}", field(done, "ok"));
    report!("OSCORE {mode}: GET /hello {hello}");
    report!("OSCORE {mode}: POST /echo {echo}");
    report!(
        "OSCORE {mode}: GET /big {got_big} (server holds {} bytes sha256={})",
        big.len,
        big.sha256
    );
    report!("OSCORE {mode}: Observe {observe}, values {notify:?}");
    report!(
        "OSCORE {mode}: proxy metrics: requests {requests}, forwarded {forwarded}, 2.xx relayed \
         {relayed}, notifications relayed {notifications}, own answers {own:?}"
    );
}

/// The client's four checks passed, each answer protected and as expected.
fn check_client(client: &Proc, lines: &ClientLines, big: &Big) {
    let ClientLines {
        hello,
        echo,
        got_big,
        observe,
        done,
        notify,
    } = lines;
    let dump = client.dump();
    assert_eq!(field(done, "ok"), "4", "all four checks passed\n{dump}");
    assert!(client.status.is_some_and(|s| s.success()), "{dump}");
    // GET of a small resource.
    assert!(
        hello.starts_with("2.05 17 protected=yes hello over OSCORE"),
        "{dump}"
    );
    // POST echoed byte for byte (the client compared them: same=yes).
    assert_eq!(field(echo, "sent"), POST_SIZE.to_string(), "{dump}");
    assert_eq!(field(echo, "got"), POST_SIZE.to_string(), "{dump}");
    assert_eq!(
        (field(echo, "same"), field(echo, "protected")),
        ("yes", "yes"),
        "{dump}"
    );
    assert!(echo.starts_with("2.04 "), "{dump}");
    // The big body: what the client got is what the server holds.
    assert_eq!(big.len, BIG);
    assert!(got_big.starts_with(&format!("2.05 {BIG} ")), "{dump}");
    assert_eq!(field(got_big, "sha256"), big.sha256, "{dump}");
    assert_eq!(field(got_big, "protected"), "yes", "{dump}");
    // Observe: the registration's answer and 3 notifications, each protected, in order.
    assert_eq!(
        field(observe, "notifications"),
        NOTIFICATIONS.to_string(),
        "{dump}"
    );
    assert_eq!(field(observe, "protected"), "yes", "{dump}");
    assert_eq!(notify.len(), NOTIFICATIONS + 1, "{dump}");
    assert!(notify.windows(2).all(|w| w[0] < w[1]), "{notify:?}");
}

/// The server unprotected each request (its resources refuse anything else).
fn check_server(server: &Proc) {
    let served = server.stdout();
    let saw = |l: &str| served.iter().any(|s| s == l);
    assert!(saw("SERVED GET /hello 0"), "{}", server.dump());
    assert!(
        saw(&format!("SERVED POST /echo {POST_SIZE}")),
        "{}",
        server.dump()
    );
    assert!(saw("SERVED GET /big 0"), "{}", server.dump());
    assert!(saw("SERVED GET /clock 0"), "{}", server.dump());
}

/// The proxy forwarded every request (block by block) and made no answer of its own.
fn check_proxy(proxy: &ProxyCounters) {
    let ProxyCounters {
        requests,
        forwarded,
        relayed,
        notifications,
        own,
    } = proxy;
    assert!(*requests >= MIN_REQUESTS, "requests {requests}");
    assert_eq!(forwarded, requests, "every request went upstream");
    assert!(own.is_empty(), "answers the proxy made itself: {own:?}");
    assert!(
        relayed >= requests,
        "2.xx relayed {relayed} < requests {requests}"
    );
    assert!(
        *notifications >= NOTIFICATIONS as f64,
        "notifications relayed {notifications}"
    );
}
