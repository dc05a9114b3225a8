//! The proxy's configuration: upstream retry policies, presets, limits, routing, and validation.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use crate::coap::params;
use crate::source_prefix::PrefixLengths;

use super::ClientBudget;

/// How the proxy retries one upstream request (its own policy, not the client's).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Wait before the first retransmission.
    pub timeout: Duration,
    /// Retransmissions after the first send; 0 sends once.
    pub max_retries: u32,
    /// Each wait is the previous one times this.
    pub backoff_factor: f64,
    /// Each wait is multiplied by a uniform factor in `[1 - jitter, 1 + jitter]`.
    pub jitter: f64,
    /// Hard cap on the whole upstream exchange, separate responses included: 5.04 when reached.
    pub total_timeout: Duration,
}

impl RetryPolicy {
    /// RFC 7252 §4.8 defaults: an initial timeout uniform in ACK_TIMEOUT x [1, ACK_RANDOM_FACTOR]
    /// = [2 s, 3 s] (2.5 s +-20 %), doubling, MAX_RETRANSMIT 4, MAX_TRANSMIT_WAIT as the cap.
    pub const RFC7252: RetryPolicy = RetryPolicy {
        timeout: Duration::from_millis(2500),
        max_retries: params::MAX_RETRANSMIT,
        backoff_factor: 2.0,
        jitter: 0.2,
        total_timeout: params::MAX_TRANSMIT_WAIT,
    };
    /// The documented defaults: 2 s, 4 retries, x1.5, +-10 %, 30 s total.
    pub const DEFAULT: RetryPolicy = RetryPolicy {
        timeout: Duration::from_secs(2),
        max_retries: 4,
        backoff_factor: 1.5,
        jitter: 0.1,
        total_timeout: Duration::from_secs(30),
    };
    /// LAN (RTT < 10 ms): answer fast or fail fast.
    pub const LAN: RetryPolicy = RetryPolicy {
        timeout: Duration::from_secs(1),
        max_retries: 2,
        backoff_factor: 1.5,
        jitter: 0.1,
        total_timeout: Duration::from_secs(5),
    };
    /// WAN / cellular (RTT 0.2..2 s).
    pub const WAN: RetryPolicy = RetryPolicy {
        timeout: Duration::from_secs(3),
        max_retries: 5,
        backoff_factor: 1.5,
        jitter: 0.1,
        total_timeout: Duration::from_secs(30),
    };

    /// The un-jittered wait before retransmission `k` (1-based): `timeout * factor^(k-1)`.
    pub fn nominal_delay(&self, k: u32) -> Duration {
        if k <= 1 {
            // Every request's first wait: no floating point on the common path.
            return self.timeout;
        }
        let exp = i32::try_from(k.saturating_sub(1)).unwrap_or(i32::MAX);
        Duration::try_from_secs_f64(self.timeout.as_secs_f64() * self.backoff_factor.powi(exp))
            .unwrap_or(Duration::MAX)
    }

    /// The policy for non-idempotent methods derived from this one: at most one retry.
    pub fn non_idempotent(&self) -> RetryPolicy {
        RetryPolicy {
            max_retries: self.max_retries.min(1),
            total_timeout: self.total_timeout.min(Duration::from_secs(15)),
            ..*self
        }
    }

    /// Rejects nonsense; returns warnings for values outside RFC 7252 §4.8.1's advice.
    pub fn validate(&self, flag_prefix: &str) -> Result<Vec<String>, ConfigError> {
        let bad = |flag: &str, rule: &str| ConfigError(format!("--{flag_prefix}{flag}: {rule}"));
        if self.timeout.is_zero() {
            return Err(bad("timeout", "must be greater than 0"));
        }
        if !self.backoff_factor.is_finite() || self.backoff_factor < 1.0 {
            return Err(bad("backoff-factor", "must be a finite number >= 1.0"));
        }
        if !self.jitter.is_finite() || !(0.0..1.0).contains(&self.jitter) {
            return Err(bad("jitter", "must be >= 0 and < 1"));
        }
        if self.total_timeout < self.timeout {
            return Err(bad("total-timeout", "must be at least --timeout"));
        }
        if self.max_retries > 20 {
            return Err(bad("max-retries", "must be at most 20"));
        }
        let mut warnings = Vec::new();
        if self.timeout < Duration::from_secs(1) {
            warnings.push(format!(
                "--{flag_prefix}timeout {:?} is below RFC 7252 §4.8.1's 1 s ACK_TIMEOUT advice",
                self.timeout
            ));
        }
        Ok(warnings)
    }
}

