//! The ReconnectService (`grpc.testing.ReconnectService`) as a sans-IO state machine: sessions,
//! parked Starts, the retry port's accept timestamps and the log lines about them.
//!
//! It knows nothing of HTTP/2. The driver names each call with a [`CallId`] of its choosing,
//! answers the calls this machine says to answer, and reports accepts on the retry port with
//! [`ReconnectService::on_retry_connection`].
//!
//! Differences from the C++ reference (test/cpp/interop/reconnect_interop_server.cc):
//! - a parked Start is a queue entry, not a blocked thread, and a cancelled one is dropped
//!   ([`ReconnectService::cancel`]) instead of later becoming a session nobody will Stop;
//! - every Start takes its own `max_reconnect_backoff_ms` (the reference keeps the first one);
//! - the peer check compares hosts only (the reference compares a host with a host:port, so it
//!   flags every connection);
//! - only the new interval is logged per connection (the reference reprints the whole history).

use std::collections::VecDeque;
use std::net::IpAddr;

use super::verify::{interval_log_line, interval_ms, verify, ExpectedBackoff, Verdict};
use crate::grpc::proto::testing::{ReconnectInfo, ReconnectParams};
use crate::time::Timestamp;

/// One call to the service, named by the driver (e.g. connection and stream id packed into 64
/// bits). Opaque here: only compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallId(pub u64);

/// How to answer a Start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartOutcome {
    /// Answer OK now: this call's session is the active one.
    Ready,
    /// Do not answer yet: another session is active. The call is answered OK when `stop` or
    /// `cancel` releases it, failed when `shutdown` returns it, and must be `cancel`led if its
    /// stream goes away first.
    Parked,
    /// The server is stopping: answer UNAVAILABLE "shutting down".
    ShuttingDown,
}

/// What a Stop produces.
#[derive(Clone, Debug, PartialEq)]
pub struct StopOutcome {
    /// Stop's response message.
    pub info: ReconnectInfo,
    /// The full verdict, for logging why a run failed ([`Verdict::reasons`]).
    pub verdict: Verdict,
    /// The parked Start that now owns the next session: answer it OK.
    pub released: Option<CallId>,
}

/// Server options beyond the reference's behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceConfig {
    /// Fail a Stop that saw fewer intervals than this (0 = the reference: 0 or 1 accepts pass).
    pub min_intervals: usize,
    /// Retry-port accepts recorded per session; more are counted, not kept, and fail the
    /// verdict. The reference keeps every one, so a connect flood grows it without bound.
    pub max_accepts: usize,
}

/// The default [`ServiceConfig::max_accepts`]: a real run makes a few dozen connections
/// (540 s at the slowest backoff of 1 s is 540), so this is far above any honest client.
pub const MAX_ACCEPTS: usize = 10_000;

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            min_intervals: 0,
            max_accepts: MAX_ACCEPTS,
        }
    }
}

/// The active session: opened by a Start that was answered OK, ended by the next Stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Session {
    /// The Start call that opened it.
    pub owner: CallId,
    /// This session's client's MAX_BACKOFF (0 = default), which Verify assumes.
    pub max_reconnect_backoff_ms: i32,
    /// The owner's connection went away (see [`ReconnectService::cancel`]).
    pub orphaned: bool,
}

/// The service's whole state. Single-threaded: the driver calls it from the event loop.
#[derive(Debug)]
pub struct ReconnectService {
    config: ServiceConfig,
    session: Option<Session>,
    /// Parked Starts, served first come first served.
    waiters: VecDeque<(CallId, i32)>,
    /// The limit the next Verify uses: the latest session's, kept after its Stop as in the
    /// reference, so a Stop without a session still has one (0 before any Start).
    verify_max_ms: i32,
    /// Retry-port accepts since the last Start or Stop, in arrival order, up to the cap.
    timestamps: Vec<Timestamp>,
    /// The latest accept (recorded or not), for the next interval's log line.
    last_accept: Option<Timestamp>,
    /// Accepts past [`ServiceConfig::max_accepts`] since the last Start or Stop.
    unrecorded: u64,
    /// `E_i` for the next interval's log line.
    log_expected: ExpectedBackoff,
    /// Host of the first retry-port peer since the last Start or Stop.
    first_peer: Option<IpAddr>,
    shutting_down: bool,
}

