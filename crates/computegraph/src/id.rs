//! Typed `u32` ids and the columns they index.
//!
//! Every entity of the engine (an interned value key, a fragment-local value, a
//! materialized operation, ...) is named by a `u32` newtype made by [`define_id!`].
//! Ids reserve a niche (`Option<Id>` is 4 bytes), print with a short prefix (`v12`),
//! and can only index the [`IdVec`] column of their own kind:
//!
//! ```compile_fail
//! use computegraph::{IdVec, LocalValueId, LocalOperationId};
//! let mut column: IdVec<LocalValueId, f64> = IdVec::new();
//! let v = column.push(1.0);
//! let op = LocalOperationId::new(0);
//! let _ = column[op]; // error: a column of values cannot be indexed by an operation id
//! ```
//!
//! Invariants: an id's index is `< u32::MAX` (the top value is the niche); [`IdVec::push`]
//! reports overflow instead of wrapping.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

crate::define_id!(
    /// Dense id of an interned value key (a [`ValueKey`](crate::ValueKey)) within one [`KeyInterner`](crate::KeyInterner).
    pub struct KeyId = "k"
);
crate::define_id!(
    /// Dense id of an interned operation key (an [`OperationKey`](crate::OperationKey)) within one [`KeyInterner`](crate::KeyInterner).
    pub struct OperationKeyId = "ok"
);

crate::define_id!(
    /// A slot of a compiled program or of its parallel schedule (`program.rs`): where
    /// evaluation keeps one value at a time. Crate-private: slots are the backend's own.
    pub(crate) struct SlotId = "s"
);
crate::define_id!(
    /// An instruction of a compiled program, by its position in program order
    /// (`program.rs`). Crate-private, like [`SlotId`].
    pub(crate) struct InstrId = "i"
);
impl SlotId {
    /// `index() + 1`, the stored value. Element `index()` of a slice is at
    /// `ptr.add(s.one_past()).sub(1)`, which the compiler folds into one addressing mode
    /// with a constant offset; `ptr.add(s.index())` costs the evaluation loop a
    /// subtraction per slot access (measured: 7% more instructions on
    /// `phasebench 100000 window eval`).
    #[inline(always)]
    pub(crate) fn one_past(self) -> usize {
        self.0.get() as usize
    }
}

// The backend stores `Option<SlotId>` where it used to store a sentinel slot; it must stay
// as small as the raw `u32` it replaced.
const _: () = assert!(size_of::<Option<SlotId>>() == 4);
const _: () = assert!(size_of::<Option<InstrId>>() == 4);

/// A dense `u32` index type usable as the key of an [`IdVec`].
///
/// ```
/// use computegraph::{Id, OperationId};
///
/// let op = OperationId::new(3);
/// assert_eq!(op.index(), 3);
/// assert_eq!(format!("{op:?}"), "mop3");
/// ```
pub trait Id: Copy + Eq + Ord + std::hash::Hash + fmt::Debug {
    /// Largest number of entities of this kind (`u32::MAX - 1`; the top value is the niche).
    const MAX_INDEX: usize = (u32::MAX - 1) as usize;
    /// Builds the id of position `index`.
    ///
    /// # Panics
    /// If `index > Self::MAX_INDEX`. Use [`Id::try_new`] for untrusted indices.
    fn new(index: usize) -> Self;
    /// Builds the id of position `index`, or `None` when it exceeds the id space.
    fn try_new(index: usize) -> Option<Self>;
    /// The position this id names.
    fn index(self) -> usize;
}

/// Defines a `u32` id newtype with a niche, a display prefix and [`Id`] impl.
///
/// ```
/// computegraph::define_id!(
///     /// A node of my own graph.
///     pub struct NodeId = "n"
/// );
/// use computegraph::Id;
/// let n = NodeId::new(7);
/// assert_eq!(n.to_string(), "n7");
/// assert_eq!(std::mem::size_of::<Option<NodeId>>(), 4);
/// ```
#[macro_export]
macro_rules! define_id {
    ($(#[$meta:meta])* $vis:vis struct $name:ident = $prefix:literal) => {
        $(#[$meta])*
        #[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(transparent)]
        $vis struct $name(::core::num::NonZeroU32);

        impl $crate::Id for $name {
            #[inline(always)]
            fn new(index: usize) -> Self {
                match <Self as $crate::Id>::try_new(index) {
                    Some(id) => id,
                    None => panic!(concat!(stringify!($name), " index {} exceeds the u32 id space"), index),
                }
            }
            #[inline(always)]
            fn try_new(index: usize) -> Option<Self> {
                if index < u32::MAX as usize {
                    // `index + 1` is in 1..=u32::MAX, so never zero.
                    ::core::num::NonZeroU32::new(index as u32 + 1).map($name)
                } else {
                    None
                }
            }
            #[inline(always)]
            fn index(self) -> usize {
                (self.0.get() - 1) as usize
            }
        }

        impl $name {
            /// Builds the id of position `index` (see [`Id::new`](crate::Id::new)).
            #[inline(always)]
            pub fn new(index: usize) -> Self {
                <Self as $crate::Id>::new(index)
            }
            /// The position this id names.
            #[inline(always)]
            pub fn index(self) -> usize {
                <Self as $crate::Id>::index(self)
            }
        }

        impl ::core::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                write!(f, concat!($prefix, "{}"), <Self as $crate::Id>::index(*self))
            }
        }

        impl ::core::fmt::Display for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                ::core::fmt::Debug::fmt(self, f)
            }
        }
    };
}

