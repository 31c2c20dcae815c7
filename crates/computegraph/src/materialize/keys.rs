//! `KeyRun`: a key column of the materialized graph (`value_key`, `op_key`) kept as a run
//! of consecutive keys for as long as its keys are consecutive, and as a vector from the
//! first key that is not (ADR 0017, step 4: the materialized graph as a selection of the
//! store).
//!
//! Why: a view of one fragment built alone on a fresh interner, inputs first, with nothing
//! pruned (`window`, `uniform` and `chain` in the benchmarks), gives the materialized
//! values the keys `0, 1, 2, …` and its operations consecutive operation keys, since emit
//! walks the store's keys in order and skips none. Those two columns then only restate the
//! store's order: 4 bytes per value and 4 per operation written to fresh pages by emit and
//! kept through compile (8 bytes per node on `chain`). A run holds its first key and its
//! length instead. A pruned or merged view breaks the run at its first skipped key, and the
//! column becomes the vector it always was, with the run before it written out then (a
//! copy of at most the entries pushed so far, once).
//!
//! Reads cost a branch on the variant (predicted: a column is one or the other for its
//! whole life) and, for a run, an addition instead of a load.

use std::marker::PhantomData;

use crate::hugepages::huge_vec;
use crate::id::Id;

/// A column of keys `K` indexed by `I` (see the module doc).
pub(crate) struct KeyRun<I, K> {
    /// The key of entry 0 while the column is a run (`dense` empty).
    first: usize,
    /// Number of entries.
    len: usize,
    /// Every entry, once a key broke the run; empty while the column is a run.
    dense: Vec<K>,
    /// Entries to reserve when the run breaks (the caller's bound on the column's length).
    room: usize,
    index: PhantomData<fn(I) -> K>,
}

impl<I: Id, K: Id> KeyRun<I, K> {
    /// An empty column expected to hold at most about `room` entries (nothing is
    /// allocated until a key breaks the run).
    pub(crate) fn with_room(room: usize) -> Self {
        KeyRun { first: 0, len: 0, dense: Vec::new(), room, index: PhantomData }
    }

    /// Number of entries.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the column is still a run of consecutive keys.
    #[cfg(test)]
    pub(crate) fn is_run(&self) -> bool {
        self.dense.is_empty()
    }

    /// The key of entry 0 while the column is a run (entry `i` holds that key plus `i`),
    /// `None` once it is a vector ([`Self::dense`]).
    #[inline]
    pub(crate) fn run_first(&self) -> Option<usize> {
        self.dense.is_empty().then_some(self.first)
    }

    /// The entries of a column that is a vector (empty while it is a run).
    #[inline]
    pub(crate) fn dense(&self) -> &[K] {
        &self.dense
    }

    /// The id the next entry gets, or `None` past the id space of `I`.
    pub(crate) fn next_id(&self) -> Option<I> {
        I::try_new(self.len)
    }

    /// Appends `key`.
    #[inline(always)]
    pub(crate) fn push(&mut self, key: K) {
        let k = key.index();
        if self.dense.is_empty() {
            if self.len == 0 {
                self.first = k;
            }
            if k == self.first + self.len {
                self.len += 1;
                return;
            }
            self.break_run();
        }
        self.dense.push(key);
        self.len += 1;
    }

    /// Appends the key after the last to a column that is a run (from key 0 when it is
    /// empty): what [`Self::push`] of that key does, without its tests, for a caller that
    /// knows the column is such a run.
    #[inline(always)]
    pub(crate) fn lengthen(&mut self) {
        debug_assert!(self.dense.is_empty() && (self.len > 0 || self.first == 0), "a run from key 0");
        self.len += 1;
    }

    /// Writes the run out as a vector: the first key that does not follow it comes next.
    #[cold]
    fn break_run(&mut self) {
        let mut dense = huge_vec(self.room.max(self.len + 1));
        dense.extend((self.first..self.first + self.len).map(K::new));
        self.dense = dense;
    }

    /// The key of entry `i`, which the caller has checked is in range (a run has no
    /// entries to bound the read: in release builds an index past its end gives a key past
    /// its last, so the public accessors check the range first; compile's passes read
    /// only ids of the graph, and a bound check per read was 1 to 4% of compile's
    /// instructions).
    ///
    /// # Panics
    /// If `i` is out of range of a vector, or of a run in a debug build.
    #[inline(always)]
    pub(crate) fn at(&self, i: I) -> K {
        let i = i.index();
        if self.dense.is_empty() {
            debug_assert!(i < self.len, "entry {i} of a key column of {}", self.len);
            K::new(self.first + i)
        } else {
            self.dense[i]
        }
    }

    /// Every key, in entry order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = K> + '_ {
        (0..self.len).map(|i| self.at(I::new(i)))
    }

    /// The ids of the entries.
    pub(crate) fn ids(&self) -> impl DoubleEndedIterator<Item = I> + ExactSizeIterator + use<I, K> {
        (0..self.len).map(I::new)
    }

    /// Bytes allocated (none while the column is a run).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.dense.capacity() * size_of::<K>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::{KeyId, OperationKeyId};
    use crate::materialize::{OperationId, ValueId};
    use proptest::prelude::*;

    proptest! {
        /// Pushed key by key, the column reads back as the vector of the same keys, stays
        /// a run exactly while every key follows the one before, and allocates nothing
        /// while it does.
        #[test]
        fn a_key_run_reads_as_the_vector_of_its_keys(
            start in 0usize..1000,
            run in 0usize..300,
            tail in proptest::collection::vec(0usize..5000, 0..50),
            room in 0usize..400,
        ) {
            let keys: Vec<usize> = (start..start + run).chain(tail).collect();
            let mut column = KeyRun::<ValueId, KeyId>::with_room(room);
            for (n, &k) in keys.iter().enumerate() {
                column.push(KeyId::new(k));
                let consecutive = keys[..=n].windows(2).all(|w| w[1] == w[0] + 1);
                prop_assert_eq!(column.is_run(), consecutive);
                prop_assert_eq!(column.heap_bytes() == 0, consecutive);
            }
            prop_assert_eq!(column.len(), keys.len());
            let read: Vec<usize> = column.ids().map(|i| column.at(i).index()).collect();
            prop_assert_eq!(&read, &keys);
            let iterated: Vec<usize> = column.iter().map(KeyId::index).collect();
            prop_assert_eq!(&iterated, &keys);
            let parts: Vec<usize> = match column.run_first() {
                Some(first) => (first..first + column.len()).collect(),
                None => column.dense().iter().map(|k| k.index()).collect(),
            };
            prop_assert_eq!(&parts, &keys);
            prop_assert_eq!(column.next_id(), Some(ValueId::new(keys.len())));
        }
    }

    #[test]
    fn an_empty_column_is_a_run_of_nothing() {
        let column = KeyRun::<OperationId, OperationKeyId>::with_room(8);
        assert!(column.is_run());
        assert_eq!((column.len(), column.heap_bytes(), column.ids().len()), (0, 0, 0));
    }
}
