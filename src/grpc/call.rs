//! Header lists of a unary gRPC call on the server side (doc/PROTOCOL-HTTP2.md): checking the
//! request headers, and building response headers, trailers, Trailers-Only errors and HTTP 415.
//!
//! Answers are lists of HPACK [`Header`]s, the one owned header type; the connection
//! HPACK-encodes them. `grpc-encoding: identity` is never sent: it is the default, and sending
//! it broke grpc-java against the C++ reference.

use std::time::Duration;

use super::status::{encode_message, Code, Status};
use super::timeout::parse_timeout;
use crate::http2::hpack::Header;

const CONTENT_TYPE_GRPC: &[u8] = b"application/grpc";

/// What a request's headers ask for, once they are acceptable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHead {
    /// The fully-qualified service name, e.g. `grpc.testing.ReconnectService`.
    pub service: String,
    /// The method name, e.g. `Start`.
    pub method: String,
    /// From `grpc-timeout`: the server should cancel the call this long after the headers.
    pub timeout: Option<Duration>,
    /// A `grpc-encoding` other than `identity`: compressed messages may follow.
    pub encoding: Option<Vec<u8>>,
}

/// The verdict on a request's headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestCheck {
    /// A gRPC call: route it by service and method.
    Accept(RequestHead),
    /// Answer with these headers, END_STREAM set, and do not process the call.
    Reject(Vec<Header>),
}

/// Checks a request's decoded header list (pseudo-headers included) the way a gRPC server must:
/// `:method` POST; `content-type` `application/grpc` optionally followed by `+format` or
/// `;params` (else HTTP 415); `:path` of the form `/service/method` (else UNIMPLEMENTED); a
/// well-formed `grpc-timeout` if present (else INTERNAL). `te: trailers` is tolerated, never
/// required: some clients omit it.
pub fn check_request<'a, I>(headers: I) -> RequestCheck
where
    I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
{
    let fields = RequestFields::collect(headers);
    if !fields.content_type.is_some_and(is_grpc_content_type) {
        return RequestCheck::Reject(unsupported_media_type(fields.content_type));
    }
    if fields.method != Some(b"POST") {
        return reject(Code::Internal, "gRPC requires the POST method");
    }
    let Some((service, method)) = fields.path.and_then(split_path) else {
        return reject(Code::Unimplemented, "malformed method name");
    };
    let timeout = match fields.timeout.map(parse_timeout).transpose() {
        Ok(timeout) => timeout,
        Err(_) => return reject(Code::Internal, "malformed grpc-timeout"),
    };
    RequestCheck::Accept(RequestHead {
        service,
        method,
        timeout,
        encoding: fields.encoding.map(<[u8]>::to_vec),
    })
}

/// The request headers [`check_request`] looks at; later duplicates are ignored.
#[derive(Default)]
struct RequestFields<'a> {
    method: Option<&'a [u8]>,
    path: Option<&'a [u8]>,
    content_type: Option<&'a [u8]>,
    timeout: Option<&'a [u8]>,
    encoding: Option<&'a [u8]>,
}

impl<'a> RequestFields<'a> {
    fn collect<I: IntoIterator<Item = (&'a [u8], &'a [u8])>>(headers: I) -> Self {
        let mut f = RequestFields::default();
        for (name, value) in headers {
            let slot = match name {
                b":method" => &mut f.method,
                b":path" => &mut f.path,
                b"content-type" => &mut f.content_type,
                b"grpc-timeout" => &mut f.timeout,
                b"grpc-encoding" if value != b"identity" => &mut f.encoding,
                _ => continue,
            };
            slot.get_or_insert(value);
        }
        f
    }
}

/// `application/grpc`, `application/grpc+proto`, `application/grpc;charset=...`, but not
/// `application/grpcfoo` or `application/json`.
pub fn is_grpc_content_type(value: &[u8]) -> bool {
    match value.strip_prefix(CONTENT_TYPE_GRPC) {
        Some(rest) => matches!(rest.first(), None | Some(b'+' | b';')),
        None => false,
    }
}

/// Splits `/package.Service/Method` into its two non-empty UTF-8 parts.
fn split_path(path: &[u8]) -> Option<(String, String)> {
    let path = std::str::from_utf8(path).ok()?.strip_prefix('/')?;
    let (service, method) = path.split_once('/')?;
    if service.is_empty() || method.is_empty() || method.contains('/') {
        return None;
    }
    Some((service.to_owned(), method.to_owned()))
}

fn reject(code: Code, message: &str) -> RequestCheck {
    RequestCheck::Reject(trailers_only(&Status::new(code, message)))
}

/// The HEADERS that open a successful response, before its DATA.
pub fn response_headers() -> Vec<Header> {
    vec![
        Header::new(b":status", b"200"),
        Header::new(b"content-type", CONTENT_TYPE_GRPC),
    ]
}

/// The trailing HEADERS (END_STREAM) that close a response: `grpc-status`, and `grpc-message`
/// percent-encoded when there is one.
pub fn trailers(status: &Status) -> Vec<Header> {
    let code = status.code.value().to_string();
    let mut headers = vec![Header::new(b"grpc-status", code)];
    if !status.message.is_empty() {
        headers.push(Header::new(
            b"grpc-message",
            encode_message(&status.message),
        ));
    }
    headers
}

/// A Trailers-Only response: one HEADERS frame (END_STREAM) carrying both the HTTP status and the
/// gRPC status, for a call that fails before sending any message.
pub fn trailers_only(status: &Status) -> Vec<Header> {
    let mut headers = response_headers();
    headers.extend(trailers(status));
    headers
}