/// Where requests go.
#[derive(Clone, Debug, PartialEq)]
pub struct Routing {
    /// Reverse proxy: requests without Proxy-Uri/Proxy-Scheme go here.
    pub upstream: Option<SocketAddr>,
    /// Forward proxy: Proxy-Uri / Proxy-Scheme requests to these `host:port` targets only.
    pub allow: Vec<AllowedTarget>,
    /// Whether forward proxying is on at all; if not, Proxy-Uri requests get 5.05.
    pub forward: bool,
}

/// One forward-proxy target: the authority as clients write it, and where it resolves.
#[derive(Clone, Debug, PartialEq)]
pub struct AllowedTarget {
    /// Lowercase host as written in `--allow` (IP literal or name).
    pub host: String,
    /// Port as written in `--allow`.
    pub port: u16,
    /// The address the target resolved to at start-up; requests for it go there.
    pub addr: SocketAddr,
}

/// Everything the proxy engine needs to know.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// Upstream retry policy for every method not covered by `non_idempotent` (GET, PUT, ...).
    pub policy: RetryPolicy,
    /// POST, PATCH (and iPATCH): not idempotent, so retried less (RFC 7252 §5.8, RFC 8132).
    pub non_idempotent: RetryPolicy,
    /// Where requests go: reverse upstream and forward-proxy allow list.
    pub routing: Routing,
    /// What one request, one client, one upstream and all of them may hold in flight.
    pub limits: Limits,
    /// The bounds of the answers kept for clients' retransmissions (`answer_cache.rs`).
    pub kept: KeptBounds,
    /// `--cache-size`: bytes the response cache may hold in all, its entries' bookkeeping
    /// included (RFC 7252 §5.6; `proxy/cache/`). 0, the default, turns it off: a cache
    /// changes what clients see (answers up to Max-Age old), so it is the operator's choice.
    /// A build without the `cache` feature has none: [`validate`](Self::validate) refuses
    /// anything but 0 there, rather than run without the cache it was asked for.
    pub cache_size: usize,
    /// Every this many notifications to a client at least one goes as a CON (RFC 7641 §4.5:
    /// "at least every 24 hours", which the proxy also keeps), so that an observer that has
    /// gone (or never was: a spoofed registration) is noticed when that CON times out, and
    /// its observation ends. 20 bounds what one registration can reflect at a source that
    /// never acknowledges to 20 NONs and the 5 transmissions of one CON, and costs a live
    /// observer one ACK per 20 notifications. Californium's 100 is 5 times the exposure for
    /// a saving of 4 ACKs in 100. 1 sends every notification as a CON.
    pub observe_con_every: u32,
    /// What the proxy may send to one client address and port (RFC 7252 §11.3): see
    /// [`ClientBudget`] and `budget.rs`. Past it, datagrams are dropped and counted.
    pub client_budget: ClientBudget,
    /// `--validate-sources`: address validation with Echo (RFC 9175 §2.4). Off by default:
    /// a client that does not implement Echo would get only 4.01s for its larger answers.
    pub validate_sources: bool,
    /// How long to hold a CON request's ACK hoping to piggyback the response (RFC 7252 §5.2.2).
    pub ack_delay: Duration,
    /// How long an upstream Message ID stays reserved after use (RFC 7252 §4.4). Lowering it
    /// trades safety against the upstream's deduplication window for throughput.
    pub upstream_exchange_lifetime: Duration,
    /// Max-Age of a 5.03 answer, telling clients when to retry.
    pub overload_max_age: Duration,
    /// Hop-Limit inserted when a request has none (RFC 8768 §3: 16).
    pub default_hop_limit: u8,
    /// `--seed`: what the driver seeds the engine's jitter, tokens and Message IDs with
    /// (`None`: randomness from the OS). The engine itself only takes [`Seeds`](super::Seeds).
    pub seed: Option<u64>,
    /// The client-facing address, so a Proxy-Uri naming the proxy itself is served locally
    /// (set by the driver once bound).
    pub local_addr: Option<SocketAddr>,
}

