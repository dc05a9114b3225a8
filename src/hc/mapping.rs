//! Media types, status codes and header fields between HTTP and CoAP (RFC 8075 §6-§7,
//! RFC 7252 §10.2).
//!
//! Everything that reads HTTP header bytes returns an `Option` or a `Result`, looks at no more
//! than [`MAX_LIST_ELEMENTS`] list elements or parameters, and runs in time linear in its input.

use std::borrow::Cow;

/// At most this many list elements (Accept, If-Match, If-None-Match) or media type parameters
/// are looked at: enough for any real client, and a bound on work per header.
pub const MAX_LIST_ELEMENTS: usize = 32;

/// Max-Age when the option is absent (RFC 7252 §5.10.5).
pub const DEFAULT_MAX_AGE: u32 = 60;

/// What a response with an unknown or absent Content-Format is labelled (see
/// [`response_content_type`]).
pub const OCTET_STREAM: &str = "application/octet-stream";

/// The CoAP Content-Formats registry entries with a media type and identity coding (RFC 7252
/// §12.3), as `(id, media type with parameters)`.
///
/// Checked against RFC text: 0, 40-42, 47, 50 (RFC 7252 §12.3); 16-18, 96-98, 101, 102 (RFC
/// 8152 §16.10); 51, 52 (RFC 8132 §6); 60 (RFC 8075 §6.2); 63 (RFC 8742 §6.2); 110-115, 310,
/// 311 (RFC 8428 §12.5); 256 (RFC 8075 Appendix A). Not checked against the defining
/// documents: the rest, taken from two copies of the IANA registry that agree where they
/// overlap (aiocoap's `numbers/contentformat.py`, RIOT's unicoap header, 2025-26). Entries
/// IANA marks as provisional (293, 294, 836) are left out.
///
/// An entry with parameters comes before the bare entry of the same type, the one with more
/// parameters first: the first match wins (`application/yang-data+cbor; id=sid` is 140, not
/// 340).
const FORMATS: &[(u16, &str)] = &[
    (0, "text/plain; charset=utf-8"),
    (16, "application/cose; cose-type=\"cose-encrypt0\""),
    (17, "application/cose; cose-type=\"cose-mac0\""),
    (18, "application/cose; cose-type=\"cose-sign1\""),
    (19, "application/ace+cbor"),
    (21, "image/gif"),
    (22, "image/jpeg"),
    (23, "image/png"),
    (40, "application/link-format"),
    (41, "application/xml"),
    (42, "application/octet-stream"),
    (47, "application/exi"),
    (50, "application/json"),
    (51, "application/json-patch+json"),
    (52, "application/merge-patch+json"),
    (60, "application/cbor"),
    (61, "application/cwt"),
    (62, "application/multipart-core"),
    (63, "application/cbor-seq"),
    (64, "application/edhoc+cbor-seq"),
    (65, "application/cid-edhoc+cbor-seq"),
    (96, "application/cose; cose-type=\"cose-encrypt\""),
    (97, "application/cose; cose-type=\"cose-mac\""),
    (98, "application/cose; cose-type=\"cose-sign\""),
    (101, "application/cose-key"),
    (102, "application/cose-key-set"),
    (110, "application/senml+json"),
    (111, "application/sensml+json"),
    (112, "application/senml+cbor"),
    (113, "application/sensml+cbor"),
    (114, "application/senml-exi"),
    (115, "application/sensml-exi"),
    (140, "application/yang-data+cbor; id=sid"),
    (341, "application/yang-data+cbor; id=name"),
    (340, "application/yang-data+cbor"),
    (256, "application/coap-group+json"),
    (257, "application/concise-problem-details+cbor"),
    (258, "application/swid+cbor"),
    (259, "application/pkixcmp"),
    (260, "application/yang-sid+json"),
    (261, "application/ace-groupcomm+cbor"),
    (262, "application/ace-trl+cbor"),
    (
        10003,
        "application/eat+cwt; eat_profile=\"tag:psacertified.org,2023:psa#tfm\"",
    ),
    (
        10004,
        "application/eat+cwt; eat_profile=\"tag:psacertified.org,2019:psa#legacy\"",
    ),
    (
        10005,
        "application/eat+cwt; eat_profile=2.16.840.1.113741.1.16.1",
    ),
    (263, "application/eat+cwt"),
    (264, "application/eat+jwt"),
    (265, "application/eat-bun+cbor"),
    (266, "application/eat-bun+json"),
    (267, "application/eat-ucs+cbor"),
    (268, "application/eat-ucs+json"),
    (269, "application/coap-eap"),
    (270, "application/suit-report+cose"),
    (271, "application/dots+cbor"),
    (272, "application/missing-blocks+cbor-seq"),
    (273, "application/cmw+cbor"),
    (274, "application/cmw+json"),
    (275, "application/cmw+cose"),
    (276, "application/cmw+jws"),
    (277, "application/scitt-statement+cose"),
    (278, "application/scitt-receipt+cose"),
    (279, "application/statuslist+cwt"),
    (
        280,
        "application/pkcs7-mime; smime-type=server-generated-key",
    ),
    (281, "application/pkcs7-mime; smime-type=certs-only"),
    (284, "application/pkcs8"),
    (285, "application/csrattrs"),
    (286, "application/pkcs10"),
    (287, "application/pkix-cert"),
    (
        297,
        "application/aif+cbor;toid=oscore-gname;tperm=oscore-gperm",
    ),
    (292, "application/aif+cbor;toid=CRI-local-part"),
    (290, "application/aif+cbor"),
    (
        298,
        "application/aif+json;toid=oscore-gname;tperm=oscore-gperm",
    ),
    (291, "application/aif+json"),
    (295, "application/measured-component+cbor"),
    (296, "application/measured-component+json"),
    (310, "application/senml+xml"),
    (311, "application/sensml+xml"),
    (320, "application/senml-etch+json"),
    (322, "application/senml-etch+cbor"),
    (432, "application/td+json"),
    (433, "application/tm+json"),
    (434, "application/sdf+json"),
    (553, "application/dns-message"),
    (601, "application/uccs+cbor"),
    (10000, "application/vnd.ocf+cbor"),
    (10001, "application/oscore"),
    (10002, "application/javascript"),
    (10006, "application/vnd.oms.cellular-cose-content+cbor"),
    (10007, "application/syslog-msg"),
    (
        10572,
        "application/toc+cbor;profile=2.16.840.1.113741.1.16.1",
    ),
    (10570, "application/toc+cbor"),
    (
        10573,
        "application/ce+cbor;profile=2.16.840.1.113741.1.16.1",
    ),
    (10571, "application/ce+cbor"),
    (11542, "application/vnd.oma.lwm2m+tlv"),
    (11543, "application/vnd.oma.lwm2m+json"),
    (11544, "application/vnd.oma.lwm2m+cbor"),
    (20000, "text/css"),
    (20001, "application/vnd.as207960.vas.config+jer"),
    (20002, "application/vnd.as207960.vas.config+uper"),
    (20003, "application/vnd.as207960.vas.tap+jer"),
    (20004, "application/vnd.as207960.vas.tap+uper"),
    (30000, "image/svg+xml"),
];

