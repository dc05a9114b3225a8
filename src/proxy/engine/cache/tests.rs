//! The cache's rules, one test each, in virtual time (RFC sections in the module docs).

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::coap::option::{self, decode_uint, encode_uint, BlockValue};
use crate::coap::{MessageBuilder, MessageType};

const TARGET: &[u8] = b"coap://[::1]:5683";
type Opt<'a> = (u16, &'a [u8]);

/// Encodes a message with MID 7 and token "tok".
fn message(code: Code, options: &[Opt], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, MessageType::Con, code, 7, b"tok");
    options.iter().for_each(|&(n, v)| _ = b.option(n, v));
    b.payload(payload);
    b.finish().expect("test messages encode");
    out
}

fn parse(bytes: &[u8]) -> Message<'_> {
    Message::parse(bytes).expect("test messages parse")
}

/// A GET of /a/b with `extra` options.
fn get(extra: &[Opt]) -> Vec<u8> {
    let path: [Opt; 2] = [(option::URI_PATH, b"a"), (option::URI_PATH, b"b")];
    message(Code::GET, &[&path[..], extra].concat(), &[])
}

fn key_of(request: &[u8]) -> (CacheKey, Option<BlockRef>) {
    CacheKey::for_request(TARGET, &parse(request)).expect("cacheable request")
}

fn key_bytes(request: &[u8]) -> Vec<u8> {
    key_of(request).0.as_bytes().to_vec()
}

/// A 2.05 with optional Max-Age and ETag.
fn content(max_age: Option<u32>, etag: Option<&[u8]>, payload: &[u8]) -> Vec<u8> {
    let age = max_age.map(encode_uint);
    let mut opts: Vec<Opt> = Vec::new();
    opts.extend(etag.map(|e| (option::ETAG, e)));
    opts.extend(age.as_deref().map(|a| (option::MAX_AGE, a)));
    message(Code::CONTENT, &opts, payload)
}

fn at(secs: f64) -> Timestamp {
    Timestamp::ZERO + Duration::from_secs_f64(secs)
}

fn cache() -> ResponseCache {
    ResponseCache::new(1 << 20, [1, 2])
}

/// A cache holding `response` for the GET of /a/b, stored at 0 s.
fn cache_with(response: &[u8]) -> (ResponseCache, CacheKey) {
    let (mut cache, (key, block)) = (cache(), key_of(&get(&[])));
    assert_eq!(cache.store(at(0.0), &key, block, &parse(response)), Ok(()));
    (cache, key)
}

/// What a lookup found, owned: the Max-Age left and payload of a hit.
#[derive(PartialEq, Eq, Debug)]
enum Found {
    Fresh(u32, Vec<u8>),
    Stale(Vec<u8>),
    Miss,
}

fn lookup(cache: &mut ResponseCache, now: Timestamp, key: &CacheKey) -> Found {
    found(cache.lookup(now, key, None))
}

fn found(lookup: Lookup) -> Found {
    match lookup {
        Lookup::Fresh(hit) => {
            let mut out = Vec::new();
            hit.encode(&mut out, MessageType::Ack, 1, b"t").unwrap();
            Found::Fresh(hit.max_age_left(), parse(&out).payload().to_vec())
        }
        Lookup::Stale { etag, .. } => Found::Stale(etag.as_bytes().to_vec()),
        Lookup::Miss => Found::Miss,
    }
}

fn fresh(max_age_left: u32, payload: &[u8]) -> Found {
    Found::Fresh(max_age_left, payload.to_vec())
}

// --- The key (RFC 7252 §5.4.2, §5.6; RFC 8132 §2) ---

#[test]
fn only_get_and_fetch_are_served_from_cache() {
    for method in [
        Code::POST,
        Code::PUT,
        Code::DELETE,
        Code::PATCH,
        Code::IPATCH,
    ] {
        let bytes = message(method, &[], &[]);
        let got = CacheKey::for_request(TARGET, &parse(&bytes)).map(|_| ());
        assert_eq!(got, Err(Bypass::Method(method)));
    }
    let fetch = message(Code::FETCH, &[(option::CONTENT_FORMAT, &[60])], b"q");
    assert!(CacheKey::for_request(TARGET, &parse(&fetch)).is_ok());
}

