//! Shares: the id → object maps through which every system call names objects.
//!
//! Both kinds of share keep their entries in one open-addressed hash table (linear probing,
//! tombstones, at most half full), whose slots are atomics so that lookups need no lock:
//!
//! - A **private** share (every core's root share, or `SHARE_PRIVATE`) belongs to one core:
//!   only that core (or a kernel core acting for it) may use it, so neither its lookups nor
//!   its changes take a lock, and a removed entry is dropped at once.
//! - A **shared** share is read without any lock or shared write: a lookup runs inside a
//!   reclamation operation (`percore::reclaim`, Tornado's existence guarantee by quiescence),
//!   which touches only the calling core's counters. Changes serialise on the share's own
//!   writer lock. A removed entry's reference, and a table replaced by a bigger one, are
//!   retired and dropped only after every lookup that could still see them has ended.
//!
//! Lookups never block writers and see each entry either before or after a change. A slot is
//! filled object-first, then id; emptied id-first (tombstone), then object. A reader that
//! finds its id checks the object's own id, since ids name one object for ever, so a slot
//! reused between the two loads cannot hand it a different object. See docs/objects.md.

use alloc::vec::Vec;
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use super::kref::{KBorrow, KRef};
use crate::mm::nodevec::NodeVec;
use super::{try_push as kobj_try_push, KObject, ObjRef};
use abi::Error;
use percore::{Domain, TicketLock};

/// Object ids are `(core + 1) << 40 | sequence`, never 0 and never all ones.
const EMPTY: u64 = 0;
const TOMBSTONE: u64 = u64::MAX;

/// Whether `id` can name an object at all. Ids come from user programs: the two slot markers
/// must never be looked up, inserted or removed as if they were ids.
#[inline]
fn is_object_id(id: u64) -> bool {
    id != EMPTY && id != TOMBSTONE
}
const MIN_SLOTS: usize = 8;
/// Entries a new root share has room for.
const ROOT_ENTRIES: usize = 16;

struct Slot {
    id: AtomicU64,
    obj: AtomicPtr<()>,
}

/// The slots, a power of two of them. Never changed in size: a full table is replaced.
/// The table and its slots come from the memory of the share's `memid` node.
struct Table {
    shift: u32,
    slots: NodeVec<Slot>,
}

impl Table {
    fn try_new(n: usize, node: usize) -> Result<*mut Table, Error> {
        debug_assert!(n.is_power_of_two() && n >= MIN_SLOTS);
        let slots = NodeVec::try_from_fn(n, node, |_| Slot { id: AtomicU64::new(EMPTY), obj: AtomicPtr::new(ptr::null_mut()) })
            .map_err(|_| Error::NoMemory)?;
        let table = Table { shift: 64 - n.trailing_zeros(), slots };
        try_box_on(table, node)
    }

