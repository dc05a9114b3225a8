//! STUB (replaced by the hc-map branch).
#![allow(dead_code, unused_variables)]
use std::borrow::Cow;
use crate::coap::Code;
pub enum EntityTags { Any, Tags(Vec<Vec<u8>>) }
pub struct HeaderError;
pub fn media_type(cf: u16) -> Option<&'static str> { match cf { 0 => Some("text/plain; charset=utf-8"), 50 => Some("application/json"), 40 => Some("application/link-format"), 42 => Some("application/octet-stream"), _ => None } }
pub fn content_format(ct: &[u8]) -> Option<u16> { let s = std::str::from_utf8(ct).ok()?.split(';').next()?.trim().to_ascii_lowercase(); match s.as_str() { "text/plain" => Some(0), "application/json" => Some(50), "application/octet-stream" => Some(42), _ => None } }
pub fn response_content_type(cf: Option<u16>) -> Cow<'static, str> { Cow::Borrowed(cf.and_then(media_type).unwrap_or("application/octet-stream")) }
pub fn coap_accept(a: &[u8]) -> Option<u16> { content_format(a) }
pub fn wants_event_stream(a: &[u8]) -> bool { a.windows(17).any(|w| w == b"text/event-stream") }
pub fn http_status(code: Code, has_payload: bool, conditional: bool) -> u16 { match code { Code::CREATED => 201, Code::DELETED | Code::CHANGED => if has_payload {200} else {204}, Code::VALID => if conditional {304} else {200}, Code::CONTENT => 200, Code::NOT_FOUND => 404, Code::FORBIDDEN => 403, Code::REQUEST_ENTITY_TOO_LARGE => 413, Code::BAD_GATEWAY | Code::PROXYING_NOT_SUPPORTED => 502, Code::SERVICE_UNAVAILABLE => 503, Code::GATEWAY_TIMEOUT => 504, c if c.class() == 4 => 400, c if c.class() == 2 => 200, _ => 500 } }
pub fn http_etag(e: &[u8]) -> String { format!("\"{}\"", e.iter().map(|b| format!("{b:02x}")).collect::<String>()) }
pub fn coap_etags(v: &[u8]) -> Result<EntityTags, HeaderError> { if v == b"*" { return Ok(EntityTags::Any) } Ok(EntityTags::Tags(Vec::new())) }
pub fn cache_control(m: Option<u32>) -> String { format!("max-age={}", m.unwrap_or(60)) }
pub fn location(base: &str, path: &[&[u8]], query: &[&[u8]]) -> String { let mut s = base.to_string(); for p in path { s.push('/'); s.push_str(&String::from_utf8_lossy(p)); } s }