/// What the proxy takes in flight: a request whose admission would pass one of these gets 4.13, 4.02 or 5.03 (see each).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Exchanges in flight upstream at once (all upstreams); more get 5.03.
    pub max_inflight: usize,
    /// Exchanges in flight to one upstream (RFC 7252 §4.7 asks proxies to limit this).
    pub max_inflight_per_upstream: usize,
    /// Exchanges in flight from one client (source address and port), so that one source
    /// cannot take what the others need.
    pub max_inflight_per_client: usize,
    /// Sockets of the proxy's own towards one upstream at most. Each carries 65,536 Message
    /// IDs per `upstream_exchange_lifetime`, so N of them sustain about
    /// `(N - 1) * 65536 / lifetime` requests/s (one is the spare).
    pub max_upstream_endpoints: usize,
    /// Exchanges' request copies (kept for retransmission while the upstream has not
    /// answered) may take this many bytes in all; a request that would exceed it gets 5.03.
    /// (It is checked with the request's size as it came, so the last one admitted may pass it
    /// by the few bytes its copy gains: the proxy's 8-byte token, Hop-Limit, the Proxy-Uri's
    /// parts as options.) With `max_request_size` this bounds what requests in flight take.
    pub max_inflight_bytes: usize,
    /// The largest request datagram the proxy takes, in bytes; a longer one gets 4.13 Request
    /// Entity Too Large with Size1 (RFC 7252 §5.9.2.9, §5.10.9). 1152 is RFC 7252 §4.6's
    /// upper bound for a message when nothing is known of the path (and libcoap's default
    /// MTU); a request that follows §4.6 always fits, block-wise bodies included (RFC 7959).
    pub max_request_size: usize,
    /// Options a request may carry, a Proxy-Uri counting as the Uri-Path and Uri-Query
    /// options it decomposes into (RFC 7252 §6.4); more get 4.02 Bad Option.
    pub max_options: usize,
    /// Live observations (RFC 7641) relayed at once.
    pub max_observations: usize,
    /// Of those, the observations of one source (`source_prefix`) at most, so that one
    /// client or address cannot take the table; past it a registration is answered without
    /// Observe (RFC 7641 §4.1). `--max-observations-per-source`, by default an eighth of
    /// `max_observations` ([`Limits::observation_share`]).
    pub max_observations_per_source: usize,
    /// `--source-prefix`: how much of a client's address names its source for every
    /// per-source share (held answers, observations, DTLS sessions, stream connections):
    /// one IPv4 address and one IPv6 /64 by default (`source_prefix.rs` says why).
    pub source_prefix: PrefixLengths,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_inflight: 10_000,
            max_inflight_per_upstream: 10_000,
            max_inflight_per_client: 256,
            max_upstream_endpoints: 1024,
            max_inflight_bytes: 4 << 20,
            max_request_size: 1152,
            max_options: 64,
            max_observations: 1_000,
            max_observations_per_source: Limits::observation_share(1_000),
            source_prefix: PrefixLengths::DEFAULT,
        }
    }
}

impl Limits {
    /// The default share of one source in `max_observations` observations: an eighth
    /// (rounded up, at least 1), 125 of the default 1,000. It takes eight sources to fill
    /// the table, as it takes eight to fill a stream listener (64 connections each of 512),
    /// and one application server behind one address still observes 125 resources.
    pub fn observation_share(max_observations: usize) -> usize {
        max_observations.div_ceil(8).max(1)
    }
}

