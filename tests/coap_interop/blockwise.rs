//! Cases 4-5 of tests/coap_interop.rs: block-wise transfers, each client implementation
//! against the other server implementation, and Observe.

use super::*;

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
