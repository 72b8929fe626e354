//! Per-core reference counts for segments made in a shared share (after Refcache,
//! Clements et al., EuroSys'13, simplified to per-core locks instead of epochs).
//!
//! Only a segment created straight into a **shared** share
//! (`KObject::create_shared`, from `syscall::insert_new`) is counted here. Every other object,
//! a private segment included, keeps `KRef`'s one count word and is freed by its last drop,
//! with no table, review or cross-core lock: an earlier version made every segment per-core, and
//! then each private segment's free was a review that locked every core's table (20.4 kernel
//! lines/op moved between vCPUs in `segment_allocfree` instead of 4.58; refused). The choice
//! is made once, at creation, while the creator holds the only reference and no other core
//! can reach the object, so no plain count change ever races with per-core ones.
//!
//! Why: a segment is counted by every share that holds it and every mapping of it, and two
//! commuting calls on two cores (`share_addobj` and `ar_set_seg` of one segment, two
//! mappings of it in different ranges, a delete and an unmap) both wrote its one count line.
//!
//! What: a *per-core* segment's count is `base` (the `KRef`'s own count word, written only
//! when a core's table is full) plus one signed delta per core, kept in that core's table
//! (`Table::slots`: 16 lines of 4 `(object, delta)` slots; an object's slots are on one line,
//! chosen by hashing its address). A count change on core `c` writes only core `c`'s table,
//! under core `c`'s lock (uncontended: only reviewers take another core's lock). A decrement
//! cannot know whether the sum reached zero without reading every core's table, so it does
//! not look: it puts the object on its core's *review* list, and the review (at the core's
//! next system call, in its idle loop, at quiescent points, or at once outside a system
//! call) takes **every** core's lock, in core order, and sums.
//!
//! Correctness (a freed segment is never reachable):
//! 1. Every counted reference added one to the sum (`inc`/`try_inc`) and its drop takes one
//!    off (`dec`), each applied at once under its core's lock; so the sum, read with every
//!    lock held, is exactly the number of counted references alive at that instant.
//! 2. Every decrement that leaves the sum at zero leaves the object on a review list (its own
//!    core's; an entry goes only when a review finds the sum non-zero or declares it dead),
//!    so an object whose sum is zero is eventually reviewed.
//! 3. A review that finds the sum zero **with every lock held** marks the object dead, and
//!    removes every slot and review entry that names it, before it lets the locks go; only
//!    then is the value dropped (`kref::drop_last`: the borrow hand-over as before).
//! 4. A new counted reference comes either from an existing one (`inc`: impossible when the
//!    sum is zero, by 1) or from something that does not count: a borrow (`KBorrow::to_counted`)
//!    or a lock-free reader's pointer (`try_clone_raw`). Those use `try_inc`, which checks the
//!    dead mark under its own core's lock: before the mark it counts (the object is not
//!    dropped yet: a reference that reappears from zero is simply counted, and the review
//!    sees it), after the mark it fails, as when a plain count had reached zero.
//! 5. The table slots and review entries hold raw addresses, never dereferenced by anyone but
//!    a reviewer holding every lock; by 3 none names an object whose value was dropped, so a
//!    new object at a reused address inherits no delta.
//!
//! Cost: a change writes one slot of its core's own line and the lock word; a review takes
//! every online core's lock once per batch (O(cores), only after decrements). `obj_stat`
//! reads one line per core (`sum`).

use core::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};

use percore::{CachePadded, TicketLock, MAX_CORES};

use crate::arch::x86_64::cpu::without_interrupts;

/// Lines of slots in a core's table; an object's slots are all on one line.
const LINES: usize = 16;
/// Slots per line (16 bytes each).
const WAYS: usize = 4;
/// Objects a core may have waiting for review before it reviews at once.
const REVIEW: usize = 24;

/// Atomic so that `sum` may read another core's line without its lock; written only under
/// the owning core's lock (or a reviewer's, holding every lock).
struct Slot {
    /// The object's `kref::Inner` address (0: empty).
    obj: AtomicUsize,
    delta: AtomicIsize,
}

#[repr(C, align(64))]
struct Line([Slot; WAYS]);

struct Review {
    n: usize,
    /// Objects this core decremented since its last review (addresses, as in `Slot`). One
    /// more than `REVIEW`: a decrement always puts its object here, under the lock, before it
    /// reviews a full list (an object on no list could be declared dead and freed by another
    /// core's review before this core's review reads it).
    items: [usize; REVIEW + 1],
}

/// One core's table: the lock (with the review list) on its first lines, the slots after.
#[repr(C)]
struct CoreTable {
    lock: TicketLock<Review>,
    slots: [Line; LINES],
}

const EMPTY_LINE: Line = Line([const { Slot { obj: AtomicUsize::new(0), delta: AtomicIsize::new(0) } }; WAYS]);

