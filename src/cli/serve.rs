//! `backoffd serve`: every component in one process, one thread, one mio loop.

use std::net::SocketAddr;
use std::time::Duration;

use super::config_file::{self, Section};
use super::flags::{switch, value, DurationArg, Flags, Parsed, SizeArg, Spec, UsageError};
use super::proxy::{config_from_flags as proxy_config, spec as proxy_spec};
use backoffd::proxy::ProxyConfig;
use backoffd::reactor::{self, Component, Reactor, WakeMode};
use backoffd::reconnect::server::{ReconnectServer, ServerConfig};

pub const HELP: &str = "\
Usage: backoffd serve [part flags] [--metrics ADDR]
       backoffd serve --config FILE [--check-config]

Runs any combination of CoAP proxy listeners, the gRPC reconnect interop server and the
metrics endpoint in one process, on one thread and one event loop.

The simple case is all flags; any part may be left out:
  backoffd serve --listen 0.0.0.0:5683 --upstream 127.0.0.1:5684 \\
                 --control_port 8080 --retry_port 8081 --metrics 127.0.0.1:9102
  proxy part:      every `backoffd proxy` flag (present when --upstream or --forward is given)
  reconnect part:  --control_port, --retry_port, --min_intervals, --max_control_connections
  metrics part:    --metrics ADDR (GET /metrics, GET /healthz; use a loopback address)

Several proxy routes, each with its own upstream and retry policy, need a config file: sections
[proxy] (repeatable), [reconnect] and [metrics] whose keys are the flags above (see
examples/backoffd.conf). Errors name the file, line and key.

Options:
  --config FILE        read the parts from FILE instead of flags
  --check-config       validate and print what would run, without binding anything
  --drain D            on SIGINT/SIGTERM, time to finish in-flight work (default 5s)
  --wake SRC           timer wake-up source: timerfd (default), epoll, or pwait2 (Linux
                       5.11+, else timerfd)
  -h, --help           this help
";

const RECONNECT_KEYS: &[&str] = &[
    "control_port",
    "retry_port",
    "min_intervals",
    "max_control_connections",
];
const SERVE_ONLY: &[Spec] = &[
    value("control_port"),
    value("retry_port"),
    value("min_intervals"),
    value("max_control_connections"),
    value("metrics"),
    value("config"),
    switch("check-config"),
];

/// One CoAP proxy: its plain and coaps listeners (at least one), and the HTTP cross-proxy
/// in front of it, if any.
#[derive(Debug)]
pub struct ProxyPart {
    pub listen: Option<SocketAddr>,
    pub dtls: Option<super::dtls::DtlsPart>,
    pub coaps_upstream: Option<super::dtls::UpstreamPart>,
    pub streams: Option<super::stream::StreamPart>,
    pub config: ProxyConfig,
    pub http: Option<super::http::HttpPart>,
}

impl ProxyPart {
    /// The part `flags` describe (a command line, or a `[proxy]` section).
    fn from_flags(flags: &Flags) -> Result<ProxyPart, UsageError> {
        let config = proxy_config(flags)?;
        warn_all(config.validate().map_err(|e| UsageError(e.0))?);
        let dtls = super::dtls::from_flags(flags)?;
        let streams = super::stream::from_flags(flags)?;
        let secure = dtls.is_some() || streams.as_ref().is_some_and(super::stream::is_secure);
        Ok(ProxyPart {
            listen: super::proxy::plain_listen(flags, secure, DEFAULT_LISTEN)?,
            dtls,
            coaps_upstream: super::dtls::upstream_from_flags(flags)?,
            streams,
            http: super::http::from_flags(flags, &config)?,
            config,
        })
    }
}

/// What one `serve` process runs.
#[derive(Debug, Default)]
pub struct Plan {
    pub proxies: Vec<ProxyPart>,
    pub reconnect: Option<ServerConfig>,
    pub metrics: Option<SocketAddr>,
}

/// A parsed and validated `serve` command line.
pub(super) struct ServeArgs {
    plan: Plan,
    check_config: bool,
    wake: WakeMode,
    drain: Duration,
}

/// Runs the subcommand; returns the process exit code.
pub fn main(args: &[String]) -> Result<i32, UsageError> {
    let read = |path: &str| std::fs::read_to_string(path);
    Ok(match parse(args, &read)?.or_print_help(HELP) {
        None => 0,
        Some(a) if a.check_config => {
            print!("{}", describe(&a.plan));
            println!("configuration OK");
            0
        }
        Some(a) => run(a.plan, a.wake, a.drain),
    })
}

