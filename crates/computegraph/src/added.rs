//! [`AddedValues`]: the output values of one `GraphBuilder::add_operation` call.
//!
//! A slice of [`LocalValueId`]s that needs no heap allocation for operations of up to two
//! outputs (nearly every operation), so adding an operation allocates nothing on the
//! builder's side. The values are consecutive, so the owning iterator is a range of
//! indices: extending a `Vec` with them reads no slice. It reads like the `Vec` it replaces: index it, iterate it, `extend` a
//! `Vec` with it, or turn it into one with `to_vec` or `Vec::from`.

use std::fmt;
use std::ops::{Deref, Range};

use crate::graph::LocalValueId;

/// The output values of an operation just added, in output order (see
/// [`GraphBuilder::add_operation`](crate::GraphBuilder::add_operation)).
///
/// It dereferences to `[LocalValueId]`, so `outputs[0]`, `outputs.len()`, `outputs.iter()`
/// and `outputs.to_vec()` work as on a `Vec`, and it is [`IntoIterator`] by value and by
/// reference.
///
/// ```
/// use computegraph::{GraphBuilder, LocalValueId, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let sc = b.add_operation(ScalarOp::SinCos, vec![Local(x)], Primary);
/// assert_eq!(sc.len(), 2);
/// let (sin, cos) = (sc[0], sc[1]);
/// let mut values: Vec<LocalValueId> = vec![x];
/// values.extend(sc);
/// assert_eq!(values, [x, sin, cos]);
/// ```
#[derive(Clone)]
pub struct AddedValues {
    /// Index of the first value.
    first: u32,
    /// Number of values.
    len: u32,
    /// The first two values (the first `len` of them are the values when `len <= 2`).
    inline: [LocalValueId; 2],
    /// Every value when there are more than two.
    more: Option<Box<[LocalValueId]>>,
}

impl AddedValues {
    /// The values of a contiguous range of local value indices.
    #[inline]
    pub(crate) fn from_range(range: Range<usize>) -> Self {
        let (first, len) = (range.start, range.len());
        // Local value ids are `u32`s (the builder checked the range fits), so the casts
        // keep every value.
        let (first32, len32) = (first as u32, len as u32);
        debug_assert_eq!((first32 as usize, len32 as usize), (first, len));
        let more = if len <= 2 { None } else { Some(range.map(LocalValueId::new).collect()) };
        AddedValues { first: first32, len: len32, inline: [below_max(first), below_max(first + 1)], more }
    }

    /// The values, as a slice.
    #[inline]
    pub fn as_slice(&self) -> &[LocalValueId] {
        match &self.more {
            Some(more) => more,
            None => &self.inline[..self.len as usize],
        }
    }

    /// The values, as a `Vec` (allocates when there are any).
    pub fn into_vec(self) -> Vec<LocalValueId> {
        self.as_slice().to_vec()
    }
}

/// The id of local value `index`, which the builder bounded by `MAX_LOCAL_VALUES` (2^31):
/// masked to 31 bits, so that making it needs no check of the `u32` id space (the compiler
/// sees the bound). Only an inline id past the range can reach 2^31 (`inline[1]` of a last
/// single output, or both of an operation without outputs at the very end), and it is
/// never read, since `len` excludes it.
#[inline(always)]
fn below_max(index: usize) -> LocalValueId {
    debug_assert!(index <= crate::graph::MAX_LOCAL_VALUES + 1);
    LocalValueId::new(index & (crate::graph::MAX_LOCAL_VALUES - 1))
}

impl Default for AddedValues {
    fn default() -> Self {
        AddedValues::from_range(0..0)
    }
}

