//! `PerCore<T>`: one value per core, each in its own 128-byte slot.
//!
//! The slot for the calling core is found by [`crate::cpu_id`]; a core's slot shares no
//! cache line (pair) with another's, so updates by different cores never bounce lines.
//! Everything that is "one per core" (counters, free lists, magazines, translation-table
//! entries) is built from this.

extern crate alloc;

use crate::pad::CachePadded;
use alloc::boxed::Box;
use alloc::vec::Vec;

pub struct PerCore<T> {
    slots: Box<[CachePadded<T>]>,
}

impl<T> PerCore<T> {
    /// One slot per online core ([`crate::core_count`]), slot `i` made by `init(i)`.
    pub fn new(init: impl FnMut(usize) -> T) -> Self {
        Self::with_cores(crate::core_count(), init)
    }

    /// `cores` slots (at least 1).
    pub fn with_cores(cores: usize, mut init: impl FnMut(usize) -> T) -> Self {
        let n = cores.max(1);
        let slots: Vec<CachePadded<T>> = (0..n).map(|i| CachePadded::new(init(i))).collect();
        Self { slots: slots.into_boxed_slice() }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The slot index core `core` uses. Cores past the slot count (brought online after this
    /// was built) share slots modulo the count: still correct for the `Sync` types kept here,
    /// only less local.
    #[inline]
    pub fn slot_of(&self, core: usize) -> usize {
        if core < self.slots.len() {
            core
        } else {
            core % self.slots.len()
        }
    }

    /// The calling core's slot.
    #[inline]
    pub fn local(&self) -> &T {
        &self.slots[self.slot_of(crate::cpu_id())]
    }

    /// Core `core`'s slot (modulo the slot count).
    #[inline]
    pub fn on(&self, core: usize) -> &T {
        &self.slots[self.slot_of(core)]
    }

    /// Slot `i` exactly, if it exists.
    pub fn get(&self, i: usize) -> Option<&T> {
        self.slots.get(i).map(|s| &**s)
    }

    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.slots.get_mut(i).map(|s| &mut **s)
    }

    /// Read all slots, in core order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &T> + '_ {
        self.slots.iter().map(|s| &**s)
    }

    pub fn iter_mut(&mut self) -> impl ExactSizeIterator<Item = &mut T> + '_ {
        self.slots.iter_mut().map(|s| &mut **s)
    }
}
