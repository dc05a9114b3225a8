//! CoAP proxy throughput and added latency on loopback, side by side in one run.
//!
//! One thread on CPU 0 runs the load generator and a fast upstream (`benches/loadgen/`,
//! batched system calls); the system under test runs alone on CPU 1:
//!
//! - `direct`: no proxy, the generator talks to the upstream (the harness's own limit);
//! - `relay`: `backoffd relay`, a stateless UDP relay on the same reactor as the proxy: the
//!   same system calls per datagram without any state (the physical limit for a proxy here);
//! - `backoffd`: `backoffd proxy --upstream` (reverse proxy);
//! - `backoffd-fwd`: `backoffd proxy --forward` with Proxy-Uri requests, like libcoap below;
//! - `backoffd-cache`: the reverse proxy with `--cache-size 4MiB`: every GET of the one path
//!   but the first is a cache hit (a request and its answer, no upstream leg);
//! - `libcoap`: Debian libcoap3-bin's `coap-server-notls -P` forward proxy (Proxy-Uri);
//! - `aiocoap`: `aiocoap-proxy --reverse --unconditional` (PyPI aiocoap).
//!
//! All targets are started first and warmed up (caches full). Then ROUNDS rounds, the targets
//! interleaved within each, of the peak rate with WINDOW requests outstanding (closed loop) for
//! CON and NON GETs; the median is reported, with the range. Then ROUNDS rounds, interleaved the
//! same way, open loop at LOAD x each target's median CON peak: the round trip through the
//! target and, right after, directly to the upstream at the same rate; the difference is the
//! latency the target adds (the round with the median added p99 is reported, with the range,
//! and the failures of all rounds). Last, with `backoffd` among the targets, the retry timers
//! under load (`proxy_throughput/timers.rs`): how late the proxy's retransmissions go while it
//! carries the same load.
//!
//! Every target runs with its default flags (backoffd-cache: and the cache). The upstream
//! watches the Message IDs it is sent, as a deduplicating server would (RFC 7252 §4.4): per
//! target it counts the requests it answered, the sources they came from (for backoffd: the
//! endpoints it needed), and any (source, MID) that came again with a new token within
//! EXCHANGE_LIFETIME (a reuse such a server would answer with the earlier request's answer).
//!
//! `cargo bench --bench proxy_throughput`. Environment: SECONDS (measured period per run,
//! default 3), WINDOW (default 128), ONLY=relay,backoffd (a subset), PEERS=0 (skip libcoap and
//! aiocoap; otherwise tests/interop/setup.sh installs them if missing), LOAD (share of the CON
//! peak for the latency runs, default 0.5), BURST (datagrams per system call in the latency runs,
//! default 2), ROUNDS (default 3), FIFO_PRIORITY=P (run targets under SCHED_FIFO, root),
//! TARGET_LOG (the targets' RUST_LOG, default `warn`), BASELINE_BIN=path (adds `baseline` and `baseline-fwd`: another backoffd build, with default
//! flags plus BASELINE_FLAGS, e.g. `--client-bytes-per-sec 0` for a build from before fa3063b,
//! whose per-source send budget was on by default and throttles the one-source generator).

// The load generator is benchmark support, shared with tests, not library API; each user
// takes part of it.
#[allow(dead_code, unused_imports)]
#[path = "loadgen/mod.rs"]
mod loadgen;

#[path = "../tests/common/mod.rs"]
mod common;

#[path = "proxy_throughput/timers.rs"]
mod timers;

use std::collections::HashSet;
use std::fs::{self, File};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use backoffd::coap::option::{PROXY_URI, URI_PATH};
use common::free_port;
use loadgen::{FastUpstream, LoadReport, LoadSpec, MidCounts, Offered};

/// Where the system under test runs; the harness takes CPU 0.
const TARGET_CPU: usize = 1;