#[test]
fn no_response_conditional_block1_and_unknown_unsafe_requests_bypass_the_cache() {
    let cases: [(Opt, Bypass); 8] = [
        ((option::NO_RESPONSE, &[26]), Bypass::NoResponse),
        ((option::IF_MATCH, b"x"), Bypass::Conditional),
        ((option::IF_NONE_MATCH, b""), Bypass::Conditional),
        (
            (option::BLOCK1, &[0x08]),
            Bypass::BlockTransfer(option::BLOCK1),
        ),
        (
            (option::Q_BLOCK2, &[]),
            Bypass::BlockTransfer(option::Q_BLOCK2),
        ),
        ((option::BLOCK2, &[0x07]), Bypass::InvalidBlock2),
        ((66, b"?"), Bypass::UnknownUnsafeOption(66)),
        ((option::OSCORE, &[0x09, 0x01]), Bypass::Protected),
    ];
    for (opt, why) in cases {
        let bytes = get(&[opt]);
        let got = CacheKey::for_request(TARGET, &parse(&bytes)).map(|_| ());
        assert_eq!(got, Err(why), "{opt:?}");
    }
    let twice = get(&[(option::BLOCK2, &[0x06]), (option::BLOCK2, &[0x16])]);
    let got = CacheKey::for_request(TARGET, &parse(&twice)).map(|_| ());
    assert_eq!(got, Err(Bypass::InvalidBlock2));
}

#[test]
fn key_leaves_out_token_etag_observe_hop_limit_echo_request_tag_sizes_and_proxy_uri() {
    let plain = key_bytes(&get(&[]));
    let left_out: [Opt; 9] = [
        (option::ETAG, b"e"),
        (option::OBSERVE, &[]),
        (option::HOP_LIMIT, &[16]),
        (option::SIZE2, &[]),
        (option::PROXY_URI, b"coap://x/a/b"),
        (option::PROXY_SCHEME, b"coap"),
        (option::SIZE1, &[5]),
        (option::ECHO, b"echo"),
        (option::REQUEST_TAG, b"rt"),
    ];
    for opt in left_out {
        assert_eq!(key_bytes(&get(&[opt])), plain, "{opt:?}");
    }
    let mut other_token = get(&[]);
    other_token[4] = b'X';
    assert_eq!(key_bytes(&other_token), plain);
}

#[test]
fn key_differs_by_target_method_uri_options_accept_and_unknown_safe_options() {
    let plain = key_bytes(&get(&[]));
    let other_target = CacheKey::for_request(b"coap://h:1", &parse(&get(&[]))).unwrap();
    assert_ne!(other_target.0.as_bytes(), &plain[..]);
    let fetch = message(
        Code::FETCH,
        &[(option::URI_PATH, b"a"), (option::URI_PATH, b"b")],
        &[],
    );
    assert_ne!(key_bytes(&fetch), plain);
    let kept: [Opt; 5] = [
        (option::URI_HOST, b"h"),
        (option::URI_PORT, &[1]),
        (option::URI_QUERY, b"q=1"),
        (option::ACCEPT, &[50]),
        (64, b"unknown safe"),
    ];
    for opt in kept {
        assert_ne!(key_bytes(&get(&[opt])), plain, "{opt:?}");
    }
}

#[test]
fn repeated_uri_path_keeps_its_order_in_the_key() {
    let ab = message(
        Code::GET,
        &[(option::URI_PATH, b"a"), (option::URI_PATH, b"b")],
        &[],
    );
    let ba = message(
        Code::GET,
        &[(option::URI_PATH, b"b"), (option::URI_PATH, b"a")],
        &[],
    );
    let joined = message(Code::GET, &[(option::URI_PATH, b"ab")], &[]);
    assert_ne!(key_bytes(&ab), key_bytes(&ba));
    assert_ne!(key_bytes(&ab), key_bytes(&joined));
}

