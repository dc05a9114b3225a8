//! The timer wheel's implementation: a hashed hierarchical timing wheel (Varghese & Lauck,
//! "Hashed and Hierarchical Timing Wheels", scheme 7) whose timers live in a slab.
//!
//! What it guarantees: insert and cancel in O(1), deadlines kept exactly in nanoseconds, a timer
//! never fires before its deadline, and [`TimerWheel::next_deadline`] names the instant to wake
//! up at (never after the earliest deadline) rather than a rounded tick. How late a timer fires
//! is up to the wake-up source alone.
//!
//! Layout (like tokio's wheel): time is counted in ticks of [`TICK_NANOS`] (1024 ns), and there
//! are [`LEVELS`] levels of 64 slots. A slot at level `L` spans `64^L` ticks, so level 0 covers
//! the current aligned block of 64 ticks, level 1 that of 4096, and so on. The wheel remembers
//! `elapsed`, the tick up to which it has been processed. A timer goes to the level of the
//! highest 6-bit digit in which its tick differs from `elapsed`: near timers at level 0, far ones
//! higher up. When a higher-level slot comes due, its timers move down ("cascade") to finer slots.
//!
//! Each level keeps a 64-bit bitmap of occupied slots, so finding the next slot to expire is a
//! `rotate_right` and a `trailing_zeros` per level: no scanning, and no work for empty ticks.
//!
//! The tick only picks a slot; it never rounds a deadline. Level-0 slots are kept sorted by
//! deadline, a level-0 timer fires only once `now >= deadline`, and every slot remembers a lower
//! bound of its deadlines (exact unless the earliest was cancelled), from which `next_deadline`
//! is computed.
//!
//! Nodes live in a [`Slab`] and each slot is a doubly linked list through them, so insert and
//! cancel are O(1). (A level-0 insert walks back from the tail past later deadlines: O(1) when
//! deadlines arrive in order, and otherwise bounded by the timers within one tick.) A
//! [`TimerId`] carries a generation, so cancelling a timer that already fired, even after its
//! slab slot was reused, is a harmless no-op.

use std::num::NonZeroU32;

use slab::Slab;

use crate::time::Timestamp;

/// log2 of the tick length: one tick is 1024 ns.
const TICK_SHIFT: u32 = 10;
/// Length of one tick in nanoseconds.
pub const TICK_NANOS: u64 = 1 << TICK_SHIFT;
/// log2 of the slots per level.
const SLOT_BITS: u32 = 6;
const SLOTS: usize = 1 << SLOT_BITS;
/// 9 levels x 6 bits cover all 54 bits of a nanosecond `u64` in ticks, so every deadline up to
/// 584 years ahead has its own slot: no overflow list, no clamping, nothing to rescan.
pub const LEVELS: usize = 9;
/// End-of-list marker for the intrusive slot lists.
const NIL: u32 = u32::MAX;

/// A handle to a scheduled timer. Stale handles are harmless: see [`TimerWheel::cancel`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct TimerId {
    index: u32,
    generation: NonZeroU32,
}

/// A timer that [`TimerWheel::poll`] found due.
#[derive(Debug, PartialEq, Eq)]
pub struct Expired<T> {
    /// The handle [`TimerWheel::insert`] returned; it is stale from now on.
    pub id: TimerId,
    /// The exact deadline it was inserted with (never later than the `now` it was polled at).
    pub deadline: Timestamp,
    /// The value given to [`TimerWheel::insert`].
    pub value: T,
}

struct Node<T> {
    deadline: u64,
    prev: u32,
    next: u32,
    generation: NonZeroU32,
    /// `level * SLOTS + slot`, so cancel knows which list and bitmap bit to touch.
    slot: u16,
    value: T,
}

#[derive(Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
}

const EMPTY_LIST: List = List {
    head: NIL,
    tail: NIL,
};

struct Level {
    /// Bit `s` is set iff `slots[s]` is non-empty.
    occupied: u64,
    slots: [List; SLOTS],
    /// A lower bound of the deadlines (ns) in each slot: exact unless the earliest was cancelled.
    earliest: [u64; SLOTS],
}