static TABLES: [CachePadded<CoreTable>; MAX_CORES] = [const {
    CachePadded::new(CoreTable { lock: TicketLock::new(Review { n: 0, items: [0; REVIEW + 1] }), slots: [EMPTY_LINE; LINES] })
}; MAX_CORES];

/// Objects each core's reviews declared dead (for tests: every segment exactly once).
static DEATHS: [CachePadded<AtomicUsize>; MAX_CORES] = [const { CachePadded::new(AtomicUsize::new(0)) }; MAX_CORES];

/// Objects declared dead so far, summed over cores.
pub fn deaths() -> usize {
    DEATHS.iter().take(cores()).map(|d| d.load(Ordering::Acquire)).sum()
}

/// Whether a core has objects waiting for review (its own line).
static WAITING: [CachePadded<AtomicBool>; MAX_CORES] = [const { CachePadded::new(AtomicBool::new(false)) }; MAX_CORES];

/// The per-core side of one object, kept in its `kref::Inner`.
pub struct Counted<'a> {
    /// The object's address (the key of its slots).
    pub obj: usize,
    /// The shared part of the count (the `KRef`'s strong count word).
    pub base: &'a AtomicUsize,
    /// Set by the review that finds the sum zero (under every lock).
    pub dead: &'a AtomicBool,
    /// The core that made the object (`kref`'s origin).
    pub origin: usize,
    /// Set (once, SeqCst) before any core but the origin writes a delta of the object
    /// (`Segment::remote_counts`, a line of its own).
    pub remote: &'a AtomicBool,
}

/// Before core `me` writes a delta of `c`: if `me` is not the origin, make sure
/// the remote flag is set, SeqCst, so that an origin-only review (`review_local`) that then
/// reads the flag clear knows no other core has a delta, and one racing with this change
/// sees the flag after its dead mark (the store-fence-load pairing with `try_inc`'s load of
/// the mark).
#[inline]
fn note_remote(me: usize, c: &Counted<'_>) {
    if me != c.origin && !c.remote.load(Ordering::SeqCst) {
        c.remote.store(true, Ordering::SeqCst);
    }
}

fn line_of(obj: usize) -> usize {
    // Objects are cache-line aligned: drop the low bits, spread the rest.
    ((obj >> 6).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) % LINES
}

/// Cores whose tables can hold deltas: every core that has run kernel code is online.
fn cores() -> usize {
    crate::percpu::online_count().max(crate::percpu::current_index() + 1).min(MAX_CORES)
}

/// Add `d` to the object's delta in core `core`'s table (the base if its line is full). The
/// caller holds that core's lock.
fn add(core: usize, c: &Counted<'_>, d: isize) {
    let line = &TABLES[core].slots[line_of(c.obj)].0;
    let mut free = None;
    for s in line.iter() {
        let o = s.obj.load(Ordering::Relaxed);
        if o == c.obj {
            let now = s.delta.load(Ordering::Relaxed) + d;
            s.delta.store(now, Ordering::Relaxed);
            if now == 0 {
                s.obj.store(0, Ordering::Relaxed); // nothing to remember: the slot is free again
            }
            return;
        }
        if o == 0 && free.is_none() {
            free = Some(s);
        }
    }
    match free {
        Some(s) => {
            s.delta.store(d, Ordering::Relaxed);
            s.obj.store(c.obj, Ordering::Relaxed);
        }
        // A full line: the shared word (correct, only not conflict-free).
        None => {
            c.base.fetch_add(d as usize, Ordering::Relaxed);
        }
    }
}

/// Run `f` with this core's lock held and interrupts off (an interrupt handler that changed a
/// count on this core would otherwise spin on the lock its core holds).
fn with_own<R>(f: impl FnOnce(usize, &mut Review) -> R) -> R {
    without_interrupts(|| {
        let me = crate::percpu::current_index();
        let mut r = TABLES[me].lock.lock();
        f(me, &mut r)
    })
}

/// One more counted reference (the caller holds one, so the object is not dead).
#[inline(never)]
pub fn inc(c: &Counted<'_>) {
    with_own(|me, _| {
        note_remote(me, c);
        add(me, c, 1)
    });
}

/// One more counted reference from a borrow or a lock-free reader's pointer: fails once a
/// review declared the object dead. The allocation must be alive (the caller's borrow or
/// reclamation operation).
#[inline(never)]
pub fn try_inc(c: &Counted<'_>) -> bool {
    with_own(|me, _| {
        // Under this core's lock: a review that declares the object dead holds it too, so
        // either it saw this delta or this sees its mark.
        // An origin-only review holds only its own lock: the remote flag (stored before
        // this load) and its mark (stored before it reads the flag) pair instead.
        note_remote(me, c);
        if c.dead.load(Ordering::SeqCst) {
            return false;
        }
        add(me, c, 1);
        true
    })
}

