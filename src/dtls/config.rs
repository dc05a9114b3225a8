//! What a coaps listener is configured with, and the DTLS library's configuration made from it.
//!
//! The suites are those RFC 7252 §9.1.3 makes mandatory, TLS_PSK_WITH_AES_128_CCM_8 (§9.1.3.1)
//! and TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8 (§9.1.3.2, §9.1.3.3), then the CCM and AES-GCM
//! suites current clients offer. Extended master secret (RFC 7627) and the renegotiation
//! marker (RFC 5746) are always sent, as tinydtls requires both.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rtc_dtls::cipher_suite::CipherSuiteId;
use rtc_dtls::config::{ClientAuthType, ConfigBuilder, ExtendedMasterSecretType, HandshakeConfig};
use rtc_dtls::crypto::Certificate;
use rtc_dtls::crypto_provider::{RTCCryptoProvider, SignatureScheme};
use rustls::pki_types::CertificateDer;

use crate::source_prefix::PrefixLengths;

/// Pre-shared keys by identity (RFC 4279 §2). Both are bytes: an identity need not be text.
pub type PskTable = BTreeMap<Vec<u8>, Vec<u8>>;

/// A certificate chain (leaf first) and its PKCS#8 private key, as DER.
#[derive(Clone)]
pub struct CertifiedKey {
    /// The chain, leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The leaf's key: PKCS#8, ECDSA P-256 or P-384 (or Ed25519).
    pub key_pkcs8: Vec<u8>,
}

/// How a listener proves itself and whom it takes.
#[derive(Clone, Default)]
pub struct Credentials {
    /// PSK identities and their keys; empty: no PSK suites.
    pub psk: PskTable,
    /// The server's certificate; `None`: no certificate suites.
    pub certificate: Option<CertifiedKey>,
    /// Client certificates must chain to one of these (mutual authentication); empty: none asked.
    pub client_cas: Vec<CertificateDer<'static>>,
}

impl std::fmt::Debug for Credentials {
    /// Names the identities, never the keys.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let identities: Vec<String> = self
            .psk
            .keys()
            .map(|i| String::from_utf8_lossy(i).into_owned())
            .collect();
        f.debug_struct("Credentials")
            .field("psk_identities", &identities)
            .field("certificate", &self.certificate.is_some())
            .field("client_cas", &self.client_cas.len())
            .finish()
    }
}

/// Bounds on what peers may make a listener hold (`admission.rs` says how a full one makes
/// room).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionLimits {
    /// Sessions at once, handshaking or established.
    pub max_sessions: usize,
    /// Of those, from one source (an IPv4 address or IPv6 /64 by default: `source_prefix`).
    pub max_sessions_per_source: usize,
    /// Sessions still handshaking, at once: what a peer with addresses but no key can hold.
    pub max_handshakes: usize,
    /// Of those, from one source.
    pub max_handshakes_per_source: usize,
    /// What a source is: the prefix lengths of `--source-prefix`.
    pub source_prefix: PrefixLengths,
    /// From the cookie-verified ClientHello to the Finished; a slower handshake is dropped.
    pub handshake_timeout: Duration,
    /// How long a handshake is kept before a newcomer at a bound may take its place
    /// (`admission.rs`): one retransmission timer (RFC 6347 §4.2.4.1: 1 s).
    pub handshake_grace: Duration,
    /// An established session with no record either way for this long is dropped.
    pub idle_timeout: Duration,
    /// A ClientHello without a cookie from the address of a session is answered only once
    /// the session has heard nothing from its client for this long (`server.rs`, RFC 6347
    /// §4.2.8): until then it is an off-path forgery's way to end the session.
    pub rehello_quiet: Duration,
}

