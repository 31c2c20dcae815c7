//! `slots`: the evaluators' slot storage, one value per slot and no tag where the operand
//! type allows it.
//!
//! A [`SlotFile`] holds `MaybeUninit<T>` values. Whether a slot holds a value is known
//! from the verified program (every slot an instruction reads was written before it; see
//! `CompiledProgram::verify` and `Schedule::check_levels`), so the evaluators need no
//! per-slot tag to read. They need one only to drop: when `T` needs dropping (a tensor),
//! the file keeps a `live` byte per slot, set by a write and cleared by a drop or a take,
//! so that overwriting a slot drops its old value and clearing the file drops exactly the
//! values it holds. When `T` needs no drop (`f64`), the `live` column is not kept in
//! release builds, and a slot is 8 bytes rather than the 16 of `Option<f64>`: half the
//! cache footprint and half the cross-core traffic of a parallel level. Debug builds keep
//! `live` for every `T`, and every read asserts it.
//!
//! Invariants: `live` is empty, or as long as `vals`; when it is kept, `live[s]` is true
//! exactly when `vals[s]` holds an initialized value that the file owns. Only
//! [`SlotPtr`] writes through raw pointers, and it keeps the same invariant, clearing
//! `live[s]` before dropping an old value (so a panicking `Drop` leaks it rather than
//! dropping it twice).

use std::marker::PhantomData;
use std::mem::MaybeUninit;

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
    pub(crate) fn set(&mut self, s: usize, v: T) {
        assert!(s < self.vals.len(), "slot s{s} out of range");
        // SAFETY: in range, and `&mut self` excludes every other access.
        unsafe { self.ptr().write(s as u32, v) };
    }

    /// Takes the value out of slot `s`.
    ///
    /// # Panics
    /// If `s` is out of range, or, when the file tracks liveness (operands that need
    /// dropping, and debug builds), if the slot is empty: a value is never moved out twice.
    ///
    /// # Safety
    /// Slot `s` holds a value: it was written since the last reset and not taken since.
    /// For a program's outputs after a complete run, `CompiledProgram::verify` or
    /// `Schedule::check_levels` checked that every output slot is written and that each
    /// is moved out once, at its last mention (`SlotProgram::check_output_moves` in `program.rs`).
    pub(crate) unsafe fn take(&mut self, s: usize) -> T {
        if Self::TRACK {
            assert!(std::mem::take(&mut self.live[s]), "slot s{s} taken while empty");
        }
        // SAFETY: holds a value, by the caller's guarantee (checked above when tracked);
        // the flag (if kept) now says the file no longer owns it.
        unsafe { self.vals[s].assume_init_read() }
    }

    /// A reference to the value in slot `s`.
    ///
    /// # Panics
    /// As [`Self::take`].
    ///
    /// # Safety
    /// As [`Self::take`].
    pub(crate) unsafe fn get(&self, s: usize) -> &T {
        assert!(!Self::TRACK || self.live[s], "slot s{s} read while empty");
        // SAFETY: written, by the caller's guarantee (checked above when tracked).
        unsafe { self.vals[s].assume_init_ref() }
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
    pub(crate) unsafe fn read(&self, s: u32) -> &T {
        let s = s as usize;
        debug_assert!(s < self.len, "slot s{s} out of range");
        // SAFETY: in range, by the caller's guarantee (the `live` check is debug-only, and
        // `live` is kept in debug builds).
        debug_assert!(!SlotFile::<T>::TRACK || unsafe { *self.live.add(s) }, "slot s{s} read while empty");
        // SAFETY: in range and initialized, with no concurrent write, by the caller's
        // guarantee.
        unsafe { (*self.vals.add(s)).assume_init_ref() }
    }

    /// Stores `v` in slot `s`, dropping what it held.
    ///
    /// # Safety
    /// `s < len`, and nothing else reads or writes slot `s` (or its `live` byte) during the
    /// call, and no reference into the slot is alive.
    #[inline(always)]
    pub(crate) unsafe fn write(&self, s: u32, v: T) {
        let s = s as usize;
        debug_assert!(s < self.len, "slot s{s} out of range");
        // SAFETY (all): `s` is in range and this call has the slot to itself, by the
        // caller's guarantee; `live` is non-null exactly when the file keeps the column.
        unsafe {
            let slot = &mut *self.vals.add(s);
            if SlotFile::<T>::TRACK {
                let live = &mut *self.live.add(s);
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
    pub(crate) fn prefetch(&self, s: u32) {
        crate::prefetch::prefetch_read(self.vals.wrapping_add(s as usize));
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
        file.set(0, token.clone());
        file.set(2, token.clone());
        file.set(2, token.clone()); // overwrite drops the old value
        assert_eq!(Rc::strong_count(&token), 3);
        // SAFETY: slot 2 holds a value.
        let taken = unsafe { file.take(2) };
        assert_eq!(Rc::strong_count(&token), 3);
        drop(taken);
        assert_eq!(Rc::strong_count(&token), 2);
        file.reset(8); // drops slot 0
        assert_eq!(Rc::strong_count(&token), 1);
        file.set(7, token.clone());
        drop(file);
        assert_eq!(Rc::strong_count(&token), 1);
    }

    #[test]
    fn plain_values_round_trip() {
        let mut file: SlotFile<f64> = SlotFile::default();
        file.reset(3);
        file.set(1, 2.5);
        // SAFETY: slot 1 holds a value.
        assert_eq!(unsafe { *file.get(1) }, 2.5);
        let p = file.ptr();
        // SAFETY: in range, no other access.
        unsafe { p.write(0, -1.0) };
        // SAFETY: written just above.
        assert_eq!(unsafe { *p.read(0) }, -1.0);
    }
}