/// One counted reference fewer. Never drops the value itself: the object goes on this
/// core's review list, reviewed at this core's next system call or idle loop, or now if the
/// caller is outside a system call with interrupts on (a context's exit, the kernel's own
/// code: they expect the value gone when the reference is) or the list is full.
#[inline(never)]
pub fn dec(c: &Counted<'_>) {
    let full = with_own(|me, r| {
        note_remote(me, c);
        add(me, c, -1);
        let n = r.n;
        if r.items[..n].contains(&c.obj) {
            return false;
        }
        r.items[n] = c.obj;
        r.n = n + 1;
        WAITING[me].store(true, Ordering::Release);
        n + 1 > REVIEW
    });
    if full {
        // Review now (the object is on the list: see `Review::items`).
        review_cores(Some(crate::percpu::current_index()));
        return;
    }
    let area = crate::percpu::this();
    if area.in_call.load(Ordering::Relaxed) || !crate::arch::x86_64::cpu::interrupts_enabled() {
        // Inside a call: at the next one (the flag the system-call path tests already,
        // `kref::orphans_waiting`). With interrupts off (an interrupt handler, or a path
        // that must not free there): at the next call or in the idle loop, not here, where
        // the review could drop other segments this core listed earlier while the
        // interrupted code holds a lock their drop takes.
        area.orphans_pending.store(true, Ordering::Release);
    } else {
        review_cores(Some(area.index));
    }
}

/// The sum of the counts (for `ObjStat::refs` and tests): read without the locks, so exact
/// only when no count of the object changes meanwhile. Reads one line of every core's table.
pub fn sum(c: &Counted<'_>) -> isize {
    let mut s = c.base.load(Ordering::Acquire) as isize;
    let l = line_of(c.obj);
    for t in TABLES.iter().take(cores()) {
        for slot in t.slots[l].0.iter() {
            if slot.obj.load(Ordering::Acquire) == c.obj {
                s += slot.delta.load(Ordering::Relaxed);
            }
        }
    }
    s
}

/// Slots and review entries of every core that name the object at `obj` (for tests: none
/// may be left once it is dead, or an object made at its address would inherit them).
pub fn entries_naming(obj: usize) -> usize {
    let l = line_of(obj);
    let mut n = 0;
    for t in TABLES.iter().take(cores()) {
        n += t.slots[l].0.iter().filter(|s| s.obj.load(Ordering::Acquire) == obj).count();
        let r = t.lock.lock();
        n += r.items[..r.n].iter().filter(|&&o| o == obj).count();
    }
    n
}

/// Whether core `core` has reviews waiting.
#[inline]
pub fn waiting(core: usize) -> bool {
    WAITING[core % MAX_CORES].load(Ordering::Acquire)
}

/// Review this core's list.
pub fn review_own() {
    review_cores(Some(crate::percpu::current_index()));
}

/// Review every core's list (quiescent points: exact object and memory counts).
pub fn review_all() {
    review_cores(None);
}

/// The racy sum of the object at `obj`: every core's slots read without their locks.
fn sum_unlocked(obj: usize, base: &AtomicUsize, n: usize) -> isize {
    let l = line_of(obj);
    let mut s = base.load(Ordering::Acquire) as isize;
    for t in TABLES.iter().take(n) {
        for slot in t.slots[l].0.iter() {
            if slot.obj.load(Ordering::Acquire) == obj {
                s += slot.delta.load(Ordering::Relaxed);
            }
        }
    }
    s
}

