//! Key and certificate files for the secure listeners (coaps, coaps+tcp) and the coaps
//! upstream: read at parse time, bounded, regular files only, so that `--check-config` finds
//! a missing or unreadable file before anything is bound.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::flags::UsageError;

/// The certificates of a PEM file, at least one.
pub fn certificates(
    flag: &str,
    path: &str,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, UsageError> {
    let pem = read(flag, path, MAX_PEM)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| UsageError(format!("--{flag}: {path}: {e}")))?;
    if certs.is_empty() {
        return Err(UsageError(format!("--{flag}: {path} holds no certificate")));
    }
    Ok(certs)
}

/// The longest certificate or key file read: a chain of a few certificates is a few KiB.
pub const MAX_PEM: u64 = 1 << 20;

/// A regular file's bytes, refused past `max` (not a device or a pipe, which could block
/// or never end). The fuzzed command line reads nothing.
pub fn read(flag: &str, path: &str, max: u64) -> Result<Vec<u8>, UsageError> {
    use std::io::Read;
    let fail = |why: String| UsageError(format!("--{flag}: cannot read {path}: {why}"));
    if cfg!(fuzzing) {
        return Err(fail("files are not read while fuzzing".into()));
    }
    let file = std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
    let meta = file.metadata().map_err(|e| fail(e.to_string()))?;
    if !meta.is_file() {
        return Err(fail("not a regular file".into()));
    }
    if meta.len() > max {
        return Err(fail(format!("{} bytes, more than {max}", meta.len())));
    }
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(e.to_string()))?;
    Ok(bytes)
}

/// The private key of a PEM file: PKCS#8, PKCS#1 (RSA) or SEC1 (EC).
pub fn private_key(flag: &str, path: &str) -> Result<PrivateKeyDer<'static>, UsageError> {
    let pem = read(flag, path, MAX_PEM)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| UsageError(format!("--{flag}: {path}: {e}")))
}
