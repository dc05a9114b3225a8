//! The HTTP-to-CoAP cross-proxy (issue 15; RFC 8075) between real HTTP clients and CoAP
//! servers we did not write.
//!
//! Clients: `curl` and Python's `http.client` (tests/interop/http_client.py, one keep-alive
//! connection for all its requests); raw TCP for pipelining. Servers: aiocoap
//! (tests/interop/aiocoap_server.py) and libcoap's `coap-server`. Everything binds loopback;
//! every child is guarded (tests/peers).
#![cfg(feature = "http")]

mod common;
mod peers;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use peers::*;

const T20: Duration = Duration::from_secs(20);

/// The proxy in front of an aiocoap server, reverse to it and forward to it when allowed.
fn proxy_to_aiocoap(extra: &[&str]) -> (Proc, Proxy, SocketAddr, u16) {
    let (server, port) = aiocoap_server();
    let target = format!("127.0.0.1:{port}");
    let mut args = vec!["--upstream", &target, "--forward", "--allow", &target];
    args.extend_from_slice(extra);
    let (proxy, http) = http_proxy(&args);
    (server, proxy, http, port)
}

/// One response as a client printed it.
#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        (self.headers.iter())
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2)
        .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// A request for http_client.py: method, path, headers, body.
struct Req<'a>(&'a str, &'a str, &'a [(&'a str, &'a str)], &'a [u8]);

/// Runs http_client.py against `http` with `requests` on one connection; the responses and
/// how many connections it used.
fn python_client(http: SocketAddr, requests: &[Req]) -> (Vec<Response>, usize) {
    let json: Vec<String> = (requests.iter())
        .map(|Req(method, path, headers, body)| {
            let headers: Vec<String> = (headers.iter())
                .map(|(n, v)| format!("{n:?}: {v:?}"))
                .collect();
            format!(
                r#"{{"method": {method:?}, "path": {path:?}, "headers": {{{}}}, "body_hex": "{}"}}"#,
                headers.join(", "),
                hex(body)
            )
        })
        .collect();
    let mut p = Proc::spawn(
        "http_client.py",
        Command::new(&peers().python)
            .arg(script("http_client.py"))
            .arg(http.to_string())
            .arg(format!("[{}]", json.join(", "))),
    );
    p.finish_ok(T20);
    parse_responses(&p.stdout())
}

fn parse_responses(lines: &[String]) -> (Vec<Response>, usize) {
    let (mut out, mut connections) = (Vec::new(), 0);
    for line in lines {
        if let Some(status) = line.strip_prefix("RESPONSE ") {
            out.push(Response {
                status: status.trim().parse().unwrap(),
                headers: Vec::new(),
                body: Vec::new(),
            });
        } else if let Some(h) = line.strip_prefix("HEADER ") {
            let (n, v) = h.split_once(": ").unwrap_or((h, ""));
            let r = out.last_mut().unwrap();
            r.headers.push((n.to_string(), v.to_string()));
        } else if let Some(b) = line.strip_prefix("BODY ") {
            out.last_mut().unwrap().body = unhex(b.trim());
        } else if let Some(n) = line.strip_prefix("CONNECTIONS ") {
            connections = n.trim().parse().unwrap();
        }
    }
    (out, connections)
}

/// `curl -s -i <args>`: the response (the last, after any 100 Continue).
fn curl(args: &[&str]) -> Response {
    let out = Command::new("curl")
        .args(["-s", "-i", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl runs (tests/interop/setup.sh installs it)");
    assert!(out.status.success(), "curl {args:?} failed: {out:?}");
    parse_http(&out.stdout)
}

/// The last response of a raw HTTP/1.1 byte stream with Content-Length framing.
fn parse_http(raw: &[u8]) -> Response {
    let mut all = split_responses(raw);
    all.pop()
        .unwrap_or_else(|| panic!("no response in {raw:?}"))
}

/// Every response in a raw byte stream (Content-Length framed), 1xx included.
fn split_responses(mut raw: &[u8]) -> Vec<Response> {
    let mut out = Vec::new();
    while let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&raw[..end]).into_owned();
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(": "))
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        let len = (headers.iter())
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .map_or(0, |(_, v)| v.parse().unwrap());
        let body_start = end + 4;
        let body_end = (body_start + len).min(raw.len());
        out.push(Response {
            status,
            headers,
            body: raw[body_start..body_end].to_vec(),
        });
        raw = &raw[body_end..];
    }
    out
}

