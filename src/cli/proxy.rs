//! `backoffd proxy`: the CoAP forwarding proxy with its own upstream retry policy.

use std::net::SocketAddr;
use std::time::Duration;

use super::flags::{switch, value, DurationArg, Flags, Parsed, SizeArg, Spec, UsageError};
use super::resolve;
use super::shared_flags::{source_prefix, upstream_flag};
use backoffd::proxy::{
    AllowedTarget, ClientBudget, KeptBounds, Limits, ProxyConfig, RetryPolicy, Routing,
};
use backoffd::reactor::{self, Reactor, WakeMode};

pub const HELP: &str = "\
Usage: backoffd proxy --upstream HOST:PORT [options]
       backoffd proxy --forward --allow HOST:PORT [--allow ...] [options]

A CoAP (RFC 7252) forwarding proxy with its own upstream retry policy. Client retransmissions
are deduplicated (source address, token, Message ID) and never forwarded again; each upstream
request gets the proxy's own Message ID and token.

Routing:
  --listen ADDR                  client-facing address (default 0.0.0.0:5683; [::]:5683 is dual-stack)
  --upstream HOST:PORT           reverse proxy: where requests without Proxy-Uri go; also
                                 coap://HOST[:PORT] (5683), coaps://HOST[:PORT] (5684, DTLS)
                                 coap+tcp://HOST[:PORT] (5683, RFC 8323: never resent) or
                                 coaps+tcp://HOST[:PORT] (5684, TLS: needs --upstream-ca)
  --forward                      also act as a forward proxy (Proxy-Uri / Proxy-Scheme, coap only)
  --allow HOST:PORT              a forward-proxy target (repeat); nothing else is reachable

Upstream retry policy (delay before retry k = timeout * factor^(k-1) * U[1-jitter, 1+jitter]):
  --preset lan|wan|rfc7252       lan: 1s, 2 retries, 5s total; wan: 3s, 5 retries, 30s total;
                                 rfc7252: 2.5s +-20%, doubling, 4 retries, 93s total
  --timeout D                    initial retransmission timeout (default 2s)
  --max-retries N                retransmissions after the first send, 0 = send once (default 4)
  --backoff-factor F             multiplier per retry, >= 1 (default 1.5)
  --jitter F                     random spread 0 <= F < 1 (default 0.1)
  --total-timeout D              cap on the whole upstream exchange -> 5.04 (default 30s)
  --non-idempotent-timeout D, --non-idempotent-max-retries N, --non-idempotent-backoff-factor F,
  --non-idempotent-jitter F, --non-idempotent-total-timeout D
                                 the same for POST, PATCH and iPATCH (default: the general
                                 policy with at most 1 retry and at most 15s total)

