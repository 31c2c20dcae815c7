//! [`KeyMap`]: a map keyed by [`KeyId`] that is a flat array when the keys are compact.
//!
//! Passes over graphs look keys up once or twice per node. Interned key ids of one graph
//! are mostly a compact range (they are allocated in batches as graphs are built), so a
//! dense array over that range beats hashing; when the range is much larger than the
//! number of keys, a hash map is used instead. A dense map that meets a key outside its
//! range turns itself into a hash map, so the choice is only ever a performance decision.

use rustc_hash::FxHashMap;

use crate::hugepages::{huge_vec, huge_vec_of};
use crate::id::KeyId;

/// A map from [`KeyId`] to `V`: dense over a key range, or hashed.
#[derive(Clone, Debug)]
pub(crate) struct KeyMap<V> {
    repr: Repr<V>,
}

#[derive(Clone, Debug)]
enum Repr<V> {
    Dense { base: usize, slots: Vec<Option<V>>, len: usize },
    Sparse(FxHashMap<KeyId, V>),
}

impl<V: Copy> KeyMap<V> {
    /// A map for keys in `range`, expecting about `count` entries: dense when the range is
    /// at most four times `count` (plus a small constant), hashed otherwise.
    pub(crate) fn with_range(range: std::ops::Range<usize>, count: usize) -> Self {
        let span = range.end.saturating_sub(range.start);
        if span <= count.saturating_mul(4).saturating_add(4096) {
            KeyMap { repr: Repr::Dense { base: range.start, slots: huge_vec_of(None, span), len: 0 } }
        } else {
            Self::hashed(count)
        }
    }

    /// A hashed map with room for `count` entries.
    pub(crate) fn hashed(count: usize) -> Self {
        KeyMap { repr: Repr::Sparse(FxHashMap::with_capacity_and_hasher(count, Default::default())) }
    }

    /// The value of `key`.
    #[inline]
    pub(crate) fn get(&self, key: KeyId) -> Option<V> {
        match &self.repr {
            Repr::Dense { base, slots, .. } => slots.get(key.index().wrapping_sub(*base)).copied().flatten(),
            Repr::Sparse(m) => m.get(&key).copied(),
        }
    }

    /// Hints that the entry of `key` will be accessed soon (dense maps only).
    #[inline]
    pub(crate) fn prefetch(&self, key: KeyId) {
        if let Repr::Dense { base, slots, .. } = &self.repr {
            crate::prefetch::prefetch_entry(slots, key.index().wrapping_sub(*base));
        }
    }

    /// Whether `key` has a value.
    #[inline]
    pub(crate) fn contains(&self, key: KeyId) -> bool {
        self.get(key).is_some()
    }

    /// Sets the value of `key`, returning the previous one.
    #[inline]
    pub(crate) fn insert(&mut self, key: KeyId, value: V) -> Option<V> {
        if let Repr::Dense { base, slots, len } = &mut self.repr {
            if let Some(slot) = slots.get_mut(key.index().wrapping_sub(*base)) {
                let old = slot.replace(value);
                *len += old.is_none() as usize;
                return old;
            }
            self.make_sparse();
        }
        match &mut self.repr {
            Repr::Sparse(m) => m.insert(key, value),
            Repr::Dense { .. } => unreachable!("converted above"),
        }
    }

    /// Sets the value of `key` unless it has one; returns whether it was inserted.
    #[inline]
    pub(crate) fn insert_if_absent(&mut self, key: KeyId, value: V) -> bool {
        if self.contains(key) {
            return false;
        }
        self.insert(key, value);
        true
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        match &self.repr {
            Repr::Dense { len, .. } => *len,
            Repr::Sparse(m) => m.len(),
        }
    }

    /// The entries in increasing key order.
    pub(crate) fn sorted_entries(&self) -> Vec<(KeyId, V)> {
        match &self.repr {
            Repr::Dense { base, slots, len } => {
                let mut e = huge_vec(*len);
                e.extend(slots.iter().enumerate().filter_map(|(i, v)| v.map(|v| (KeyId::new(base + i), v))));
                e
            }
            Repr::Sparse(m) => {
                let mut e: Vec<(KeyId, V)> = m.iter().map(|(k, v)| (*k, *v)).collect();
                e.sort_unstable_by_key(|(k, _)| *k);
                e
            }
        }
    }

    /// Bytes held (a hashed map: its entries and one control byte each, as hashbrown
    /// lays them out).
    pub(crate) fn heap_bytes(&self) -> usize {
        match &self.repr {
            Repr::Dense { slots, .. } => slots.capacity() * std::mem::size_of::<Option<V>>(),
            Repr::Sparse(m) => m.capacity() * (std::mem::size_of::<(KeyId, V)>() + 1),
        }
    }

    fn make_sparse(&mut self) {
        if let Repr::Dense { base, slots, len } = &self.repr {
            let mut m = FxHashMap::with_capacity_and_hasher(*len * 2, Default::default());
            for (i, v) in slots.iter().enumerate() {
                if let Some(v) = v {
                    m.insert(KeyId::new(base + i), *v);
                }
            }
            self.repr = Repr::Sparse(m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dense_map_meeting_a_key_outside_its_range_becomes_hashed() {
        let mut m = KeyMap::with_range(10..20, 5);
        assert_eq!(m.insert(KeyId::new(12), 'a'), None);
        assert!(matches!(m.repr, Repr::Dense { .. }));
        m.insert(KeyId::new(40), 'b');
        assert!(matches!(m.repr, Repr::Sparse(_)));
        assert_eq!((m.get(KeyId::new(12)), m.get(KeyId::new(40)), m.get(KeyId::new(13))), (Some('a'), Some('b'), None));
        assert_eq!(m.len(), 2);
        assert_eq!(m.sorted_entries(), vec![(KeyId::new(12), 'a'), (KeyId::new(40), 'b')]);
    }
}