    #[inline]
    fn home(&self, id: u64) -> usize {
        (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// The raw reference in `id`'s slot, if the slot holds `id`. The caller keeps the table
    /// and its objects alive (private: only the caller changes it; shared: inside a
    /// reclamation operation). The table is never more than half used, so a probe sequence
    /// always ends at an empty slot; the bound only guards against a broken invariant.
    ///
    /// Any id may be asked for, the two slot markers included: a slot whose id is a marker
    /// has a null object once its writer is done (`empty`, a new table), so a private share
    /// finds nothing for them, and a shared share's caller checks the id on the object.
    #[inline]
    fn find_raw(&self, id: u64) -> Option<*mut ()> {
        let i = self.position(id)?;
        let p = self.slots[i].obj.load(Ordering::Acquire);
        // Null: being removed (only while writers run, in a shared share; a private share's
        // owner fills slots object-first itself), or a marker id's slot.
        (!p.is_null()).then_some(p)
    }

    /// The index of the slot holding `id`, for readers (as `find_raw`) and for a writer
    /// removing `id` (which needs no tombstone on the way, unlike `find`).
    #[inline]
    fn position(&self, id: u64) -> Option<usize> {
        let mask = self.slots.len() - 1;
        let mut i = self.home(id);
        for _ in 0..self.slots.len() {
            let k = self.slots[i & mask].id.load(Ordering::Acquire);
            if k == id {
                return Some(i & mask);
            }
            if k == EMPTY {
                return None;
            }
            i += 1;
        }
        None
    }

    /// A shared share's entry for `id`, as a new reference (same rules as `find_raw`). The
    /// table's reference may be dropped meanwhile, so the count is raised only if it is
    /// not zero (the allocation outlives the caller's operation: `defer_free`), and the id is
    /// checked on the live object. `Err` carries a reference to drop once the caller's
    /// operation has ended (dropping may free, and freeing may wait for a grace period).
    #[inline]
    fn get_shared(&self, id: u64) -> Result<Option<ObjRef>, ObjRef> {
        let Some(p) = self.find_raw(id) else { return Ok(None) };
        // SAFETY: `p` was published after `KRef::defer_free`, and the caller is inside a
        // reclamation operation, so the allocation is alive.
        match unsafe { KRef::<KObject>::try_clone_raw(p) } {
            Some(r) if r.id == id => Ok(Some(r)),
            Some(other) => Err(other), // the slot was emptied and reused
            None => Ok(None),          // being removed
        }
    }

    /// `get_shared` as a borrow (`Share::peek`): same rules, the count only read.
    #[inline]
    fn peek_shared(&self, id: u64) -> PeekFound {
        let Some(p) = self.find_raw(id) else { return PeekFound::None };
        // SAFETY: `p` was published after `KRef::defer_free`, and the caller is inside a
        // reclamation operation, so the allocation is alive; every KObject is borrowable.
        match unsafe { KRef::<KObject>::borrow_raw(p) } {
            Ok(b) if b.id == id => PeekFound::Some(Peek(PeekRef::Borrowed(b))),
            Ok(b) => PeekFound::Stale(b), // the slot was emptied and reused
            Err(Some(b)) => PeekFound::Stale(b), // being removed
            // No free slot: a counted reference, as `get_shared` takes.
            // SAFETY: as above.
            Err(None) => match unsafe { KRef::<KObject>::try_clone_raw(p) } {
                Some(r) if r.id == id => PeekFound::Some(Peek(PeekRef::Counted(r))),
                Some(other) => PeekFound::Stale2(other),
                None => PeekFound::None,
            },
        }
    }

    /// Writer side: `Ok(index)` of `id`'s slot, or `Err((index, empty))` of the slot a new
    /// `id` goes into (the first tombstone on its probe path, else the empty slot that ends
    /// it; `empty` tells which, for the load-factor count). The
    /// caller has checked that `id` is a possible object id (`is_object_id`): the two marker
    /// values would match marker slots.
    #[inline]
    fn find(&self, id: u64) -> Result<usize, (usize, bool)> {
        debug_assert!(is_object_id(id));
        let mask = self.slots.len() - 1;
        let mut i = self.home(id);
        let mut free = None;
        for _ in 0..self.slots.len() {
            let k = self.slots[i & mask].id.load(Ordering::Relaxed);
            if k == EMPTY {
                return Err(free.map_or((i & mask, true), |f| (f, false)));
            }
            if k == id {
                return Ok(i & mask);
            }
            if k == TOMBSTONE && free.is_none() {
                free = Some(i & mask);
            }
            i += 1;
        }
        // No empty slot left: the writer keeps half the table empty, so only a tombstone can
        // be here.
        Err((free.expect("share table has a free slot"), false))
    }

    /// Writer side: fill slot `i` (object first, then id, so a reader that sees the id sees
    /// the object).
    fn fill(&self, i: usize, id: u64, obj: *mut ()) {
        self.slots[i].obj.store(obj, Ordering::Release);
        self.slots[i].id.store(id, Ordering::Release);
    }

    /// Writer side of a shared share: empty slot `i`; returns its reference and how many
    /// slots became empty again (the caller takes them off `used`). (A private share uses
    /// `remove_shifting`.)
    ///
    /// A removed entry whose next slot is empty ends its probe cluster, so no entry lies past
    /// it on any probe path: the slot becomes empty rather than a tombstone, and so do the
    /// tombstones just before it. This keeps probe sequences short when the same entry comes
    /// and goes (a share add+delete loop would otherwise always step over a tombstone). A
    /// concurrent lookup is unaffected: an id it looks for cannot lie beyond an empty slot,
    /// and one that loaded this slot's id before it changed finds the object null or, if the
    /// slot was reused, another object whose own id differs.
    #[inline]
    fn empty(&self, i: usize) -> (*mut (), usize) {
        // Writers are serialised (the owner core, or the writer lock), so loads and stores
        // do: no locked read-modify-write on the call path.
        let mask = self.slots.len() - 1;
        let p = self.slots[i].obj.load(Ordering::Relaxed);
        if self.slots[(i + 1) & mask].id.load(Ordering::Relaxed) != EMPTY {
            self.slots[i].id.store(TOMBSTONE, Ordering::Release);
            self.slots[i].obj.store(ptr::null_mut(), Ordering::Release);
            return (p, 0);
        }
        self.slots[i].id.store(EMPTY, Ordering::Release);
        self.slots[i].obj.store(ptr::null_mut(), Ordering::Release);
        let mut freed = 1;
        let mut j = i.wrapping_sub(1) & mask;
        // The table always has empty slots, so this stops; `freed` bounds it regardless.
        while freed < self.slots.len() && self.slots[j].id.load(Ordering::Relaxed) == TOMBSTONE {
            self.slots[j].id.store(EMPTY, Ordering::Release);
            freed += 1;
            j = j.wrapping_sub(1) & mask;
        }
        (p, freed)
    }

    /// Owner side of a private share, which no other core reads: empty slot `i` by moving
    /// back the entries after it that may move (linear probing's deletion without tombstones,
    /// Knuth's algorithm 6.4R), so a private table never gets a tombstone and never needs a
    /// rebuild to shed them. Returns slot `i`'s reference.
    #[inline]
    fn remove_shifting(&self, i: usize) -> *mut () {
        let mask = self.slots.len() - 1;
        let p = self.slots[i].obj.load(Ordering::Relaxed);
        let mut hole = i;
        let mut j = i;
        // The table always has an empty slot, which ends this; the bound only guards it.
        for _ in 0..self.slots.len() {
            j = (j + 1) & mask;
            let k = self.slots[j].id.load(Ordering::Relaxed);
            if k == EMPTY {
                break;
            }
            // The entry at `j` can fill the hole unless its home lies cyclically in
            // (hole, j]: then its probe path from home to the hole stays unbroken. (A private
            // table has no tombstones; one moved like an entry would stay harmless.)
            let h = self.home(k) & mask;
            let stays = if hole <= j { hole < h && h <= j } else { hole < h || h <= j };
            if !stays {
                let o = self.slots[j].obj.load(Ordering::Relaxed);
                self.slots[hole].obj.store(o, Ordering::Relaxed);
                self.slots[hole].id.store(k, Ordering::Relaxed);
                hole = j;
            }
        }
        self.slots[hole].id.store(EMPTY, Ordering::Relaxed);
        self.slots[hole].obj.store(ptr::null_mut(), Ordering::Relaxed);
        p
    }

    fn live(&self) -> impl Iterator<Item = (u64, *mut ())> + '_ {
        self.slots.iter().filter_map(|s| {
            let k = s.id.load(Ordering::Acquire);
            let p = s.obj.load(Ordering::Acquire);
            (k != EMPTY && k != TOMBSTONE && !p.is_null()).then_some((k, p))
        })
    }
}

/// What `Table::peek_shared` found; the stale forms are ended by the caller outside its
/// reclamation operation.
enum PeekFound {
    Some(Peek),
    None,
    Stale(KBorrow<KObject>),
    Stale2(ObjRef),
}

/// Change a writer-side count. Writers are serialised (the owner core, or the writer lock),
/// so this is a load and a store, not a locked read-modify-write; readers only load it.
#[inline]
fn bump(count: &AtomicUsize, by: isize) {
    count.store(count.load(Ordering::Relaxed).wrapping_add_signed(by), Ordering::Relaxed);
}

/// `Box::new` without aborting when memory runs out, with the memory from NUMA node `node`.
fn try_box_on<T>(value: T, node: usize) -> Result<*mut T, Error> {
    let p = crate::mm::heap::try_alloc_on_node(core::alloc::Layout::new::<T>(), node).ok_or(Error::NoMemory)? as *mut T;
    // SAFETY: a fresh allocation with T's layout from the kernel heap (whose `free`, behind
    // the global allocator's `dealloc`, takes memory of any node), so `Box::from_raw` may
    // free it later.
    unsafe { p.write(value) };
    Ok(p)
}

/// Free a table (not the references in it).
///
/// # Safety
/// `p` came from `Table::try_new`, nobody can reach it any more, and it is freed once.
unsafe fn free_table(p: *mut ()) {
    // SAFETY: by the caller's guarantee.
    drop(unsafe { alloc::boxed::Box::from_raw(p as *mut Table) });
}

/// Drop one reference given up with `into_raw`.
///
/// # Safety
/// `p` came from `KRef::<KObject>::into_raw` and is dropped once.
unsafe fn drop_ref(p: *mut ()) {
    // SAFETY: by the caller's guarantee.
    drop(unsafe { KRef::<KObject>::from_raw(p) });
}

/// The reclamation domain of all shared shares: one per kernel, made once every core is
/// online. Before that only the boot core runs, and removals free at once.
static RECLAIM: AtomicPtr<Domain> = AtomicPtr::new(ptr::null_mut());

/// Items a core lets pile up on its deferred list before it drives the token itself.
const COLLECT_BATCH: usize = 32;

/// Deferred-list room made per core at boot (the lists never grow past it): a core collects
/// every `COLLECT_BATCH` retires, so it seldom finds its list full.
const BOOT_LIST_ROOM: usize = 4 * COLLECT_BATCH;

pub fn init_reclaim(cores: usize) {
    let d = alloc::boxed::Box::new(Domain::with_cores(cores));
    for core in 0..cores {
        // Boot-time memory; a list that could not get it makes every remover wait for a grace
        // period instead (correct, only slower).
        let _ = d.reserve_on(core, BOOT_LIST_ROOM);
    }
    RECLAIM.store(alloc::boxed::Box::into_raw(d), Ordering::Release);
}

fn reclaim() -> Option<&'static Domain> {
    let p = RECLAIM.load(Ordering::Acquire);
    // SAFETY: set once from a leaked Box and never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

fn this_core() -> usize {
    crate::percpu::this().index
}

/// Free `p` with `free` once no lookup can still see it. If the deferred list is full (it
/// keeps the room it got at boot), wait for a grace period here instead. Every
/// `COLLECT_BATCH` retires the core drives the token and frees what is ready. Used for
/// replaced tables and, through `KRef`'s deferred free, for the memory of objects that were
/// in a shared share. The caller holds no reclamation operation (waiting for a grace period
/// inside one would wait for itself); locks are fine, since lookups never take them.
///
/// # Safety
/// As for `Domain::try_retire_raw_on`: `p` is unlinked and `free(p)` is sound once.
pub(super) unsafe fn retire(p: *mut (), free: unsafe fn(*mut ())) {
    let Some(d) = reclaim() else {
        // SAFETY: before the other cores start nobody else can hold p.
        unsafe { free(p) };
        return;
    };
    let me = this_core();
    // The list never grows past the room it got at boot (the kernel's memory counts stay
    // exact): when it is full, free what is ready and try once more, else wait here.
    // SAFETY: forwarded from the caller.
    let retired = unsafe { d.try_retire_raw_in_room_on(me, p, free) }.or_else(|()| {
        drive(d, me);
        // SAFETY: as above; the first attempt retired nothing.
        unsafe { d.try_retire_raw_in_room_on(me, p, free) }
    });
    match retired {
        Ok(pending) if pending % COLLECT_BATCH == 0 => drive(d, me),
        Ok(_) => {}
        Err(()) => {
            d.synchronize();
            // SAFETY: the grace period has passed: no lookup that saw p is still running.
            unsafe { free(p) };
        }
    }
}

/// Move the token round the cores once if it can (a visit only reads the visited core's
/// counters and waits for nobody), then free what this core retired that is now safe.
fn drive(d: &Domain, me: usize) {
    for _ in 0..=d.cores() {
        if !d.advance() {
            break;
        }
    }
    d.collect_on(me);
}

/// Free what this core retired from shared shares, as far as the token allows (from the idle
/// loop; no lock or operation held).
pub fn reclaim_poll() {
    super::kref::scan_orphans();
    let Some(d) = reclaim() else { return };
    let me = this_core();
    if d.pending_on(me) > 0 {
        drive(d, me);
    }
}

/// Wait for a grace period and free everything every core has retired. For exact object and
/// memory counts (init's leak check, `sys_info`). The caller holds no operation.
pub fn reclaim_all() {
    super::kref::scan_all_orphans();
    let Some(d) = reclaim() else { return };
    d.synchronize();
    for core in 0..d.cores() {
        d.collect_on(core);
    }
}

/// A share (or other object) a system call holds while it runs, in the cheapest form that
/// keeps it alive: an alias of a reference held elsewhere for longer (the caller's context),
/// a private share's entry lent by `Share::lend`, a borrow (`Peek`, for a share found in a
/// shared share) or a counted reference of its own. Every form derefs to the object with no
/// branch; only the end differs. It derefs to the object, not to an `ObjRef`: a borrowed
/// object may lose its last counted reference meanwhile, so a call that keeps it asks for
/// `counted`, which refuses a dead one.
pub struct Lease<'a> {
    /// The object's `KRef::into_raw` pointer; `end` keeps it alive.
    raw: *mut (),
    end: LeaseEnd<'a>,
}

