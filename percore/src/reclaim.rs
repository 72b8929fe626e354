//! Existence guarantees by quiescence (Tornado section 5, "Garbage collection
//! implementation"), without reference counts bouncing between caches.
//!
//! An *operation* is a short stretch of kernel work that may hold temporary references
//! (pointers on its stack) to shared objects. Each core counts its active operations in its
//! own padded slot. To free an object, a caller first removes every persistent reference
//! (unlinks it), then *retires* it onto its own core's deferred-free list. A token circulates
//! over the cores: on each visit the core's operation generation is switched, and the token
//! moves on only when that core's operations of the previous generation have all ended. An
//! object retired while the token stood at visit `s` is freed once visits `s+1 ..= s+n` have
//! completed: every core has then drained every operation that began before the retire, so
//! no temporary reference can remain.
//!
//! Two counts per core (current and previous generation) rather than Tornado's single count
//! avoid its starvation concern: the token waits only for operations older than its visit,
//! never for the count to reach zero while new operations keep starting. (This is what K42,
//! Tornado's successor, did.) Docs/percore.md explains why this gives the same guarantee as
//! epoch-based reclamation.
//!
//! Anyone may advance the token (a visit only reads the visited core's counters), so a core
//! that is idle or offline does not stall reclamation as long as some core calls
//! [`Domain::advance`]; the kernel does it from each core's timer tick and idle loop.

extern crate alloc;

use crate::per_core::PerCore;
use crate::pad::CachePadded;
use crate::spin::TicketLock;
use crate::sync::{dekker_fence, fence, spin_loop, AtomicUsize, Ordering};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::marker::PhantomData;

#[derive(Clone, Copy)]
struct Retired {
    /// Token value when retired.
    stamp: usize,
    ptr: *mut (),
    free: unsafe fn(*mut ()),
}

/// Placeholder free function of unused batch entries in `collect_on`.
unsafe fn free_nothing(_: *mut ()) {}

// SAFETY: only `Send` objects are retired (see `retire_on`), so freeing on another core is
// fine.
unsafe impl Send for Retired {}

struct VisitState {
    /// The token's visit has switched this core's generation and waits for `parity` to drain.
    switched: bool,
    parity: usize,
    /// The visitors' copy of the core's generation: a visit only stores the shared word.
    generation: usize,
}

struct CoreState {
    generation: AtomicUsize,
    /// Active operations by generation parity.
    active: [AtomicUsize; 2],
    /// Serialises token visits to this core.
    visit: TicketLock<VisitState>,
    /// This core's deferred-free list. Locked with interrupts off: a timer-tick `collect`
    /// may interrupt a `retire` on the same core.
    deferred: TicketLock<Vec<Retired>>,
}

/// A set of cores sharing objects whose frees wait for quiescence.
pub struct Domain {
    cores: PerCore<CoreState>,
    /// Completed visits. The token stands at core `token % n`.
    token: CachePadded<AtomicUsize>,
}

/// An active operation on one core; references read while it lives stay valid until it drops.
pub struct Operation<'a> {
    domain: &'a Domain,
    slot: usize,
    parity: usize,
    _not_send: PhantomData<*const ()>,
}

impl Drop for Operation<'_> {
    fn drop(&mut self) {
        // Release: everything this operation read happens before the visit that sees the
        // count drop, and so before any free that visit allows.
        self.domain.cores.on(self.slot).active[self.parity].fetch_sub(1, Ordering::Release);
    }
}

impl Domain {
    /// A domain over the online cores.
    pub fn new() -> Self {
        Self::with_cores(crate::core_count())
    }