/// Parses and validates the command line, reading `--config FILE` with `read_file`; binds
/// nothing.
pub(super) fn parse(
    args: &[String],
    read_file: &dyn Fn(&str) -> std::io::Result<String>,
) -> Result<Parsed<ServeArgs>, UsageError> {
    let spec: Vec<Spec> = proxy_spec().iter().chain(SERVE_ONLY).copied().collect();
    let flags = Flags::parse(args, &spec)?;
    if flags.help {
        return Ok(Parsed::Help);
    }
    let plan = match flags.get::<String>("config")? {
        Some(path) => {
            let text = read_file(&path)
                .map_err(|e| UsageError(format!("--config: cannot read {path}: {e}")))?;
            plan_from_text(&path, &text)?
        }
        None => plan_from_flags(&flags)?,
    };
    if plan.proxies.is_empty() && plan.reconnect.is_none() && plan.metrics.is_none() {
        return Err(UsageError(
            "nothing to serve: give --upstream/--forward, --control_port/--retry_port, --metrics or --config"
                .into(),
        ));
    }
    let drain = flags
        .get_or("drain", DurationArg(Duration::from_secs(5)))?
        .0;
    let wake = flags.get_or("wake", WakeMode::Timerfd)?;
    Ok(Parsed::Run(ServeArgs {
        plan,
        check_config: flags.has("check-config"),
        wake,
        drain,
    }))
}

fn plan_from_flags(flags: &Flags) -> Result<Plan, UsageError> {
    let mut plan = Plan::default();
    if flags.has("upstream") || flags.has("forward") {
        plan.proxies.push(ProxyPart::from_flags(flags)?);
    }
    if RECONNECT_KEYS.iter().any(|k| flags.has(k)) {
        plan.reconnect = Some(super::reconnect_server::config_from_flags(flags)?);
    }
    plan.metrics = super::metrics_flag(flags)?;
    Ok(plan)
}

/// The plan a config file's `text` describes; errors name `path`, the line and the key.
pub(super) fn plan_from_text(path: &str, text: &str) -> Result<Plan, UsageError> {
    // In a file the keys have no leading dashes, so neither do the messages about them.
    let at = |line: usize, msg: &dyn std::fmt::Display| {
        UsageError(format!(
            "{path}:{line}: {}",
            msg.to_string().replacen("--", "", 1)
        ))
    };
    let sections = config_file::parse(text, &["proxy", "reconnect", "metrics"])
        .map_err(|e| at(e.line, &e.message))?;
    let mut plan = Plan::default();
    for section in &sections {
        let in_section = |e: UsageError| at(section.line_of(&flag_named_in(&e)), &e);
        match section.kind.as_str() {
            "proxy" => {
                let flags = section_flags(section, &proxy_spec(), &["forward"])
                    .map_err(|e| at(e.0, &e.1))?;
                plan.proxies
                    .push(ProxyPart::from_flags(&flags).map_err(in_section)?);
            }
            "reconnect" => {
                let flags = section_flags(section, &SERVE_ONLY[..RECONNECT_KEYS.len()], &[])
                    .map_err(|e| at(e.0, &e.1))?;
                if plan.reconnect.is_some() {
                    return Err(at(section.line, &"only one [reconnect] section"));
                }
                plan.reconnect =
                    Some(super::reconnect_server::config_from_flags(&flags).map_err(in_section)?);
            }
            _ => {
                let flags =
                    section_flags(section, &[value("listen")], &[]).map_err(|e| at(e.0, &e.1))?;
                plan.metrics = Some(
                    flags
                        .get_or("listen", "127.0.0.1:9102".parse().expect("literal"))
                        .map_err(in_section)?,
                );
            }
        }
    }
    Ok(plan)
}

/// A section's entries parsed by the same flag parser as the command line.
fn section_flags(
    section: &Section,
    spec: &[Spec],
    switches: &[&str],
) -> Result<Flags, (usize, String)> {
    let args = section.to_args(switches).map_err(|e| (e.line, e.message))?;
    Flags::parse(&args, spec).map_err(|e| (section.line_of(&flag_named_in(&e)), e.0))
}

/// The flag a usage error names (`--name...`), to find its line in the file.
fn flag_named_in(e: &UsageError) -> String {
    e.0.split("--")
        .nth(1)
        .map(|rest| {
            rest.chars()
                .take_while(|c| c.is_alphanumeric() || *c == '-' || *c == '_')
                .collect()
        })
        .unwrap_or_default()
}

const DEFAULT_LISTEN: &str = "0.0.0.0:5683";

fn warn_all(warnings: Vec<String>) {
    for w in warnings {
        log::warn!("{w}");
    }
}

