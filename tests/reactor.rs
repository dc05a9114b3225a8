//! The reactor with real sockets, real timers and real signals (no sleeps, no timing asserts).

use std::cell::RefCell;
use std::io;
use std::net::UdpSocket as StdUdp;
use std::rc::Rc;
use std::time::Duration;

use backoffd::net::Outbox;
use backoffd::reactor::datagram::{Datagram, Received, RECV_BUDGET};
use backoffd::reactor::stream::{Stream, StreamCore, READ_BUDGET, READ_CHUNK};
use backoffd::reactor::{Component, Config, Ctx, Reactor, Readiness, Registration, WakeMode};
use backoffd::time::Timestamp;
use backoffd::timer::TimerId;
use mio::net::{TcpListener, UdpSocket};
use mio::Interest;

fn config(wake: WakeMode) -> Config {
    Config {
        wake,
        signals: false,
        drain_timeout: Duration::from_millis(200),
    }
}

/// The key the echo socket is registered with.
const ECHO_KEY: u32 = 7;

/// Echoes datagrams until it has echoed `remaining`, then stops the loop.
struct Echo {
    socket: UdpSocket,
    registration: Option<Registration>,
    remaining: usize,
}

impl Component for Echo {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        self.registration = Some(ctx.register(&mut self.socket, Interest::READABLE, ECHO_KEY)?);
        Ok(())
    }
    fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, ready: Readiness) {
        assert!(self.registration.is_some());
        assert_eq!(key, ECHO_KEY);
        assert!(ready.readable);
        let mut buf = [0u8; 1500];
        loop {
            match self.socket.recv_from(&mut buf) {
                Ok((n, from)) => {
                    self.socket.send_to(&buf[..n], from).unwrap();
                    self.remaining -= 1;
                    if self.remaining == 0 {
                        ctx.shutdown();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => panic!("{e}"),
            }
        }
    }
    fn on_timer(&mut self, _: &mut Ctx<'_>, _: TimerId, _: u32) {}
}

#[test]
fn routes_udp_readiness_to_the_owning_component() {
    echo_fifty_datagrams(WakeMode::Timerfd);
}

/// With epoll_pwait2 the loop sleeps on a second epoll that watches mio's: I/O still arrives.
#[test]
fn routes_udp_readiness_through_the_outer_epoll_with_pwait2() {
    echo_fifty_datagrams(WakeMode::Pwait2);
}

fn echo_fifty_datagrams(wake: WakeMode) {
    let server = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = server.local_addr().unwrap();
    let client = StdUdp::bind("127.0.0.1:0").unwrap();
    for i in 0..50u8 {
        client.send_to(&[i; 10], addr).unwrap();
    }
    let mut reactor = Reactor::new(config(wake)).unwrap();
    reactor
        .add(Box::new(Echo {
            socket: server,
            registration: None,
            remaining: 50,
        }))
        .unwrap();
    reactor.run().unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 64];
    for i in 0..50u8 {
        let n = client.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &[i; 10]);
    }
}

type Log = Rc<RefCell<Vec<(u32, Timestamp, Timestamp, Timestamp)>>>;

/// Arms timers at given offsets, cancels some, and logs (key, deadline, woke-at, fired-at).
struct Timers {
    offsets_us: Vec<u64>,
    cancel: Vec<usize>,
    deadlines: Vec<Timestamp>,
    log: Log,
}

impl Component for Timers {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        let start = ctx.now();
        let mut ids = Vec::new();
        for (key, &us) in self.offsets_us.iter().enumerate() {
            let deadline = start + Duration::from_micros(us);
            self.deadlines.push(deadline);
            ids.push(ctx.set_timer(deadline, key as u32));
        }
        for &i in &self.cancel {
            assert!(ctx.cancel_timer(ids[i]));
            assert!(!ctx.cancel_timer(ids[i]), "second cancel is a no-op");
        }
        Ok(())
    }
    fn on_ready(&mut self, _: &mut Ctx<'_>, _: u32, _: Readiness) {}
    fn on_timer(&mut self, ctx: &mut Ctx<'_>, _: TimerId, key: u32) {
        self.log
            .borrow_mut()
            .push((key, self.deadlines[key as usize], ctx.woke_at(), ctx.now()));
        if self.log.borrow().len() == self.offsets_us.len() - self.cancel.len() {
            ctx.shutdown();
        }
    }
}

