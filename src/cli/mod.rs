//! The `backoffd` command line: subcommand dispatch. Each subcommand has its own file.

pub mod config_file;
#[cfg(feature = "demo")]
mod demo;
#[cfg(not(feature = "demo"))]
use left_out::demo;
mod dtls;
pub mod flags;
mod http;
#[cfg(any(not(feature = "demo"), not(feature = "timer-bench")))]
mod left_out;
#[cfg(any(feature = "dtls", feature = "tcp"))]
mod pem;
mod proxy;
pub mod reconnect_client;
pub mod reconnect_server;
mod relay;
mod serve;
mod shared_flags;
mod stream;
#[cfg(feature = "timer-bench")]
mod timer_bench;
#[cfg(not(feature = "timer-bench"))]
use left_out::timer_bench;

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;

use backoffd::metrics::{MetricsConfig, MetricsServer, MetricsSource, MetricsSources};
use backoffd::net::{raise_fd_limit, FdLimit};
use backoffd::proxy::{Listeners, ProxyComponent, ProxyConfig};
use backoffd::reactor::{Component, Reactor};
use flags::{Flags, UsageError};
use http::HttpPart;

const HELP: &str = "\
backoffd: a single-threaded mio daemon with a CoAP forwarding proxy, gRPC's connection-backoff
interop server and client, and a precise hashed timer wheel.

Usage: backoffd <command> [options]

Commands:
  demo              run everything on loopback with built-in defaults and report (start here)
  proxy             CoAP forwarding proxy with its own upstream retry policy
  reconnect-client  gRPC connection-backoff interop client (also: reconnect_interop_client;
                    its TLS retry channel accepts any certificate: for that test's target only)
  reconnect-server  gRPC connection-backoff interop server (also: reconnect_interop_server)
  relay             stateless UDP relay: the baseline the proxy benchmark compares against
  serve             any combination of the above plus metrics, in one process and one loop
  timer-bench       measure the reactor's timer wake-up precision on this host

Run `backoffd <command> --help` for a command's options.
";

/// A subcommand: its arguments (after its name) in, the process exit code out.
type Command = fn(&[String]) -> Result<i32, UsageError>;

/// The subcommand called `name`, if there is one.
fn command(name: &str) -> Option<Command> {
    Some(match name {
        "demo" => demo::main,
        "proxy" => proxy::main,
        "reconnect-client" => reconnect_client::main,
        "reconnect-server" => reconnect_server::main,
        "relay" => relay::main,
        "serve" => serve::main,
        "timer-bench" => timer_bench::main,
        _ => return None,
    })
}

/// Runs the `backoffd` command line; returns the process exit code.
pub fn main(args: &[String]) -> i32 {
    let Some(name) = args.get(1) else {
        eprint!("{HELP}");
        return 2;
    };
    match name.as_str() {
        "-h" | "--help" | "help" => print!("{HELP}"),
        "-V" | "--version" => println!("backoffd {}", env!("CARGO_PKG_VERSION")),
        _ => match command(name) {
            Some(run) => return run_alone(&format!("backoffd {name}"), run, &args[2..]),
            None => {
                eprintln!("backoffd: unknown command {name:?} (see backoffd --help)");
                return 2;
            }
        },
    }
    0
}

/// Runs one command as a program of its own (`backoffd demo`, or an interop binary): `args`
/// without the program and command names; returns the process exit code. A usage error is
/// one line on stderr, prefixed with `program`, and exit code 2.
pub fn run_alone(program: &str, command: Command, args: &[String]) -> i32 {
    init_logging();
    command(args).unwrap_or_else(|e| {
        eprintln!("{program}: {e}");
        2
    })
}

/// Parses and validates a command line the way [`main`] does (`args[1]` is the subcommand),
/// without running anything: no socket is bound, no file read (`serve --config` fails), no
/// process setting changed. Host names are resolved as [`main`] would, except in a
/// `cfg(fuzzing)` build, which accepts only literal addresses and `localhost` (no DNS while
/// fuzzing). The `cli_flags` fuzz target drives this; it must never panic. Only the fuzz
/// targets and the tests build it.
#[cfg(any(test, fuzzing))]
pub fn parse_only(args: &[String]) -> Result<(), UsageError> {
    let Some(command) = args.get(1) else {
        return Ok(());
    };
    let rest = &args[2..];
    let no_files = |path: &str| {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            format!("{path}: not read by parse_only"),
        ))
    };
    match command.as_str() {
        "demo" => demo::parse(rest).map(drop),
        "proxy" => proxy::parse(rest).map(drop),
        "reconnect-client" | "reconnect_interop_client" => reconnect_client::parse(rest).map(drop),
        "reconnect-server" | "reconnect_interop_server" => reconnect_server::parse(rest).map(drop),
        "relay" => relay::parse(rest).map(drop),
        "serve" => serve::parse(rest, &no_files).map(drop),
        "timer-bench" => timer_bench::parse(rest).map(drop),
        "-h" | "--help" | "help" | "-V" | "--version" => Ok(()),
        other => Err(UsageError(format!(
            "unknown command {other:?} (see backoffd --help)"
        ))),
    }
}

