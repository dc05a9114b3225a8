//! A CoAP response as the HTTP answer it becomes (RFC 8075 §6-§7, RFC 7252 §10.2): status,
//! header fields from options, and the body reassembled from its blocks.

use crate::coap::option::{
    decode_uint, CONTENT_FORMAT, ETAG, LOCATION_PATH, LOCATION_QUERY, MAX_AGE,
};
use crate::coap::{Code, Message};
use crate::http1::Http1Connection;

use super::mapping::{self, LocationBase};
use super::request::{CoapRequest, Refusal};

/// What the driver writes to an HTTP connection for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpAnswer {
    /// A whole answer. An empty `content_type` writes no Content-Type.
    Full {
        /// The HTTP status (RFC 8075 §7).
        status: u16,
        /// Fields besides Content-Type and the framing ones, which the connection writes.
        fields: Vec<(&'static str, String)>,
        /// The body's media type (RFC 8075 §6.1).
        content_type: String,
        /// For HEAD too: the connection measures it and sends none (RFC 9110 §9.3.2).
        body: Vec<u8>,
    },
    /// The head of an event stream (`text/event-stream`, chunked).
    StreamStart {
        /// Fields besides Content-Type and the framing ones.
        fields: Vec<(&'static str, String)>,
    },
    /// One or more encoded events.
    StreamData(Vec<u8>),
    /// The stream is over: the next pipelined answer may follow.
    StreamEnd,
}

impl HttpAnswer {
    /// Writes the answer to its HTTP connection (an event stream's head says `no-cache`:
    /// each event is news, HTML Living Standard §9.2.5).
    pub fn write(self, http: &mut Http1Connection) {
        match self {
            HttpAnswer::Full {
                status,
                fields,
                content_type,
                body,
            } => _ = http.respond_with(status, &borrowed(&fields), &content_type, &body),
            HttpAnswer::StreamStart { fields } => {
                let mut fields = borrowed(&fields);
                fields.push(("Cache-Control", "no-cache"));
                http.start_stream(200, &fields, "text/event-stream");
            }
            HttpAnswer::StreamData(data) => _ = http.stream_data(&data),
            HttpAnswer::StreamEnd => _ = http.end_stream(),
        }
    }

    /// The cross-proxy's own answer: a short text body (the issue's "errors the proxy makes
    /// itself get a short text body").
    pub fn refusal(r: Refusal, fields: Vec<(&'static str, String)>) -> Self {
        HttpAnswer::Full {
            status: r.status,
            fields,
            content_type: "text/plain; charset=utf-8".into(),
            body: format!("{}\n", r.text).into_bytes(),
        }
    }
}

/// The answer to `req` from its final CoAP response `msg`, whose whole payload (all its
/// blocks) is `body`. `extra` are fields every answer gets (CORS).
pub fn http_answer(
    req: &CoapRequest,
    msg: &Message<'_>,
    body: Vec<u8>,
    extra: &[(&'static str, String)],
) -> HttpAnswer {
    let code = msg.code();
    let status = mapping::http_status(code, !body.is_empty(), req.conditional);
    let mut fields = extra.to_vec();
    fields.extend(response_fields(req, msg, status));
    let body = match status {
        204 | 304 => Vec::new(),
        _ => body,
    };
    let content_type = match body.is_empty() {
        true => String::new(),
        false => content_type(msg),
    };
    HttpAnswer::Full {
        status,
        fields,
        content_type,
        body,
    }
}

/// The Content-Type of a response payload (RFC 8075 §6.1, §6.2). An error's payload without
/// a Content-Format is a diagnostic message, UTF-8 text (RFC 7252 §5.5.2), which RFC 8075
/// §6.5.3 copies into the body: text/plain.
pub fn content_type(msg: &Message<'_>) -> String {
    let cf = msg
        .option(CONTENT_FORMAT)
        .and_then(|v| decode_uint(v).ok())
        .and_then(|v| u16::try_from(v).ok());
    match cf {
        None if msg.code().class() >= 4 => "text/plain; charset=utf-8".into(),
        _ => mapping::response_content_type(cf).into_owned(),
    }
}

/// ETag, freshness and Location (RFC 7252 §10.2.2, §10.2.4; RFC 8075 §7 note 8).
fn response_fields(
    req: &CoapRequest,
    msg: &Message<'_>,
    status: u16,
) -> Vec<(&'static str, String)> {
    let mut fields = Vec::new();
    if let Some(etag) = msg.option(ETAG).and_then(mapping::http_etag) {
        fields.push(("ETag", etag));
    }
    let max_age = msg.option(MAX_AGE).and_then(|v| decode_uint(v).ok());
    if matches!(msg.code(), Code::CONTENT | Code::VALID) {
        // The Max-Age the engine relays is what is left of it (its cache ages it, §5.7.1).
        fields.push(("Cache-Control", mapping::cache_control(max_age)));
    }
    if let Some(seconds) = mapping::retry_after(msg.code(), max_age) {
        fields.push(("Retry-After", seconds.to_string()));
    }
    let path = values(msg, LOCATION_PATH);
    let query = values(msg, LOCATION_QUERY);
    if (!path.is_empty() || !query.is_empty()) && status < 400 {
        let base = match &req.location_root {
            Some((prefix, authority)) => LocationBase::Forward { prefix, authority },
            None => LocationBase::Reverse,
        };
        if let Some(location) = mapping::location(&base, path, query) {
            fields.push(("Location", location));
        }
    }
    fields
}

fn borrowed<'f>(fields: &'f [(&'static str, String)]) -> Vec<(&'static str, &'f str)> {
    fields.iter().map(|(n, v)| (*n, v.as_str())).collect()
}

fn values<'m>(msg: &Message<'m>, number: u16) -> Vec<&'m [u8]> {
    msg.options()
        .filter(|&(n, _)| n == number)
        .map(|(_, v)| v)
        .collect()
}
