//! The demo's three phases, each on its own reactor, each returning what it measured for
//! [`super`] to check and print.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::Duration;

use super::burst::{BurstClient, BurstOutcome};
use super::upstream::{LossyUpstream, UpstreamLedger};
use backoffd::coap::Code;
use backoffd::proxy::{Counters, ProxyComponent, ProxyConfig, RetryPolicy, Routing};
use backoffd::reactor::{self, Reactor};
use backoffd::reconnect::client::{ClientConfig, ReconnectClient};
use backoffd::reconnect::server::{ReconnectServer, ServerConfig};

/// What phase 1 measured.
#[derive(Debug)]
pub struct CoapReport {
    /// Requests the burst client sent.
    pub requests: usize,
    /// Requests whose final answer was a 2.xx success.
    pub answered_2xx: usize,
    /// Requests the proxy gave up on with 5.04 Gateway Timeout.
    pub gateway_timeouts: usize,
    /// Requests answered with any other code.
    pub other_codes: usize,
    /// Requests the client gave up on without a final answer.
    pub unanswered: usize,
    /// Times the client retransmitted a request to the proxy.
    pub client_retransmissions: u64,
    /// The proxy's counters at the end of the phase.
    pub proxy: Counters,
    /// Datagrams the lossy upstream dropped, in either direction.
    pub upstream_dropped: u64,
    /// Retransmitted requests the upstream answered from its cache instead of executing.
    pub upstream_replays: u64,
    /// Request ids the upstream executed more than once (must be 0).
    pub duplicate_executions: usize,
}

impl CoapReport {
    /// Every request answered and nothing executed twice.
    pub fn passed(&self) -> bool {
        self.unanswered == 0 && self.duplicate_executions == 0 && self.answered_2xx > 0
    }
}

/// The demo's proxy policy: the shape of the defaults, scaled down so the demo is quick.
fn demo_policy() -> RetryPolicy {
    RetryPolicy {
        timeout: Duration::from_millis(150),
        max_retries: 4,
        backoff_factor: 1.5,
        jitter: 0.1,
        total_timeout: Duration::from_secs(4),
    }
}

/// Runs the proxy, a lossy upstream and a burst client in one reactor until the burst is done.
pub fn run_coap_phase(requests: usize, loss: f64, seed: u64) -> io::Result<CoapReport> {
    let ledger = Rc::new(RefCell::new(UpstreamLedger::default()));
    let outcome = Rc::new(RefCell::new(BurstOutcome::default()));
    let upstream = LossyUpstream::bind(loss, 0.2, seed, Rc::clone(&ledger))?;
    let config = ProxyConfig {
        policy: demo_policy(),
        // Retrying POSTs is safe here because the upstream deduplicates by Message ID, which
        // is exactly what the demo shows.
        non_idempotent: demo_policy(),
        routing: Routing {
            upstream: Some(upstream.local_addr()?),
            allow: Vec::new(),
            forward: false,
        },
        ack_delay: Duration::from_millis(50),
        seed: Some(seed),
        ..ProxyConfig::default()
    };
    let proxy = ProxyComponent::bind("127.0.0.1:0".parse().expect("literal"), config)?;
    let client = BurstClient::bind(
        proxy.local_addr()?,
        requests,
        loss / 2.0,
        seed,
        Rc::clone(&outcome),
    )?;
    let mut reactor = Reactor::new(reactor::Config {
        signals: false,
        drain_timeout: Duration::from_millis(200),
        ..reactor::Config::default()
    })?;
    reactor.add(Box::new(upstream))?;
    let proxy_index = reactor.add(Box::new(proxy))?;
    reactor.add(Box::new(client))?;
    reactor.run()?;
    let counters = reactor
        .component::<ProxyComponent>(proxy_index)
        .map(|p| p.engine().counters())
        .unwrap_or_default();
    let outcome = outcome.borrow();
    let ledger = ledger.borrow();
    let count =
        |f: &dyn Fn(Code) -> bool| outcome.answers.iter().flatten().filter(|&&c| f(c)).count();
    Ok(CoapReport {
        requests,
        answered_2xx: count(&|c| c.class() == 2),
        gateway_timeouts: count(&|c| c == Code::GATEWAY_TIMEOUT),
        other_codes: count(&|c| c.class() != 2 && c != Code::GATEWAY_TIMEOUT),
        unanswered: outcome.answers.iter().filter(|a| a.is_none()).count(),
        client_retransmissions: outcome.retransmissions,
        proxy: counters,
        upstream_dropped: ledger.dropped,
        upstream_replays: ledger.replayed,
        duplicate_executions: ledger.executions.values().filter(|&&n| n > 1).count(),
    })
}

/// What phase 2 measured.
#[derive(Debug)]
pub struct BackoffReport {
    /// The `max_reconnect_backoff_ms` the client asked the server to check against.
    pub max_backoff_ms: i32,
    /// The server's verdict, or why the run failed.
    pub result: Result<(bool, Vec<i32>), String>,
}

/// Runs the reconnect interop server and client against each other on loopback.
pub fn run_backoff_phase(
    max_backoff_ms: i32,
    duration: Duration,
    seed: u64,
) -> io::Result<BackoffReport> {
    let retry_port = free_port()?;
    let server = ReconnectServer::bind(ServerConfig::new(0, retry_port))?;
    let control_port = server.control_addr()?.port();
    let (client, outcome) = ReconnectClient::new(ClientConfig {
        server_host: "127.0.0.1".into(),
        server_ip: "127.0.0.1".parse().expect("literal"),
        control_port,
        retry_port,
        max_reconnect_backoff_ms: max_backoff_ms,
        test_duration: duration,
        seed,
        stop_timeout: Some(Duration::from_secs(10)),
    });
    let mut reactor = Reactor::new(reactor::Config {
        signals: false,
        drain_timeout: Duration::from_secs(1),
        ..reactor::Config::default()
    })?;
    reactor.add(Box::new(server))?;
    reactor.add(Box::new(client))?;
    reactor.run()?;
    let result = match outcome.borrow_mut().take() {
        Some(o) => o
            .result
            .map(|info| (info.passed, info.backoff_ms))
            .map_err(|f| format!("{f:?}")),
        None => Err("the client did not finish".into()),
    };
    Ok(BackoffReport {
        max_backoff_ms,
        result,
    })
}

/// A loopback port nobody listens on right now (the server binds it at the first Start).
fn free_port() -> io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