/// Validates the text of a `serve --config` file the way `backoffd serve --config PATH
/// --check-config` does (`path` only names the file in messages). Host names are resolved as
/// in [`parse_only`]. The `config_file` fuzz target drives this; it must never panic. Only
/// the fuzz targets and the tests build it.
#[cfg(any(test, fuzzing))]
pub fn check_config_text(path: &str, text: &str) -> Result<(), UsageError> {
    serve::plan_from_text(path, text).map(drop)
}

/// Logs to stderr; `RUST_LOG` overrides the default level (`info`). The DTLS library warns of
/// every ClientHello extension it does not know (a peer's choice, not a fault of ours), so its
/// own lines are errors only unless `RUST_LOG` asks for more; our coaps driver reports what
/// matters.
pub fn init_logging() {
    let filter = "info,rtc_dtls=error";
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(filter))
        .format_timestamp_micros()
        .try_init();
}

/// Resolves `HOST:PORT` once at start-up (the loop never does blocking name lookups).
fn resolve(flag: &str, hostport: &str) -> Result<SocketAddr, UsageError> {
    lookup(hostport).ok_or_else(|| {
        UsageError(format!(
            "--{flag}: cannot resolve {hostport:?} (expected HOST:PORT)"
        ))
    })
}

#[cfg(not(fuzzing))]
fn lookup(hostport: &str) -> Option<SocketAddr> {
    use std::net::ToSocketAddrs;
    hostport.to_socket_addrs().ok().and_then(|mut a| a.next())
}

/// Fuzzing must not send DNS queries: literal `IP:PORT` and `localhost:PORT` only.
#[cfg(fuzzing)]
fn lookup(hostport: &str) -> Option<SocketAddr> {
    if let Ok(addr) = hostport.parse() {
        return Some(addr);
    }
    let (host, port) = hostport.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let ip = match host {
        "localhost" => std::net::IpAddr::from([127, 0, 0, 1]),
        _ => host.parse().ok()?,
    };
    Some(SocketAddr::new(ip, port))
}

/// A `--NAME HOST:PORT` flag, resolved, if given.
fn addr_flag(flags: &Flags, name: &str) -> Result<Option<SocketAddr>, UsageError> {
    let hostport = flags.get::<String>(name)?;
    hostport.map(|h| resolve(name, &h)).transpose()
}

/// `--metrics HOST:PORT`: where the metrics endpoint listens, if anywhere.
fn metrics_flag(flags: &Flags) -> Result<Option<SocketAddr>, UsageError> {
    addr_flag(flags, "metrics")
}

/// Descriptors beyond the upstream endpoints: listeners, the loop's own (epoll, timerfd,
/// signalfd), metrics and control-port connections, standard streams.
const FD_RESERVE: u64 = 256;