/// The origin-only review, under this core's lock alone: for each object on
/// this core's list that this core made and no other core ever counted (its remote flag
/// clear), the sum is the base plus this core's delta, exactly. Non-zero: the entry goes (a
/// later decrement lists it again). Zero: mark it dead (SeqCst), then read the flag again
/// (SeqCst): still clear, no other core has or can make a delta (a `try_inc` there stored the
/// flag before it loads the mark, so it sees the mark and fails; an `inc` needs a counted
/// reference, and there is none), so the entry and this core's slot go and the object is
/// dropped after the lock; set meanwhile, the entry stays, marked, for the all-lock review,
/// which sums every core and clears the mark if the racing change counted it. Other entries
/// are left for `prune_own` and the all-lock review. Returns whether any entry is left.
///
/// Why a private-use shared segment needs this: the library OS puts private `mmap` segments
/// in the process share, and before this every unmap's death took every core's lock
/// (`pagefault_zero` at 4 vCPUs: 0.130 -> 0.325 kernel line transfers per op).
fn review_local(me: usize) -> bool {
    let mut dead = [0usize; REVIEW + 1];
    let mut n_dead = 0;
    let left = without_interrupts(|| {
        let mut r = TABLES[me].lock.lock();
        let mut w = 0;
        for i in 0..r.n {
            let obj = r.items[i];
            // SAFETY: on this core's list with its lock held: alive (a review that declares
            // an object dead holds this lock and purges this list first).
            let ((base, mark), origin, remote) = unsafe { (super::kref::percore_parts(obj), super::kref::origin_of(obj), super::kref::remote_flag(obj)) };
            if origin != me || remote.load(Ordering::SeqCst) {
                r.items[w] = obj;
                w += 1;
                continue;
            }
            let l = line_of(obj);
            let mut s = base.load(Ordering::Acquire) as isize;
            for slot in TABLES[me].slots[l].0.iter() {
                if slot.obj.load(Ordering::Relaxed) == obj {
                    s += slot.delta.load(Ordering::Relaxed);
                }
            }
            if s != 0 {
                continue; // counted: forget the entry
            }
            mark.store(true, Ordering::SeqCst);
            if remote.load(Ordering::SeqCst) {
                r.items[w] = obj; // another core's first change raced: the all-lock review
                w += 1;
                continue;
            }
            for slot in TABLES[me].slots[l].0.iter() {
                if slot.obj.load(Ordering::Relaxed) == obj {
                    slot.obj.store(0, Ordering::Relaxed);
                    slot.delta.store(0, Ordering::Relaxed);
                }
            }
            if !dead[..n_dead].contains(&obj) {
                DEATHS[me].fetch_add(1, Ordering::Relaxed);
                dead[n_dead] = obj;
                n_dead += 1;
            }
        }
        // Entries after the first copy of a dead object were skipped above only if they were
        // the same object: `dec` lists an object once per list.
        r.n = w;
        if w == 0 {
            WAITING[me].store(false, Ordering::Release);
        }
        w > 0
    });
    for &obj in &dead[..n_dead] {
        // SAFETY: marked dead with its sum zero while no other core can count it (above);
        // its only slot and list entry are gone; dropped once (only this review has it).
        unsafe { super::kref::drop_percore(obj) };
    }
    left
}

/// The review's quick part, under this core's lock only: drop from this core's list the
/// objects whose sum, read without the other cores' locks, is not zero. Returns whether
/// any is left (their sum read zero: only a review with every lock can tell).
///
/// Why a racy non-zero is enough to forget an entry: the sum is never negative (a
/// reference's increment comes before its decrement), so a sum that is zero for good was
/// left so by a decrement, the last change of the object, which put the object on its
/// core's list (or found it there) *after* every other change; that entry's review then
/// runs with no change in flight and reads the exact sum. An entry forgotten on a racy
/// non-zero read is therefore never the one a dead object's free depends on. The object is
/// alive while this runs: a review that declares an object dead holds this core's lock too,
/// and purges this list.
fn prune_own(me: usize) -> bool {
    let n = cores();
    without_interrupts(|| {
        let mut r = TABLES[me].lock.lock();
        let mut w = 0;
        for i in 0..r.n {
            let obj = r.items[i];
            // SAFETY: on this core's list with its lock held: alive (see above).
            let (base, mark) = unsafe { super::kref::percore_parts(obj) };
            // A mark `review_local` left (a race with another core's first change) must
            // reach the all-lock review, which clears it or completes the death.
            if mark.load(Ordering::Acquire) || sum_unlocked(obj, base, n) == 0 {
                r.items[w] = obj;
                w += 1;
            }
        }
        r.n = w;
        if w == 0 {
            WAITING[me].store(false, Ordering::Release);
        }
        w > 0
    })
}

/// Every core's lock, taken in core order: on the stack for up to `SMALL` cores (no
/// allocation on the common path), else in a vector.
enum Guards<'a> {
    Small([Option<percore::TicketLockGuard<'a, Review>>; SMALL]),
    Big(alloc::vec::Vec<percore::TicketLockGuard<'a, Review>>),
}

const SMALL: usize = 8;

impl Guards<'static> {
    fn lock_all(n: usize) -> Option<Guards<'static>> {
        if n <= SMALL {
            let mut a = [const { None }; SMALL];
            for (i, t) in TABLES.iter().take(n).enumerate() {
                a[i] = Some(t.lock.lock());
            }
            return Some(Guards::Small(a));
        }
        let mut v = alloc::vec::Vec::new();
        v.try_reserve(n).ok()?;
        for t in TABLES.iter().take(n) {
            v.push(t.lock.lock());
        }
        Some(Guards::Big(v))
    }

    fn get(&mut self, core: usize) -> &mut percore::TicketLockGuard<'static, Review> {
        match self {
            Guards::Small(a) => a[core].as_mut().expect("locked by lock_all"),
            Guards::Big(v) => &mut v[core],
        }
    }
}