/// A column of `T` indexed only by the id type `I`.
///
/// Append-only: `push` returns the id of the new entry. Ids are never invalidated, so
/// no generation check is needed (see `docs/adr/0001-storage.md`).
///
/// ```
/// use computegraph::{IdVec, ValueId};
///
/// let mut names: IdVec<ValueId, &str> = IdVec::new();
/// let a = names.push("a");
/// let b = names.push("b");
/// assert_eq!((names[a], names[b]), ("a", "b"));
/// assert_eq!(names.iter_enumerated().map(|(id, _)| id).collect::<Vec<_>>(), vec![a, b]);
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdVec<I, T> {
    raw: Vec<T>,
    _id: PhantomData<fn(I) -> I>,
}

impl<I: Id, T> IdVec<I, T> {
    /// An empty column.
    pub const fn new() -> Self {
        IdVec { raw: Vec::new(), _id: PhantomData }
    }

    /// An empty column with room for `n` entries.
    pub fn with_capacity(n: usize) -> Self {
        IdVec { raw: Vec::with_capacity(n), _id: PhantomData }
    }

    /// A column over `raw` (entry `i` has id `i`).
    ///
    /// # Panics
    /// When `raw` exceeds the id space.
    pub(crate) fn from_raw(raw: Vec<T>) -> Self {
        assert!(raw.len() <= I::MAX_INDEX + 1, "column exceeds the u32 id space");
        IdVec { raw, _id: PhantomData }
    }

    /// The column's entries as a plain vector (entry `i` is id `i`'s), its allocation kept.
    pub(crate) fn into_raw(self) -> Vec<T> {
        self.raw
    }

    /// Appends `value` and returns its id.
    ///
    /// # Panics
    /// When the column already holds `I::MAX_INDEX + 1` entries; use [`IdVec::try_push`].
    #[inline(always)]
    pub fn push(&mut self, value: T) -> I {
        let id = I::new(self.raw.len());
        self.raw.push(value);
        id
    }

    /// Appends `value` and returns its id, or gives the value back when the id space is full.
    #[inline(always)]
    pub fn try_push(&mut self, value: T) -> Result<I, T> {
        match I::try_new(self.raw.len()) {
            Some(id) => {
                self.raw.push(value);
                Ok(id)
            }
            None => Err(value),
        }
    }

    /// Appends `value` without numbering it, when the caller has made sure the id space
    /// has room (checked the next id, or the column follows another whose pushes
    /// checked it): [`IdVec::push`] without a second check.
    #[inline(always)]
    pub(crate) fn push_value(&mut self, value: T) {
        debug_assert!(self.raw.len() <= I::MAX_INDEX);
        self.raw.push(value);
    }

    /// The id the next `push` will return, if the id space has room.
    #[inline(always)]
    pub fn next_id(&self) -> Option<I> {
        I::try_new(self.raw.len())
    }

    /// Number of entries.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// Whether the column is empty.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The entry of `id`, if it exists.
    #[inline(always)]
    pub fn get(&self, id: I) -> Option<&T> {
        self.raw.get(id.index())
    }

    /// The entry of `id`, mutably, if it exists.
    #[inline(always)]
    pub(crate) fn get_mut(&mut self, id: I) -> Option<&mut T> {
        self.raw.get_mut(id.index())
    }

    /// Iterates `(id, &value)` in id order.
    pub fn iter_enumerated(&self) -> impl DoubleEndedIterator<Item = (I, &T)> + ExactSizeIterator {
        self.raw.iter().enumerate().map(|(i, v)| (I::new(i), v))
    }

    /// Iterates the ids in order.
    pub fn ids(&self) -> impl DoubleEndedIterator<Item = I> + ExactSizeIterator + use<I, T> {
        (0..self.raw.len()).map(I::new)
    }

    /// The entry of `id`, without a bounds check.
    ///
    /// # Safety
    /// `id.index() < self.len()`.
    #[inline(always)]
    pub(crate) unsafe fn get_unchecked(&self, id: I) -> &T {
        debug_assert!(id.index() < self.raw.len());
        // SAFETY: in range, by the caller's guarantee.
        unsafe { self.raw.get_unchecked(id.index()) }
    }

