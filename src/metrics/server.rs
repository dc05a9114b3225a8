//! The metrics and health endpoint as a reactor component: an HTTP/1.1 listener (loopback by
//! default, [`crate::http1::driver::HttpServer`]) whose requests are answered from
//! [`super::routes`] at once.

// I/O module: The metrics endpoint's component: logs for its listener.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use super::routes::{route, HttpStats, Reply};
use super::{write_loop_metrics, MetricsSources, MetricsWriter};
use crate::http1::driver::{ConnId, HttpApp, HttpServer};
use crate::http1::{self, Http1Connection, Request};
use crate::reactor::{Component, Ctx, Readiness};
use crate::timer::TimerId;

/// Where the endpoint listens unless configured: loopback, so metrics stay on the host.
pub const DEFAULT_ADDR: &str = "127.0.0.1:9102";
/// How long a kept-alive connection may wait for its next request. Shorter than HTTP/1.1's
/// usual minute: a scraper reconnects cheaply, and idle connections hold slots of the cap.
pub const KEEP_ALIVE_IDLE: Duration = Duration::from_secs(10);
/// The listener's registration key; connection `i` has key `i + 1`.
const LISTENER: u32 = 0;

/// Endpoint settings.
#[derive(Clone, Debug)]
pub struct MetricsConfig {
    /// Address to listen on; [`DEFAULT_ADDR`] unless configured.
    pub addr: SocketAddr,
    /// Limits and timeouts of each HTTP/1.1 connection.
    pub http: http1::Config,
    /// Connections open at once. At the cap, a new connection replaces the one idle the
    /// longest between requests, or, if none is idle, is closed as soon as it is accepted.
    pub max_connections: usize,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            addr: DEFAULT_ADDR.parse().expect("literal"),
            http: http1::Config {
                idle_timeout: KEEP_ALIVE_IDLE,
                ..http1::Config::default()
            },
            max_connections: 64,
        }
    }
}

/// The endpoint. See the module docs.
pub struct MetricsServer {
    server: HttpServer,
    routes: Routes,
}

/// What answers the requests: the metrics sources and the endpoint's own counts.
struct Routes {
    /// What a scrape reports besides the loop and this endpoint, in order.
    sources: MetricsSources,
    stats: HttpStats,
    /// Open connections.
    open: usize,
}

impl HttpApp for Routes {
    fn request(&mut self, ctx: &mut Ctx<'_>, _: ConnId, req: Request, http: &mut Http1Connection) {
        let reply = Reply::new(route(&req.method, &req.path), || self.document(ctx));
        self.stats.count(reply.status);
        http.respond_with(reply.status, reply.fields, reply.content_type, &reply.body);
    }

    fn refused(&mut self, status: u16) {
        self.stats.count(status);
    }

    fn opened(&mut self, _: ConnId) {
        self.open += 1;
        self.stats.connections += 1;
    }

    fn closed(&mut self, _: crate::time::Timestamp, _: ConnId) {
        self.open -= 1;
    }
}

impl Routes {
    /// The loop's metrics, every source's, then this endpoint's own.
    fn document(&self, ctx: &Ctx<'_>) -> String {
        let mut out = MetricsWriter::new();
        write_loop_metrics(ctx.loop_stats(), &mut out);
        for source in &self.sources {
            source.write_metrics(&mut out);
        }
        self.stats.write(&mut out, self.open);
        out.finish()
    }
}

impl MetricsServer {
    /// Binds the listener; failures surface at start-up. A scrape reports the loop's own
    /// metrics, then `sources`, then this endpoint's.
    pub fn bind(config: MetricsConfig, sources: MetricsSources) -> io::Result<Self> {
        let server = HttpServer::bind(config.addr, config.http, config.max_connections, LISTENER)?;
        Ok(MetricsServer {
            server,
            routes: Routes {
                sources,
                stats: HttpStats::default(),
                open: 0,
            },
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.server.local_addr()
    }

    /// Copies the server's connection counts into the stats a scrape reports (as of the
    /// event being handled: a connection accepted in it is counted by the next scrape).
    fn snapshot(&mut self) {
        let (counts, failures) = self.server.counts();
        let stats = &mut self.routes.stats;
        stats.connections_refused = counts.refused;
        stats.idle_closed = counts.idle_closed;
        stats.slow_closed = counts.slow_closed;
        stats.accept_failures = failures;
    }
}

impl Component for MetricsServer {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        let addr = self.local_addr()?;
        self.server.start(ctx, "metrics")?;
        log::info!("metrics listening on {addr} (http://{addr}/metrics)");
        Ok(())
    }

    fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, ready: Readiness) {
        self.snapshot();
        self.server.on_ready(ctx, key, ready, &mut self.routes);
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, key: u32) {
        self.snapshot();
        self.server.on_timer(ctx, timer, key, &mut self.routes);
    }

    /// Stops accepting, then lets every connection finish the answers it owes and close.
    fn on_shutdown(&mut self, ctx: &mut Ctx<'_>) {
        self.server.shutdown(ctx, &mut self.routes);
    }

    fn is_drained(&self) -> bool {
        self.server.connections() == 0
    }
}