impl PartialEq for AddedValues {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for AddedValues {}

impl std::hash::Hash for AddedValues {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl Deref for AddedValues {
    type Target = [LocalValueId];
    #[inline]
    fn deref(&self) -> &[LocalValueId] {
        self.as_slice()
    }
}

impl AsRef<[LocalValueId]> for AddedValues {
    fn as_ref(&self) -> &[LocalValueId] {
        self.as_slice()
    }
}

impl fmt::Debug for AddedValues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl From<AddedValues> for Vec<LocalValueId> {
    fn from(values: AddedValues) -> Self {
        values.into_vec()
    }
}

impl IntoIterator for AddedValues {
    type Item = LocalValueId;
    type IntoIter = AddedValuesIter;
    #[inline]
    fn into_iter(self) -> AddedValuesIter {
        // The values are consecutive (they come from one operation).
        AddedValuesIter { next: self.first, end: self.first + self.len }
    }
}

impl<'a> IntoIterator for &'a AddedValues {
    type Item = &'a LocalValueId;
    type IntoIter = std::slice::Iter<'a, LocalValueId>;
    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

impl PartialEq<[LocalValueId]> for AddedValues {
    fn eq(&self, other: &[LocalValueId]) -> bool {
        self.as_slice() == other
    }
}

impl<const N: usize> PartialEq<[LocalValueId; N]> for AddedValues {
    fn eq(&self, other: &[LocalValueId; N]) -> bool {
        self.as_slice() == &other[..]
    }
}

impl PartialEq<Vec<LocalValueId>> for AddedValues {
    fn eq(&self, other: &Vec<LocalValueId>) -> bool {
        self.as_slice() == &other[..]
    }
}

/// The owning iterator of [`AddedValues`].
#[derive(Clone, Debug)]
pub struct AddedValuesIter {
    /// Index of the next value (`u32`, as local value ids are, so `next < end` keeps
    /// it below `u32::MAX` and making its id needs no check).
    next: u32,
    end: u32,
}

impl Iterator for AddedValuesIter {
    type Item = LocalValueId;
    #[inline]
    fn next(&mut self) -> Option<LocalValueId> {
        if self.next < self.end {
            let v = LocalValueId::new(self.next as usize);
            self.next += 1;
            Some(v)
        } else {
            None
        }
    }
    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.end - self.next) as usize;
        (n, Some(n))
    }
}

impl DoubleEndedIterator for AddedValuesIter {
    #[inline]
    fn next_back(&mut self) -> Option<LocalValueId> {
        if self.next < self.end {
            self.end -= 1;
            Some(LocalValueId::new(self.end as usize))
        } else {
            None
        }
    }
}

impl ExactSizeIterator for AddedValuesIter {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_like_the_vec_it_replaces() {
        let three = AddedValues::from_range(4..7);
        let ids: Vec<LocalValueId> = (4..7).map(LocalValueId::new).collect();
        assert_eq!(three, ids);
        assert_eq!(three[2], LocalValueId::new(6));
        assert_eq!(three.iter().rev().copied().collect::<Vec<_>>(), ids.iter().rev().copied().collect::<Vec<_>>());
        assert_eq!(three.clone().into_iter().len(), 3);
        assert_eq!(Vec::from(three.clone()), ids);
        assert_eq!(format!("{three:?}"), format!("{ids:?}"));
        assert!(AddedValues::from_range(2..2).is_empty());
        for range in [0..0, 3..4, 3..5, 3..9] {
            let added = AddedValues::from_range(range.clone());
            let expected: Vec<LocalValueId> = range.map(LocalValueId::new).collect();
            assert_eq!(added, expected);
            assert_eq!(added.clone().into_iter().collect::<Vec<_>>(), expected);
            assert_eq!(added.into_iter().rev().collect::<Vec<_>>(), expected.into_iter().rev().collect::<Vec<_>>());
        }
    }

    /// The inline ids are made without the id-space check (`below_max`): at the top of the
    /// builder's local value space (`MAX_LOCAL_VALUES`, 2^31) they are still the values
    /// of the range, for one output and for two.
    #[test]
    fn values_at_the_top_of_the_local_space_read_back() {
        let max = crate::graph::MAX_LOCAL_VALUES;
        for range in [max - 1..max, max - 2..max, max - 3..max - 1, max..max, 0..1, (1 << 30) - 1..(1 << 30) + 1] {
            let expected: Vec<LocalValueId> = range.clone().map(LocalValueId::new).collect();
            assert_eq!(AddedValues::from_range(range.clone()), expected, "{range:?}");
            assert_eq!(AddedValues::from_range(range).into_iter().collect::<Vec<_>>(), expected);
        }
    }
}
