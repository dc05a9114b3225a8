//! The reconnect server's retry listener under load, measured against the real server running
//! in this process on its own thread:
//!
//! - accept rate: how many connect -> server close -> EOF round trips per second one client
//!   gets on the retry port, with the control port idle and with it busy;
//! - timestamp fidelity: how far the server's recorded accept time (what Stop's verdict is
//!   computed from) lies from the client's connect(): `server_ts - connect_start` and
//!   `server_ts - connect_return`, paired by order (goal: p99 <= 200 us).
//!   `connect_start` bounds it causally (a negative value would be a bug); `connect_return`
//!   may legitimately come later than the server's timestamp, because on loopback the whole
//!   handshake runs inside connect() and the server, on the other CPU, can accept before the
//!   client's syscall has returned.
//!
//! "Busy" means client threads keep the control port occupied with real gRPC over HTTP/2:
//! pipelined unary calls to an unimplemented method (status 12). Start would park behind the
//! measuring session and Stop would end it, so neither can be the load.
//!
//! Both sides read `CLOCK_MONOTONIC` ([`Timestamp::now`]), so the differences need no clock
//! sync. The server logs like a user's would (as `backoffd`'s `init_logging` does: `info` unless
//! `RUST_LOG` says otherwise, to stderr): redirect stderr to keep the report readable.
//!
//! Run: `cargo bench --bench retry_listener 2>retry_listener.log`
//! Env: DURATION_S (rate window, default 3), CONNECTS (fidelity samples, default 2000),
//! PACE_US (fidelity spacing, default 1000), BUSY_CLIENTS (default 1), INFLIGHT (calls each
//! busy client keeps in flight, default 8), FIFO_PRIORITY (run the server thread under
//! SCHED_FIFO at this priority, needs CAP_SYS_NICE: separates the server's own latency from
//! queueing behind other processes on a shared machine; default off, as users run it).

// The host knobs are the `timer-bench` command's, built in from the binary's source.
#[allow(dead_code)]
#[path = "../src/cli/timer_bench/host.rs"]
mod host;

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use backoffd::grpc::client::{ClientConnection, ClientEvent};
use backoffd::grpc::proto::testing::ReconnectParams;
use backoffd::grpc::status::{Code, Status};
use backoffd::reactor::{self, Component, Ctx, Reactor, Readiness, WakeMode};
use backoffd::reconnect::server::{ReconnectServer, ServerConfig};
use backoffd::stats::Summary;
use backoffd::time::Timestamp;
use backoffd::timer::TimerId;
use common::free_port;
use host::set_fifo_priority;
use mio::Interest;
use prost::Message as _;

const START: &str = "/grpc.testing.ReconnectService/Start";
/// Answered at once with UNIMPLEMENTED and touches no session state: safe as background load.
const UNIMPLEMENTED: &str = "/grpc.testing.UnimplementedService/UnimplementedCall";
/// Any single wait longer than this means the server is stuck: fail instead of hanging.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Lets the busy clients reach a steady rate before the measured window opens.
const WARMUP: Duration = Duration::from_millis(200);

/// Knobs, from the environment (the harness passes `--bench`, which is ignored).
#[derive(Clone, Debug)]
struct Options {
    duration: Duration,
    connects: usize,
    pace: Duration,
    busy_clients: usize,
    inflight: usize,
    fifo: Option<i32>,
}

