//! An HTTP request as the CoAP request it becomes (RFC 7252 §10.2, RFC 8075 §5-§6): the
//! method, the target's options, and the header fields that have a CoAP option.

use crate::coap::option::{
    encode_uint, ACCEPT, CONTENT_FORMAT, ETAG, IF_MATCH, IF_NONE_MATCH, PROXY_URI, URI_PATH,
    URI_QUERY,
};
use crate::coap::Code;
use crate::http1::Request;

use super::mapping::{self, EntityTags};
use super::uri::{self, CoapTarget, Mapping, UriError};

/// What the HTTP client asked for, beyond the CoAP request itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One request, one answer.
    Plain,
    /// HEAD: a GET whose body is measured, not sent (RFC 7252 §10.2.3).
    Head,
    /// `Accept: text/event-stream` on a GET: an Observe registration whose notifications
    /// become Server-Sent Events (RFC 7641 §3.1).
    Events,
}

/// The CoAP request an HTTP request becomes; block options are added per block.
#[derive(Debug)]
pub struct CoapRequest {
    /// The CoAP method (HEAD is a GET).
    pub method: Code,
    /// Target and header options, in no particular order (the builder sorts them).
    pub options: Vec<(u16, Vec<u8>)>,
    /// The whole request body; sent in Block1 blocks when it does not fit one request.
    pub body: Vec<u8>,
    /// Plain, HEAD, or an event stream.
    pub kind: Kind,
    /// The HTTP request was conditional (If-None-Match mapped to ETags), so a 2.03 is a 304
    /// (RFC 8075 §7 note 3).
    pub conditional: bool,
    /// What a Location goes under: the HC prefix and the target's authority in forward
    /// mode (`/hc/coap://host:port/...`), `None` in reverse mode (`/...`).
    pub location_root: Option<(String, String)>,
}

/// An HTTP request the cross-proxy answers itself, with this status and a short text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status.
    pub status: u16,
    /// The body's one line.
    pub text: &'static str,
}

const fn refuse(status: u16, text: &'static str) -> Refusal {
    Refusal { status, text }
}

/// Translates `req`. The target follows `mapping` (RFC 8075 §5); the header fields RFC 7252
/// §10.2 and RFC 8075 §6.
pub fn translate(req: &Request, mapping: &Mapping<'_>) -> Result<CoapRequest, Refusal> {
    let (method, mut kind) = method(&req.method)?;
    let (mut options, location_root) = target_options(&req.target, mapping)?;
    if kind == Kind::Plain && method == Code::GET && accepts_events(req) {
        kind = Kind::Events;
    } else if let Some(cf) = req.field("accept").and_then(|a| mapping::coap_accept(&a)) {
        options.push((ACCEPT, encode_uint(u32::from(cf)).to_vec()));
    }
    if let Some(content_type) = req.field("content-type") {
        let cf = mapping::content_format(&content_type)
            .ok_or(refuse(415, "no CoAP Content-Format for this Content-Type"))?;
        options.push((CONTENT_FORMAT, encode_uint(u32::from(cf)).to_vec()));
    }
    if let Some(tags) = req.field("if-match") {
        if_match(&tags, &mut options)?;
    }
    let conditional = match req.field("if-none-match") {
        Some(tags) => if_none_match(&tags, method, &mut options)?,
        None => false,
    };
    Ok(CoapRequest {
        method,
        options,
        body: req.body.clone(),
        kind,
        conditional,
        location_root,
    })
}

/// RFC 7252 §10.2.1-§10.2.6 and RFC 8132: the methods CoAP has; the rest is 501.
fn method(name: &str) -> Result<(Code, Kind), Refusal> {
    let code = match name {
        "GET" => Code::GET,
        "HEAD" => return Ok((Code::GET, Kind::Head)),
        "POST" => Code::POST,
        "PUT" => Code::PUT,
        "DELETE" => Code::DELETE,
        "PATCH" => Code::PATCH,
        "FETCH" => Code::FETCH,
        _ => return Err(refuse(501, "CoAP has no such method")),
    };
    Ok((code, Kind::Plain))
}

fn accepts_events(req: &Request) -> bool {
    req.field("accept")
        .is_some_and(|a| mapping::wants_event_stream(&a))
}

/// The target's options and the root a Location is written under.
fn target_options(target: &str, mapping: &Mapping<'_>) -> Result<TargetOptions, Refusal> {
    let target = uri::coap_target(target, mapping).map_err(|e: UriError| Refusal {
        status: e.http_status(),
        text: e.text(),
    })?;
    match target {
        CoapTarget::Forward { proxy_uri } => {
            let root = mapping
                .prefix()
                .map(|prefix| (prefix.to_string(), authority(&proxy_uri).to_string()));
            Ok((vec![(PROXY_URI, proxy_uri.into_bytes())], root))
        }
        CoapTarget::Reverse { path, query } => {
            let path = path.into_iter().map(|s| (URI_PATH, s));
            let query = query.into_iter().map(|q| (URI_QUERY, q));
            Ok((path.chain(query).collect(), None))
        }
    }
}

type TargetOptions = (Vec<(u16, Vec<u8>)>, Option<(String, String)>);

/// `host[:port]` of a `coap://host[:port]/...` URI.
fn authority(uri: &str) -> &str {
    let rest = uri.split_once("://").map_or(uri, |(_, rest)| rest);
    rest.split(['/', '?']).next().unwrap_or(rest)
}

/// If-Match (RFC 9110 §13.1.1, RFC 7252 §5.10.8.1): `*` is an empty If-Match ("exists");
/// tags are ours (hex of the CoAP ETag), compared strongly. None usable cannot match: 412
/// at once, nothing forwarded.
fn if_match(tags: &[u8], options: &mut Vec<(u16, Vec<u8>)>) -> Result<(), Refusal> {
    match mapping::coap_etags(tags) {
        Ok(EntityTags::Any) => options.push((IF_MATCH, Vec::new())),
        Ok(tags) => {
            let before = options.len();
            options.extend(tags.if_match_etags().map(|t| (IF_MATCH, t.to_vec())));
            if options.len() == before {
                return Err(refuse(412, "no entity-tag of this proxy in If-Match"));
            }
        }
        Err(_) => return Err(refuse(400, "malformed If-Match")),
    }
    Ok(())
}

/// If-None-Match (RFC 9110 §13.1.2): `*` is CoAP's If-None-Match ("create only",
/// RFC 7252 §5.10.8.2). On GET and FETCH, tags become ETag options, a validation request
/// whose 2.03 is a 304 (RFC 7252 §5.10.6.2, RFC 8075 §7 note 3); tags we never gave are
/// left out, and with none left the request is unconditional. On other methods CoAP has
/// no such precondition: 501, rather than dropping it.
fn if_none_match(
    tags: &[u8],
    method: Code,
    options: &mut Vec<(u16, Vec<u8>)>,
) -> Result<bool, Refusal> {
    match mapping::coap_etags(tags) {
        Ok(EntityTags::Any) => options.push((IF_NONE_MATCH, Vec::new())),
        Ok(tags) if matches!(method, Code::GET | Code::FETCH) => {
            let before = options.len();
            options.extend(tags.if_none_match_etags().map(|t| (ETAG, t.to_vec())));
            return Ok(options.len() > before);
        }
        Ok(_) => {
            return Err(refuse(
                501,
                "If-None-Match with entity-tags has no CoAP form here",
            ))
        }
        Err(_) => return Err(refuse(400, "malformed If-None-Match")),
    }
    Ok(false)
}