/// Makes room for every descriptor the proxies may open: each upstream's endpoints at
/// `--max-upstream-endpoints`, and `connections` more (the RFC 8323 listeners' caps). The
/// sockets open only as the load needs them, so a limit too low is a warning, not an error:
/// past it, new endpoints fail and requests get 5.03, and accepting pauses.
fn make_room_for_endpoints<'a>(
    proxies: impl IntoIterator<Item = &'a ProxyConfig>,
    connections: u64,
) {
    let (mut wanted, mut bound, mut upstreams) = (FD_RESERVE + connections, 0, 0);
    for p in proxies {
        upstreams += p.upstream_count();
        bound = bound.max(p.limits.max_upstream_endpoints);
        wanted += (p.upstream_count() * p.limits.max_upstream_endpoints) as u64;
    }
    match raise_fd_limit(wanted) {
        Ok(FdLimit::Enough) => {}
        Ok(FdLimit::Raised { from, to }) => {
            log::info!("raised the open-file limit from {from} to {to} for up to {bound} sockets per upstream")
        }
        Ok(FdLimit::Short { hard }) => log::warn!(
            "the open-file limit is {hard}, below the {wanted} that {upstreams} upstream(s) x \
             --max-upstream-endpoints {bound} may need: raise it (ulimit -n, systemd \
             LimitNOFILE=) or lower --max-upstream-endpoints"
        ),
        Err(e) => log::debug!("cannot read or raise the open-file limit: {e}"),
    }
}

/// The CoAP proxy bound at `listen` and `dtls` (at least one), with the HTTP cross-proxy
/// composed in front of it when `http` is given (`--http-listen`), as a component that reports
/// its metrics; and the line that says where it listens.
fn proxy_part(
    listeners: ProxyListeners,
    coaps_upstream: Option<dtls::UpstreamPart>,
    config: ProxyConfig,
    http: Option<HttpPart>,
    sources: &mut MetricsSources,
) -> Result<(Box<dyn Component>, String), String> {
    let plain = listeners.listen;
    let proxy = bind_proxy(listeners, coaps_upstream, config)?;
    let plain = plain.and(proxy.local_addr().ok());
    // "CoAP proxy listening on P and coaps listening on S and coap+tcp listening on T": the
    // words scripts (and the tests) look for before each address.
    let mut on: Vec<String> = plain.iter().map(|p| format!("listening on {p}")).collect();
    on.extend(proxy.dtls_addr().map(|s| format!("coaps listening on {s}")));
    for (scheme, addr) in proxy.stream_addrs() {
        on.push(format!("{scheme} listening on {addr}"));
    }
    let line = match on.is_empty() {
        true => "CoAP proxy listening nowhere".into(),
        false => format!("CoAP proxy {}", on.join(" and ")),
    };
    let part = match http {
        None => reported(proxy, sources),
        Some(h) => http::in_front(proxy, h, sources)?,
    };
    Ok((part, line))
}

/// Where a proxy takes its clients: plain CoAP, coaps, or both.
struct ProxyListeners {
    listen: Option<SocketAddr>,
    dtls: Option<dtls::DtlsPart>,
    streams: Option<stream::StreamPart>,
}

/// The proxy bound at its client-facing sockets, speaking to its upstream over the transport
/// the command line asks for. Each optional transport is handed over by its own module
/// (`dtls`, `stream`), which a build without its feature cannot reach with a part.
fn bind_proxy(
    ProxyListeners {
        listen,
        dtls,
        streams,
    }: ProxyListeners,
    coaps_upstream: Option<dtls::UpstreamPart>,
    config: ProxyConfig,
) -> Result<ProxyComponent, String> {
    let mut listeners = listen.map(Listeners::plain).unwrap_or_default();
    if let Some(d) = dtls {
        dtls::add_listener(&mut listeners, d);
    }
    if let Some(s) = &streams {
        stream::add_listeners(&mut listeners, s);
    }
    let mut proxy = ProxyComponent::bind_listeners(&listeners, config).map_err(|e| {
        let at: Vec<String> = listen.iter().map(|a| a.to_string()).collect();
        format!("cannot bind {}: {e}", at.join(" and coaps "))
    })?;
    if let Some(u) = coaps_upstream {
        proxy = dtls::with_upstream(proxy, u)?;
    }
    if let Some(s) = streams {
        proxy = stream::with_upstream(proxy, s);
    }
    Ok(proxy)
}

/// The most connections the RFC 8323 listeners of `streams` may hold together.
fn stream_connections(streams: Option<&stream::StreamPart>) -> u64 {
    streams.map_or(0, stream::max_connections)
}