#[test]
fn every_method_reaches_the_coap_server_with_its_status_and_content_type_mapped() {
    let (_server, _proxy, http, _) = proxy_to_aiocoap(&[]);
    let json = [("Content-Type", "application/json")];
    let body = br#"{"a": 1}"#;
    let (got, connections) = python_client(
        http,
        &[
            Req("GET", "/echo", &[], b""),
            Req("HEAD", "/echo", &[], b""),
            Req("POST", "/echo", &json, body),
            Req("PUT", "/echo", &json, body),
            Req("DELETE", "/echo", &[], b""),
            Req("PATCH", "/echo", &json, body),
            Req("FETCH", "/echo", &json, body),
            Req("GET", "/json", &[], b""),
            Req("GET", "/nothing-here", &[], b""),
            Req("OPTIONS", "/echo", &[], b""),
        ],
    );
    assert_eq!(connections, 1, "keep-alive held for every request");
    let summary: Vec<(u16, String)> = got.iter().map(|r| (r.status, r.text())).collect();
    let want = [
        (200, "GET 0 cf=-"),
        (200, ""),
        (201, "POST 8 cf=50"),
        (200, "PUT 8 cf=50"),
        (200, "DELETE 0 cf=-"),
        (200, "PATCH 8 cf=50"),
        (200, "FETCH 8 cf=50"),
        (200, r#"{"t": 21.5}"#),
        (404, ""),
    ];
    for (i, (status, text)) in want.iter().enumerate() {
        assert_eq!(
            (summary[i].0, summary[i].1.as_str()),
            (*status, *text),
            "request {i}: {:?}",
            got[i]
        );
    }
    assert_eq!(
        got[9].status, 501,
        "OPTIONS has no CoAP method: {:?}",
        got[9]
    );
    let text_plain = Some("text/plain; charset=utf-8");
    assert_eq!(got[0].header("content-type"), text_plain);
    assert_eq!(
        got[1].header("content-length"),
        Some("10"),
        "HEAD measures the GET"
    );
    assert_eq!(got[2].header("location"), Some("/echo/new"));
    assert_eq!(got[7].header("content-type"), Some("application/json"));
    assert_eq!(got[7].header("cache-control"), Some("max-age=60"));
}

#[test]
fn an_unknown_content_type_is_415_and_nothing_reaches_the_server() {
    let (server, _proxy, http, _) = proxy_to_aiocoap(&[]);
    let (got, _) = python_client(
        http,
        &[Req(
            "PUT",
            "/echo",
            &[("Content-Type", "application/x-unknown")],
            b"x",
        )],
    );
    assert_eq!(got[0].status, 415, "{:?}", got[0]);
    assert!(!server.stdout().iter().any(|l| l.starts_with("ECHO")));
}

#[test]
fn libcoap_content_formats_map_to_content_types() {
    let (_server, port) = libcoap_server("127.0.0.1");
    let target = format!("127.0.0.1:{port}");
    let (_proxy, http) = http_proxy(&["--upstream", &target]);
    let links = curl(&[&format!("http://{http}/.well-known/core")]);
    assert_eq!(links.status, 200, "{links:?}");
    assert_eq!(
        links.header("content-type"),
        Some("application/link-format")
    );
    assert!(links.text().contains("</time>"), "{}", links.text());
    // libcoap's index carries no Content-Format, and a Max-Age of its own.
    let index = curl(&[&format!("http://{http}/")]);
    assert_eq!(
        index.header("content-type"),
        Some("application/octet-stream")
    );
    assert_eq!(index.header("cache-control"), Some("max-age=196607"));
    assert!(index.text().contains("libcoap"), "{}", index.text());
    let put = curl(&[
        "-X",
        "PUT",
        "-H",
        "Content-Type: text/plain",
        "--data-binary",
        "hello libcoap",
        &format!("http://{http}/example_data"),
    ]);
    assert!(matches!(put.status, 201 | 204), "{put:?}");
    let got = curl(&[&format!("http://{http}/example_data")]);
    assert_eq!((got.status, got.text().as_str()), (200, "hello libcoap"));
}

#[test]
fn a_4k_body_goes_both_ways_block_wise_byte_for_byte() {
    let (mut server, _proxy, http, _) = proxy_to_aiocoap(&[]);
    let big = curl(&[&format!("http://{http}/big")]);
    assert_eq!(big.status, 200);
    assert_eq!(big.body, big_body(), "the 4 KiB Block2 body, reassembled");
    let body: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 253) as u8).collect();
    let file = scratch("http-upload").join("body.bin");
    std::fs::write(&file, &body).unwrap();
    // curl sends `Expect: 100-continue` for a body this size, and waits for the 100.
    let put = curl(&[
        "-X",
        "PUT",
        "-H",
        "Content-Type: application/octet-stream",
        "--data-binary",
        &format!("@{}", file.display()),
        &format!("http://{http}/upload"),
    ]);
    assert_eq!((put.status, put.text().as_str()), (200, "stored 4096"));
    // The server's line is read by another thread: wait for it rather than race it.
    server.wait_stdout_count("UPLOAD 4096", 1, std::time::Duration::from_secs(10));
    let back = curl(&[&format!("http://{http}/upload")]);
    assert_eq!(
        back.body, body,
        "what went up in Block1 blocks comes back whole"
    );
}