/// One line per part, for `--check-config` and the start-up log.
pub fn describe(plan: &Plan) -> String {
    let mut out = String::new();
    for ProxyPart {
        listen,
        dtls,
        coaps_upstream,
        streams,
        config: c,
        http,
    } in &plan.proxies
    {
        let on = match (listen, dtls, streams) {
            (Some(plain), _, _) => plain.to_string(),
            (None, Some(d), _) => format!("coaps://{}", super::dtls::listen_addr(d)),
            (None, None, Some(t)) => super::stream::listen_uri(t),
            (None, None, None) => "nothing".into(),
        };
        let target = match (&c.routing.upstream, c.routing.forward) {
            (Some(u), false) => format!("reverse to {u}"),
            (Some(u), true) => format!(
                "reverse to {u}, forward to {} allowed targets",
                c.routing.allow.len()
            ),
            (None, _) => format!("forward to {} allowed targets", c.routing.allow.len()),
        };
        let p = &c.policy;
        out += &format!(
            "proxy on {on}: {target}; timeout {:?}, {} retries, x{}, +-{}%, total {:?}; \
             up to {} endpoints per upstream (~{:.0} requests/s sustained){}\n",
            p.timeout,
            p.max_retries,
            p.backoff_factor,
            p.jitter * 100.0,
            p.total_timeout,
            c.limits.max_upstream_endpoints,
            c.sustained_rate_per_upstream(),
            describe_cache(c.cache_size)
        );
        if let Some(d) = dtls {
            out += &super::dtls::describe(d);
        }
        if let Some(u) = coaps_upstream {
            out += &super::dtls::describe_upstream(u);
        }
        if let Some(t) = streams {
            out += &super::stream::describe(t);
        }
        if let Some(h) = http {
            out += &format!(
                "  HTTP cross-proxy on http://{} in front of it\n",
                super::http::listen_addr(h)
            );
        }
    }
    if let Some(r) = &plan.reconnect {
        out += &format!(
            "reconnect server: control port {}, retry port {}\n",
            r.control_port, r.retry_port
        );
    }
    if let Some(m) = &plan.metrics {
        out += &format!("metrics on http://{m}/metrics\n");
    }
    out
}

/// The response cache as [`describe`] reports it: off, or its budget in bytes (and as written
/// with a unit, when it has one), so a slip of units shows. Nothing in a build without the
/// `cache` feature, which has no cache to report.
fn describe_cache(size: usize) -> String {
    let short = SizeArg(size).to_string();
    match size {
        _ if !cfg!(feature = "cache") => String::new(),
        0 => "; response cache off".into(),
        _ if short == size.to_string() => format!("; response cache on, {size} bytes"),
        _ => format!("; response cache on, {size} bytes ({short})"),
    }
}

fn run(plan: Plan, wake: WakeMode, drain: Duration) -> i32 {
    let fail = |what: String| {
        eprintln!("backoffd serve: {what}");
        1
    };
    let mut reactor = match Reactor::new(reactor::Config {
        wake,
        signals: true,
        drain_timeout: drain,
    }) {
        Ok(r) => r,
        Err(e) => return fail(format!("cannot start the event loop: {e}")),
    };
    let connections = (plan.proxies.iter())
        .map(|p| super::stream_connections(p.streams.as_ref()))
        .sum();
    super::make_room_for_endpoints(plan.proxies.iter().map(|p| &p.config), connections);
    let mut parts: Vec<(String, Box<dyn Component>)> = Vec::new();
    let mut sources = Vec::new();
    for ProxyPart {
        listen,
        dtls,
        coaps_upstream,
        streams,
        config,
        http,
    } in plan.proxies
    {
        let listeners = super::ProxyListeners {
            listen,
            dtls,
            streams,
        };
        match super::proxy_part(listeners, coaps_upstream, config, http, &mut sources) {
            Ok((part, line)) => parts.push((line, part)),
            Err(e) => return fail(e),
        }
    }
    if let Some(config) = plan.reconnect {
        let port = config.control_port;
        match ReconnectServer::bind(config) {
            Ok(s) => parts.push((String::new(), super::reported(s, &mut sources))),
            Err(e) => return fail(format!("cannot listen on control port {port}: {e}")),
        }
    }
    for (line, part) in parts {
        if let Err(e) = reactor.add(part) {
            return fail(format!("cannot register sockets: {e}"));
        }
        if !line.is_empty() {
            log::info!("{line}");
        }
    }
    if let Err(e) = super::add_metrics(&mut reactor, plan.metrics, sources) {
        return fail(e);
    }
    match reactor.run() {
        Ok(()) => 0,
        Err(e) => fail(format!("event loop failed: {e}")),
    }
}