impl Options {
    fn from_env() -> Self {
        fn var(name: &str, default: u64) -> u64 {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        }
        Options {
            duration: Duration::from_secs(var("DURATION_S", 3)),
            connects: var("CONNECTS", 2000) as usize,
            pace: Duration::from_micros(var("PACE_US", 1000)),
            busy_clients: var("BUSY_CLIENTS", 1) as usize,
            inflight: var("INFLIGHT", 8).max(1) as usize,
            fifo: std::env::var("FIFO_PRIORITY")
                .ok()
                .and_then(|v| v.parse().ok()),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// CPU placement

/// The server's loop gets one CPU and every client thread another, so the clients' work does
/// not delay the server's wake-ups (the thing being measured). `None`: fewer than 2 CPUs.
#[derive(Clone, Copy, Debug)]
struct Placement {
    server: Option<usize>,
    clients: Option<usize>,
}

impl Placement {
    fn choose() -> Self {
        let cpus = allowed_cpus();
        match cpus[..] {
            [server, clients, ..] => Placement {
                server: Some(server),
                clients: Some(clients),
            },
            _ => Placement {
                server: None,
                clients: None,
            },
        }
    }

    fn describe(&self) -> String {
        match (self.server, self.clients) {
            (Some(s), Some(c)) => format!("server cpu{s}, clients cpu{c}"),
            _ => "not pinned (fewer than 2 CPUs allowed)".into(),
        }
    }
}

fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `c` is below CPU_SETSIZE and `set` is initialised.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Pins the calling thread to `cpu` (no-op for `None`).
fn pin(cpu: Option<usize>) {
    let Some(cpu) = cpu else { return };
    // SAFETY: as in `allowed_cpus`; CPU_SET with an index below CPU_SETSIZE.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; 0 is the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    assert_eq!(
        rc,
        0,
        "sched_setaffinity(cpu{cpu}): {}",
        io::Error::last_os_error()
    );
}

// ---------------------------------------------------------------------------------------------
// CPU accounting

/// One thread's CPU-time clock, readable from any thread while that thread lives. CPU time over
/// the measured window says which side was the bottleneck: ~100% is CPU-bound, far less is
/// waiting (for the peer, for a wake-up, or for a CPU another process holds).
#[derive(Clone, Copy)]
struct CpuClock(libc::clockid_t);

impl CpuClock {
    fn of<T>(thread: &JoinHandle<T>) -> CpuClock {
        let mut clock: libc::clockid_t = 0;
        // SAFETY: the thread is alive (its handle is borrowed, not joined); `clock` is writable.
        let rc = unsafe { libc::pthread_getcpuclockid(thread.as_pthread_t(), &mut clock) };
        assert_eq!(rc, 0, "pthread_getcpuclockid: error {rc}");
        CpuClock(clock)
    }

    fn this_thread() -> CpuClock {
        CpuClock(libc::CLOCK_THREAD_CPUTIME_ID)
    }

    fn read(self) -> Duration {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec.
        let rc = unsafe { libc::clock_gettime(self.0, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime: {}", io::Error::last_os_error());
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }
}

/// The CPU time of the server thread, the retry-port client (this thread) and the load threads.
struct CpuMeter {
    server: CpuClock,
    client: CpuClock,
    load: Vec<CpuClock>,
}

impl CpuMeter {
    fn read(&self) -> [Duration; 3] {
        let load = self.load.iter().map(|c| c.read()).sum();
        [self.server.read(), self.client.read(), load]
    }
}

/// CPU use over a window in percent of one CPU: server, retry client, load threads (summed).
fn cpu_percent(before: [Duration; 3], after: [Duration; 3], wall: f64) -> [f64; 3] {
    std::array::from_fn(|i| (after[i] - before[i]).as_secs_f64() / wall * 100.0)
}

// ---------------------------------------------------------------------------------------------
// The server under test, on its own thread

/// The real reconnect server in a reactor on its own thread, stoppable from this one.
struct Server {
    control: SocketAddr,
    retry: SocketAddr,
    /// Dropping this end makes [`Stopper`] ask the loop to shut down.
    stop: UnixStream,
    thread: JoinHandle<Vec<Timestamp>>,
}

impl Server {
    /// Starts the loop. The retry port is only listening after the first Start.
    fn start(cpu: Option<usize>, fifo: Option<i32>) -> Server {
        let retry_port = free_port();
        let (stop, stop_peer) = UnixStream::pair().expect("socketpair");
        let (tx, rx) = mpsc::channel();
        let thread = thread::spawn(move || {
            pin(cpu);
            if let Some(priority) = fifo {
                set_fifo_priority(priority).expect("SCHED_FIFO (needs CAP_SYS_NICE)");
            }
            let server = ReconnectServer::bind(ServerConfig::new(0, retry_port))
                .expect("bind the control port");
            tx.send(server.control_addr().unwrap().port()).unwrap();
            run_until_stopped(server, stop_peer)
        });
        let control_port = rx.recv().expect("server thread started");
        Server {
            control: SocketAddr::from(([127, 0, 0, 1], control_port)),
            retry: SocketAddr::from(([127, 0, 0, 1], retry_port)),
            stop,
            thread,
        }
    }

    /// Stops the loop (every client must be gone, or it waits out the drain time) and returns
    /// the accept timestamps of the session open at that moment.
    fn stop(self) -> Vec<Timestamp> {
        drop(self.stop);
        self.thread.join().expect("server thread")
    }
}

/// Runs the server the way src/cli/reconnect_server.rs does, plus a [`Stopper`] in place of
/// signal handling, and reads the recorded timestamps out of it once the loop has returned.
fn run_until_stopped(server: ReconnectServer, stop: UnixStream) -> Vec<Timestamp> {
    stop.set_nonblocking(true).unwrap();
    let stopper = Stopper {
        stream: mio::net::UnixStream::from_std(stop),
    };
    let mut reactor = Reactor::new(reactor::Config {
        wake: WakeMode::Timerfd,
        signals: false,
        drain_timeout: Duration::from_secs(1),
    })
    .expect("reactor");
    let index = reactor.add(Box::new(server)).expect("add server");
    reactor.add(Box::new(stopper)).expect("add stopper");
    reactor.run().expect("reactor run");
    let server = reactor
        .component::<ReconnectServer>(index)
        .expect("server component");
    server.service().timestamps().to_vec()
}

/// Shuts the loop down when the other end of its socket pair is closed.
struct Stopper {
    stream: mio::net::UnixStream,
}

impl Component for Stopper {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        ctx.register(&mut self.stream, Interest::READABLE, 0)?;
        Ok(())
    }
    fn on_ready(&mut self, ctx: &mut Ctx<'_>, _: u32, _: Readiness) {
        ctx.shutdown();
    }
    fn on_timer(&mut self, _: &mut Ctx<'_>, _: TimerId, _: u32) {}
}

// ---------------------------------------------------------------------------------------------
// A blocking gRPC client made of the crate's sans-IO client connection

/// One HTTP/2 connection to the control port, driven over a blocking `TcpStream`.
struct GrpcClient {
    stream: TcpStream,
    conn: ClientConnection,
    buf: Vec<u8>,
}

impl GrpcClient {
    fn connect(addr: SocketAddr) -> io::Result<Self> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        let conn = ClientConnection::new(
            Timestamp::now(),
            &addr.to_string(),
            false,
            backoffd::http2::Config::default(),
        );
        Ok(GrpcClient {
            stream,
            conn,
            buf: vec![0; 16 * 1024],
        })
    }

    /// Queues a call; [`flush`](Self::flush) sends it.
    fn begin(&mut self, path: &str, message: &[u8]) -> io::Result<u32> {
        self.conn
            .call(Timestamp::now(), path, message, None)
            .map_err(io::Error::other)
    }

    fn flush(&mut self) -> io::Result<()> {
        backoffd::net::flush(Timestamp::now(), &mut self.stream, &mut self.conn)
    }

    /// One blocking read fed to the connection (and its timers, if due).
    fn read_some(&mut self) -> io::Result<()> {
        let n = self.stream.read(&mut self.buf)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let now = Timestamp::now();
        self.conn.handle_input(now, &self.buf[..n]);
        if self.conn.poll_timeout().is_some_and(|t| t <= now) {
            self.conn.handle_timeout(now);
        }
        Ok(())
    }

    fn next_response(&mut self) -> Option<(u32, Result<Vec<u8>, Status>)> {
        loop {
            match self.conn.poll_event()? {
                ClientEvent::Response { stream, result } => return Some((stream, result)),
                ClientEvent::SettingsReceived => {}
            }
        }
    }

    /// One call, waiting for its answer.
    fn unary(&mut self, path: &str, message: &[u8]) -> io::Result<Result<Vec<u8>, Status>> {
        let id = self.begin(path, message)?;
        loop {
            self.flush()?;
            while let Some((stream, result)) = self.next_response() {
                if stream == id {
                    return Ok(result);
                }
            }
            self.read_some()?;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Control-port load

/// Background threads keeping the control port busy, and what they achieved.
struct Load {
    stop: Arc<AtomicBool>,
    calls: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    threads: Vec<JoinHandle<io::Result<()>>>,
}

impl Load {
    fn start(addr: SocketAddr, clients: usize, inflight: usize, cpu: Option<usize>) -> Load {
        let load = Load {
            stop: Arc::default(),
            calls: Arc::default(),
            errors: Arc::default(),
            threads: Vec::new(),
        };
        let threads = (0..clients)
            .map(|_| {
                let (stop, calls, errors) = (
                    Arc::clone(&load.stop),
                    Arc::clone(&load.calls),
                    Arc::clone(&load.errors),
                );
                thread::spawn(move || {
                    pin(cpu);
                    busy_client(addr, inflight, &stop, &calls, &errors)
                })
            })
            .collect();
        Load { threads, ..load }
    }

    /// Completed calls so far (answered UNIMPLEMENTED, as expected).
    fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Stops the threads; returns how many calls got an unexpected answer.
    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().expect("load thread").expect("load client I/O");
        }
        self.errors.load(Ordering::Relaxed)
    }
}

/// Keeps `inflight` unimplemented calls outstanding on one connection until told to stop.
fn busy_client(
    addr: SocketAddr,
    inflight: usize,
    stop: &AtomicBool,
    calls: &AtomicU64,
    errors: &AtomicU64,
) -> io::Result<()> {
    let mut client = GrpcClient::connect(addr)?;
    while !stop.load(Ordering::Relaxed) {
        while client.conn.calls_in_flight() < inflight {
            client.begin(UNIMPLEMENTED, &[])?;
        }
        client.flush()?;
        client.read_some()?;
        while let Some((_, result)) = client.next_response() {
            match result {
                Err(s) if s.code == Code::Unimplemented => calls.fetch_add(1, Ordering::Relaxed),
                _ => errors.fetch_add(1, Ordering::Relaxed),
            };
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The retry-port client

/// Blocks until the server closes the connection (EOF, or a reset if it raced our FIN).
fn wait_for_close(stream: &mut TcpStream) -> io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    match stream.read(&mut [0u8; 1]) {
        Ok(0) => Ok(()),
        Ok(_) => Err(io::Error::other("retry port sent data")),
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Ok(()),
        Err(e) => Err(e),
    }
}

/// Connects and waits for the close, back to back, for `duration`. Returns (ok, errors).
fn flood_for(addr: SocketAddr, duration: Duration) -> (usize, usize) {
    let started = Instant::now();
    let (mut ok, mut errors) = (0, 0);
    while started.elapsed() < duration {
        match TcpStream::connect(addr).and_then(|mut s| wait_for_close(&mut s)) {
            Ok(()) => ok += 1,
            Err(_) => errors += 1,
        }
    }
    (ok, errors)
}

/// The client's clock around one connect(): just before the call and just after it returned.
#[derive(Clone, Copy)]
struct ConnectTimes {
    start: Timestamp,
    returned: Timestamp,
}

/// `n` connects, one at a time (each waits for the server's close, so accept order is connect
/// order), started `pace` apart (zero: back to back). Failed connects are not recorded.
fn timed_connects(addr: SocketAddr, n: usize, pace: Duration) -> (Vec<ConnectTimes>, usize) {
    let mut times = Vec::with_capacity(n);
    let mut errors = 0;
    let first = Instant::now();
    for i in 0..n {
        let due = first + pace * i as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
        let start = Timestamp::now();
        let connected = TcpStream::connect(addr);
        let returned = Timestamp::now();
        match connected.and_then(|mut s| wait_for_close(&mut s)) {
            Ok(()) => times.push(ConnectTimes { start, returned }),
            Err(_) => errors += 1,
        }
    }
    (times, errors)
}

// ---------------------------------------------------------------------------------------------
// Scenarios

/// One line of the report.
struct Row {
    name: String,
    /// Control-port calls per second during the measured window (`None`: idle).
    control_calls_per_s: Option<f64>,
    control_errors: u64,
    connects: usize,
    connect_errors: usize,
    /// Only for back-to-back connects; paced ones measure the pacing.
    connects_per_s: Option<f64>,
    server_recorded: usize,
    /// CPU use in the window, % of one CPU: server thread, retry client, load threads.
    cpu: [f64; 3],
    /// `server_ts - connect_start` and `server_ts - connect_return`.
    fidelity: Option<(Summary, Summary)>,
}

/// What the client side measured inside the window.
struct Measured {
    connects: usize,
    connect_errors: usize,
    /// Connects were spaced out on purpose, so their rate says nothing about the server.
    paced: bool,
    times: Option<Vec<ConnectTimes>>,
}

/// A fresh server with a Start-ed session (which binds the retry port and clears timestamps),
/// optional control-port load, then `measure`; the server's timestamps are read after it stops.
fn scenario(
    name: &str,
    opts: &Options,
    place: Placement,
    busy: bool,
    measure: impl FnOnce(SocketAddr) -> Measured,
) -> Row {
    let server = Server::start(place.server, opts.fifo);
    let mut control = GrpcClient::connect(server.control).expect("control connection");
    let start = ReconnectParams::default().encode_to_vec();
    control
        .unary(START, &start)
        .expect("Start I/O")
        .expect("Start answered OK");
    let load = busy.then(|| {
        let load = Load::start(
            server.control,
            opts.busy_clients,
            opts.inflight,
            place.clients,
        );
        thread::sleep(WARMUP);
        load
    });
    let meter = CpuMeter {
        server: CpuClock::of(&server.thread),
        client: CpuClock::this_thread(),
        load: load
            .as_ref()
            .map_or(Vec::new(), |l| l.threads.iter().map(CpuClock::of).collect()),
    };
    let calls_before = load.as_ref().map_or(0, Load::calls);
    let cpu_before = meter.read();
    let started = Instant::now();
    let measured = measure(server.retry);
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = cpu_percent(cpu_before, meter.read(), elapsed);
    let control_calls_per_s = load
        .as_ref()
        .map(|l| (l.calls() - calls_before) as f64 / elapsed);
    let control_errors = load.map_or(0, Load::finish);
    drop(control);
    let recorded = server.stop();
    if measured.times.is_some() && recorded.len() != measured.connects {
        println!(
            "warning: {name}: {} connects vs {} server timestamps; pairing by order is off",
            measured.connects,
            recorded.len()
        );
    }
    let fidelity = measured.times.as_deref().map(|t| fidelity(t, &recorded));
    Row {
        name: name.to_owned(),
        control_calls_per_s,
        control_errors,
        connects: measured.connects,
        connect_errors: measured.connect_errors,
        connects_per_s: (!measured.paced).then(|| measured.connects as f64 / elapsed),
        server_recorded: recorded.len(),
        cpu,
        fidelity,
    }
}

/// Pairs the client's i-th connect with the server's i-th accept.
fn fidelity(client: &[ConnectTimes], server: &[Timestamp]) -> (Summary, Summary) {
    let pairs = client.iter().zip(server);
    let mut from_start: Vec<i64> = pairs
        .clone()
        .map(|(c, s)| s.signed_nanos_since(c.start))
        .collect();
    let mut from_return: Vec<i64> = pairs
        .map(|(c, s)| s.signed_nanos_since(c.returned))
        .collect();
    (
        Summary::from_nanos(&mut from_start),
        Summary::from_nanos(&mut from_return),
    )
}

fn rate(name: &str, opts: &Options, place: Placement, busy: bool) -> Row {
    let duration = opts.duration;
    scenario(name, opts, place, busy, |retry| {
        let (connects, connect_errors) = flood_for(retry, duration);
        Measured {
            connects,
            connect_errors,
            paced: false,
            times: None,
        }
    })
}

fn timestamps(name: &str, opts: &Options, place: Placement, busy: bool, pace: Duration) -> Row {
    let n = opts.connects;
    scenario(name, opts, place, busy, |retry| {
        let (times, connect_errors) = timed_connects(retry, n, pace);
        Measured {
            connects: times.len(),
            connect_errors,
            paced: !pace.is_zero(),
            times: Some(times),
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Report

fn main() {
    // Logs like `backoffd` does (src/cli/mod.rs `init_logging`).
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_micros()
        .try_init();
    let opts = Options::from_env();
    let place = Placement::choose();
    // The main thread is the retry-port client (and the Start client); spawned threads
    // inherit this until they pin themselves.
    pin(place.clients);
    let pace = opts.pace;
    let rows = vec![
        rate("accept rate, control idle", &opts, place, false),
        rate("accept rate, control busy", &opts, place, true),
        timestamps("fidelity paced, control idle", &opts, place, false, pace),
        timestamps("fidelity paced, control busy", &opts, place, true, pace),
        timestamps(
            "fidelity flood, control busy",
            &opts,
            place,
            true,
            Duration::ZERO,
        ),
    ];
    let log_level = log::max_level().to_string();
    print_table(&opts, place, &log_level, &rows);
    println!("{}", json(&opts, place, &log_level, &rows));
}

fn print_table(opts: &Options, place: Placement, log_level: &str, rows: &[Row]) {
    println!(
        "retry listener: {}; server {}; server log level {log_level}; busy = {} client(s) x {} \
         unimplemented calls in flight; rate window {:?}; fidelity {} connects, paced {:?}",
        place.describe(),
        scheduler(opts),
        opts.busy_clients,
        opts.inflight,
        opts.duration,
        opts.connects,
        opts.pace
    );
    println!();
    println!(
        "| scenario | control calls/s | connects/s | connects (err) | server recorded \
         | cpu % server / retry client / load \
         | server_ts - connect start, us: p50 / p90 / p99 / p99.9 / max (neg) \
         | server_ts - connect return, us: p50 / p90 / p99 / p99.9 / max (neg) |"
    );
    println!("|---|---:|---:|---:|---:|---|---|---|");
    for r in rows {
        let (start, ret) = match &r.fidelity {
            Some((s, t)) => (percentiles(s), percentiles(t)),
            None => ("-".into(), "-".into()),
        };
        println!(
            "| {} | {} | {} | {} ({}) | {} | {:.0} / {:.0} / {:.0} | {start} | {ret} |",
            r.name,
            r.control_calls_per_s
                .map_or("idle".into(), |c| format!("{c:.0}")),
            r.connects_per_s.map_or("-".into(), |c| format!("{c:.0}")),
            r.connects,
            r.connect_errors,
            r.server_recorded,
            r.cpu[0],
            r.cpu[1],
            r.cpu[2],
        );
    }
    println!();
}

fn scheduler(opts: &Options) -> String {
    opts.fifo
        .map_or("default scheduler".into(), |p| format!("SCHED_FIFO {p}"))
}

fn percentiles(s: &Summary) -> String {
    format!(
        "{:.1} / {:.1} / {:.1} / {:.1} / {:.1} ({})",
        s.p50_us, s.p90_us, s.p99_us, s.p999_us, s.max_us, s.early
    )
}

/// The whole report on one line, for scripts.
fn json(opts: &Options, place: Placement, log_level: &str, rows: &[Row]) -> String {
    let rows: Vec<String> = rows.iter().map(json_row).collect();
    format!(
        "{{\"bench\":\"retry_listener\",\"placement\":\"{}\",\"server_scheduler\":\"{}\",\
         \"log_level\":\"{log_level}\",\"busy_clients\":{},\"inflight\":{},\"duration_s\":{},\"pace_us\":{},\"rows\":[{}]}}",
        place.describe(),
        scheduler(opts),
        opts.busy_clients,
        opts.inflight,
        opts.duration.as_secs_f64(),
        opts.pace.as_micros(),
        rows.join(",")
    )
}

fn json_row(r: &Row) -> String {
    let opt = |v: Option<f64>| v.map_or("null".into(), |v| format!("{v:.1}"));
    let summary = |s: &Summary| {
        format!(
            "{{\"p50_us\":{:.1},\"p90_us\":{:.1},\"p99_us\":{:.1},\"p999_us\":{:.1},\
             \"max_us\":{:.1},\"negative\":{}}}",
            s.p50_us, s.p90_us, s.p99_us, s.p999_us, s.max_us, s.early
        )
    };
    let fidelity = match &r.fidelity {
        Some((s, t)) => format!(
            "{{\"from_connect_start\":{},\"from_connect_return\":{}}}",
            summary(s),
            summary(t)
        ),
        None => "null".into(),
    };
    format!(
        "{{\"scenario\":\"{}\",\"control_calls_per_s\":{},\"control_errors\":{},\
         \"connects\":{},\"connect_errors\":{},\"connects_per_s\":{},\"server_recorded\":{},\
         \"cpu_percent\":{{\"server\":{:.1},\"retry_client\":{:.1},\"load\":{:.1}}},\
         \"fidelity\":{fidelity}}}",
        r.name,
        opt(r.control_calls_per_s),
        r.control_errors,
        r.connects,
        r.connect_errors,
        opt(r.connects_per_s),
        r.server_recorded,
        r.cpu[0],
        r.cpu[1],
        r.cpu[2],
    )
}
