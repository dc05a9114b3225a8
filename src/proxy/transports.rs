//! Where each datagram the engine sends goes: the driver's transports by destination. A
//! client is reached by its peer's kind (a UDP address, an in-process client, a DTLS session,
//! a stream connection), an upstream endpoint by the transport that carries it (its UDP
//! socket, or the coaps or CoAP-over-TCP upstream's sessions and connections).

// I/O module: sends on the proxy's sockets.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::collections::VecDeque;
use std::io;

#[cfg(feature = "dtls")]
use super::dtls_listener::DtlsListener;
#[cfg(feature = "dtls")]
use super::dtls_upstream::DtlsUpstream;
#[cfg(feature = "tcp")]
use super::stream_listener::StreamListener;
#[cfg(feature = "tcp")]
use super::stream_upstream::StreamUpstream;
use super::{Destination, LocalClient, Peer};
use crate::reactor::datagram::Datagram;
use crate::time::Timestamp;

/// The driver's transports, borrowed for one round of transmissions.
pub(super) struct Transports<'a> {
    /// The plain client socket, if open.
    pub clients: Option<&'a Datagram>,
    /// Upstream endpoints' UDP sockets by endpoint number.
    pub endpoints: &'a [Option<Datagram>],
    /// Datagrams for in-process clients.
    pub to_local: &'a mut VecDeque<(LocalClient, Vec<u8>)>,
    #[cfg(feature = "dtls")]
    pub dtls: Option<&'a mut DtlsListener>,
    #[cfg(feature = "dtls")]
    pub dtls_upstream: Option<&'a mut DtlsUpstream>,
    #[cfg(feature = "tcp")]
    pub streams: &'a mut [StreamListener],
    #[cfg(feature = "tcp")]
    pub stream_upstream: Option<&'a mut StreamUpstream>,
}

impl Transports<'_> {
    /// Hands `payload` to the transport of `to`; `NotConnected` if there is none (a session
    /// or connection that has ended).
    pub fn send(&mut self, now: Timestamp, to: Destination, payload: &[u8]) -> io::Result<()> {
        let gone = || Err(io::Error::from(io::ErrorKind::NotConnected));
        match to {
            Destination::Client(peer) => self.send_to_client(now, peer, payload),
            #[cfg(feature = "dtls")]
            Destination::Upstream(id)
                if self.dtls_upstream.as_ref().is_some_and(|u| u.carries(id)) =>
            {
                if let Some(up) = self.dtls_upstream.as_mut() {
                    up.send(now, id, payload);
                }
                Ok(())
            }
            #[cfg(feature = "tcp")]
            Destination::Upstream(id)
                if self.stream_upstream.as_ref().is_some_and(|u| u.carries(id)) =>
            {
                if let Some(up) = self.stream_upstream.as_mut() {
                    up.send(now, id, payload);
                }
                Ok(())
            }
            Destination::Upstream(id) => match self.endpoints.get(id.0 as usize) {
                Some(Some(socket)) => socket.send(payload),
                _ => gone(),
            },
        }
    }

    fn send_to_client(&mut self, now: Timestamp, peer: Peer, payload: &[u8]) -> io::Result<()> {
        let gone = || Err(io::Error::from(io::ErrorKind::NotConnected));
        let _ = now;
        match peer {
            Peer::Local(client) => {
                self.to_local.push_back((client, payload.to_vec()));
                Ok(())
            }
            Peer::Udp(addr) => match self.clients {
                Some(socket) => socket.send_to(payload, addr),
                None => gone(),
            },
            #[cfg(feature = "dtls")]
            Peer::Dtls(session) => match self.dtls.as_mut() {
                Some(listener) => listener.send(now, session, payload),
                None => gone(),
            },
            #[cfg(feature = "tcp")]
            Peer::Stream(id) => match self.streams.iter_mut().find(|l| l.carries(id)) {
                Some(listener) => listener.send(id, payload),
                None => gone(),
            },
            #[allow(unreachable_patterns)]
            _ => gone(),
        }
    }
}