#[test]
fn fetch_payload_and_content_format_are_part_of_the_key() {
    let fetch = |cf: &[u8], body: &[u8]| {
        let req = message(Code::FETCH, &[(option::CONTENT_FORMAT, cf)], body);
        key_bytes(&req)
    };
    assert_eq!(fetch(&[60], b"x"), fetch(&[60], b"x"));
    assert_ne!(fetch(&[60], b"x"), fetch(&[60], b"y"));
    assert_ne!(fetch(&[60], b"x"), fetch(&[50], b"x"));
}

#[test]
fn resource_is_shared_by_every_variant_of_a_uri() {
    let resource = Resource::of_request(TARGET, &parse(&get(&[])));
    let accept = get(&[(option::ACCEPT, &[50])]);
    assert_eq!(key_of(&accept).0.resource_bytes(), resource.as_bytes());
    let put = message(
        Code::PUT,
        &[(option::URI_PATH, b"a"), (option::URI_PATH, b"b")],
        b"v",
    );
    assert_eq!(Resource::of_request(TARGET, &parse(&put)), resource);
    let query = get(&[(option::URI_QUERY, b"q")]);
    assert_ne!(key_of(&query).0.resource_bytes(), resource.as_bytes());
}

#[test]
fn location_resource_is_the_resource_a_get_of_it_names() {
    let post = message(
        Code::POST,
        &[(option::URI_HOST, b"h"), (option::URI_PATH, b"a")],
        b"",
    );
    let locations: [Opt; 3] = [
        (option::LOCATION_PATH, b"a"),
        (option::LOCATION_PATH, b"7"),
        (option::LOCATION_QUERY, b"v=1"),
    ];
    let created = message(Code::CREATED, &locations, &[]);
    let location = Resource::of_location(TARGET, &parse(&post), &parse(&created)).unwrap();
    let get_it = message(
        Code::GET,
        &[
            (option::URI_HOST, b"h"),
            (option::URI_PATH, b"a"),
            (option::URI_PATH, b"7"),
            (option::URI_QUERY, b"v=1"),
        ],
        &[],
    );
    assert_eq!(key_of(&get_it).0.resource_bytes(), location.as_bytes());
    let plain = message(Code::CREATED, &[], &[]);
    assert_eq!(
        Resource::of_location(TARGET, &parse(&post), &parse(&plain)),
        None
    );
}

// --- What is stored (RFC 7252 §5.6, §5.9, §5.10.5) ---

#[test]
fn content_is_stored_and_served_fresh_with_its_options() {
    let (mut cache, key) = cache_with(&content(Some(30), Some(b"v1"), b"22.5"));
    assert_eq!(lookup(&mut cache, at(1.0), &key), fresh(29, b"22.5"));
    assert_eq!(
        (
            cache.entries(),
            cache.counters().hits,
            cache.counters().stored
        ),
        (1, 1, 1)
    );
}

#[test]
fn max_age_is_reduced_by_age_on_a_hit() {
    let (mut cache, key) = cache_with(&content(Some(60), None, b"x"));
    assert_eq!(lookup(&mut cache, at(20.0), &key), fresh(40, b"x"));
    // Rounded down: 39.5 s left is sent as 39.
    assert_eq!(lookup(&mut cache, at(20.5), &key), fresh(39, b"x"));
    assert_eq!(lookup(&mut cache, at(59.9), &key), fresh(0, b"x"));
    assert_eq!(lookup(&mut cache, at(60.0), &key), Found::Miss);
}

#[test]
fn max_age_defaults_to_60_seconds() {
    let (mut cache, key) = cache_with(&content(None, None, b"x"));
    assert_eq!(lookup(&mut cache, at(0.0), &key), fresh(60, b"x"));
    assert_eq!(lookup(&mut cache, at(59.999), &key), fresh(0, b"x"));
    assert_eq!(lookup(&mut cache, at(60.0), &key), Found::Miss);
}