/// Registry entries with a content coding other than identity, as `(id, media type, coding)`
/// (from the IANA registry copies above): the HTTP side carries the coding in
/// Content-Encoding.
const ENCODED_FORMATS: &[(u16, &str, &str)] = &[
    (11050, "application/json", "deflate"),
    (11060, "application/cbor", "deflate"),
    (12000, "text/plain; charset=utf-8", "zstd"),
    (12041, "application/xml", "zstd"),
    (12050, "application/json", "zstd"),
];

/// The media type, with its parameters, of a registered Content-Format (RFC 8075 §6.1).
pub fn media_type(cf: u16) -> Option<&'static str> {
    let identity = FORMATS.iter().find(|(id, _)| *id == cf).map(|(_, mt)| *mt);
    identity.or_else(|| ENCODED_FORMATS.iter().find(|e| e.0 == cf).map(|e| e.1))
}

/// The Content-Encoding the HTTP message needs for `cf`; `None` for identity.
pub fn content_encoding(cf: u16) -> Option<&'static str> {
    ENCODED_FORMATS.iter().find(|e| e.0 == cf).map(|e| e.2)
}

/// The Content-Format for an HTTP Content-Type with identity coding (RFC 8075 §6.1); `None`
/// means the request gets 415. See [`content_format_with_encoding`] for the matching rules.
pub fn content_format(content_type: &[u8]) -> Option<u16> {
    content_format_with_encoding(content_type, None)
}

