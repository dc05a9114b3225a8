//! Registration keys handed out in ranges, so that no part of a component hard-codes another's.
//!
//! The loop routes readiness and timers by the `u32` key a component chose ([`super::Ctx::register`],
//! [`super::Ctx::set_timer`]). A component made of parts (the proxy: its UDP sockets, its coaps
//! listener, its stream listeners and their connections, its upstream connections) gives each part a
//! [`KeyRange`] of its own from one [`KeySpace`]: the part numbers its sockets within its range, and
//! the component routes a key to the part whose range holds it. Adding a part takes another range;
//! nothing else moves.

/// The keys not handed out yet: `[next, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeySpace {
    next: u32,
    end: u32,
}

/// A run of `len` keys from `base`, owned by one part of a component.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyRange {
    base: u32,
    len: u32,
}

/// The space has no room for the range asked for: a configuration with more parts (or more
/// sockets per part) than the component's keys hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeysExhausted;

impl KeySpace {
    /// The keys `[start, end)`.
    pub const fn new(start: u32, end: u32) -> Self {
        KeySpace { next: start, end }
    }

    /// The next `len` keys.
    pub fn take(&mut self, len: u32) -> Result<KeyRange, KeysExhausted> {
        let end = self.next.checked_add(len).ok_or(KeysExhausted)?;
        if end > self.end {
            return Err(KeysExhausted);
        }
        let range = KeyRange {
            base: self.next,
            len,
        };
        self.next = end;
        Ok(range)
    }
}

impl KeyRange {
    /// The range's `i`th key, if it has one.
    pub fn key(self, i: u32) -> Option<u32> {
        (i < self.len).then(|| self.base + i)
    }

    /// Which of the range's keys `key` is, if it is one of them.
    pub fn index(self, key: u32) -> Option<u32> {
        let i = key.checked_sub(self.base)?;
        (i < self.len).then_some(i)
    }

    /// Whether `key` is one of the range's.
    pub fn owns(self, key: u32) -> bool {
        self.index(key).is_some()
    }

    /// How many keys it has.
    pub fn len(self) -> u32 {
        self.len
    }

    /// Its keys as a space of their own, for a part that hands ranges to parts of its own.
    pub fn space(self) -> KeySpace {
        KeySpace::new(self.base, self.base + self.len)
    }

    /// Whether it has none (a part that registers nothing).
    pub fn is_empty(self) -> bool {
        self.len == 0
    }
}

impl From<KeysExhausted> for std::io::Error {
    fn from(_: KeysExhausted) -> Self {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "more sockets than the component's registration keys hold",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_do_not_overlap_and_own_only_their_keys() {
        let mut space = KeySpace::new(10, 100);
        let a = space.take(5).unwrap();
        let b = space.take(1).unwrap();
        assert_eq!((a.key(0), a.key(4), a.key(5)), (Some(10), Some(14), None));
        assert_eq!(b.key(0), Some(15));
        assert!(a.owns(14) && !a.owns(15) && !a.owns(9));
        assert_eq!((b.index(15), b.index(16)), (Some(0), None));
        assert_eq!(space.take(85), Err(KeysExhausted));
        assert_eq!(space.take(84).map(KeyRange::len), Ok(84));
        assert_eq!(space.take(1), Err(KeysExhausted));
        let mut huge = KeySpace::new(u32::MAX - 1, u32::MAX);
        assert_eq!(huge.take(u32::MAX), Err(KeysExhausted));
    }
}