fn fire_in_order(wake: WakeMode) {
    let offsets_us = vec![3000, 150, 150, 2500, 900, 40_000, 10, 1200, 700, 5000];
    let log: Log = Rc::default();
    let mut reactor = Reactor::new(config(wake)).unwrap();
    reactor
        .add(Box::new(Timers {
            offsets_us: offsets_us.clone(),
            cancel: vec![3, 5],
            deadlines: Vec::new(),
            log: Rc::clone(&log),
        }))
        .unwrap();
    reactor.run().unwrap();
    let log = log.borrow();
    let keys: Vec<u32> = log.iter().map(|e| e.0).collect();
    assert_eq!(
        keys,
        vec![6, 1, 2, 8, 4, 7, 0, 9],
        "deadline order, ties by insertion"
    );
    for &(key, deadline, woke, fired) in log.iter() {
        assert!(fired >= deadline, "timer {key} fired early");
        assert!(
            woke <= fired,
            "timer {key}: the wait returned before the dispatch"
        );
    }
}

#[test]
fn timers_fire_in_deadline_order_never_early_with_timerfd() {
    fire_in_order(WakeMode::Timerfd);
}

#[test]
fn timers_fire_in_deadline_order_never_early_with_epoll() {
    fire_in_order(WakeMode::Epoll);
}

#[test]
fn timers_fire_in_deadline_order_never_early_with_pwait2() {
    fire_in_order(WakeMode::Pwait2);
}

/// epoll_pwait2 is Linux 5.11+; elsewhere the reactor says it fell back to timerfd.
#[test]
fn a_reactor_reports_the_wake_source_it_runs() {
    let kernel_has_pwait2 = {
        // SAFETY: an invalid fd and no buffers: the kernel answers EBADF if it knows the call.
        let rc = unsafe { libc::syscall(libc::SYS_epoll_pwait2, -1, 0, 1, 0, 0, 0) };
        rc < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS)
    };
    for (wake, expected) in [
        (WakeMode::Timerfd, WakeMode::Timerfd),
        (WakeMode::Epoll, WakeMode::Epoll),
        (
            WakeMode::Pwait2,
            match kernel_has_pwait2 {
                true => WakeMode::Pwait2,
                false => WakeMode::Timerfd,
            },
        ),
    ] {
        let reactor = Reactor::new(config(wake)).unwrap();
        assert_eq!(reactor.wake_mode(), expected);
    }
}

/// Never drains: the loop must still stop when the drain time runs out.
struct Stubborn {
    shutdown_calls: Rc<RefCell<u32>>,
}

impl Component for Stubborn {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        let now = ctx.now();
        ctx.set_timer(now, 0);
        Ok(())
    }
    fn on_ready(&mut self, _: &mut Ctx<'_>, _: u32, _: Readiness) {}
    fn on_timer(&mut self, ctx: &mut Ctx<'_>, _: TimerId, _: u32) {
        ctx.shutdown();
        ctx.shutdown();
    }
    fn on_shutdown(&mut self, ctx: &mut Ctx<'_>) {
        assert!(ctx.is_shutting_down());
        *self.shutdown_calls.borrow_mut() += 1;
    }
    fn is_drained(&self) -> bool {
        false
    }
}

#[test]
fn shutdown_is_delivered_once_and_drain_time_is_bounded() {
    let calls = Rc::new(RefCell::new(0));
    let mut reactor = Reactor::new(config(WakeMode::Timerfd)).unwrap();
    reactor
        .add(Box::new(Stubborn {
            shutdown_calls: Rc::clone(&calls),
        }))
        .unwrap();
    reactor.run().unwrap();
    assert_eq!(*calls.borrow(), 1);
}

/// Counts on_shutdown calls; drains immediately.
struct Quiet {
    shutdown_calls: Rc<RefCell<u32>>,
}