Limits and timing:
  --max-inflight N               requests in flight upstream at once; more get 5.03 (default 10000)
  --max-inflight-per-upstream N  the same per upstream (default 10000)
  --max-inflight-per-client N    the same per client address and port (default 256)
  --max-upstream-endpoints N     sockets of the proxy's own per upstream, opened as the load needs
                                 them; each has its own 65536 Message IDs per lifetime (265
                                 requests/s at 247s), so 1024 sustain ~271,000 requests/s per
                                 upstream; each is a file descriptor and, to the upstream, a
                                 peer of its own (default 1024; past it: 5.03)
  --max-inflight-bytes BYTES     what the copies of the requests in flight may take; past
                                 it: 5.03 (default 4MiB)
  --max-request-size N           longest request datagram taken, bytes; longer: 4.13 with
                                 Size1 (default 1152, RFC 7252 §4.6; at most 65527)
  --max-options N                options per request, a Proxy-Uri counting as its Uri-Path and
                                 Uri-Query parts; more: 4.02 (default 64)
  --max-cached N                 finished answers kept for duplicates (default 100000)
  --max-cached-per-client N      of those, one client's at most: past it its own oldest go
                                 first (default 10000)
  --max-cached-bytes BYTES       what those answers may take, the proxy's own kept apart
                                 within as much again; past it the oldest go (default 8MiB)
  --max-cached-bytes-per-client BYTES
                                 of those, one client's at most: past it its own oldest go;
                                 a longer answer is kept without its bytes, and a
                                 retransmission then gets nothing (default 1MiB)
  --cache-size BYTES             response cache (RFC 7252 §5.6) for GET and FETCH: what it may
                                 hold, its bookkeeping included; the least recently used entry
                                 goes first (default 0: off; at most 1024MiB)
  --max-observations N           live observations (default 1000)
  --max-observations-per-source N
                                 of those, one source's (--source-prefix) at most; past it a
                                 registration gets its answer without Observe (default an
                                 eighth of --max-observations: 125)
  --source-prefix V4,V6          what one source is, for every per-source share: an IPv4
                                 prefix and an IPv6 prefix (default /32,/64)
  --observe-con-every N          at least every Nth notification to a client is a CON; one
                                 never acknowledged ends the observation (default 20,
                                 RFC 7641 §4.5; and at least one every 24 h)
  --client-bytes-per-sec N       opt-in send rate per client address and port, on average
                                 (token bucket); a request whose answer it could not take gets
                                 5.03 with Max-Age (default 0: off; reflection is bounded by
                                 proof of receipt instead, see --validate-sources)
  --client-burst-bytes N         ... at once (default 262144; at least 65527)
  --client-datagrams-per-sec N   datagrams per second on average (default 200)
  --client-burst-datagrams N     datagrams at once (default 512)
  --validate-sources             strict address validation (RFC 9175 §2.4). Always on: a source
                                 that has not proven it receives (by ACKing a CON of ours, or by
                                 an Echo) is sent at most 3x what it sent, and an answer that
                                 does not fit goes as a CON asking for that proof. Strict: a
                                 request whose answer may not fit gets 4.01 with an Echo to
                                 repeat (60 s) first (default off)
  --ack-delay D                  hold a CON's ACK this long hoping to piggyback (default 100ms)
  --upstream-exchange-lifetime D how long an upstream Message ID stays reserved per endpoint
                                 (RFC 7252 §4.4; default 247s)
  --overload-max-age D           Max-Age of 5.03 answers (default 2s)
  --hop-limit N                  Hop-Limit added when a request has none (default 16)
  --drain D                      on SIGINT/SIGTERM, time to finish requests in flight (default 5s)
  --metrics HOST:PORT            serve GET /metrics (Prometheus text) and /healthz over HTTP/1.1
                                 there, e.g. 127.0.0.1:9102 (keep it on loopback or a private net)
  --wake SRC                     timer wake-up source: timerfd (default), epoll, or pwait2
                                 (Linux 5.11+, else timerfd)
  --seed N                       seed for jitter, tokens and Message IDs (default: random)
  -h, --help                     this help

HTTP cross-proxy (RFC 8075), off unless --http-listen is given:
  --http-listen ADDR             also take HTTP/1.1 there: GET http://ADDR/hc/coap://HOST:PORT/path
                                 reaches an allowed target, GET http://ADDR/path the upstream;
                                 same routes, retry policy, limits and cache as CoAP clients
  --http-cors ORIGIN             allow pages from ORIGIN (or *) to fetch and subscribe (CORS)
  --http-max-body BYTES          largest request or response body (default 256KiB; at most 64MiB)
  --http-timeout D               an HTTP request's whole CoAP exchange, every block (default 60s)
  --http-max-connections N       HTTP connections at once, each with up to 4 pipelined requests
                                 (default 128)
  --http-max-streams N           event streams (Accept: text/event-stream) at once (default 64)
  --http-max-inflight-bytes BYTES
                                 what HTTP request bodies in flight may hold together; past
                                 it, 503 + Retry-After (default 8MiB, at least --http-max-body)