enum LeaseEnd<'a> {
    /// An alias of a reference that outlives `'a`: nothing to do.
    Alias(&'a ObjRef),
    /// A lent entry of this (private) share: end the lend (`lending`).
    Unlend(&'a Share),
    /// A borrow or a counted reference of the lease's own (`Peek`), ended by its drop.
    Peeked(Option<Peek>),
}

impl<'a> Lease<'a> {
    /// An alias of `obj`, which outlives the lease.
    #[inline]
    pub fn alias(obj: &'a ObjRef) -> Lease<'a> {
        Lease { raw: KRef::as_raw(obj), end: LeaseEnd::Alias(obj) }
    }

    /// A borrowed (or counted) object of the lease's own.
    #[inline]
    pub fn peeked(p: Peek) -> Lease<'a> {
        Lease { raw: p.as_raw(), end: LeaseEnd::Peeked(Some(p)) }
    }

    /// Whether this is a lent table entry (for tests).
    pub fn is_lent(&self) -> bool {
        matches!(self.end, LeaseEnd::Unlend(_))
    }

    /// A counted reference of the caller's own (`NoSuchObject` if the object lost its last
    /// one during a borrow).
    pub fn counted(&self) -> Result<ObjRef, Error> {
        match &self.end {
            LeaseEnd::Alias(r) => Ok((*r).clone()),
            // SAFETY: the lent entry's table reference stays while the lease lives, so the
            // count is at least one.
            LeaseEnd::Unlend(_) => Ok(unsafe { KRef::clone_raw(self.raw) }),
            LeaseEnd::Peeked(Some(p)) => p.counted(),
            LeaseEnd::Peeked(None) => Err(Error::NoSuchObject),
        }
    }

    /// The object as a `Peek` that may outlive the lease.
    pub fn into_peek(mut self) -> Peek {
        let raw = self.raw;
        match &mut self.end {
            LeaseEnd::Alias(r) => Peek::of(r),
            LeaseEnd::Unlend(_) => {
                // SAFETY: the lent entry holds a counted reference while the lease lives (the
                // lease, and with it the lend, ends only after the borrow started). This copy
                // is never dropped (ManuallyDrop), so the count is untouched.
                let r = core::mem::ManuallyDrop::new(unsafe { KRef::<KObject>::from_raw(raw) });
                Peek::of(&r)
            }
            // Always `Some` until here (only this takes it).
            LeaseEnd::Peeked(p) => p.take().expect("a peeked lease holds its peek"),
        }
    }

    /// Whether this lease and `r` are the same object.
    pub fn is(&self, r: &ObjRef) -> bool {
        self.raw == KRef::as_raw(r)
    }
}

impl Drop for Lease<'_> {
    #[inline]
    fn drop(&mut self) {
        if let LeaseEnd::Unlend(share) = self.end {
            // The table's reference was never ours: nothing to do but end the lend.
            bump(&share.lending, -1);
        }
        // Alias: nothing; Peeked: the peek's own drop ends it.
    }
}

