//! TLS for the reconnect client's retry channel: rustls' `ClientConnection` fed with bytes, so
//! the component that owns the socket only moves ciphertext in and out.
//!
//! The interop test's server closes every retry connection before the handshake, so TLS exists
//! here to send a real ClientHello, and to reach HTTP/2 (ALPN `h2`) when a server does answer.
//!
//! **Certificate verification is off for this connector only.** The interop test has no trust
//! store to check against (grpc's C++ client uses its test CA and a fixed name override), so
//! [`interop_client_config`] installs `AcceptAnyServerCert`, which accepts any certificate
//! chain for any name while still checking the handshake signatures made with its key. The
//! verifier is private to this module and used by nothing else: do not reuse this config to
//! talk to anything but the interop test's retry port.

use std::io::{self, Read, Write};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{
    ring, verify_tls12_signature, verify_tls13_signature, WebPkiSupportedAlgorithms,
};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme};

/// The only application protocol offered: gRPC requires HTTP/2 over TLS.
pub const ALPN_H2: &[u8] = b"h2";

/// Plaintext read per call into rustls' reader.
const PLAINTEXT_CHUNK: usize = 16 * 1024;

/// The rustls client configuration for the interop test's retry channel: the ring provider,
/// TLS 1.2 and 1.3, ALPN `h2`, and certificate verification disabled (see the module docs).
pub fn interop_client_config() -> Arc<ClientConfig> {
    let provider = Arc::new(ring::default_provider());
    let verifier = AcceptAnyServerCert {
        algorithms: provider.signature_verification_algorithms,
    };
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports the default TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Arc::new(config)
}

/// Accepts any server certificate for any name; handshake signatures are still verified with
/// the presented certificate's key. Only for the interop test's target (module docs).
#[derive(Debug)]
struct AcceptAnyServerCert {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AcceptAnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// One TLS client session over bytes: ciphertext in through [`handle_input`], plaintext out
/// into the caller's buffer; plaintext in through [`send`], ciphertext out through
/// [`pending_output`] / [`consume_output`]. No socket, no clock.
///
/// [`handle_input`]: TlsClient::handle_input
/// [`send`]: TlsClient::send
/// [`pending_output`]: TlsClient::pending_output
/// [`consume_output`]: TlsClient::consume_output
pub struct TlsClient {
    conn: ClientConnection,
    output: Vec<u8>,
    /// The server sent close_notify.
    peer_closed: bool,
}

impl TlsClient {
    /// Starts a handshake with `server_name` (sent as SNI when it is a DNS name); the
    /// ClientHello is in [`pending_output`](Self::pending_output) right away.
    pub fn new(
        config: Arc<ClientConfig>,
        server_name: ServerName<'static>,
    ) -> Result<Self, rustls::Error> {
        let mut tls = TlsClient {
            conn: ClientConnection::new(config, server_name)?,
            output: Vec::new(),
            peer_closed: false,
        };
        tls.collect_output();
        Ok(tls)
    }

    /// Ciphertext read from the socket. Decrypted application data is appended to
    /// `plaintext`. An error is fatal to the session (an alert for the server may be pending).
    pub fn handle_input(
        &mut self,
        mut bytes: &[u8],
        plaintext: &mut Vec<u8>,
    ) -> Result<(), rustls::Error> {
        while !bytes.is_empty() {
            let read = self.conn.read_tls(&mut bytes);
            let result = read
                .map_err(|e| rustls::Error::General(format!("TLS input: {e}")))
                .and_then(|_| self.conn.process_new_packets().map(|_| ()));
            // Read the plaintext out even after an error, and send the alert rustls queued.
            self.read_plaintext(plaintext);
            self.collect_output();
            result?;
        }
        Ok(())
    }

    /// Queues application data; rustls holds it until the handshake completes.
    pub fn send(&mut self, plaintext: &[u8]) -> io::Result<()> {
        self.conn.writer().write_all(plaintext)?;
        self.collect_output();
        Ok(())
    }

    /// Ciphertext to write to the socket.
    pub fn pending_output(&self) -> &[u8] {
        &self.output
    }

    /// The caller wrote `n` octets of [`pending_output`](Self::pending_output).
    pub fn consume_output(&mut self, n: usize) {
        self.output.drain(..n.min(self.output.len()));
    }

    /// Whether the TLS handshake is still in progress (no application data yet).
    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// The protocol the server chose by ALPN, once the handshake is done.
    pub fn alpn_protocol(&self) -> Option<&[u8]> {
        self.conn.alpn_protocol()
    }

