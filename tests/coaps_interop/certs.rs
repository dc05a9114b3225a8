//! Certificates for the coaps tests, made at test time: a CA, a server certificate for
//! 127.0.0.1 signed by it, a client certificate signed by it, and an unrelated CA.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

/// PEM files under a directory.
pub struct Pki {
    pub ca: PathBuf,
    pub other_ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

fn ca(name: &str) -> (rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    (params.self_signed(&key).unwrap(), key)
}

fn leaf(
    names: &[&str],
    cn: &str,
    ca: &rcgen::Certificate,
    ca_key: &KeyPair,
) -> (rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    (params.signed_by(&key, ca, ca_key).unwrap(), key)
}

/// Writes a fresh PKI under `dir`.
pub fn make(dir: &Path) -> Pki {
    let (ca_cert, ca_key) = ca("backoffd test CA");
    let (other, _) = ca("someone else's CA");
    let (server, server_key) = leaf(&["127.0.0.1", "localhost"], "127.0.0.1", &ca_cert, &ca_key);
    let (client, client_key) = leaf(&["client.test"], "client1", &ca_cert, &ca_key);
    let write = |name: &str, pem: String| {
        let path = dir.join(name);
        std::fs::write(&path, pem).unwrap();
        path
    };
    Pki {
        ca: write("ca.pem", ca_cert.pem()),
        other_ca: write("other-ca.pem", other.pem()),
        server_cert: write("server.pem", server.pem()),
        server_key: write("server.key", server_key.serialize_pem()),
        client_cert: write("client.pem", client.pem()),
        client_key: write("client.key", client_key.serialize_pem()),
    }
}
