//! [`SlotId`]: a table's slot and that slot's generation, the name by which a transport core
//! and the engine speak of one of the core's sessions or connections.
//!
//! It lives low, at crate level, because both sides need it and neither may depend on the
//! other: the transport cores (the DTLS session table, the stream connection table) hand it
//! out, and the engine keys a client by it. A core that took it from the engine would depend
//! on what it serves.

/// A DTLS session's name in the session table (RFC 7252 §9).
pub type SessionId = SlotId;
/// A stream connection's name in the stream listener's table (RFC 8323).
pub type ConnectionId = SlotId;

/// A session's or connection's name: its slot in its table and that slot's generation, so
/// that an answer for one that has ended cannot reach the one that took its slot. Two u32
/// halves, like the engine's in-process client numbers, so that a name keeps a socket
/// address's 4-byte alignment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotId([u32; 2]);

impl SlotId {
    /// Slot `index` in its `generation`.
    pub fn new(index: u32, generation: u32) -> Self {
        SlotId([index, generation])
    }

    /// The slot.
    pub fn index(self) -> u32 {
        self.0[0]
    }

    /// The slot's generation.
    pub fn generation(self) -> u32 {
        self.0[1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_reused_in_a_new_generation_is_another_name() {
        let old = SlotId::new(3, 9);
        let new = SlotId::new(3, 10);
        assert_eq!((old.index(), old.generation()), (3, 9));
        assert_eq!(old.index(), new.index());
        assert_ne!(old, new);
    }
}