impl Default for SessionLimits {
    /// 10,000 sessions, 64 per source; 2,000 handshaking, 8 per source. A handshaking
    /// session holds about 7.5 KiB (docs/security.md), so the handshakes an attacker with
    /// addresses but no key can hold cost at most 15 MiB, while one NAT's devices still
    /// handshake 8 at a time.
    fn default() -> Self {
        SessionLimits {
            max_sessions: 10_000,
            max_sessions_per_source: 64,
            max_handshakes: 2_000,
            max_handshakes_per_source: 8,
            source_prefix: PrefixLengths::DEFAULT,
            handshake_timeout: Duration::from_secs(10),
            handshake_grace: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(300),
            rehello_quiet: Duration::from_secs(10),
        }
    }
}

/// A coaps listener's configuration.
#[derive(Clone, Debug, Default)]
pub struct DtlsServerConfig {
    /// Keys and certificates.
    pub credentials: Credentials,
    /// Session bounds.
    pub limits: SessionLimits,
}

/// The PSK suites, mandatory first.
pub const PSK_SUITES: [CipherSuiteId; 3] = [
    CipherSuiteId::Tls_Psk_With_Aes_128_Ccm_8,
    CipherSuiteId::Tls_Psk_With_Aes_128_Ccm,
    CipherSuiteId::Tls_Psk_With_Aes_128_Gcm_Sha256,
];

/// The certificate suites, mandatory first.
pub const CERTIFICATE_SUITES: [CipherSuiteId; 3] = [
    CipherSuiteId::Tls_Ecdhe_Ecdsa_With_Aes_128_Ccm_8,
    CipherSuiteId::Tls_Ecdhe_Ecdsa_With_Aes_128_Ccm,
    CipherSuiteId::Tls_Ecdhe_Ecdsa_With_Aes_128_Gcm_Sha256,
];

/// The largest record payload we ask the library for: a CoAP datagram of the proxy's
/// 1152-byte default (RFC 7252 §4.6) plus the record's 29 bytes of overhead fits 1280.
const MTU: usize = 1200;

/// The library's server configuration for `credentials`, its draws from `provider`.
pub fn server_handshake(
    credentials: &Credentials,
    provider: Arc<dyn RTCCryptoProvider>,
) -> Result<HandshakeConfig, String> {
    let mut suites = Vec::new();
    let mut builder = ConfigBuilder::default()
        .with_extended_master_secret(ExtendedMasterSecretType::Request)
        .with_mtu(MTU);
    if !credentials.psk.is_empty() {
        let table = Arc::new(credentials.psk.clone());
        builder = builder
            .with_psk(Some(Arc::new(move |identity: &[u8]| {
                table
                    .get(identity)
                    .cloned()
                    .ok_or(rtc_shared::error::Error::ErrIdentityNoPsk)
            })))
            .with_psk_identity_hint(Some(b"backoffd".to_vec()));
        suites.extend(PSK_SUITES);
    }
    if let Some(certified) = &credentials.certificate {
        builder = builder.with_certificates(vec![certificate(certified, provider.as_ref())?]);
        suites.extend(CERTIFICATE_SUITES);
    }
    if !credentials.client_cas.is_empty() {
        let mut roots = rustls::RootCertStore::empty();
        for ca in &credentials.client_cas {
            roots
                .add(ca.clone())
                .map_err(|e| format!("client CA certificate: {e}"))?;
        }
        builder = builder
            .with_client_cas(roots)
            .with_client_auth(ClientAuthType::RequireAndVerifyClientCert);
    }
    builder
        .with_cipher_suites(suites)
        .with_crypto_provider(provider)
        .build(false, None)
        .map_err(|e| e.to_string())
}

/// The library's certificate for `certified`: the first signature scheme its key imports as.
fn certificate(
    certified: &CertifiedKey,
    provider: &dyn RTCCryptoProvider,
) -> Result<Certificate, String> {
    let key = [
        SignatureScheme::EcdsaP256Sha256,
        SignatureScheme::EcdsaP384Sha384,
        SignatureScheme::Ed25519,
    ]
    .into_iter()
    .find_map(|scheme| {
        provider
            .crypto()
            .import_signing_key(scheme, &certified.key_pkcs8)
            .ok()
    })
    .ok_or("the key is not an ECDSA (P-256, P-384) or Ed25519 key, which the ECDHE_ECDSA suites need (RFC 7252 §9.1.3.2)")?;
    if certified.chain.is_empty() {
        return Err("the certificate file holds no certificate".into());
    }
    Ok(Certificate::from_signing_key(certified.chain.clone(), key))
}

