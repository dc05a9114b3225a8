//! The coaps listener and upstream of a build with the `dtls` feature: their flags parsed
//! into the library's configurations, described for `--check-config`, and handed to the proxy.

use std::net::SocketAddr;
use std::time::Duration;

use super::{SPEC, UPSTREAM_SPEC};
use crate::cli::flags::{DurationArg, Flags, UsageError};
use crate::cli::pem::{certificates, read};
use backoffd::dtls::{
    CertifiedKey, ClientCredentials, Credentials, DtlsClientConfig, DtlsServerConfig, SessionLimits,
};
use backoffd::proxy::{Listeners, ProxyComponent};

/// A coaps listener: where, and with which keys.
#[derive(Clone, Debug)]
pub struct DtlsPart {
    /// `--listen-dtls`.
    addr: SocketAddr,
    /// Keys, certificates and bounds.
    config: DtlsServerConfig,
}

/// A coaps upstream (`--upstream coaps://`): where, and with which keys.
#[derive(Clone, Debug)]
pub struct UpstreamPart {
    /// The origin.
    addr: SocketAddr,
    /// Keys, trust and bounds.
    config: DtlsClientConfig,
}

/// Where the listener is.
pub fn listen_addr(part: &DtlsPart) -> SocketAddr {
    part.addr
}

/// One line for `--check-config`: where, and what it takes.
pub fn describe(part: &DtlsPart) -> String {
    let c = &part.config.credentials;
    let mut takes = Vec::new();
    if !c.psk.is_empty() {
        takes.push(format!("{} PSK identities", c.psk.len()));
    }
    if c.certificate.is_some() {
        takes.push("a certificate".to_string());
    }
    if !c.client_cas.is_empty() {
        takes.push("client certificates required".to_string());
    }
    let l = &part.config.limits;
    format!(
        "  coaps on {}: {}; up to {} sessions, {} per source {}, of them {} handshaking, {} per source; handshake {:?}, idle {:?}\n",
        part.addr,
        takes.join(", "),
        l.max_sessions,
        l.max_sessions_per_source,
        l.source_prefix,
        l.max_handshakes,
        l.max_handshakes_per_source,
        l.handshake_timeout,
        l.idle_timeout
    )
}

/// One line for `--check-config` on a coaps upstream.
pub fn describe_upstream(part: &UpstreamPart) -> String {
    let c = &part.config.credentials;
    let mut with = Vec::new();
    if let Some((identity, _)) = &c.psk {
        with.push(format!(
            "PSK identity {:?}",
            String::from_utf8_lossy(identity)
        ));
    }
    if !c.roots.is_empty() {
        with.push(format!(
            "its certificate checked for {:?} against {} CA certificates",
            c.server_name,
            c.roots.len()
        ));
    }
    format!(
        "  upstream coaps://{}: {}; handshake {:?}, idle {:?}\n",
        part.addr,
        with.join(", "),
        part.config.handshake_timeout,
        part.config.idle_timeout
    )
}

/// The proxy's coaps listener is `part`.
pub fn add_listener(listeners: &mut Listeners, part: DtlsPart) {
    listeners.dtls = Some((part.addr, part.config));
}

/// `proxy`, speaking coaps to its upstream as `part` says.
pub fn with_upstream(proxy: ProxyComponent, part: UpstreamPart) -> Result<ProxyComponent, String> {
    proxy
        .with_coaps_upstream(part.addr, &part.config)
        .map_err(|e| format!("coaps upstream {}: {e}", part.addr))
}