/// Take every core's lock (core order), review `only`'s list (every list if `None`), mark
/// and purge the dead, let the locks go, then drop the dead.
fn review_cores(only: Option<usize>) {
    let n = cores();
    match only {
        Some(me) if !WAITING[me].load(Ordering::Acquire) => return,
        None if (0..n).all(|c| !WAITING[c].load(Ordering::Acquire)) => return,
        _ => {}
    }
    if let Some(me) = only {
        // Objects made on this core that no other core ever counted: this core's table
        // alone, no other core's line.
        if !review_local(me) {
            return;
        }
        if !prune_own(me) {
            return;
        }
    }
    loop {
        let mut dead = [0usize; REVIEW + 1];
        let mut n_dead = 0;
        let more = without_interrupts(|| {
            // Core order: every reviewer takes them in the same order, and a core's own
            // count change holds only its own (with interrupts off), so nobody waits in a
            // cycle.
            let Some(mut guards) = Guards::lock_all(n) else {
                return false; // out of memory: the lists wait for the next review
            };
            let mut cand = [0usize; REVIEW + 1];
            let mut n_cand = 0;
            let mut more = false;
            for core in 0..n {
                if only.is_some_and(|me| me != core) {
                    continue;
                }
                let g = guards.get(core);
                while g.n > 0 && n_cand < REVIEW + 1 {
                    g.n -= 1;
                    cand[n_cand] = g.items[g.n];
                    n_cand += 1;
                }
                if g.n > 0 {
                    more = true;
                } else {
                    WAITING[core].store(false, Ordering::Release);
                }
            }
            for &obj in &cand[..n_cand] {
                if dead[..n_dead].contains(&obj) {
                    continue;
                }
                // SAFETY: `obj` was on a review list until now (taken off under every lock),
                // so its value has not been dropped (a dead object's entries are purged
                // under these locks before its drop) and its allocation is alive.
                let (base, mark) = unsafe { super::kref::percore_parts(obj) };
                let l = line_of(obj);
                let mut s = base.load(Ordering::Acquire) as isize;
                for t in TABLES.iter().take(n) {
                    for slot in t.slots[l].0.iter() {
                        if slot.obj.load(Ordering::Relaxed) == obj {
                            s += slot.delta.load(Ordering::Relaxed);
                        }
                    }
                }
                if s != 0 {
                    // A mark `review_local` left when another core's first change raced
                    // with it: that change is counted here, so the object lives on.
                    if mark.load(Ordering::Relaxed) {
                        mark.store(false, Ordering::Release);
                    }
                    continue;
                }
                mark.store(true, Ordering::Release);
                DEATHS[crate::percpu::current_index()].fetch_add(1, Ordering::Relaxed);
                for (core, t) in TABLES.iter().take(n).enumerate() {
                    let g = guards.get(core);
                    for slot in t.slots[l].0.iter() {
                        if slot.obj.load(Ordering::Relaxed) == obj {
                            slot.obj.store(0, Ordering::Relaxed);
                            slot.delta.store(0, Ordering::Relaxed);
                        }
                    }
                    let k = g.n;
                    let mut w = 0;
                    for r in 0..k {
                        if g.items[r] != obj {
                            g.items[w] = g.items[r];
                            w += 1;
                        }
                    }
                    g.n = w;
                    if w == 0 {
                        // (Another core's flag: it had nothing else waiting.)
                    }
                }
                dead[n_dead] = obj;
                n_dead += 1;
            }
            more
        });
        // Locks released: drop the dead (may free, take other locks, decrement other
        // per-core objects and review again).
        for &obj in &dead[..n_dead] {
            // SAFETY: marked dead with every lock held and its sum zero: no counted reference
            // exists or can be made, and nothing in the tables names it; dropped once (only
            // the review that marked it has it in `dead`).
            unsafe { super::kref::drop_percore(obj) };
        }
        if !more {
            return;
        }
    }
}

// Per-core segment counts.
mod ktests {
    use alloc::vec::Vec;
    use core::sync::atomic::{AtomicUsize, Ordering};

    use abi::{ArKind, Error, MAP_READ, MAP_WRITE};
    use percore::TicketLock;

    use crate::kobj::ar::{self, AddressRange};
    use crate::kobj::kref::KRef;
    use crate::kobj::segment::Segment;
    use crate::kobj::{live_objects, KObject, Kind, ObjRef};
    use crate::mm::PAGE_SIZE;
    use crate::ktest::{kassert, ktest};

    fn err(e: Error) -> alloc::string::String {
        alloc::format!("{e:?}")
    }

    fn segment(name: &[u8], pages: u64) -> Result<ObjRef, alloc::string::String> {
        let me = crate::percpu::current_index() as u32;
        KObject::create_shared(name, me, Kind::Segment(Segment::new(pages * PAGE_SIZE, me).map_err(err)?)).map_err(err)
    }

