//! The upstream leg (`--upstream coaps://`): a plain CoAP client (`coap-client-notls`)
//! through the proxy to libcoap's own coaps servers, `coap-server-openssl` and
//! `coap-server-gnutls`.

use super::*;

impl Stack {
    fn server(self) -> &'static str {
        match self {
            Stack::Openssl => "coap-server-openssl",
            Stack::Gnutls => "coap-server-gnutls",
        }
    }
}

/// libcoap's example server of `stack` with `args`, on a free plain port; it takes coaps on
/// the next port (libcoap's convention). Ready when the plain port answers a ping.
/// It, and its coaps port.
fn coaps_origin(stack: Stack, args: &[&str]) -> (Proc, u16) {
    peers();
    for _ in 0..5 {
        let port = common::free_port_pair_on("127.0.0.1");
        let (p, ok) = origin_on(stack, port, args);
        if ok {
            return (p, port + 1);
        }
    }
    panic!("{} did not start", stack.server());
}

/// `stack`'s server on `port` (and `port + 1`); whether it came up.
fn origin_on(stack: Stack, port: u16, args: &[&str]) -> (Proc, bool) {
    let port_arg = port.to_string();
    let mut argv = vec!["-A", "127.0.0.1", "-p", &port_arg];
    argv.extend_from_slice(args);
    let mut p = Proc::spawn(stack.server(), Command::new(stack.server()).args(&argv));
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline && !p.exited() {
        if answers_ping(addr) {
            return (p, true);
        }
    }
    (p, false)
}

/// The proxy on a plain port with `--upstream coaps://127.0.0.1:PORT <args>`; its address.
fn proxy_to_coaps(port: u16, args: &[&str]) -> (Proxy, SocketAddr) {
    let upstream = format!("coaps://127.0.0.1:{port}");
    let mut argv = vec!["--listen", "127.0.0.1:0", "--upstream", &upstream];
    argv.extend_from_slice(args);
    let p = daemon::proxy("debug", &argv);
    let coap = p.coap;
    (p, coap)
}

/// The proxy's upstream PSK flags, with `key` written to a file under `dir`.
fn upstream_psk(dir: &Path, key: &str) -> [String; 4] {
    let file = dir.join(format!("upstream-{}.key", key.len()));
    std::fs::write(&file, key).unwrap();
    [
        "--upstream-psk-identity",
        IDENTITY,
        "--upstream-psk-key-file",
        file.to_str().unwrap(),
    ]
    .map(String::from)
}

/// `coap-client-notls <args>` within 20 s; its stdout and then its stderr, where libcoap
/// prints an error response's code (`5.02 Bad Gateway`).
fn plain_client(args: &[&str]) -> String {
    let mut p = coap_client(args);
    if p.wait_exit(T20).is_none() {
        panic!("coap-client-notls did not finish\n{}", p.dump());
    }
    [p.stdout(), p.stderr()].concat().join("\n")
}

/// A GET, a PUT read back byte for byte, a 4 KiB block-wise PUT and GET (sha256 checked)
/// and an Observe of 3 notifications or more, all over the proxy's own DTLS session.
fn upstream_psk_get_put_blockwise_and_observe(stack: Stack) {
    let dir = scratch(&format!("coaps-upstream-{stack:?}"));
    let (_origin, port) = coaps_origin(stack, &["-k", KEY]);
    let psk = upstream_psk(&dir, KEY);
    let argv: Vec<&str> = psk.iter().map(String::as_str).collect();
    let (mut proxy, coap) = proxy_to_coaps(port, &argv);

    let index = plain_client(&["-B", "10", &format!("coap://{coap}/")]);
    assert!(index.contains("libcoap"), "GET / gave {index:?}");
    proxy.proc.wait_log("session is up", T20);

    let uri = format!("coap://{coap}/example_data");
    let sent = dir.join("put.bin");
    let body: Vec<u8> = (0..=255u8).rev().chain(0..=255).collect();
    std::fs::write(&sent, &body).unwrap();
    plain_client(&["-B", "10", "-m", "put", "-f", sent.to_str().unwrap(), &uri]);
    let back = dir.join("back.bin");
    plain_client(&["-B", "10", "-o", back.to_str().unwrap(), &uri]);
    assert_eq!(std::fs::read(&back).unwrap(), body, "PUT then GET");

    let big = dir.join("big.bin");
    std::fs::write(&big, big_body()).unwrap();
    let blocks = ["-B", "10", "-b", "256"];
    plain_client(
        &[
            &blocks[..],
            &["-m", "put", "-f", big.to_str().unwrap(), &uri],
        ]
        .concat(),
    );
    let got = dir.join("got.bin");
    plain_client(&[&blocks[..], &["-o", got.to_str().unwrap(), &uri]].concat());
    assert_eq!(sha256(&got), sha256(&big), "4 KiB block-wise PUT and GET");

    let observed = plain_client(&["-s", "4", "-B", "5", &format!("coap://{coap}/time")]);
    // libcoap prints the notifications ("Dec 06 13:06:51") without a line break between.
    let notes = observed.matches(':').count() / 2;
    assert!(notes >= 3, "Observe /time gave {observed:?}");
}

