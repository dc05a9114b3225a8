//! A fast keyed hash for the engine's maps.
//!
//! The engine hashes a client's key (address, token, Message ID) several times per request,
//! and std's SipHash-1-3 costs about as much as the rest of a lookup. This is the
//! folded-multiply construction of foldhash and wyhash: each 8-byte word is mixed in with one
//! 64 x 64 -> 128-bit multiply by a secret, and the two halves of the product folded together.
//! The secrets are given to the engine (the driver draws them from the OS, apart from any
//! `--seed`), so, as with std's default, hash values differ per process and are never exposed:
//! a client cannot pick keys that collide to slow the maps down (HashDoS), short of learning
//! values that nothing reveals.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

/// A map hashed with [`KeyedState`].
pub(super) type KeyedMap<K, V> = HashMap<K, V, KeyedState>;

/// The secrets of the maps.
#[derive(Clone, Debug)]
pub(super) struct KeyedState {
    seed: u64,
    multiplier: u64,
}

impl KeyedState {
    /// Secrets from two random words.
    pub(super) fn new([seed, multiplier]: [u64; 2]) -> Self {
        KeyedState {
            seed,
            // Odd, so that no multiplication loses the low bit.
            multiplier: multiplier | 1,
        }
    }

    /// An empty map hashed with these secrets.
    pub(super) fn map<K, V>(&self) -> KeyedMap<K, V> {
        HashMap::with_hasher(self.clone())
    }
}

impl BuildHasher for KeyedState {
    type Hasher = KeyedHasher;

    fn build_hasher(&self) -> KeyedHasher {
        KeyedHasher {
            acc: self.seed,
            multiplier: self.multiplier,
        }
    }
}

/// One hash computation; see the module docs.
pub(super) struct KeyedHasher {
    acc: u64,
    multiplier: u64,
}

fn fold(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

impl KeyedHasher {
    fn mix(&mut self, word: u64) {
        self.acc = fold(self.acc ^ word, self.multiplier);
    }
}

impl Hasher for KeyedHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.mix(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            // The length tells "ab" from "ab\0".
            self.mix(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.mix(u64::from(n));
    }

    fn write_u16(&mut self, n: u16) {
        self.mix(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.mix(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.mix(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }

    fn finish(&self) -> u64 {
        fold(self.acc, self.multiplier ^ 0x9e37_79b9_7f4a_7c15)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::net::SocketAddr;

    fn secrets(n: u64) -> KeyedState {
        KeyedState::new([
            n.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            n ^ 0x1319_8a2e_0370_7344,
        ])
    }

    #[test]
    fn keys_that_differ_in_any_field_hash_apart_and_states_differ() {
        let state = secrets(1);
        let mut seen = HashSet::new();
        for port in 0..200u16 {
            for mid in 0..50u16 {
                let addr = SocketAddr::from(([127, 0, 0, 1], port));
                assert!(seen.insert(state.hash_one((addr, [0u8; 3], mid))));
            }
        }
        assert_ne!(
            state.hash_one(b"ab".as_slice()),
            state.hash_one(b"ab\0".as_slice())
        );
        let other = secrets(2);
        assert_ne!(state.hash_one(1u64), other.hash_one(1u64), "secret per key");
    }

    #[test]
    fn low_bits_spread_for_sequential_keys() {
        // hashbrown indexes buckets with the low bits and tags with the top 7.
        let state = secrets(3);
        let buckets: HashSet<u64> = (0..4096u16).map(|mid| state.hash_one(mid) & 4095).collect();
        assert!(
            buckets.len() > 2400,
            "{} of 4096 buckets used",
            buckets.len()
        );
    }
}