#[test]
fn max_age_0_is_not_stored() {
    let (mut cache, (key, _)) = (cache(), key_of(&get(&[])));
    let got = cache.store(at(0.0), &key, None, &parse(&content(Some(0), None, b"x")));
    assert_eq!(
        (got, cache.entries(), cache.bytes()),
        (Err(NotStored::MaxAgeZero), 0, 0)
    );
}

#[test]
fn only_content_of_the_success_codes_is_stored() {
    let (mut cache, (key, _)) = (cache(), key_of(&get(&[])));
    let codes = [
        Code::CREATED,
        Code::DELETED,
        Code::VALID,
        Code::CHANGED,
        Code::CONTINUE,
    ];
    for code in codes.into_iter().chain([Code::new(2, 6), Code::new(2, 30)]) {
        let got = cache.store(at(0.0), &key, None, &parse(&message(code, &[], b"")));
        assert_eq!(got, Err(NotStored::Code(code)));
    }
    assert_eq!(cache.entries(), 0);
}

#[test]
fn errors_are_stored_by_max_age_and_cannot_be_validated() {
    let etag: Opt = (option::ETAG, b"e");
    for code in [Code::NOT_FOUND, Code::BAD_REQUEST, Code::NOT_IMPLEMENTED] {
        let (mut cache, key) = cache_with(&message(code, &[etag, (option::MAX_AGE, &[10])], b""));
        let mut out = Vec::new();
        let Lookup::Fresh(hit) = cache.lookup(at(1.0), &key, None) else {
            panic!("{code} not stored");
        };
        assert_eq!(
            (hit.code(), hit.max_age_left(), hit.etag()),
            (code, 9, None)
        );
        hit.encode(&mut out, MessageType::Ack, 1, b"t").unwrap();
        assert_eq!(
            lookup(&mut cache, at(10.0), &key),
            Found::Miss,
            "no ETag to validate"
        );
        assert_eq!((cache.entries(), cache.counters().expired), (0, 1));
    }
}

#[test]
fn transient_and_requester_specific_errors_are_not_stored() {
    let (mut cache, (key, _)) = (cache(), key_of(&get(&[])));
    let codes = [
        Code::UNAUTHORIZED,
        Code::REQUEST_ENTITY_INCOMPLETE,
        Code::PRECONDITION_FAILED,
        Code::TOO_MANY_REQUESTS,
        Code::INTERNAL_SERVER_ERROR,
        Code::BAD_GATEWAY,
        Code::SERVICE_UNAVAILABLE,
        Code::GATEWAY_TIMEOUT,
        Code::HOP_LIMIT_REACHED,
    ];
    for code in codes {
        let got = cache.store(at(0.0), &key, None, &parse(&message(code, &[], b"")));
        assert_eq!(got, Err(NotStored::Code(code)));
    }
}

#[test]
fn response_with_an_unknown_unsafe_option_is_not_stored() {
    let (mut cache, (key, _)) = (cache(), key_of(&get(&[])));
    let bytes = message(Code::CONTENT, &[(66, b"?")], b"x");
    let got = cache.store(at(0.0), &key, None, &parse(&bytes));
    assert_eq!(got, Err(NotStored::UnknownUnsafeOption(66)));
    let safe = message(Code::CONTENT, &[(64, b"?")], b"x");
    assert_eq!(cache.store(at(0.0), &key, None, &parse(&safe)), Ok(()));
    // OSCORE is safe to forward, but protected for one client: never stored.
    let protected = message(Code::CONTENT, &[(option::OSCORE, &[])], b"x");
    let got = cache.store(at(0.0), &key, None, &parse(&protected));
    assert_eq!(got, Err(NotStored::Protected));
}

