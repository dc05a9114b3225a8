//! The cases of tests/coaps_interop.rs.

use super::*;

/// Through `--listen-dtls` with a PSK: a GET, a POST read back byte for byte, a 4 KiB
/// block-wise GET (sha256 checked) and an Observe of 3 notifications or more.
fn psk_get_post_blockwise_and_observe(stack: Stack) {
    let dir = scratch(&format!("coaps-psk-{stack:?}"));
    let (_origin, port) = aiocoap_server();
    let (_proxy, coaps) = coaps_proxy(port, &proxy_psk(&dir));
    let key = psk(KEY);
    let run = |extra: &[&str]| {
        let mut args: Vec<&str> = key.iter().map(String::as_str).collect();
        args.extend_from_slice(&["-B", "10"]);
        args.extend_from_slice(extra);
        coaps_client(stack, &args, T20)
    };

    let hello = dir.join("hello.txt");
    run(&[
        "-o",
        hello.to_str().unwrap(),
        &format!("coaps://{coaps}/hello"),
    ]);
    assert!(
        text(&hello).contains("hello"),
        "GET /hello gave {:?}",
        text(&hello)
    );

    let sent = dir.join("post.bin");
    let body: Vec<u8> = (0..=255u8).rev().chain(0..=255).collect();
    std::fs::write(&sent, &body).unwrap();
    let uri = format!("coaps://{coaps}/upload");
    run(&["-m", "post", "-f", sent.to_str().unwrap(), &uri]);
    let back = dir.join("back.bin");
    run(&["-o", back.to_str().unwrap(), &uri]);
    assert_eq!(
        std::fs::read(&back).unwrap(),
        body,
        "POST then GET, byte for byte"
    );

    let big = dir.join("big.bin");
    run(&[
        "-b",
        "256",
        "-o",
        big.to_str().unwrap(),
        &format!("coaps://{coaps}/big"),
    ]);
    let want = dir.join("want.bin");
    std::fs::write(&want, big_body()).unwrap();
    assert_eq!(sha256(&big), sha256(&want), "4 KiB block-wise GET");
    assert_eq!(std::fs::metadata(&big).unwrap().len(), BIG as u64);

    let observed = run(&["-s", "3", "-w", &format!("coaps://{coaps}/clock")]);
    let values: Vec<u64> = observed
        .stdout()
        .iter()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert!(
        values.len() >= 3,
        "Observe gave {values:?}\n{}",
        observed.dump()
    );
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
}

#[test]
fn psk_get_post_blockwise_and_observe_openssl() {
    psk_get_post_blockwise_and_observe(Stack::Openssl);
}

#[test]
fn psk_get_post_blockwise_and_observe_gnutls() {
    psk_get_post_blockwise_and_observe(Stack::Gnutls);
}

/// A client with a wrong key gets nothing (its handshake fails), and the next good client,
/// of either stack, is served.
#[test]
fn a_wrong_key_gets_nothing_and_the_next_client_is_served() {
    let dir = scratch("coaps-wrong-key");
    let (_origin, port) = aiocoap_server();
    let (mut proxy, coaps) = coaps_proxy(port, &proxy_psk(&dir));
    let uri = format!("coaps://{coaps}/hello");
    for stack in [Stack::Openssl, Stack::Gnutls] {
        let out = dir.join(format!("wrong-{stack:?}.txt"));
        let mut args: Vec<String> = psk("not-the-key");
        args.extend(["-B", "3", "-o", out.to_str().unwrap(), &uri].map(String::from));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        coaps_client(stack, &argv, T20);
        assert_eq!(text(&out), "", "{stack:?} with a wrong key got an answer");
        proxy.proc.wait_log("ended: HandshakeFailed", T20);

        let good = dir.join(format!("good-{stack:?}.txt"));
        let mut args = psk(KEY);
        args.extend(["-B", "5", "-o", good.to_str().unwrap(), &uri].map(String::from));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        coaps_client(stack, &argv, T20);
        assert!(
            text(&good).contains("hello"),
            "{stack:?} after a wrong key: {:?}",
            text(&good)
        );
    }
}

/// With `--dtls-cert`/`--dtls-key`, a client given the CA (`-R`) verifies the proxy and is
/// served; given another CA it refuses the handshake and gets nothing.
fn certificates_are_verified_by_the_client(stack: Stack) {
    let dir = scratch(&format!("coaps-certs-{stack:?}"));
    let pki = certs::make(&dir);
    let (_origin, port) = aiocoap_server();
    let flags = [
        "--dtls-cert",
        pki.server_cert.to_str().unwrap(),
        "--dtls-key",
        pki.server_key.to_str().unwrap(),
    ]
    .map(String::from);
    let (_proxy, coaps) = coaps_proxy(port, &flags);
    let uri = format!("coaps://{coaps}/hello");
    let (good, bad) = (dir.join("good.txt"), dir.join("bad.txt"));
    let ca = pki.ca.to_str().unwrap();
    coaps_client(
        stack,
        &["-R", ca, "-B", "5", "-o", good.to_str().unwrap(), &uri],
        T20,
    );
    assert!(
        text(&good).contains("hello"),
        "{stack:?} with the CA: {:?}",
        text(&good)
    );
    let other = pki.other_ca.to_str().unwrap();
    coaps_client(
        stack,
        &["-R", other, "-B", "3", "-o", bad.to_str().unwrap(), &uri],
        T20,
    );
    assert_eq!(
        text(&bad),
        "",
        "{stack:?} accepted a certificate of another CA"
    );
}

