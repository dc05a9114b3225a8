//! The cross-proxy's request path: arbitrary bytes on an HTTP/1.1 connection, through the
//! cross-proxy core and the real proxy engine to an upstream that answers every request
//! (2.31 to a Block1 block with more to come, else 2.05 echoing the payload). Nothing
//! panics; every request the connection hands over gets exactly one answer; once every
//! deadline passed and the connection closed, no state is left.
#![no_main]

use std::time::Duration;

use backoffd::coap::option::{BlockValue, BLOCK1};
use backoffd::coap::{Code, Message, MessageBuilder, MessageType};
use backoffd::hc::{ConnId, HcConfig, HcFront, HttpAnswer};
use backoffd::http1::{Config, Http1Connection};
use backoffd::proxy::{Destination, EndpointEvent, Peer, Proxy, ProxyConfig, Routing, Seeds};
use backoffd::time::Timestamp;
use libfuzzer_sys::fuzz_target;

const CONN: ConnId = ConnId(1);

fn proxy() -> Proxy {
    let config = ProxyConfig {
        routing: Routing {
            upstream: Some("127.0.0.1:5684".parse().unwrap()),
            allow: Vec::new(),
            forward: false,
        },
        cache_size: 8 << 10,
        ..ProxyConfig::default()
    };
    Proxy::new(
        config,
        Seeds {
            rng: 1,
            hash: [1, 2],
        },
    )
}

fn front() -> HcFront {
    HcFront::new(HcConfig {
        prefix: "/hc/".into(),
        forward: false,
        reverse: true,
        max_body: 8 << 10,
        max_request: 1152,
        timeout: Duration::from_secs(60),
        cors: Some("*".into()),
        max_streams: 2,
    })
}

/// What the upstream answers to one request from the proxy.
fn upstream_answer(request: &Message) -> Vec<u8> {
    let more = (request.option(BLOCK1))
        .and_then(|v| BlockValue::decode(v).ok())
        .filter(|b| b.more);
    let code = if more.is_some() {
        Code::CONTINUE
    } else {
        Code::CONTENT
    };
    let mut out = Vec::new();
    let id = (request.message_id(), request.token());
    let mut b = MessageBuilder::new(&mut out, MessageType::Ack, code, id.0, id.1);
    if let Some(block) = more {
        b.option(BLOCK1, &block.encode().unwrap());
    } else {
        b.payload(request.payload());
    }
    b.finish().unwrap();
    out
}

/// Moves datagrams between the core, the engine and the upstream until all are quiet;
/// returns how many HTTP answers (whole or stream heads) came out.
fn settle(
    now: Timestamp,
    proxy: &mut Proxy,
    front: &mut HcFront,
    http: &mut Http1Connection,
) -> usize {
    let mut answered = 0;
    loop {
        let mut moved = false;
        while let Some((from, bytes)) = front.poll_to_engine() {
            proxy.handle_client_datagram(now, Peer::Local(from), &bytes);
            moved = true;
        }
        for event in proxy.accept_endpoint_events(now) {
            if let EndpointEvent::Open { id, .. } = event {
                proxy.endpoint_opened(now, id);
            }
        }
        while let Some(t) = proxy.poll_transmit() {
            moved = true;
            match t.to {
                Destination::Client(Peer::Local(to)) => front.from_engine(now, to, &t.payload),
                Destination::Client(Peer::Udp(_) | Peer::Dtls(_) | Peer::Stream(_)) => {}
                Destination::Upstream(ep) => {
                    let Ok(request) = Message::parse(&t.payload) else {
                        continue;
                    };
                    if request.code().is_request() {
                        let answer = upstream_answer(&request);
                        proxy.handle_upstream_datagram(now, ep, &answer);
                    }
                }
            }
        }
        while let Some((_, answer)) = front.poll_answer() {
            answered += usize::from(matches!(
                answer,
                HttpAnswer::Full { .. } | HttpAnswer::StreamStart { .. }
            ));
            answer.write(http);
        }
        if !moved {
            return answered;
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut proxy = proxy();
    let mut front = front();
    let config = Config {
        max_body_len: 8 << 10,
        max_pipelined: 4,
        ..Config::default()
    };
    let mut now = Timestamp::from_nanos(1);
    let mut http = Http1Connection::new(now, config);
    front.open(CONN);
    let (mut requests, mut answered) = (0usize, 0usize);
    for piece in data.chunks(97) {
        http.handle_input(now, piece);
        while let Some(req) = http.poll_request() {
            requests += 1;
            front.request(now, CONN, &req);
        }
        answered += settle(now, &mut proxy, &mut front, &mut http);
        let n = http.pending_output().len();
        http.consume_output(n);
        now = now + Duration::from_millis(10);
    }
    http.handle_eof();
    while let Some(req) = http.poll_request() {
        requests += 1;
        front.request(now, CONN, &req);
    }
    answered += settle(now, &mut proxy, &mut front, &mut http);
    // Every deadline passes: each request ends with an answer of some kind.
    for _ in 0..200 {
        let Some(at) = [front.poll_timeout(), proxy.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
        else {
            break;
        };
        now = now.max(at);
        front.handle_timeout(now);
        proxy.handle_timeout(now);
        answered += settle(now, &mut proxy, &mut front, &mut http);
    }
    front.end_streams();
    answered += settle(now, &mut proxy, &mut front, &mut http);
    assert_eq!(answered, requests, "one answer per request");
    front.close(now, CONN);
    let later = now + Duration::from_secs(120);
    front.handle_timeout(later);
    proxy.handle_timeout(later);
    settle(later, &mut proxy, &mut front, &mut http);
    assert_eq!(front.in_flight(), (0, 0), "no state left");
});