    pub fn with_cores(cores: usize) -> Self {
        Self {
            cores: PerCore::with_cores(cores, |_| CoreState {
                generation: AtomicUsize::new(0),
                active: [AtomicUsize::new(0), AtomicUsize::new(0)],
                visit: TicketLock::new(VisitState { switched: false, parity: 0, generation: 0 }),
                deferred: TicketLock::new(Vec::new()),
            }),
            token: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    pub fn cores(&self) -> usize {
        self.cores.len()
    }

    /// Completed token visits so far (`visits / cores` full circulations).
    pub fn visits(&self) -> usize {
        self.token.load(Ordering::Acquire)
    }

    /// Begin an operation on the calling core.
    #[inline]
    pub fn enter(&self) -> Operation<'_> {
        self.enter_on(crate::cpu_id())
    }

    /// Begin an operation counted on core `core`.
    pub fn enter_on(&self, core: usize) -> Operation<'_> {
        let slot = self.cores.slot_of(core);
        let c = self.cores.on(slot);
        loop {
            let g = c.generation.load(Ordering::SeqCst);
            let parity = g & 1;
            // Store-then-load against a visit's switch-then-check: either the visit sees our
            // count, or we see its new generation and re-register under it. On x86-64 the
            // locked add is a full barrier, so our later pointer loads cannot move above it.
            c.active[parity].fetch_add(1, Ordering::SeqCst);
            dekker_fence();
            if c.generation.load(Ordering::SeqCst) == g {
                return Operation { domain: self, slot, parity, _not_send: PhantomData };
            }
            c.active[parity].fetch_sub(1, Ordering::Release);
        }
    }

    /// Try to complete the token's current visit. Returns true if the token moved on.
    /// Non-blocking: if the visited core still has older operations, returns false.
    pub fn advance(&self) -> bool {
        let t = self.token.load(Ordering::SeqCst);
        let c = self.cores.on(t % self.cores.len());
        let Some(mut v) = c.visit.try_lock() else { return false };
        // Someone else may have finished this visit while we took the lock.
        if self.token.load(Ordering::SeqCst) != t {
            return false;
        }
        if !v.switched {
            let g = v.generation;
            v.generation = g.wrapping_add(1);
            // Operations that start after this see the new generation.
            c.generation.store(v.generation, Ordering::SeqCst);
            dekker_fence();
            v.switched = true;
            v.parity = g & 1;
        }
        // Acquire: pairs with each finished operation's releasing decrement.
        if c.active[v.parity].load(Ordering::SeqCst) != 0 {
            return false;
        }
        v.switched = false;
        // Only the holder of this core's visit lock that saw `t` can move the token from `t`.
        self.token.store(t.wrapping_add(1), Ordering::SeqCst);
        true
    }