#[test]
fn repeated_or_malformed_max_age_and_etag_are_not_stored() {
    let (mut cache, (key, _)) = (cache(), key_of(&get(&[])));
    let cases: [(&[Opt], NotStored); 4] = [
        (
            &[(option::MAX_AGE, &[1]), (option::MAX_AGE, &[2])],
            NotStored::InvalidMaxAge,
        ),
        (
            &[(option::MAX_AGE, &[1, 2, 3, 4, 5])],
            NotStored::InvalidMaxAge,
        ),
        (
            &[(option::ETAG, b"a"), (option::ETAG, b"b")],
            NotStored::InvalidEtag,
        ),
        (&[(option::ETAG, b"123456789")], NotStored::InvalidEtag),
    ];
    for (opts, why) in cases {
        let got = cache.store(
            at(0.0),
            &key,
            None,
            &parse(&message(Code::CONTENT, opts, b"")),
        );
        assert_eq!(got, Err(why), "{opts:?}");
    }
}

#[test]
fn hit_is_encoded_with_the_clients_token_the_proxys_mid_and_no_observe() {
    let opts: [Opt; 5] = [
        (option::ETAG, b"v1"),
        (option::OBSERVE, &[9]),
        (option::CONTENT_FORMAT, &[50]),
        (option::MAX_AGE, &[100]),
        (option::ECHO, b"for-the-proxy"),
    ];
    let (mut cache, key) = cache_with(&message(Code::CONTENT, &opts, b"{}"));
    let Lookup::Fresh(hit) = cache.lookup(at(10.0), &key, None) else {
        panic!("not fresh");
    };
    let mut out = Vec::new();
    hit.encode(&mut out, MessageType::Ack, 0xbeef, b"client")
        .unwrap();
    let answer = parse(&out);
    let header = (
        answer.msg_type(),
        answer.message_id(),
        answer.token(),
        answer.code(),
    );
    assert_eq!(
        header,
        (MessageType::Ack, 0xbeef, &b"client"[..], Code::CONTENT)
    );
    let got: Vec<Opt> = answer.options().collect();
    let want: [Opt; 3] = [
        (option::ETAG, b"v1"),
        (option::CONTENT_FORMAT, &[50]),
        (14, &[90]),
    ];
    assert_eq!((got, answer.payload()), (want.to_vec(), &b"{}"[..]));
}

#[test]
fn a_newer_response_replaces_the_stored_one_and_an_uncacheable_one_removes_it() {
    let (mut cache, key) = cache_with(&content(Some(60), None, b"old"));
    let new = content(Some(60), None, b"new");
    assert_eq!(cache.store(at(5.0), &key, None, &parse(&new)), Ok(()));
    assert_eq!(lookup(&mut cache, at(5.0), &key), fresh(60, b"new"));
    let gone = message(Code::SERVICE_UNAVAILABLE, &[], b"");
    assert!(cache.store(at(6.0), &key, None, &parse(&gone)).is_err());
    assert_eq!(
        (lookup(&mut cache, at(6.0), &key), cache.bytes()),
        (Found::Miss, 0)
    );
}

// --- Validation (RFC 7252 §5.6.2, §5.9.1.3, §5.10.6) ---

fn valid(etag: &[u8], extra: &[Opt]) -> Vec<u8> {
    message(
        Code::VALID,
        &[&[(option::ETAG, etag)][..], extra].concat(),
        &[],
    )
}

#[test]
fn stale_entry_with_an_etag_is_offered_for_revalidation() {
    let (mut cache, key) = cache_with(&content(Some(10), Some(b"v1"), b"x"));
    assert_eq!(
        lookup(&mut cache, at(10.0), &key),
        Found::Stale(b"v1".to_vec())
    );
    assert_eq!((cache.entries(), cache.counters().revalidations), (1, 1));
}

#[test]
fn stale_entry_without_an_etag_is_dropped_on_lookup() {
    let (mut cache, key) = cache_with(&content(Some(10), None, b"x"));
    assert_eq!(lookup(&mut cache, at(10.0), &key), Found::Miss);
    let c = cache.counters();
    assert_eq!(
        (cache.entries(), cache.bytes(), c.expired, c.misses),
        (0, 0, 1, 1)
    );
}