impl core::ops::Deref for Lease<'_> {
    type Target = KObject;
    #[inline]
    fn deref(&self) -> &KObject {
        // SAFETY: `raw` came from `KRef::into_raw`, and `end` keeps the object alive for as
        // long as the lease lives.
        unsafe { KRef::<KObject>::raw_value(self.raw) }
    }
}

/// An object a system call uses only for its own length (a stat, a size, the share a new
/// object goes into): borrowed (`KRef::borrow_raw`, `percore::borrow`), which writes only this
/// core's borrow slot, not the object's count; or, when this core has no free slot, a counted
/// reference. Derefs to the object, never to an `ObjRef`: a borrowed object's count may reach
/// zero during the borrow, and cloning it then would revive it; a call that keeps the object
/// asks for `counted`, which refuses a dead one.
pub struct Peek(PeekRef);

enum PeekRef {
    Borrowed(KBorrow<KObject>),
    Counted(ObjRef),
}

impl Peek {
    /// Borrow the object of a reference the caller holds.
    #[inline]
    pub fn of(obj: &ObjRef) -> Peek {
        match KRef::borrow(obj) {
            Some(b) => Peek(PeekRef::Borrowed(b)),
            None => Peek(PeekRef::Counted(obj.clone())),
        }
    }

    /// A counted reference of the caller's own to the object (`NoSuchObject` if its last
    /// counted reference went during the borrow).
    #[inline]
    pub fn counted(&self) -> Result<ObjRef, Error> {
        match &self.0 {
            PeekRef::Borrowed(b) => b.to_counted().ok_or(Error::NoSuchObject),
            PeekRef::Counted(r) => Ok(r.clone()),
        }
    }

    /// The object's counted references other than this peek's own (what `ObjStat::refs`
    /// reports).
    pub fn refs(&self) -> usize {
        match &self.0 {
            PeekRef::Borrowed(b) => b.strong_count(),
            PeekRef::Counted(r) => KRef::strong_count(r).saturating_sub(1),
        }
    }

    /// The object's `KRef::into_raw` pointer (valid while the peek lives).
    pub fn as_raw(&self) -> *mut () {
        match &self.0 {
            PeekRef::Borrowed(b) => b.as_raw(),
            PeekRef::Counted(r) => KRef::as_raw(r),
        }
    }
    /// The object behind a reverse link (`KLink`), borrowed (counted if this core has no
    /// free borrow slot); `None` only if it has no counted reference left and no slot was
    /// free. A value whose last counted reference went while it is still linked (its drop is
    /// pending) comes back borrowed too: the borrow keeps it, and ending it may drop it, so
    /// the caller ends it outside the lock below.
    ///
    /// # Safety
    /// The link's allocation is alive while this runs: the caller holds the lock under which
    /// the object's own drop removes the link (`AddressRange::drop`, `Segment::remove_map`).
    pub unsafe fn of_link(l: &super::kref::KLink<KObject>) -> Option<Peek> {
        // SAFETY: by the caller's guarantee; every KObject is borrowable.
        match unsafe { KRef::<KObject>::borrow_raw(l.as_raw()) } {
            Ok(b) | Err(Some(b)) => Some(Peek(PeekRef::Borrowed(b))),
            // SAFETY: as above (the allocation is alive; the count is raised only from non-zero).
            Err(None) => unsafe { KRef::<KObject>::try_clone_raw(l.as_raw()) }.map(|r| Peek(PeekRef::Counted(r))),
        }
    }

    /// A peek holding a counted reference.
    pub fn from_counted(r: ObjRef) -> Peek {
        Peek(PeekRef::Counted(r))
    }

    /// Whether this is a borrow (for tests).
    pub fn is_borrowed(&self) -> bool {
        matches!(self.0, PeekRef::Borrowed(_))
    }

    /// Whether `r` is a reference to this object.
    pub fn is(&self, r: &ObjRef) -> bool {
        match &self.0 {
            PeekRef::Borrowed(b) => b.as_raw() == KRef::as_raw(r),
            PeekRef::Counted(o) => KRef::ptr_eq(o, r),
        }
    }
}