/// HTTP 415 for a request that is not gRPC, so plain HTTP clients do not read a 200 as success.
/// gRPC-aware clients also get a status (INTERNAL, like a 400-class mapping would suggest) with
/// the offending content-type in the message.
pub fn unsupported_media_type(content_type: Option<&[u8]>) -> Vec<Header> {
    let shown = content_type.map_or("none".into(), String::from_utf8_lossy);
    let status = Status::new(
        Code::Internal,
        format!("invalid gRPC request content-type {shown:?}"),
    );
    let mut headers = vec![
        Header::new(b":status", b"415"),
        Header::new(b"content-type", CONTENT_TYPE_GRPC),
    ];
    headers.extend(trailers(&status));
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: &[(&[u8], &[u8])] = &[
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/grpc.testing.ReconnectService/Start"),
        (b":authority", b"localhost:8080"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
        (b"grpc-accept-encoding", b"identity, deflate, gzip"),
    ];

    fn check(headers: &[(&'static [u8], &'static [u8])]) -> RequestCheck {
        check_request(headers.iter().copied())
    }

    fn with(name: &'static [u8], value: &'static [u8]) -> Vec<(&'static [u8], &'static [u8])> {
        let mut headers: Vec<_> = START.iter().copied().filter(|h| h.0 != name).collect();
        headers.push((name, value));
        headers
    }

    fn without(name: &[u8]) -> Vec<(&'static [u8], &'static [u8])> {
        START.iter().copied().filter(|h| h.0 != name).collect()
    }

    fn rejected_status(check: RequestCheck) -> (Vec<u8>, Vec<u8>) {
        let RequestCheck::Reject(headers) = check else {
            panic!("accepted");
        };
        let get = |n: &[u8]| headers.iter().find(|h| h.name == n).unwrap().value.clone();
        (get(b":status"), get(b"grpc-status"))
    }

    #[test]
    fn a_grpc_request_is_accepted_and_split() {
        let RequestCheck::Accept(head) = check(START) else {
            panic!("rejected");
        };
        assert_eq!(head.service, "grpc.testing.ReconnectService");
        assert_eq!(head.method, "Start");
        assert_eq!(head.timeout, None);
        assert_eq!(head.encoding, None);
    }

    #[test]
    fn te_trailers_is_not_required() {
        assert!(matches!(check(&without(b"te")), RequestCheck::Accept(_)));
    }

    #[test]
    fn grpc_content_type_variants_are_accepted() {
        for ct in [
            &b"application/grpc"[..],
            b"application/grpc+proto",
            b"application/grpc+json",
            b"application/grpc;charset=utf-8",
        ] {
            assert!(is_grpc_content_type(ct), "{ct:?}");
        }
        for ct in [
            &b"application/grpcx"[..],
            b"application/json",
            b"",
            b"text/grpc",
        ] {
            assert!(!is_grpc_content_type(ct), "{ct:?}");
        }
    }

    #[test]
    fn non_grpc_content_type_is_http_415() {
        let (http, grpc) = rejected_status(check(&with(b"content-type", b"application/json")));
        assert_eq!(http, b"415");
        assert_eq!(grpc, b"13");
        assert_eq!(rejected_status(check(&without(b"content-type"))).0, b"415");
    }

    #[test]
    fn non_post_method_is_rejected() {
        let (http, grpc) = rejected_status(check(&with(b":method", b"GET")));
        assert_eq!(
            (http.as_slice(), grpc.as_slice()),
            (&b"200"[..], &b"13"[..])
        );
    }

    #[test]
    fn malformed_paths_are_unimplemented() {
        for path in [
            &b"/"[..],
            b"/svc",
            b"/svc/",
            b"//m",
            b"svc/m",
            b"/a/b/c",
            b"/\xff/m",
        ] {
            let (_, grpc) = rejected_status(check(&with(b":path", path)));
            assert_eq!(grpc, b"12", "{path:?}");
        }
        assert_eq!(rejected_status(check(&without(b":path"))).1, b"12");
    }

    #[test]
    fn grpc_timeout_is_parsed_or_rejected() {
        let RequestCheck::Accept(head) = check(&with(b"grpc-timeout", b"1500m")) else {
            panic!("rejected");
        };
        assert_eq!(head.timeout, Some(Duration::from_millis(1500)));
        let (_, grpc) = rejected_status(check(&with(b"grpc-timeout", b"123456789S")));
        assert_eq!(grpc, b"13");
    }

    #[test]
    fn identity_encoding_is_no_encoding() {
        let RequestCheck::Accept(head) = check(&with(b"grpc-encoding", b"identity")) else {
            panic!("rejected");
        };
        assert_eq!(head.encoding, None);
        let RequestCheck::Accept(head) = check(&with(b"grpc-encoding", b"gzip")) else {
            panic!("rejected");
        };
        assert_eq!(head.encoding.as_deref(), Some(&b"gzip"[..]));
    }

    #[test]
    fn response_headers_never_name_an_encoding() {
        let all = [
            response_headers(),
            trailers(&Status::ok()),
            trailers_only(&Status::new(Code::Unavailable, "x")),
            unsupported_media_type(None),
        ];
        for headers in all {
            assert!(headers.iter().all(|h| h.name != b"grpc-encoding"));
        }
    }

    #[test]
    fn ok_trailers_carry_only_grpc_status() {
        assert_eq!(trailers(&Status::ok()), [Header::new(b"grpc-status", b"0")]);
    }

    #[test]
    fn trailers_only_has_status_content_type_and_encoded_message() {
        let headers = trailers_only(&Status::new(Code::Unavailable, "shutting down 100%"));
        assert_eq!(
            headers,
            [
                Header::new(b":status", b"200"),
                Header::new(b"content-type", b"application/grpc"),
                Header::new(b"grpc-status", b"14"),
                Header::new(b"grpc-message", b"shutting down 100%25"),
            ]
        );
    }
}
