//! The upstream leg over TCP (`--upstream coap+tcp://`) against libcoap's
//! `coap-server-notls`, which takes CoAP over TCP on its port too.

use super::*;

/// `backoffd proxy --listen 127.0.0.1:0 --listen-tcp 127.0.0.1:0 --upstream
/// coap+tcp://127.0.0.1:PORT --metrics 127.0.0.1:0`: UDP and TCP clients in front.
fn tcp_upstream_proxy(port: u16) -> Proxy {
    let upstream = format!("coap+tcp://127.0.0.1:{port}");
    daemon::proxy(
        "debug",
        &[
            "--listen",
            "127.0.0.1:0",
            "--listen-tcp",
            "127.0.0.1:0",
            "--upstream",
            &upstream,
            "--metrics",
            "127.0.0.1:0",
        ],
    )
}

/// A plain UDP client through the proxy to libcoap over TCP: GET, a 4 KiB block-wise PUT
/// read back (sha256), Observe; and a TCP client over both legs.
#[test]
fn udp_and_tcp_clients_reach_libcoap_over_tcp() {
    let dir = scratch("coap-tcp-upstream");
    let (_origin, port) = libcoap_server("127.0.0.1");
    let proxy = tcp_upstream_proxy(port);
    let udp = |path: &str| format!("coap://{}/{path}", proxy.coap);

    let root = coap_client_ok(&["-B", "10", &udp("")], T20);
    assert!(root.stdout_text().contains("libcoap"), "{}", root.dump());

    let sent = dir.join("big.bin");
    std::fs::write(&sent, big_body()).unwrap();
    coap_client_ok(
        &[
            "-B",
            "10",
            "-b",
            "1024",
            "-m",
            "put",
            "-f",
            sent.to_str().unwrap(),
            &udp("example_data"),
        ],
        T20,
    );
    let back = dir.join("back.bin");
    coap_client_ok(
        &[
            "-B",
            "10",
            "-o",
            back.to_str().unwrap(),
            &udp("example_data"),
        ],
        T20,
    );
    assert_eq!(
        sha256(&back),
        sha256(&sent),
        "4 KiB PUT then GET over the TCP upstream"
    );

    let observed = coap_client_ok(&["-B", "10", "-s", "4", "-w", &udp("time")], T20);
    let ticks = (observed.stdout().iter())
        .filter(|l| l.contains(':'))
        .count();
    assert!(ticks >= 3, "Observe gave\n{}", observed.dump());

    let tcp = proxy.tcp.unwrap();
    let both = dir.join("both.bin");
    let uri = format!("coap+tcp://{tcp}/example_data");
    coap_client_ok(&["-B", "10", "-o", both.to_str().unwrap(), &uri], T20);
    assert_eq!(sha256(&both), sha256(&sent), "TCP on both legs");

    let doc = scrape(proxy.metrics.unwrap());
    assert_eq!(
        doc.get("backoffd_coap_upstream_retransmissions_total"),
        0.0,
        "never resent"
    );
}

/// An origin that goes away: the next request gets 5.02 at once (its connection is
/// refused), not after the retry schedule; the origin back on its port is reached again.
#[test]
fn a_gone_tcp_origin_gets_5_02_and_is_reconnected() {
    let (mut origin, port) = libcoap_server("127.0.0.1");
    let proxy = tcp_upstream_proxy(port);
    let udp = format!("coap://{}/", proxy.coap);
    coap_client_ok(&["-B", "10", &udp], T20);
    origin.kill();
    let started = Instant::now();
    let mut client = coap_client(&["-B", "10", &udp]);
    client.finish_ok(T20);
    let gone = format!("{}{}", client.stdout_text(), client.stderr().join("\n"));
    assert!(gone.contains("5.02"), "{gone}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );

    let _back = Proc::spawn(
        "coap-server-notls again",
        Command::new("coap-server-notls").args(["-A", "127.0.0.1", "-p", &port.to_string()]),
    );
    let mut served = String::new();
    for _ in 0..20 {
        served = coap_client(&["-B", "5", &udp]).finish_ok(T20).stdout_text();
        if served.contains("libcoap") {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(served.contains("libcoap"), "after the restart: {served}");
}

/// `coap-server-openssl` with the test PKI's server certificate, on a free port pair (its
/// TLS port is the second); it, and that port.
fn libcoap_tls_server(pki: &certs::Pki) -> (Proc, u16) {
    peers();
    let port = common::free_port_pair_on("127.0.0.1");
    let server = Proc::spawn(
        "coap-server-openssl",
        Command::new("coap-server-openssl").args([
            "-A",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-c",
            pki.server_cert.to_str().unwrap(),
            "-j",
            pki.server_key.to_str().unwrap(),
        ]),
    );
    let plain = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + START;
    while !answers_ping(plain) {
        assert!(
            Instant::now() < deadline,
            "coap-server-openssl did not start"
        );
    }
    (server, port + 1)
}

/// `--upstream coaps+tcp://` with `--upstream-ca` our CA: a plain client reaches
/// `coap-server-openssl` over TLS (GET, Observe); trusting another CA, it gets 5.02 at once.
#[test]
fn udp_clients_reach_libcoap_over_tls_and_a_wrong_ca_gets_5_02() {
    let dir = scratch("coaps-tcp-upstream");
    let pki = certs::make(&dir);
    let (_origin, tls_port) = libcoap_tls_server(&pki);
    let upstream = format!("coaps+tcp://127.0.0.1:{tls_port}");
    for (ca, served) in [(&pki.ca, true), (&pki.other_ca, false)] {
        let proxy = daemon::proxy(
            "debug",
            &[
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                &upstream,
                "--upstream-ca",
                ca.to_str().unwrap(),
            ],
        );
        let udp = |path: &str| format!("coap://{}/{path}", proxy.coap);
        let mut root = coap_client(&["-B", "10", &udp("")]);
        root.finish_ok(T20);
        let text = format!("{}{}", root.stdout_text(), root.stderr().join("\n"));
        if !served {
            assert!(text.contains("5.02"), "another CA: {text}");
            continue;
        }
        assert!(text.contains("libcoap"), "{text}");
        let observed = coap_client_ok(&["-B", "10", "-s", "4", "-w", &udp("time")], T20);
        let ticks = observed.stdout().iter().filter(|l| l.contains(':')).count();
        assert!(ticks >= 3, "Observe gave\n{}", observed.dump());
    }
}