impl core::ops::Deref for Peek {
    type Target = KObject;
    #[inline]
    fn deref(&self) -> &KObject {
        match &self.0 {
            PeekRef::Borrowed(b) => b,
            PeekRef::Counted(r) => r,
        }
    }
}

/// Parts of a shared share. An entry lives in the part its id names (`part_of`), and each part
/// has its own table, load count and writer lock on its own cache line: changes of entries in
/// different parts (inserts and deletes of different names in one share) share no line, and a
/// lookup reads only its part (sv6's per-bucket locks). A private share, which only
/// its owner core touches, has one part.
const PARTS: usize = 32;
/// Ids of cores in different classes (core index modulo this) never share a part; ids of one
/// core share one only if their sequence numbers are `PARTS / PART_CORE_CLASSES` apart.
const PART_CORE_CLASSES: usize = 4;

/// The part of a shared share that holds `id` (ids are `(core + 1) << 40 | sequence`).
#[inline]
fn part_of(id: u64) -> usize {
    let core = ((id >> 40) as usize).wrapping_sub(1);
    let seq = (id & ((1 << 40) - 1)) as usize;
    core % PART_CORE_CLASSES + PART_CORE_CLASSES * (seq % (PARTS / PART_CORE_CLASSES))
}

/// One hash table with its writer-side state, on a cache line of its own.
#[repr(align(64))]
struct Part {
    /// Null until the first entry.
    table: AtomicPtr<Table>,
    /// Writer-side count of entries plus tombstones (the load factor; a private table has no
    /// tombstones, so there it counts entries). The number of entries is not kept for a
    /// shared share: only a rebuild, `ids` and `len` need it, and they count.
    used: AtomicUsize,
    /// Serialises changes to a shared share's part (unused for private ones).
    writer: TicketLock<()>,
}

impl Part {
    fn new() -> Part {
        Part { table: AtomicPtr::new(ptr::null_mut()), used: AtomicUsize::new(0), writer: TicketLock::new(()) }
    }

    #[inline]
    fn table(&self) -> Option<&Table> {
        let p = self.table.load(Ordering::Acquire);
        // SAFETY: a published table stays allocated while the owner (private) cannot replace
        // it, or until a grace period after it was replaced (shared: callers are inside an
        // operation or hold the writer lock).
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// Room for `extra` more entries, with entries plus tombstones at most half the slots:
    /// short probe sequences matter more here than memory.
    #[inline]
    fn has_room(&self, extra: usize) -> bool {
        let used = self.used.load(Ordering::Relaxed);
        self.table().is_some_and(|t| (used + extra) * 2 <= t.slots.len())
    }

    /// Replace the table by a bigger one with room for `extra` more entries, from `node`'s
    /// memory. `private`: only the owner core can reach the old table (freed at once).
    #[cold]
    fn rebuild(&self, extra: usize, node: usize, private: bool) -> Result<(), Error> {
        // Rebuild at four times the live entries (which also clears the tombstones), and
        // never smaller than before: like a vector's capacity, a share's memory follows its
        // peak size, so it does not come and go with tombstones.
        let cap = self.table().map_or(0, |t| t.slots.len());
        let live = self.table().map_or(0, |t| t.live().count());
        let want = ((live + extra) * 4).next_power_of_two().max(MIN_SLOTS).max(cap);
        let fresh_ptr = Table::try_new(want, node)?;
        // SAFETY: just allocated, not yet published.
        let fresh = unsafe { &*fresh_ptr };
        let mut n = 0;
        if let Some(old) = self.table() {
            for (id, p) in old.live() {
                let Err((i, _)) = fresh.find(id) else { continue };
                fresh.fill(i, id, p);
                n += 1;
            }
        }
        let old = self.table.swap(fresh_ptr, Ordering::AcqRel);
        self.used.store(n, Ordering::Relaxed);
        if !old.is_null() {
            if private {
                // SAFETY: only this core could reach the old table, and it no longer does.
                unsafe { free_table(old as *mut ()) };
            } else {
                // SAFETY: unpublished above; lookups that loaded it finish their operations
                // first. Its references moved to the new table, so only the table is freed.
                unsafe { retire(old as *mut (), free_table) };
            }
        }
        Ok(())
    }

    /// The insert itself; the caller is the owner core or holds this part's writer lock. A
    /// refused reference comes back for the caller to drop.
    #[inline(always)]
    fn insert_locked(&self, obj: ObjRef, node: usize, private: bool) -> Result<(), (Error, ObjRef)> {
        // Ids come from `KObject::create` (never a slot marker) and objects from tables or new.
        debug_assert!(is_object_id(obj.id));
        // Rebuilding first (when needed) keeps this to one probe sequence; a rebuild for an
        // id that turns out to be present already is harmless. (`reserve`, with the table
        // loaded once: this is on every share_addobj's path.)
        let t = match self.table() {
            Some(t) if (self.used.load(Ordering::Relaxed) + 1) * 2 <= t.slots.len() => t,
            _ => {
                if let Err(e) = self.rebuild(1, node, private) {
                    return Err((e, obj));
                }
                let Some(t) = self.table() else { return Err((Error::NoMemory, obj)) };
                t
            }
        };
        let Err((i, empty)) = t.find(obj.id) else { return Err((Error::AlreadyExists, obj)) };
        if empty {
            bump(&self.used, 1);
        }
        t.fill(i, obj.id, KRef::into_raw(obj));
        Ok(())
    }
}

pub struct Share {
    /// The owning core of a private share; `None` for a shared one.
    owner: Option<usize>,
    /// The NUMA node its tables come from (`memid`'s).
    node: usize,
    /// A private share's one part (unused by a shared share).
    main: Part,
    /// A shared share's `PARTS` parts (empty for a private share).
    parts: NodeVec<Part>,
    /// Private shares: how many leases `lend` has out (entries lent without a reference of
    /// their own). While it is not 0, every removal is refused (`Busy`).
    lending: AtomicUsize,
}

impl Share {
    /// A private share of core `owner` whose table comes from core `home`'s node.
    pub fn new_private(owner: usize, home: u32) -> Share {
        Share::with_parts(Some(owner), home, NodeVec::new(super::node_of_core(home)))
    }

    fn with_parts(owner: Option<usize>, home: u32, parts: NodeVec<Part>) -> Share {
        Share { owner, node: super::node_of_core(home), main: Part::new(), parts, lending: AtomicUsize::new(0) }
    }