#[test]
fn valid_refreshes_max_age_and_replaces_each_safe_option_type_it_carries() {
    let opts: [Opt; 4] = [
        (option::ETAG, b"v1"),
        (option::CONTENT_FORMAT, &[50]),
        (option::MAX_AGE, &[10]),
        (64, b"old"),
    ];
    let (mut cache, key) = cache_with(&message(Code::CONTENT, &opts, b"x"));
    let v = valid(
        b"v1",
        &[(option::MAX_AGE, &[30]), (64, b"new1"), (64, b"new2")],
    );
    assert!(cache
        .revalidated(at(15.0), &key, None, &parse(&v))
        .is_some());
    let Lookup::Fresh(hit) = cache.lookup(at(20.0), &key, None) else {
        panic!("not refreshed");
    };
    let mut out = Vec::new();
    hit.encode(&mut out, MessageType::Ack, 1, b"").unwrap();
    let got: Vec<Opt> = parse(&out).options().collect();
    let want: [Opt; 5] = [
        (option::ETAG, b"v1"),
        (option::CONTENT_FORMAT, &[50]),
        (option::MAX_AGE, &[25]),
        (64, b"new1"),
        (64, b"new2"),
    ];
    assert_eq!(got, want);
    assert_eq!(cache.counters().revalidated, 1);
}

#[test]
fn valid_without_max_age_refreshes_for_60_seconds() {
    let (mut cache, key) = cache_with(&content(Some(5), Some(b"v1"), b"x"));
    assert!(cache
        .revalidated(at(100.0), &key, None, &parse(&valid(b"v1", &[])))
        .is_some());
    assert_eq!(lookup(&mut cache, at(100.0), &key), fresh(60, b"x"));
}

#[test]
fn valid_with_max_age_0_answers_the_request_that_revalidated_and_stays_stale() {
    let (mut cache, key) = cache_with(&content(Some(5), Some(b"v1"), b"x"));
    let v = valid(b"v1", &[(option::MAX_AGE, &[])]);
    let hit = cache
        .revalidated(at(10.0), &key, None, &parse(&v))
        .map(|h| h.max_age_left());
    assert_eq!(hit, Some(0));
    assert_eq!(
        lookup(&mut cache, at(10.0), &key),
        Found::Stale(b"v1".to_vec())
    );
}

#[test]
fn valid_naming_another_etag_refreshes_nothing() {
    let (mut cache, key) = cache_with(&content(Some(5), Some(b"v1"), b"x"));
    assert!(cache
        .revalidated(at(6.0), &key, None, &parse(&valid(b"v2", &[])))
        .is_none());
    let no_etag = message(Code::VALID, &[], &[]);
    assert!(cache
        .revalidated(at(6.0), &key, None, &parse(&no_etag))
        .is_none());
    let not_valid = content(None, Some(b"v1"), b"");
    assert!(cache
        .revalidated(at(6.0), &key, None, &parse(&not_valid))
        .is_none());
    assert_eq!(
        lookup(&mut cache, at(6.0), &key),
        Found::Stale(b"v1".to_vec())
    );
}

#[test]
fn client_etag_matching_the_fresh_entry_gets_valid_from_the_cache() {
    let (mut cache, key) = cache_with(&content(Some(60), Some(b"v2"), b"x"));
    let request = get(&[(option::ETAG, b"v1"), (option::ETAG, b"v2")]);
    let Lookup::Fresh(hit) = cache.lookup(at(10.0), &key, None) else {
        panic!("not fresh");
    };
    assert!(hit.client_etag_matches(&parse(&request)));
    assert!(!hit.client_etag_matches(&parse(&get(&[(option::ETAG, b"v1")]))));
    assert!(!hit.client_etag_matches(&parse(&get(&[]))));
    let mut out = Vec::new();
    hit.encode_valid(&mut out, MessageType::Ack, 3, b"c")
        .unwrap();
    let answer = parse(&out);
    let got: Vec<Opt> = answer.options().collect();
    assert_eq!(
        (answer.code(), answer.token(), answer.payload()),
        (Code::VALID, &b"c"[..], &[][..])
    );
    assert_eq!(
        got,
        [(option::ETAG, &b"v2"[..]), (option::MAX_AGE, &[50][..])]
    );
}

mod properties;
mod stale_blocks_memory;