/// The Content-Format for a Content-Type and Content-Encoding pair (RFC 8075 §6.1, §6.4).
///
/// Type and subtype match case-insensitively (RFC 9110 §8.3.1), parameter names too, and
/// parameter values as well (the registry's are lowercase tokens, so nothing collides). The
/// parameters an entry names must be present and equal, except `charset` on `text/plain`:
/// absent, or `us-ascii`, is taken as UTF-8, since text/plain's default charset is US-ASCII
/// (RFC 2046 §4.1.2), a subset of UTF-8. Other parameters are ignored (e.g. the `charset` many
/// clients put on `application/json`, which has none, RFC 8259 §11). A missing or `identity`
/// coding is identity; any coding is case-insensitive (RFC 9110 §8.4.1).
pub fn content_format_with_encoding(
    content_type: &[u8],
    content_encoding: Option<&[u8]>,
) -> Option<u16> {
    let wanted = MediaType::parse(std::str::from_utf8(content_type).ok()?)?;
    let coding = match content_encoding.map(|c| std::str::from_utf8(c).map(str::trim)) {
        None => None,
        Some(Ok(c)) if c.eq_ignore_ascii_case("identity") => None,
        Some(Ok(c)) => Some(c),
        Some(Err(_)) => return None,
    };
    match coding {
        None => FORMATS
            .iter()
            .find(|(_, mt)| wanted.is(mt))
            .map(|(id, _)| *id),
        Some(coding) => ENCODED_FORMATS
            .iter()
            .find(|(_, mt, c)| c.eq_ignore_ascii_case(coding) && wanted.is(mt))
            .map(|(id, _, _)| *id),
    }
}

/// The Content-Type of an HTTP response carrying a CoAP payload.
///
/// A registered Content-Format gives its media type (plus [`content_encoding`], if any). An
/// unknown one, or none at all on a response with a payload, gives `application/octet-stream`,
/// as issue 15 asks: RFC 8075 §6.2 says a proxy SHALL return
/// `application/coap-payload; cf=N` for an unknown one, which keeps the number but is a type
/// no browser or HTTP library knows, while octet-stream is what they all handle as "opaque
/// bytes". (The `Cow` leaves room for that form.) Without a payload, send no Content-Type.
pub fn response_content_type(cf: Option<u16>) -> Cow<'static, str> {
    Cow::Borrowed(cf.and_then(media_type).unwrap_or(OCTET_STREAM))
}

/// Whether a payload of this Content-Format is text a Server-Sent Event can carry as is: a
/// `text/*` type, JSON, XML, link-format or JavaScript, in identity coding. `None` (no
/// Content-Format) is not text.
pub fn is_text(cf: Option<u16>) -> bool {
    let Some(cf) = cf.filter(|&cf| content_encoding(cf).is_none()) else {
        return false;
    };
    let Some(mt) = media_type(cf).and_then(MediaType::parse) else {
        return false;
    };
    const TEXTUAL: [&str; 4] = ["json", "xml", "link-format", "javascript"];
    mt.type_.eq_ignore_ascii_case("text")
        || TEXTUAL.iter().any(|t| mt.subtype.eq_ignore_ascii_case(t))
        || ["+json", "+xml"]
            .iter()
            .any(|s| ends_with_ignore_case(mt.subtype, s))
}

