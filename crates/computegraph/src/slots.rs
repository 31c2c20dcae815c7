//! `slots`: the evaluators' slot storage, one value per slot and no tag where the operand
//! type allows it.
//!
//! A [`SlotFile`] holds `MaybeUninit<T>` values. Whether a slot holds a value is known
//! from the verified program (every slot an instruction reads was written before it; see
//! `Program::verify` in `program.rs` and `Schedule::check_levels`; the evaluators' views
//! over a file are made only from a `VerifiedProgram` or a `VerifiedSchedule`, `eval.rs`),
//! so the evaluators need no
//! per-slot tag to read. They need one only to drop: when `T` needs dropping (a tensor),
//! the file keeps a `live` byte per slot, set by a write and cleared by a drop or a take,
//! so that overwriting a slot drops its old value and clearing the file drops exactly the
//! values it holds. When `T` needs no drop (`f64`), the `live` column is not kept in
//! release builds, and a slot is 8 bytes rather than the 16 of `Option<f64>`: half the
//! cache footprint and half the cross-core traffic of a parallel level. Debug builds keep
//! `live` for every `T`, and every read asserts it.
//!
//! Slots are named by [`SlotId`] (a `u32` with a niche: index + 1); [`SlotPtr`] addresses
//! slot `s` as `vals.add(s.one_past()).sub(1)`, which compiles to one addressing mode.
//!
//! Invariants: `live` is empty, or as long as `vals`; when it is kept, `live[s]` is true
//! exactly when `vals[s]` holds an initialized value that the file owns. Only
//! [`SlotPtr`] writes through raw pointers, and it keeps the same invariant, clearing
//! `live[s]` before dropping an old value (so a panicking `Drop` leaks it rather than
//! dropping it twice).

use std::marker::PhantomData;
use std::mem::MaybeUninit;

use crate::id::SlotId;

/// Slot storage of one evaluation: see the module doc.
pub(crate) struct SlotFile<T> {
    vals: Vec<MaybeUninit<T>>,
    /// `live[s]`: slot `s` holds a value. Kept when [`Self::TRACK`], empty otherwise.
    live: Vec<bool>,
}

impl<T> Default for SlotFile<T> {
    fn default() -> Self {
        SlotFile { vals: Vec::new(), live: Vec::new() }
    }
}

impl<T> SlotFile<T> {
    /// Whether the file keeps the `live` column: when values need dropping, and in debug
    /// builds (for the read assertions).
    pub(crate) const TRACK: bool = std::mem::needs_drop::<T>() || cfg!(debug_assertions);

    /// Drops every held value and leaves `n` empty slots, keeping the allocations.
    pub(crate) fn reset(&mut self, n: usize) {
        self.clear();
        self.vals.reserve(n);
        // SAFETY: `MaybeUninit` needs no initialization, and the capacity was reserved.
        unsafe { self.vals.set_len(n) };
        if Self::TRACK {
            self.live.resize(n, false);
        }
    }

    /// Number of slots.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.vals.len()
    }

    /// Drops every held value and leaves no slot.
    pub(crate) fn clear(&mut self) {
        if Self::TRACK {
            for (v, live) in self.vals.iter_mut().zip(&mut self.live) {
                if std::mem::take(live) {
                    // SAFETY: `live` was set, so the value is initialized and owned here;
                    // the flag is cleared first, so a panic in `drop` cannot drop it again.
                    unsafe { v.assume_init_drop() };
                }
            }
        }
        self.vals.clear();
        self.live.clear();
    }

    /// Stores `v` in slot `s`, dropping what it held.
    ///
    /// # Panics
    /// If `s` is out of range.
    pub(crate) fn set(&mut self, s: SlotId, v: T) {
        assert!(s.index() < self.vals.len(), "slot {s:?} out of range");
        // SAFETY: in range, and `&mut self` excludes every other access.
        unsafe { self.ptr().write(s, v) };
    }

    /// Takes the value out of slot `s`.
    ///
    /// # Panics
    /// If `s` is out of range, or, when the file tracks liveness (operands that need
    /// dropping, and debug builds), if the slot is empty: a value is never moved out twice.
    ///
    /// # Safety
    /// Slot `s` holds a value: it was written since the last reset and not taken since.
    /// For a program's outputs after a complete run, `Program::verify` or
    /// `Schedule::check_levels` checked that every output slot is written and that each
    /// is moved out once, at its last mention (`SlotProgram::check_output_moves` in `program.rs`).
    pub(crate) unsafe fn take(&mut self, s: SlotId) -> T {
        if Self::TRACK {
            assert!(std::mem::take(&mut self.live[s.index()]), "slot {s:?} taken while empty");
        }
        // SAFETY: holds a value, by the caller's guarantee (checked above when tracked);
        // the flag (if kept) now says the file no longer owns it.
        unsafe { self.vals[s.index()].assume_init_read() }
    }

    /// A reference to the value in slot `s`.
    ///
    /// # Panics
    /// As [`Self::take`].
    ///
    /// # Safety
    /// As [`Self::take`].
    pub(crate) unsafe fn get(&self, s: SlotId) -> &T {
        assert!(!Self::TRACK || self.live[s.index()], "slot {s:?} read while empty");
        // SAFETY: written, by the caller's guarantee (checked above when tracked).
        unsafe { self.vals[s.index()].assume_init_ref() }
    }

    /// A raw view for element-wise access during a run, borrowing the file exclusively.
    pub(crate) fn ptr(&mut self) -> SlotPtr<'_, T> {
        SlotPtr {
            vals: self.vals.as_mut_ptr(),
            live: if Self::TRACK { self.live.as_mut_ptr() } else { std::ptr::null_mut() },
            len: self.vals.len(),
            _file: PhantomData,
        }
    }
}

