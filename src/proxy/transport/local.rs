//! Clients inside this process ([`Peer::Local`]: the HTTP cross-proxy's connections,
//! `crate::hc`): no socket, a queue each way. The hosting component hands their datagrams in
//! ([`ProxyComponent::handle_local`](crate::proxy::ProxyComponent::handle_local)) and takes the
//! engine's answers out ([`ProxyComponent::poll_local`](crate::proxy::ProxyComponent::poll_local)).

use std::collections::VecDeque;
use std::io;

use super::{Intake, Transport};
use crate::proxy::{Destination, LocalClient, Peer};
use crate::reactor::keys::KeyRange;
use crate::reactor::{Ctx, Readiness};
use crate::time::Timestamp;
use crate::timer::TimerId;

/// The in-process clients' transport: what the engine sent them, in order.
#[derive(Default)]
pub(in crate::proxy) struct LocalClients {
    to_clients: VecDeque<(LocalClient, Vec<u8>)>,
}

impl LocalClients {
    /// The next datagram the engine sent to an in-process client.
    pub(in crate::proxy) fn poll(&mut self) -> Option<(LocalClient, Vec<u8>)> {
        self.to_clients.pop_front()
    }
}

impl Transport for LocalClients {
    fn keys_needed(&self) -> u32 {
        0
    }

    fn start(&mut self, _: &mut Ctx<'_>, _: KeyRange) -> io::Result<()> {
        Ok(())
    }

    fn keys(&self) -> KeyRange {
        KeyRange::default()
    }

    fn on_ready(&mut self, _: &mut Ctx<'_>, _: u32, _: Readiness, _: &mut Intake) {}

    fn on_timer(&mut self, _: &mut Ctx<'_>, _: TimerId, _: u32, _: &mut Intake) {}

    fn carries(&self, to: Destination) -> bool {
        matches!(to, Destination::Client(Peer::Local(_)))
    }

    fn send(&mut self, _: Timestamp, to: Destination, payload: &[u8]) -> io::Result<()> {
        match to {
            Destination::Client(Peer::Local(client)) => {
                self.to_clients.push_back((client, payload.to_vec()));
                Ok(())
            }
            _ => Err(io::ErrorKind::NotConnected.into()),
        }
    }

    fn settle(&mut self, _: &mut Ctx<'_>, _: &mut Intake) {}
}
