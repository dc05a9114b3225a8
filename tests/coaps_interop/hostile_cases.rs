//! Issue 40's coaps rows against the real binary: sessions a keyless peer opens with valid
//! cookies (row 2), a forged hello from a live session's address (row 6), and a SEC1
//! certificate key (row 9).

use super::*;
use common::exposition::scrape;

/// Row 2, scaled down: the same flood against a table of 1,000 sessions (the issue filled
/// 10,000; the attack benchmark's `dtls_hello_flood` does): 157 addresses x 12 ports of
/// cookie-verified hellos that never finish. Before, the table was full and a legitimate
/// client was refused until the handshakes timed out; now, once they are past their 1 s
/// grace, the client's handshake takes the place of the oldest. (Each address would keep
/// its 8 newest, but at 1,000 sessions the table's bound comes first.)
#[test]
fn a_flood_of_verified_hellos_leaves_room_for_a_psk_client() {
    let dir = scratch("coaps-verified-flood");
    let (_origin, port) = aiocoap_server();
    let mut args = proxy_psk(&dir);
    args.extend(["--dtls-max-sessions", "1000", "--metrics", "127.0.0.1:0"].map(String::from));
    let (proxy, coaps) = coaps_proxy(port, &args);
    let flood = hostile::verified_flood(coaps, 157, 12, 2000);
    assert!(flood.verified > 1500, "{flood:?}");
    let out = dir.join("during.txt");
    let mut client = psk(KEY);
    client.extend(
        [
            "-B",
            "5",
            "-o",
            out.to_str().unwrap(),
            &format!("coaps://{coaps}/hello"),
        ]
        .map(String::from),
    );
    let argv: Vec<&str> = client.iter().map(String::as_str).collect();
    coaps_client(Stack::Openssl, &argv, T20);
    assert!(text(&out).contains("hello"), "refused: {:?}", text(&out));
    let m = scrape(proxy.metrics.unwrap());
    let handshaking = m.get("backoffd_dtls_sessions{phase=\"handshaking\"}");
    assert!(handshaking <= 1000.0, "{handshaking} handshaking");
    assert!(m.get("backoffd_dtls_evicted_total{bound=\"sessions\"}") > 0.0);
    eprintln!("{flood:?}, {handshaking} handshaking");
}

/// Row 6: a ClientHello without a cookie from the address and port of a live session
/// (sent here from the client's own socket, as a forger who knows them would) gets no
/// HelloVerifyRequest into the session, and the session goes on.
#[test]
fn a_cookieless_hello_from_a_live_session_s_address_leaves_it_alone() {
    let dir = scratch("coaps-forged-hello");
    let (_origin, port) = aiocoap_server();
    let (_proxy, coaps) = coaps_proxy(port, &proxy_psk(&dir));
    let mut client = hostile::Client::connect(coaps);
    assert!(client.handshake(Duration::from_secs(5)));
    let hello = client.get(1, "hello", Duration::from_secs(5));
    assert!(hello.is_some_and(|b| b.starts_with(b"hello")));
    client.send_raw(&flood::first_hello());
    assert!(
        !client.got_verify_request(Duration::from_millis(500)),
        "a HelloVerifyRequest went into the live session"
    );
    let again = client.get(2, "hello", Duration::from_secs(5));
    assert!(again.is_some_and(|b| b.starts_with(b"hello")));
}

/// Row 9: a certificate whose key is SEC1 (`openssl ecparam -genkey`, `BEGIN EC PRIVATE
/// KEY`) serves coaps to libcoap's OpenSSL client.
#[test]
fn a_sec1_certificate_key_serves_coaps() {
    let dir = scratch("coaps-sec1");
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .current_dir(&dir)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    };
    openssl(&[
        "ecparam",
        "-genkey",
        "-name",
        "prime256v1",
        "-noout",
        "-out",
        "sec1.key",
    ]);
    openssl(&[
        "req",
        "-new",
        "-x509",
        "-key",
        "sec1.key",
        "-subj",
        "/CN=127.0.0.1",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
        "-days",
        "2",
        "-out",
        "sec1.crt",
    ]);
    assert!(text(&dir.join("sec1.key")).contains("BEGIN EC PRIVATE KEY"));
    let (cert, key) = (dir.join("sec1.crt"), dir.join("sec1.key"));
    let flags = [
        "--dtls-cert",
        cert.to_str().unwrap(),
        "--dtls-key",
        key.to_str().unwrap(),
    ]
    .map(String::from);
    let (_origin, port) = aiocoap_server();
    let (_proxy, coaps) = coaps_proxy(port, &flags);
    let out = dir.join("hello.txt");
    let uri = format!("coaps://{coaps}/hello");
    let args = [
        "-R",
        cert.to_str().unwrap(),
        "-B",
        "5",
        "-o",
        out.to_str().unwrap(),
        &uri,
    ];
    coaps_client(Stack::Openssl, &args, T20);
    assert!(text(&out).contains("hello"), "{:?}", text(&out));
}