struct Settings {
    seconds: f64,
    window: usize,
    only: Option<Vec<String>>,
    peers: bool,
    /// Share of the CON peak at which latency is measured.
    load: f64,
    /// Run targets under SCHED_FIFO at this priority (root only).
    fifo: Option<i32>,
    /// Datagrams per system call in the latency runs.
    burst: usize,
    /// Peak runs per target and mode (interleaved across targets; the median is reported).
    rounds: usize,
}

impl Settings {
    fn from_env() -> Settings {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Settings {
            seconds: var("SECONDS").map_or(3.0, |v| v.parse().expect("SECONDS: a number")),
            window: var("WINDOW").map_or(128, |v| v.parse().expect("WINDOW: an integer")),
            only: var("ONLY").map(|v| v.split(',').map(str::to_owned).collect()),
            peers: var("PEERS").is_none_or(|v| v != "0"),
            load: var("LOAD").map_or(0.5, |v| v.parse().expect("LOAD: a number in (0, 1]")),
            fifo: var("FIFO_PRIORITY").map(|v| v.parse().expect("FIFO_PRIORITY: 1..99")),
            burst: var("BURST").map_or(2, |v| v.parse().expect("BURST: 1..64")),
            rounds: var("ROUNDS").map_or(3, |v| v.parse().expect("ROUNDS: an integer >= 1")),
        }
    }

    fn wants(&self, name: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|o| o == name))
    }
}

/// A system under test: how to start it and what its requests must carry.
struct Target {
    name: &'static str,
    /// argv, with `{port}` for the port it must listen on; `None` for `direct`.
    command: Option<Vec<String>>,
    options: Options,
}

/// CoAP options (number, value) every request to a target carries.
type Options = Vec<(u16, Vec<u8>)>;

/// Results for one target: the peak runs of every round, the latency pair, and what the
/// upstream saw of its Message IDs.
struct Row {
    name: &'static str,
    peak_con: Vec<LoadReport>,
    peak_non: Vec<LoadReport>,
    /// Each round's latency pair: through the target, then directly at the same rate.
    halves: Vec<Half>,
    mids: Seen,
}

/// One latency pair at LOAD x the target's median CON peak.
struct Half {
    through: LoadReport,
    direct: LoadReport,
    /// Time the hypervisor took the target CPU away during the run through the target
    /// (steal time in /proc/stat): a VM's stalls that no program on it can remove.
    stolen: Duration,
}

impl Half {
    fn added_p99(&self) -> f64 {
        self.through.latency.p99_us - self.direct.latency.p99_us
    }
}

impl Row {
    /// The round with the median added p99 (the host's noise hits single rounds: a median
    /// of interleaved rounds compares targets under the same conditions).
    fn half(&self) -> &Half {
        let mut sorted: Vec<&Half> = self.halves.iter().collect();
        sorted.sort_by(|a, b| a.added_p99().total_cmp(&b.added_p99()));
        sorted[(sorted.len() - 1) / 2]
    }
}

/// What the upstream saw of one target's requests over all its runs.
#[derive(Default)]
struct Seen {
    requests: u64,
    reused: u64,
    repeated: u64,
    sources: HashSet<SocketAddr>,
}

/// Runs `spec` with the upstream serving, adding what the upstream saw to `seen`.
fn run_seen(
    spec: &LoadSpec,
    upstream: &mut FastUpstream,
    seen: &mut Seen,
) -> Result<LoadReport, String> {
    let (answered, before) = (upstream.answered, upstream.mid_counts());
    let report = loadgen::run(spec, Some(&mut *upstream)).map_err(|e| e.to_string())?;
    let after: MidCounts = upstream.mid_counts();
    seen.requests += upstream.answered - answered;
    seen.reused += after.reused - before.reused;
    seen.repeated += after.repeated - before.repeated;
    seen.sources.extend(upstream.take_new_sources());
    Ok(report)
}

/// A started target.
struct Running<'t> {
    target: &'t Target,
    addr: SocketAddr,
    child: Option<ChildGuard>,
    /// What the upstream saw of its requests from the warm-up on.
    seen: Seen,
}

