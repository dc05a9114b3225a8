//! What the origins vouched for, as the proxy heard it, and the check that every answer the
//! proxy gives to a GET of a shared resource was fresh when given (RFC 7252 §5.6.1).
//!
//! An origin's 2.05 or 4.04 says "this stays current for Max-Age seconds" (60 when absent,
//! §5.10.5), counted from when the proxy receives it: CoAP has no Age option, so a cache
//! ages a response from its arrival. A 2.03 says the same of the 2.05 its ETag names
//! (§5.6.2). A successful PUT or POST that the proxy relays ends every promise about its
//! resource heard before it (§5.9.1.3, §5.9.1.4); a response that arrives later, even an
//! old representation overtaken on the network, is a new promise. An answer the proxy gives
//! at `t` with Max-Age `m` must then be covered: `t + m` no later than the promise's end.
//! A relayed answer is covered by its own arrival; a hit only if the cache aged it right and
//! dropped it on invalidation.

use std::collections::HashMap;
use std::time::Duration;

use backoffd::coap::option::{decode_uint, ETAG, MAX_AGE};
use backoffd::coap::{Code, Message};
use backoffd::time::Timestamp;

/// RFC 7252 §5.10.5: Max-Age when the option is absent.
const DEFAULT_MAX_AGE: u32 = 60;

/// One shared resource: its upstream and number.
pub type Resource = (u16, u32);

/// The ETag of version `version` of resource `res`; it names the representation for a 2.03.
pub fn etag(res: u32, version: u32) -> [u8; 8] {
    let mut tag = [0; 8];
    tag[..4].copy_from_slice(&res.to_be_bytes());
    tag[4..].copy_from_slice(&version.to_be_bytes());
    tag
}

/// The payload of that version's 2.05.
pub fn representation(res: u32, version: u32) -> String {
    format!("res={res} v={version}")
}

/// The payload of a 4.04 for `res`.
pub fn not_found(res: u32) -> String {
    format!("res={res}")
}

/// The resource a shared-resource payload names (`res=K`, `res=K v=V`).
pub fn resource_of(payload: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(payload).ok()?.strip_prefix("res=")?;
    text.split(' ').next()?.parse().ok()
}

/// Max-Age of a response, the default when absent.
pub fn max_age(msg: &Message) -> Option<u32> {
    match msg.option(MAX_AGE) {
        None => Some(DEFAULT_MAX_AGE),
        Some(v) => decode_uint(v).ok(),
    }
}

/// The promises heard, per resource: each answer (code, payload) is current until when.
#[derive(Default)]
pub struct Vouched {
    by_resource: HashMap<Resource, HashMap<(u8, Vec<u8>), Timestamp>>,
}

impl Vouched {
    /// Upstream `up`'s answer reached the proxy while its request was waiting for one. (The
    /// proxy may still pass over it: a piggybacked copy after an empty ACK from a duplicate,
    /// say. The promise stands all the same: the origin made it.)
    pub fn heard(&mut self, now: Timestamp, up: u16, msg: &Message) {
        let code = msg.code();
        let answer = match code {
            Code::CONTENT | Code::NOT_FOUND => {
                resource_of(msg.payload()).map(|res| (res, (code.0, msg.payload().to_vec())))
            }
            Code::VALID => msg
                .option(ETAG)
                .and_then(|t| <[u8; 8]>::try_from(t).ok())
                .map(|t| {
                    let res = u32::from_be_bytes(t[..4].try_into().expect("4 bytes"));
                    let version = u32::from_be_bytes(t[4..].try_into().expect("4 bytes"));
                    let payload = representation(res, version).into_bytes();
                    (res, (Code::CONTENT.0, payload))
                }),
            _ => None,
        };
        let (Some((res, answer)), Some(age)) = (answer, max_age(msg)) else {
            return;
        };
        let until = now + Duration::from_secs(u64::from(age));
        let promise = self.by_resource.entry((up, res)).or_default();
        let entry = promise.entry(answer).or_insert(until);
        *entry = (*entry).max(until);
    }

    /// A PUT's or POST's success on `resource` went to its client at `now`: the proxy acted
    /// on it, so nothing heard of the resource before is fresh any more.
    pub fn invalidated(&mut self, now: Timestamp, resource: Resource) {
        for until in self.by_resource.entry(resource).or_default().values_mut() {
            *until = (*until).min(now);
        }
    }

    /// The proxy gave `msg` at `now` to a GET of `resource`: why it was not fresh, if not.
    pub fn check(&self, now: Timestamp, resource: Resource, msg: &Message) -> Option<String> {
        let code = msg.code();
        if !matches!(code, Code::CONTENT | Code::NOT_FOUND) {
            return None;
        }
        let answer = (code.0, msg.payload().to_vec());
        let Some(&until) = self.by_resource.get(&resource).and_then(|p| p.get(&answer)) else {
            return Some(format!(
                "answered {code} that its origin never gave: {msg:?}"
            ));
        };
        let Some(age) = max_age(msg) else {
            return Some(format!("answered with an invalid Max-Age: {msg:?}"));
        };
        let claimed = now + Duration::from_secs(u64::from(age));
        (claimed > until).then(|| {
            format!(
                "answered {code} with Max-Age {age} s, but it was fresh only {:?} longer: {msg:?}",
                until.saturating_since(now)
            )
        })
    }
}
