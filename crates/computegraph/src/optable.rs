//! The interner's operation table: open addressing over `u64` slots, each holding an
//! operation's 32-bit structural hash and its id, so probing compares hashes without
//! touching the operation columns, growth never recomputes a hash, and a caller that knows
//! a hash ahead of time can [`OpTable::prefetch`] its slot.
//!
//! Invariants: the table is at most 3/4 full (linear probing stays short); an empty slot is
//! `0`; a full slot is `hash << 32 | (id + 1)`; every entry is reachable from its home slot
//! without crossing an empty slot. Removal (of a reclaimed chunk's operations) keeps the
//! last invariant by shifting later entries of the run back into the hole, so there are no
//! tombstones.
//!
//! The capacity is any number of slots, not only a power of two, so that reserving room
//! for `n` entries takes about `4n/3` slots rather than up to twice that (the table of a
//! 10^6-operation build is then 10.7 MB, not 16.8: fewer page faults and TLB misses): an
//! entry's home slot is its mixed hash scaled to the capacity (`mixed · capacity / 2^64`,
//! one multiply). Home slots grow with the mixed hash, so growing re-inserts the old
//! entries in slot order and writes the new table almost sequentially.

use std::cell::Cell;

use crate::error::GraphResult;
use crate::id::OperationKeyId;
use crate::prefetch::prefetch_read;
use crate::stop::{self, Poll};

/// Maximum load: 3/4.
const LOAD_NUM: usize = 3;
const LOAD_DEN: usize = 4;

/// Tables below this many slots (32 MiB) grow fourfold, larger ones twofold.
const GROW_FOUR_BELOW: usize = 1 << 22;

/// Load past which a table below [`GROW_FOUR_BELOW`] slots grows even though
/// [`LOAD_NUM`]/[`LOAD_DEN`] would still hold, unless a reservation made room for its
/// entries: 5/8.
///
/// Why: a table grown batch by batch (a builder that reserved nothing) fills from 3/16 to
/// the maximum load between two fourfold growths, and a probe that ends at an empty slot
/// runs about `(1 + 1/(1 - load)^2)/2` slots, 8.5 at 3/4 against 3.9 at 5/8. Growing at
/// 5/8 keeps that stretch shorter at no cost in the final size of a table that grows
/// fourfold (it lands in the same capacity, a step earlier); past [`GROW_FOUR_BELOW`],
/// where growth doubles, the table keeps the maximum load, so that a large unreserved
/// table does not take twice the memory for it.
const GROW_LOAD_NUM: usize = 5;
const GROW_LOAD_DEN: usize = 8;

/// The fewest slots that hold `entries` at a load of at most `num`/`den`, with one more so
/// that a probe always meets an empty slot (saturating: a count past memory fails where
/// the slots are allocated).
fn slots_within(entries: usize, num: usize, den: usize) -> usize {
    entries.saturating_mul(den).div_ceil(num).saturating_add(1)
}

/// How many times its capacity a table of `slots` slots takes when it must grow.
///
/// Fourfold while small: a builder that reserved nothing (the docs' first example) grows
/// the table batch by batch, and each growth re-inserts every entry into a fresh table.
/// By four there are half as many growths as by two, and a third of the re-insertions:
/// the 10^6-node `window` build (7·10^5 operations) re-inserts 3.3·10^5 entries instead
/// of 1.0·10^6, and ends in a table of 1.4·10^6 slots (a reservation makes 1.3·10^6).
/// Past 32 MiB, doubling keeps a large unreserved table within twice what it holds at the
/// maximum load.
#[inline]
fn growth_factor(slots: usize) -> usize {
    if slots < GROW_FOUR_BELOW { 4 } else { 2 }
}

#[derive(Default)]
pub(crate) struct OpTable {
    slots: Vec<u64>,
    len: usize,
    /// Entries the last reservation larger than a growth step made room for: up to this
    /// many, the table grows only past the maximum load (the caller sized it).
    reserved: usize,
}

thread_local! {
    /// The slots of the last table this thread dropped, when they were kept ([`keep_slots`]).
    static KEPT_SLOTS: Cell<Vec<u64>> = const { Cell::new(Vec::new()) };
}

