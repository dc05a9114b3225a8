//! coaps+tcp (`--listen-tls`) with libcoap's OpenSSL client, and coap+ws (`--listen-ws`) with
//! aiocoap's WebSocket client.

use super::*;

/// `backoffd proxy --listen-tls 127.0.0.1:0` with the test PKI's server certificate (and
/// `extra`), in front of `upstream`.
fn tls_proxy(upstream: u16, pki: &certs::Pki, extra: &[&str]) -> (Proxy, SocketAddr) {
    let upstream = format!("127.0.0.1:{upstream}");
    let mut argv = vec![
        "--listen-tls",
        "127.0.0.1:0",
        "--tls-cert",
        pki.server_cert.to_str().unwrap(),
        "--tls-key",
        pki.server_key.to_str().unwrap(),
        "--upstream",
        &upstream,
    ];
    argv.extend_from_slice(extra);
    let p = daemon::proxy("debug", &argv);
    let tls = p.tls.expect("a coaps+tcp listener");
    (p, tls)
}

/// Runs `coap-client-openssl <args>` within 20 s; its output is checked by the caller.
fn openssl_client(args: &[&str]) -> Proc {
    peers();
    let mut p = Proc::spawn(
        &format!("coap-client-openssl {}", args.join(" ")),
        Command::new("coap-client-openssl").args(args),
    );
    if p.wait_exit(T20).is_none() {
        panic!("{} did not finish within {T20:?}\n{}", p.name, p.dump());
    }
    p
}

/// libcoap over TLS, verifying the proxy's certificate against our CA (`-R`): GET, POST
/// read back, 4 KiB (sha256) and Observe.
#[test]
fn libcoap_over_tls_get_post_4kib_and_observe() {
    let dir = scratch("coap-tls-libcoap");
    let pki = certs::make(&dir);
    let (_origin, port) = aiocoap_server();
    let (_proxy, tls) = tls_proxy(port, &pki, &[]);
    let ca = pki.ca.to_str().unwrap();
    let run = |extra: &[&str]| openssl_client(&[&["-R", ca, "-B", "10"], extra].concat());
    libcoap_get_post_4kib_and_observe_at(&format!("coaps+tcp://{tls}"), &dir, run);
}

/// A client that trusts another CA refuses the proxy's certificate and gets nothing; one
/// that trusts ours, right after, is served.
#[test]
fn a_client_trusting_another_ca_gets_nothing() {
    let dir = scratch("coap-tls-other-ca");
    let pki = certs::make(&dir);
    let (_origin, port) = aiocoap_server();
    let (_proxy, tls) = tls_proxy(port, &pki, &[]);
    let uri = format!("coaps+tcp://{tls}/hello");
    let (bad, good) = (dir.join("bad.txt"), dir.join("good.txt"));
    let other = pki.other_ca.to_str().unwrap();
    openssl_client(&["-R", other, "-B", "3", "-o", bad.to_str().unwrap(), &uri]);
    assert_eq!(text(&bad), "", "accepted a certificate of another CA");
    let ca = pki.ca.to_str().unwrap();
    openssl_client(&["-R", ca, "-B", "5", "-o", good.to_str().unwrap(), &uri]);
    assert!(text(&good).contains("hello"), "{:?}", text(&good));
}

/// `--listen-tls` without `--listen` opens no plain UDP port (a plain port would let
/// clients past the TLS), and no plain TCP one either.
#[test]
fn tls_alone_opens_no_plain_port() {
    let dir = scratch("coap-tls-alone");
    let pki = certs::make(&dir);
    let (_origin, port) = aiocoap_server();
    let (proxy, tls) = tls_proxy(port, &pki, &[]);
    // `coap` is the plain listener's address if it logged one, else the first secure one.
    assert_eq!(proxy.coap, tls, "a plain listener was opened");
    // Nothing answers plain CoAP on the TLS port's number, over UDP or TCP.
    assert!(!answers_ping(tls));
    let plain = coap_client(&["-B", "2", &format!("coap+tcp://{tls}/hello")]).wait_exit(T20);
    assert!(plain.is_some());
}

/// aiocoap over a WebSocket (`/.well-known/coap`, subprotocol `coap`): GET, POST read back,
/// 4 KiB (sha256) and Observe.
#[test]
fn aiocoap_over_websockets_get_post_4kib_and_observe() {
    let dir = scratch("coap-ws-aiocoap");
    let (_origin, port) = aiocoap_server();
    let (proxy, _) = tcp_proxy(port, &["--listen-ws", "127.0.0.1:0"]);
    let ws = proxy.ws.expect("a coap+ws listener");
    aiocoap_get_post_4kib_and_observe_at(&format!("coap+ws://{ws}"), &dir, &[]);
}

/// The TLS port takes WebSockets too (coaps+ws, RFC 8323 §4): aiocoap over a WebSocket over
/// TLS (no ALPN: told by its first bytes), trusting our CA, gets GET, POST, 4 KiB and
/// Observe; an HTTPS client offering ALPN `http/1.1` reaches the WebSocket side (400 for a
/// GET that is no upgrade), and libcoap (ALPN `coap`) the CoAP side, on the same port.
#[test]
fn aiocoap_over_websockets_over_tls_on_the_tls_port() {
    let dir = scratch("coaps-ws-aiocoap");
    let pki = certs::make(&dir);
    let (_origin, port) = aiocoap_server();
    let (_proxy, tls) = tls_proxy(port, &pki, &[]);
    let ca = pki.ca.to_str().unwrap();
    let env = [("SSL_CERT_FILE", ca)];
    aiocoap_get_post_4kib_and_observe_at(&format!("coaps+ws://{tls}"), &dir, &env);

    let https = Command::new("curl")
        .args(["-s", "-i", "--max-time", "10", "--cacert", ca])
        .arg(format!("https://{tls}/.well-known/coap"))
        .output()
        .unwrap();
    let answer = String::from_utf8_lossy(&https.stdout);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let hello = dir.join("hello.txt");
    let uri = format!("coaps+tcp://{tls}/hello");
    openssl_client(&["-R", ca, "-B", "5", "-o", hello.to_str().unwrap(), &uri]);
    assert!(text(&hello).contains("hello"), "{:?}", text(&hello));
}

/// An HTTP request to the WebSocket port that is not a CoAP upgrade gets an HTTP error and
/// the close; the metrics count it.
#[test]
fn a_websocket_handshake_not_for_coap_is_refused() {
    let (_origin, port) = aiocoap_server();
    let (proxy, _) = tcp_proxy(port, &["--listen-ws", "127.0.0.1:0"]);
    let ws = proxy.ws.expect("a coap+ws listener");
    for (request, status) in [
        ("GET / HTTP/1.1\r\nHost: x\r\n\r\n", "404"),
        (
            "GET /.well-known/coap HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
            "400",
        ),
    ] {
        let mut s = TcpStream::connect(ws).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        s.set_read_timeout(Some(T20)).unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{answer}"
        );
    }
    let metrics = proxy.metrics.unwrap();
    let closed = "backoffd_coap_stream_closed_total{transport=\"ws\",reason=\"transport\"}";
    assert_eq!(scrape(metrics).get(closed), 2.0);
}
