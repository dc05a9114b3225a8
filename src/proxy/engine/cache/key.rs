//! The cache key of a request, and the resource it names (RFC 7252 §5.4.2, §5.6; RFC 8132 §2).
//!
//! Both are canonical byte strings, compared exactly and hashed for the index. Each part is
//! written so that no two different requests give the same bytes: the target and every value
//! are length-prefixed (LEB128), each option carries a tag and its number, and a list of
//! options ends with its own tag. A valid message has its options sorted by number (RFC 7252
//! §3.1), so splitting them into the resource's and the rest loses no order, and repeated
//! options keep theirs, which is significant (Uri-Path segments).

use crate::coap::option::{self, BlockValue};
use crate::coap::{Code, Message};

/// Why a request is neither answered from the cache nor its response stored.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Bypass {
    /// Only GET and FETCH responses are reused (RFC 7252 §5.6, RFC 8132 §2); the others are
    /// not safe, and their success answers invalidate instead (§5.9.1).
    Method(Code),
    /// No-Response (RFC 7967): the client suppresses answers, which usually means the request
    /// is a trigger that must reach the origin; and a stored answer nobody reads is wasted room.
    NoResponse,
    /// If-Match or If-None-Match: the origin evaluates the condition (RFC 7252 §5.10.8).
    Conditional,
    /// Block1, Q-Block1 or Q-Block2: a request body in transfer (RFC 7959 §2.5, RFC 9177),
    /// whose answers depend on server state the cache does not see.
    BlockTransfer(u16),
    /// A Block2 value that does not decode, or more than one (RFC 7959 §2.2).
    InvalidBlock2,
    /// An unsafe option the proxy does not know (the engine rejects such requests, §5.7.1):
    /// the cache cannot tell what it means for reuse (§5.4.2).
    UnknownUnsafeOption(u16),
    /// An OSCORE request (RFC 8613): protected end to end for one client, so its answer is
    /// never another's. Its Partial IV already makes each key unique (§4.1.3.3); bypassing
    /// says so outright, and keeps such requests out of Observe fan-out too.
    Protected,
}

/// Which block of a representation a request asks for: Block2's NUM and SZX (RFC 7959 §2.2).
/// M is meaningless in a request, so not part of it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub(crate) struct BlockRef {
    /// NUM: the block's index at this size.
    pub num: u32,
    /// SZX: the size exponent, 2^(SZX+4) bytes.
    pub szx: u8,
}

/// The cache key of a request (RFC 7252 §5.6 item 2): its resource, method, other key
/// options and, for FETCH, its payload. Block2 travels beside it as a [`BlockRef`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct CacheKey {
    bytes: Box<[u8]>,
    /// `bytes[..resource_len]` is the [`Resource`].
    resource_len: usize,
}

/// A target resource: target plus Uri-Host, Uri-Port, Uri-Path and Uri-Query, what an unsafe
/// request's success invalidates (RFC 7252 §5.6, §5.9.1.1/2/4; RFC 8132 §3).
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct Resource(Box<[u8]>);

/// Ends a list of options.
const END: u8 = 0;
/// Starts one option: its number and its value follow.
const OPTION: u8 = 1;

/// The options naming the resource, in the order they are written.
const RESOURCE_OPTIONS: [u16; 4] = [
    option::URI_HOST,
    option::URI_PORT,
    option::URI_PATH,
    option::URI_QUERY,
];

/// Options left out of the key although they are not NoCacheKey: the cache interprets ETag
/// (§5.4.2 Note), Observe is not part of the key (RFC 7641 §2), Block2 is the [`BlockRef`],
/// Hop-Limit is hop-by-hop (RFC 8768 §3), Echo and Request-Tag (RFC 9175 §2.2.1, §3.3), and
/// the engine consumes Proxy-Uri and Proxy-Scheme into the target (RFC 7252 §5.7.2).
const NOT_IN_KEY: [u16; 7] = [
    option::ETAG,
    option::OBSERVE,
    option::BLOCK2,
    option::HOP_LIMIT,
    option::REQUEST_TAG,
    option::PROXY_URI,
    option::PROXY_SCHEME,
];

/// Whether option `number` goes in the key after the resource.
fn in_key_after_resource(number: u16) -> bool {
    !option::is_no_cache_key(number)
        && !NOT_IN_KEY.contains(&number)
        && !RESOURCE_OPTIONS.contains(&number)
}