impl Component for Quiet {
    fn on_ready(&mut self, _: &mut Ctx<'_>, _: u32, _: Readiness) {}
    fn on_timer(&mut self, _: &mut Ctx<'_>, _: TimerId, _: u32) {}
    fn on_shutdown(&mut self, _: &mut Ctx<'_>) {
        *self.shutdown_calls.borrow_mut() += 1;
    }
}

#[test]
fn sigterm_stops_the_loop_gracefully() {
    // Runs on its own thread so the signal mask change stays there; the signal is sent to that
    // thread only (tgkill), so the test harness's other threads are untouched.
    std::thread::spawn(|| {
        let calls = Rc::new(RefCell::new(0));
        let mut reactor = Reactor::new(Config {
            signals: true,
            ..config(WakeMode::Timerfd)
        })
        .unwrap();
        reactor
            .add(Box::new(Quiet {
                shutdown_calls: Rc::clone(&calls),
            }))
            .unwrap();
        // SAFETY: plain syscalls sending SIGTERM to this very thread, which has it blocked.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid);
            libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, libc::SIGTERM);
        }
        reactor.run().unwrap();
        assert_eq!(*calls.borrow(), 1);
    })
    .join()
    .unwrap();
}

/// Reads a socket flooded before the loop started through the datagram driver, logging how
/// many datagrams each wake-up took.
struct Flooded {
    socket: Option<UdpSocket>,
    datagram: Option<Datagram>,
    expected: usize,
    per_call: Rc<RefCell<Vec<usize>>>,
}

impl Component for Flooded {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        let socket = self.socket.take().expect("once");
        self.datagram = Some(Datagram::register(ctx, socket, 0)?);
        // A safety net: the test fails (short count) instead of hanging.
        ctx.set_timer(ctx.now() + Duration::from_secs(10), 0);
        Ok(())
    }
    fn on_ready(&mut self, ctx: &mut Ctx<'_>, _: u32, _: Readiness) {
        let mut buf = [0u8; 64];
        let mut n = 0;
        let datagram = self.datagram.as_mut().expect("started");
        datagram
            .recv(ctx, &mut buf, |r| {
                n += usize::from(matches!(r, Received::Datagram { .. }))
            })
            .unwrap();
        let mut per_call = self.per_call.borrow_mut();
        per_call.push(n);
        if per_call.iter().sum::<usize>() == self.expected {
            ctx.shutdown();
        }
    }
    fn on_timer(&mut self, ctx: &mut Ctx<'_>, _: TimerId, _: u32) {
        ctx.shutdown();
    }
}

