//! Borrowing a shared object without writing its reference count: per-core borrow slots
//! (hazard pointers) and the hand-over of the last drop to the last borrower.
//!
//! Why: a system call that only *uses* an object for its own length (a size query, a mapping
//! query, the source of a copy) need not take a counted reference, and taking one writes the
//! object's count line, so two such calls on two cores conflict on that line although they
//! commute (the scalable commutativity rule). A borrow writes only the calling core's
//! own slot line.
//!
//! The protocol (Dekker-style; every step `SeqCst`):
//!
//! - **Borrow.** Publish the object's address in a free slot of this core (`BorrowSlots::publish`,
//!   which ends with a full fence), *then* check that the object still has a counted reference
//!   (the caller's count, e.g. `strong > 0`, or, equivalently, that no last drop has begun:
//!   `DropState::is_live`). If it has none, end the borrow at once and do not use the object.
//! - **Last drop.** The holder of the last counted reference marks the object orphaned
//!   (`DropState::last_reference_gone`, a store then a full fence), then scans every core's slots.
//!   If no slot holds the object, it tries to win the drop; otherwise a borrower will.
//! - **End of a borrow.** Clear the slot (store, full fence), then, if the object is orphaned,
//!   scan the slots and try to win the drop (`DropState::end_borrow`).
//!
//! Why it is safe: the two sides each store, fence, then load the other's location (slot vs
//! count / orphan mark), so at least one sees the other. A borrower that found the count above
//! zero published its slot before the last drop's scan, so the scan sees the slot and leaves
//! the drop to a borrower; the borrower that clears the last slot sees the orphan mark and
//! drops. A borrower whose check found the count at zero never uses the object. Winning is a
//! compare-exchange from `ORPHAN` to `DROPPED`, so the value is dropped exactly once.
//! Checked by loom (tests/loom.rs: `borrow_*`).
//!
//! What this does not do: keep the *memory* alive between finding an address in a lock-free
//! table and publishing it in a slot. The caller does that (the kernel reaches these objects
//! inside a reclamation operation, `reclaim`, and frees their memory only after a grace period).

use crate::pad::CachePadded;
use crate::sync::{fence, AtomicPtr, AtomicU32, Ordering};

/// Borrow slots per core: the nested borrows of one system call (two objects at most in the
/// kernel today), with room to spare. A core with no free slot takes a counted reference.
pub const BORROW_SLOTS: usize = 4;

/// Every core's borrow slots, each core's on a cache line of its own: a borrow writes only its
/// own core's line; only a last drop (or the end of a borrow of an orphaned object) reads them
/// all.
pub struct BorrowSlots<const CORES: usize> {
    cores: [CachePadded<[AtomicPtr<()>; BORROW_SLOTS]>; CORES],
}