/// The bounds of the answers kept for clients' retransmissions: in all and per client, in answers and in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptBounds {
    /// Completed answers kept for client retransmissions (bounded; oldest evicted first).
    pub max_cached: usize,
    /// Of those, answers kept for one client (source address and port) at most: past it the
    /// client's own oldest answer goes, so that one source cannot push the others' out. The
    /// proxy's own answers have a share of the same size in their store.
    pub max_cached_per_client: usize,
    /// `--max-cached-bytes`: the bytes those answers may take, each store apart (the proxy's
    /// own answers have a bound of the same size in theirs); past it the oldest go, as past
    /// `max_cached`. Counted on what the store really holds, so this bounds its memory:
    /// 100,000 answers of 8 KB would be 800 MB.
    pub max_cached_bytes: usize,
    /// `--max-cached-bytes-per-client`: of those, one client's at most; past it its own
    /// oldest go, as past `max_cached_per_client`. An answer longer than this is kept without
    /// its bytes: its retransmissions get nothing (and are never forwarded again).
    pub max_cached_bytes_per_client: usize,
}

impl Default for KeptBounds {
    fn default() -> Self {
        KeptBounds {
            max_cached: 100_000,
            max_cached_per_client: 10_000,
            max_cached_bytes: 8 << 20,
            max_cached_bytes_per_client: 1 << 20,
        }
    }
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            policy: RetryPolicy::DEFAULT,
            non_idempotent: RetryPolicy::DEFAULT.non_idempotent(),
            routing: Routing {
                upstream: None,
                allow: Vec::new(),
                forward: false,
            },
            limits: Limits::default(),
            kept: KeptBounds::default(),
            cache_size: 0,
            observe_con_every: 20,
            client_budget: ClientBudget::DEFAULT,
            validate_sources: false,
            ack_delay: Duration::from_millis(100),
            upstream_exchange_lifetime: params::EXCHANGE_LIFETIME,
            overload_max_age: Duration::from_secs(2),
            default_hop_limit: 16,
            seed: None,
            local_addr: None,
        }
    }
}

/// More endpoints than this per upstream would outnumber the ephemeral ports of a host.
pub const MAX_UPSTREAM_ENDPOINTS: usize = 16_384;

/// The largest `--cache-size`, 1 GiB. A CoAP response is one datagram, and usually well under
/// a kilobyte, so this holds about a million responses with their bookkeeping: more than one
/// single-threaded proxy needs. A larger value is more likely a slip of units than a plan, and
/// would let the cache outgrow the host's memory unnoticed.
pub const MAX_CACHE_SIZE: usize = 1 << 30;

impl ProxyConfig {
    /// Upstreams this configuration talks to: the reverse one and every allowed target.
    pub fn upstream_count(&self) -> usize {
        usize::from(self.routing.upstream.is_some()) + self.routing.allow.len()
    }

    /// Requests per second one upstream sustains at most before Message IDs run out: the
    /// bound's endpoints but the spare, 65,536 IDs each per lifetime.
    pub fn sustained_rate_per_upstream(&self) -> f64 {
        let endpoints = self.limits.max_upstream_endpoints.saturating_sub(1).max(1) as f64;
        endpoints * 65_536.0 / self.upstream_exchange_lifetime.as_secs_f64()
    }