coaps (DTLS 1.2, RFC 7252 §9; cargo feature `dtls`, on by default):
  --listen-dtls ADDR             a coaps listener; without --listen no plain port is opened
  --psk-identity ID              a PSK identity (repeat, each with its --psk-key-file)
  --psk-key-file FILE            its key: the file's raw bytes (1 to 64)
  --dtls-cert FILE, --dtls-key FILE
                                 certificate chain and key (PEM) for the ECDHE_ECDSA suites
  --dtls-client-ca FILE          require client certificates chaining to these CAs (PEM)
  --dtls-max-sessions N          sessions at once, handshaking or established (default 10000)
  --dtls-max-sessions-per-source N
                                 of those, from one source (--source-prefix; default 64)
  --dtls-max-handshakes N        of the sessions, still handshaking at once (default 2000); at
                                 any of these caps the oldest handshake makes room
  --dtls-max-handshakes-per-source N
                                 of those, from one source (default 8)
  --dtls-handshake-timeout D     from the verified ClientHello to Finished (default 10s)
  --dtls-idle-timeout D          a session with no record either way is dropped (default 300s)
  --upstream-psk-identity ID, --upstream-psk-key-file FILE
                                 with --upstream coaps://: the PSK the proxy offers the origin
  --upstream-ca FILE             with --upstream coaps:// or coaps+tcp://: the origin's
                                 certificate must chain to these CAs (PEM) and name the
                                 URI's host

CoAP over TCP, TLS and WebSockets (RFC 8323; cargo feature `tcp`, on by default):
  --listen-tcp ADDR              a coap+tcp listener (the plain UDP port stays open)
  --listen-tls ADDR              a coaps+tcp listener (rustls, ALPN coap), coaps+ws too
                                 (ALPN http/1.1); without --listen no plain port is opened
  --tls-cert FILE, --tls-key FILE
                                 its certificate chain and private key (PEM)
  --listen-ws ADDR               a coap+ws listener (GET /.well-known/coap, subprotocol coap)
  --tcp-max-connections N        connections at once per listener; at the cap the oldest
                                 without a CSM is closed for a new one, else an idle one
                                 (nothing in flight, no observation) of the source holding
                                 the most, quiet longest; else the new one is (default 512)
  --tcp-max-connections-per-source N
                                 of those, from one source (--source-prefix), the same rule
                                 among its own (default 32)
  --tcp-csm-timeout D            the peer's CSM must come within it, and a Pong (default 10s)
  --tcp-idle-timeout D           a quiet connection is pinged after it (default 300s)
  --tcp-message-timeout D        a message begun must be whole within it, else Abort
                                 (default 10s)

Durations: 500ms, 2s, 1.5s, 250us, 1m. Sizes: 65536, 64KiB, 4MiB (bytes, or 1024-based
units). Invalid configuration exits 2 naming the flag.
";

const CORE_SPEC: &[Spec] = &[
    value("listen"),
    value("upstream"),
    switch("forward"),
    value("allow"),
    value("preset"),
    value("timeout"),
    value("max-retries"),
    value("backoff-factor"),
    value("jitter"),
    value("total-timeout"),
    value("non-idempotent-timeout"),
    value("non-idempotent-max-retries"),
    value("non-idempotent-backoff-factor"),
    value("non-idempotent-jitter"),
    value("non-idempotent-total-timeout"),
    value("max-inflight"),
    value("max-inflight-per-upstream"),
    value("max-inflight-per-client"),
    value("max-upstream-endpoints"),
    value("max-inflight-bytes"),
    value("max-request-size"),
    value("max-options"),
    value("max-cached"),
    value("max-cached-per-client"),
    value("max-cached-bytes"),
    value("max-cached-bytes-per-client"),
    value("cache-size"),
    value("max-observations"),
    value("max-observations-per-source"),
    value("source-prefix"),
    value("observe-con-every"),
    switch("validate-sources"),
    value("client-bytes-per-sec"),
    value("client-burst-bytes"),
    value("client-datagrams-per-sec"),
    value("client-burst-datagrams"),
    value("ack-delay"),
    value("upstream-exchange-lifetime"),
    value("overload-max-age"),
    value("hop-limit"),
    value("drain"),
    value("wake"),
    value("seed"),
    value("metrics"),
];

