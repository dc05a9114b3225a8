//! What a forwarded exchange does with the response cache once answered (`caching.rs`
//! decides it when the request comes, and applies it when the answer does). Apart, so that
//! an exchange can carry it without knowing the cache's engine side.

use crate::coap::option::ETAG;
use crate::coap::Message;

use super::cache::{BlockRef, CacheKey, CachedResponse, Etag, Resource};

/// What a forwarded exchange does with the cache once answered (`Exchange::cache`, boxed:
/// most exchanges have none).
#[derive(Debug)]
pub(super) enum CacheUse {
    /// A miss: the answer is stored under `key`, if it may be (`cache/entry.rs`).
    Store(Keyed),
    /// A stale entry is revalidated: the request went with its `etag` (§5.6.2). A 2.03
    /// naming it refreshes the entry, and the client gets the stored response, or the 2.03
    /// if it sent that ETag itself (`client_has_it`, §5.10.6.2).
    Revalidate {
        keyed: Keyed,
        etag: Etag,
        client_has_it: bool,
        /// The stale response, for a 2.03 that comes back after its entry went.
        stale: CachedResponse,
    },
    /// An unsafe request: success makes `resource` stale; a 2.01 also the resource its
    /// Location options name, on the request's authority (§5.9.1.1, §5.10.7).
    Invalidate {
        target: [u8; 2],
        resource: Resource,
        /// A message with only the request's Uri-Host and Uri-Port, for the Location's.
        authority: Box<[u8]>,
    },
}

/// A request's cache key and the block it asks for.
#[derive(Debug)]
pub(super) struct Keyed {
    pub(super) key: CacheKey,
    pub(super) block2: Option<BlockRef>,
}

impl CacheUse {
    /// The key a registration's answer is stored under: its group's, once it observes.
    pub(super) fn stored_key(&self) -> Option<CacheKey> {
        match self {
            CacheUse::Store(Keyed { key, block2: None }) => Some(key.clone()),
            _ => None,
        }
    }

    /// The ETag a revalidation adds to the request upstream (none if the client's has it).
    pub(super) fn etag_to_add(&self) -> Option<Etag> {
        match self {
            CacheUse::Revalidate {
                etag,
                client_has_it: false,
                ..
            } => Some(*etag),
            _ => None,
        }
    }
}

/// Whether `request` carries `etag` among its ETag options.
pub(super) fn carries_etag(request: &Message, etag: Etag) -> bool {
    request
        .options()
        .any(|(n, v)| n == ETAG && v == etag.as_bytes())
}