/// The CoAP Accept for an HTTP Accept (RFC 8075 §6.1, RFC 7252 §10.2.2): the most preferred
/// element (highest q-value, RFC 9110 §12.5.1; the first of equals), if it is a registered
/// media type. `q=0` means "not acceptable" and never counts.
///
/// `None`, so no CoAP Accept, when the most preferred element is a range (`*/*`, `type/*`:
/// RFC 8075 §6.1 MUST send no Accept for `*/*`) or maps to no Content-Format (§6.1: ignored).
/// Less preferred elements are not tried instead: a browser's navigation Accept is
/// `text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8`, and asking the
/// device for XML because of it would turn a JSON sensor into a 4.06 and a 406. Malformed
/// elements are skipped; only the first [`MAX_LIST_ELEMENTS`] are looked at.
pub fn coap_accept(accept: &[u8]) -> Option<u16> {
    let best = most_preferred(accept)?;
    if best.type_ == "*" || best.subtype == "*" {
        return None;
    }
    FORMATS
        .iter()
        .find(|(_, mt)| best.is(mt))
        .map(|(id, _)| *id)
}

/// Whether the most preferred element of an HTTP Accept is `text/event-stream`, as an
/// `EventSource` sends it (WHATWG HTML §9.2): the client asks for live updates.
pub fn wants_event_stream(accept: &[u8]) -> bool {
    most_preferred(accept).is_some_and(|mt| {
        mt.type_.eq_ignore_ascii_case("text") && mt.subtype.eq_ignore_ascii_case("event-stream")
    })
}

/// The element of an Accept list with the highest q-value above 0, the first of equals.
fn most_preferred(accept: &[u8]) -> Option<MediaType<'_>> {
    let accept = std::str::from_utf8(accept).ok()?;
    let mut best: Option<(u16, MediaType)> = None;
    for element in split_unquoted(accept, b',').take(MAX_LIST_ELEMENTS) {
        let Some((mt, q)) = MediaType::parse(element).and_then(|mt| Some((mt, mt.weight()?)))
        else {
            continue;
        };
        if q > 0 && best.as_ref().is_none_or(|(best_q, _)| q > *best_q) {
            best = Some((q, mt));
        }
    }
    best.map(|(_, mt)| mt)
}

/// A media type or range, borrowed from a header value (RFC 9110 §8.3.1, §12.5.1).
#[derive(Clone, Copy, Debug)]
struct MediaType<'a> {
    type_: &'a str,
    subtype: &'a str,
    /// What follows the subtype: `;`-separated parameters, checked well-formed.
    parameters: &'a str,
}

impl<'a> MediaType<'a> {
    /// `type "/" subtype *( OWS ";" OWS parameter )`; `None` if malformed or with more than
    /// [`MAX_LIST_ELEMENTS`] parameters.
    fn parse(s: &'a str) -> Option<Self> {
        let (essence, parameters) = s.split_once(';').unwrap_or((s, ""));
        let (type_, subtype) = essence.trim_matches(is_ows).split_once('/')?;
        if !is_token(type_) || !is_token(subtype) {
            return None;
        }
        let mt = MediaType {
            type_,
            subtype,
            parameters,
        };
        let mut count = 0;
        for p in mt.params() {
            p?;
            count += 1;
        }
        (count <= MAX_LIST_ELEMENTS).then_some(mt)
    }

