//! Arbitrary datagrams from clients and the upstream, interleaved with time: the engine never
//! panics and its state stays bounded.
#![no_main]

use std::net::SocketAddr;
use std::time::Duration;

use backoffd::proxy::{
    AllowedTarget, EndpointEvent, KeptBounds, Limits, Proxy, ProxyConfig, Routing, Seeds,
};
use backoffd::time::Timestamp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let seeds = Seeds {
        rng: 1,
        hash: [1, 2],
    };
    let mut proxy = Proxy::new(
        ProxyConfig {
            // Reverse to the upstream, and forward (Proxy-Uri decomposed) to the same address.
            routing: Routing {
                upstream: Some("127.0.0.1:5684".parse().unwrap()),
                allow: vec![AllowedTarget {
                    host: "127.0.0.1".into(),
                    port: 5684,
                    addr: "127.0.0.1:5684".parse().unwrap(),
                }],
                forward: true,
            },
            // The response cache on, small: hits, revalidations, invalidations and evictions.
            cache_size: 16 << 10,
            // Small limits, so that the fuzzer reaches every refusal (4.13, 4.02, 5.03 for bytes)
            // and the shares' evictions out of order and compactions.
            limits: Limits {
                max_inflight: 64,
                max_request_size: 128,
                max_options: 8,
                max_inflight_bytes: 1024,
                ..Limits::default()
            },
            kept: KeptBounds {
                max_cached: 64,
                max_cached_per_client: 8,
                ..KeptBounds::default()
            },
            ..ProxyConfig::default()
        },
        seeds,
    );
    let mut now = Timestamp::from_nanos(1);
    // Endpoint 0 is the first socket towards the upstream; later ones open as IDs run out.
    let mut endpoints = Vec::new();
    let mut follow = |proxy: &mut Proxy, now| {
        for event in proxy.accept_endpoint_events(now) {
            match event {
                EndpointEvent::Open { id, .. } => endpoints.push(id),
                EndpointEvent::Close { id } => endpoints.retain(|&e| e != id),
            }
        }
        endpoints.first().copied()
    };
    let mut upstream = follow(&mut proxy, now).expect("a first endpoint");
    // Records: [selector, len, bytes...]; selector picks client/upstream/time step.
    let mut rest = data;
    while let [selector, len, tail @ ..] = rest {
        let len = usize::from(*len).min(tail.len());
        let (datagram, next) = tail.split_at(len);
        rest = next;
        match selector % 4 {
            0 | 1 => {
                let from: SocketAddr = format!("127.0.0.1:{}", 40000 + u16::from(selector / 4 % 8))
                    .parse()
                    .unwrap();
                proxy.handle_client_datagram(now, from, datagram);
            }
            2 => proxy.handle_upstream_datagram(now, upstream, datagram),
            _ => {
                now += Duration::from_millis(u64::from(*selector) * 97);
                proxy.handle_timeout(now);
            }
        }
        while proxy.poll_transmit().is_some() {}
        upstream = follow(&mut proxy, now).unwrap_or(upstream);
        assert!(proxy.live_exchanges() <= 64 + 64 + 1000);
        let c = proxy.counters();
        // The last request admitted may pass the budget by what its copy gains: up to 8
        // bytes of token, Hop-Limit, longer option headers (the Proxy-Uri's parts as options,
        // deltas across removed options), a few dozen bytes with 8 options at most.
        assert!(c.load.in_flight_bytes <= 1024 + 64, "{c:?}");
        assert!(c.kept.cached_answers <= 2 * 64, "{c:?}");
    }
});