impl<const CORES: usize> BorrowSlots<CORES> {
    /// Empty slots (a `const fn` outside loom, so the kernel can keep them in a static).
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        BorrowSlots { cores: [const { CachePadded::new([const { AtomicPtr::new(core::ptr::null_mut()) }; BORROW_SLOTS]) }; CORES] }
    }

    #[cfg(loom)]
    pub fn new() -> Self {
        BorrowSlots { cores: core::array::from_fn(|_| CachePadded::new(core::array::from_fn(|_| AtomicPtr::new(core::ptr::null_mut())))) }
    }

    /// Publish `p` in a free slot of `core` and fence: the caller must check the object's count
    /// *after* this. `None` if `core` is out of range or all its slots are taken.
    pub fn publish(&self, core: usize, p: *mut ()) -> Option<usize> {
        let slots = self.cores.get(core)?;
        let i = slots.iter().position(|s| s.compare_exchange(core::ptr::null_mut(), p, Ordering::SeqCst, Ordering::Relaxed).is_ok())?;
        fence(Ordering::SeqCst);
        Some(i)
    }

    /// Clear slot `slot` of `core` and fence.
    fn clear(&self, core: usize, slot: usize) {
        self.cores[core][slot].store(core::ptr::null_mut(), Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// End a borrow of an object that has no drop to hand over (a reader that only needs the
    /// object to outlive it, while the owner waits for `held` to turn false before freeing it):
    /// clear slot `slot` of `core` and fence.
    pub fn release(&self, core: usize, slot: usize) {
        self.clear(core, slot);
    }

    /// Whether any of the first `ncores` cores' slots holds `p`.
    pub fn held(&self, ncores: usize, p: *mut ()) -> bool {
        self.cores[..ncores.min(CORES)].iter().any(|slots| slots.iter().any(|s| s.load(Ordering::SeqCst) == p))
    }

    /// Whether core `core`'s slots hold `p` (false for a core out of range).
    pub fn held_by(&self, core: usize, p: *mut ()) -> bool {
        self.cores.get(core).is_some_and(|slots| slots.iter().any(|s| s.load(Ordering::SeqCst) == p))
    }
}

impl<const CORES: usize> Default for BorrowSlots<CORES> {
    fn default() -> Self {
        Self::new()
    }
}

const LIVE: u32 = 0;
const ORPHAN: u32 = 1;
const DROPPED: u32 = 2;

/// An object's side of the protocol: live, orphaned (its last counted reference went while a
/// borrow may be out), or dropped (one core won the drop).
pub struct DropState(AtomicU32);

impl DropState {
    crate::sync::const_fn_unless_loom! {
        pub fn new() -> Self {
            DropState(AtomicU32::new(LIVE))
        }
    }

    /// The last counted reference to the object at `p` is gone. `true`: the caller drops the
    /// value now (no borrower holds it, and the caller won); `false`: a borrower will.
    pub fn last_reference_gone<const C: usize>(&self, slots: &BorrowSlots<C>, ncores: usize, p: *mut ()) -> bool {
        self.0.store(ORPHAN, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.try_win(slots, ncores, p)
    }

    /// End the borrow in slot `slot` of `core` of the object at `p`. `true`: the caller drops
    /// the value now (its last counted reference went during the borrow, no other borrower is
    /// left, and the caller won).
    pub fn end_borrow<const C: usize>(&self, slots: &BorrowSlots<C>, core: usize, slot: usize, ncores: usize, p: *mut ()) -> bool {
        slots.clear(core, slot);
        self.0.load(Ordering::SeqCst) == ORPHAN && self.try_win(slots, ncores, p)
    }

    /// Whether the value is live: no last drop has begun. A borrower may check this instead of
    /// the object's count after publishing its slot (`BorrowSlots::publish`): the last drop
    /// stores the orphan mark and fences before it scans, so the same Dekker pairing holds
    /// (mark vs slot), and the borrower reads a line only the last drop writes rather than
    /// the count every new reference writes.
    pub fn is_live(&self) -> bool {
        self.0.load(Ordering::SeqCst) == LIVE
    }

    /// Whether the value was dropped (for checks and tests).
    pub fn is_dropped(&self) -> bool {
        self.0.load(Ordering::Acquire) == DROPPED
    }

    /// The first half of `last_reference_gone`: mark the value orphaned and fence, leaving the
    /// slot scan (`try_drop`) for later. For a last drop that must not read other cores' slot
    /// lines now (the kernel scans at its core's next system call). Until the scan, the
    /// caller keeps the value's memory alive; a borrower that ends meanwhile may win the drop.
    pub fn orphan(&self) {
        self.0.store(ORPHAN, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// The second half of `last_reference_gone`, after `orphan`: `true` if the caller drops
    /// the value now (no borrower holds it and no ending borrower won the drop first).
    pub fn try_drop<const C: usize>(&self, slots: &BorrowSlots<C>, ncores: usize, p: *mut ()) -> bool {
        self.try_win(slots, ncores, p)
    }

    /// `try_drop` for an object only core `core` can have borrowed: scans that core's slots
    /// alone. The caller must know no other core published `p` before the orphan mark's
    /// fence (`orphan`), e.g. because every borrower on another core first stores a flag
    /// (SeqCst) that the caller reads (SeqCst) after `orphan`: by the store-fence-load pairing,
    /// either the caller sees the flag (and scans every core) or that borrower's check after
    /// its own publication sees the orphan mark and does not use the object.
    pub fn try_drop_on<const C: usize>(&self, slots: &BorrowSlots<C>, core: usize, p: *mut ()) -> bool {
        !slots.held_by(core, p) && self.0.compare_exchange(ORPHAN, DROPPED, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    fn try_win<const C: usize>(&self, slots: &BorrowSlots<C>, ncores: usize, p: *mut ()) -> bool {
        !slots.held(ncores, p) && self.0.compare_exchange(ORPHAN, DROPPED, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }
}

impl Default for DropState {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_released_borrow_is_no_longer_held_and_its_slot_is_reused() {
        let slots = BorrowSlots::<2>::new();
        let p = 0x1000 as *mut ();
        let a = slots.publish(1, p).unwrap();
        let b = slots.publish(1, p).unwrap();
        assert_ne!(a, b);
        slots.release(1, a);
        assert!(slots.held(2, p), "the other borrow is still out");
        slots.release(1, b);
        assert!(!slots.held(2, p));
        assert_eq!(slots.publish(1, p), Some(0), "the first slot is free again");
    }

    #[test]
    fn a_last_drop_without_borrowers_wins_at_once() {
        let (slots, st) = (BorrowSlots::<2>::new(), DropState::new());
        let p = 0x1000 as *mut ();
        assert!(st.last_reference_gone(&slots, 2, p));
        assert!(st.is_dropped());
    }

    #[test]
    fn a_borrow_out_at_the_last_drop_hands_the_drop_to_the_borrower() {
        let (slots, st) = (BorrowSlots::<2>::new(), DropState::new());
        let (p, q) = (0x1000 as *mut (), 0x2000 as *mut ());
        let s = slots.publish(1, p).unwrap();
        let other = slots.publish(0, q).unwrap();
        assert!(!st.last_reference_gone(&slots, 2, p), "core 1 still borrows it");
        assert!(!st.is_dropped());
        assert!(st.end_borrow(&slots, 1, s, 2, p), "the last borrower drops");
        assert!(st.is_dropped());
        // A borrow of another object is untouched.
        assert!(slots.held(2, q));
        let st2 = DropState::new();
        assert!(!st2.end_borrow(&slots, 0, other, 2, q), "a live object's borrow ends without a drop");
        assert!(!slots.held(2, q));
    }

    #[test]
    fn an_orphan_scanned_later_is_dropped_once() {
        let (slots, st) = (BorrowSlots::<2>::new(), DropState::new());
        let p = 0x1000 as *mut ();
        let s = slots.publish(1, p).unwrap();
        st.orphan();
        assert!(!st.is_live());
        assert!(st.end_borrow(&slots, 1, s, 2, p), "the borrower ending before the scan drops");
        assert!(!st.try_drop(&slots, 2, p), "the later scan must not drop it again");
        let st2 = DropState::new();
        assert!(st2.is_live());
        st2.orphan();
        assert!(st2.try_drop(&slots, 2, p), "no borrower: the scan drops");
    }

    #[test]
    fn two_borrowers_the_last_one_drops() {
        let (slots, st) = (BorrowSlots::<3>::new(), DropState::new());
        let p = 0x1000 as *mut ();
        let (a, b) = (slots.publish(1, p).unwrap(), slots.publish(2, p).unwrap());
        assert!(!st.last_reference_gone(&slots, 3, p));
        assert!(!st.end_borrow(&slots, 1, a, 3, p), "core 2 still borrows");
        assert!(st.end_borrow(&slots, 2, b, 3, p));
    }

    #[test]
    fn slots_run_out_and_cores_out_of_range_get_none() {
        let slots = BorrowSlots::<2>::new();
        for i in 0..BORROW_SLOTS {
            assert_eq!(slots.publish(0, (0x1000 * (i + 1)) as *mut ()), Some(i));
        }
        assert_eq!(slots.publish(0, 0x9000 as *mut ()), None, "a fifth borrow on one core");
        assert_eq!(slots.publish(2, 0x9000 as *mut ()), None, "core 2 of 2");
        assert!(!slots.held(1, 0x9000 as *mut ()));
        assert!(slots.held(1, 0x3000 as *mut ()));
        assert!(!slots.held(0, 0x3000 as *mut ()), "only the first ncores cores are scanned");
    }
}