    /// A private share for `owner` holding `objs` from the start (a new context's root share,
    /// built by the core that starts the context).
    pub fn new_private_with(owner: usize, objs: Vec<ObjRef>) -> Result<Share, Error> {
        let s = Share::new_private(owner, owner as u32);
        // A program's root share holds tens of objects: size it for that from the start, so
        // the program's memory use does not step while it runs.
        s.reserve(objs.len().max(ROOT_ENTRIES))?;
        for o in objs {
            // Duplicates (the same object passed twice) keep one entry.
            let _ = s.main.insert_locked(o, s.node, true);
        }
        Ok(s)
    }

    /// A shared share whose tables come from core `home`'s node.
    pub fn new_shared(home: u32) -> Result<Share, Error> {
        let node = super::node_of_core(home);
        let parts = NodeVec::try_from_fn(PARTS, node, |_| Part::new()).map_err(|_| Error::NoMemory)?;
        Ok(Share::with_parts(None, home, parts))
    }

    pub fn is_private(&self) -> bool {
        self.owner.is_some()
    }

    /// The core a private share belongs to (`None` for a shared share).
    pub fn owner(&self) -> Option<usize> {
        self.owner
    }

    /// Private shares answer only their owner (or a kernel core acting for it).
    #[inline]
    fn check_owner(&self) -> Result<(), Error> {
        match self.owner {
            Some(o) if o != crate::percpu::acting_index() => Err(Error::NotPermitted),
            _ => Ok(()),
        }
    }

    /// The part that holds `id`.
    #[inline]
    fn part(&self, id: u64) -> &Part {
        if self.parts.is_empty() {
            &self.main
        } else {
            &self.parts[part_of(id) % self.parts.len()]
        }
    }

    /// Every part.
    fn all_parts(&self) -> impl Iterator<Item = &Part> + '_ {
        core::iter::once(&self.main).filter(|_| self.parts.is_empty()).chain(self.parts.iter())
    }

    #[inline(always)]
    pub fn get(&self, id: u64) -> Result<ObjRef, Error> {
        self.check_owner()?;
        // No `is_object_id` check: `find_raw` finds nothing for the two marker ids.
        if self.owner.is_some() {
            // SAFETY: the owner core's table reference keeps the count at least one.
            let found = self.main.table().and_then(|t| t.find_raw(id)).map(|p| unsafe { KRef::clone_raw(p) });
            return found.ok_or(Error::NoSuchObject);
        }
        let part = self.part(id);
        let found = match reclaim() {
            Some(d) => {
                let _op = d.enter_on(this_core());
                part.table().map_or(Ok(None), |t| t.get_shared(id))
            }
            None => part.table().map_or(Ok(None), |t| t.get_shared(id)),
        };
        // A reference to a reused slot's object is dropped here, outside the operation.
        let found = found.unwrap_or_else(|other| {
            drop(other);
            None
        });
        found.ok_or(Error::NoSuchObject)
    }

    /// The entry for `id`, borrowed (`Peek`) rather than counted: a lookup that writes no line
    /// of the object or the share, only this core's borrow slot (and, for a shared share, its
    /// reclamation counters).
    #[inline]
    pub fn peek(&self, id: u64) -> Result<Peek, Error> {
        self.check_owner()?;
        if self.owner.is_some() {
            let p = self.main.table().and_then(|t| t.find_raw(id)).ok_or(Error::NoSuchObject)?;
            // SAFETY: the owner core's table reference keeps the allocation alive and the
            // count at least one while this runs; every KObject is borrowable.
            return Ok(match unsafe { KRef::<KObject>::borrow_raw(p) } {
                Ok(b) => Peek(PeekRef::Borrowed(b)),
                Err(Some(b)) => {
                    drop(b);
                    return Err(Error::NoSuchObject);
                }
                // SAFETY: as above.
                Err(None) => Peek(PeekRef::Counted(unsafe { KRef::clone_raw(p) })),
            });
        }
        let part = self.part(id);
        let found = match reclaim() {
            Some(d) => {
                let _op = d.enter_on(this_core());
                part.table().map_or(PeekFound::None, |t| t.peek_shared(id))
            }
            None => part.table().map_or(PeekFound::None, |t| t.peek_shared(id)),
        };
        // A borrow of a dead or reused slot's object ends here, outside the operation (ending
        // it may drop the object).
        match found {
            PeekFound::Some(p) => Ok(p),
            PeekFound::None => Err(Error::NoSuchObject),
            PeekFound::Stale(b) => {
                drop(b);
                Err(Error::NoSuchObject)
            }
            PeekFound::Stale2(r) => {
                drop(r);
                Err(Error::NoSuchObject)
            }
        }
    }

    /// Run `f` on the entry for `id` and its counted references (what `ObjStat::refs`
    /// reports), with no borrow and no reference where the share is private (its owner is
    /// the only core that changes its table, `check_owner` says this call acts for it, and
    /// no call changes a table while it reads one, so the table's counted reference keeps the
    /// object alive and in place until `f` returns). A shared share's entry is peeked. For
    /// calls that only read an object (`obj_stat`): a borrow's publish, check and drop cost
    /// more than the read.
    #[inline]
    pub fn with_entry<R>(&self, id: u64, f: impl FnOnce(&KObject, usize) -> R) -> Result<R, Error> {
        self.check_owner()?;
        if self.owner.is_some() {
            let p = self.main.table().and_then(|t| t.find_raw(id)).ok_or(Error::NoSuchObject)?;
            // SAFETY: `p` is the table's `KRef::into_raw` pointer, whose counted reference
            // stays in the table while `f` runs (above); this copy is never dropped
            // (ManuallyDrop), so the count is untouched.
            let r = core::mem::ManuallyDrop::new(unsafe { KRef::<KObject>::from_raw(p) });
            let refs = KRef::strong_count(&r);
            return Ok(f(&r, refs));
        }
        let p = self.peek(id)?;
        let refs = p.refs();
        Ok(f(&p, refs))
    }