#[test]
fn certificates_are_verified_by_the_client_openssl() {
    certificates_are_verified_by_the_client(Stack::Openssl);
}

#[test]
fn certificates_are_verified_by_the_client_gnutls() {
    certificates_are_verified_by_the_client(Stack::Gnutls);
}

/// With `--dtls-client-ca`, a client without a certificate is refused and one with a
/// certificate of that CA is served.
#[test]
fn a_client_certificate_is_required_with_dtls_client_ca() {
    let dir = scratch("coaps-client-certs");
    let pki = certs::make(&dir);
    let (_origin, port) = aiocoap_server();
    let flags = [
        "--dtls-cert",
        pki.server_cert.to_str().unwrap(),
        "--dtls-key",
        pki.server_key.to_str().unwrap(),
        "--dtls-client-ca",
        pki.ca.to_str().unwrap(),
    ]
    .map(String::from);
    let (mut proxy, coaps) = coaps_proxy(port, &flags);
    let uri = format!("coaps://{coaps}/hello");
    let (without, with) = (dir.join("without.txt"), dir.join("with.txt"));
    let ca = pki.ca.to_str().unwrap();
    coaps_client(
        Stack::Openssl,
        &["-R", ca, "-B", "3", "-o", without.to_str().unwrap(), &uri],
        T20,
    );
    assert_eq!(text(&without), "", "served without a client certificate");
    proxy.proc.wait_log("ended: HandshakeFailed", T20);
    let (cert, key) = (
        pki.client_cert.to_str().unwrap(),
        pki.client_key.to_str().unwrap(),
    );
    let args = [
        "-R",
        ca,
        "-c",
        cert,
        "-j",
        key,
        "-B",
        "5",
        "-o",
        with.to_str().unwrap(),
        &uri,
    ];
    coaps_client(Stack::Openssl, &args, T20);
    assert!(
        text(&with).contains("hello"),
        "with a client certificate: {:?}",
        text(&with)
    );
}

/// `--listen-dtls` without `--listen` opens no plain CoAP socket: a plain client gets no
/// answer on the coaps port, and the proxy's one listening line names only coaps.
#[test]
fn coaps_alone_opens_no_plain_port() {
    let dir = scratch("coaps-alone");
    let (_origin, port) = aiocoap_server();
    let (proxy, coaps) = coaps_proxy(port, &proxy_psk(&dir));
    // `coap` falls back to the coaps address only when the line names no plain listener.
    assert_eq!(proxy.coap, coaps, "the only listener is the coaps one");
    assert!(
        !answers_ping(coaps),
        "a plain CoAP ping was answered on the coaps port"
    );
    let plain = dir.join("plain.txt");
    let mut p = coap_client(&[
        "-B",
        "2",
        "-o",
        plain.to_str().unwrap(),
        &format!("coap://{coaps}/hello"),
    ]);
    p.wait_exit(T20);
    assert_eq!(text(&plain), "");
}

/// A flood of 2,000 ClientHellos from 2,000 source ports (issue 28): each gets a
/// HelloVerifyRequest and leaves no state (RSS grows less than 10 MiB), and a legitimate
/// client right after completes its handshake and gets its answer. How fast, side by side
/// with libcoap's own server, is `cargo bench --bench coaps` (docs/benchmarks.md).
#[test]
fn a_flood_of_client_hellos_is_answered_statelessly_and_a_client_is_served_after_it() {
    let dir = scratch("coaps-flood");
    let (_origin, port) = aiocoap_server();
    let (proxy, coaps) = coaps_proxy(port, &proxy_psk(&dir));
    let before = proxy.proc.status_kib("VmRSS");
    let flood = flood::client_hellos(coaps, 2000);
    assert_eq!(flood.verify_requests, 2000, "{flood:?}");
    let grown = proxy.proc.status_kib("VmRSS").saturating_sub(before);
    assert!(grown < 10 << 10, "RSS grew {grown} KiB under the flood");
    eprintln!("flood: {flood:?}, RSS +{grown} KiB");

    let out = dir.join("after.txt");
    let mut args = psk(KEY);
    args.extend(
        [
            "-B",
            "5",
            "-o",
            out.to_str().unwrap(),
            &format!("coaps://{coaps}/hello"),
        ]
        .map(String::from),
    );
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    coaps_client(Stack::Openssl, &argv, T20);
    assert!(
        text(&out).contains("hello"),
        "after the flood: {:?}",
        text(&out)
    );
}