/// The timing wheel. `T` is the caller's payload, returned when the timer fires or is cancelled.
///
/// The wheel never reads a clock: the caller passes `now` to [`poll`](Self::poll), so it runs
/// just as well in virtual time.
///
/// ```
/// use backoffd::time::Timestamp;
/// use backoffd::timer::TimerWheel;
///
/// let mut wheel = TimerWheel::new();
/// let ms = |n: u64| Timestamp::from_nanos(n * 1_000_000);
/// wheel.insert(ms(20), "later");
/// let early = wheel.insert(ms(10), "sooner");
/// assert_eq!(wheel.next_deadline(), Some(ms(10)));
///
/// assert!(wheel.poll(ms(9)).is_none()); // never early
/// let fired = wheel.poll(ms(25)).unwrap(); // earliest first
/// assert_eq!((fired.id, fired.value), (early, "sooner"));
/// assert_eq!(wheel.cancel(early), None); // a stale handle is harmless
/// assert_eq!(wheel.poll(ms(25)).unwrap().value, "later");
/// assert!(wheel.is_empty());
/// ```
pub struct TimerWheel<T> {
    nodes: Slab<Node<T>>,
    levels: Box<[Level; LEVELS]>,
    /// Every slot before this tick has been processed.
    elapsed: u64,
    next_generation: NonZeroU32,
}

impl<T> Default for TimerWheel<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> TimerWheel<T> {
    /// An empty wheel at tick 0.
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// Pre-allocates room for `n` live timers, so a known load never reallocates the slab.
    pub fn with_capacity(n: usize) -> Self {
        let empty_level = || Level {
            occupied: 0,
            slots: [EMPTY_LIST; SLOTS],
            earliest: [u64::MAX; SLOTS],
        };
        TimerWheel {
            nodes: Slab::with_capacity(n),
            levels: Box::new(std::array::from_fn(|_| empty_level())),
            elapsed: 0,
            next_generation: NonZeroU32::MIN,
        }
    }

    /// Number of live timers.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Schedules `value` to fire at `deadline` (a deadline in the past fires at the next poll).
    /// Timers with equal deadlines fire in insertion order.
    pub fn insert(&mut self, deadline: Timestamp, value: T) -> TimerId {
        let generation = self.next_generation;
        self.next_generation =
            NonZeroU32::new(generation.get().wrapping_add(1)).unwrap_or(NonZeroU32::MIN);
        let index = self.nodes.insert(Node {
            deadline: deadline.as_nanos(),
            prev: NIL,
            next: NIL,
            generation,
            slot: 0,
            value,
        });
        let index = u32::try_from(index).expect("more than 2^32 live timers");
        self.place(index);
        TimerId { index, generation }
    }

    /// Cancels a timer and returns its payload; `None` (and no effect) for a stale handle.
    pub fn cancel(&mut self, id: TimerId) -> Option<T> {
        self.live(id)?;
        Some(self.remove(id.index))
    }

    /// The deadline of a live timer, `None` for a stale handle.
    pub fn deadline(&self, id: TimerId) -> Option<Timestamp> {
        self.live(id).map(|n| Timestamp::from_nanos(n.deadline))
    }