#[test]
fn a_silent_upstream_is_504_and_a_refused_one_is_502() {
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    let closed = UdpSocket::bind("127.0.0.1:0").unwrap();
    let closed_addr = closed.local_addr().unwrap().to_string();
    drop(closed);
    let (_proxy, http) = http_proxy(&[
        "--forward",
        "--allow",
        &silent_addr,
        "--allow",
        &closed_addr,
        "--total-timeout",
        "2s",
        "--timeout",
        "500ms",
    ]);
    let started = Instant::now();
    let timed_out = curl(&[&format!("http://{http}/hc/coap://{silent_addr}/x")]);
    assert_eq!(timed_out.status, 504, "{timed_out:?}");
    assert!(started.elapsed() < Duration::from_secs(15));
    let refused = curl(&[&format!("http://{http}/hc/coap://{closed_addr}/x")]);
    assert_eq!(refused.status, 502, "{refused:?}");
    // The proxy's diagnostic payload (RFC 7252 §5.5.2) is the body, as text.
    for answer in [&timed_out, &refused] {
        assert_eq!(
            answer.header("content-type"),
            Some("text/plain; charset=utf-8")
        );
        assert!(!answer.body.is_empty(), "{answer:?}");
    }
}

#[test]
fn a_target_not_allowed_is_403_and_a_malformed_one_is_400() {
    let (_server, _proxy, http, port) = proxy_to_aiocoap(&[]);
    let allowed = curl(&[&format!("http://{http}/hc/coap://127.0.0.1:{port}/hello")]);
    assert_eq!(
        (allowed.status, allowed.text().as_str()),
        (200, "hello from aiocoap")
    );
    let other = curl(&[&format!("http://{http}/hc/coap://127.0.0.2:{port}/hello")]);
    assert_eq!(other.status, 403, "{other:?}");
    for bad in [
        "/hc/coap://127.0.0.1:99999/x",
        "/hc/127.0.0.1/x",
        "/hc/coap://h/%zz",
    ] {
        let got = curl(&["--path-as-is", &format!("http://{http}{bad}")]);
        assert_eq!(got.status, 400, "{bad}: {got:?}");
    }
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let (_server, _proxy, http, _) = proxy_to_aiocoap(&[]);
    let mut s = TcpStream::connect(http).unwrap();
    s.set_read_timeout(Some(T20)).unwrap();
    // The slow answer (separate, after 1.5 s) comes first on the wire all the same.
    let requests = "GET /slow HTTP/1.1\r\nHost: p\r\n\r\n\
                    GET /hello HTTP/1.1\r\nHost: p\r\n\r\n\
                    GET /big HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n";
    s.write_all(requests.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let got = split_responses(&raw);
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got[0].text().starts_with("slow hello"), "{:?}", got[0]);
    assert_eq!(got[1].text(), "hello from aiocoap");
    assert_eq!(got[2].body, big_body());
}

