//! Case 7 of tests/coap_interop.rs, the forward proxy with an allowlist, and the response
//! cache's cases.

use super::*;

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
#[cfg(feature = "cache")]
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
#[cfg(feature = "cache")]
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
#[cfg(feature = "cache")]
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
            std::process::Command::new(&peers().python)
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
#[cfg(feature = "cache")]
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