    /// Each parameter as `(name, value)` with quotes removed; `None` for a malformed one.
    /// Empty elements (`;;`) are allowed, as senders produce them.
    fn params(&self) -> impl Iterator<Item = Option<(&'a str, Cow<'a, str>)>> + 'a {
        split_unquoted(self.parameters, b';')
            .map(|p| p.trim_matches(is_ows))
            .filter(|p| !p.is_empty())
            .map(parse_parameter)
    }

    fn param(&self, name: &str) -> Option<Cow<'a, str>> {
        self.params()
            .flatten()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// The q-value in thousandths (RFC 9110 §12.4.2), 1000 when absent; `None` if malformed.
    fn weight(&self) -> Option<u16> {
        self.param("q").map_or(Some(1000), |q| parse_qvalue(&q))
    }

    /// Whether this is the registry entry `entry` (see [`content_format_with_encoding`]).
    fn is(&self, entry: &str) -> bool {
        let Some(entry) = MediaType::parse(entry) else {
            return false;
        };
        let same_type = self.type_.eq_ignore_ascii_case(entry.type_)
            && self.subtype.eq_ignore_ascii_case(entry.subtype);
        same_type
            && entry.params().flatten().all(|(name, value)| {
                let utf8_text = name.eq_ignore_ascii_case("charset") && value == "utf-8";
                match self.param(name) {
                    Some(v) if utf8_text => {
                        v.eq_ignore_ascii_case("utf-8") || v.eq_ignore_ascii_case("us-ascii")
                    }
                    Some(v) => v.eq_ignore_ascii_case(&value),
                    None => utf8_text,
                }
            })
    }
}

/// `token "=" ( token / quoted-string )` (RFC 9110 §5.6.6).
fn parse_parameter(p: &str) -> Option<(&str, Cow<'_, str>)> {
    let (name, value) = p.split_once('=')?;
    let name = name.trim_end_matches(is_ows);
    if !is_token(name) {
        return None;
    }
    let value = value.trim_start_matches(is_ows);
    match value.strip_prefix('"') {
        Some(quoted) => Some((name, unquote(quoted)?)),
        None if is_token(value) => Some((name, Cow::Borrowed(value))),
        None => None,
    }
}

/// The content of a quoted-string whose opening quote is gone: `\x` escapes become `x`, and
/// the closing quote must end the value (RFC 9110 §5.6.4).
fn unquote(s: &str) -> Option<Cow<'_, str>> {
    let inner = s.strip_suffix('"')?;
    if !inner.contains(['\\', '"']) {
        return Some(Cow::Borrowed(inner));
    }
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => return None,
            c => out.push(c),
        }
    }
    Some(Cow::Owned(out))
}

/// `"0" [ "." 0*3DIGIT ] / "1" [ "." 0*3("0") ]`, in thousandths.
fn parse_qvalue(q: &str) -> Option<u16> {
    let (int, frac) = q.split_once('.').unwrap_or((q, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths = frac.bytes().chain(std::iter::repeat(b'0')).take(3);
    let frac = thousandths.fold(0u16, |acc, d| acc * 10 + u16::from(d - b'0'));
    match int {
        "0" => Some(frac),
        "1" if frac == 0 => Some(1000),
        _ => None,
    }
}

/// Splits at `sep` outside quoted strings (RFC 9110 §5.6.4: a quoted `,` or `;` is no
/// separator; `\` escapes the next character inside quotes).
fn split_unquoted(s: &str, sep: u8) -> impl Iterator<Item = &str> {
    let mut rest = Some(s);
    std::iter::from_fn(move || {
        let s = rest?;
        let (mut quoted, mut escaped) = (false, false);
        for (i, b) in s.bytes().enumerate() {
            match (quoted, escaped, b) {
                (true, true, _) => escaped = false,
                (true, false, b'\\') => escaped = true,
                (_, _, b'"') => quoted = !quoted,
                (false, _, b) if b == sep => {
                    rest = Some(&s[i + 1..]);
                    return Some(&s[..i]);
                }
                _ => {}
            }
        }
        rest = None;
        Some(s)
    })
}

/// `1*tchar` (RFC 9110 §5.6.2).
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Optional whitespace: space and tab (RFC 9110 §5.6.3).
fn is_ows(c: char) -> bool {
    c == ' ' || c == '\t'
}

fn ends_with_ignore_case(s: &str, suffix: &str) -> bool {
    s.len() >= suffix.len()
        && s.is_char_boundary(s.len() - suffix.len())
        && s[s.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
}

mod status;
pub use status::{http_status, reason_hint, retry_after};

mod headers;
pub use headers::{
    cache_control, coap_etags, http_etag, location, CoapEtag, EntityTags, HeaderError,
    LocationBase, MAX_ETAG,
};

#[cfg(test)]
mod tests;