    /// The values as a plain slice, for bulk or parallel processing.
    #[inline(always)]
    pub fn raw(&self) -> &[T] {
        &self.raw
    }

    /// The values as a plain mutable slice.
    #[inline(always)]
    pub fn raw_mut(&mut self) -> &mut [T] {
        &mut self.raw
    }

    /// Removes every entry, keeping the allocation.
    pub fn clear(&mut self) {
        self.raw.clear();
    }

    /// Shrinks the allocation to the length.
    pub fn shrink_to_fit(&mut self) {
        self.raw.shrink_to_fit();
    }

    /// Shrinks the allocation to the length if that frees more than a few entries (see
    /// [`shrink_loose`]).
    pub(crate) fn shrink_loose(&mut self) {
        shrink_loose(&mut self.raw);
    }

    /// Reserves room for `n` more entries.
    pub fn reserve(&mut self, n: usize) {
        self.raw.reserve(n);
    }

    /// Entries the allocation holds room for.
    pub fn capacity(&self) -> usize {
        self.raw.capacity()
    }

    /// Bytes held by the allocation.
    pub fn heap_bytes(&self) -> usize {
        self.raw.capacity() * std::mem::size_of::<T>()
    }
}

impl<I: Id, T: Clone> IdVec<I, T> {
    /// A column of `n` copies of `value`.
    pub fn from_elem(value: T, n: usize) -> Self {
        IdVec { raw: vec![value; n], _id: PhantomData }
    }
}

impl<I: Id, T> Default for IdVec<I, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<I: Id, T> Index<I> for IdVec<I, T> {
    type Output = T;
    #[inline(always)]
    fn index(&self, id: I) -> &T {
        &self.raw[id.index()]
    }
}

impl<I: Id, T> IndexMut<I> for IdVec<I, T> {
    #[inline(always)]
    fn index_mut(&mut self, id: I) -> &mut T {
        &mut self.raw[id.index()]
    }
}

impl<I: Id, T: fmt::Debug> fmt::Debug for IdVec<I, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter_enumerated()).finish()
    }
}

/// Appends every item, as [`IdVec::push`] would.
///
/// # Panics
/// When the column would exceed the id space.
impl<I: Id, T> Extend<T> for IdVec<I, T> {
    #[inline]
    fn extend<It: IntoIterator<Item = T>>(&mut self, iter: It) {
        self.raw.extend(iter);
        assert!(self.raw.len() <= I::MAX_INDEX + 1, "column exceeds the u32 id space");
    }
}

impl<I: Id, T> FromIterator<T> for IdVec<I, T> {
    fn from_iter<It: IntoIterator<Item = T>>(iter: It) -> Self {
        IdVec { raw: iter.into_iter().collect(), _id: PhantomData }
    }
}

/// A pool of variable-length lists stored back to back (cranelift's `EntityList` idea):
/// list `i` is `items[starts[i]..starts[i + 1]]`. One allocation for all lists.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ListPool<T> {
    starts: Vec<u32>,
    items: Vec<T>,
}

impl<T> Default for ListPool<T> {
    fn default() -> Self {
        ListPool { starts: vec![0], items: Vec::new() }
    }
}

impl<T> ListPool<T> {
    pub(crate) fn with_capacity(lists: usize, items: usize) -> Self {
        let mut starts = Vec::with_capacity(lists + 1);
        starts.push(0);
        ListPool { starts, items: Vec::with_capacity(items) }
    }

    /// An empty pool on the allocations of `starts` and `items` (a thread's kept columns,
    /// `graph.rs`).
    pub(crate) fn from_parts(mut starts: Vec<u32>, mut items: Vec<T>) -> Self {
        starts.clear();
        starts.push(0);
        items.clear();
        ListPool { starts, items }
    }

    /// The pool whose columns `starts` and `items` are (as [`Self::into_parts`] gave them).
    pub(crate) fn from_filled_parts(starts: Vec<u32>, items: Vec<T>) -> Self {
        debug_assert!(starts.first() == Some(&0) && starts.last().is_some_and(|&e| e as usize == items.len()));
        ListPool { starts, items }
    }

    /// The pool's two columns, their allocations kept.
    pub(crate) fn into_parts(self) -> (Vec<u32>, Vec<T>) {
        (self.starts, self.items)
    }

    /// [`Self::with_capacity`] with both columns advised for huge pages
    /// (`hugepages.rs`): for a pool a pass fills once, front to back.
    pub(crate) fn with_capacity_huge(lists: usize, items: usize) -> Self {
        let mut starts = crate::hugepages::huge_vec(lists + 1);
        starts.push(0);
        ListPool { starts, items: crate::hugepages::huge_vec(items) }
    }