    ktest! {
    fn segment_freed_once_after_last_reference_from_several_cores() {
        // References taken on every core and dropped on the next one (deltas of both signs
        // on every core's table): the count is their exact sum meanwhile, the segment lives
        // while any is held, and goes exactly once (the live-object count falls by one, not
        // two) after the last drop; a new segment then starts from one reference (no delta
        // of the dead one is left in a table for a segment made at its address).
        let before = crate::tests::quiescent_counts();
        let objs0 = live_objects();
        let seg = segment(b"ktest-rc-several", 2)?;
        seg.as_segment().map_err(err)?.write_bytes(0, b"x").map_err(err)?;
        let cores = crate::percpu::online_count();
        const PER_CORE: usize = 3;
        let held: Vec<TicketLock<Vec<ObjRef>>> = (0..cores).map(|_| TicketLock::new(Vec::new())).collect();
        let failed = AtomicUsize::new(0);
        crate::smp::run_on_all(&|i| {
            let mut v = held[i].lock();
            if v.try_reserve(PER_CORE).is_err() {
                failed.fetch_add(1, Ordering::Relaxed);
                return;
            }
            for _ in 0..PER_CORE {
                v.push(seg.clone());
            }
        });
        kassert!(failed.load(Ordering::Relaxed) == 0, "out of memory");
        let n = KRef::strong_count(&seg);
        kassert!(n == 1 + cores * PER_CORE, "count {n} after {} clones on {cores} cores, expected {}", cores * PER_CORE, 1 + cores * PER_CORE);
        // The first reference goes; the others keep the segment.
        drop(seg);
        crate::kobj::share::reclaim_all();
        let objs1 = live_objects();
        kassert!(objs1 == objs0 + 1, "the segment went with references held: {objs1} objects, expected {}", objs0 + 1);
        {
            let v = held[0].lock();
            kassert!(v[0].as_segment().map_err(err)?.nbytes() == 2 * PAGE_SIZE, "the held segment changed");
        }
        let addr = KRef::as_raw(&held[0].lock()[0]) as usize;
        // Every core drops the references the previous core took.
        crate::smp::run_on_all(&|i| {
            let v = core::mem::take(&mut *held[(i + 1) % cores].lock());
            drop(v);
        });
        crate::kobj::share::reclaim_all();
        let objs2 = live_objects();
        kassert!(objs2 == objs0, "{objs2} objects after the last drop, expected {objs0} (freed twice if fewer)");
        let left = super::entries_naming(addr);
        kassert!(left == 0, "{left} table entries still name the dead segment");
        let again = segment(b"ktest-rc-again", 1)?;
        let n = KRef::strong_count(&again);
        kassert!(n == 1, "a new segment starts with count {n}");
        drop(again);
        drop(held);
        crate::tests::nothing_leaked_since(before)
    }
    }

    ktest! {
    fn mapping_keeps_segment_alive_while_another_core_drops_the_last_other_reference() {
        // A mapping made on this core holds the segment; the only other reference is dropped
        // on another core (inside no system call: reviewed at once). The segment must stay
        // (its page mapped, its object alive) until the range goes, then go.
        let before = crate::tests::quiescent_counts();
        let objs0 = live_objects();
        let me = crate::percpu::current_index() as u32;
        let seg = segment(b"ktest-rc-mapped", 1)?;
        seg.as_segment().map_err(err)?.write_bytes(0, b"y").map_err(err)?;
        let range = KObject::create(b"ktest-rc-ar", me, Kind::Ar(AddressRange::new(ArKind::Span2M, me).map_err(err)?)).map_err(err)?;
        ar::set_seg(&range, 0, &seg, 0, PAGE_SIZE, MAP_READ | MAP_WRITE).map_err(err)?;
        kassert!(KRef::strong_count(&seg) == 2, "count {} with one mapping", KRef::strong_count(&seg));
        let cores = crate::percpu::online_count();
        let other = if cores > 1 { (me as usize + 1) % cores } else { me as usize };
        let slot = TicketLock::new(Some(seg));
        crate::smp::run_on(&|_| drop(slot.lock().take()), core::iter::once(other), other == me as usize);
        kassert!(slot.lock().is_none(), "the other core did not drop it");
        crate::kobj::share::reclaim_all();
        let objs1 = live_objects();
        kassert!(objs1 == objs0 + 2, "{objs1} objects with the mapping held, expected {} (segment freed under its mapping)", objs0 + 2);
        let mapped = ar::mappings(&range).map_err(err)?.len();
        kassert!(mapped == 1, "{mapped} mappings");
        drop(range);
        crate::kobj::share::reclaim_all();
        let objs2 = live_objects();
        kassert!(objs2 == objs0, "{objs2} objects after the range went, expected {objs0}");
        crate::tests::nothing_leaked_since(before)
    }
    }