    /// The instant the caller should next call [`poll`](Self::poll): the earliest deadline, or a
    /// lower bound of it (never later) when the earliest timer of a coarse slot was cancelled.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        let (level, slot, start) = self.next_slot()?;
        let ns = match level {
            0 => self.nodes[self.levels[0].slots[slot].head as usize].deadline,
            l => (start << TICK_SHIFT).max(self.levels[l].earliest[slot]),
        };
        Some(Timestamp::from_nanos(ns))
    }

    /// Removes and returns one timer whose deadline is `<= now`, earliest first; `None` when none
    /// is due. Call it in a loop after every wake-up. The cost is proportional to the timers fired
    /// plus the cascades their slots needed.
    pub fn poll(&mut self, now: Timestamp) -> Option<Expired<T>> {
        let now_ns = now.as_nanos();
        let now_tick = now_ns >> TICK_SHIFT;
        loop {
            let Some((level, slot, start)) = self.next_slot() else {
                self.elapsed = self.elapsed.max(now_tick);
                return None;
            };
            if start > now_tick {
                self.elapsed = self.elapsed.max(now_tick);
                return None;
            }
            self.elapsed = self.elapsed.max(start);
            if level > 0 {
                self.cascade(level, slot);
                continue;
            }
            let head = self.levels[0].slots[slot].head;
            let node = &self.nodes[head as usize];
            if node.deadline > now_ns {
                return None;
            }
            let (id, deadline) = (
                TimerId {
                    index: head,
                    generation: node.generation,
                },
                Timestamp::from_nanos(node.deadline),
            );
            let value = self.remove(head);
            return Some(Expired {
                id,
                deadline,
                value,
            });
        }
    }

    fn live(&self, id: TimerId) -> Option<&Node<T>> {
        self.nodes
            .get(id.index as usize)
            .filter(|n| n.generation == id.generation)
    }

    /// The earliest occupied slot: `(level, slot, first tick it covers)`. Lower levels always
    /// expire before higher ones, so the first level with a set bit holds the answer.
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        self.levels
            .iter()
            .enumerate()
            .find(|(_, l)| l.occupied != 0)
            .map(|(level, l)| {
                let shift = SLOT_BITS * level as u32;
                let current = ((self.elapsed >> shift) as u32) & (SLOTS as u32 - 1);
                let distance = u64::from(l.occupied.rotate_right(current).trailing_zeros());
                let slot = (current as usize + distance as usize) % SLOTS;
                let start = ((self.elapsed >> shift) + distance) << shift;
                (level, slot, start)
            })
    }

    /// Links node `index` into the slot its deadline belongs to, relative to `elapsed`.
    fn place(&mut self, index: u32) {
        let deadline = self.nodes[index as usize].deadline;
        // A deadline already past goes to the current tick (it fires at the next poll).
        let tick = (deadline >> TICK_SHIFT).max(self.elapsed);
        let level = level_for(self.elapsed, tick);
        let slot = ((tick >> (SLOT_BITS * level as u32)) as usize) % SLOTS;
        let lvl = &mut self.levels[level];
        lvl.occupied |= 1 << slot;
        lvl.earliest[slot] = lvl.earliest[slot].min(deadline);
        self.nodes[index as usize].slot = (level * SLOTS + slot) as u16;
        if level == 0 {
            self.link_sorted(index);
        } else {
            self.link_after(index, self.list(level, slot).tail);
        }
    }

    /// Moves every timer of a due higher-level slot down to where it now belongs.
    fn cascade(&mut self, level: usize, slot: usize) {
        let mut cursor = self.take_list(level, slot);
        while cursor != NIL {
            let next = self.nodes[cursor as usize].next;
            self.place(cursor);
            cursor = next;
        }
    }

    fn list(&self, level: usize, slot: usize) -> List {
        self.levels[level].slots[slot]
    }

    fn list_mut(&mut self, code: u16) -> &mut List {
        let (level, slot) = (code as usize / SLOTS, code as usize % SLOTS);
        &mut self.levels[level].slots[slot]
    }

    /// Empties a slot and returns its first node; the nodes stay chained through `next`.
    fn take_list(&mut self, level: usize, slot: usize) -> u32 {
        let lvl = &mut self.levels[level];
        let head = lvl.slots[slot].head;
        lvl.slots[slot] = EMPTY_LIST;
        lvl.occupied &= !(1 << slot);
        lvl.earliest[slot] = u64::MAX;
        head
    }

    /// Inserts into a level-0 list after the last node with a deadline `<=` this one, which keeps
    /// the list sorted and equal deadlines in insertion order.
    fn link_sorted(&mut self, index: u32) {
        let code = self.nodes[index as usize].slot;
        let deadline = self.nodes[index as usize].deadline;
        let mut after = self.list_mut(code).tail;
        while after != NIL && self.nodes[after as usize].deadline > deadline {
            after = self.nodes[after as usize].prev;
        }
        self.link_after(index, after);
    }

    /// Links `index` after `after` (`NIL` = at the head) in the node's own slot list.
    fn link_after(&mut self, index: u32, after: u32) {
        let code = self.nodes[index as usize].slot;
        let next = if after == NIL {
            self.list_mut(code).head
        } else {
            self.nodes[after as usize].next
        };
        let node = &mut self.nodes[index as usize];
        node.prev = after;
        node.next = next;
        match after {
            NIL => self.list_mut(code).head = index,
            a => self.nodes[a as usize].next = index,
        }
        match next {
            NIL => self.list_mut(code).tail = index,
            n => self.nodes[n as usize].prev = index,
        }
    }

    /// Unlinks a node from its slot list and frees it.
    fn remove(&mut self, index: u32) -> T {
        let node = self.nodes.remove(index as usize);
        let code = node.slot;
        match node.prev {
            NIL => self.list_mut(code).head = node.next,
            p => self.nodes[p as usize].next = node.next,
        }
        match node.next {
            NIL => self.list_mut(code).tail = node.prev,
            n => self.nodes[n as usize].prev = node.prev,
        }
        if self.list_mut(code).head == NIL {
            let (level, slot) = (code as usize / SLOTS, code as usize % SLOTS);
            self.levels[level].occupied &= !(1 << slot);
            self.levels[level].earliest[slot] = u64::MAX;
        }
        node.value
    }
}

impl<T> TimerWheel<T> {
    /// A listing of every occupied slot, for test failure messages.
    #[doc(hidden)]
    pub fn debug_dump(&self) -> String {
        let mut s = format!(
            "elapsed={} ({}ns)\n",
            self.elapsed,
            self.elapsed << TICK_SHIFT
        );
        for (l, lvl) in self.levels.iter().enumerate() {
            for slot in 0..SLOTS {
                let mut c = lvl.slots[slot].head;
                if c == NIL {
                    continue;
                }
                s += &format!(
                    "L{l} s{slot} earliest={} bit={}:",
                    lvl.earliest[slot],
                    lvl.occupied >> slot & 1
                );
                while c != NIL {
                    s += &format!(" {}", self.nodes[c as usize].deadline);
                    c = self.nodes[c as usize].next;
                }
                s += "\n";
            }
        }
        s
    }
}