/// The listener `--listen-dtls` asks for, with its keys read.
pub fn from_flags(flags: &Flags) -> Result<Option<DtlsPart>, UsageError> {
    let Some(addr) = crate::cli::addr_flag(flags, "listen-dtls")? else {
        return match SPEC[1..].iter().find(|s| flags.has(s.name)) {
            Some(s) => Err(UsageError(format!("--{}: needs --listen-dtls", s.name))),
            None => Ok(None),
        };
    };
    let credentials = Credentials {
        psk: psk_table(flags)?,
        certificate: certificate(flags)?,
        client_cas: match flags.get::<String>("dtls-client-ca")? {
            Some(path) => certificates("dtls-client-ca", &path)?,
            None => Vec::new(),
        },
    };
    if credentials.psk.is_empty() && credentials.certificate.is_none() {
        return Err(UsageError(
            "--listen-dtls: needs keys: --psk-identity with --psk-key-file, or --dtls-cert with --dtls-key".into(),
        ));
    }
    if !credentials.client_cas.is_empty() && credentials.certificate.is_none() {
        return Err(UsageError(
            "--dtls-client-ca: needs --dtls-cert and --dtls-key (client certificates go with a server certificate)".into(),
        ));
    }
    let config = DtlsServerConfig {
        credentials,
        limits: limits(flags)?,
    };
    backoffd::dtls::config::check(&config.credentials)
        .map_err(|e| UsageError(format!("--listen-dtls: {e}")))?;
    Ok(Some(DtlsPart { addr, config }))
}

/// `--psk-identity` and `--psk-key-file`, paired in order (both repeat).
fn psk_table(flags: &Flags) -> Result<backoffd::dtls::PskTable, UsageError> {
    let identities = flags.get_all::<String>("psk-identity")?;
    let files = flags.get_all::<String>("psk-key-file")?;
    if identities.len() != files.len() {
        return Err(UsageError(format!(
            "--psk-identity: {} identities but {} --psk-key-file (give one key file per identity)",
            identities.len(),
            files.len()
        )));
    }
    let mut table = backoffd::dtls::PskTable::new();
    for (identity, file) in identities.into_iter().zip(files) {
        let key = read("psk-key-file", &file, 64)?;
        if key.is_empty() {
            return Err(UsageError(format!(
                "--psk-key-file: {file} is empty (it holds the raw key: 1 to 64 bytes)"
            )));
        }
        if identity.is_empty() || identity.len() > 128 {
            return Err(UsageError("--psk-identity: 1 to 128 bytes".into()));
        }
        if table.insert(identity.clone().into_bytes(), key).is_some() {
            return Err(UsageError(format!(
                "--psk-identity: {identity:?} given twice"
            )));
        }
    }
    Ok(table)
}

/// `--dtls-cert` and `--dtls-key`, both or neither.
fn certificate(flags: &Flags) -> Result<Option<CertifiedKey>, UsageError> {
    use crate::cli::pem::{as_pkcs8, private_key};
    let (cert, key) = (
        flags.get::<String>("dtls-cert")?,
        flags.get::<String>("dtls-key")?,
    );
    let (cert, key) = match (cert, key) {
        (None, None) => return Ok(None),
        (Some(c), Some(k)) => (c, k),
        (Some(_), None) => return Err(UsageError("--dtls-cert: needs --dtls-key".into())),
        (None, Some(_)) => return Err(UsageError("--dtls-key: needs --dtls-cert".into())),
    };
    let chain = certificates("dtls-cert", &cert)?;
    // The one key reader `--tls-key` uses too: PKCS#8, PKCS#1 or SEC1.
    let read_key = private_key("dtls-key", &key)?;
    let key_pkcs8 =
        as_pkcs8(&read_key).map_err(|e| UsageError(format!("--dtls-key: {key}: {e}")))?;
    Ok(Some(CertifiedKey { chain, key_pkcs8 }))
}

