//! Stateless cookies (RFC 6347 §4.2.1): a server that keeps nothing for a ClientHello
//! without a valid cookie cannot be made to hold state, or to send much, by a forged
//! source address.
//!
//! `Cookie = HMAC-SHA256(Secret_n, client address, ClientHello without its cookie)`, cut
//! to 20 bytes, as the RFC suggests. `Secret_n` is derived from one key for each period
//! `n` of [`PERIOD`]; a cookie from the current or the previous period is valid, so one
//! handed out just before a rotation still works, and none lives longer than two periods.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rtc_dtls::crypto_provider::{constant_time_eq, HmacAlgorithm, RTCCryptoProvider};

use crate::time::Timestamp;

/// The cookie length: what rtc-dtls draws for its own cookies, and what we hand it.
pub const COOKIE_LEN: usize = 20;
/// How long one secret signs cookies.
pub const PERIOD: Duration = Duration::from_secs(60);

/// Makes and checks cookies.
pub struct CookieJar {
    key: [u8; 32],
    crypto: Arc<dyn RTCCryptoProvider>,
}

impl CookieJar {
    /// A jar whose secrets derive from `key` (from the seeds; never sent).
    pub fn new(key: [u8; 32], crypto: Arc<dyn RTCCryptoProvider>) -> Self {
        CookieJar { key, crypto }
    }

    /// The cookie for a hello from `from` at `now`, whose body around the cookie is `hello`.
    pub fn cookie(&self, now: Timestamp, from: SocketAddr, hello: [&[u8]; 2]) -> [u8; COOKIE_LEN] {
        self.sign(period(now), from, hello)
    }

    /// Whether `cookie` is one this jar handed `from` for this hello, now or a period ago.
    pub fn is_valid(
        &self,
        now: Timestamp,
        from: SocketAddr,
        hello: [&[u8]; 2],
        cookie: &[u8],
    ) -> bool {
        let n = period(now);
        [Some(n), n.checked_sub(1)]
            .into_iter()
            .flatten()
            .any(|p| constant_time_eq(&self.sign(p, from, hello), cookie))
    }

    fn sign(&self, period: u64, from: SocketAddr, hello: [&[u8]; 2]) -> [u8; COOKIE_LEN] {
        let mut out = [0; COOKIE_LEN];
        let mut full = [0u8; 32];
        let address = address_bytes(from);
        let signed = self
            .crypto
            .crypto()
            .new_hmac(HmacAlgorithm::Sha256, &self.key)
            .and_then(|mut mac| {
                let parts: [&[u8]; 4] = [&period.to_be_bytes(), &address, hello[0], hello[1]];
                mac.sign(&parts, &mut full)
            });
        // The provider is ring's, whose HMAC-SHA256 cannot fail; were it to, an all-zero
        // cookie would only make every hello ask again.
        if signed.is_ok() {
            out.copy_from_slice(&full[..COOKIE_LEN]);
        }
        out
    }
}

fn period(now: Timestamp) -> u64 {
    now.as_nanos() / PERIOD.as_nanos() as u64
}

/// The address as 18 bytes (IPv6, IPv4 mapped) and the port.
fn address_bytes(addr: SocketAddr) -> [u8; 18] {
    let ip = match addr {
        SocketAddr::V4(a) => a.ip().to_ipv6_mapped(),
        SocketAddr::V6(a) => *a.ip(),
    };
    let mut out = [0; 18];
    out[..16].copy_from_slice(&ip.octets());
    out[16..].copy_from_slice(&addr.port().to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtc_dtls::crypto_provider::default_provider;

    fn jar() -> CookieJar {
        CookieJar::new([9; 32], default_provider().unwrap())
    }

    #[test]
    fn a_cookie_is_valid_for_its_address_and_hello_for_one_period_more() {
        let (jar, a, b) = (
            jar(),
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
        );
        let hello: [&[u8]; 2] = [b"before", b"after"];
        let t = Timestamp::from_nanos(10 * PERIOD.as_nanos() as u64);
        let c = jar.cookie(t, a, hello);
        assert!(jar.is_valid(t, a, hello, &c));
        assert!(jar.is_valid(t + PERIOD, a, hello, &c));
        assert!(!jar.is_valid(t + PERIOD * 2, a, hello, &c));
        assert!(!jar.is_valid(t, b, hello, &c));
        assert!(!jar.is_valid(t, a, [b"before", b"other"], &c));
        assert!(!jar.is_valid(t, a, hello, &c[..19]));
        let other = CookieJar::new([8; 32], default_provider().unwrap());
        assert!(!other.is_valid(t, a, hello, &c));
    }
}