/// Lets the target at `index` run and stops every other one.
fn only_run(running: &[Running<'_>], index: usize) {
    for (i, r) in running.iter().enumerate() {
        if let Some(child) = &r.child {
            child.set_running(i == index);
        }
    }
}

fn main() {
    let settings = Settings::from_env();
    let pinned = pin_self(0);
    let mut upstream = FastUpstream::bind("127.0.0.1:0".parse().unwrap()).expect("bind upstream");
    upstream.watch_message_ids();
    let up = upstream.local_addr().unwrap();
    let peers = settings.peers && install_peers();
    let targets: Vec<Target> = targets(up, peers)
        .into_iter()
        .filter(|t| settings.wants(t.name))
        .collect();
    let logs = log_dir();
    eprintln!(
        "proxy_throughput: {} s per run, window {}, harness {}, targets: {}",
        settings.seconds,
        settings.window,
        if pinned {
            "pinned to CPU 0, targets to CPU 1"
        } else {
            "not pinned (fewer than 2 CPUs)"
        },
        targets
            .iter()
            .map(|t| t.name)
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut running = Vec::new();
    for target in &targets {
        match start(target, up, &mut upstream, &settings, pinned, &logs) {
            Ok(r) => running.push(r),
            Err(e) => eprintln!("{}: skipped: {e}", target.name),
        }
    }
    let began = Instant::now();
    let rows = measure_all(running, up, &mut upstream, &settings).expect("measure");
    let timer_run = rows.iter().find(|r| r.name == "backoffd").map(|r| {
        let rate = median(&r.peak_con).rate() * settings.load;
        timers::run(rate, up, &mut upstream, &settings, pinned, &logs)
    });
    print_tables(&rows, &settings, began.elapsed());
    match timer_run {
        Some(Ok(run)) => timers::print(&run, &settings),
        Some(Err(e)) => eprintln!("retry timers under load: not measured: {e}"),
        None => {}
    }
}

fn targets(up: SocketAddr, peers: bool) -> Vec<Target> {
    let bin = env!("CARGO_BIN_EXE_backoffd").to_owned();
    let up_s = up.to_string();
    let path = vec![(URI_PATH, b"bench".to_vec())];
    let proxy_uri = vec![(PROXY_URI, format!("coap://{up}/bench").into_bytes())];
    let mut list = vec![
        Target {
            name: "direct",
            command: None,
            options: path.clone(),
        },
        Target {
            name: "relay",
            command: Some(words(&format!(
                "{bin} relay --listen 127.0.0.1:{{port}} --upstream {up_s}"
            ))),
            options: path.clone(),
        },
        Target {
            name: "backoffd",
            command: Some(words(&format!(
                "{bin} proxy --listen 127.0.0.1:{{port}} --upstream {up_s}"
            ))),
            options: path.clone(),
        },
        Target {
            name: "backoffd-fwd",
            command: Some(words(&format!(
                "{bin} proxy --listen 127.0.0.1:{{port}} --forward --allow {up_s}"
            ))),
            options: proxy_uri.clone(),
        },
        // Every request after the first is a cache hit: 2 datagrams where a forward takes 4.
        Target {
            name: "backoffd-cache",
            command: Some(words(&format!(
                "{bin} proxy --listen 127.0.0.1:{{port}} --upstream {up_s} --cache-size 4MiB"
            ))),
            options: path.clone(),
        },
    ];
    list.extend(baseline_targets(&up_s, &path, &proxy_uri));
    if peers {
        list.extend(peer_targets(&up_s, path, proxy_uri));
    }
    list
}

/// A command line split at whitespace.
fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_owned).collect()
}