/// Every flag of `backoffd proxy` (and of a `serve` `[proxy]` section): the proxy's and the
/// HTTP cross-proxy's.
pub(super) fn spec() -> Vec<Spec> {
    CORE_SPEC
        .iter()
        .chain(super::http::SPEC)
        .chain(super::dtls::SPEC)
        .chain(super::dtls::UPSTREAM_SPEC)
        .chain(super::stream::SPEC)
        .copied()
        .collect()
}

/// A parsed and validated `backoffd proxy` command line.
#[derive(Debug)]
pub struct ProxyArgs {
    listen: Option<SocketAddr>,
    dtls: Option<super::dtls::DtlsPart>,
    coaps_upstream: Option<super::dtls::UpstreamPart>,
    streams: Option<super::stream::StreamPart>,
    config: ProxyConfig,
    wake: WakeMode,
    drain: Duration,
    metrics: Option<SocketAddr>,
    http: Option<super::http::HttpPart>,
}

/// Runs the subcommand; returns the process exit code.
pub fn main(args: &[String]) -> Result<i32, UsageError> {
    match parse(args)?.or_print_help(HELP) {
        Some(a) => run(a),
        None => Ok(0),
    }
}

/// Parses and validates the command line (logging configuration warnings); binds nothing.
pub fn parse(args: &[String]) -> Result<Parsed<ProxyArgs>, UsageError> {
    let flags = Flags::parse(args, &spec())?;
    if flags.help {
        return Ok(Parsed::Help);
    }
    let dtls = super::dtls::from_flags(&flags)?;
    let coaps_upstream = super::dtls::upstream_from_flags(&flags)?;
    let streams = super::stream::from_flags(&flags)?;
    let secure = dtls.is_some() || streams.as_ref().is_some_and(super::stream::is_secure);
    let listen = plain_listen(&flags, secure, "0.0.0.0:5683")?;
    let config = config_from_flags(&flags)?;
    for warning in config.validate().map_err(|e| UsageError(e.0))? {
        log::warn!("{warning}");
    }
    let wake = flags.get_or("wake", WakeMode::Timerfd)?;
    let drain = flags
        .get_or("drain", DurationArg(Duration::from_secs(5)))?
        .0;
    let metrics = super::metrics_flag(&flags)?;
    let http = super::http::from_flags(&flags, &config)?;
    Ok(Parsed::Run(ProxyArgs {
        listen,
        dtls,
        coaps_upstream,
        streams,
        config,
        wake,
        drain,
        metrics,
        http,
    }))
}

fn run(args: ProxyArgs) -> Result<i32, UsageError> {
    let ProxyArgs {
        listen,
        dtls,
        coaps_upstream,
        streams,
        config,
        wake,
        drain,
        metrics,
        http,
    } = args;
    let fail = |what: &str, e: std::io::Error| {
        eprintln!("backoffd proxy: {what}: {e}");
        Ok(1)
    };
    super::make_room_for_endpoints([&config], super::stream_connections(streams.as_ref()));
    let mut reactor = match Reactor::new(reactor::Config {
        wake,
        signals: true,
        drain_timeout: drain,
    }) {
        Ok(r) => r,
        Err(e) => return fail("cannot start the event loop", e),
    };
    let mut sources = Vec::new();
    let (component, line) = match super::proxy_part(
        super::ProxyListeners {
            listen,
            dtls,
            streams,
        },
        coaps_upstream,
        config,
        http,
        &mut sources,
    ) {
        Ok(part) => part,
        Err(e) => {
            eprintln!("backoffd proxy: {e}");
            return Ok(1);
        }
    };
    if let Err(e) = reactor.add(component) {
        return fail("cannot register sockets", e);
    }
    log::info!("{line}");
    if let Err(e) = super::add_metrics(&mut reactor, metrics, sources) {
        eprintln!("backoffd proxy: {e}");
        return Ok(1);
    }
    match reactor.run() {
        Ok(()) => Ok(0),
        Err(e) => fail("event loop failed", e),
    }
}

