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
    /// What a Location goes under: the HC prefix and target authority in forward mode
    /// (`/hc/coap://host:port`), nothing in reverse mode.
    pub location_base: String,
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
    let (mut options, location_base) = target_options(&req.target, mapping)?;
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
        location_base,
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

/// The target's options and the base a Location is written under.
fn target_options(
    target: &str,
    mapping: &Mapping<'_>,
) -> Result<(Vec<(u16, Vec<u8>)>, String), Refusal> {
    match uri::coap_target(target, mapping).map_err(uri_refusal)? {
        CoapTarget::Forward { proxy_uri } => {
            let base = location_base(mapping, &proxy_uri);
            Ok((vec![(PROXY_URI, proxy_uri.into_bytes())], base))
        }
        CoapTarget::Reverse { path, query } => {
            let path = path.into_iter().map(|s| (URI_PATH, s));
            let query = query.into_iter().map(|q| (URI_QUERY, q));
            Ok((path.chain(query).collect(), String::new()))
        }
    }
}

/// `/hc/coap://host:port`: the scheme and authority of `proxy_uri` under the HC prefix.
fn location_base(mapping: &Mapping<'_>, proxy_uri: &str) -> String {
    let after_scheme = proxy_uri.find("://").map_or(0, |i| i + 3);
    let authority_end = proxy_uri[after_scheme..]
        .find(['/', '?'])
        .map_or(proxy_uri.len(), |i| after_scheme + i);
    format!("{}{}", mapping.prefix(), &proxy_uri[..authority_end])
}

fn uri_refusal(e: UriError) -> Refusal {
    match e.status() {
        404 => refuse(404, "no CoAP target is mapped at this path"),
        414 => refuse(414, "the CoAP target URI is too long"),
        _ => refuse(400, "malformed CoAP target URI"),
    }
}

/// If-Match (RFC 9110 §13.1.1, RFC 7252 §5.10.8.1): `*` is an empty If-Match ("exists"),
/// tags are ours (hex of the CoAP ETag). A tag we never gave cannot match: 412 at once.
fn if_match(tags: &[u8], options: &mut Vec<(u16, Vec<u8>)>) -> Result<(), Refusal> {
    match mapping::coap_etags(tags) {
        Ok(EntityTags::Any) => options.push((IF_MATCH, Vec::new())),
        Ok(EntityTags::Tags(tags)) if !tags.is_empty() => {
            options.extend(tags.into_iter().map(|t| (IF_MATCH, t)));
        }
        Ok(EntityTags::Tags(_)) => return Err(refuse(412, "no entity-tag of this proxy")),
        Err(_) => return Err(refuse(400, "malformed If-Match")),
    }
    Ok(())
}

/// If-None-Match (RFC 9110 §13.1.2): `*` is CoAP's If-None-Match ("create only",
/// RFC 7252 §5.10.8.2); on GET, tags become ETag options, a validation request whose 2.03
/// is a 304 (RFC 7252 §5.10.6.2, RFC 8075 §7 note 3). Tags we never gave, or tags on other
/// methods, have no CoAP form and are left out: the request is then unconditional.
fn if_none_match(
    tags: &[u8],
    method: Code,
    options: &mut Vec<(u16, Vec<u8>)>,
) -> Result<bool, Refusal> {
    match mapping::coap_etags(tags) {
        Ok(EntityTags::Any) => options.push((IF_NONE_MATCH, Vec::new())),
        Ok(EntityTags::Tags(tags)) if method == Code::GET && !tags.is_empty() => {
            options.extend(tags.into_iter().map(|t| (ETAG, t)));
            return Ok(true);
        }
        Ok(EntityTags::Tags(_)) => {}
        Err(_) => return Err(refuse(400, "malformed If-None-Match")),
    }
    Ok(false)
}
