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

#[cfg(feature = "dtls")]
pub use pkcs8::as_pkcs8;

/// The key forms [`private_key`] reads, as the PKCS#8 the DTLS library imports.
#[cfg(feature = "dtls")]
mod pkcs8 {
    use rustls::pki_types::PrivateKeyDer;

    /// `key` as PKCS#8 (RFC 5208), whichever of the three forms [`super::private_key`] read: what the
    /// DTLS library imports (`--dtls-key`), so that it takes every file `--tls-key` takes. A
    /// SEC1 key (RFC 5915, `BEGIN EC PRIVATE KEY`, what `openssl ecparam -genkey` writes) is
    /// wrapped with the curve its parameters name; a PKCS#1 key (RFC 8017, `BEGIN RSA PRIVATE
    /// KEY`) with rsaEncryption.
    pub fn as_pkcs8(key: &PrivateKeyDer<'_>) -> Result<Vec<u8>, String> {
        match key {
            PrivateKeyDer::Pkcs8(k) => Ok(k.secret_pkcs8_der().to_vec()),
            PrivateKeyDer::Sec1(k) => {
                let curve = sec1_curve(k.secret_sec1_der()).ok_or(
                    "the SEC1 key names no curve (its [0] parameters); write it with openssl ecparam -genkey -name prime256v1",
                )?;
                Ok(pkcs8(&[EC_PUBLIC_KEY, curve].concat(), k.secret_sec1_der()))
            }
            PrivateKeyDer::Pkcs1(k) => Ok(pkcs8(RSA_ENCRYPTION, k.secret_pkcs1_der())),
            _ => Err("a private key of a form not known".into()),
        }
    }

    /// The AlgorithmIdentifier contents of an EC key: id-ecPublicKey (RFC 5480 §2.1.1), whose
    /// parameter, the curve's OID, follows.
    const EC_PUBLIC_KEY: &[u8] = &[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
    /// rsaEncryption with NULL parameters (RFC 8017 §A.1).
    const RSA_ENCRYPTION: &[u8] = &[
        0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00,
    ];

    /// PrivateKeyInfo { version 0, AlgorithmIdentifier { `algorithm` }, OCTET STRING `key` }.
    fn pkcs8(algorithm: &[u8], key: &[u8]) -> Vec<u8> {
        let body = [
            &[0x02, 0x01, 0x00][..],
            &der(0x30, algorithm),
            &der(0x04, key),
        ]
        .concat();
        der(0x30, &body)
    }

    /// One DER element: `tag`, the definite length, `value`.
    fn der(tag: u8, value: &[u8]) -> Vec<u8> {
        let len = value.len();
        let mut out = vec![tag];
        match len {
            0..=0x7f => out.push(len as u8),
            0x80..=0xff => out.extend_from_slice(&[0x81, len as u8]),
            _ => {
                out.push(0x82);
                out.extend_from_slice(&(len as u16).to_be_bytes());
            }
        }
        out.extend_from_slice(value);
        out
    }

    /// The curve OID (tag and length included) of a SEC1 ECPrivateKey (RFC 5915 §3):
    /// `SEQUENCE { version, privateKey OCTET STRING, [0] parameters OPTIONAL, ... }`.
    fn sec1_curve(key: &[u8]) -> Option<&[u8]> {
        let (tag, body, _) = der_element(key)?;
        if tag != 0x30 {
            return None;
        }
        let (_version, _, rest) = der_element(body).filter(|e| e.0 == 0x02)?;
        let (_private, _, rest) = der_element(rest).filter(|e| e.0 == 0x04)?;
        let (_, oid, _) = der_element(rest).filter(|e| e.0 == 0xa0)?;
        der_element(oid).filter(|e| e.0 == 0x06).map(|_| oid)
    }

    /// The first DER element of `input`: its tag, its value, what follows it.
    fn der_element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let (&tag, rest) = input.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = match first {
            0..=0x7f => (usize::from(first), rest),
            0x81 => (usize::from(*rest.first()?), &rest[1..]),
            0x82 => (
                usize::from(u16::from_be_bytes([*rest.first()?, *rest.get(1)?])),
                rest.get(2..)?,
            ),
            _ => return None,
        };
        let value = rest.get(..len)?;
        Some((tag, value, &rest[len..]))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn der_lengths_round_trip() {
            for len in [0usize, 1, 127, 128, 255, 256, 1000] {
                let value = vec![7u8; len];
                let element = der(0x04, &value);
                assert_eq!(der_element(&element), Some((0x04, &value[..], &[][..])));
            }
        }
    }
}