/// `--listen`, or `default` unless coaps is the only listener asked for: a plain socket
/// beside a coaps one would let clients past its keys, so it is opened only when asked.
pub(super) fn plain_listen(
    flags: &Flags,
    coaps: bool,
    default: &str,
) -> Result<Option<SocketAddr>, UsageError> {
    match flags.get::<SocketAddr>("listen")? {
        Some(addr) => Ok(Some(addr)),
        None if coaps => Ok(None),
        None => Ok(Some(default.parse().expect("literal"))),
    }
}

/// Builds the proxy configuration from flags: preset first, then explicit flags on top.
pub fn config_from_flags(flags: &Flags) -> Result<ProxyConfig, UsageError> {
    let base = match flags.get::<String>("preset")?.as_deref() {
        None => RetryPolicy::DEFAULT,
        Some("lan") => RetryPolicy::LAN,
        Some("wan") => RetryPolicy::WAN,
        Some("rfc7252") => RetryPolicy::RFC7252,
        Some(other) => {
            return Err(UsageError(format!(
                "--preset: unknown preset {other:?} (use lan, wan or rfc7252)"
            )))
        }
    };
    let policy = policy_from_flags(flags, "", base)?;
    let non_idempotent = policy_from_flags(flags, "non-idempotent-", policy.non_idempotent())?;
    let defaults = ProxyConfig::default();
    let forward = flags.has("forward");
    let allow = flags
        .get_all::<String>("allow")?
        .iter()
        .map(|a| resolve_allowed(a))
        .collect::<Result<Vec<_>, _>>()?;
    let upstream = upstream_flag(flags)?.map(|u| u.addr);
    Ok(ProxyConfig {
        policy,
        non_idempotent,
        routing: Routing {
            upstream,
            allow,
            forward,
        },
        limits: limits_from_flags(flags, &defaults.limits)?,
        kept: kept_from_flags(flags, &defaults.kept)?,
        cache_size: cache_size_flag(flags, defaults.cache_size)?,
        observe_con_every: flags.get_or("observe-con-every", defaults.observe_con_every)?,
        client_budget: budget_from_flags(flags, defaults.client_budget)?,
        validate_sources: flags.has("validate-sources"),
        ack_delay: flags
            .get_or("ack-delay", DurationArg(defaults.ack_delay))?
            .0,
        upstream_exchange_lifetime: flags
            .get_or(
                "upstream-exchange-lifetime",
                DurationArg(defaults.upstream_exchange_lifetime),
            )?
            .0,
        overload_max_age: flags
            .get_or("overload-max-age", DurationArg(defaults.overload_max_age))?
            .0,
        default_hop_limit: flags.get_or("hop-limit", defaults.default_hop_limit)?,
        seed: flags.get("seed")?,
        local_addr: None,
    })
}

/// `--max-inflight` and the other limits of what the proxy takes in flight.
fn limits_from_flags(flags: &Flags, defaults: &Limits) -> Result<Limits, UsageError> {
    let max_observations = flags.get_or("max-observations", defaults.max_observations)?;
    Ok(Limits {
        max_inflight: flags.get_or("max-inflight", defaults.max_inflight)?,
        max_inflight_per_upstream: flags.get_or(
            "max-inflight-per-upstream",
            defaults.max_inflight_per_upstream,
        )?,
        max_inflight_per_client: flags
            .get_or("max-inflight-per-client", defaults.max_inflight_per_client)?,
        max_upstream_endpoints: flags
            .get_or("max-upstream-endpoints", defaults.max_upstream_endpoints)?,
        max_inflight_bytes: flags
            .get_or("max-inflight-bytes", SizeArg(defaults.max_inflight_bytes))?
            .0,
        max_request_size: flags.get_or("max-request-size", defaults.max_request_size)?,
        max_options: flags.get_or("max-options", defaults.max_options)?,
        max_observations,
        max_observations_per_source: flags.get_or(
            "max-observations-per-source",
            Limits::observation_share(max_observations),
        )?,
        source_prefix: source_prefix(flags)?,
    })
}