/// Issue 25, finding 5: requests the proxy answers itself (cache hits, 403s) and that were
/// pipelined behind each other are all taken in the turn their predecessor was answered. Before,
/// each batch waited for the in-process client's retransmission (2 s): so no request may have
/// been sent to the engine twice, which the metrics count.
#[test]
#[cfg(feature = "cache")]
fn pipelined_requests_the_proxy_answers_itself_need_no_retransmission() {
    let extra = ["--metrics", "127.0.0.1:0", "--cache-size", "1MiB"];
    let (_server, proxy, http, port) = proxy_to_aiocoap(&extra);
    let metrics = proxy.metrics.unwrap();
    assert_eq!(curl(&[&format!("http://{http}/hello")]).status, 200);
    let not_allowed = format!("/hc/coap://127.0.0.2:{port}/hello");
    for (path, status) in [("/hello", 200), (not_allowed.as_str(), 403)] {
        let mut s = TcpStream::connect(http).unwrap();
        s.set_read_timeout(Some(T20)).unwrap();
        let mut requests = format!("GET {path} HTTP/1.1\r\nHost: p\r\n\r\n").repeat(39);
        requests += &format!("GET {path} HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n");
        s.write_all(requests.as_bytes()).unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).unwrap();
        let got = split_responses(&raw);
        assert_eq!(got.len(), 40, "{path}");
        assert!(got.iter().all(|r| r.status == status), "{path}: {got:?}");
    }
    let doc = common::exposition::scrape(metrics);
    assert_eq!(doc.get("backoffd_coap_client_duplicates_total"), 0.0);
    assert_eq!(doc.get("backoffd_coap_requests_total"), 81.0);
    assert_eq!(doc.get("backoffd_coap_response_cache_hits_total"), 40.0);
}

/// `Cache-Control: no-cache` on an HTTP request is a preference (RFC 9111 §5.2.1.4), and the
/// cross-proxy does not pass it on: the cache is there to shield a constrained origin, and a
/// browser's reload sends it on every request. A fresh entry answers it.
#[test]
#[cfg(feature = "cache")]
fn a_request_no_cache_directive_is_answered_from_a_fresh_cached_response() {
    let extra = ["--metrics", "127.0.0.1:0", "--cache-size", "1MiB"];
    let (_server, proxy, http, _) = proxy_to_aiocoap(&extra);
    let metrics = proxy.metrics.unwrap();
    let url = format!("http://{http}/hello");
    assert_eq!(curl(&[&url]).status, 200);
    for header in ["Cache-Control: no-cache", "Pragma: no-cache"] {
        let got = curl(&["-H", header, &url]);
        assert_eq!(
            (got.status, got.text().as_str()),
            (200, "hello from aiocoap")
        );
    }
    let doc = common::exposition::scrape(metrics);
    assert_eq!(doc.get("backoffd_coap_response_cache_hits_total"), 2.0);
}

/// `curl -N` following the event stream of `path` through the cross-proxy at `http`.
fn event_stream(http: SocketAddr, path: &str) -> Proc {
    Proc::spawn(
        "curl event stream",
        Command::new("curl").args([
            "-s",
            "-N",
            "--max-time",
            "20",
            "-H",
            "Accept: text/event-stream",
            &format!("http://{http}{path}"),
        ]),
    )
}

