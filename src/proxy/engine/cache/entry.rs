//! A stored response, its freshness and validator, and the answers a hit gives
//! (RFC 7252 §5.6.1, §5.6.2, §5.7.1, §5.9, §5.10.5, §5.10.6).

use std::time::Duration;

use crate::coap::option::{self, decode_uint, encode_uint};
use crate::coap::{Code, EncodeError, Message, MessageBuilder, MessageType};
use crate::time::Timestamp;

/// Max-Age when a response has none (RFC 7252 §5.10.5).
pub(crate) const DEFAULT_MAX_AGE: u32 = 60;

/// Response options the cache does not keep: Max-Age is written afresh on every hit (§5.7.1),
/// Observe must not answer a plain GET (RFC 7641 §2), an upstream's Echo is addressed to the
/// proxy that made the request (RFC 9175 §2.3), and Hop-Limit is hop-by-hop (RFC 8768).
const NOT_STORED: [u16; 4] = [
    option::MAX_AGE,
    option::OBSERVE,
    option::ECHO,
    option::HOP_LIMIT,
];

/// Why a response was not stored.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum NotStored {
    /// The cache is off (budget 0).
    Off,
    /// A code the cache does not store; see [`storable`].
    Code(Code),
    /// Max-Age 0: the origin asks not to be cached (RFC 7252 §5.6.1).
    MaxAgeZero,
    /// Max-Age repeated or longer than 4 bytes (RFC 7252 §5.10.5).
    InvalidMaxAge,
    /// ETag repeated, empty or longer than 8 bytes (RFC 7252 §5.10.6.1).
    InvalidEtag,
    /// An unsafe option the cache does not know: it cannot tell what it means for reuse
    /// (RFC 7252 §5.4.2, §5.7.1).
    UnknownUnsafeOption(u16),
    /// An OSCORE response (RFC 8613 §4.1.3.3): protected for the one client that asked.
    Protected,
    /// Larger than the whole budget.
    TooLarge,
    /// Could not be re-encoded (cannot happen for a parsed message).
    Unencodable(EncodeError),
}

/// How a stored response may be reused once stale.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Validation {
    /// By its ETag, if it has one (2.05, RFC 7252 §5.9.1.5).
    ByEtag,
    /// Never: errors are fresh by Max-Age only (§5.9.2, §5.9.3).
    None,
}

/// Which upstream codes are stored (RFC 7252 §5.6, §5.9). 2.05 is; unknown success codes
/// must not be; errors may be, and the ones kept are those that describe the resource:
/// not 4.01 (a challenge to the requester, the proxy, often with its own Echo, RFC 9175
/// §2.3), 4.08 (block-wise transfer state, RFC 7959 §2.9.2), 4.12 (the cache never serves
/// conditional requests), 4.29 and 5.03 (Max-Age is a back-off for the requester, RFC 8516
/// §4, §5.9.3.4), nor 5.00, 5.02, 5.04 and 5.08: transient failures of the origin or the path,
/// which a default 60 s of reuse would only prolong, with no way to validate them.
fn storable(code: Code) -> Result<Validation, NotStored> {
    match code {
        Code::CONTENT => Ok(Validation::ByEtag),
        Code::UNAUTHORIZED
        | Code::REQUEST_ENTITY_INCOMPLETE
        | Code::PRECONDITION_FAILED
        | Code::TOO_MANY_REQUESTS => Err(NotStored::Code(code)),
        c if c.class() == 4 => Ok(Validation::None),
        Code::NOT_IMPLEMENTED | Code::PROXYING_NOT_SUPPORTED => Ok(Validation::None),
        _ => Err(NotStored::Code(code)),
    }
}

/// An entity-tag: 1 to 8 opaque bytes, always strong (RFC 7252 §5.10.6, §10.1.1).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct Etag {
    len: u8,
    bytes: [u8; 8],
}

impl Etag {
    /// `None` unless 1-8 bytes long (RFC 7252 §5.10.6.1).
    pub(crate) fn new(value: &[u8]) -> Option<Etag> {
        let mut bytes = [0; 8];
        bytes.get_mut(..value.len())?.copy_from_slice(value);
        let len = u8::try_from(value.len()).ok().filter(|&l| l > 0)?;
        Some(Etag { len, bytes })
    }

    /// The value.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or_default()
    }
}

