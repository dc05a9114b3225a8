//! CoAP response codes to HTTP status codes (RFC 8075 §7, Table 2 and its notes).

use crate::coap::Code;

/// The codes with one HTTP status whatever the request; 2.02, 2.03 and 2.04 depend on it and
/// are handled in [`http_status`]. Table 2 rows first, then our own choices.
const ONE_STATUS: &[(Code, u16)] = &[
    (Code::CREATED, 201), // note 1: its payload goes into the body
    (Code::CONTENT, 200),
    (Code::BAD_REQUEST, 400),
    (Code::UNAUTHORIZED, 403), // note 5: 401 needs a WWW-Authenticate CoAP cannot supply
    // Note 6: 400 only if the proxy can tell the option came from mapping a header field;
    // ours cannot, so it MUST be 500.
    (Code::BAD_OPTION, 500),
    (Code::FORBIDDEN, 403),
    (Code::NOT_FOUND, 404),
    (Code::METHOD_NOT_ALLOWED, 400), // note 7: 405 needs an Allow list; see reason_hint
    (Code::NOT_ACCEPTABLE, 406),
    (Code::PRECONDITION_FAILED, 412),
    (Code::REQUEST_ENTITY_TOO_LARGE, 413), // note 11: after block-wise retrying failed
    (Code::UNSUPPORTED_CONTENT_FORMAT, 415),
    (Code::INTERNAL_SERVER_ERROR, 500),
    (Code::NOT_IMPLEMENTED, 501),
    (Code::BAD_GATEWAY, 502),
    (Code::SERVICE_UNAVAILABLE, 503), // note 8: see retry_after
    (Code::GATEWAY_TIMEOUT, 504),
    (Code::PROXYING_NOT_SUPPORTED, 502), // note 9
    // Not in Table 2 (RFC 8075 predates them). RFC 8132 §3.4 defines 4.09 Conflict and 4.22
    // Unprocessable Entity, and RFC 8516 §3 4.29 Too Many Requests, after the HTTP codes of
    // the same name and meaning; the HTTP code is the faithful mapping, and 429 lets HTTP
    // clients back off as they already do. This is our choice, not an RFC rule.
    (Code::CONFLICT, 409),
    (Code::UNPROCESSABLE_ENTITY, 422),
    (Code::TOO_MANY_REQUESTS, 429),
    // 5.08 Hop Limit Reached (RFC 8768 §3): a proxy loop, HTTP's 508 Loop Detected (RFC 5842
    // §7.2) in meaning. Our choice.
    (Code::HOP_LIMIT_REACHED, 508),
    // Note 10: 2.31 and 4.08 belong to block-wise transfers between proxy and server and are
    // never turned into an HTTP response. One that gets here anyway is an upstream answer the
    // proxy could not use: 502 (RFC 7252 §10.2), not RFC 7959 §5's 408, which would blame
    // the HTTP client for a transfer it took no part in.
    (Code::CONTINUE, 502),
    (Code::REQUEST_ENTITY_INCOMPLETE, 502),
];

/// The HTTP status for a CoAP response (RFC 8075 §7).
///
/// - 2.02 and 2.04: 200 with a payload, 204 without (note 2).
/// - 2.03: 304 if the HTTP request was conditional (note 3), else 200: the proxy validated
///   its cached copy for an unconditional request and serves that (note 4).
/// - Codes in neither Table 2 nor our choices above go by class: an unrecognised 4.xx or 5.xx
///   is equivalent to 4.00 or 5.00 (RFC 7252 §5.9), so 400 or 500; an unrecognised 2.xx is
///   200 (our choice: a success with whatever payload it has). A code that is no response at
///   all (a request or a reserved class) is an answer the proxy cannot use: 502 (§10.2).
pub fn http_status(code: Code, has_payload: bool, conditional: bool) -> u16 {
    match code {
        Code::DELETED | Code::CHANGED if has_payload => 200,
        Code::DELETED | Code::CHANGED => 204,
        Code::VALID if conditional => 304,
        Code::VALID => 200,
        _ => ONE_STATUS
            .iter()
            .find(|(c, _)| *c == code)
            .map_or_else(|| by_class(code), |(_, status)| *status),
    }
}

fn by_class(code: Code) -> u16 {
    match code.class() {
        2 => 200,
        4 => 400,
        5 => 500,
        _ => 502,
    }
}

/// The start of the reason-phrase RFC 8075 §7 note 7 asks for with a 4.05 mapped to 400, so
/// that a client can tell "method not allowed" from other bad requests. Other codes: none
/// (the standard phrase of the status). A diagnostic payload never goes into the phrase
/// (§6.5.3): it may hold CR-LF.
pub fn reason_hint(code: Code) -> Option<&'static str> {
    (code == Code::METHOD_NOT_ALLOWED).then_some("CoAP server returned 4.05")
}

/// Retry-After seconds for a 5.03 from its Max-Age, if it has one (RFC 8075 §7 note 8); no
/// default 60 here, since a missing Max-Age says nothing about when to retry.
pub fn retry_after(code: Code, max_age: Option<u32>) -> Option<u32> {
    max_age.filter(|_| code == Code::SERVICE_UNAVAILABLE)
}