    ktest! {
    fn a_borrow_of_a_dead_segment_counts_nothing() {
        // The last reference goes while this core borrows the segment: the review declares
        // it dead (the borrow keeps the value until it ends), and the borrow's `to_counted`
        // must fail without moving any count (a failed attempt that still decremented left a
        // -1 delta for the next object at that address: the bug `then_some` once made).
        let before = crate::tests::quiescent_counts();
        let objs0 = live_objects();
        let seg = segment(b"ktest-rc-borrowed", 1)?;
        let addr = KRef::as_raw(&seg) as usize;
        let b = KRef::borrow(&seg).ok_or("no free borrow slot")?;
        let deaths0 = super::deaths();
        drop(seg);
        crate::kobj::share::reclaim_all();
        let deaths1 = super::deaths();
        kassert!(deaths1 == deaths0 + 1, "{} deaths for one last drop", deaths1 - deaths0);
        kassert!(b.to_counted().is_none(), "a counted reference to a dead segment");
        crate::kobj::share::reclaim_all();
        let deaths2 = super::deaths();
        kassert!(deaths2 == deaths1, "the failed to_counted made the segment die again ({} more deaths)", deaths2 - deaths1);
        let left = super::entries_naming(addr);
        kassert!(left == 0, "{left} table entries name the dead segment after the failed to_counted");
        kassert!(live_objects() == objs0 + 1, "the borrowed segment went before its borrow ended");
        drop(b);
        crate::kobj::share::reclaim_all();
        kassert!(live_objects() == objs0, "the segment stayed after its borrow ended");
        crate::tests::nothing_leaked_since(before)
    }
    }

    ktest! {
    fn segment_counts_race_on_every_core() {
        // Every core clones and drops references of one segment (on the test's own core each
        // drop is reviewed at once; the others run this in an interrupt handler and list it)
        // while a borrow of it turns into counted references and back: no change is lost,
        // the segment is never freed while held, and it goes with the last reference.
        let before = crate::tests::quiescent_counts();
        let objs0 = live_objects();
        let seg = segment(b"ktest-rc-race", 1)?;
        crate::smp::run_on_all(&|_| {
            for k in 0..300 {
                let a = seg.clone();
                if k % 3 == 0 {
                    if let Some(b) = KRef::borrow(&a) {
                        let c = b.to_counted();
                        drop(b);
                        drop(c);
                    }
                }
                drop(a);
            }
        });
        let n = KRef::strong_count(&seg);
        kassert!(n == 1, "count {n} after the race, expected 1");
        crate::kobj::share::reclaim_all();
        kassert!(live_objects() == objs0 + 1, "the segment went while held");
        drop(seg);
        crate::kobj::share::reclaim_all();
        kassert!(live_objects() == objs0, "the segment stayed after its last reference");
        crate::tests::nothing_leaked_since(before)
    }
    }

    // Only segments made in a shared share are counted per core.

    ktest! {
    fn private_segment_count_stays_one_word() {
        // A segment made for a private share (`KObject::create`) keeps the plain count: clones
        // and drops on every core put nothing in any core's table, no review ever sees it,
        // and its last drop (outside a system call) frees it at once, before any review or
        // reclamation. (Planted once: `create` made every segment per-core; this failed with
        // "1 table entries name a private segment".)
        let objs0 = live_objects();
        let deaths0 = super::deaths();
        let me = crate::percpu::current_index() as u32;
        let seg = KObject::create(b"ktest-rc-private", me, Kind::Segment(Segment::new(PAGE_SIZE, me).map_err(err)?)).map_err(err)?;
        let addr = KRef::as_raw(&seg) as usize;
        crate::smp::run_on_all(&|_| {
            let a = seg.clone();
            let b = a.clone();
            drop(a);
            drop(b);
        });
        let left = super::entries_naming(addr);
        kassert!(left == 0, "{left} table entries name a private segment");
        kassert!(KRef::strong_count(&seg) == 1, "count {}", KRef::strong_count(&seg));
        drop(seg);
        let objs1 = live_objects();
        kassert!(objs1 == objs0, "the private segment outlived its last drop: {objs1} objects, expected {objs0}");
        let deaths1 = super::deaths();
        kassert!(deaths1 == deaths0, "a review declared {} private segments dead", deaths1 - deaths0);
        Ok(())
    }
    }