/// `--cache-size`. A build without the `cache` feature knows the flag and refuses it in one
/// line, as one without `http` refuses the cross-proxy's (`http.rs`): neither unknown nor ignored.
fn cache_size_flag(flags: &Flags, default: usize) -> Result<usize, UsageError> {
    if !cfg!(feature = "cache") && flags.has("cache-size") {
        return Err(UsageError(
            "--cache-size: this backoffd was built without the response cache (cargo feature `cache`)".into(),
        ));
    }
    Ok(flags.get_or("cache-size", SizeArg(default))?.0)
}

/// `--max-cached` and the other bounds of the answers kept for retransmissions.
fn kept_from_flags(flags: &Flags, defaults: &KeptBounds) -> Result<KeptBounds, UsageError> {
    let size = |name: &str, default: usize| flags.get_or(name, SizeArg(default)).map(|s| s.0);
    Ok(KeptBounds {
        max_cached: flags.get_or("max-cached", defaults.max_cached)?,
        max_cached_per_client: flags
            .get_or("max-cached-per-client", defaults.max_cached_per_client)?,
        max_cached_bytes: size("max-cached-bytes", defaults.max_cached_bytes)?,
        max_cached_bytes_per_client: size(
            "max-cached-bytes-per-client",
            defaults.max_cached_bytes_per_client,
        )?,
    })
}

fn budget_from_flags(flags: &Flags, base: ClientBudget) -> Result<ClientBudget, UsageError> {
    Ok(ClientBudget {
        bytes_per_sec: flags.get_or("client-bytes-per-sec", base.bytes_per_sec)?,
        burst_bytes: flags.get_or("client-burst-bytes", base.burst_bytes)?,
        datagrams_per_sec: flags.get_or("client-datagrams-per-sec", base.datagrams_per_sec)?,
        burst_datagrams: flags.get_or("client-burst-datagrams", base.burst_datagrams)?,
        max_sources: base.max_sources,
    })
}

fn policy_from_flags(
    flags: &Flags,
    prefix: &str,
    base: RetryPolicy,
) -> Result<RetryPolicy, UsageError> {
    let name = |n: &str| format!("{prefix}{n}");
    Ok(RetryPolicy {
        timeout: flags.get_or(&name("timeout"), DurationArg(base.timeout))?.0,
        max_retries: flags.get_or(&name("max-retries"), base.max_retries)?,
        backoff_factor: flags.get_or(&name("backoff-factor"), base.backoff_factor)?,
        jitter: flags.get_or(&name("jitter"), base.jitter)?,
        total_timeout: flags
            .get_or(&name("total-timeout"), DurationArg(base.total_timeout))?
            .0,
    })
}

fn resolve_allowed(hostport: &str) -> Result<AllowedTarget, UsageError> {
    let addr = resolve("allow", hostport)?;
    let (host, _) = hostport
        .rsplit_once(':')
        .ok_or_else(|| UsageError(format!("--allow: {hostport:?} is not HOST:PORT")))?;
    Ok(AllowedTarget {
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase(),
        port: addr.port(),
        addr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(line: &str) -> Result<usize, UsageError> {
        let args: Vec<String> = line.split_whitespace().map(String::from).collect();
        match parse(&args)? {
            Parsed::Run(a) => Ok(a.config.limits.max_observations_per_source),
            Parsed::Help => unreachable!(),
        }
    }

    #[test]
    fn one_sources_share_of_the_observations_is_an_eighth_of_them_unless_given() {
        let up = "--upstream 127.0.0.1:5684";
        assert_eq!(share(up), Ok(125));
        assert_eq!(share(&format!("{up} --max-observations 10000")), Ok(1250));
        assert_eq!(share(&format!("{up} --max-observations 3")), Ok(1));
        let given = format!("{up} --max-observations 100 --max-observations-per-source 40");
        assert_eq!(share(&given), Ok(40));
        let zero = share(&format!("{up} --max-observations-per-source 0")).unwrap_err();
        assert!(
            zero.0.contains("--max-observations-per-source"),
            "{}",
            zero.0
        );
    }
}