    /// A private share's owner borrows the entry for `id` without taking a reference: how a
    /// system call reaches a share held by the root share (nearly every call that names one)
    /// without the count traffic of a new reference. The entry stays alive because only the
    /// owner core changes a private share, and while any `Lease` from it lives this share
    /// refuses every removal (`Busy`), so the table's reference outlives the lease. (A system
    /// call lends from its root share only to run one step on the lent share: no call removes
    /// from the root share meanwhile, so the refusal is a guard, never a path taken. A count
    /// rather than the lent id keeps lending to one add and one subtract, and lends nest.)
    /// `None` if `id` is not here. Private shares only (the caller checks `is_private`; a
    /// shared share's entries are reached with `get`).
    #[inline]
    pub fn lend(&self, id: u64) -> Result<Option<Lease<'_>>, Error> {
        // Callers check `is_private` (`check_owner` passes any core for a shared share).
        debug_assert!(self.owner.is_some(), "lend on a shared share");
        self.check_owner()?;
        let Some(p) = self.main.table().and_then(|t| t.find_raw(id)) else { return Ok(None) };
        bump(&self.lending, 1);
        // `p` is the table's reference, which this share keeps while the lease lives: only
        // the owner, this core, changes a private share, and `remove` refuses until the
        // lease's drop has taken it off `lending`. The lease never drops it, so the count is
        // untouched.
        Ok(Some(Lease { raw: p, end: LeaseEnd::Unlend(self) }))
    }

    /// Where a shared share's part has its entry for `id` (the table and the slot), read
    /// without the writer lock (inside a reclamation operation, like `contains`); `None` if
    /// it has none. The place is a hint for a writer, which checks it under the lock.
    #[inline]
    fn find_unlocked(&self, part: &Part, id: u64) -> Option<(*const Table, usize)> {
        let look = || part.table().and_then(|t| t.position(id).map(|i| (t as *const Table, i)));
        match reclaim() {
            Some(d) => {
                let _op = d.enter_on(this_core());
                look()
            }
            None => look(),
        }
    }

    /// For the kernel tests: `remove(id)` made while this core holds the writer lock of
    /// `id`'s part (a shared share only; `None` for a private one or if the lock is taken
    /// elsewhere). A delete of an absent name must come back `NoSuchObject` without the lock;
    /// one that reaches for the lock gets `Busy` here instead of waiting.
    pub fn remove_with_part_locked(&self, id: u64) -> Option<Result<Option<ObjRef>, Error>> {
        if self.owner.is_some() || !is_object_id(id) {
            return None;
        }
        let _g = self.part(id).writer.try_lock()?;
        Some(self.remove_shared(id, true))
    }

    /// Whether `id` has an entry here (a read; `insert` checks again under the part's lock).
    pub fn contains(&self, id: u64) -> bool {
        if self.check_owner().is_err() {
            return false;
        }
        let part = self.part(id);
        match (self.owner, reclaim()) {
            (None, Some(d)) => {
                let _op = d.enter_on(this_core());
                part.table().is_some_and(|t| t.position(id).is_some())
            }
            _ => part.table().is_some_and(|t| t.position(id).is_some()),
        }
    }

    #[inline(always)]
    pub fn insert(&self, obj: ObjRef) -> Result<(), Error> {
        self.check_owner()?;
        let r = if self.owner.is_some() {
            self.main.insert_locked(obj, self.node, true)
        } else {
            // Lock-free readers will see it: its memory must outlive their operations.
            KRef::defer_free(&obj);
            let part = self.part(obj.id);
            let _g = part.writer.lock();
            part.insert_locked(obj, self.node, false)
        };
        // A refused reference is dropped here, outside the writer lock.
        r.map_err(|(e, _refused)| e)
    }

    /// Make room for `extra` more entries (a private share's one part).
    #[inline]
    fn reserve(&self, extra: usize) -> Result<(), Error> {
        if self.main.has_room(extra) {
            return Ok(());
        }
        self.main.rebuild(extra, self.node, true)
    }

    /// Remove an entry. Its reference comes back for the caller to drop (outside any lock:
    /// dropping the last reference frees the object, which may take other locks). Lookups in
    /// a shared share that still saw it cannot revive it (`get`), and the memory of an object
    /// that was ever in a shared share is freed only after a grace period.
    #[inline]
    pub fn remove(&self, id: u64) -> Result<Option<ObjRef>, Error> {
        self.check_owner()?;
        if !is_object_id(id) {
            return Err(Error::NoSuchObject);
        }
        if self.owner.is_some() {
            if self.lending.load(Ordering::Relaxed) != 0 {
                return Err(Error::Busy); // an entry is lent further up the call (`lend`)
            }
            let t = self.main.table().ok_or(Error::NoSuchObject)?;
            let i = t.position(id).ok_or(Error::NoSuchObject)?;
            let p = t.remove_shifting(i);
            bump(&self.main.used, -1);
            // SAFETY: the slot held this reference; it left the table just now.
            return Ok(Some(unsafe { KRef::from_raw(p) }));
        }
        self.remove_shared(id, false)
    }

    /// `remove` in a shared share. `try_only` (the kernel tests' hook,
    /// `remove_with_part_locked`): where the writer lock would be waited for, fail `Busy`
    /// instead.
    #[inline(always)]
    fn remove_shared(&self, id: u64, try_only: bool) -> Result<Option<ObjRef>, Error> {
        let part = self.part(id);
        // A name that is not there is refused without the writer lock (a lookup, as `contains`
        // makes): the refusal is right at the moment of the lookup, and it writes no line of
        // the share, so a failed delete commutes with every reader of the part and with
        // another failed delete (before, `share_delobj` of an absent name × `obj_stat` /
        // `share_delobj` / `share_list` took the part's lock line that their lookups read).
        let Some((hint_table, hint)) = self.find_unlocked(part, id) else {
            return Err(Error::NoSuchObject);
        };
        let p = {
            let _g = if try_only { part.writer.try_lock().ok_or(Error::Busy)? } else { part.writer.lock() };
            let t = part.table().ok_or(Error::NoSuchObject)?;
            // The slot the lookup found, if it still holds `id` in the current table (only
            // writers change either, and they hold the lock now); else probe again.
            let at_hint = ptr::eq(hint_table, t) && t.slots.get(hint).is_some_and(|sl| sl.id.load(Ordering::Relaxed) == id);
            let i = if at_hint { hint } else { t.position(id).ok_or(Error::NoSuchObject)? };
            let (p, freed) = t.empty(i);
            bump(&part.used, -(freed as isize));
            p
        };
        // The reference goes back to the caller at once (to drop outside any lock): a lookup
        // that still saw it only raises the count if it is not zero, and the object's memory
        // outlives that lookup (`defer_free` at insert).
        // SAFETY: the slot held this reference; it left the table just now.
        Ok(Some(unsafe { KRef::from_raw(p) }))
    }

    pub fn ids(&self) -> Result<Vec<u64>, Error> {
        self.check_owner()?;
        let collect = |parts: &mut dyn Iterator<Item = &Table>| -> Result<Vec<u64>, Error> {
            // Both temporaries are reserved in whole cache lines (8 words): a smaller one shares
            // its line with another heap object, which another core's call may read (the
            // `[heap]` false sharing: every `share_list` case conflicted after an unrelated
            // change moved the heap's layout).
            let tables: Vec<&Table> = {
                let mut v = Vec::new();
                v.try_reserve(8).map_err(|_| Error::NoMemory)?;
                for t in parts {
                    kobj_try_push(&mut v, t)?;
                }
                v
            };
            let mut v = Vec::new();
            let n: usize = tables.iter().map(|t| t.live().count()).sum();
            v.try_reserve(n.max(1).next_multiple_of(8)).map_err(|_| Error::NoMemory)?;
            for t in &tables {
                for (id, _) in t.live() {
                    // Entries added since the reservation are left out rather than allocated for.
                    if v.len() < v.capacity() {
                        v.push(id);
                    }
                }
            }
            v.sort_unstable();
            Ok(v)
        };
        self.read_tables(collect)
    }

    /// `read` on the current tables, off the hot paths (`ids`, `len`, `tombstones`): inside a
    /// reclamation operation for a shared share, whose tables a writer may replace and retire
    /// meanwhile; directly for a private one, which only this core changes.
    fn read_tables<R>(&self, read: impl FnOnce(&mut dyn Iterator<Item = &Table>) -> R) -> R {
        let mut tables = self.all_parts().filter_map(|p| p.table());
        match (self.owner, reclaim()) {
            (None, Some(d)) => {
                let _op = d.enter_on(this_core());
                read(&mut tables)
            }
            _ => read(&mut tables),
        }
    }

    /// Slots holding a tombstone (for tests: a private share never has one).
    pub fn tombstones(&self) -> usize {
        if self.check_owner().is_err() {
            return 0;
        }
        let count = |ts: &mut dyn Iterator<Item = &Table>| ts.map(|t| t.slots.iter().filter(|s| s.id.load(Ordering::Acquire) == TOMBSTONE).count()).sum();
        self.read_tables(count)
    }

    /// Where a table and its slots are (for the test that they are on `memid`'s node): the
    /// first part that has a table.
    pub fn table_addrs(&self) -> Option<[u64; 2]> {
        self.all_parts().find_map(|p| p.table()).map(|t| [t as *const Table as u64, t.slots.as_ptr() as u64])
    }

    /// Entries (counted: for tests and diagnostics, not hot paths).
    pub fn len(&self) -> usize {
        if self.check_owner().is_err() {
            return 0;
        }
        let count = |ts: &mut dyn Iterator<Item = &Table>| ts.map(|t| t.live().count()).sum();
        self.read_tables(count)
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        // The last reference to the share is gone, so no lookup can be inside it.
        for part in core::iter::once(&mut self.main).chain(self.parts.iter_mut()) {
            let p = *part.table.get_mut();
            if p.is_null() {
                continue;
            }
            // SAFETY: as above; this is the only pointer left to the table.
            let t = unsafe { alloc::boxed::Box::from_raw(p) };
            for (_, obj) in t.live() {
                // SAFETY: each live slot holds one reference.
                unsafe { drop_ref(obj) };
            }
        }
    }
}