    /// Checks the whole configuration; returns warnings worth logging.
    pub fn validate(&self) -> Result<Vec<String>, ConfigError> {
        let mut warnings = self.policy.validate("")?;
        warnings.extend(self.non_idempotent.validate("non-idempotent-")?);
        let r = &self.routing;
        if r.upstream.is_none() && !r.forward {
            return Err(ConfigError(
                "--upstream: required unless --forward is given".into(),
            ));
        }
        if r.forward && r.allow.is_empty() {
            return Err(ConfigError(
                "--allow: --forward needs at least one allowed HOST:PORT (never an open relay)"
                    .into(),
            ));
        }
        if !r.forward && !r.allow.is_empty() {
            return Err(ConfigError(
                "--allow: only meaningful with --forward".into(),
            ));
        }
        for (name, v) in [
            ("max-inflight", self.limits.max_inflight),
            (
                "max-inflight-per-client",
                self.limits.max_inflight_per_client,
            ),
            ("max-cached", self.kept.max_cached),
            ("max-cached-per-client", self.kept.max_cached_per_client),
            ("max-cached-bytes", self.kept.max_cached_bytes),
            (
                "max-cached-bytes-per-client",
                self.kept.max_cached_bytes_per_client,
            ),
            ("max-options", self.limits.max_options),
            (
                "max-observations-per-source",
                self.limits.max_observations_per_source,
            ),
        ] {
            if v == 0 {
                return Err(ConfigError(format!("--{name}: must be at least 1")));
            }
        }
        self.validate_sizes()?;
        if self.cache_size > MAX_CACHE_SIZE {
            return Err(ConfigError(format!(
                "--cache-size: must be at most {}MiB (0 turns the cache off)",
                MAX_CACHE_SIZE >> 20
            )));
        }
        if self.cache_size > 0 && !cfg!(feature = "cache") {
            return Err(ConfigError(
                "--cache-size: this backoffd was built without the response cache (cargo feature `cache`)".into(),
            ));
        }
        if !(1..=MAX_UPSTREAM_ENDPOINTS).contains(&self.limits.max_upstream_endpoints) {
            return Err(ConfigError(format!(
                "--max-upstream-endpoints: must be 1..={MAX_UPSTREAM_ENDPOINTS}"
            )));
        }
        let longest = self
            .policy
            .total_timeout
            .max(self.non_idempotent.total_timeout);
        if self.upstream_exchange_lifetime < longest {
            return Err(ConfigError(
                "--upstream-exchange-lifetime: must be at least the longest --total-timeout".into(),
            ));
        }
        self.validate_budget()?;
        if self.observe_con_every == 0 {
            return Err(ConfigError(
                "--observe-con-every: must be at least 1".into(),
            ));
        }
        if self.default_hop_limit == 0 {
            return Err(ConfigError("--hop-limit: must be 1..=255".into()));
        }
        Ok(warnings)
    }

    /// A send rate lets the longest datagram through, and some each second. Checked whether
    /// the rate is on or not, so that a value that would not work is refused when given.
    fn validate_budget(&self) -> Result<(), ConfigError> {
        let b = &self.client_budget;
        if (b.burst_bytes as usize) < MAX_DATAGRAM {
            return Err(ConfigError(format!(
                "--client-burst-bytes: must be at least {MAX_DATAGRAM} (the longest datagram)"
            )));
        }
        if b.datagrams_per_sec == 0 {
            return Err(ConfigError(
                "--client-datagrams-per-sec: must be at least 1".into(),
            ));
        }
        if b.burst_datagrams == 0 {
            return Err(ConfigError(
                "--client-burst-datagrams: must be at least 1".into(),
            ));
        }
        if b.max_sources == 0 {
            return Err(ConfigError(
                "client budget: max_sources must be at least 1".into(),
            ));
        }
        Ok(())
    }

    /// A request the size limit lets in must fit the in-flight budget on its own.
    fn validate_sizes(&self) -> Result<(), ConfigError> {
        if !(MIN_REQUEST_SIZE..=MAX_DATAGRAM).contains(&self.limits.max_request_size) {
            return Err(ConfigError(format!(
                "--max-request-size: must be {MIN_REQUEST_SIZE}..={MAX_DATAGRAM}"
            )));
        }
        if self.limits.max_inflight_bytes < self.limits.max_request_size {
            return Err(ConfigError(
                "--max-inflight-bytes: must be at least --max-request-size".into(),
            ));
        }
        Ok(())
    }
}

/// The longest UDP payload there is (RFC 768's 16-bit length, less its header: 65,527 over
/// IPv6, 65,507 over IPv4).
pub const MAX_DATAGRAM: usize = 65_527;
/// Below this even a request with a full token and a short path would not fit.
pub const MIN_REQUEST_SIZE: usize = 64;