/// Appends `n` in LEB128: 7 bits a byte, low first, high bit set on all but the last.
fn push_len(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push((n & 0x7f) as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Appends a length-prefixed byte string.
fn push_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    push_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

/// Appends one tagged option.
fn push_option(out: &mut Vec<u8>, number: u16, value: &[u8]) {
    out.push(OPTION);
    push_len(out, usize::from(number));
    push_bytes(out, value);
}

/// Appends a resource: the target, then the options `rename` maps to a Uri-* number (it
/// leaves the others out), so a Location-* resource encodes like a request for it.
fn push_resource<'a>(
    out: &mut Vec<u8>,
    target: &[u8],
    uri: impl Iterator<Item = (u16, &'a [u8])>,
    rename: impl Fn(u16) -> Option<u16>,
) {
    push_bytes(out, target);
    for (number, value) in uri {
        if let Some(number) = rename(number) {
            push_option(out, number, value);
        }
    }
    out.push(END);
}

/// The Uri-* options of a request name themselves.
fn uri_option(number: u16) -> Option<u16> {
    RESOURCE_OPTIONS.contains(&number).then_some(number)
}

/// Checks that `request` may be answered from the cache, and gives its Block2, if any.
fn servable(request: &Message) -> Result<Option<BlockRef>, Bypass> {
    let method = request.code();
    if method != Code::GET && method != Code::FETCH {
        return Err(Bypass::Method(method));
    }
    let mut block2 = None;
    for (number, value) in request.options() {
        match number {
            option::NO_RESPONSE => return Err(Bypass::NoResponse),
            option::OSCORE => return Err(Bypass::Protected),
            option::IF_MATCH | option::IF_NONE_MATCH => return Err(Bypass::Conditional),
            option::BLOCK1 | option::Q_BLOCK1 | option::Q_BLOCK2 => {
                return Err(Bypass::BlockTransfer(number))
            }
            option::BLOCK2 if block2.is_some() => return Err(Bypass::InvalidBlock2),
            option::BLOCK2 => {
                let block = BlockValue::decode(value).map_err(|_| Bypass::InvalidBlock2)?;
                let (num, szx) = (block.num, block.szx);
                block2 = Some(BlockRef { num, szx });
            }
            n if option::is_unsafe(n) && !option::is_known(n) => {
                return Err(Bypass::UnknownUnsafeOption(n))
            }
            _ => {}
        }
    }
    Ok(block2)
}

impl CacheKey {
    /// The key of `request` towards `target` (forward mode: the canonical `coap://host:port`;
    /// reverse mode: the upstream's id), and the block it asks for; or why the cache must
    /// stay out of it. The same request always gives the same key (RFC 7252 §5.6).
    pub(crate) fn for_request(
        target: &[u8],
        request: &Message,
    ) -> Result<(CacheKey, Option<BlockRef>), Bypass> {
        let block2 = servable(request)?;
        let mut bytes = Vec::with_capacity(target.len() + 64);
        push_resource(&mut bytes, target, request.options(), uri_option);
        let resource_len = bytes.len();
        bytes.push(request.code().0);
        for (number, value) in request.options() {
            if in_key_after_resource(number) {
                push_option(&mut bytes, number, value);
            }
        }
        bytes.push(END);
        if request.code() == Code::FETCH {
            // The body selects what FETCH returns, so it is part of the key (RFC 8132 §2).
            push_bytes(&mut bytes, request.payload());
        }
        let bytes = bytes.into_boxed_slice();
        Ok((
            CacheKey {
                bytes,
                resource_len,
            },
            block2,
        ))
    }

    /// The canonical bytes.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The canonical bytes of the resource the key belongs to.
    pub(crate) fn resource_bytes(&self) -> &[u8] {
        self.bytes.get(..self.resource_len).unwrap_or_default()
    }
}

impl Resource {
    /// The resource `request` targets: invalidated after a successful PUT, POST, DELETE,
    /// PATCH or iPATCH to it (RFC 7252 §5.9.1.2, §5.9.1.4; RFC 8132 §3).
    pub(crate) fn of_request(target: &[u8], request: &Message) -> Resource {
        let mut bytes = Vec::with_capacity(target.len() + 32);
        push_resource(&mut bytes, target, request.options(), uri_option);
        Resource(bytes.into_boxed_slice())
    }

    /// The resource a response's Location-Path and Location-Query name, on the host and port
    /// of its request; `None` without Location-* options. A 2.01 invalidates it too (RFC 7252
    /// §5.9.1.1, §5.10.7; RFC 8132 §3).
    pub(crate) fn of_location(
        target: &[u8],
        request: &Message,
        response: &Message,
    ) -> Option<Resource> {
        let is_location = |n| n == option::LOCATION_PATH || n == option::LOCATION_QUERY;
        if !response.options().any(|(n, _)| is_location(n)) {
            return None;
        }
        // Location-* give path and query; host and port stay the request's (§5.10.7).
        let rename = |n| match n {
            option::URI_HOST | option::URI_PORT => Some(n),
            option::LOCATION_PATH => Some(option::URI_PATH),
            option::LOCATION_QUERY => Some(option::URI_QUERY),
            _ => None,
        };
        let authority = request
            .options()
            .filter(|&(n, _)| n < option::LOCATION_PATH);
        let mut bytes = Vec::with_capacity(target.len() + 32);
        let location = response.options().filter(|&(n, _)| is_location(n));
        push_resource(&mut bytes, target, authority.chain(location), rename);
        Some(Resource(bytes.into_boxed_slice()))
    }

    /// The canonical bytes.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}