    /// Makes room for `lists` more lists holding `items` more items.
    pub(crate) fn reserve(&mut self, lists: usize, items: usize) {
        self.starts.reserve(lists);
        self.items.reserve(items);
    }

    /// Number of lists.
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// Closes the list being appended to; returns false when the pool's `u32` offsets overflow.
    #[inline(always)]
    pub(crate) fn finish_list(&mut self) -> bool {
        match u32::try_from(self.items.len()) {
            Ok(end) => {
                self.starts.push(end);
                true
            }
            Err(_) => false,
        }
    }

    /// Appends an item to the list being built.
    #[inline(always)]
    pub(crate) fn push_item(&mut self, item: T) {
        self.items.push(item);
    }

    /// Appends items to the list being built, one push each for a list of one or two
    /// (most operand lists: `extend`'s set-up costs more than they do).
    #[inline(always)]
    pub(crate) fn extend_from_short(&mut self, items: &[T])
    where
        T: Copy,
    {
        match *items {
            [a] => self.items.push(a),
            // One capacity check for both (an array's iterator has an exact length).
            [a, b] => self.items.extend([a, b]),
            _ => self.items.extend(items.iter().copied()),
        }
    }

    /// Drops the items of an unfinished list.
    pub(crate) fn abandon_list(&mut self) {
        let start = *self.starts.last().expect("pool always has a start") as usize;
        self.items.truncate(start);
    }

    /// Where list `list` starts among the items (for `list == len()`: the end of the last).
    pub(crate) fn start(&self, list: usize) -> usize {
        self.starts[list] as usize
    }

    #[inline(always)]
    pub(crate) fn get(&self, list: usize) -> &[T] {
        // Both bounds in one slice: one check of `list` instead of two.
        let bounds = &self.starts[list..list + 2];
        &self.items[bounds[0] as usize..bounds[1] as usize]
    }

    pub(crate) fn items(&self) -> &[T] {
        &self.items
    }

    /// Where each list starts among the items, and one more entry for the end of the
    /// last: list `i` is `items()[starts()[i]..starts()[i + 1]]` (for passes that index
    /// both slices in their own loop).
    pub(crate) fn starts(&self) -> &[u32] {
        &self.starts
    }

    /// Bytes held by the list starts (4 per list).
    pub(crate) fn starts_bytes(&self) -> usize {
        self.starts.capacity() * 4
    }

    /// Bytes held by the items.
    pub(crate) fn items_bytes(&self) -> usize {
        self.items.capacity() * std::mem::size_of::<T>()
    }

    /// Frees the items' unused capacity.
    pub(crate) fn shrink_items(&mut self) {
        if self.items.capacity() > self.items.len() {
            self.items.shrink_to_fit();
        }
    }

    /// [`shrink_loose`] on both columns.
    pub(crate) fn shrink_loose(&mut self) {
        shrink_loose(&mut self.starts);
        shrink_loose(&mut self.items);
    }
}

/// Shrinks `v` to its length when more than an eighth of it plus 16 entries are unused: a
/// large column does not keep its growth slack, and a small one is not reallocated to save
/// a few bytes (a one-operation graph would otherwise reallocate every column).
pub(crate) fn shrink_loose<T>(v: &mut Vec<T>) {
    if v.capacity() - v.len() > v.len() / 8 + 16 {
        v.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    define_id!(struct TestId = "t");

    #[test]
    fn ids_have_a_niche_and_a_prefix() {
        assert_eq!(std::mem::size_of::<TestId>(), 4);
        assert_eq!(std::mem::size_of::<Option<TestId>>(), 4);
        assert_eq!(format!("{:?}", TestId::new(12)), "t12");
        assert_eq!(TestId::new(5).index(), 5);
    }

    #[test]
    fn id_space_overflow_is_reported() {
        assert!(<TestId as Id>::try_new(u32::MAX as usize).is_none());
        assert!(<TestId as Id>::try_new(u32::MAX as usize - 1).is_some());
    }

    #[test]
    fn idvec_push_returns_dense_ids() {
        let mut v: IdVec<TestId, &str> = IdVec::new();
        let a = v.push("a");
        let b = v.push("b");
        assert_eq!((a.index(), b.index()), (0, 1));
        assert_eq!(v[b], "b");
        assert_eq!(v.ids().collect::<Vec<_>>(), vec![a, b]);
    }

    #[test]
    fn list_pool_keeps_lists_apart() {
        let mut p = ListPool::default();
        p.push_item(1);
        p.push_item(2);
        assert!(p.finish_list());
        assert!(p.finish_list());
        p.push_item(3);
        p.abandon_list();
        p.push_item(4);
        assert!(p.finish_list());
        assert_eq!(p.len(), 3);
        assert_eq!(p.get(0), &[1, 2]);
        assert_eq!(p.get(1), &[] as &[i32]);
        assert_eq!(p.get(2), &[4]);
    }
}