/// BASELINE_BIN: another build of backoffd (say, the commit before a redesign), measured
/// in the same run, interleaved with this one, so that a before/after ratio shares its
/// noise.
fn baseline_targets(up_s: &str, path: &Options, proxy_uri: &Options) -> Vec<Target> {
    let mut list = Vec::new();
    if let Some(old) = std::env::var("BASELINE_BIN").ok().filter(|v| !v.is_empty()) {
        let extra = std::env::var("BASELINE_FLAGS").unwrap_or_default();
        list.push(Target {
            name: "baseline",
            command: Some(words(&format!(
                "{old} proxy --listen 127.0.0.1:{{port}} --upstream {up_s} {extra}"
            ))),
            options: path.clone(),
        });
        list.push(Target {
            name: "baseline-fwd",
            command: Some(words(&format!(
                "{old} proxy --listen 127.0.0.1:{{port}} --forward --allow {up_s} {extra}"
            ))),
            options: proxy_uri.clone(),
        });
    }
    list
}

/// The other implementations: libcoap's server as a forward proxy, aiocoap's reverse proxy.
fn peer_targets(up_s: &str, path: Options, proxy_uri: Options) -> Vec<Target> {
    let venv = repo().join("target/interop-venv/bin/aiocoap-proxy");
    vec![
        Target {
            name: "libcoap",
            command: Some(words(
                "coap-server-notls -A 127.0.0.1 -p {port} -P ,backoffd-bench",
            )),
            options: proxy_uri,
        },
        Target {
            name: "aiocoap",
            command: Some(words(&format!(
                "{} --reverse --bind 127.0.0.1:{{port}} --unconditional {up_s}",
                venv.display()
            ))),
            options: path,
        },
    ]
}

/// Starts `target` (pinned to the target CPU) and waits until it answers through to the
/// upstream; then warms it up (fills its caches) with one unmeasured peak run.
fn start<'t>(
    target: &'t Target,
    up: SocketAddr,
    upstream: &mut FastUpstream,
    settings: &Settings,
    pinned: bool,
    logs: &Path,
) -> Result<Running<'t>, String> {
    // The sources of the start-up probes count as the target's too.
    upstream.take_new_sources();
    let (child, addr) = match &target.command {
        None => (None, up),
        Some(argv) => {
            let (child, addr) = spawn(target.name, argv, settings, pinned, logs)?;
            (Some(ChildGuard(child)), addr)
        }
    };
    wait_until_answering(addr, &target.options, upstream)?;
    let mut warm_up = spec(
        settings,
        true,
        Offered::Window(settings.window),
        addr,
        &target.options,
    );
    warm_up.duration = Duration::from_secs(2);
    let mut seen = Seen::default();
    run_seen(&warm_up, upstream, &mut seen)?;
    if let Some(child) = &child {
        child.set_running(false);
    }
    Ok(Running {
        target,
        addr,
        child,
        seen,
    })
}

/// One run's parameters.
fn spec(
    settings: &Settings,
    confirmable: bool,
    offered: Offered,
    to: SocketAddr,
    options: &[(u16, Vec<u8>)],
) -> LoadSpec {
    LoadSpec {
        target: to,
        confirmable,
        options: options.to_vec(),
        offered,
        warmup: Duration::from_millis(500),
        duration: Duration::from_secs_f64(settings.seconds),
        timeout: Duration::from_secs(1),
        // Peak runs batch freely; latency runs send as the rate says (see LoadSpec::burst).
        burst: match offered {
            Offered::Window(_) => 64,
            Offered::Rate(_) => settings.burst,
        },
    }
}