/// Add `obj` to `share`, reporting failure as an error (used when creating objects).
pub fn add(share: &ObjRef, obj: ObjRef) -> Result<(), Error> {
    share.as_share()?.insert(obj)
}

// A delete of an absent name from a shared share is
// refused without the part's writer lock.
mod segshare_tests {
    use super::*;
    use crate::ktest::{kassert, ktest};

    ktest! {
    fn share_absent_delete_takes_no_lock() {
        use crate::kobj::{segment::Segment, Kind};
        use crate::mm::PAGE_SIZE;
        let err = |e: Error| alloc::format!("{e:?}");
        let before = crate::tests::quiescent_counts();
        let share = KObject::create(b"ktest-absent", 0, Kind::Share(Share::new_shared(0).map_err(err)?)).map_err(err)?;
        let sh = share.as_share().map_err(err)?;
        let obj = KObject::create(b"ktest-absent-seg", 0, Kind::Segment(Segment::new(PAGE_SIZE, 0).map_err(err)?)).map_err(err)?;
        let id = obj.id;
        sh.insert(obj).map_err(err)?;
        // Same core class and sequence modulo the parts: the same part as `id`, never inserted.
        let absent = id + 32 * PARTS as u64;
        kassert!(core::ptr::eq(sh.part(absent), sh.part(id)), "the absent id is in another part");
        // With the part's lock held here, an absent name is refused at once.
        let r = sh.remove_with_part_locked(absent);
        kassert!(matches!(r, Some(Err(Error::NoSuchObject))), "absent delete under the held lock gave {:?}", r.as_ref().map(|r| r.as_ref().map(|o| o.is_some())));
        // A present name passes the lock-free check and reaches for the lock (`Busy` from the
        // hook); its delete then succeeds once, then is refused.
        let r = sh.remove_with_part_locked(id);
        kassert!(matches!(r, Some(Err(Error::Busy))), "a present name under the held lock gave {:?}", r.as_ref().map(|r| r.as_ref().map(|o| o.is_some())));
        let removed = sh.remove(id).map_err(err)?;
        kassert!(removed.as_ref().is_some_and(|o| o.id == id), "the delete did not return the object");
        drop(removed);
        let again = sh.remove(id);
        kassert!(matches!(again, Err(Error::NoSuchObject)), "a second delete gave {:?}", again.map(|o| o.is_some()));
        kassert!(!sh.contains(id), "the name is still there");
        drop(share);
        crate::tests::nothing_leaked_since(before)
    }
    }
}