/// `component`, ready for [`Reactor::add`], shared with the metrics endpoint's `sources`.
fn reported<T: Component + MetricsSource>(
    component: T,
    sources: &mut MetricsSources,
) -> Box<dyn Component> {
    let shared = Rc::new(RefCell::new(component));
    sources.push(Rc::clone(&shared) as Rc<dyn MetricsSource>);
    Box::new(shared)
}

/// Adds the metrics endpoint, if `addr` is given, reporting on `sources`.
fn add_metrics(
    reactor: &mut Reactor,
    addr: Option<SocketAddr>,
    sources: MetricsSources,
) -> Result<(), String> {
    let Some(addr) = addr else {
        return Ok(());
    };
    let config = MetricsConfig {
        addr,
        ..MetricsConfig::default()
    };
    let server = MetricsServer::bind(config, sources)
        .map_err(|e| format!("cannot bind --metrics {addr}: {e}"))?;
    reactor
        .add(Box::new(server))
        .map(drop)
        .map_err(|e| format!("cannot start the metrics endpoint: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(line: &str) -> Vec<String> {
        std::iter::once("backoffd")
            .chain(line.split_whitespace())
            .map(String::from)
            .collect()
    }

    #[test]
    #[cfg(all(feature = "demo", feature = "timer-bench"))]
    fn parse_only_validates_without_running() {
        for ok in [
            "proxy --upstream 127.0.0.1:5684 --preset wan --timeout 1.5s",
            "serve --control_port 8080 --retry_port 8081 --metrics 127.0.0.1:9102",
            "reconnect-server --control_port=8080 --retry_port=8081 --wake epoll",
            "reconnect_interop_client -server_control_port=1 -server_retry_port=2",
            "demo --requests 10 --loss 0",
            "timer-bench --min 1ms --max 2ms --fifo-priority 50 --timerslack-ns 1",
            "proxy --help",
            "",
        ] {
            assert_eq!(parse_only(&argv(ok)), Ok(()), "{ok}");
        }
        for (bad, names) in [
            ("proxy --upstream 127.0.0.1:5684 --jitter 1", "--jitter"),
            ("proxy --forward", "--allow"),
            ("serve", "nothing to serve"),
            ("serve --config /etc/hostname", "--config: cannot read"),
            (
                "reconnect-server --control_port 1 --retry_port 1",
                "--retry_port",
            ),
            ("demo --loss 1", "--loss"),
            (
                "timer-bench --fifo-priority 100 --timerslack-ns 1",
                "--fifo-priority",
            ),
            ("timer-bench --min 2s --max 1s", "--min"),
            ("bogus", "unknown command"),
        ] {
            let e = parse_only(&argv(bad)).unwrap_err();
            assert!(e.0.contains(names), "{bad}: {e}");
        }
    }

    #[test]
    fn max_inflight_bytes_takes_the_same_sizes() {
        let line = "proxy --upstream 127.0.0.1:5684 --max-inflight-bytes 8MiB";
        assert_eq!(parse_only(&argv(line)), Ok(()));
        let line = "proxy --upstream 127.0.0.1:5684 --max-inflight-bytes 1KiB";
        let e = parse_only(&argv(line)).unwrap_err();
        assert!(e.0.contains("at least --max-request-size"), "{e}");
    }

    #[test]
    fn the_byte_bounds_of_kept_answers_take_sizes_and_refuse_zero_naming_the_flag() {
        for flag in ["max-cached-bytes", "max-cached-bytes-per-client"] {
            let line = format!("proxy --upstream 127.0.0.1:5684 --{flag} 512KiB");
            assert_eq!(parse_only(&argv(&line)), Ok(()));
            let line = format!("proxy --upstream 127.0.0.1:5684 --{flag} 0");
            let e = parse_only(&argv(&line)).unwrap_err();
            assert_eq!(e.0, format!("--{flag}: must be at least 1"));
            let file = format!("[proxy]\nupstream = 127.0.0.1:5684\n{flag} = 2MiB\n");
            assert_eq!(check_config_text("x.conf", &file), Ok(()));
        }
    }

    /// A build without the cache refuses `cache-size` on its line, and `--check-config` says
    /// nothing of a cache it does not have.
    #[test]
    #[cfg(not(feature = "cache"))]
    fn a_build_without_the_cache_refuses_cache_size_in_a_file_and_does_not_describe_one() {
        let text = "[proxy]\nupstream = 127.0.0.1:5684\ncache-size = 4MiB\n";
        let e = check_config_text("x.conf", text).unwrap_err();
        assert!(e
            .0
            .starts_with("x.conf:3: cache-size: this backoffd was built without"));
        let plan = serve::plan_from_text("x.conf", "[proxy]\nupstream = 127.0.0.1:5684\n");
        let described = serve::describe(&plan.unwrap());
        assert!(!described.contains("cache"), "{described}");
    }

    #[test]
    fn check_config_text_names_file_line_and_key() {
        let text = "[proxy]\nupstream = 127.0.0.1:5684\njitter = 2\n";
        let e = check_config_text("x.conf", text).unwrap_err();
        assert!(e.0.starts_with("x.conf:3: jitter"), "{e}");
        assert_eq!(
            check_config_text("x.conf", "[reconnect]\ncontrol_port = 1\nretry_port = 2\n"),
            Ok(())
        );
    }

    /// `--cache-size`, which a build without the `cache` feature refuses.
    #[cfg(feature = "cache")]
    mod cache {
        use super::*;

        #[test]
        fn cache_size_takes_bytes_kib_or_mib_up_to_1024mib() {
            for ok in ["0", "65536", "64KiB", "1024MiB"] {
                let line = format!("proxy --upstream 127.0.0.1:5684 --cache-size {ok}");
                assert_eq!(parse_only(&argv(&line)), Ok(()), "{line}");
            }
            for (bad, says) in [
                (
                    "64kB",
                    "expected a whole number of bytes, KiB or MiB: 65536, 64KiB, 4MiB",
                ),
                ("4M", "expected a whole number of bytes, KiB or MiB"),
                ("-1", "expected a whole number of bytes, KiB or MiB"),
                ("1025MiB", "must be at most 1024MiB (0 turns the cache off)"),
            ] {
                let line = format!("proxy --upstream 127.0.0.1:5684 --cache-size {bad}");
                let e = parse_only(&argv(&line)).unwrap_err();
                assert!(
                    e.0.starts_with("--cache-size: ") && e.0.contains(says),
                    "{bad}: {e}"
                );
            }
        }

        #[test]
        fn cache_size_in_a_config_file_is_checked_on_its_line() {
            let file = |value: &str| {
                format!("[proxy]\nupstream = 127.0.0.1:5684\n\ncache-size = {value}\n")
            };
            assert_eq!(check_config_text("x.conf", &file("4MiB # four")), Ok(()));
            let e = check_config_text("x.conf", &file("4 MiB")).unwrap_err();
            assert!(
                e.0.starts_with("x.conf:4: cache-size: invalid value \"4 MiB\""),
                "{e}"
            );
            let e = check_config_text("x.conf", &file("2048MiB")).unwrap_err();
            assert!(
                e.0.starts_with("x.conf:4: cache-size: must be at most 1024MiB"),
                "{e}"
            );
        }

        #[test]
        fn check_config_reports_the_cache_on_with_its_bytes_or_off() {
            let text = "[proxy]\nupstream = 127.0.0.1:5684\ncache-size = 4MiB\n\
                        [proxy]\nlisten = 0.0.0.0:5685\nupstream = 127.0.0.1:5686\ncache-size = 1000\n\
                        [proxy]\nlisten = 0.0.0.0:5687\nupstream = 127.0.0.1:5688\n";
            let plan = serve::plan_from_text("x.conf", text).unwrap();
            let lines: Vec<String> = serve::describe(&plan).lines().map(String::from).collect();
            assert!(
                lines[0].ends_with("; response cache on, 4194304 bytes (4MiB)"),
                "{lines:?}"
            );
            assert!(
                lines[1].ends_with("; response cache on, 1000 bytes"),
                "{lines:?}"
            );
            assert!(lines[2].ends_with("; response cache off"), "{lines:?}");
        }
    }
}