#[test]
fn a_flooded_socket_is_read_a_budget_per_turn_and_called_again_for_the_rest() {
    let server = StdUdp::bind("127.0.0.1:0").unwrap();
    // Room for the whole flood, so no datagram is dropped before the loop reads it.
    let size: libc::c_int = 4 << 20;
    // SAFETY: setsockopt with a pointer to a live c_int and its size.
    unsafe {
        use std::os::fd::AsRawFd;
        libc::setsockopt(
            server.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    server.set_nonblocking(true).unwrap();
    let addr = server.local_addr().unwrap();
    let flood = 3 * RECV_BUDGET + 10;
    let client = StdUdp::bind("127.0.0.1:0").unwrap();
    for i in 0..flood {
        client.send_to(&[i as u8], addr).unwrap();
    }
    let per_call = Rc::new(RefCell::new(Vec::new()));
    let mut reactor = Reactor::new(config(WakeMode::Timerfd)).unwrap();
    reactor
        .add(Box::new(Flooded {
            socket: Some(UdpSocket::from_std(server)),
            datagram: None,
            expected: flood,
            per_call: Rc::clone(&per_call),
        }))
        .unwrap();
    reactor.run().unwrap();
    let per_call = per_call.borrow();
    assert_eq!(per_call.iter().sum::<usize>(), flood, "{per_call:?}");
    assert!(per_call.iter().all(|&n| n <= RECV_BUDGET), "{per_call:?}");
    assert!(per_call.len() >= 4, "one edge, four turns: {per_call:?}");
}

/// A core with more output than any socket buffer holds, and nothing else to do.
struct Unread {
    out: Vec<u8>,
    sent: usize,
}

impl Outbox for Unread {
    fn pending_output(&self) -> &[u8] {
        &self.out[self.sent..]
    }
    fn consume_output(&mut self, _: Timestamp, n: usize) {
        self.sent += n;
    }
}

impl StreamCore for Unread {
    fn handle_input(&mut self, _: Timestamp, _: &[u8]) {}
    fn poll_timeout(&self) -> Option<Timestamp> {
        None
    }
    fn handle_timeout(&mut self, _: Timestamp) {}
}

/// How a stream ended, and how long after it started.
type Ended = Rc<RefCell<Option<(io::ErrorKind, Duration)>>>;

/// Accepts one connection and writes to it until the driver gives up on it.
struct StalledWriter {
    listener: TcpListener,
    stream: Option<Stream<Unread>>,
    ended: Ended,
    started: std::time::Instant,
}

const STALL: Duration = Duration::from_millis(300);
/// The key of the test's own deadline.
const GIVE_UP: u32 = 99;

impl StalledWriter {
    fn pump(&mut self, ctx: &mut Ctx<'_>) {
        let Some(stream) = &mut self.stream else {
            return;
        };
        let mut buf = [0u8; 1024];
        let now = ctx.now();
        match stream.read(now, &mut buf).and_then(|()| stream.flush(now)) {
            Ok(()) => stream.settle(ctx),
            Err(e) => {
                *self.ended.borrow_mut() = Some((e.kind(), self.started.elapsed()));
                self.stream.take().unwrap().close(ctx);
                ctx.shutdown();
            }
        }
    }
}

impl Component for StalledWriter {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        ctx.register(&mut self.listener, Interest::READABLE, 0)?;
        // Without a stall timeout the stream would wait forever: end the test instead.
        ctx.set_timer(ctx.now() + Duration::from_secs(10), GIVE_UP);
        Ok(())
    }
    fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, ready: Readiness) {
        if key == 0 {
            let Ok((socket, _)) = self.listener.accept() else {
                return;
            };
            let core = Unread {
                out: vec![0; 64 << 20],
                sent: 0,
            };
            let mut stream = Stream::accepted(ctx, socket, 1, core).unwrap();
            stream.set_write_stall_timeout(STALL);
            self.started = std::time::Instant::now();
            self.stream = Some(stream);
        } else if let Some(stream) = &mut self.stream {
            stream.on_ready(ready).unwrap();
        }
        self.pump(ctx);
    }
    fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, key: u32) {
        if key == GIVE_UP {
            return ctx.shutdown();
        }
        let now = ctx.now();
        if self.stream.as_mut().is_some_and(|s| s.on_timer(now, timer)) {
            self.pump(ctx);
        }
    }
}

/// Issue 13 row 11: a peer that never reads pinned its output, and the connection, forever.
/// The stream driver now gives up once the socket has taken nothing for the stall timeout.
#[test]
fn a_peer_that_never_reads_is_given_up_after_the_write_stall_timeout() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let ended: Ended = Rc::default();
    let mut reactor = Reactor::new(config(WakeMode::Timerfd)).unwrap();
    reactor
        .add(Box::new(StalledWriter {
            listener: TcpListener::from_std(listener),
            stream: None,
            ended: Rc::clone(&ended),
            started: std::time::Instant::now(),
        }))
        .unwrap();
    reactor.run().unwrap();
    drop(peer);
    let (kind, after) = ended.borrow().expect("the stream ended");
    assert_eq!(kind, io::ErrorKind::TimedOut);
    assert!(
        after >= STALL,
        "given up after {after:?}, before the timeout"
    );
}

/// Counts what each readiness delivers.
struct Counting {
    got: Vec<usize>,
    now: usize,
}

impl Outbox for Counting {
    fn pending_output(&self) -> &[u8] {
        &[]
    }
    fn consume_output(&mut self, _: Timestamp, _: usize) {}
}

impl StreamCore for Counting {
    fn handle_input(&mut self, _: Timestamp, data: &[u8]) {
        self.now += data.len();
    }
    fn poll_timeout(&self) -> Option<Timestamp> {
        None
    }
    fn handle_timeout(&mut self, _: Timestamp) {}
}

/// Reads one connection until `expected` bytes came, noting the bytes of each readiness.
struct FloodedStream {
    listener: TcpListener,
    stream: Option<Stream<Counting>>,
    expected: usize,
    per_call: Rc<RefCell<Vec<usize>>>,
}