/// Issue 40 row 9: `--dtls-key` refused a SEC1 key (`openssl ecparam -genkey`) that
/// `--tls-key` took. Keys made with the openssl command line, as an operator makes them.
#[cfg(all(test, feature = "dtls", feature = "tcp"))]
mod tests {
    use std::path::Path;
    use std::process::Command;

    use backoffd::dtls::{CertifiedKey, Credentials};

    use super::*;

    fn openssl(dir: &Path, args: &[&str]) {
        let status = Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .output()
            .expect("the openssl command line");
        assert!(status.status.success(), "openssl {args:?}: {status:?}");
    }

    /// What `--dtls-key` makes of `key` with `cert`: the listener's configuration check.
    fn dtls(cert: &str, key: &str) -> Result<(), String> {
        let read = private_key("dtls-key", key).map_err(|e| e.0)?;
        let certified = CertifiedKey {
            chain: certificates("dtls-cert", cert).map_err(|e| e.0)?,
            key_pkcs8: as_pkcs8(&read)?,
        };
        backoffd::dtls::config::check(&Credentials {
            certificate: Some(certified),
            ..Credentials::default()
        })
    }

    /// What `--tls-key` makes of `key` with `cert`.
    fn tls(cert: &str, key: &str) -> Result<(), String> {
        let chain = certificates("tls-cert", cert).map_err(|e| e.0)?;
        let key = private_key("tls-key", key).map_err(|e| e.0)?;
        backoffd::coap_tcp::tls::server_config(chain, key)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn both_key_flags_read_pkcs8_pkcs1_and_sec1() {
        let dir = std::env::temp_dir().join(format!("backoffd-pem-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ec = ["ecparam", "-genkey", "-name", "prime256v1", "-noout"];
        openssl(&dir, &[&ec[..], &["-out", "ec-sec1.pem"]].concat());
        let to_pkcs8 = ["pkcs8", "-topk8", "-nocrypt", "-in", "ec-sec1.pem"];
        openssl(&dir, &[&to_pkcs8[..], &["-out", "ec-pkcs8.pem"]].concat());
        openssl(
            &dir,
            &["genrsa", "-traditional", "-out", "rsa-pkcs1.pem", "2048"],
        );
        for (key, cert) in [("ec-sec1.pem", "ec.crt"), ("rsa-pkcs1.pem", "rsa.crt")] {
            let req = [
                "req",
                "-new",
                "-x509",
                "-subj",
                "/CN=127.0.0.1",
                "-days",
                "2",
            ];
            openssl(&dir, &[&req[..], &["-key", key, "-out", cert]].concat());
        }
        let path = |f: &str| dir.join(f).to_str().unwrap().to_string();
        let (ec_cert, rsa_cert) = (path("ec.crt"), path("rsa.crt"));
        let forms = [
            ("ec-sec1.pem", "BEGIN EC PRIVATE KEY"),
            ("ec-pkcs8.pem", "BEGIN PRIVATE KEY"),
            ("rsa-pkcs1.pem", "BEGIN RSA PRIVATE KEY"),
        ];
        for (file, header) in forms {
            let text = std::fs::read_to_string(path(file)).unwrap();
            assert!(text.contains(header), "{file} is not {header}");
        }
        for ec_key in ["ec-sec1.pem", "ec-pkcs8.pem"] {
            assert_eq!(dtls(&ec_cert, &path(ec_key)), Ok(()), "--dtls-key {ec_key}");
            assert_eq!(tls(&ec_cert, &path(ec_key)), Ok(()), "--tls-key {ec_key}");
        }
        assert_eq!(tls(&rsa_cert, &path("rsa-pkcs1.pem")), Ok(()));
        // The reader takes the PKCS#1 file; the coaps suites then need an EC key, and say so.
        let rsa = dtls(&rsa_cert, &path("rsa-pkcs1.pem")).unwrap_err();
        assert!(rsa.contains("not an ECDSA"), "{rsa}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