impl ReconnectService {
    /// A service with no session and no parked Starts.
    pub fn new(config: ServiceConfig) -> Self {
        ReconnectService {
            config,
            session: None,
            waiters: VecDeque::new(),
            verify_max_ms: 0,
            timestamps: Vec::new(),
            last_accept: None,
            unrecorded: 0,
            log_expected: ExpectedBackoff::for_log(0),
            first_peer: None,
            shutting_down: false,
        }
    }

    /// Start(ReconnectParams). With no active session (or an orphaned one, which it replaces)
    /// the call opens a session at once: timestamps are cleared and `params` is what Verify will
    /// assume. Otherwise it is parked behind earlier waiters. Repeating a known call's Start
    /// reports its current state and changes nothing.
    pub fn start(&mut self, call: CallId, params: &ReconnectParams) -> StartOutcome {
        if self.shutting_down {
            return StartOutcome::ShuttingDown;
        }
        if self.session.is_some_and(|s| s.owner == call) {
            return StartOutcome::Ready;
        }
        if self.is_parked(call) {
            return StartOutcome::Parked;
        }
        if self.session.is_some_and(|s| s.orphaned) {
            self.session = None;
        }
        if self.session.is_some() {
            self.waiters
                .push_back((call, params.max_reconnect_backoff_ms));
            return StartOutcome::Parked;
        }
        self.begin(call, params.max_reconnect_backoff_ms);
        StartOutcome::Ready
    }

    /// Stop(Empty): Verify what was recorded, clear it, end the session and hand the next one
    /// to the first parked Start. Always answered OK. Like the reference, a Stop without an
    /// active session still answers a verdict over whatever the retry port recorded since the
    /// last Start or Stop, with the latest session's limit.
    pub fn stop(&mut self) -> StopOutcome {
        let mut verdict = verify(
            &self.timestamps,
            self.verify_max_ms,
            self.config.min_intervals,
        );
        if self.unrecorded > 0 {
            let seen = self.timestamps.len() as u64 + self.unrecorded;
            verdict.too_many_accepts = Some((seen, self.config.max_accepts));
            verdict.passed = false;
        }
        let info = ReconnectInfo {
            passed: verdict.passed,
            backoff_ms: verdict.backoff_ms.clone(),
        };
        self.session = None;
        self.clear();
        StopOutcome {
            info,
            verdict,
            released: self.release_next(),
        }
    }

    /// The call's stream was reset or closed, its connection went away, or its grpc-timeout
    /// expired.
    ///
    /// A parked Start is dropped: it never becomes a session. For the active session's owner
    /// (whose Start was answered long ago; call this when its connection closes) the session is
    /// kept, because its client may still Stop from a new connection, but marked orphaned: if
    /// anyone is parked, or later Starts, the orphan is ended without a verdict and that Start
    /// gets the session, so a vanished client cannot block the server forever. Returns the
    /// Start to answer OK now, if this released one. Unknown calls are ignored.
    pub fn cancel(&mut self, call: CallId) -> Option<CallId> {
        if let Some(i) = self.waiters.iter().position(|w| w.0 == call) {
            self.waiters.remove(i);
            return None;
        }
        let session = self.session.as_mut().filter(|s| s.owner == call)?;
        session.orphaned = true;
        if self.waiters.is_empty() {
            return None;
        }
        self.session = None;
        self.release_next()
    }

    /// A connection was accepted on the retry port at `now` (taken before anything else, then
    /// closed by the driver). Records the timestamp (up to [`ServiceConfig::max_accepts`]; past
    /// it only counts it) and returns the reference's log lines: a peer-host mismatch,
    /// `reconnect server: new connection`, and the new interval's line.
    pub fn on_retry_connection(&mut self, now: Timestamp, peer: IpAddr) -> Vec<String> {
        let mut lines = Vec::with_capacity(3);
        // A dual-stack socket shows IPv4 peers as ::ffff:a.b.c.d; compare them as IPv4.
        let host = peer.to_canonical();
        match self.first_peer {
            None => self.first_peer = Some(host),
            Some(first) if first != host => {
                lines.push(format!("mismatched peer! {first} vs {host}"));
            }
            Some(_) => {}
        }
        lines.push("reconnect server: new connection".to_owned());
        if let Some(previous) = self.last_accept {
            let index = self.timestamps.len() + self.unrecorded as usize;
            let expected = self.log_expected.next().unwrap_or_default();
            lines.push(interval_log_line(
                index,
                interval_ms(previous, now),
                expected,
            ));
        }
        self.last_accept = Some(now);
        match self.timestamps.len() < self.config.max_accepts {
            true => self.timestamps.push(now),
            false => self.unrecorded += 1,
        }
        lines
    }