#[test]
fn upstream_psk_get_put_blockwise_and_observe_openssl() {
    upstream_psk_get_put_blockwise_and_observe(Stack::Openssl);
}

#[test]
fn upstream_psk_get_put_blockwise_and_observe_gnutls() {
    upstream_psk_get_put_blockwise_and_observe(Stack::Gnutls);
}

/// A wrong upstream key: the origin never finishes the handshake, and the request gets
/// 5.02 from the proxy (after the handshake timeout, not the whole retry policy).
#[test]
fn a_wrong_upstream_key_gets_5_02() {
    let dir = scratch("coaps-upstream-wrong-key");
    let (_origin, port) = coaps_origin(Stack::Openssl, &["-k", KEY]);
    let psk = upstream_psk(&dir, "not-the-key");
    let argv: Vec<&str> = psk.iter().map(String::as_str).collect();
    let (mut proxy, coap) = proxy_to_coaps(port, &argv);
    let answer = plain_client(&["-B", "18", &format!("coap://{coap}/")]);
    assert!(answer.contains("5.02"), "a wrong key gave {answer:?}");
    proxy.proc.wait_log("refused the DTLS handshake", T20);
}

/// An origin killed without close_notify and started again knows no session: the proxy's
/// retransmission finds it silent, sets up a new session and the request is answered.
#[test]
fn a_restarted_upstream_gets_a_new_session() {
    let dir = scratch("coaps-upstream-restart");
    let (mut origin, port) = coaps_origin(Stack::Openssl, &["-k", KEY]);
    let psk = upstream_psk(&dir, KEY);
    let argv: Vec<&str> = psk.iter().map(String::as_str).collect();
    let (mut proxy, coap) = proxy_to_coaps(port, &argv);
    let uri = format!("coap://{coap}/");
    assert!(plain_client(&["-B", "10", &uri]).contains("libcoap"));
    origin.kill();
    let (_again, up) = origin_on(Stack::Openssl, port - 1, &["-k", KEY]);
    assert!(up, "the origin did not come back on its port");
    let answer = plain_client(&["-B", "15", &uri]);
    assert!(answer.contains("libcoap"), "after the restart: {answer:?}");
    proxy.proc.wait_log("ended: Stale", T20);
}

/// `--upstream-ca`: the origin's certificate is checked; one from another CA is refused.
#[test]
fn the_upstream_certificate_is_verified() {
    let dir = scratch("coaps-upstream-certs");
    let pki = certs::make(&dir);
    let (cert, key) = (
        pki.server_cert.to_str().unwrap(),
        pki.server_key.to_str().unwrap(),
    );
    let (_origin, port) = coaps_origin(Stack::Openssl, &["-c", cert, "-j", key]);
    let (_proxy, coap) = proxy_to_coaps(port, &["--upstream-ca", pki.ca.to_str().unwrap()]);
    let answer = plain_client(&["-B", "10", &format!("coap://{coap}/")]);
    assert!(answer.contains("libcoap"), "with our CA: {answer:?}");

    let other = pki.other_ca.to_str().unwrap();
    let (mut proxy, coap) = proxy_to_coaps(port, &["--upstream-ca", other]);
    let answer = plain_client(&["-B", "18", &format!("coap://{coap}/")]);
    assert!(answer.contains("5.02"), "with another CA: {answer:?}");
    proxy.proc.wait_log("refused the DTLS handshake", T20);
}