/// ROUNDS rounds of peak runs, the targets interleaved within each round so that the
/// machine's drift hits them alike; then ROUNDS rounds, interleaved the same way, of the
/// latency pair at LOAD x each target's median CON peak.
fn measure_all(
    mut running: Vec<Running<'_>>,
    up: SocketAddr,
    upstream: &mut FastUpstream,
    settings: &Settings,
) -> Result<Vec<Row>, String> {
    let window = Offered::Window(settings.window);
    let mut peaks: Vec<(Vec<LoadReport>, Vec<LoadReport>)> =
        running.iter().map(|_| Default::default()).collect();
    for round in 1..=settings.rounds {
        for i in 0..running.len() {
            only_run(&running, i);
            let (r, (con, non)) = (&mut running[i], &mut peaks[i]);
            for (confirmable, runs) in [(true, &mut *con), (false, &mut *non)] {
                let s = spec(settings, confirmable, window, r.addr, &r.target.options);
                runs.push(run_seen(&s, upstream, &mut r.seen)?);
            }
            eprintln!(
                "round {round} {:>12}: CON {:>9.0}/s NON {:>9.0}/s",
                r.target.name,
                con.last().unwrap().rate(),
                non.last().unwrap().rate()
            );
        }
    }
    let direct_options = vec![(URI_PATH, b"bench".to_vec())];
    let mut direct_seen = Seen::default();
    let mut halves: Vec<Vec<Half>> = running.iter().map(|_| Vec::new()).collect();
    for round in 1..=settings.rounds {
        for i in 0..running.len() {
            only_run(&running, i);
            let r = &mut running[i];
            let rate = Offered::Rate(median(&peaks[i].0).rate() * settings.load);
            let stolen_before = steal(TARGET_CPU);
            let through = run_seen(
                &spec(settings, true, rate, r.addr, &r.target.options),
                upstream,
                &mut r.seen,
            )?;
            let stolen = steal(TARGET_CPU).saturating_sub(stolen_before);
            let direct = spec(settings, true, rate, up, &direct_options);
            let direct = run_seen(&direct, upstream, &mut direct_seen)?;
            eprintln!(
                "round {round} {:>12}: at {rate:?} p99 {:.1} us (direct {:.1} us), {} errors, {} lost, {stolen:?} stolen",
                r.target.name, through.latency.p99_us, direct.latency.p99_us, through.errors, through.lost
            );
            halves[i].push(Half {
                through,
                direct,
                stolen,
            });
        }
    }
    only_run(&running, usize::MAX);
    let rows = (running.iter_mut().zip(peaks).zip(halves))
        .map(|((r, (peak_con, peak_non)), halves)| Row {
            name: r.target.name,
            peak_con,
            peak_non,
            halves,
            mids: std::mem::take(&mut r.seen),
        })
        .collect();
    Ok(rows)
}

/// The run with the median rate (the lower middle one for an even count).
fn median(runs: &[LoadReport]) -> &LoadReport {
    let mut sorted: Vec<&LoadReport> = runs.iter().collect();
    sorted.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
    sorted[(sorted.len() - 1) / 2]
}

/// "min-max" of the runs' rates.
fn range(runs: &[LoadReport]) -> String {
    let rates = runs.iter().map(LoadReport::rate);
    let (lo, hi) = rates.fold((f64::MAX, 0.0f64), |(lo, hi), r| (lo.min(r), hi.max(r)));
    let digits = if hi < 10_000.0 { 1 } else { 0 };
    format!("{:.*}-{:.*}k", digits, lo / 1000.0, digits, hi / 1000.0)
}

/// Kills the child when dropped (SIGTERM first so it can say goodbye, then SIGKILL).
struct ChildGuard(Child);