/// The level whose digit is the highest in which `tick` differs from `elapsed`.
fn level_for(elapsed: u64, tick: u64) -> usize {
    let masked = (elapsed ^ tick) | (SLOTS as u64 - 1);
    let significant = 63 - masked.leading_zeros();
    // Ticks have at most 54 significant bits, so this is at most LEVELS - 1.
    (significant / SLOT_BITS) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(ns: u64) -> Timestamp {
        Timestamp::from_nanos(ns)
    }

    fn drain(w: &mut TimerWheel<u32>, now: u64) -> Vec<u32> {
        std::iter::from_fn(|| w.poll(at(now)).map(|e| e.value)).collect()
    }

    #[test]
    fn never_fires_before_its_deadline_even_within_one_tick() {
        let mut w = TimerWheel::new();
        w.insert(at(1_000_500), 1);
        assert_eq!(drain(&mut w, 1_000_499), Vec::<u32>::new());
        assert_eq!(w.next_deadline(), Some(at(1_000_500)));
        assert_eq!(drain(&mut w, 1_000_500), vec![1]);
    }

    #[test]
    fn next_deadline_is_exact_for_far_timers() {
        let mut w = TimerWheel::new();
        let ns = 37_123_456_789;
        w.insert(at(ns), 7);
        assert_eq!(w.next_deadline(), Some(at(ns)));
        assert_eq!(drain(&mut w, ns - 1), Vec::<u32>::new());
        assert_eq!(w.next_deadline(), Some(at(ns)));
        assert_eq!(drain(&mut w, ns), vec![7]);
        assert!(w.is_empty());
    }

    #[test]
    fn equal_deadlines_fire_in_insertion_order() {
        let mut w = TimerWheel::new();
        for v in 0..100 {
            w.insert(at(5_000_000_000), v);
        }
        w.insert(at(4_999_999_999), 1000);
        let fired = drain(&mut w, 6_000_000_000);
        assert_eq!(fired[0], 1000);
        assert_eq!(&fired[1..], (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn stale_handle_cancel_is_a_no_op_after_slot_reuse() {
        let mut w = TimerWheel::new();
        let old = w.insert(at(10), 1);
        assert_eq!(drain(&mut w, 10), vec![1]);
        let new = w.insert(at(20), 2);
        assert_eq!(old.index, new.index, "slab slot reused");
        assert_eq!(w.cancel(old), None);
        assert_eq!(w.deadline(old), None);
        assert_eq!(w.deadline(new), Some(at(20)));
        assert_eq!(w.cancel(new), Some(2));
        assert_eq!(w.cancel(new), None);
    }

    #[test]
    fn past_deadline_fires_at_next_poll() {
        let mut w = TimerWheel::new();
        drain(&mut w, 10_000_000);
        w.insert(at(5), 1);
        assert_eq!(w.next_deadline(), Some(at(5)));
        assert_eq!(drain(&mut w, 10_000_001), vec![1]);
    }

    #[test]
    fn range_covers_two_to_the_32_milliseconds_and_beyond() {
        let mut w = TimerWheel::new();
        let far = at(0) + Duration::from_millis(1 << 32);
        let farther = at(u64::MAX - 1);
        w.insert(farther, 2);
        w.insert(far, 1);
        assert_eq!(w.next_deadline().map(|d| d <= far), Some(true));
        assert_eq!(drain(&mut w, far.as_nanos() - 1), Vec::<u32>::new());
        assert_eq!(drain(&mut w, far.as_nanos()), vec![1]);
        // The over-range timer is re-placed as time goes on, never fired early.
        let mut now = far.as_nanos();
        while now < u64::MAX - 1 {
            assert_eq!(drain(&mut w, now), Vec::<u32>::new());
            now = w.next_deadline().unwrap().as_nanos();
        }
        assert_eq!(drain(&mut w, u64::MAX - 1), vec![2]);
    }

    #[test]
    fn cancelling_the_earliest_keeps_next_deadline_a_lower_bound() {
        let mut w = TimerWheel::new();
        let a = w.insert(at(3_000_000_000), 1);
        w.insert(at(3_000_500_000), 2);
        w.cancel(a);
        let next = w.next_deadline().unwrap();
        assert!(next <= at(3_000_500_000));
        assert_eq!(drain(&mut w, next.as_nanos()), Vec::<u32>::new());
        assert_eq!(w.next_deadline(), Some(at(3_000_500_000)));
    }

    #[test]
    fn node_is_at_most_32_bytes_with_the_reactor_payload() {
        assert!(std::mem::size_of::<Node<(u32, u32)>>() <= 32);
    }
}
