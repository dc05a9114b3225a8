//! The Echo option (RFC 9175 §2): a value a server hands a client in a 4.01 and the client
//! repeats in its next request, showing that it receives at the address it claims (§2.4,
//! address validation against amplification).
//!
//! A value from the network is untrusted input: [`decode`] checks its length (1 to 40
//! bytes, §2.2.1) and returns an error otherwise. A value this proxy issues is
//! [`EchoKey::issue`]: a coarse time and a MAC over the client's address and that time, so
//! that the proxy keeps no state for a source until it has shown it is real, and
//! [`EchoKey::verify`] tells a fresh value of its own from a stale, forged or foreign one.
//! The MAC is SipHash-2-4 (a PRF with a 128-bit key) under a key the engine is given, never
//! drawn here.

use std::net::SocketAddr;
use std::time::Duration;

use crate::time::Timestamp;

/// RFC 9175 §2.2.1: an Echo value is 1 to 40 bytes long.
pub const MAX_ECHO_LEN: usize = 40;

/// Bytes of a value this proxy issues: 4 of time (seconds) and 8 of MAC.
pub const ISSUED_LEN: usize = 12;

/// A decoded Echo value (a view of the option's bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Echo<'a>(pub &'a [u8]);

error_enum! {
    /// Why an Echo value from the network is refused.
    EchoError {
        Empty => "Echo option is empty (RFC 9175 §2.2.1: 1 to 40 bytes)",
        TooLong => "Echo option longer than 40 bytes (RFC 9175 §2.2.1)",
        NotOurs => "Echo value is not one this proxy issues",
        Forged => "Echo value's MAC does not match this source",
        Stale => "Echo value is older than its lifetime (or from the future)",
    }
}

/// Decodes an Echo option's value: its length is all there is to check (§2.2.1).
pub fn decode(value: &[u8]) -> Result<Echo<'_>, EchoError> {
    match value.len() {
        0 => Err(EchoError::Empty),
        1..=MAX_ECHO_LEN => Ok(Echo(value)),
        _ => Err(EchoError::TooLong),
    }
}

/// The secret under which the proxy issues and verifies its Echo values.
#[derive(Clone, Copy, Debug)]
pub struct EchoKey {
    k: [u64; 2],
}

impl EchoKey {
    /// A key from 128 secret bits (the engine's hash secrets, drawn by the driver).
    pub fn new(k: [u64; 2]) -> Self {
        EchoKey { k }
    }

    /// The value for `client` at `now`.
    pub fn issue(&self, client: SocketAddr, now: Timestamp) -> [u8; ISSUED_LEN] {
        let secs = (now.as_nanos() / 1_000_000_000) as u32;
        let mut out = [0; ISSUED_LEN];
        out[..4].copy_from_slice(&secs.wrapping_add(self.offset()).to_be_bytes());
        out[4..].copy_from_slice(&self.mac(client, secs).to_be_bytes());
        out
    }

    /// Whether `echo` is a value this key issued to `client` at most `lifetime` before `now`.
    pub fn verify(
        &self,
        echo: Echo<'_>,
        client: SocketAddr,
        now: Timestamp,
        lifetime: Duration,
    ) -> Result<(), EchoError> {
        let v: &[u8; ISSUED_LEN] = echo.0.try_into().map_err(|_| EchoError::NotOurs)?;
        let secs = u32::from_be_bytes([v[0], v[1], v[2], v[3]]).wrapping_sub(self.offset());
        let mac = u64::from_be_bytes([v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11]]);
        if mac != self.mac(client, secs) {
            return Err(EchoError::Forged);
        }
        let now_secs = now.as_nanos() / 1_000_000_000;
        match now_secs.checked_sub(u64::from(secs)) {
            Some(age) if age <= lifetime.as_secs() => Ok(()),
            _ => Err(EchoError::Stale),
        }
    }

    /// Added to the clock in a value, so that the value does not tell the host's uptime (the
    /// clock is monotonic, counted from boot): a secret of the key's, the same for every value.
    fn offset(&self) -> u32 {
        siphash24(self.k, b"echo clock offset") as u32
    }

    fn mac(&self, client: SocketAddr, secs: u32) -> u64 {
        let mut msg = [0u8; 16 + 2 + 4];
        let ip = match client.ip() {
            std::net::IpAddr::V4(ip) => ip.to_ipv6_mapped(),
            std::net::IpAddr::V6(ip) => ip,
        };
        msg[..16].copy_from_slice(&ip.octets());
        msg[16..18].copy_from_slice(&client.port().to_be_bytes());
        msg[18..].copy_from_slice(&secs.to_be_bytes());
        siphash24(self.k, &msg)
    }
}

