//! The randomness the DTLS library draws, given to it from our seeds.
//!
//! rtc-dtls asks its crypto provider for random bytes (the server random, its cookie) through
//! a `Send + Sync` trait object taking `&self`. A core owns its seeded generator, so for the
//! length of each call into the library the server lends the generator to this thread
//! ([`lend`]) and takes it back after; the loop is single-threaded and nothing else runs in
//! between. Every call into the library is made inside a loan: records draw too (their
//! explicit nonces). A draw outside a loan fails, which fails that handshake rather than falling back
//! to a weaker source.
//!
//! The loan also carries the cookie this front already handed out (`cookie.rs`): the library
//! draws its cookie as its first random bytes of a handshake, and receives ours, so that the
//! ClientHello the client repeats with our cookie is the one it expects (`server.rs`).
//!
//! Key generation (ECDHE, RFC 8422) stays inside ring, which draws from the operating system:
//! secrets are not ours to seed.

use std::cell::RefCell;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::RngCore;
use rtc_dtls::crypto_provider::{CryptoError, RTCCrypto, RTCCryptoProvider, RTCRandom};

use super::cookie::COOKIE_LEN;

thread_local! {
    static LOAN: RefCell<Option<Loan>> = const { RefCell::new(None) };
}

struct Loan {
    rng: StdRng,
    cookie: Option<[u8; COOKIE_LEN]>,
}

/// Runs `f` with `rng` lent to the library's draws, and `cookie` as its next cookie.
pub fn lend<R>(
    rng: &mut Option<StdRng>,
    cookie: Option<[u8; COOKIE_LEN]>,
    f: impl FnOnce() -> R,
) -> R {
    let Some(lent) = rng.take() else {
        return f();
    };
    LOAN.with(|l| *l.borrow_mut() = Some(Loan { rng: lent, cookie }));
    let out = f();
    *rng = LOAN.with(|l| l.borrow_mut().take()).map(|loan| loan.rng);
    out
}

/// ring's cryptography with our draws.
pub struct SeededProvider {
    inner: Arc<dyn RTCCryptoProvider>,
    random: LentRandom,
}

impl SeededProvider {
    /// Wraps `inner` (ring's provider).
    pub fn new(inner: Arc<dyn RTCCryptoProvider>) -> Self {
        SeededProvider {
            inner,
            random: LentRandom,
        }
    }
}

impl RTCCryptoProvider for SeededProvider {
    fn name(&self) -> &'static str {
        "ring, seeded draws"
    }

    fn crypto(&self) -> &dyn RTCCrypto {
        self.inner.crypto()
    }

    fn random(&self) -> &dyn RTCRandom {
        &self.random
    }
}

struct LentRandom;

impl RTCRandom for LentRandom {
    fn fill(&self, output: &mut [u8]) -> Result<(), CryptoError> {
        LOAN.with(|l| {
            let mut loan = l.borrow_mut();
            let loan = loan.as_mut().ok_or_else(no_loan)?;
            match loan.cookie.take() {
                Some(cookie) if output.len() == COOKIE_LEN => output.copy_from_slice(&cookie),
                cookie => {
                    loan.cookie = cookie;
                    loan.rng.fill_bytes(output);
                }
            }
            Ok(())
        })
    }
}

fn no_loan() -> CryptoError {
    CryptoError::RandomnessFailed
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn draws_come_from_the_loan_and_the_cookie_first() {
        let provider = SeededProvider::new(rtc_dtls::crypto_provider::default_provider().unwrap());
        let mut rng = Some(StdRng::seed_from_u64(1));
        let mut out = [0u8; COOKIE_LEN];
        assert!(provider.random().fill(&mut out).is_err());
        let (mut long, mut cookie) = ([0u8; 28], [0u8; COOKIE_LEN]);
        lend(&mut rng, Some([5; COOKIE_LEN]), || {
            provider.random().fill(&mut long).unwrap();
            provider.random().fill(&mut cookie).unwrap();
            provider.random().fill(&mut out).unwrap();
        });
        assert_eq!(cookie, [5; COOKIE_LEN]);
        assert_ne!(out, [5; COOKIE_LEN]);
        assert_ne!(long, [0; 28]);
        assert!(rng.is_some(), "the generator comes back");
    }
}
