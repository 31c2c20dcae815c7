//! [`AddedValues`]: the output values of one `GraphBuilder::add_operation` call.
//!
//! A slice of [`LocalValueId`]s that needs no heap allocation for operations of up to two
//! outputs (nearly every operation), so adding an operation allocates nothing on the
//! builder's side. It reads like the `Vec` it replaces: index it, iterate it, `extend` a
//! `Vec` with it, or turn it into one with `to_vec` or `Vec::from`.

use std::fmt;
use std::ops::{Deref, Range};

use smallvec::SmallVec;

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
/// # #[path = "../doc/scalar.rs"] mod scalar;
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
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct AddedValues {
    ids: SmallVec<[LocalValueId; 2]>,
}

impl AddedValues {
    /// The values of a contiguous range of local value indices.
    #[inline]
    pub(crate) fn from_range(range: Range<usize>) -> Self {
        let (first, len) = (range.start, range.len());
        let ids = if len <= 2 {
            // The common case, written out: `collect` goes through `SmallVec::extend`.
            SmallVec::from_buf_and_len([LocalValueId::new(first), LocalValueId::new(first + 1)], len)
        } else {
            range.map(LocalValueId::new).collect()
        };
        AddedValues { ids }
    }

    /// The values, as a slice.
    pub fn as_slice(&self) -> &[LocalValueId] {
        &self.ids
    }

    /// The values, as a `Vec` (allocates when there are any).
    pub fn into_vec(self) -> Vec<LocalValueId> {
        self.ids.into_vec()
    }
}

impl Deref for AddedValues {
    type Target = [LocalValueId];
    fn deref(&self) -> &[LocalValueId] {
        &self.ids
    }
}

impl AsRef<[LocalValueId]> for AddedValues {
    fn as_ref(&self) -> &[LocalValueId] {
        &self.ids
    }
}

impl fmt::Debug for AddedValues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.ids.iter()).finish()
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
        let first = self.ids.first().map_or(0, |v| v.index());
        AddedValuesIter { range: first..first + self.ids.len() }
    }
}

impl<'a> IntoIterator for &'a AddedValues {
    type Item = &'a LocalValueId;
    type IntoIter = std::slice::Iter<'a, LocalValueId>;
    fn into_iter(self) -> Self::IntoIter {
        self.ids.iter()
    }
}

impl PartialEq<[LocalValueId]> for AddedValues {
    fn eq(&self, other: &[LocalValueId]) -> bool {
        self.ids[..] == *other
    }
}

impl<const N: usize> PartialEq<[LocalValueId; N]> for AddedValues {
    fn eq(&self, other: &[LocalValueId; N]) -> bool {
        self.ids[..] == other[..]
    }
}

impl PartialEq<Vec<LocalValueId>> for AddedValues {
    fn eq(&self, other: &Vec<LocalValueId>) -> bool {
        self.ids[..] == other[..]
    }
}

/// The owning iterator of [`AddedValues`].
#[derive(Clone, Debug)]
pub struct AddedValuesIter {
    range: Range<usize>,
}

impl Iterator for AddedValuesIter {
    type Item = LocalValueId;
    #[inline]
    fn next(&mut self) -> Option<LocalValueId> {
        self.range.next().map(LocalValueId::new)
    }
    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.range.size_hint()
    }
}

impl DoubleEndedIterator for AddedValuesIter {
    #[inline]
    fn next_back(&mut self) -> Option<LocalValueId> {
        self.range.next_back().map(LocalValueId::new)
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
}