fn limits(flags: &Flags) -> Result<SessionLimits, UsageError> {
    let d = SessionLimits::default();
    let positive = |name: &str, default: usize| match flags.get_or(name, default)? {
        0 => Err(UsageError(format!("--{name}: must be at least 1"))),
        n => Ok(n),
    };
    let duration = |name: &str, default: Duration| match flags.get_or(name, DurationArg(default))?.0
    {
        t if t.is_zero() => Err(UsageError(format!("--{name}: must be more than 0"))),
        t => Ok(t),
    };
    Ok(SessionLimits {
        max_sessions: positive("dtls-max-sessions", d.max_sessions)?,
        max_sessions_per_source: positive(
            "dtls-max-sessions-per-source",
            d.max_sessions_per_source,
        )?,
        max_handshakes: positive("dtls-max-handshakes", d.max_handshakes)?,
        max_handshakes_per_source: positive(
            "dtls-max-handshakes-per-source",
            d.max_handshakes_per_source,
        )?,
        source_prefix: crate::cli::shared_flags::source_prefix(flags)?,
        handshake_timeout: duration("dtls-handshake-timeout", d.handshake_timeout)?,
        idle_timeout: duration("dtls-idle-timeout", d.idle_timeout)?,
        ..d
    })
}

/// The coaps upstream `--upstream coaps://` asks for, with its keys read.
pub fn upstream_from_flags(flags: &Flags) -> Result<Option<UpstreamPart>, UsageError> {
    let upstream = crate::cli::shared_flags::upstream_flag(flags)?;
    // --upstream-ca is coaps+tcp's too (cli/stream.rs).
    let over_tls = upstream.as_ref().is_some_and(|u| u.tls_host.is_some());
    let Some((addr, host)) = upstream.and_then(|u| Some((u.addr, u.coaps_host?))) else {
        let flag = (UPSTREAM_SPEC.iter())
            .filter(|s| !(over_tls && s.name == "upstream-ca"))
            .find(|s| flags.has(s.name));
        return match flag {
            Some(s) => Err(UsageError(format!(
                "--{}: needs --upstream coaps://HOST:PORT",
                s.name
            ))),
            None => Ok(None),
        };
    };
    let psk = match (
        flags.get::<String>("upstream-psk-identity")?,
        flags.get::<String>("upstream-psk-key-file")?,
    ) {
        (None, None) => None,
        (Some(identity), Some(file)) => Some(upstream_psk(identity, &file)?),
        (Some(_), None) => {
            return Err(UsageError(
                "--upstream-psk-identity: needs --upstream-psk-key-file".into(),
            ))
        }
        (None, Some(_)) => {
            return Err(UsageError(
                "--upstream-psk-key-file: needs --upstream-psk-identity".into(),
            ))
        }
    };
    let roots = match flags.get::<String>("upstream-ca")? {
        Some(path) => certificates("upstream-ca", &path)?,
        None => Vec::new(),
    };
    if psk.is_none() && roots.is_empty() {
        return Err(UsageError(
            "--upstream coaps://: needs keys: --upstream-psk-identity with --upstream-psk-key-file, or --upstream-ca".into(),
        ));
    }
    let credentials = ClientCredentials {
        psk,
        roots,
        server_name: host,
    };
    let provider = rtc_dtls::crypto_provider::default_provider()
        .map_err(|e| UsageError(format!("--upstream: {e}")))?;
    backoffd::dtls::config::client_handshake(&credentials, provider)
        .map_err(|e| UsageError(format!("--upstream coaps://: {e}")))?;
    Ok(Some(UpstreamPart {
        addr,
        config: DtlsClientConfig::new(credentials),
    }))
}

/// The upstream's identity and the key its file holds.
fn upstream_psk(identity: String, file: &str) -> Result<(Vec<u8>, Vec<u8>), UsageError> {
    let key = read("upstream-psk-key-file", file, 64)?;
    if key.is_empty() {
        return Err(UsageError(format!(
            "--upstream-psk-key-file: {file} is empty (it holds the raw key: 1 to 64 bytes)"
        )));
    }
    if identity.is_empty() || identity.len() > 128 {
        return Err(UsageError("--upstream-psk-identity: 1 to 128 bytes".into()));
    }
    Ok((identity.into_bytes(), key))
}
