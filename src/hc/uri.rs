//! STUB (replaced by the hc-map branch).
#![allow(dead_code, unused_variables)]
pub enum Mapping<'a> { Forward { prefix: &'a str }, Reverse, Both { prefix: &'a str } }
impl Mapping<'_> { pub fn prefix(&self) -> &str { match self { Mapping::Forward{prefix} | Mapping::Both{prefix} => prefix, Mapping::Reverse => "" } } }
pub enum CoapTarget { Forward { proxy_uri: String }, Reverse { path: Vec<Vec<u8>>, query: Vec<Vec<u8>> } }
#[derive(Debug)] pub struct UriError;
impl UriError { pub fn status(&self) -> u16 { 400 } }
pub fn coap_target(t: &str, m: &Mapping) -> Result<CoapTarget, UriError> {
    match m { Mapping::Forward{prefix} | Mapping::Both{prefix} if t.starts_with(prefix) => Ok(CoapTarget::Forward{ proxy_uri: t[prefix.len()..].to_string() }),
      _ => { let (p, q) = t.split_once('?').unwrap_or((t, "")); Ok(CoapTarget::Reverse{ path: p.split('/').filter(|s| !s.is_empty()).map(|s| s.as_bytes().to_vec()).collect(), query: q.split('&').filter(|s| !s.is_empty()).map(|s| s.as_bytes().to_vec()).collect() }) } }
}
