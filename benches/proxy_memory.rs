//! Memory of the CoAP proxy: idle RSS of `backoffd proxy` and `backoffd serve`, RSS with
//! 100,000 exchanges in flight toward silent upstreams, heap bytes per exchange measured with a
//! counting allocator around the sans-IO engine, and the release binary's size, stripped and not.
//!
//! Goals (checked here, reported, never asserted in tests): idle proxy <= 4 MiB VmRSS, <= 512 B
//! per in-flight exchange without payload.
//!
//! Run: `cargo bench --bench proxy_memory`. Prints a markdown table and one JSON line.
//!
//! The load: the proxy gets a reverse upstream and one allowed forward target, both UDP sockets
//! that never read; half the GETs go to each (the forward half with a Proxy-Uri), so both paths
//! are in the figure (each upstream needs a second endpoint for its 50,000: one endpoint's
//! Message ID space holds 65,536 within the MID lifetime, RFC 7252 §4.4). The in-flight limits,
//! the per-client one included, are raised to fit the one client; every other flag is the
//! default but the timeouts, far longer than the measurement, so nothing is retransmitted or
//! expires; the CON requests get their empty ACK after the default 100 ms `--ack-delay`, as in
//! normal operation. Requests go out in batches, each waiting until the proxy's
//! `backoffd_coap_requests_total` counted it (a batch is resent if the proxy's receive buffer
//! dropped some; duplicates are absorbed), and the in-flight gauge must read 100,000 before RSS
//! is taken.

#[path = "../tests/common/mod.rs"]
mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use backoffd::coap::option::{PROXY_URI, URI_PATH};
use backoffd::coap::{Code, MessageBuilder, MessageType};
use backoffd::proxy::{
    AllowedTarget, Destination, KeptBounds, Limits, Proxy, ProxyConfig, RetryPolicy, Routing, Seeds,
};
use backoffd::time::Timestamp;
use common::exposition::scrape;
use common::{daemon, free_port};

/// Live heap bytes as requested, and as the allocator actually reserved (usable size).
struct Counting;
static REQUESTED: AtomicIsize = AtomicIsize::new(0);
static USABLE: AtomicIsize = AtomicIsize::new(0);

/// Live heap bytes now: (requested, usable).
fn allocated() -> (isize, isize) {
    (
        REQUESTED.load(Ordering::Relaxed),
        USABLE.load(Ordering::Relaxed),
    )
}

