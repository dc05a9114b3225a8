//! Reading requests (RFC 9112 §2-§7): heads parsed at a line feed, bodies by a reader that
//! keeps its place, each paced against the header, body and minimum-rate deadlines.

use std::mem;

use super::super::body::{BodyReader, Chunked, Limits};
use super::super::head::{self, Head, Parsed};
use super::super::{Config, Request};
use super::{Http1Connection, Owed};
use crate::time::Timestamp;

/// What the input is in the middle of.
#[derive(Debug)]
pub(super) enum Receiving {
    /// Between requests: nothing of the next one has arrived.
    Between,
    /// The connection's first head, due [`Config::first_head_timeout`] after the connection
    /// opened at `opened`, whether any of it came or not.
    FirstHead { opened: Timestamp },
    /// A later head began at `since`.
    Head { since: Timestamp },
    /// A head was parsed and its body is arriving.
    Body(Box<BodyInProgress>),
}

/// A request whose head is parsed and whose body is not complete yet.
#[derive(Debug)]
pub(super) struct BodyInProgress {
    /// The request; its `body` fills as the bytes arrive.
    pub(super) request: Request,
    pub(super) owed: Owed,
    pub(super) reader: BodyReader,
    /// When the head completed: the body is due by `since + body_timeout`.
    pub(super) since: Timestamp,
    /// Whether the body is expected yet, and how much of it came, for the minimum rate.
    pub(super) pace: Pace,
}

/// Whether a body is expected to be arriving, for [`Config::min_body_rate`].
#[derive(Clone, Copy, Debug)]
pub(super) enum Pace {
    /// The client waits for `100 Continue` before sending the body, and it has not been sent
    /// (RFC 9110 §10.1.1): nothing is expected of it yet.
    AwaitingContinue,
    /// The body is expected since `since` (the end of the head, or the `100 Continue`);
    /// `received` bytes of it, framing included, came since.
    Flowing { since: Timestamp, received: u64 },
}

impl Pace {
    /// When the body falls behind `rate` bytes per second averaged since it was expected, as
    /// it stands; `None` while it is not expected or with no rate.
    pub(super) fn behind_at(&self, rate: u64) -> Option<Timestamp> {
        let Pace::Flowing { since, received } = *self else {
            return None;
        };
        let nanos = u128::from(received) * 1_000_000_000 / u128::from(rate.max(1));
        let lead = std::time::Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
        (rate > 0).then(|| since + lead)
    }

    /// When the body is cut for its pace: the grace is a head start, so the body must have
    /// had `rate x (elapsed - grace)` bytes by then. A client slow to start (TCP slow start, a
    /// lost segment) is forgiven that much; a dribble or a silence is cut just after the grace.
    pub(super) fn cut_at(&self, config: &Config) -> Option<Timestamp> {
        Some(self.behind_at(config.min_body_rate)? + config.body_rate_grace)
    }
}

impl Http1Connection {
    /// Input arrived between requests: the next head's timer starts.
    pub(super) fn head_begun(&mut self) {
        if matches!(self.receiving, Receiving::Between) && !self.input.is_empty() {
            self.receiving = Receiving::Head { since: self.now };
        }
    }

    /// Parses complete requests off the input while the bounds allow.
    pub(super) fn parse_input(&mut self) {
        while self.may_parse() {
            if matches!(self.receiving, Receiving::Body(_)) {
                if !self.read_body() {
                    return;
                }
                continue;
            }
            match head::parse(&self.input, &self.config) {
                Head::Complete(parsed) => self.accept_head(*parsed),
                Head::Partial if self.input_ended => self.stop(),
                Head::Partial => return self.head_begun(),
                Head::Invalid(status) => self.refuse(status),
            }
        }
    }

    /// A head is complete: the request is ready, or its body is to be read.
    fn accept_head(&mut self, parsed: Parsed) {
        self.input.drain(..parsed.len);
        let owed = Owed {
            head_only: parsed.request.method == "HEAD",
            keep_alive: parsed.request.keep_alive,
            http10: parsed.http10,
            http10_keep_alive: parsed.http10 && parsed.request.keep_alive,
        };
        let Some(reader) = BodyReader::new(parsed.body) else {
            return self.accept(parsed.request, owed);
        };
        let mut request = parsed.request;
        if let BodyReader::Length(n) = reader {
            if !self.body_fits(n) {
                return self.refuse(503);
            }
            // Known and within the allowance: held whole soon, so take it at once.
            request.body.reserve_exact(n as usize);
        }
        let pace = match parsed.expects_continue {
            true => Pace::AwaitingContinue,
            false => Pace::Flowing {
                since: self.now,
                received: 0,
            },
        };
        self.receiving = Receiving::Body(Box::new(BodyInProgress {
            request,
            owed,
            reader,
            since: self.now,
            pace,
        }));
        self.send_continue_when_due();
    }

    /// Whether a body of `len` bytes fits the allowance beside the bodies parsed before it.
    fn body_fits(&self, len: u64) -> bool {
        let room = self.body_room();
        usize::try_from(len).is_ok_and(|n| n <= room)
    }

    /// What the body being received may hold: the allowance less the bodies parsed before it.
    fn body_room(&self) -> usize {
        let ready: usize = self.ready.iter().map(|r| r.body.len()).sum();
        self.body_allowance.saturating_sub(ready)
    }

    /// The body being received, at the length it will have as far as is known: received and
    /// still to come for a known length or the current chunk.
    pub(super) fn receiving_body_bytes(&self) -> usize {
        let Receiving::Body(body) = &self.receiving else {
            return 0;
        };
        let coming = match body.reader {
            BodyReader::Length(remaining) | BodyReader::Chunked(Chunked::Data { remaining }) => {
                remaining
            }
            BodyReader::Chunked(_) => 0,
        };
        body.request.body.len() + usize::try_from(coming).unwrap_or(usize::MAX)
    }

    /// Moves the input into the body being read; true when it completed, so that the
    /// input after it (the next pipelined request) may be parsed.
    fn read_body(&mut self) -> bool {
        let limits = Limits {
            max_body: self.config.max_body_len,
            allowance: self.body_room(),
            max_trailers: self.config.max_head_len,
        };
        let Receiving::Body(body) = &mut self.receiving else {
            return true;
        };
        if self.input.is_empty() {
            if self.input_ended {
                self.stop();
            }
            return false;
        }
        if let Pace::AwaitingContinue = body.pace {
            // It did not wait for the 100 Continue: its pace counts from its head.
            body.pace = Pace::Flowing {
                since: body.since,
                received: 0,
            };
        }
        match body
            .reader
            .read(&self.input, &mut body.request.body, limits)
        {
            Err(status) => {
                self.refuse(status);
                false
            }
            Ok(progress) => {
                if let Pace::Flowing { received, .. } = &mut body.pace {
                    *received += progress.used as u64;
                }
                self.input.drain(..progress.used);
                if progress.done {
                    if let Receiving::Body(body) =
                        mem::replace(&mut self.receiving, Receiving::Between)
                    {
                        self.accept(body.request, body.owed);
                    }
                }
                progress.done
            }
        }
    }

    /// A whole request, ready for the application.
    fn accept(&mut self, request: Request, owed: Owed) {
        self.receiving = Receiving::Between;
        self.owed.push_back(owed);
        // RFC 9112 §9.6: no further requests are processed after one that closes.
        if !request.keep_alive {
            self.stop();
        }
        self.ready.push_back(request);
    }
}