/// `capacity` empty slots: the thread's kept buffer when it fits, else a fresh one (advised
/// for huge pages when large).
///
/// Why keep one: a caller that builds graph after graph on fresh interners (a bench loop, a
/// service that builds a graph per request) frees and allocates a table of the same size
/// each time. Under glibc, once the free top of the heap exceeds its trim threshold (twice
/// the largest mapped block freed so far) the freed table goes back to the kernel, and the
/// next build faults every page of the new one in again while zeroing it: 42% of the page
/// faults of a warm 10^5-node build (docs/PERFORMANCE.md, "Issue 38: the build's warm
/// page faults"). The kept buffer is zeroed in place, on pages the process already has.
fn zeroed_slots(capacity: usize) -> GraphResult<Vec<u64>> {
    // `try_with`: during the thread's teardown the kept buffer is gone; a fresh one serves.
    let mut slots = KEPT_SLOTS.try_with(Cell::take).unwrap_or_default();
    // A kept buffer far larger than asked would hold memory the table never uses, and
    // would be taken by a growing table's smaller steps (fourfold apart) before its last.
    if slots.capacity() < capacity || slots.capacity() / 2 > capacity {
        let _ = KEPT_SLOTS.try_with(|k| k.set(slots));
        return fresh_zeroed_slots(capacity);
    }
    slots.clear();
    slots.resize(capacity, 0);
    Ok(slots)
}

/// `capacity` empty slots in a fresh allocation; from [`POPULATE_MIN_BYTES`] on, zeroed
/// by the allocator (`calloc`: a large block is fresh memory from the kernel, already
/// zero, which it does not write again), advised for huge pages and backed at once,
/// writable (`MADV_POPULATE_WRITE`): probes read a slot before an insertion writes it, and a fresh page
/// read first faults twice (mapped to the shared zero page on the read, copied on the
/// write). Writing the zeros from here instead cost a reserved 10^6-node build about 11
/// instructions per node, and a growing table about 15 (`docs/PERFORMANCE.md`, bld41b).
///
/// Backed a piece of [`POPULATE_PIECE_BYTES`] at a time, reading the stop flag between
/// pieces: a table of 10^7 operations is hundreds of megabytes, which the kernel takes
/// long to clear (`docs/PERFORMANCE.md`, stop43), and Ctrl-C must end the build sooner.
fn fresh_zeroed_slots(capacity: usize) -> GraphResult<Vec<u64>> {
    if capacity.saturating_mul(8) < POPULATE_MIN_BYTES {
        // Written zero by zero, as before: under glibc's default settings smaller tables
        // come from the heap, where `calloc` would write the zeros too, and builds of 10^5
        // operations (tables of about 1 MB) ran slower with the system call. Not
        // `vec![0; n]`: `calloc` may leave fresh heap pages unwritten, to be faulted twice.
        #[allow(clippy::slow_vector_initialization)]
        let mut slots = Vec::with_capacity(capacity);
        slots.resize(capacity, 0);
        return Ok(slots);
    }
    let mut slots = vec![0u64; capacity];
    // Advised before any page is backed (`advise_huge` covers the whole allocation).
    crate::hugepages::advise_huge(&mut slots);
    for piece in slots.chunks(POPULATE_PIECE_BYTES / 8) {
        stop::check()?;
        crate::prefault::populate_now(piece.as_ptr() as usize, size_of_val(piece));
    }
    Ok(slots)
}

/// Bytes a fresh table backs between two reads of the stop flag ([`fresh_zeroed_slots`]):
/// a small part of Ctrl-C's bound of the kernel's clearing, in whole huge pages.
const POPULATE_PIECE_BYTES: usize = 32 << 20;

/// Fresh tables of at least this many bytes are backed at once ([`fresh_zeroed_slots`]):
/// those that are advised for huge pages too.
const POPULATE_MIN_BYTES: usize = crate::hugepages::HUGE_MIN_BYTES;