fn usable(p: *mut u8) -> isize {
    // SAFETY: `p` came from System (malloc family on Linux) and is live.
    unsafe { libc::malloc_usable_size(p.cast()) as isize }
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() {
            REQUESTED.fetch_add(l.size() as isize, Ordering::Relaxed);
            USABLE.fetch_add(usable(p), Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        REQUESTED.fetch_sub(l.size() as isize, Ordering::Relaxed);
        USABLE.fetch_sub(usable(p), Ordering::Relaxed);
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let before = usable(p);
        let q = System.realloc(p, l, new);
        if !q.is_null() {
            REQUESTED.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
            USABLE.fetch_add(usable(q) - before, Ordering::Relaxed);
        }
        q
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const EXCHANGES: u32 = 100_000;
const BATCH: u32 = 100;
const KIB: f64 = 1024.0;

/// VmRSS a moment after start-up (the loop is idle by then).
fn settle() {
    std::thread::sleep(Duration::from_millis(300));
}

fn idle_proxy_rss() -> u64 {
    let silent = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let up = silent.local_addr().expect("addr").to_string();
    let flags = [
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
        "--metrics",
        "127.0.0.1:0",
    ];
    let p = daemon::proxy("info", &flags);
    scrape(p.metrics.expect("a metrics listener"));
    settle();
    p.proc.status_kib("VmRSS:")
}

/// `backoffd serve`: proxy, gRPC reconnect server (which binds its ports on all interfaces,
/// as the interop spec has it) and metrics in one loop.
fn idle_serve_rss() -> u64 {
    let silent = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let up = silent.local_addr().expect("addr").to_string();
    let (control, retry) = (free_port().to_string(), free_port().to_string());
    let mut d = daemon::spawn(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &up,
            "--control_port",
            &control,
            "--retry_port",
            &retry,
            "--metrics",
            "127.0.0.1:0",
        ],
        "info",
    );
    d.wait_addr("CoAP proxy listening on ");
    let metrics = d.wait_addr("metrics listening on ");
    scrape(metrics);
    settle();
    d.status_kib("VmRSS:")
}

/// CON GET number `i`: distinct MID and token; odd ones carry a Proxy-Uri to `forward`.
fn request(i: u32, forward: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    let mut b = MessageBuilder::new(
        &mut out,
        MessageType::Con,
        Code::GET,
        i as u16,
        &i.to_be_bytes(),
    );
    if i % 2 == 1 {
        b.option(PROXY_URI, forward.as_bytes());
    }
    b.finish().expect("a small request");
    out
}

struct Loaded {
    idle_kib: u64,
    loaded_kib: u64,
    hwm_kib: u64,
    in_flight: f64,
    send_time: Duration,
}

fn loaded_proxy_rss() -> Loaded {
    let reverse = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let forward = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let (up, fwd) = (
        reverse.local_addr().expect("addr").to_string(),
        forward.local_addr().expect("addr").to_string(),
    );
    let daemon::Proxy {
        proc: d,
        coap: proxy,
        metrics,
        ..
    } = proxy_to_silent_peers(&up, &fwd);
    let metrics = metrics.expect("a metrics listener");
    scrape(metrics);
    settle();
    let idle_kib = d.status_kib("VmRSS:");

    let send_time = send_all_requests(proxy, metrics, &fwd);
    settle();
    let doc = scrape(metrics);
    let in_flight = doc.get("backoffd_coap_in_flight");
    assert_eq!(
        doc.get("backoffd_coap_forwarded_total"),
        f64::from(EXCHANGES)
    );
    assert_eq!(in_flight, f64::from(EXCHANGES), "exchanges in flight");
    assert_eq!(
        doc.get("backoffd_coap_live_exchanges"),
        f64::from(EXCHANGES)
    );
    let loaded_kib = d.status_kib("VmRSS:");
    let hwm_kib = d.status_kib("VmHWM:");
    drop((reverse, forward));
    Loaded {
        idle_kib,
        loaded_kib,
        hwm_kib,
        in_flight,
        send_time,
    }
}

/// A proxy to the silent upstream `up` and the silent forward target `fwd`, with room for
/// twice [`EXCHANGES`] and timeouts far longer than the run.
fn proxy_to_silent_peers(up: &str, fwd: &str) -> daemon::Proxy {
    let max = (2 * EXCHANGES).to_string();
    daemon::proxy(
        "info",
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            up,
            "--forward",
            "--allow",
            fwd,
            "--seed",
            "1",
            "--max-inflight",
            &max,
            "--max-inflight-per-upstream",
            &max,
            "--max-inflight-per-client",
            &max,
            "--max-cached",
            &max,
            "--timeout",
            "1000s",
            "--total-timeout",
            "2000s",
            "--non-idempotent-total-timeout",
            "2000s",
            "--upstream-exchange-lifetime",
            "2000s",
            "--metrics",
            "127.0.0.1:0",
        ],
    )
}

/// Sends [`EXCHANGES`] requests in batches of [`BATCH`], each batch resent until the proxy
/// counted it; returns how long that took.
fn send_all_requests(proxy: SocketAddr, metrics: SocketAddr, fwd: &str) -> Duration {
    let client = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let uri = format!("coap://{fwd}/");
    let start = Instant::now();
    let mut sent = 0u32;
    while sent < EXCHANGES {
        let end = (sent + BATCH).min(EXCHANGES);
        let mut tries = 0;
        loop {
            for i in sent..end {
                client.send_to(&request(i, &uri), proxy).expect("send");
            }
            tries += 1;
            let deadline = Instant::now() + Duration::from_millis(500);
            let mut counted = 0.0;
            while Instant::now() < deadline {
                counted = scrape(metrics).get("backoffd_coap_requests_total");
                if counted >= f64::from(end) {
                    break;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            if counted >= f64::from(end) {
                break;
            }
            assert!(tries < 20, "the proxy counted {counted} of {end} requests");
        }
        sent = end;
    }
    start.elapsed()
}

struct Heap {
    requested: f64,
    usable: f64,
}

/// The engine alone, in this process: heap bytes per exchange, as requested and as reserved.
fn engine_heap_per_exchange() -> Heap {
    let reverse: SocketAddr = "127.0.0.1:9".parse().expect("literal");
    let fwd: SocketAddr = "127.0.0.1:10".parse().expect("literal");
    let policy = RetryPolicy {
        timeout: Duration::from_secs(1000),
        total_timeout: Duration::from_secs(2000),
        ..RetryPolicy::DEFAULT
    };
    let max = 2 * EXCHANGES as usize;
    let config = ProxyConfig {
        policy,
        non_idempotent: RetryPolicy {
            max_retries: 1,
            ..policy
        },
        routing: Routing {
            upstream: Some(reverse),
            allow: vec![AllowedTarget {
                host: "127.0.0.1".into(),
                port: fwd.port(),
                addr: fwd,
            }],
            forward: true,
        },
        limits: Limits {
            max_inflight: max,
            max_inflight_per_upstream: max,
            max_inflight_per_client: max,
            ..Limits::default()
        },
        kept: KeptBounds {
            max_cached: max,
            ..KeptBounds::default()
        },
        upstream_exchange_lifetime: Duration::from_secs(2000),
        ..ProxyConfig::default()
    };
    config.validate().expect("a valid configuration");
    let client: SocketAddr = "127.0.0.1:40000".parse().expect("literal");
    let uri = format!("coap://{fwd}/");
    let reqs: Vec<Vec<u8>> = (0..EXCHANGES).map(|i| request(i, &uri)).collect();

    let before = allocated();
    let seeds = Seeds {
        rng: 1,
        hash: [1, 2],
    };
    let mut proxy = Proxy::new(config, seeds);
    let mut now = Timestamp::from_nanos(1_000_000_000);
    proxy.accept_endpoint_events(now);
    for (i, r) in reqs.iter().enumerate() {
        proxy.handle_client_datagram(now, client, r);
        proxy.accept_endpoint_events(now);
        while proxy.poll_transmit().is_some() {}
        // 10 us apart: the 100 ms ack delay fires for the early ones, as in the process.
        now = Timestamp::from_nanos(now.as_nanos() + 10_000);
        if i % 1000 == 0 {
            proxy.handle_timeout(now);
            while proxy.poll_transmit().is_some() {}
        }
    }
    assert_eq!(proxy.in_flight(), EXCHANGES as usize);
    let after = allocated();
    drop(proxy);
    let n = f64::from(EXCHANGES);
    Heap {
        requested: (after.0 - before.0) as f64 / n,
        usable: (after.1 - before.1) as f64 / n,
    }
}

/// Cache entries filled by [`engine_heap_per_cache_entry`].
const CACHED: u32 = 50_000;

/// Heap bytes per response cache entry: the engine fed [`CACHED`] GETs of distinct paths
/// (`/e/<i>`, 2.05 with 16 bytes, as the upstream answers them) with the cache on, less the
/// same run with it off (which keeps the same answers for retransmissions).
fn engine_heap_per_cache_entry() -> Heap {
    let run = |cache_size: usize| {
        let config = ProxyConfig {
            routing: Routing {
                upstream: Some("127.0.0.1:9".parse().expect("literal")),
                allow: Vec::new(),
                forward: false,
            },
            kept: KeptBounds {
                max_cached_per_client: CACHED as usize,
                ..KeptBounds::default()
            },
            cache_size,
            ..ProxyConfig::default()
        };
        let before = allocated();
        let seeds = Seeds {
            rng: 1,
            hash: [1, 2],
        };
        let mut proxy = Proxy::new(config, seeds);
        let now = Timestamp::from_nanos(1_000_000_000);
        proxy.accept_endpoint_events(now);
        let client: SocketAddr = "127.0.0.1:40000".parse().expect("literal");
        for i in 0..CACHED {
            let mut out = Vec::with_capacity(32);
            let mut b = MessageBuilder::new(
                &mut out,
                MessageType::Con,
                Code::GET,
                i as u16,
                &i.to_be_bytes(),
            );
            b.option(URI_PATH, b"e")
                .option(URI_PATH, i.to_string().as_bytes());
            b.finish().expect("a small request");
            proxy.handle_client_datagram(now, client, &out);
            while let Some(t) = proxy.poll_transmit() {
                if let Destination::Upstream(id) = t.to {
                    proxy.handle_upstream_datagram(now, id, &content(&t.payload));
                }
            }
        }
        let after = allocated();
        drop(proxy);
        (after.0 - before.0, after.1 - before.1)
    };
    let (on, off) = (run(256 << 20), run(0));
    let n = f64::from(CACHED);
    Heap {
        requested: (on.0 - off.0) as f64 / n,
        usable: (on.1 - off.1) as f64 / n,
    }
}

/// A piggybacked 2.05 of 16 bytes to the upstream request `req`.
fn content(req: &[u8]) -> Vec<u8> {
    let req = backoffd::coap::Message::parse(req).expect("the proxy's request");
    let mut out = Vec::with_capacity(32);
    let mut b = MessageBuilder::new(
        &mut out,
        MessageType::Ack,
        Code::CONTENT,
        req.message_id(),
        req.token(),
    );
    b.payload(b"0123456789abcdef");
    b.finish().expect("a small answer");
    out
}

fn binary_sizes() -> (u64, Option<u64>) {
    let bin = env!("CARGO_BIN_EXE_backoffd");
    let size = std::fs::metadata(bin).expect("the binary").len();
    let copy = std::env::temp_dir().join(format!("backoffd-strip-{}", std::process::id()));
    std::fs::copy(bin, &copy).expect("copy the binary");
    let stripped = Command::new("strip")
        .arg(&copy)
        .status()
        .ok()
        .filter(|s| s.success())
        .and_then(|_| std::fs::metadata(&copy).ok())
        .map(|m| m.len());
    let _ = std::fs::remove_file(&copy);
    (size, stripped)
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs this with no such flag: keep
    // that pass quick by skipping the work.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let (unstripped, stripped) = binary_sizes();
    let idle = idle_proxy_rss();
    let serve = idle_serve_rss();
    let loaded = loaded_proxy_rss();
    let heap = engine_heap_per_exchange();
    let cache_entry = engine_heap_per_cache_entry();
    let per_exchange =
        (loaded.loaded_kib as f64 - loaded.idle_kib as f64) * KIB / f64::from(EXCHANGES);

    let verdict = |ok: bool| if ok { "ok" } else { "OVER" };
    println!("| measure | value | goal |");
    println!("| --- | ---: | --- |");
    println!(
        "| `backoffd proxy` idle VmRSS | {} KiB ({:.2} MiB) | <= 4 MiB: {} |",
        idle,
        idle as f64 / KIB,
        verdict(idle <= 4 * 1024)
    );
    println!(
        "| `backoffd serve` idle VmRSS (proxy + reconnect server + metrics) | {} KiB ({:.2} MiB) | |",
        serve,
        serve as f64 / KIB
    );
    println!(
        "| proxy VmRSS before load (same process) | {} KiB | |",
        loaded.idle_kib
    );
    println!(
        "| proxy VmRSS, {} in flight | {} KiB (VmHWM {} KiB) | |",
        loaded.in_flight, loaded.loaded_kib, loaded.hwm_kib
    );
    println!(
        "| VmRSS per in-flight exchange | {:.0} B | <= 512 B: {} |",
        per_exchange,
        verdict(per_exchange <= 512.0)
    );
    println!(
        "| engine heap per exchange (requested / allocator usable) | {:.0} B / {:.0} B | |",
        heap.requested, heap.usable
    );
    println!(
        "| engine heap per response cache entry, {} entries of a 16-byte 2.05 at /e/<i> (requested / usable) | {:.0} B / {:.0} B | |",
        CACHED, cache_entry.requested, cache_entry.usable
    );
    println!(
        "| release binary, unstripped / stripped | {} B / {} | |",
        unstripped,
        stripped.map_or("strip failed".into(), |s| format!("{s} B"))
    );
    println!(
        "| time to put {} exchanges in flight | {:.1?} | |",
        EXCHANGES, loaded.send_time
    );
    println!(
        "{{\"bench\":\"proxy_memory\",\"idle_rss_kib\":{},\"serve_idle_rss_kib\":{},\"rss_before_load_kib\":{},\"rss_loaded_kib\":{},\"exchanges\":{},\"rss_bytes_per_exchange\":{:.1},\"heap_bytes_per_exchange\":{:.1},\"heap_usable_bytes_per_exchange\":{:.1},\"heap_bytes_per_cache_entry\":{:.1},\"binary_bytes\":{},\"stripped_binary_bytes\":{}}}",
        idle,
        serve,
        loaded.idle_kib,
        loaded.loaded_kib,
        EXCHANGES,
        per_exchange,
        heap.requested,
        heap.usable,
        cache_entry.requested,
        unstripped,
        stripped.map_or("null".into(), |s| s.to_string())
    );
}