/// SipHash-2-4 (Aumasson and Bernstein, 2012) of `msg` under the key `(k0, k1)`.
fn siphash24([k0, k1]: [u64; 2], msg: &[u8]) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    let mut chunks = msg.chunks_exact(8);
    for chunk in &mut chunks {
        let m = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        v[3] ^= m;
        (0..2).for_each(|_| sipround(&mut v));
        v[0] ^= m;
    }
    let mut last = [0u8; 8];
    last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    last[7] = msg.len() as u8;
    let b = u64::from_le_bytes(last);
    v[3] ^= b;
    (0..2).for_each(|_| sipround(&mut v));
    v[0] ^= b;
    v[2] ^= 0xff;
    (0..4).for_each(|_| sipround(&mut v));
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

fn sipround(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siphash_matches_the_papers_test_vector() {
        let k = [0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908];
        let msg: Vec<u8> = (0..15).collect();
        assert_eq!(siphash24(k, &msg), 0xa129_ca61_49be_45e5);
    }

    #[test]
    fn decode_takes_1_to_40_bytes() {
        assert_eq!(decode(&[]), Err(EchoError::Empty));
        assert_eq!(decode(&[7]), Ok(Echo(&[7])));
        assert!(decode(&[0; 40]).is_ok());
        assert_eq!(decode(&[0; 41]), Err(EchoError::TooLong));
    }

    #[test]
    fn a_value_does_not_tell_the_hosts_uptime() {
        // Issue 25: the first 4 bytes were the monotonic clock, in seconds since boot.
        let at = Timestamp::from_nanos(1000 * 1_000_000_000);
        let a: SocketAddr = "192.0.2.1:5683".parse().unwrap();
        let clock = |k: EchoKey| u32::from_be_bytes(k.issue(a, at)[..4].try_into().unwrap());
        let (one, two) = (clock(EchoKey::new([1, 2])), clock(EchoKey::new([3, 4])));
        assert!(one != 1000 && two != 1000 && one != two, "{one} {two}");
    }

    #[test]
    fn an_issued_value_verifies_for_its_source_while_fresh_only() {
        let key = EchoKey::new([1, 2]);
        let (a, b): (SocketAddr, SocketAddr) = (
            "192.0.2.1:5683".parse().unwrap(),
            "192.0.2.1:5684".parse().unwrap(),
        );
        let at = |s: u64| Timestamp::from_nanos(s * 1_000_000_000);
        let life = Duration::from_secs(60);
        let v = key.issue(a, at(1000));
        assert_eq!(key.verify(Echo(&v), a, at(1060), life), Ok(()));
        assert_eq!(
            key.verify(Echo(&v), a, at(1061), life),
            Err(EchoError::Stale)
        );
        assert_eq!(
            key.verify(Echo(&v), a, at(999), life),
            Err(EchoError::Stale)
        );
        assert_eq!(
            key.verify(Echo(&v), b, at(1000), life),
            Err(EchoError::Forged)
        );
        let other = EchoKey::new([1, 3]);
        assert_eq!(
            other.verify(Echo(&v), a, at(1000), life),
            Err(EchoError::Forged)
        );
        assert_eq!(
            key.verify(Echo(&v[..11]), a, at(1000), life),
            Err(EchoError::NotOurs)
        );
        let mut flipped = v;
        flipped[3] ^= 1;
        assert_eq!(
            key.verify(Echo(&flipped), a, at(1000), life),
            Err(EchoError::Forged)
        );
    }
}
