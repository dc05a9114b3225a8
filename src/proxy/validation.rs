//! Opt-in address validation with Echo (RFC 9175 §2.4, `--validate-sources`): until a source
//! has shown that it receives at the address it claims, the proxy sends it at most 3 times
//! the bytes it sent (the anti-amplification limit of RFC 9175 §2.4 and RFC 9000 §8), and a
//! request whose answer may not fit gets 4.01 Unauthorized with an Echo value to repeat.
//! A request carrying a fresh value of the proxy's own validates its source for a while.

use std::net::SocketAddr;
use std::time::Duration;

use crate::coap::echo::{self, EchoKey};
use crate::coap::option::ECHO;
use crate::coap::{Code, Message};
use crate::time::Timestamp;

use super::engine::{LocalAnswer, Proxy};
use super::keyed_hash::{KeyedMap, KeyedState};
use super::local::is_local_client;

/// RFC 9175 §2.4: an unvalidated source is sent at most this many times what it sent.
const AMPLIFICATION_FACTOR: u64 = 3;
/// How long an Echo value the proxy issued stays good: short, so a captured one is of
/// little use (RFC 9175 §2.3 leaves it to the server).
pub(super) const ECHO_LIFETIME: Duration = Duration::from_secs(60);
/// How long a source stays validated after a fresh Echo.
pub(super) const VALIDATED_FOR: Duration = Duration::from_secs(300);
/// Sources tracked at most (unvalidated ones' byte counts and validated ones).
const MAX_SOURCES: usize = 65_536;
/// An answer may be this long (RFC 7252 §4.6): a request is challenged unless its source's
/// allowance takes one.
const LIKELY_ANSWER: u64 = 1152;

#[derive(Clone, Copy, Debug)]
struct SourceState {
    received: u64,
    sent: u64,
    validated_until: Option<Timestamp>,
    last: Timestamp,
}

/// Every source's state. See the module docs.
#[derive(Debug)]
pub(super) struct SourceValidation {
    key: EchoKey,
    sources: KeyedMap<SocketAddr, SourceState>,
    /// Datagrams dropped because an unvalidated source's 3x allowance was spent.
    pub(super) dropped: u64,
}

impl SourceValidation {
    pub(super) fn new(key: EchoKey, hash: &KeyedState) -> Self {
        SourceValidation {
            key,
            sources: hash.map(),
            dropped: 0,
        }
    }

    fn entry(&mut self, now: Timestamp, addr: SocketAddr) -> &mut SourceState {
        if !self.sources.contains_key(&addr) && self.sources.len() >= MAX_SOURCES {
            // Least recently used first: those not seen for a while, then all but validated.
            let horizon = VALIDATED_FOR;
            self.sources
                .retain(|_, s| now.saturating_since(s.last) < horizon);
            if self.sources.len() >= MAX_SOURCES / 4 * 3 {
                self.sources
                    .retain(|_, s| s.validated_until.is_some_and(|u| u > now));
            }
            if self.sources.len() >= MAX_SOURCES / 4 * 3 {
                self.sources.clear();
            }
        }
        let s = self.sources.entry(addr).or_insert(SourceState {
            received: 0,
            sent: 0,
            validated_until: None,
            last: now,
        });
        s.last = now;
        s
    }

    fn validated(s: &SourceState, now: Timestamp) -> bool {
        s.validated_until.is_some_and(|u| u > now)
    }

    /// A datagram of `len` bytes came from `addr`.
    pub(super) fn received(&mut self, now: Timestamp, addr: SocketAddr, len: usize) {
        self.entry(now, addr).received += len as u64;
    }

    /// Whether `len` more bytes may go to `addr`; counted if so.
    pub(super) fn may_send(&mut self, now: Timestamp, addr: SocketAddr, len: usize) -> bool {
        let s = self.entry(now, addr);
        if Self::validated(s, now) || s.sent + len as u64 <= AMPLIFICATION_FACTOR * s.received {
            s.sent += len as u64;
            return true;
        }
        self.dropped += 1;
        false
    }

    /// Validates `addr` if `msg` carries a fresh Echo of ours for it; otherwise whether the
    /// request may go on unvalidated (its allowance takes a likely answer), or the Echo
    /// value to challenge it with.
    pub(super) fn check(
        &mut self,
        now: Timestamp,
        addr: SocketAddr,
        msg: &Message,
    ) -> Result<(), [u8; echo::ISSUED_LEN]> {
        let key = self.key;
        let echoed = (msg.options().filter(|&(n, _)| n == ECHO))
            .filter_map(|(_, v)| echo::decode(v).ok())
            .any(|e| key.verify(e, addr, now, ECHO_LIFETIME).is_ok());
        let s = self.entry(now, addr);
        if echoed {
            s.validated_until = Some(now + VALIDATED_FOR);
        }
        let allowance = (AMPLIFICATION_FACTOR * s.received).saturating_sub(s.sent);
        if Self::validated(s, now) || allowance >= LIKELY_ANSWER {
            return Ok(());
        }
        Err(key.issue(addr, now))
    }
}

impl Proxy {
    /// `--validate-sources`: 4.01 with an Echo value for a request from a source not yet
    /// validated whose answer may exceed 3x what it sent (RFC 9175 §2.4).
    pub(super) fn check_source(
        &mut self,
        now: Timestamp,
        from: SocketAddr,
        msg: &Message,
    ) -> Result<(), LocalAnswer> {
        let Some(v) = self
            .out
            .validation_mut()
            .filter(|_| !is_local_client(&from))
        else {
            return Ok(());
        };
        match v.check(now, from, msg) {
            Ok(()) => Ok(()),
            Err(value) => {
                self.counters.echo_challenges += 1;
                Err(LocalAnswer {
                    code: Code::UNAUTHORIZED,
                    max_age: None,
                    size1: None,
                    echo: Some(value),
                    diagnostic: "",
                })
            }
        }
    }
}