    ktest! {
    fn shared_share_removal_on_another_core_keeps_mapped_segment_and_frees_its_frames() {
        // A segment made in a shared share, with two pages present, mapped in a range on this
        // core; another core removes it from the share and drops that reference (the last
        // one but the mapping's). The segment and its frames must stay while mapped; after
        // the range goes, the segment goes once and both frames come back.
        // (Planted once: the review and its unlocked pre-check summed every core's deltas
        // but core 0's, where the mapping's +1 is; this failed with "2 objects with the
        // mapping held, expected 3 (segment freed under its mapping)". A plant that summed
        // only the reviewing core's table failed it with "0 deaths after the mapping went",
        // the leak side.)
        let before = crate::tests::quiescent_counts();
        let objs0 = live_objects();
        let deaths0 = super::deaths();
        let me = crate::percpu::current_index() as u32;
        let share = KObject::create(b"ktest-rc-share", me, Kind::Share(crate::kobj::share::Share::new_shared(me).map_err(err)?)).map_err(err)?;
        let seg = KObject::create_shared(b"ktest-rc-shseg", me, Kind::Segment(Segment::new(2 * PAGE_SIZE, me).map_err(err)?)).map_err(err)?;
        let id = seg.id;
        seg.as_segment().map_err(err)?.write_bytes(0, &[1u8; 2 * PAGE_SIZE as usize]).map_err(err)?;
        share.as_share().map_err(err)?.insert(seg.clone()).map_err(err)?;
        let range = KObject::create(b"ktest-rc-shar", me, Kind::Ar(AddressRange::new(ArKind::Span2M, me).map_err(err)?)).map_err(err)?;
        ar::set_seg(&range, 0, &seg, 0, 2 * PAGE_SIZE, MAP_READ | MAP_WRITE).map_err(err)?;
        drop(seg); // now: the share's reference and the mapping's
        let (pages_held, _) = crate::tests::quiescent_counts();
        let cores = crate::percpu::online_count();
        let other = if cores > 1 { (me as usize + 1) % cores } else { me as usize };
        let removed = AtomicUsize::new(0);
        crate::smp::run_on(&|_| {
            if let Ok(Some(r)) = share.as_share().and_then(|s| s.remove(id)) {
                drop(r);
                removed.fetch_add(1, Ordering::Relaxed);
            }
        }, core::iter::once(other), other == me as usize);
        kassert!(removed.load(Ordering::Relaxed) == 1, "the other core did not remove the entry");
        let (pages_mid, _) = crate::tests::quiescent_counts();
        kassert!(live_objects() == objs0 + 3, "{} objects with the mapping held, expected {} (segment freed under its mapping)", live_objects(), objs0 + 3);
        kassert!(super::deaths() == deaths0, "a segment was declared dead while mapped");
        kassert!(pages_mid == pages_held, "{} free pages with the segment mapped, {} before the removal (frames freed under a mapping)", pages_mid, pages_held);
        drop(range);
        let (pages_after, _) = crate::tests::quiescent_counts();
        kassert!(super::deaths() == deaths0 + 1, "{} deaths after the mapping went, expected 1", super::deaths() - deaths0);
        kassert!(pages_after >= pages_mid + 2, "only {} of the segment's 2 frames came back", pages_after.saturating_sub(pages_mid));
        drop(share);
        kassert!(live_objects() == objs0, "{} objects at the end, expected {objs0}", live_objects());
        crate::tests::nothing_leaked_since(before)
    }
    }

    ktest! {
    fn origin_only_segment_dies_by_its_own_review() {
        // A segment made in a shared share and counted only on this core (its origin): the
        // remote flag stays clear and its last drop is a death by this core's review alone
        // (`review_local`). A count change on another core sets the
        // flag (then the all-lock review decides). (Planted once: `note_remote` made a no-op;
        // this failed with "a count on core 1 left the remote flag clear".)
        let objs0 = live_objects();
        let deaths0 = super::deaths();
        let me = crate::percpu::current_index();
        let seg = segment(b"ktest-rc-local", 1)?;
        let flag = |o: &ObjRef| o.as_segment().map(|s| s.remote_counts().load(Ordering::SeqCst));
        let a = seg.clone();
        drop(a);
        kassert!(flag(&seg).map_err(err)? == false, "a count on the origin core set the remote flag");
        drop(seg);
        // This core's own review (as at its next system call): the origin-only path.
        super::review_own();
        kassert!(live_objects() == objs0, "the segment outlived its last drop and its core's review");
        kassert!(super::deaths() == deaths0 + 1, "{} deaths, expected 1", super::deaths() - deaths0);
        let cores = crate::percpu::online_count();
        if cores > 1 {
            let seg = segment(b"ktest-rc-remote", 1)?;
            let other = (me + 1) % cores;
            crate::smp::run_on(&|_| drop(seg.clone()), core::iter::once(other), false);
            kassert!(flag(&seg).map_err(err)? == true, "a count on core {other} left the remote flag clear");
            drop(seg);
            crate::kobj::share::reclaim_all();
            kassert!(live_objects() == objs0, "the remotely counted segment stayed after its last drop");
        }
        Ok(())
    }
    }
}
