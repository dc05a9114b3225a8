//! TLS under CoAP (coaps+tcp, RFC 8323 §3, §9.2): a rustls connection, server or client, fed
//! with bytes, so that the CoAP connection stays sans-IO: ciphertext in, plaintext out to the
//! CoAP layer, its plaintext in, ciphertext out.
//!
//! ALPN: a client that offers ALPN must be offered `coap` (§8.2, registered by §11.7); one
//! that offers none is served too (libcoap offers none).

use std::io::{Read, Write};
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{
    ClientConfig, ClientConnection, Connection, RootCertStore, ServerConfig, ServerConnection,
};

/// The ALPN protocol ID of CoAP over TLS (RFC 8323 §8.2).
pub const ALPN_COAP: &[u8] = b"coap";
/// The ALPN protocol ID a WebSocket client offers (`wss:` in a browser): coaps+ws (§4).
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// Plaintext read per call into rustls' reader.
const PLAINTEXT_CHUNK: usize = 16 * 1024;

/// The server configuration for a certificate chain and its key: rustls' safe defaults (TLS
/// 1.2 and 1.3 on the ring provider), ALPN `coap` and `http/1.1` (coaps+ws on the same port).
pub fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<ServerConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![ALPN_COAP.to_vec(), ALPN_HTTP1.to_vec()];
    Ok(Arc::new(config))
}

/// The client configuration for an origin whose certificate must chain to `roots`: rustls'
/// safe defaults, ALPN `coap` offered.
pub fn client_config(
    roots: &[CertificateDer<'static>],
) -> Result<Arc<ClientConfig>, rustls::Error> {
    let mut store = RootCertStore::empty();
    for root in roots {
        store.add(root.clone())?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_COAP.to_vec()];
    Ok(Arc::new(config))
}

/// One TLS session over bytes, a server's or a client's. No socket, no clock.
pub struct TlsSession {
    tls: Connection,
    /// Ciphertext for the socket.
    output: Vec<u8>,
}

impl TlsSession {
    /// A server session waiting for the ClientHello.
    pub fn new(config: Arc<ServerConfig>) -> Result<Self, rustls::Error> {
        Ok(TlsSession {
            tls: Connection::Server(ServerConnection::new(config)?),
            output: Vec::new(),
        })
    }

    /// A client session to `name` (checked against its certificate, and sent as SNI when it is
    /// a DNS name): the ClientHello is in the output at once.
    pub fn client(
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
    ) -> Result<Self, rustls::Error> {
        let mut session = TlsSession {
            tls: Connection::Client(ClientConnection::new(config, name)?),
            output: Vec::new(),
        };
        session.collect_output();
        Ok(session)
    }

    /// Ciphertext from the socket; decrypted application data is appended to `plaintext`.
    /// An error ends the session (the alert rustls queued is in the output).
    pub fn handle_input(
        &mut self,
        mut bytes: &[u8],
        plaintext: &mut Vec<u8>,
    ) -> Result<(), rustls::Error> {
        while !bytes.is_empty() {
            let read = match self.tls.read_tls(&mut bytes) {
                Ok(0) => break,
                Ok(_) => self.tls.process_new_packets().map(|_| ()),
                Err(e) => Err(rustls::Error::General(format!("TLS input: {e}"))),
            };
            self.read_plaintext(plaintext);
            self.collect_output();
            read?;
        }
        Ok(())
    }

    /// Queues application data; rustls holds it until the handshake is done.
    pub fn send(&mut self, plaintext: &[u8]) {
        // Writing into rustls' buffer cannot fail: it is unbounded (we bound what we give it).
        let _ = self.tls.writer().write_all(plaintext);
        self.collect_output();
    }

    /// Sends close_notify.
    pub fn close(&mut self) {
        self.tls.send_close_notify();
        self.collect_output();
    }

    /// The protocol agreed by ALPN, once the handshake is done.
    pub fn alpn(&self) -> Option<&[u8]> {
        self.tls.alpn_protocol()
    }

    /// Whether the handshake is still going on.
    pub fn is_handshaking(&self) -> bool {
        self.tls.is_handshaking()
    }

    /// Ciphertext to write.
    pub fn pending_output(&self) -> &[u8] {
        &self.output
    }

    /// The first `n` bytes of it were written.
    pub fn consume_output(&mut self, n: usize) {
        self.output.drain(..n.min(self.output.len()));
    }

    /// Plaintext written but not yet sealed, and ciphertext not yet written.
    pub fn buffered(&self) -> usize {
        self.output.len()
    }

    fn read_plaintext(&mut self, plaintext: &mut Vec<u8>) {
        let mut chunk = [0u8; PLAINTEXT_CHUNK];
        // Ok(0) is close_notify; WouldBlock is "no more for now"; an error is reported by
        // process_new_packets.
        while let Ok(n @ 1..) = self.tls.reader().read(&mut chunk) {
            plaintext.extend_from_slice(&chunk[..n]);
        }
    }

    fn collect_output(&mut self) {
        while self.tls.wants_write() {
            // Writing into a Vec cannot fail.
            let _ = self.tls.write_tls(&mut self.output);
        }
    }
}