    /// Hand a removed object to the calling core's deferred-free list.
    ///
    /// The caller must already have removed every persistent reference to it (phase 1 of
    /// Tornado's destruction), so only temporary references of operations that began
    /// earlier can remain.
    pub fn retire<T: Send + 'static>(&self, object: Box<T>) {
        self.retire_on(crate::cpu_id(), object)
    }

    pub fn retire_on<T: Send + 'static>(&self, core: usize, object: Box<T>) {
        unsafe fn free_box<T>(p: *mut ()) {
            // SAFETY: `p` came from `Box::into_raw` of a `Box<T>` in `retire_on`, freed once.
            drop(unsafe { Box::from_raw(p as *mut T) });
        }
        // The unlink the caller did comes before our reading of the token, so every visit
        // counted from `stamp + 1` switches generations after the unlink.
        fence(Ordering::SeqCst);
        let stamp = self.token.load(Ordering::SeqCst);
        let r = Retired { stamp, ptr: Box::into_raw(object) as *mut (), free: free_box::<T> };
        self.cores.on(core).deferred.lock_irqsave().push(r);
    }

    /// Retire an object given as a raw pointer and the function that frees it, without
    /// allocating anything the caller cannot be told about: if core `core`'s deferred list
    /// cannot grow, nothing is retired and `Err(())` comes back (a kernel then waits for a
    /// grace period with [`Domain::synchronize`] and frees the object itself).
    ///
    /// # Safety
    /// `free(ptr)` must be sound to call exactly once, from any core, once no operation that
    /// began before this call is still running; the caller has already unlinked the object.
    /// On success, returns how many objects wait on that list now.
    pub unsafe fn try_retire_raw_on(&self, core: usize, ptr: *mut (), free: unsafe fn(*mut ())) -> Result<usize, ()> {
        fence(Ordering::SeqCst);
        let mut list = self.cores.on(core).deferred.lock_irqsave();
        list.try_reserve(1).map_err(|_| ())?;
        // Stamped under the list lock, so the list stays in stamp order (collect relies on it).
        let stamp = self.token.load(Ordering::SeqCst);
        list.push(Retired { stamp, ptr, free });
        Ok(list.len())
    }

    /// Like [`Domain::try_retire_raw_on`], but never allocates: it retires only if core
    /// `core`'s list already has room (see [`Domain::reserve_on`]), and otherwise returns
    /// `Err(())` having done nothing. A kernel that counts its memory exactly keeps its lists
    /// at their boot size this way.
    ///
    /// # Safety
    /// As for [`Domain::try_retire_raw_on`].
    pub unsafe fn try_retire_raw_in_room_on(&self, core: usize, ptr: *mut (), free: unsafe fn(*mut ())) -> Result<usize, ()> {
        fence(Ordering::SeqCst);
        let mut list = self.cores.on(core).deferred.lock_irqsave();
        if list.len() == list.capacity() {
            return Err(());
        }
        let stamp = self.token.load(Ordering::SeqCst);
        list.push(Retired { stamp, ptr, free });
        Ok(list.len())
    }

    /// Free what the calling core retired and the token has since cleared. Returns how many
    /// objects were freed.
    pub fn collect(&self) -> usize {
        self.collect_on(crate::cpu_id())
    }

    /// Free what core `core` retired and the token has since cleared. Allocates nothing (a
    /// kernel calls it where allocation may fail): ready items leave the list in batches
    /// through a buffer on the stack, and since a core's retires are stamped in list order,
    /// the ready items are a prefix.
    pub fn collect_on(&self, core: usize) -> usize {
        const BATCH: usize = 32;
        let n = self.cores.len();
        let mut freed = 0;
        loop {
            let now = self.token.load(Ordering::Acquire);
            let mut batch = [Retired { stamp: 0, ptr: core::ptr::null_mut(), free: free_nothing }; BATCH];
            let taken = {
                let mut list = self.cores.on(core).deferred.lock_irqsave();
                // Visits r.stamp+1 ..= r.stamp+n completed (the visit under way at retire
                // time may have switched before the unlink, so it does not count).
                let k = list.iter().take(BATCH).take_while(|r| now.wrapping_sub(r.stamp) > n).count();
                batch[..k].copy_from_slice(&list[..k]);
                list.drain(..k);
                k
            };
            // Frees run outside the list lock: a destructor may retire more objects.
            for r in &batch[..taken] {
                // SAFETY: `ptr`/`free` were paired at retire time; the item left the list, so
                // it is freed exactly once; the token cleared it, so no operation can still
                // use it.
                unsafe { (r.free)(r.ptr) };
            }
            freed += taken;
            if taken < BATCH {
                return freed;
            }
        }
    }

    /// Make room on core `core`'s deferred-free list for `n` objects up front, so retires
    /// below that need no allocation (a kernel does this at boot: its memory accounting then
    /// does not see lists grow and shrink).
    pub fn reserve_on(&self, core: usize, n: usize) -> Result<(), ()> {
        self.cores.on(core).deferred.lock_irqsave().try_reserve(n).map_err(|_| ())
    }

    /// Objects on core `core`'s deferred-free list.
    pub fn pending_on(&self, core: usize) -> usize {
        self.cores.on(core).deferred.lock_irqsave().len()
    }

    /// Poll from core `core`'s quiescent point (timer tick, idle loop): move the token if
    /// possible and free what is ready. Returns the number freed.
    pub fn quiescent_point_on(&self, core: usize) -> usize {
        self.advance();
        self.collect_on(core)
    }

    /// Block until everything retired before this call on any core may be freed, driving
    /// the token itself. Must not be called inside an [`Operation`] of this domain (it would
    /// wait for itself).
    pub fn synchronize(&self) {
        fence(Ordering::SeqCst);
        let start = self.token.load(Ordering::SeqCst);
        let n = self.cores.len();
        while self.token.load(Ordering::SeqCst).wrapping_sub(start) <= n {
            if !self.advance() {
                spin_loop();
            }
        }
    }
}

impl Default for Domain {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        // `&mut self`: no operation is active, so everything retired can go.
        for c in self.cores.iter_mut() {
            for r in core::mem::take(c.deferred.get_mut()) {
                // SAFETY: as in `collect_on`; each item is freed once.
                unsafe { (r.free)(r.ptr) };
            }
        }
    }
}