impl ChildGuard {
    /// SIGSTOP (`false`) or SIGCONT (`true`): only the target being measured may run, so an
    /// idle peer's housekeeping (aiocoap expiring thousands of exchanges, say) cannot steal
    /// the target CPU in the middle of another target's run.
    fn set_running(&self, running: bool) {
        let signal = if running {
            libc::SIGCONT
        } else {
            libc::SIGSTOP
        };
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.0.id() as libc::pid_t, signal) };
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        self.set_running(true);
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(
    name: &str,
    argv: &[String],
    settings: &Settings,
    pinned: bool,
    logs: &Path,
) -> Result<(Child, SocketAddr), String> {
    let port = free_port();
    let argv: Vec<String> = argv
        .iter()
        .map(|a| a.replace("{port}", &port.to_string()))
        .collect();
    let log_path = logs.join(format!("{name}.log"));
    let log = File::create(&log_path).map_err(|e| e.to_string())?;
    let mut command = Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .env("RUST_LOG", target_log())
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    let fifo = settings.fifo;
    // SAFETY: only async-signal-safe system calls between fork and exec.
    unsafe {
        command.pre_exec(move || {
            if pinned {
                set_affinity(0, TARGET_CPU);
            }
            if let Some(priority) = fifo {
                let param = libc::sched_param {
                    sched_priority: priority,
                };
                if libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = command
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", argv[0]))?;
    eprintln!("{name}: {} (log: {})", argv.join(" "), log_path.display());
    Ok((child, SocketAddr::from(([127, 0, 0, 1], port))))
}

/// The targets' log filter: TARGET_LOG, or `warn`. `TARGET_LOG=backoffd::reactor=debug` logs
/// each turn of backoffd's loop that took over 1 ms, with what ran in it, to
/// target/bench-logs/NAME.log.
fn target_log() -> String {
    std::env::var("TARGET_LOG").unwrap_or_else(|_| "warn".into())
}

/// Sends single requests until one is answered 2.xx (the target is up and routes to the
/// upstream), serving the upstream meanwhile; up to 15 s (aiocoap takes a while to import).
fn wait_until_answering(
    addr: SocketAddr,
    options: &[(u16, Vec<u8>)],
    upstream: &mut FastUpstream,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        let probe = LoadSpec {
            target: addr,
            confirmable: true,
            options: options.to_vec(),
            offered: Offered::Window(1),
            warmup: Duration::ZERO,
            duration: Duration::from_millis(100),
            timeout: Duration::from_millis(200),
            burst: 1,
        };
        // Refused (nothing listening yet) or no answer: try again.
        if loadgen::run(&probe, Some(upstream)).is_ok_and(|r| r.answered > 0) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("{addr} never answered a request with 2.xx"))
}

/// The steal time of `cpu` so far (/proc/stat, in USER_HZ ticks of 10 ms); zero if unknown.
fn steal(cpu: usize) -> Duration {
    let stat = fs::read_to_string("/proc/stat").unwrap_or_default();
    let prefix = format!("cpu{cpu} ");
    let ticks = (stat.lines())
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split_whitespace().nth(7)?.parse::<u64>().ok())
        .unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn set_affinity(pid: libc::pid_t, cpu: usize) -> bool {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Pins this thread to `cpu` if the machine has a CPU for the target too.
fn pin_self(cpu: usize) -> bool {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    cpus > TARGET_CPU && set_affinity(0, cpu)
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn log_dir() -> PathBuf {
    let dir = repo().join("target/bench-logs");
    fs::create_dir_all(&dir).expect("create target/bench-logs");
    dir
}

/// Installs libcoap3-bin and aiocoap via the interop tests' script; false (peers skipped) if
/// that fails, with the reason on stderr.
fn install_peers() -> bool {
    let status = Command::new("bash")
        .arg(repo().join("tests/interop/setup.sh"))
        .status();
    match status {
        Ok(s) if s.success() => true,
        other => {
            eprintln!("peers skipped: tests/interop/setup.sh failed ({other:?})");
            false
        }
    }
}

fn print_tables(rows: &[Row], settings: &Settings, took: Duration) {
    print_throughput(rows, settings);
    print_added_latency(rows, settings);
    print_mids(rows, took);
    print_json(rows);
}

/// The peak throughput table.
fn print_throughput(rows: &[Row], settings: &Settings) {
    let relay = rows.iter().find(|r| r.name == "relay");
    let vs = |rate: f64, of: Option<f64>| {
        of.map_or("-".into(), |o| format!("{:.0} %", 100.0 * rate / o))
    };
    println!(
        "\n### Throughput (GET, {} outstanding; median of {} interleaved rounds of {} s, range in brackets)\n",
        settings.window, settings.rounds, settings.seconds
    );
    println!("| target | CON req/s | vs relay | NON req/s | vs relay | CON p50 / p99 RTT (us) | failed |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let (con, non) = (median(&r.peak_con), median(&r.peak_non));
        let failed: u64 = r
            .peak_con
            .iter()
            .chain(&r.peak_non)
            .map(|x| x.errors + x.lost)
            .sum();
        println!(
            "| {} | {:.0} ({}) | {} | {:.0} ({}) | {} | {:.0} / {:.0} | {} |",
            r.name,
            con.rate(),
            range(&r.peak_con),
            vs(con.rate(), relay.map(|x| median(&x.peak_con).rate())),
            non.rate(),
            range(&r.peak_non),
            vs(non.rate(), relay.map(|x| median(&x.peak_non).rate())),
            con.latency.p50_us,
            con.latency.p99_us,
            failed,
        );
    }
}

/// The added-latency table, at a fraction of each target's peak.
fn print_added_latency(rows: &[Row], settings: &Settings) {
    println!(
        "\n### Added latency at {:.0} % of each target's median CON peak (open loop, CON GET, {} per system call; the round with the median added p99 of {} interleaved rounds)\n",
        settings.load * 100.0,
        settings.burst,
        settings.rounds
    );
    println!("| target | rate req/s | p50 RTT | p99 RTT | direct p50 | direct p99 | added p50 | added p99 (range) | non-2.xx / lost (all rounds) | target CPU stolen, ms (each round) |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in rows.iter().filter(|r| r.name != "direct") {
        let h = r.half();
        let (t, d) = (&h.through.latency, &h.direct.latency);
        let added = r.halves.iter().map(Half::added_p99);
        let (lo, hi) = added.fold((f64::MAX, f64::MIN), |(lo, hi), a| (lo.min(a), hi.max(a)));
        let errors: u64 = r.halves.iter().map(|h| h.through.errors).sum();
        let lost: u64 = r.halves.iter().map(|h| h.through.lost).sum();
        let stolen: Vec<String> = (r.halves.iter())
            .map(|h| h.stolen.as_millis().to_string())
            .collect();
        let stolen = stolen.join(", ");
        println!(
            "| {} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} ({lo:.0}-{hi:.0}) | {errors} / {lost} | {stolen} |",
            r.name,
            h.through.rate(),
            t.p50_us,
            t.p99_us,
            d.p50_us,
            d.p99_us,
            t.p50_us - d.p50_us,
            h.added_p99(),
        );
    }
}

/// The Message ID table: what a deduplicating upstream saw.
fn print_mids(rows: &[Row], took: Duration) {
    println!(
        "\n### Message IDs as a deduplicating upstream sees them (every run of each target, {:.0} s in all)\n",
        took.as_secs_f64()
    );
    println!("| target | requests to the upstream | sources (backoffd: endpoints) | (source, MID) reused with a new token within 247 s | same token again (retransmissions) |");
    println!("|---|---:|---:|---:|---:|");
    for r in rows.iter().filter(|r| r.name != "direct") {
        let m = &r.mids;
        println!(
            "| {} | {} | {} | {} | {} |",
            r.name,
            m.requests,
            m.sources.len(),
            m.reused,
            m.repeated
        );
    }
}

/// One JSON object of every target's headline figures.
fn print_json(rows: &[Row]) {
    let json: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "\"{}\":{{\"con_per_s\":{:.0},\"non_per_s\":{:.0},\"latency_p99_us\":{:.1},\"direct_p99_us\":{:.1},\"sources\":{},\"mid_reused\":{}}}",
                r.name,
                median(&r.peak_con).rate(),
                median(&r.peak_non).rate(),
                r.half().through.latency.p99_us,
                r.half().direct.latency.p99_us,
                r.mids.sources.len(),
                r.mids.reused
            )
        })
        .collect();
    println!("\n{{{}}}", json.join(","));
}