    /// `TLSv1_3` or `TLSv1_2`, once negotiated.
    pub fn protocol_version(&self) -> Option<rustls::ProtocolVersion> {
        self.conn.protocol_version()
    }

    /// The server ended the session with close_notify.
    pub fn peer_closed(&self) -> bool {
        self.peer_closed
    }

    fn read_plaintext(&mut self, plaintext: &mut Vec<u8>) {
        let mut chunk = [0u8; PLAINTEXT_CHUNK];
        loop {
            match self.conn.reader().read(&mut chunk) {
                Ok(0) => {
                    self.peer_closed = true;
                    return;
                }
                Ok(n) => plaintext.extend_from_slice(&chunk[..n]),
                // WouldBlock: no more for now; anything else: the session's error is reported
                // by process_new_packets.
                Err(_) => return,
            }
        }
    }

    fn collect_output(&mut self) {
        while self.conn.wants_write() {
            // Writing into a Vec cannot fail.
            let _ = self.conn.write_tls(&mut self.output);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> TlsClient {
        let name = ServerName::try_from("localhost").unwrap();
        TlsClient::new(interop_client_config(), name).unwrap()
    }

    #[test]
    fn client_hello_is_ready_at_once_and_offers_h2() {
        let tls = client();
        let hello = tls.pending_output();
        // A TLS record of type handshake (22) holding a ClientHello (1).
        assert_eq!(hello[0], 22);
        assert_eq!(hello[5], 1);
        let alpn = hello.windows(3).any(|w| w == b"\x02h2");
        assert!(alpn, "ALPN h2 offered");
        let sni = hello.windows(9).any(|w| w == b"localhost");
        assert!(sni, "SNI carries the host name");
        assert!(tls.is_handshaking());
    }

    #[test]
    fn ip_address_targets_send_no_sni() {
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let tls = TlsClient::new(interop_client_config(), name).unwrap();
        assert!(!tls.pending_output().windows(9).any(|w| w == b"127.0.0.1"));
    }

    #[test]
    fn garbage_from_the_server_is_an_error_not_a_panic() {
        let mut tls = client();
        let mut plain = Vec::new();
        assert!(tls
            .handle_input(b"HTTP/1.1 400 Bad Request\r\n\r\n", &mut plain)
            .is_err());
        assert!(plain.is_empty());
    }

    /// A rustls server with a certificate made now, for a name the client does not ask for.
    fn server() -> rustls::ServerConnection {
        let cert = rcgen::generate_simple_self_signed(vec!["other.example".into()]).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.key_pair.serialize_der().into());
        let provider = Arc::new(ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .unwrap();
        config.alpn_protocols = vec![ALPN_H2.to_vec()];
        rustls::ServerConnection::new(Arc::new(config)).unwrap()
    }

    /// Moves everything each side wants to send until both are quiet.
    fn shuttle(c: &mut TlsClient, s: &mut rustls::ServerConnection, to_client: &mut Vec<u8>) {
        for _ in 0..10 {
            let mut out = c.pending_output().to_vec();
            c.consume_output(out.len());
            let mut slice = &out[..];
            while !slice.is_empty() {
                s.read_tls(&mut slice).unwrap();
                s.process_new_packets().unwrap();
            }
            out.clear();
            while s.wants_write() {
                s.write_tls(&mut out).unwrap();
            }
            c.handle_input(&out, to_client).unwrap();
        }
    }

    #[test]
    fn handshake_with_any_certificate_negotiates_h2_and_carries_data() {
        let mut c = client();
        let mut s = server();
        c.send(b"client bytes").unwrap();
        let mut plain = Vec::new();
        shuttle(&mut c, &mut s, &mut plain);
        assert!(!c.is_handshaking());
        assert_eq!(c.alpn_protocol(), Some(ALPN_H2));
        assert_eq!(c.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_3));
        let mut got = [0u8; 12];
        s.reader().read_exact(&mut got).unwrap();
        assert_eq!(&got, b"client bytes");
        s.writer().write_all(b"server bytes").unwrap();
        s.send_close_notify();
        shuttle(&mut c, &mut s, &mut plain);
        assert_eq!(plain, b"server bytes");
        assert!(c.peer_closed());
    }

    #[test]
    fn application_data_waits_for_the_handshake() {
        let mut tls = client();
        let hello = tls.pending_output().len();
        tls.consume_output(hello);
        tls.send(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
        assert!(tls.pending_output().is_empty());
    }
}