impl<T> Drop for SlotFile<T> {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Element-wise raw access to a [`SlotFile`]: no reference to the whole file exists while
/// it lives, so (with a caller-side argument that accesses to one slot do not overlap)
/// several threads may use it at once. The evaluators wrap it in their own views, which
/// state when their accesses are sound (`eval.rs`).
pub(crate) struct SlotPtr<'a, T> {
    vals: *mut MaybeUninit<T>,
    /// Null when the file keeps no `live` column.
    live: *mut bool,
    len: usize,
    _file: PhantomData<&'a mut SlotFile<T>>,
}

impl<T> SlotPtr<'_, T> {
    /// The value in slot `s`.
    ///
    /// # Safety
    /// `s < len`, the slot holds a value, and nothing writes the slot while the reference
    /// lives.
    #[inline(always)]
    pub(crate) unsafe fn read(&self, s: SlotId) -> &T {
        debug_assert!(s.index() < self.len, "slot {s:?} out of range");
        // SAFETY: in range, by the caller's guarantee (the `live` check is debug-only, and
        // `live` is kept in debug builds).
        debug_assert!(!SlotFile::<T>::TRACK || unsafe { *self.live.add(s.index()) }, "slot {s:?} read while empty");
        // SAFETY: in range and initialized, with no concurrent write, by the caller's
        // guarantee; `add(one_past)` is at most one past the end, and `sub(1)` is slot `s`.
        unsafe { (*self.vals.add(s.one_past()).sub(1)).assume_init_ref() }
    }

    /// Stores `v` in slot `s`, dropping what it held.
    ///
    /// # Safety
    /// `s < len`, and nothing else reads or writes slot `s` (or its `live` byte) during the
    /// call, and no reference into the slot is alive.
    #[inline(always)]
    pub(crate) unsafe fn write(&self, s: SlotId, v: T) {
        debug_assert!(s.index() < self.len, "slot {s:?} out of range");
        // SAFETY: `s` is in range and this call has the slot to itself, by the caller's
        // guarantee (`add(one_past)` is at most one past the end, `sub(1)` is slot `s`);
        // `live` is non-null exactly when the file keeps the column.
        unsafe {
            let slot = &mut *self.vals.add(s.one_past()).sub(1);
            if SlotFile::<T>::TRACK {
                let live = &mut *self.live.add(s.index());
                if std::mem::replace(live, false) {
                    slot.assume_init_drop();
                }
                slot.write(v);
                *live = true;
            } else {
                slot.write(v);
            }
        }
    }

    /// Hints that slot `s` will be read soon (any `s`: the hint never dereferences).
    #[inline(always)]
    pub(crate) fn prefetch(&self, s: SlotId) {
        crate::prefetch::prefetch_read(self.vals.wrapping_add(s.one_past()).wrapping_sub(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn drops_exactly_what_it_holds() {
        let token = Rc::new(());
        let mut file: SlotFile<Rc<()>> = SlotFile::default();
        file.reset(4);
        file.set(SlotId::new(0), token.clone());
        file.set(SlotId::new(2), token.clone());
        file.set(SlotId::new(2), token.clone()); // overwrite drops the old value
        assert_eq!(Rc::strong_count(&token), 3);
        // SAFETY: slot 2 holds a value.
        let taken = unsafe { file.take(SlotId::new(2)) };
        assert_eq!(Rc::strong_count(&token), 3);
        drop(taken);
        assert_eq!(Rc::strong_count(&token), 2);
        file.reset(8); // drops slot 0
        assert_eq!(Rc::strong_count(&token), 1);
        file.set(SlotId::new(7), token.clone());
        drop(file);
        assert_eq!(Rc::strong_count(&token), 1);
    }

    #[test]
    fn plain_values_round_trip() {
        let mut file: SlotFile<f64> = SlotFile::default();
        file.reset(3);
        file.set(SlotId::new(1), 2.5);
        // SAFETY: slot 1 holds a value.
        assert_eq!(unsafe { *file.get(SlotId::new(1)) }, 2.5);
        let p = file.ptr();
        // SAFETY: in range, no other access.
        unsafe { p.write(SlotId::new(0), -1.0) };
        // SAFETY: written just above.
        assert_eq!(unsafe { *p.read(SlotId::new(0)) }, -1.0);
    }
}