/// Max-Age and ETag of a response, once each (RFC 7252 §5.10.5, §5.10.6.1), after checking
/// that it has no unsafe option the cache does not know.
pub(crate) fn validators(response: &Message) -> Result<(u32, Option<Etag>), NotStored> {
    let (mut max_age, mut etag) = (None, None);
    for (number, value) in response.options() {
        match number {
            option::MAX_AGE if max_age.is_some() => return Err(NotStored::InvalidMaxAge),
            option::MAX_AGE => max_age = Some(decode_uint(value)),
            option::ETAG if etag.is_some() => return Err(NotStored::InvalidEtag),
            option::ETAG => etag = Some(Etag::new(value).ok_or(NotStored::InvalidEtag)?),
            option::OSCORE => return Err(NotStored::Protected),
            n if option::is_unsafe(n) && !option::is_known(n) => {
                return Err(NotStored::UnknownUnsafeOption(n))
            }
            _ => {}
        }
    }
    let max_age = max_age.unwrap_or(Ok(DEFAULT_MAX_AGE));
    Ok((max_age.map_err(|_| NotStored::InvalidMaxAge)?, etag))
}

/// Encodes code, options and payload as a CoAP message (type NON, MID 0, no token): the form
/// a response is kept in, read back with [`Message::parse`].
fn encode_stored<'a>(
    code: Code,
    options: impl Iterator<Item = (u16, &'a [u8])>,
    payload: &[u8],
) -> Result<Box<[u8]>, NotStored> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, MessageType::Non, code, 0, &[]);
    options.for_each(|(n, v)| _ = b.option(n, v));
    b.payload(payload);
    b.finish().map_err(NotStored::Unencodable)?;
    Ok(out.into_boxed_slice())
}

/// Whether a stored response may be used without asking the origin (RFC 7252 §5.6.1).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Freshness {
    /// Yes, with this Max-Age left: the original less the age, rounded down (§5.7.1).
    Fresh { max_age_left: u32 },
    /// No: older than its Max-Age, or its resource was changed since (§5.9.1).
    Stale,
}

/// One stored response and when it was last known current.
#[derive(Clone, Debug)]
pub(crate) struct CachedResponse {
    /// Code, options (less [`NOT_STORED`]) and payload, encoded as a message.
    message: Box<[u8]>,
    /// The validator, for 2.05 only (§5.9.2: errors cannot be validated).
    etag: Option<Etag>,
    /// Seconds from `validated_at` for which it is fresh.
    max_age: u32,
    /// When it was stored or last revalidated.
    validated_at: Timestamp,
    /// The cache's operation count then; an invalidation of its resource after it makes it
    /// stale (a counter, not a time, so an invalidation and a store at one instant are ordered).
    validated_seq: u64,
}

impl CachedResponse {
    /// Keeps `response` from upstream, if its code and options allow (RFC 7252 §5.6, §5.9).
    pub(crate) fn new(now: Timestamp, seq: u64, response: &Message) -> Result<Self, NotStored> {
        let validation = storable(response.code())?;
        let (max_age, etag) = validators(response)?;
        if max_age == 0 {
            return Err(NotStored::MaxAgeZero);
        }
        let kept = response.options().filter(|(n, _)| !NOT_STORED.contains(n));
        let message = encode_stored(response.code(), kept, response.payload())?;
        Ok(CachedResponse {
            message,
            etag: etag.filter(|_| validation == Validation::ByEtag),
            max_age,
            validated_at: now,
            validated_seq: seq,
        })
    }

