//! The HTTP-to-CoAP cross-proxy (RFC 8075; issue 15): HTTP/1.1 requests in, CoAP requests
//! through the proxy engine out, and their answers back as HTTP responses.
//!
//! Sans-IO like the rest: [`uri`] maps an HTTP request target to a CoAP target (RFC 8075 §5),
//! [`mapping`] maps media types, status codes and header fields (RFC 8075 §6-§7, RFC 7252
//! §10.2).

pub mod mapping;
pub mod uri;
