//! The upstream copy of a client request (RFC 7252 §5.7.2, RFC 8768 §3): a pure encoder, so
//! that what the proxy sends upstream can be read, and tested, apart from when it sends it.

use crate::coap::option::{self, encode_uint, HOP_LIMIT, PROXY_SCHEME, PROXY_URI};
use crate::coap::{Message, MessageBuilder, MessageType};

use super::endpoints::UpstreamId;
use super::exchange::CoapToken;
use super::route::{self, Target};

/// Where a request goes, decided before any state is created.
pub(super) struct Route {
    pub(super) upstream: UpstreamId,
    /// Set for a Proxy-Uri request: its decomposition replaces the Uri-* options.
    pub(super) target: Option<Target>,
    pub(super) hop_limit: u8,
}

/// The upstream copy of a client request: our MID and token, Proxy-Uri/Proxy-Scheme replaced
/// by Uri-* options, Hop-Limit decremented (RFC 7252 §5.7.2, RFC 8768 §3). The options the
/// proxy adds (in number order) are merged with the client's (in wire order), so each one is
/// appended, none deferred: the cost is linear in the request's size. Returned unfinished.
pub(super) fn upstream_request<'o>(
    out: &'o mut Vec<u8>,
    msg: &Message,
    (mid, token): (u16, &CoapToken),
    route: &Route,
    etag: Option<&[u8]>,
) -> MessageBuilder<'o> {
    let target = route.target.as_ref();
    let (hop, port) = (
        encode_uint(u32::from(route.hop_limit)),
        encode_uint(u32::from(target.map_or(route::COAP_PORT, |t| t.port))),
    );
    let added = (target.filter(|t| !t.host_is_ip()))
        .map(|t| (option::URI_HOST, t.host.as_bytes()))
        .into_iter()
        .chain(etag.map(|e| (option::ETAG, e)))
        .chain(
            (target.filter(|t| t.port != route::COAP_PORT)).map(|_| (option::URI_PORT, &port[..])),
        )
        .chain(
            target
                .into_iter()
                .flat_map(|t| t.path.iter().map(|p| (option::URI_PATH, &p[..]))),
        )
        .chain(
            target
                .into_iter()
                .flat_map(|t| t.query.iter().map(|q| (option::URI_QUERY, &q[..]))),
        )
        .chain(std::iter::once((HOP_LIMIT, &hop[..])));
    let mut added = added.peekable();
    let replacing_uri = target.is_some();
    let kept = msg.options().filter(|&(n, _)| {
        let uri_option = matches!(
            n,
            option::URI_HOST | option::URI_PORT | option::URI_PATH | option::URI_QUERY
        );
        !(n == PROXY_URI || n == PROXY_SCHEME || n == HOP_LIMIT || (replacing_uri && uri_option))
    });
    let mut b = MessageBuilder::new(out, MessageType::Con, msg.code(), mid, token.as_bytes());
    for (n, v) in kept {
        while let Some((m, w)) = added.next_if(|&(m, _)| m <= n) {
            b.option(m, w);
        }
        b.option(n, v);
    }
    for (m, w) in added {
        b.option(m, w);
    }
    b.payload(msg.payload());
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coap::option::OBSERVE;
    use crate::coap::option::{ACCEPT, BLOCK2, CONTENT_FORMAT, ETAG, SIZE2, URI_PATH, URI_QUERY};
    use crate::coap::Code;

    #[test]
    fn the_upstream_request_is_built_on_the_append_path_with_options_in_order() {
        // The largest forward request the default limits let through: 64 options, most of
        // them the Proxy-Uri's parts, the client's own on either side of the Uri-* the proxy
        // adds. Every option is appended where it belongs (none deferred): the cost is linear
        // (the audit's request put Hop-Limit first, and each Uri-Path was then spliced in).
        let uri = format!("coap://h.example:5690{}?a&b", "/s".repeat(56));
        let client: [(u16, &[u8]); 7] = [
            (ETAG, b"e"),
            (OBSERVE, &[]),
            (CONTENT_FORMAT, &[0]),
            (ACCEPT, &[0]),
            (BLOCK2, &[2]),
            (SIZE2, &[]),
            (PROXY_URI, uri.as_bytes()),
        ];
        let mut req = Vec::new();
        let mut b = MessageBuilder::new(&mut req, MessageType::Con, Code::GET, 1, b"t");
        client.iter().for_each(|&(n, v)| _ = b.option(n, v));
        b.finish().unwrap();
        let msg = Message::parse(&req).unwrap();
        let route = Route {
            upstream: 0,
            target: Some(route::parse_proxy_uri(uri.as_bytes()).unwrap()),
            hop_limit: 15,
        };
        let token = CoapToken::new(&[9; 8]).unwrap();
        let mut out = Vec::new();
        let b = upstream_request(&mut out, &msg, (7, &token), &route, None);
        assert_eq!(b.deferred_options(), 0);
        assert_eq!(b.finish(), Ok(()));
        let numbers: Vec<u16> = Message::parse(&out)
            .unwrap()
            .options()
            .map(|(n, _)| n)
            .collect();
        let mut want = vec![option::URI_HOST, ETAG, OBSERVE, option::URI_PORT];
        want.extend([URI_PATH; 56].into_iter().chain([CONTENT_FORMAT]));
        want.extend([URI_QUERY, URI_QUERY, HOP_LIMIT, ACCEPT, BLOCK2, SIZE2]);
        assert_eq!(numbers, want);
    }
}