    /// Bytes held on the heap.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.message.len()
    }

    /// The validator.
    pub(crate) fn etag(&self) -> Option<Etag> {
        self.etag
    }

    /// Fresh while younger than Max-Age and not invalidated after `invalidated_seq`.
    pub(crate) fn freshness(&self, now: Timestamp, invalidated_seq: u64) -> Freshness {
        if self.validated_seq <= invalidated_seq {
            return Freshness::Stale;
        }
        let age = now.saturating_since(self.validated_at);
        let max_age = Duration::from_secs(u64::from(self.max_age));
        match max_age.checked_sub(age) {
            Some(left) if !left.is_zero() => Freshness::Fresh {
                max_age_left: u32::try_from(left.as_secs()).unwrap_or(u32::MAX),
            },
            _ => Freshness::Stale,
        }
    }

    /// Current again for `max_age` seconds from `now` (RFC 7252 §5.9.1.3 item 1).
    pub(crate) fn refresh(&mut self, now: Timestamp, seq: u64, max_age: u32) {
        (self.max_age, self.validated_at, self.validated_seq) = (max_age, now, seq);
    }

    /// Applies a 2.03 naming this response (RFC 7252 §5.9.1.3): Max-Age from it (60 s if
    /// absent), and each Safe-to-Forward option type it carries replaces the stored set of
    /// that type. The caller has checked that its ETag is this response's.
    pub(crate) fn revalidate(&mut self, now: Timestamp, seq: u64, valid: &Message) -> bool {
        let Ok((max_age, _)) = validators(valid) else {
            return false;
        };
        // The ETag is the stored one already: the caller checked.
        let updates = |n| n != option::ETAG && !option::is_unsafe(n) && !NOT_STORED.contains(&n);
        let in_valid = |n: u16| valid.options().any(|(m, _)| m == n);
        if valid.options().any(|(n, _)| updates(n)) {
            let Some(stored) = self.message().ok() else {
                return false;
            };
            let kept = stored
                .options()
                .filter(|&(n, _)| !(updates(n) && in_valid(n)));
            let new = valid.options().filter(|&(n, _)| updates(n));
            match encode_stored(stored.code(), kept.chain(new), stored.payload()) {
                Ok(message) => self.message = message,
                Err(_) => return false,
            }
        }
        self.refresh(now, seq, max_age);
        true
    }

    /// This response validated by `valid` (a 2.03 naming it) on its own, outside the cache: for
    /// a revalidation whose entry was evicted or replaced while it was upstream.
    pub(crate) fn validated_alone(&mut self, now: Timestamp, valid: &Message) -> Option<Hit<'_>> {
        self.revalidate(now, 0, valid).then_some(())?;
        self.hit(self.max_age)
    }

    /// The stored message (it was encoded by [`encode_stored`], so it parses).
    fn message(&self) -> Result<Message<'_>, crate::coap::FormatError> {
        Message::parse(&self.message)
    }

    /// A hit on this response with `max_age_left`, or `None` if it does not parse.
    pub(crate) fn hit(&self, max_age_left: u32) -> Option<Hit<'_>> {
        let response = self.message().ok()?;
        let etag = self.etag;
        Some(Hit {
            response,
            max_age_left,
            etag,
        })
    }
}

/// A fresh stored response: everything the engine needs to answer from the cache.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hit<'c> {
    response: Message<'c>,
    max_age_left: u32,
    etag: Option<Etag>,
}

impl Hit<'_> {
    /// The stored code.
    #[cfg(test)]
    pub(crate) fn code(&self) -> Code {
        self.response.code()
    }

    /// Max-Age to send: the original less the entry's age, rounded down (RFC 7252 §5.7.1).
    #[cfg(test)]
    pub(crate) fn max_age_left(&self) -> u32 {
        self.max_age_left
    }

    /// The stored validator.
    #[cfg(test)]
    pub(crate) fn etag(&self) -> Option<Etag> {
        self.etag
    }

    /// Whether `request` names this response among its ETags, so 2.03 answers it
    /// ([`Hit::encode_valid`], RFC 7252 §5.10.6.2). False for a response without ETag.
    pub(crate) fn client_etag_matches(&self, request: &Message) -> bool {
        let Some(etag) = self.etag else {
            return false;
        };
        let mut client_etags = request.options().filter(|&(n, _)| n == option::ETAG);
        client_etags.any(|(_, v)| v == etag.as_bytes())
    }

    /// Writes the stored response as the answer to a client: its type, the proxy's Message ID
    /// and the client's token; Max-Age always written, with what is left (§5.7.1): an absent
    /// one would mean 60 s to the client, more than is left unless exactly 60 is.
    pub(crate) fn encode(
        &self,
        out: &mut Vec<u8>,
        ty: MessageType,
        mid: u16,
        token: &[u8],
    ) -> Result<(), EncodeError> {
        let mut b = MessageBuilder::new(out, ty, self.response.code(), mid, token);
        self.response
            .options()
            .for_each(|(n, v)| _ = b.option(n, v));
        b.option(option::MAX_AGE, &encode_uint(self.max_age_left));
        b.payload(self.response.payload());
        b.finish()
    }

    /// Writes 2.03 Valid for a client whose ETag matched ([`Hit::client_etag_matches`]): the
    /// ETag, the Max-Age left, no payload (RFC 7252 §5.9.1.3, §5.10.6.2).
    pub(crate) fn encode_valid(
        &self,
        out: &mut Vec<u8>,
        ty: MessageType,
        mid: u16,
        token: &[u8],
    ) -> Result<(), EncodeError> {
        let mut b = MessageBuilder::new(out, ty, Code::VALID, mid, token);
        if let Some(etag) = self.etag {
            b.option(option::ETAG, etag.as_bytes());
        }
        b.option(option::MAX_AGE, &encode_uint(self.max_age_left));
        b.finish()
    }
}