/// Keeps `slots` for the thread's next table ([`zeroed_slots`]) when they are below
/// [`HUGE_MIN_BYTES`](crate::hugepages::HUGE_MIN_BYTES) and larger than what the thread
/// keeps. Larger tables are advised for huge pages instead, which fault a 2 MiB page at a
/// time; the bound is twice the columns' ([`KEEP_MAX_BYTES`](crate::hugepages::KEEP_MAX_BYTES))
/// because a builder that reserved nothing grows its table fourfold: a 10^5-node build
/// ends in a table of 2.8 MB.
fn keep_slots(slots: Vec<u64>) {
    if slots.capacity() == 0 || slots.capacity().saturating_mul(8) >= crate::hugepages::HUGE_MIN_BYTES {
        return;
    }
    let _ = KEPT_SLOTS.try_with(|k| {
        let kept = k.take();
        k.set(if kept.capacity() >= slots.capacity() { kept } else { slots });
    });
}

impl Drop for OpTable {
    fn drop(&mut self) {
        keep_slots(std::mem::take(&mut self.slots));
    }
}

/// Where a probe ended: the id found, or the empty slot to fill.
pub(crate) enum Probe {
    Found(OperationKeyId),
    Vacant(usize),
}

#[inline]
fn pack(hash: u32, id: OperationKeyId) -> u64 {
    ((hash as u64) << 32) | (id.index() as u64 + 1)
}

#[inline]
fn unpack_id(slot: u64) -> OperationKeyId {
    OperationKeyId::new((slot & 0xFFFF_FFFF) as usize - 1)
}

