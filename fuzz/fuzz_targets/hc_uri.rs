//! Arbitrary bytes through the cross-proxy's pure mappings (src/hc): the request target under
//! every mapping, and the same bytes as a Content-Type, Accept, If-Match and Location options.
//! Nothing panics, and what comes out keeps the rules:
//! - a forward target is a Proxy-Uri of at most 1034 bytes that the proxy engine decomposes,
//!   and mapping it again gives it back unchanged (the normalisation is idempotent);
//! - reverse options are at most 255 bytes each;
//! - parsed entity-tags are 1..=8 byte ETags that print back to the same tag;
//! - a media type found maps back to its Content-Format.
#![no_main]

use backoffd::hc::mapping::{self, EntityTags, LocationBase};
use backoffd::hc::uri::{coap_target, CoapTarget, Mapping, DEFAULT_PREFIX, MAX_PROXY_URI};
use backoffd::proxy::route::parse_proxy_uri;
use libfuzzer_sys::fuzz_target;

const MAPPINGS: [Mapping; 4] = [
    Mapping::Forward {
        prefix: DEFAULT_PREFIX,
    },
    Mapping::Reverse,
    Mapping::Both {
        prefix: DEFAULT_PREFIX,
    },
    Mapping::Both { prefix: "/" },
];

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        for mapping in &MAPPINGS {
            check_target(text, mapping);
        }
        check_target(&format!("{DEFAULT_PREFIX}{text}"), &MAPPINGS[0]);
    }
    check_headers(data);
    check_location(data);
});

fn check_target(target: &str, mapping: &Mapping) {
    match coap_target(target, mapping) {
        Ok(CoapTarget::Forward { proxy_uri }) => {
            assert!(proxy_uri.len() <= MAX_PROXY_URI && proxy_uri.is_ascii());
            assert!(parse_proxy_uri(proxy_uri.as_bytes()).is_ok(), "{proxy_uri}");
            let again = coap_target(&format!("{DEFAULT_PREFIX}{proxy_uri}"), &MAPPINGS[0]);
            assert_eq!(again, Ok(CoapTarget::Forward { proxy_uri }), "idempotent");
        }
        Ok(CoapTarget::Reverse { path, query }) => {
            assert!(path.iter().chain(&query).all(|v| v.len() <= 255));
        }
        Err(e) => assert!(matches!(e.http_status(), 400 | 404 | 414 | 501)),
    }
}

fn check_headers(data: &[u8]) {
    if let Some(cf) = mapping::content_format(data) {
        let mt = mapping::media_type(cf).expect("a format found has a media type");
        assert_eq!(mapping::content_format(mt.as_bytes()), Some(cf));
    }
    if let Some(cf) = mapping::coap_accept(data) {
        assert!(mapping::media_type(cf).is_some());
    }
    let _ = mapping::wants_event_stream(data);
    if let Ok(EntityTags::Tags { etags, .. }) = mapping::coap_etags(data) {
        for etag in etags {
            let tag = mapping::http_etag(&etag.value).expect("1..=8 bytes");
            let back = mapping::coap_etags(tag.as_bytes()).expect("our tag parses");
            assert!(back.if_match_etags().eq([etag.value.as_slice()]));
        }
    }
    if let [a, b, ..] = *data {
        let cf = u16::from_be_bytes([a, b]);
        if let Some(mt) = mapping::media_type(cf) {
            let coding = mapping::content_encoding(cf).map(str::as_bytes);
            assert_eq!(
                mapping::content_format_with_encoding(mt.as_bytes(), coding),
                Some(cf)
            );
        }
    }
}

/// The bytes as Location-Path segments up to the first `?` byte, then Location-Query
/// arguments, split at `&`.
fn check_location(data: &[u8]) {
    let (path, query) = match data.iter().position(|&b| b == b'?') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let base = LocationBase::Forward {
        prefix: DEFAULT_PREFIX,
        authority: "[::1]:5683",
    };
    let segments = path.split(|&b| b == b'/');
    if let Some(loc) = mapping::location(&base, segments, query.split(|&b| b == b'&')) {
        assert!(
            loc.is_ascii() && !loc.contains(['[', ']', '#', ' ']),
            "{loc}"
        );
    }
}