/// A configuration mistake: names the flag and the rule it breaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// The engine's randomness, given rather than drawn: the driver draws it from the OS (or takes
/// `--seed`), tests fix it. The core never touches OS randomness, and a seeded run replays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seeds {
    /// Seeds the jitter, the tokens and the first Message IDs.
    pub rng: u64,
    /// The secrets of the engine's maps' hash: keep them random (not from a seed a user
    /// may publish), or clients could choose keys that collide.
    pub hash: [u64; 2],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nominal_delays_follow_the_documented_example() {
        let p = RetryPolicy::DEFAULT;
        let ms: Vec<u128> = (1..=4).map(|k| p.nominal_delay(k).as_millis()).collect();
        assert_eq!(ms, vec![2000, 3000, 4500, 6750]);
    }

    #[test]
    fn nonsense_is_refused_naming_the_flag() {
        let cases = [
            (
                RetryPolicy {
                    backoff_factor: 0.5,
                    ..RetryPolicy::DEFAULT
                },
                "backoff-factor",
            ),
            (
                RetryPolicy {
                    backoff_factor: f64::NAN,
                    ..RetryPolicy::DEFAULT
                },
                "backoff-factor",
            ),
            (
                RetryPolicy {
                    jitter: 1.0,
                    ..RetryPolicy::DEFAULT
                },
                "jitter",
            ),
            (
                RetryPolicy {
                    jitter: -0.1,
                    ..RetryPolicy::DEFAULT
                },
                "jitter",
            ),
            (
                RetryPolicy {
                    timeout: Duration::ZERO,
                    ..RetryPolicy::DEFAULT
                },
                "timeout",
            ),
            (
                RetryPolicy {
                    total_timeout: Duration::from_millis(10),
                    ..RetryPolicy::DEFAULT
                },
                "total-timeout",
            ),
        ];
        for (policy, flag) in cases {
            let err = policy.validate("").unwrap_err();
            assert!(err.0.contains(flag), "{err}");
        }
    }

    #[test]
    fn sub_second_timeout_is_a_warning_not_an_error() {
        let p = RetryPolicy {
            timeout: Duration::from_millis(200),
            ..RetryPolicy::DEFAULT
        };
        assert_eq!(p.validate("").unwrap().len(), 1);
    }

    #[test]
    fn request_size_limits_are_checked_naming_the_flag() {
        let mut c = ProxyConfig::default();
        c.routing.upstream = Some("127.0.0.1:5683".parse().unwrap());
        assert!(c.validate().is_ok());
        for (edit, flag) in [
            (
                (|c: &mut ProxyConfig| c.limits.max_request_size = 63) as fn(&mut ProxyConfig),
                "--max-request-size",
            ),
            (
                |c| c.limits.max_request_size = MAX_DATAGRAM + 1,
                "--max-request-size",
            ),
            (
                |c| c.limits.max_inflight_bytes = 1000,
                "--max-inflight-bytes",
            ),
            (|c| c.limits.max_options = 0, "--max-options"),
            (
                |c| c.kept.max_cached_per_client = 0,
                "--max-cached-per-client",
            ),
            (|c| c.kept.max_cached_bytes = 0, "--max-cached-bytes"),
            (
                |c| c.kept.max_cached_bytes_per_client = 0,
                "--max-cached-bytes-per-client",
            ),
        ] {
            let mut bad = c.clone();
            edit(&mut bad);
            assert!(bad.validate().unwrap_err().0.starts_with(flag), "{flag}");
        }
    }

    #[test]
    #[cfg(feature = "cache")]
    fn cache_size_is_off_at_zero_and_refused_past_the_maximum() {
        let mut c = ProxyConfig::default();
        c.routing.upstream = Some("127.0.0.1:5683".parse().unwrap());
        for ok in [0, 1, MAX_CACHE_SIZE] {
            c.cache_size = ok;
            assert!(c.validate().is_ok(), "{ok}");
        }
        c.cache_size = MAX_CACHE_SIZE + 1;
        let e = c.validate().unwrap_err();
        assert_eq!(
            e.0,
            "--cache-size: must be at most 1024MiB (0 turns the cache off)"
        );
    }

    /// A library user who asks a build without the cache for one is told, not ignored.
    #[test]
    #[cfg(not(feature = "cache"))]
    fn without_the_cache_feature_only_a_cache_size_of_0_is_valid() {
        let mut c = ProxyConfig::default();
        c.routing.upstream = Some("127.0.0.1:5683".parse().unwrap());
        assert!(c.validate().is_ok());
        c.cache_size = 1;
        let e = c.validate().unwrap_err();
        assert!(e.0.starts_with("--cache-size: ") && e.0.contains("feature `cache`"));
    }

    #[test]
    fn forward_mode_without_allowlist_is_refused() {
        let mut c = ProxyConfig::default();
        c.routing.forward = true;
        assert!(c.validate().unwrap_err().0.contains("--allow"));
    }
}
