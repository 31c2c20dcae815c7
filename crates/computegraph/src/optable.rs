//! The interner's operation table: open addressing over `u64` slots, each holding an
//! operation's 32-bit structural hash and its id, so probing compares hashes without
//! touching the operation columns, growth never recomputes a hash, and a caller that knows
//! a hash ahead of time can [`OpTable::prefetch`] its slot.
//!
//! Invariants: the capacity is a power of two and at most 3/4 full (linear probing stays
//! short); an empty slot is `0`; a full slot is `hash << 32 | (id + 1)`. Entries are never
//! removed. This module holds one of the crate's two `unsafe` sites: the prefetch hint,
//! which cannot fault (see [`prefetch_read`]); the other is `LevelSlots` in `eval.rs`.

use crate::key::OperationKeyId;

/// Maximum load: 3/4.
const LOAD_NUM: usize = 3;
const LOAD_DEN: usize = 4;

#[derive(Default)]
pub(crate) struct OpTable {
    slots: Vec<u64>,
    len: usize,
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

impl OpTable {
    #[inline]
    fn home(&self, hash: u32) -> usize {
        // Fibonacci hashing: the high bits of a multiplicative spread pick the slot.
        let spread = (hash as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let bits = self.slots.len().trailing_zeros();
        (spread >> (64 - bits)) as usize
    }

    /// Bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * 8
    }

    /// Makes room for `additional` more entries without growing during their insertion.
    pub(crate) fn reserve(&mut self, additional: usize) {
        let need = (self.len + additional) * LOAD_DEN / LOAD_NUM + 1;
        if need > self.slots.len() {
            self.grow_to(need.next_power_of_two().max(16));
        }
    }

    fn grow_to(&mut self, capacity: usize) {
        let old = std::mem::replace(&mut self.slots, vec![0; capacity]);
        let mask = capacity - 1;
        for slot in old.into_iter().filter(|&s| s != 0) {
            let mut i = self.home((slot >> 32) as u32);
            while self.slots[i] != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = slot;
        }
    }

    /// Finds the entry with this hash for which `eq` holds, or the slot where it belongs.
    #[inline]
    pub(crate) fn probe(&mut self, hash: u32, mut eq: impl FnMut(OperationKeyId) -> bool) -> Probe {
        if (self.len + 1) * LOAD_DEN > self.slots.len() * LOAD_NUM {
            self.grow_to((self.slots.len() * 2).max(16));
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(hash);
        loop {
            let slot = self.slots[i];
            if slot == 0 {
                return Probe::Vacant(i);
            }
            if (slot >> 32) as u32 == hash && eq(unpack_id(slot)) {
                return Probe::Found(unpack_id(slot));
            }
            i = (i + 1) & mask;
        }
    }

    /// Fills the slot a [`Probe::Vacant`] returned (no other insertion in between).
    #[inline]
    pub(crate) fn fill(&mut self, slot: usize, hash: u32, id: OperationKeyId) {
        debug_assert_eq!(self.slots[slot], 0);
        self.slots[slot] = pack(hash, id);
        self.len += 1;
    }

    /// Hints the memory system that the home slot of `hash` will be read soon.
    #[inline]
    pub(crate) fn prefetch(&self, hash: u32) {
        if self.slots.is_empty() {
            return;
        }
        let p = &self.slots[self.home(hash)];
        prefetch_read(p);
    }
}

/// A read prefetch of the cache line holding `p`.
#[inline(always)]
fn prefetch_read<T>(p: &T) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `prefetcht0` is a hint: it never faults and has no architectural effect,
    // and `p` is a valid reference anyway. It is `unsafe` only because it is a
    // `#[target_feature(enable = "sse")]` intrinsic, and SSE is part of the x86_64 baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const T as *const i8);
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn reserve_prevents_growth() {
        let mut t = OpTable::default();
        t.reserve(1000);
        let cap = t.heap_bytes();
        for i in 0..1000u32 {
            if let Probe::Vacant(s) = t.probe(i.wrapping_mul(2_654_435_761), |_| false) {
                t.fill(s, i.wrapping_mul(2_654_435_761), OperationKeyId::new(i as usize));
            }
        }
        assert_eq!(t.heap_bytes(), cap);
    }
}