/// The hash spread over 64 bits (Fibonacci hashing), so that close hashes get distant
/// home slots.
#[inline]
fn mix(hash: u32) -> u64 {
    (hash as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The home slot of `hash` in a table of `capacity` slots ([`OpTable::home`]).
#[inline]
fn home_in(capacity: usize, hash: u32) -> usize {
    ((mix(hash) as u128 * capacity as u128) >> 64) as usize
}

impl OpTable {
    /// The home slot of `hash`: its mixed hash scaled to the capacity (the high half of
    /// a 64 × 64-bit product).
    #[inline]
    fn home(&self, hash: u32) -> usize {
        home_in(self.slots.len(), hash)
    }

    /// The slot after `i`, wrapping around.
    #[inline]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() { 0 } else { i + 1 }
    }

    /// Bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * 8
    }

    /// Makes room for `additional` more entries without growing during their insertion.
    ///
    /// Growth is geometric: a reservation that does not fit takes at least
    /// [`growth_factor`] times the current capacity, so that many small reservations (one
    /// per small graph built, or one per batch of a builder that reserved nothing) cost
    /// amortized `O(1)` per entry instead of a copy of the whole table each.
    ///
    /// A table that grows fourfold grows once past [`GROW_LOAD_NUM`]/[`GROW_LOAD_DEN`] full,
    /// unless its entries fit what a reservation asked for.
    ///
    /// Fails with [`GraphError::Interrupted`](crate::GraphError::Interrupted) when the stop
    /// flag goes up during a growth, leaving the table as it was.
    pub(crate) fn reserve(&mut self, additional: usize) -> GraphResult<()> {
        let entries = self.len.saturating_add(additional);
        let need = slots_within(entries, LOAD_NUM, LOAD_DEN);
        let early = entries > self.reserved
            && self.slots.len() < GROW_FOUR_BELOW
            && entries.saturating_mul(GROW_LOAD_DEN) > self.slots.len().saturating_mul(GROW_LOAD_NUM);
        if need > self.slots.len() || early {
            let geometric = self.slots.len().saturating_mul(growth_factor(self.slots.len()));
            let (capacity, reserved) = if need >= geometric {
                // Sized by the caller's count, not by a growth step.
                (need, entries)
            } else if self.slots.len() < GROW_FOUR_BELOW {
                // A batch of more than half the table's size: still within 5/8 after it.
                (geometric.max(slots_within(entries, GROW_LOAD_NUM, GROW_LOAD_DEN)), self.reserved)
            } else {
                (geometric, self.reserved)
            };
            // Whole cache lines of slots.
            self.grow_to(capacity.next_multiple_of(8).max(16))?;
            self.reserved = reserved;
        }
        Ok(())
    }

    /// Shrinks the table to what its entries and `spare` more need when it holds four
    /// times that or more (after a reclamation), so a table does not keep the size of its
    /// peak (a sparse table also costs cache misses), nor shrinks below what it will soon
    /// hold again. Returns whether it shrank (a stop raised meanwhile leaves it as it was).
    pub(crate) fn shrink_if_sparse(&mut self, spare: usize) -> bool {
        let need = slots_within(self.len + spare, LOAD_NUM, LOAD_DEN).next_multiple_of(8).max(16);
        if self.slots.len() < 4 * need || self.slots.len() <= 1024 || self.grow_to(need).is_err() {
            return false;
        }
        self.reserved = self.len + spare;
        true
    }

    /// Re-inserts every entry into a table of `capacity` slots (larger or smaller). The old
    /// slots stay in place until the last entry is in, so a stop raised meanwhile (read every
    /// [`POLL_EVERY`](crate::stop::POLL_EVERY) entries: a growth at 10^7 entries is long)
    /// returns [`GraphError::Interrupted`](crate::GraphError::Interrupted) with the
    /// table unchanged.
    fn grow_to(&mut self, capacity: usize) -> GraphResult<()> {
        // Zeroed by writing, not by `calloc`: probes read a slot before an insertion
        // writes it, and a fresh page read first faults twice (mapped to the shared zero
        // page on the read, copied on the write).
        let mut fresh = zeroed_slots(capacity)?;
        let mut poll = Poll::new();
        for &slot in self.slots.iter().filter(|&&s| s != 0) {
            poll.tick()?;
            let mut i = home_in(capacity, (slot >> 32) as u32);
            while fresh[i] != 0 {
                i = if i + 1 == capacity { 0 } else { i + 1 };
            }
            fresh[i] = slot;
        }
        self.slots = fresh;
        Ok(())
    }

    /// Finds the entry with this hash for which `eq` holds, or the slot where it belongs
    /// (growing first if one more entry would not fit): the tests' way to fill a table.
    #[cfg(test)]
    pub(crate) fn probe(&mut self, hash: u32, eq: impl FnMut(OperationKeyId) -> bool) -> Probe {
        if (self.len + 1) * LOAD_DEN > self.slots.len() * LOAD_NUM {
            self.grow_to((self.slots.len() * 2).max(16)).expect("tests raise no stop");
        }
        self.probe_reserved(hash, eq)
    }

    /// [`Self::probe`] when [`Self::reserve`] made room for this entry (the table never
    /// grows on the way). Always inlined: the interning loop calls it once per operation,
    /// and as a call its prologue and epilogue cost more than its usual one-slot probe.
    #[inline(always)]
    pub(crate) fn probe_reserved(&self, hash: u32, mut eq: impl FnMut(OperationKeyId) -> bool) -> Probe {
        debug_assert!((self.len + 1) * LOAD_DEN <= self.slots.len() * LOAD_NUM, "room was reserved");
        let mut i = self.home(hash);
        loop {
            let slot = self.slots[i];
            if slot == 0 {
                return Probe::Vacant(i);
            }
            if (slot >> 32) as u32 == hash && eq(unpack_id(slot)) {
                return Probe::Found(unpack_id(slot));
            }
            i = self.next(i);
        }
    }

    /// Fills the slot a [`Probe::Vacant`] returned (no other insertion in between).
    #[inline]
    pub(crate) fn fill(&mut self, slot: usize, hash: u32, id: OperationKeyId) {
        debug_assert_eq!(self.slots[slot], 0);
        self.slots[slot] = pack(hash, id);
        self.len += 1;
    }

    /// Removes the entry of operation `id` with this hash; returns whether it was there.
    pub(crate) fn remove(&mut self, hash: u32, id: OperationKeyId) -> bool {
        if self.slots.is_empty() {
            return false;
        }
        let wanted = pack(hash, id);
        let mut hole = self.home(hash);
        loop {
            match self.slots[hole] {
                0 => return false,
                s if s == wanted => break,
                _ => hole = self.next(hole),
            }
        }
        // Backward shift: an entry later in the run moves into the hole unless its home
        // lies cyclically after the hole (then it must stay where its probe finds it).
        let n = self.slots.len();
        let mut j = hole;
        loop {
            j = self.next(j);
            let slot = self.slots[j];
            if slot == 0 {
                break;
            }
            let home = self.home((slot >> 32) as u32);
            if (j + n - home) % n >= (j + n - hole) % n {
                self.slots[hole] = slot;
                hole = j;
            }
        }
        self.slots[hole] = 0;
        self.len -= 1;
        true
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Hints the memory system that the home slot of `hash` will be read soon.
    #[inline]
    pub(crate) fn prefetch(&self, hash: u32) {
        if self.slots.is_empty() {
            return;
        }
        prefetch_read(&self.slots[self.home(hash)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh table large enough to be backed at once (`fresh_zeroed_slots`) reads empty,
    /// and finds every entry inserted and no other, through a growth.
    #[test]
    fn a_fresh_backed_table_reads_empty_and_finds_what_was_inserted() {
        let mut t = OpTable::default();
        t.reserve(3 * POPULATE_MIN_BYTES / 32).unwrap();
        assert!(t.slots.len() * 8 >= POPULATE_MIN_BYTES);
        assert!(t.slots.iter().all(|&s| s == 0));
        let n = POPULATE_MIN_BYTES / 4;
        for i in 0..n {
            t.reserve(1).unwrap();
            let hash = (i as u32).wrapping_mul(0x2545_F491);
            match t.probe_reserved(hash, |_| false) {
                Probe::Vacant(s) => t.fill(s, hash, OperationKeyId::new(i)),
                Probe::Found(_) => unreachable!("`eq` never holds"),
            }
        }
        assert_eq!(t.slots.iter().filter(|&&s| s != 0).count(), n);
        for i in (0..n).step_by(97) {
            let hash = (i as u32).wrapping_mul(0x2545_F491);
            assert!(matches!(t.probe_reserved(hash, |id| id.index() == i), Probe::Found(id) if id.index() == i));
        }
        assert!(matches!(t.probe_reserved(7, |_| true), Probe::Vacant(_)));
    }

    /// A dropped table's slots serve the thread's next table of about its size, zeroed
    /// and in place; a table over twice smaller gets fresh slots and leaves them kept.
    #[test]
    fn a_dropped_tables_slots_serve_the_next_table_zeroed() {
        let mut t = OpTable::default();
        t.reserve(5_000).unwrap();
        for i in 0..5_000u32 {
            if let Probe::Vacant(s) = t.probe_reserved(i, |_| false) {
                t.fill(s, i, OperationKeyId::new(i as usize));
            }
        }
        let (at, slots) = (t.slots.as_ptr(), t.slots.len());
        drop(t);
        let mut u = OpTable::default();
        u.reserve(4_000).unwrap();
        // The kept slots are held until taken, so no other block can have their address.
        assert_eq!(u.slots.as_ptr(), at);
        assert!(u.slots.len() < slots && u.slots.iter().all(|&s| s == 0));
        assert!(matches!(u.probe_reserved(7, |_| true), Probe::Vacant(_)));
        drop(u);
        let mut small = OpTable::default();
        small.reserve(500).unwrap();
        assert_ne!(small.slots.as_ptr(), at);
        assert!(KEPT_SLOTS.with(|k| {
            let kept = k.take();
            let held = kept.as_ptr() == at;
            k.set(kept);
            held
        }));
    }

    /// Slots of [`HUGE_MIN_BYTES`](crate::hugepages::HUGE_MIN_BYTES) or more are freed,
    /// not kept.
    #[test]
    fn slots_over_the_bound_are_not_kept() {
        let over = crate::hugepages::HUGE_MIN_BYTES / 8;
        keep_slots(Vec::with_capacity(over));
        assert_eq!(KEPT_SLOTS.with(Cell::take).capacity(), 0);
        keep_slots(Vec::with_capacity(over - 8));
        assert!(KEPT_SLOTS.with(Cell::take).capacity() >= over - 8);
    }

    #[test]
    fn finds_what_it_holds_across_growth() {
        let mut t = OpTable::default();
        // Colliding hashes (same hash, different ids) and distinct ones.
        for i in 0..10_000u32 {
            let hash = i % 97;
            match t.probe(hash, |id| id.index() == i as usize) {
                Probe::Vacant(s) => t.fill(s, hash, OperationKeyId::new(i as usize)),
                Probe::Found(_) => panic!("{i} found before insertion"),
            }
        }
        assert_eq!(t.len, 10_000);
        for i in 0..10_000u32 {
            match t.probe(i % 97, |id| id.index() == i as usize) {
                Probe::Found(id) => assert_eq!(id.index(), i as usize),
                Probe::Vacant(_) => panic!("{i} lost"),
            }
        }
        t.prefetch(5);
        assert!(t.heap_bytes() >= 10_000 * 8);
    }

    /// A capacity that is not a power of two, and a probe run that wraps past the last slot.
    #[test]
    fn odd_capacities_and_wrapping_runs() {
        let mut t = OpTable::default();
        t.reserve(100).unwrap();
        let cap = t.slots.len();
        assert!(!cap.is_power_of_two() && cap * 3 >= 100 * 4, "{cap}");
        let last = (0..u32::MAX).find(|&h| t.home(h) == cap - 1).unwrap();
        for i in 0..5 {
            match t.probe(last, |id| id.index() == i) {
                Probe::Vacant(s) => t.fill(s, last, OperationKeyId::new(i)),
                Probe::Found(_) => panic!("{i} found before insertion"),
            }
        }
        assert_ne!(t.slots[0], 0, "the run wraps to the first slot");
        for i in 0..5 {
            assert!(matches!(t.probe(last, |id| id.index() == i), Probe::Found(id) if id.index() == i));
        }
        // Homes spread over the whole table.
        let mut seen = vec![false; cap];
        for h in 0..100_000u32 {
            seen[t.home(h.wrapping_mul(2_654_435_761))] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    /// Removal against a model: interleaved inserts and removals of colliding and
    /// wrapping entries, every survivor found, every removed entry gone.
    #[test]
    fn removal_keeps_every_survivor_reachable() {
        let mut t = OpTable::default();
        t.reserve(60).unwrap();
        let cap = t.slots.len();
        let last = (0..u32::MAX).find(|&h| t.home(h) == cap - 1).unwrap();
        // Hashes: a few homes only (long runs), one of them at the last slot (runs wrap).
        let hash = |i: usize| [last, 3, 7, last, 11][i % 5].wrapping_add((i / 40) as u32);
        let mut live = std::collections::BTreeSet::new();
        let mut x = 12345u64;
        for step in 0..4000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = (x % 40) as usize + 40 * (step % 3);
            let id = OperationKeyId::new(i);
            if live.contains(&i) {
                assert!(t.remove(hash(i), id), "{i} not removed");
                live.remove(&i);
            } else if t.len() < 40 {
                match t.probe(hash(i), |found| found == id) {
                    Probe::Vacant(s) => t.fill(s, hash(i), id),
                    Probe::Found(_) => panic!("{i} found after removal"),
                }
                live.insert(i);
            }
            assert_eq!(t.len(), live.len());
            for &k in &live {
                let kid = OperationKeyId::new(k);
                assert!(matches!(t.probe(hash(k), |f| f == kid), Probe::Found(f) if f == kid), "{k} lost");
            }
        }
        assert!(!t.remove(hash(999), OperationKeyId::new(999)));
    }

    /// After most entries are removed, the table shrinks and still finds the rest.
    #[test]
    fn shrinks_when_sparse() {
        let mut t = OpTable::default();
        let h = |i: u32| i.wrapping_mul(2_654_435_761);
        for i in 0..20_000u32 {
            if let Probe::Vacant(s) = t.probe(h(i), |_| false) {
                t.fill(s, h(i), OperationKeyId::new(i as usize));
            }
        }
        assert!(!t.shrink_if_sparse(0));
        let big = t.heap_bytes();
        for i in 100..20_000u32 {
            assert!(t.remove(h(i), OperationKeyId::new(i as usize)));
        }
        assert!(!t.shrink_if_sparse(8_000), "room kept for 8,000 more");
        assert!(t.shrink_if_sparse(0));
        assert!(t.heap_bytes() * 20 < big, "{} of {big} bytes", t.heap_bytes());
        for i in 0..100u32 {
            let id = OperationKeyId::new(i as usize);
            assert!(matches!(t.probe(h(i), |f| f == id), Probe::Found(f) if f == id));
        }
    }

    /// Growth takes four times the capacity while the table is small, twice past
    /// [`GROW_FOUR_BELOW`] slots, and never less than what the reservation needs.
    #[test]
    fn grows_fourfold_while_small() {
        let mut t = OpTable::default();
        t.reserve(3_000).unwrap();
        let cap = t.slots.len();
        t.len = cap * 3 / 4; // as if full (the entries' slots do not matter here)
        t.reserve(1).unwrap();
        assert_eq!(t.slots.len(), (4 * cap).next_multiple_of(8));
        t.len = 0;
        t.reserve(100 * cap).unwrap();
        assert!(t.slots.len() * 3 >= 100 * cap * 4, "a large reservation gets what it needs");
        assert_eq!(growth_factor(GROW_FOUR_BELOW - 1), 4);
        assert_eq!(growth_factor(GROW_FOUR_BELOW), 2);
    }

    proptest::proptest! {
        /// Against a set of the ids inserted: reservations of any size (a builder's, then
        /// its batches'), each filled in part or whole. Every entry is found and no other;
        /// the load never passes 3/4; a table below `GROW_FOUR_BELOW` slots holding more
        /// than its last large reservation stays within 5/8 after each reservation; and
        /// entries within that reservation never move the table.
        #[test]
        fn reservations_keep_the_loads_they_promise(
            steps in proptest::collection::vec((0usize..3000, 0usize..=100), 1..40),
        ) {
            let mut t = OpTable::default();
            let mut inserted = std::collections::HashSet::new();
            let h = |i: usize| (i as u32).wrapping_mul(0x2545_F491) >> 3;
            for (additional, percent) in steps {
                // An empty table was sized by no reservation: its first one allocates.
                let (before, held_within) = (t.slots.len(), t.len + additional <= t.reserved && !t.slots.is_empty());
                t.reserve(additional).unwrap();
                let cap = t.slots.len();
                proptest::prop_assert!((t.len + additional) * LOAD_DEN <= cap * LOAD_NUM);
                if held_within {
                    proptest::prop_assert_eq!(cap, before, "within the reservation");
                }
                if cap < GROW_FOUR_BELOW && t.len + additional > t.reserved {
                    proptest::prop_assert!((t.len + additional) * GROW_LOAD_DEN <= cap * GROW_LOAD_NUM);
                }
                for _ in 0..additional * percent / 100 {
                    let i = inserted.len();
                    match t.probe_reserved(h(i), |id| id.index() == i) {
                        Probe::Vacant(s) => t.fill(s, h(i), OperationKeyId::new(i)),
                        Probe::Found(_) => proptest::prop_assert!(false, "{} found before insertion", i),
                    }
                    inserted.insert(i);
                }
            }
            proptest::prop_assert_eq!(t.len(), inserted.len());
            for &i in &inserted {
                proptest::prop_assert!(matches!(t.probe_reserved(h(i), |id| id.index() == i), Probe::Found(id) if id.index() == i));
            }
            let absent = inserted.len();
            proptest::prop_assert!(matches!(t.probe_reserved(h(absent), |id| id.index() == absent), Probe::Vacant(_)));
        }
    }

    #[test]
    fn reserve_prevents_growth() {
        let mut t = OpTable::default();
        t.reserve(1000).unwrap();
        let cap = t.heap_bytes();
        for i in 0..1000u32 {
            if let Probe::Vacant(s) = t.probe(i.wrapping_mul(2_654_435_761), |_| false) {
                t.fill(s, i.wrapping_mul(2_654_435_761), OperationKeyId::new(i as usize));
            }
        }
        assert_eq!(t.heap_bytes(), cap);
    }

    /// One small reservation per insertion (one small graph built at a time) must grow the
    /// table geometrically: a few dozen regrowths for 10^5 entries, not one per entry.
    #[test]
    fn small_reservations_grow_geometrically() {
        let mut t = OpTable::default();
        let mut growths = 0;
        for i in 0..100_000u32 {
            let before = t.heap_bytes();
            t.reserve(1).unwrap();
            growths += usize::from(t.heap_bytes() != before);
            let h = i.wrapping_mul(2_654_435_761);
            if let Probe::Vacant(s) = t.probe(h, |_| false) {
                t.fill(s, h, OperationKeyId::new(i as usize));
            }
        }
        assert!(growths <= 20, "{growths} regrowths for 10^5 one-entry reservations");
        assert!(t.heap_bytes() <= 8 * 4 * 100_000, "{} bytes for 10^5 entries", t.heap_bytes());
    }
}