#[test]
fn an_event_stream_delivers_notifications_and_deregisters_when_the_client_goes() {
    let (mut server, _proxy, http, _) = proxy_to_aiocoap(&[]);
    let mut events = event_stream(http, "/clock");
    // Three events whole: an event's `data:` line may come in a later read than its `id:`.
    let ids = events.wait_for("3 events", T20, |out, _| {
        let ids: Vec<String> = (out.iter())
            .filter_map(|l| l.strip_prefix("id: ").map(str::to_string))
            .collect();
        let data = out.iter().filter(|l| l.starts_with("data: ")).count();
        (ids.len() >= 3 && data >= 3).then_some(ids)
    });
    let data = events
        .stdout()
        .iter()
        .filter(|l| l.starts_with("data: "))
        .count();
    assert!(data >= 3, "{}", events.stdout_text());
    let seqs: Vec<u64> = ids.iter().map(|i| i.parse().unwrap()).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "Observe ids rise: {seqs:?}"
    );
    server.wait_stdout_count("OBSERVERS 1", 1, T20);
    events.kill();
    server.wait_stdout_count("OBSERVERS 0", 1, T20);
}

#[test]
fn answers_are_counted_by_method_and_status_in_the_metrics() {
    let (_server, proxy, http, _) = proxy_to_aiocoap(&["--metrics", "127.0.0.1:0"]);
    let metrics = proxy.metrics.unwrap();
    for path in ["/hello", "/hello", "/nothing"] {
        curl(&[&format!("http://{http}{path}")]);
    }
    let doc = common::exposition::scrape(metrics);
    let get = |status| {
        doc.get(&format!(
            "backoffd_hc_requests_total{{method=\"GET\",status=\"{status}\"}}"
        ))
    };
    assert_eq!((get(200), get(404)), (2.0, 1.0));
    assert_eq!(doc.get("backoffd_hc_connections_total"), 3.0);
    assert_eq!(doc.get("backoffd_hc_requests_in_flight"), 0.0);
    // The cross-proxy's requests went through the engine like any client's.
    assert_eq!(doc.get("backoffd_coap_requests_total"), 3.0);
}

#[test]
fn a_cross_proxy_flag_without_http_listen_exits_2_with_one_line() {
    for flags in [
        &["--http-cors", "*"][..],
        &["--http-listen", "127.0.0.1:0", "--http-max-body", "65MiB"][..],
        &[
            "--http-listen",
            "127.0.0.1:0",
            "--http-cors",
            "not an origin",
        ][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_backoffd"))
            .args(["proxy", "--upstream", "127.0.0.1:5683"])
            .args(flags)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{flags:?}: {err}");
        assert!(err.contains("--http-"), "{flags:?}: {err}");
    }
}

#[test]
fn a_serve_config_proxy_section_runs_the_cross_proxy_too() {
    let file = scratch("http-serve").join("backoffd.conf");
    let conf =
        "[proxy]\nlisten = 127.0.0.1:0\nupstream = 127.0.0.1:5683\nhttp-listen = 127.0.0.1:0\n\
                http-cors = *\n";
    std::fs::write(&file, conf).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_backoffd"))
        .args([
            "serve",
            "--config",
            &file.display().to_string(),
            "--check-config",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text.contains("HTTP cross-proxy on http://127.0.0.1:0"),
        "{text}"
    );
}

#[test]
fn sigterm_ends_the_event_streams_and_the_process_exits_0() {
    let (_server, mut proxy, http, _) = proxy_to_aiocoap(&[]);
    let mut events = event_stream(http, "/clock");
    events.wait_for("an event", T20, |out, _| {
        out.iter().any(|l| l.starts_with("data: ")).then_some(())
    });
    let status = proxy.proc.terminate(Duration::from_secs(10));
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "{}",
        proxy.proc.dump()
    );
    // The stream was ended properly (the last chunk), so curl exits 0 at once.
    let curl_status = events.wait_exit(Duration::from_secs(5));
    assert_eq!(
        curl_status.and_then(|s| s.code()),
        Some(0),
        "{}",
        events.dump()
    );
}