    /// The server is stopping: every parked Start is returned (oldest first) to be failed with
    /// UNAVAILABLE "shutting down", and later Starts get [`StartOutcome::ShuttingDown`].
    pub fn shutdown(&mut self) -> Vec<CallId> {
        self.shutting_down = true;
        self.waiters.drain(..).map(|(call, _)| call).collect()
    }

    /// The active session, if a Start opened one and no Stop has ended it yet.
    pub fn session(&self) -> Option<Session> {
        self.session
    }

    /// The parked Starts, oldest first.
    pub fn parked(&self) -> impl Iterator<Item = CallId> + '_ {
        self.waiters.iter().map(|w| w.0)
    }

    /// Accept timestamps recorded since the last Start or Stop.
    pub fn timestamps(&self) -> &[Timestamp] {
        &self.timestamps
    }

    fn is_parked(&self, call: CallId) -> bool {
        self.waiters.iter().any(|w| w.0 == call)
    }

    fn begin(&mut self, owner: CallId, max_reconnect_backoff_ms: i32) {
        self.session = Some(Session {
            owner,
            max_reconnect_backoff_ms,
            orphaned: false,
        });
        self.verify_max_ms = max_reconnect_backoff_ms;
        self.clear();
    }

    fn release_next(&mut self) -> Option<CallId> {
        let (call, max) = self.waiters.pop_front()?;
        self.begin(call, max);
        Some(call)
    }

    /// Forgets the recorded accepts and the first peer, as the reference's clear_timestamps.
    fn clear(&mut self) {
        self.timestamps = Vec::new();
        (self.last_accept, self.unrecorded) = (None, 0);
        self.first_peer = None;
        self.log_expected = ExpectedBackoff::for_log(self.verify_max_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const A: CallId = CallId(1);
    const B: CallId = CallId(2);
    const C: CallId = CallId(3);
    const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    fn params(max: i32) -> ReconnectParams {
        ReconnectParams {
            max_reconnect_backoff_ms: max,
        }
    }

    fn service() -> ReconnectService {
        ReconnectService::new(ServiceConfig::default())
    }

    fn ms(ms: u64) -> Timestamp {
        Timestamp::from_nanos(ms * 1_000_000)
    }

    /// Records accepts at the given ms offsets from localhost.
    fn accept_at(s: &mut ReconnectService, at_ms: &[u64]) {
        for &t in at_ms {
            s.on_retry_connection(ms(t), LOCALHOST);
        }
    }

    /// Issue 13 row 13: a connect flood on the retry port grew the timestamp list without
    /// bound. Past the cap accepts are counted, not kept; the verdict fails and says why, and
    /// the reference's per-accept lines (with their running index) go on.
    #[test]
    fn accepts_past_the_cap_are_counted_not_kept_and_fail_the_verdict() {
        let mut s = ReconnectService::new(ServiceConfig {
            max_accepts: 3,
            ..ServiceConfig::default()
        });
        s.start(A, &params(0));
        accept_at(&mut s, &[0, 1000, 2600]);
        let lines = s.on_retry_connection(ms(5000), LOCALHOST);
        assert_eq!(lines[0], "reconnect server: new connection");
        assert!(lines[1].starts_with("retry  3:"), "{lines:?}");
        accept_at(&mut s, &[9000]);
        assert_eq!(s.timestamps().len(), 3, "only the cap is kept");
        let stop = s.stop();
        assert!(!stop.info.passed);
        assert_eq!(stop.info.backoff_ms.len(), 2, "the recorded intervals");
        assert_eq!(stop.verdict.too_many_accepts, Some((5, 3)));
        assert!(stop.verdict.reasons()[0].contains("5 retry-port connections"));
        // The next session starts from nothing.
        s.start(B, &params(0));
        accept_at(&mut s, &[0, 1000]);
        assert!(s.stop().info.passed);
    }

    #[test]
    fn start_with_no_session_is_ready_and_opens_one() {
        let mut s = service();
        assert_eq!(s.start(A, &params(3000)), StartOutcome::Ready);
        let session = s.session().unwrap();
        assert_eq!(session.owner, A);
        assert_eq!(session.max_reconnect_backoff_ms, 3000);
    }

    #[test]
    fn second_start_is_parked_until_stop_and_waiters_are_fifo() {
        let mut s = service();
        s.start(A, &params(0));
        assert_eq!(s.start(B, &params(0)), StartOutcome::Parked);
        assert_eq!(s.start(C, &params(0)), StartOutcome::Parked);
        assert_eq!(s.parked().collect::<Vec<_>>(), [B, C]);
        assert_eq!(s.stop().released, Some(B));
        assert_eq!(s.session().unwrap().owner, B);
        assert_eq!(s.stop().released, Some(C));
        assert_eq!(s.stop().released, None);
        assert_eq!(s.session(), None);
    }

    #[test]
    fn repeated_start_of_a_known_call_changes_nothing() {
        let mut s = service();
        s.start(A, &params(0));
        s.start(B, &params(0));
        assert_eq!(s.start(A, &params(0)), StartOutcome::Ready);
        assert_eq!(s.start(B, &params(0)), StartOutcome::Parked);
        assert_eq!(s.parked().count(), 1);
    }

    #[test]
    fn stop_returns_verdict_and_intervals() {
        let mut s = service();
        s.start(A, &params(0));
        accept_at(&mut s, &[0, 1000, 2600, 5000]);
        let out = s.stop();
        assert_eq!(out.info.backoff_ms, [1000, 1600, 2400]);
        assert!(out.info.passed);
        assert!(s.timestamps().is_empty());
    }

    #[test]
    fn failing_stop_explains_why() {
        let mut s = service();
        s.start(A, &params(0));
        accept_at(&mut s, &[0, 500]);
        let out = s.stop();
        assert!(!out.info.passed);
        assert_eq!(out.info.backoff_ms, [500]);
        assert_eq!(out.verdict.out_of_range[0].index, 1);
    }

    #[test]
    fn strict_minimum_is_applied_at_stop() {
        let mut s = ReconnectService::new(ServiceConfig {
            min_intervals: 3,
            ..ServiceConfig::default()
        });
        s.start(A, &params(0));
        accept_at(&mut s, &[0, 1000]);
        let out = s.stop();
        assert!(!out.info.passed);
        assert_eq!(out.verdict.too_few_intervals, Some((1, 3)));
    }

    #[test]
    fn each_session_uses_its_own_max_backoff() {
        // Intervals 1000, 1600, 2560, 3000: pass with a 3000 cap, fail uncapped (E_4 = 4096).
        let run = [0, 1000, 2600, 5160, 8160];
        let mut s = service();
        s.start(A, &params(0));
        s.start(B, &params(3000));
        accept_at(&mut s, &run);
        assert!(!s.stop().info.passed);
        accept_at(&mut s, &run);
        assert!(
            s.stop().info.passed,
            "B's session verifies with its own 3000"
        );
    }

    #[test]
    fn start_clears_earlier_timestamps() {
        let mut s = service();
        accept_at(&mut s, &[0, 10]);
        s.start(A, &params(0));
        assert!(s.timestamps().is_empty());
        accept_at(&mut s, &[100, 1100]);
        assert_eq!(s.stop().info.backoff_ms, [1000]);
    }

    #[test]
    fn stop_without_session_verifies_what_was_recorded() {
        let mut s = service();
        let out = s.stop();
        assert!(out.info.passed);
        assert!(out.info.backoff_ms.is_empty());
        accept_at(&mut s, &[0, 40]);
        let out = s.stop();
        assert!(!out.info.passed);
        assert_eq!(out.info.backoff_ms, [40]);
    }

    #[test]
    fn stop_without_session_keeps_the_last_sessions_max() {
        let mut s = service();
        s.start(A, &params(1000));
        s.stop();
        accept_at(&mut s, &[0, 1000, 2000]);
        assert!(s.stop().info.passed, "E_2 capped at 1000");
    }

    #[test]
    fn cancelled_waiter_never_becomes_a_session() {
        let mut s = service();
        s.start(A, &params(0));
        s.start(B, &params(0));
        s.start(C, &params(0));
        assert_eq!(s.cancel(B), None);
        assert_eq!(s.stop().released, Some(C));
        s.cancel(C);
        assert_eq!(s.session().map(|x| x.orphaned), Some(true));
        assert_eq!(s.stop().released, None);
        assert_eq!(s.start(A, &params(0)), StartOutcome::Ready);
    }

    #[test]
    fn cancelling_an_unknown_call_does_nothing() {
        let mut s = service();
        s.start(A, &params(0));
        assert_eq!(s.cancel(C), None);
        assert!(!s.session().unwrap().orphaned);
    }

    #[test]
    fn orphaned_session_still_answers_a_stop() {
        let mut s = service();
        s.start(A, &params(0));
        accept_at(&mut s, &[0, 1000]);
        assert_eq!(s.cancel(A), None);
        let out = s.stop();
        assert_eq!(out.info.backoff_ms, [1000]);
        assert!(out.info.passed);
    }

    #[test]
    fn orphaned_session_yields_to_a_waiter() {
        let mut s = service();
        s.start(A, &params(0));
        s.start(B, &params(0));
        assert_eq!(s.cancel(A), Some(B));
        assert_eq!(s.session().unwrap().owner, B);
    }

    #[test]
    fn orphaned_session_yields_to_a_new_start() {
        let mut s = service();
        s.start(A, &params(0));
        accept_at(&mut s, &[0, 5]);
        s.cancel(A);
        assert_eq!(s.start(B, &params(0)), StartOutcome::Ready);
        assert!(s.timestamps().is_empty());
    }

    #[test]
    fn shutdown_fails_parked_starts_and_refuses_new_ones() {
        let mut s = service();
        s.start(A, &params(0));
        s.start(B, &params(0));
        s.start(C, &params(0));
        assert_eq!(s.shutdown(), [B, C]);
        assert_eq!(s.start(CallId(9), &params(0)), StartOutcome::ShuttingDown);
        assert_eq!(s.stop().released, None);
    }

    #[test]
    fn retry_connection_logs_only_the_new_interval() {
        let mut s = service();
        s.start(A, &params(0));
        assert_eq!(
            s.on_retry_connection(ms(0), LOCALHOST),
            ["reconnect server: new connection"]
        );
        assert_eq!(
            s.on_retry_connection(ms(1000), LOCALHOST),
            [
                "reconnect server: new connection",
                "retry  1:backoff   1.00s,expected backoff   1.00s, jitter 0.00%",
            ]
        );
        assert_eq!(
            s.on_retry_connection(ms(3000), LOCALHOST)[1],
            "retry  2:backoff   2.00s,expected backoff   1.60s, jitter 25.00%"
        );
    }

    #[test]
    fn log_expectation_follows_the_session_cap() {
        let mut s = service();
        s.start(A, &params(1000));
        accept_at(&mut s, &[0, 1000]);
        let lines = s.on_retry_connection(ms(2000), LOCALHOST);
        assert_eq!(
            lines[1],
            "retry  2:backoff   1.00s,expected backoff   1.00s, jitter 0.00%"
        );
    }

    #[test]
    fn peer_check_compares_hosts_not_ports() {
        let mut s = service();
        s.start(A, &params(0));
        accept_at(&mut s, &[0, 1000]);
        let mapped = IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped());
        assert_eq!(s.on_retry_connection(ms(2600), mapped).len(), 2);
        let other = IpAddr::V6(Ipv6Addr::LOCALHOST);
        assert_eq!(
            s.on_retry_connection(ms(5000), other)[0],
            "mismatched peer! 127.0.0.1 vs ::1"
        );
    }

    #[test]
    fn a_new_session_forgets_the_first_peer() {
        let mut s = service();
        s.start(A, &params(0));
        accept_at(&mut s, &[0]);
        s.stop();
        s.start(B, &params(0));
        let other = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
        assert_eq!(
            s.on_retry_connection(ms(10), other),
            ["reconnect server: new connection"]
        );
    }
}