/// Whether `credentials` make a working listener (the key imports, the suites exist): the
/// check `--check-config` runs, without binding anything.
pub fn check(credentials: &Credentials) -> Result<(), String> {
    let provider = rtc_dtls::crypto_provider::default_provider().map_err(|e| e.to_string())?;
    server_handshake(credentials, provider).map(drop)
}

/// How the proxy proves itself to a coaps origin (`--upstream coaps://`), and how it checks
/// the origin.
#[derive(Clone, Default)]
pub struct ClientCredentials {
    /// The PSK identity and key (`--upstream-psk-identity`, `--upstream-psk-key-file`).
    pub psk: Option<(Vec<u8>, Vec<u8>)>,
    /// The origin's certificate must chain to one of these (`--upstream-ca`); empty: no
    /// certificate suites are offered.
    pub roots: Vec<CertificateDer<'static>>,
    /// The name the origin's certificate must carry: the host of the upstream URI.
    pub server_name: String,
}

impl std::fmt::Debug for ClientCredentials {
    /// Names the identity, never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let identity = self
            .psk
            .as_ref()
            .map(|(i, _)| String::from_utf8_lossy(i).into_owned());
        f.debug_struct("ClientCredentials")
            .field("psk_identity", &identity)
            .field("roots", &self.roots.len())
            .field("server_name", &self.server_name)
            .finish()
    }
}

/// A coaps upstream's configuration.
#[derive(Clone, Debug)]
pub struct DtlsClientConfig {
    /// Keys and trust.
    pub credentials: ClientCredentials,
    /// A handshake not finished in this long is given up, and tried again later.
    pub handshake_timeout: Duration,
    /// A session with no record either way for this long is closed; the next request opens
    /// a new one.
    pub idle_timeout: Duration,
}

impl DtlsClientConfig {
    /// `credentials` with the listener's default bounds.
    pub fn new(credentials: ClientCredentials) -> Self {
        let limits = SessionLimits::default();
        DtlsClientConfig {
            credentials,
            handshake_timeout: limits.handshake_timeout,
            idle_timeout: limits.idle_timeout,
        }
    }
}

/// The library's client configuration for `credentials`, its draws from `provider`: the PSK
/// suites if there is a key, the certificate suites if there are roots to check against.
pub fn client_handshake(
    credentials: &ClientCredentials,
    provider: Arc<dyn RTCCryptoProvider>,
) -> Result<HandshakeConfig, String> {
    let mut suites = Vec::new();
    let mut builder = ConfigBuilder::default()
        .with_extended_master_secret(ExtendedMasterSecretType::Request)
        .with_mtu(MTU);
    if let Some((identity, key)) = &credentials.psk {
        let key = key.clone();
        builder = builder
            .with_psk(Some(Arc::new(move |_hint: &[u8]| Ok(key.clone()))))
            .with_psk_identity_hint(Some(identity.clone()));
        suites.extend(PSK_SUITES);
    }
    if !credentials.roots.is_empty() {
        let mut roots = rustls::RootCertStore::empty();
        for ca in &credentials.roots {
            roots
                .add(ca.clone())
                .map_err(|e| format!("upstream CA certificate: {e}"))?;
        }
        builder = builder.with_roots_cas(roots);
        suites.extend(CERTIFICATE_SUITES);
    }
    builder
        .with_server_name(credentials.server_name.clone())
        .with_cipher_suites(suites)
        .with_crypto_provider(provider)
        .build(true, None)
        .map_err(|e| e.to_string())
}