impl Component for FloodedStream {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        ctx.register(&mut self.listener, Interest::READABLE, 0)?;
        ctx.set_timer(ctx.now() + Duration::from_secs(10), GIVE_UP);
        Ok(())
    }
    fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, ready: Readiness) {
        if key == 0 {
            if let Ok((socket, _)) = self.listener.accept() {
                let core = Counting {
                    got: Vec::new(),
                    now: 0,
                };
                self.stream = Some(Stream::accepted(ctx, socket, 1, core).unwrap());
            }
        }
        let Some(stream) = &mut self.stream else {
            return;
        };
        if key == 1 {
            stream.on_ready(ready).unwrap();
        }
        let mut buf = vec![0u8; READ_CHUNK];
        stream.read(ctx.now(), &mut buf).unwrap();
        let core = stream.core_mut();
        let n = std::mem::take(&mut core.now);
        core.got.push(n);
        let total: usize = core.got.iter().sum();
        stream.settle(ctx);
        if total >= self.expected {
            *self.per_call.borrow_mut() = stream.core().got.clone();
            ctx.shutdown();
        }
    }
    fn on_timer(&mut self, ctx: &mut Ctx<'_>, _: TimerId, _: u32) {
        ctx.shutdown();
    }
}

/// Issue 13 row 7: a TCP peer that floods is read at most READ_BUDGET x READ_CHUNK per turn of
/// the loop, and called again for the rest, so the loop's other sources get their turn.
#[test]
fn a_flooded_connection_is_read_a_budget_per_turn_and_called_again_for_the_rest() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let mut peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    // More than one budget, all in the socket buffers before the loop reads any of it.
    let flood = 2 * READ_BUDGET as usize * READ_CHUNK + 1000;
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        peer.write_all(&vec![7u8; flood]).unwrap();
        peer
    });
    let per_call = Rc::new(RefCell::new(Vec::new()));
    let mut reactor = Reactor::new(config(WakeMode::Timerfd)).unwrap();
    reactor
        .add(Box::new(FloodedStream {
            listener: TcpListener::from_std(listener),
            stream: None,
            expected: flood,
            per_call: Rc::clone(&per_call),
        }))
        .unwrap();
    reactor.run().unwrap();
    drop(writer.join().unwrap());
    let per_call = per_call.borrow();
    let budget = READ_BUDGET as usize * READ_CHUNK;
    assert_eq!(per_call.iter().sum::<usize>(), flood, "{per_call:?}");
    assert!(per_call.iter().all(|&n| n <= budget), "{per_call:?}");
    assert!(
        per_call.len() >= 3,
        "more than two budgets, three turns at least: {per_call:?}"
    );
}

/// Spends 3 ms in its first timer callback, then reads the loop's turn histogram in a second.
struct SlowTurn {
    seen: Rc<RefCell<Option<(u64, u64)>>>,
    fired: u32,
}

impl Component for SlowTurn {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        let now = ctx.now();
        ctx.set_timer(now, 0);
        Ok(())
    }
    fn on_ready(&mut self, _: &mut Ctx<'_>, _: u32, _: Readiness) {}
    fn on_timer(&mut self, ctx: &mut Ctx<'_>, _: TimerId, _: u32) {
        self.fired += 1;
        if self.fired == 1 {
            std::thread::sleep(Duration::from_millis(3));
            // Due after this turn has ended (a timer due now would fire in this one).
            ctx.set_timer(Timestamp::now() + Duration::from_millis(1), 0);
            return;
        }
        let turns = ctx.loop_stats().turns;
        *self.seen.borrow_mut() = Some((turns.samples(), turns.samples_over_us(2048)));
        ctx.shutdown();
    }
}

/// `backoffd_reactor_turn_seconds`: every turn is recorded, and a turn that ran a 3 ms
/// callback lands in a bucket of 2 ms or more (a lower bound: sleeping never takes less).
#[test]
fn the_loop_records_how_long_each_turn_took() {
    let seen = Rc::new(RefCell::new(None));
    let mut reactor = Reactor::new(config(WakeMode::Timerfd)).unwrap();
    let slow = SlowTurn {
        seen: Rc::clone(&seen),
        fired: 0,
    };
    reactor.add(Box::new(slow)).unwrap();
    reactor.run().unwrap();
    let (turns, slow) = seen.borrow().expect("the second timer fired");
    assert!(turns >= 1, "the first timer's turn was recorded");
    assert_eq!(slow, 1, "one turn of 2 ms or more: the one that slept");
}
