//! Per-core lists of open files (MOSBENCH's fix, seeds/002: no shared open-file list or
//! reference count written by `open`/`close`).
//!
//! Every open of a regular file takes a slot in the calling core's own list (until
//! 2026-11-29 only read-only opens of cached names did) and returns a descriptor naming that
//! slot ([`FAST_BIT`] | core << 6 | slot): the core is in the number, so a descriptor used
//! or closed on another core still names its slot. An open of a cached name that changes
//! nothing (any access mode, `O_APPEND`, an `O_CREAT` that finds the file) takes no lock
//! ([`open`]); an open that makes or empties the file, or one under the lock, fills the slot
//! while its locks keep every change that could remove the file away ([`open_held`]).
//! Opening and closing write only lines of the slot (and, on the owning core, that core's
//! free-slot hint); `fstat` writes nothing (the `Stat` taken at open is returned while no
//! change to that file has happened since: the file's stamp, `names::Stamp`, its generation
//! stripe and the epoch, is still the one the slot was filled at). `read`, `pread` and
//! `lseek` go without the lock while that holds (`fs::read_unlocked`), under it otherwise
//! (which re-stamps the slot); `write`, `pwrite` and `ftruncate` run under the lock on the
//! slot in place (its flags say what it may do); `dup` *forwards* the slot to an ordinary
//! open file description under the tables' lock (the slot then names it, `FWD`), so the two
//! descriptors share one offset.
//!
//! **Claiming a slot without sharing a line.** `used` (a bit per slot ever taken since the
//! mount, set before the slot is first claimed and never cleared) is what scans look at;
//! `free_hint` is the owning core's own idea of which slots are free. A close on the owning
//! core sets its hint bit; a close on another core only stores `FREE` in the slot (a line
//! the closer writes anyway), and the owner finds such slots by their state when its hint
//! runs dry. The claim itself is a compare-and-swap `FREE` -> `CLAIMED` on the slot, so a
//! stale hint or two contexts on one core cost a retry, never one slot given twice.
//!
//! **Why a fast open is right.** The name cache's answer was true when the file's stamp was
//! `g` (`names`: the stamp is the epoch and the file's generation stripe). The opener fills
//! its slot, publishes it (`state` = `OPEN`), and only then (a SeqCst fence) reads the stamp
//! again: still `g` means no change to that file had started when the slot became visible.
//! A change that may remove or replace the file (unlink, rename, ...) names the file's inode
//! in `names::begin` (a running change on its stripe) and fences *before* it looks at which
//! inodes are open (`is_open`, which scans every core's list). So either the opener sees the
//! change and takes its slot back (then opens under the lock), or the change sees the slot
//! and treats the inode as open (an unlinked file stays until its last close). Changes to
//! other files (another stripe) do not disturb the slot: a create in one directory leaves
//! every other file's per-core descriptors reading without the lock.
//!
//! **Orphans.** Closing the last descriptor of a file unlinked while open must free it; a fast
//! close cannot know without the lock. `ORPHAN_WATCH` counts, per inode stripe (`watch`: the
//! name cache's stripes; once one global count, which every unlink wrote),
//! unlinks in progress or done of a last name whose inode may be open; `unlink` raises the
//! victim's stripe before it scans the lists, a fast close lowers its slot
//! first and reads it after (both SeqCst), so a close that reads 0 happened before any scan
//! could see its slot. A close that reads non-zero takes the lock and frees the orphan if it
//! was the last.
//!
//! **Is the inode open anywhere (an unlink or a rename removing a last name)?** No shared
//! table under one lock: `is_open` scans, with loads only, the slots whose `used` bit is set
//! in every core's list, after the change named the victim (`names::begin`: a SeqCst fence),
//! and the shared table (`fs::TABLES`, under its lock) only when it holds any description at
//! all (`fs::TABLE_DESCS`). Why no open is missed:
//! 1. An open without a lock ([`open`]): its `used` bit and `OPEN` come before its fence and
//!    its re-check of the stamp; the change's increment comes before its fence and its scan.
//!    Either the opener sees the stamp moved and takes its slot back, or the scan sees the slot.
//! 2. An open under a lock ([`open_held`]): on the exclusive side it holds every core's lock,
//!    the unlinking core's too, so its slot is published before that unlink starts or the
//!    unlink is over before it looks the name up; an `O_CREAT` open on the per-directory side
//!    holds the stripe of the directory it made the file in until its slot is published, and
//!    an unlink of that name (the file's only one) takes that stripe first (renames and links
//!    are exclusive).
//! 3. A slot `dup` forwarded (`FWD`, not counted by the scan): its description was counted in
//!    `TABLE_DESCS` (SeqCst) before the slot left `OPEN`; a scan that loads `FWD` (acquire)
//!    then loads a non-zero count and searches the shared table under its lock.
//! 4. A close meanwhile: the orphan watch counts above.

use core::sync::atomic::{fence, AtomicU64, Ordering};

use percore::pad::CachePadded;

use super::ext2::Stat;
use super::names::Stamp;

/// Cores with a list (the library OS's `percore` limit for per-core counters here).
pub const CORES: usize = 64;
/// Slots in one core's list.
pub const SLOTS: usize = 64;
/// Descriptors with this bit name a per-core slot; the rest index the locked table.
pub const FAST_BIT: u32 = 0x4000_0000;

/// Slot states.
const FREE: u64 = 0;
const OPEN: u64 = 1;
/// Forwarded: `state >> 8` is the index of an ordinary open file description.
const FWD: u64 = 2;
/// Being re-stamped under the lock (`restamp`): neither open nor closable without the lock
/// for that moment.
const RESTAMP: u64 = 3;
/// Claimed by an opener that has not published it yet (not open to anyone, not free).
const CLAIMED: u64 = 4;

/// A stamp no file ever has (its running-change bits are set, so `names::still` refuses
/// it): a slot opened inside a change, whose `Stat` may not match any finished state, reads
/// and seeks under the lock until a locked read re-stamps it.
pub const STALE: Stamp = Stamp { epoch: 0, gen: 1 };

#[repr(align(128))]
struct Slot {
    state: AtomicU64,
    ino: AtomicU64,
    off: AtomicU64,
    /// The mount the slot was opened on (`MOUNT`): a slot from before an unmount is stale.
    mount: AtomicU64,
    /// The file's stamp (`names::Stamp`: its stripe word and the epoch) the `stat` below was
    /// true at.
    gen: AtomicU64,
    epoch: AtomicU64,
    stat: [AtomicU64; 4],
    /// The open's flags (`O_ACCMODE` and `O_APPEND`): what `read` and `write` may do with it.
    flags: AtomicU64,
}

impl Slot {
    const fn new() -> Slot {
        Slot { state: AtomicU64::new(FREE), ino: AtomicU64::new(0), off: AtomicU64::new(0), mount: AtomicU64::new(0), gen: AtomicU64::new(0), epoch: AtomicU64::new(0), stat: [const { AtomicU64::new(0) }; 4], flags: AtomicU64::new(0) }
    }
}

struct CoreList {
    /// Bit `i`: slot `i` has been taken at least once since the mount (set by the owning core
    /// before it first claims the slot, never cleared while mounted): `is_open` looks only at
    /// these slots. Written once per slot, so it stays a read-mostly line.
    used: CachePadded<AtomicU64>,
    /// Bit `i`: the owning core believes slot `i` is free (its own closes set it, its opens
    /// clear it; a close on another core frees the slot without touching this line, and the
    /// owner finds such slots again when the hint runs dry). Only a hint: the claim is a
    /// compare-and-swap of the slot's state, so a stale bit costs a retry, never a slot
    /// given twice (several contexts on one core, a TC core, may race here).
    free_hint: CachePadded<AtomicU64>,
    slots: [Slot; SLOTS],
}

static LISTS: [CoreList; CORES] = [const { CoreList { used: CachePadded::new(AtomicU64::new(0)), free_hint: CachePadded::new(AtomicU64::new(u64::MAX)), slots: [const { Slot::new() }; SLOTS] } }; CORES];

/// Per core, per inode stripe (`open_stripe`): how many of that core's slots are filled
/// with an inode of the stripe and not yet freed (`OPEN`, `RESTAMP` or `FWD`), each count on
/// a line of its own. Raised by the owning core before it publishes a slot, lowered by
/// whoever frees it. `is_open` reads one count per core (its victim's stripe) and scans only
/// the lists of cores whose count is not 0: an unlink then reads another core's slot lines
/// only when that core has a file of the same stripe open, so a core that opens, closes and
/// unlinks its own files (`fs_create_private`) reads no line another core writes but for
/// stripe collisions (1 in `OPEN_STRIPES`).
const OPEN_STRIPES: usize = 32;
static OPEN_COUNTS: [[CachePadded<AtomicU64>; OPEN_STRIPES]; CORES] = [const { [const { CachePadded::new(AtomicU64::new(0)) }; OPEN_STRIPES] }; CORES];

fn open_stripe(ino: u64) -> usize {
    ((ino as u32).wrapping_mul(0x9E37_79B1) >> (32 - OPEN_STRIPES.trailing_zeros())) as usize
}

/// The count of core `c`'s filled slots of inode `ino`'s stripe.
fn open_count(c: usize, ino: u64) -> &'static AtomicU64 {
    &OPEN_COUNTS[c.min(CORES - 1)][open_stripe(ino)]
}

/// Slot `fd` (filled with `ino`) went back to `FREE`: its core's count down.
fn uncount(fd: u32, ino: u64) {
    let c = ((fd & !FAST_BIT) >> 6) as usize;
    // Saturating: never below 0 whatever a corrupt caller does.
    let _ = open_count(c, ino).fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1));
}

/// Which mount is current (raised at every mount and unmount, under the lock). Read by every
/// call, so on a line of its own (no write of a neighbour's makes those reads conflict).
pub static MOUNT: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));
/// Unlinks whose inode may be open in a per-core slot, per inode stripe (see the module
/// comment): an unlink writes only its victim's line, a fast close reads only its file's.
static ORPHAN_WATCH: [CachePadded<AtomicU64>; super::names::STRIPES] = [const { CachePadded::new(AtomicU64::new(0)) }; super::names::STRIPES];

/// The orphan watch count of inode `ino`'s stripe.
pub fn watch(ino: u32) -> &'static AtomicU64 {
    &ORPHAN_WATCH[super::names::stripe(ino)]
}

/// At unmount (under the lock, no orphan left): every watch count back to 0.
pub fn watch_reset() {
    for w in &ORPHAN_WATCH {
        w.store(0, Ordering::SeqCst);
    }
}

pub fn is_fast(fd: u32) -> bool {
    fd & FAST_BIT != 0
}

fn slot_of(fd: u32) -> Option<&'static Slot> {
    if !is_fast(fd) {
        return None;
    }
    let (c, i) = (((fd & !FAST_BIT) >> 6) as usize, (fd & 63) as usize);
    LISTS.get(c).map(|l| &l.slots[i])
}

fn core() -> usize {
    crate::ctx::ctx().core as usize
}

/// What a descriptor names, seen from a call that holds the file system's lock.
pub enum Named {
    /// An open per-core slot: its inode, offset and open flags.
    Open { ino: u32, off: u64, flags: u32 },
    /// Forwarded to the ordinary open file description with this index.
    Forwarded(u32),
}

/// Claim a free slot of the calling core's list (state `CLAIMED`): the lowest one the
/// core's hint says is free, else (the hint ran dry: slots freed by other cores' closes)
/// any slot in the `FREE` state. Writes only lines of this core (the hint, the claimed
/// slot, and `used` the first time a slot is taken). None: every slot is taken.
fn claim(c: usize) -> Option<usize> {
    let list = LISTS.get(c)?;
    for _ in 0..2 {
        loop {
            let hint = list.free_hint.load(Ordering::Relaxed);
            if hint == 0 {
                break;
            }
            let i = hint.trailing_zeros() as usize;
            list.free_hint.fetch_and(!(1 << i), Ordering::Relaxed);
            if claim_slot(list, i) {
                return Some(i);
            }
        }
        // Refill the hint from the slots' states (other cores' closes).
        let mut found = 0u64;
        for (i, s) in list.slots.iter().enumerate() {
            if s.state.load(Ordering::Relaxed) == FREE {
                found |= 1 << i;
            }
        }
        if found == 0 {
            return None;
        }
        list.free_hint.fetch_or(found, Ordering::Relaxed);
    }
    None
}

/// Take slot `i` of `list` if it is free: `used` first (so a scan that finds the bit clear
/// knows the slot is not open), then the state.
fn claim_slot(list: &CoreList, i: usize) -> bool {
    if list.used.load(Ordering::Relaxed) & (1 << i) == 0 {
        list.used.fetch_or(1 << i, Ordering::SeqCst);
    }
    list.slots[i].state.compare_exchange(FREE, CLAIMED, Ordering::SeqCst, Ordering::Relaxed).is_ok()
}

/// Fill a claimed slot and publish it (`OPEN`).
fn fill(c: usize, s: &Slot, stat: &Stat, gen: Stamp, flags: u32) {
    // Counted before it is published (and so before the opener's fence: `is_open`).
    open_count(c, stat.ino as u64).fetch_add(1, Ordering::SeqCst);
    s.ino.store(stat.ino as u64, Ordering::Relaxed);
    s.off.store(0, Ordering::Relaxed);
    s.flags.store(flags as u64, Ordering::Relaxed);
    s.mount.store(MOUNT.load(Ordering::Relaxed), Ordering::Relaxed);
    s.gen.store(gen.gen, Ordering::Relaxed);
    s.epoch.store(gen.epoch, Ordering::Relaxed);
    for (w, a) in super::names::pack(stat).iter().zip(&s.stat) {
        a.store(*w, Ordering::Relaxed);
    }
    s.state.store(OPEN, Ordering::Release);
}

fn fd_of(c: usize, i: usize) -> u32 {
    FAST_BIT | (c as u32) << 6 | i as u32
}

/// What [`open`] did.
pub enum Opened {
    /// The descriptor.
    Fd(u32),
    /// No free slot or no list for this core: nothing was published.
    NoSlot,
    /// A change to the file started: the slot was published and taken back. The change may
    /// have seen it and made the file an orphan meanwhile; `watch(ino)` is then non-zero and
    /// the caller must free the orphan under the lock if nothing else has it open, as a
    /// close would ([`Opened::orphan_check`]).
    TakenBack(u32),
}

impl Opened {
    /// The inode whose orphan the caller must look for (under the lock, after every lock it
    /// holds now is released), if any.
    pub fn orphan_check(&self) -> Option<u32> {
        match self {
            Opened::TakenBack(ino) if watch(*ino).load(Ordering::SeqCst) != 0 => Some(*ino),
            _ => None,
        }
    }

    pub fn fd(&self) -> Option<u32> {
        match self {
            Opened::Fd(fd) => Some(*fd),
            _ => None,
        }
    }
}

/// Open `stat.ino` (with `flags`: the access mode and `O_APPEND`) in the calling core's list
/// without the lock, if the file's stamp is still `gen` once the slot is visible.
pub fn open(stat: &Stat, gen: Stamp, flags: u32) -> Opened {
    let c = core();
    let Some(i) = claim(c) else { return Opened::NoSlot };
    let list = &LISTS[c];
    let s = &list.slots[i];
    fill(c, s, stat, gen, flags);
    fence(Ordering::SeqCst);
    if !super::names::still(stat.ino, gen) {
        // A change started: it may or may not have seen the slot. Take it back; the fence
        // orders that before the caller's look at the watch count (as in a close).
        s.state.store(FREE, Ordering::SeqCst);
        uncount(fd_of(c, i), stat.ino as u64);
        list.free_hint.fetch_or(1 << i, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        return Opened::TakenBack(stat.ino);
    }
    Opened::Fd(fd_of(c, i))
}

/// Open `stat.ino` in the calling core's list from a caller that keeps every change that
/// could remove the file away until the descriptor is returned (the exclusive side, or the
/// per-directory side holding the stripe of the directory the file was just made in): no
/// re-check. `fresh`: no change runs (the exclusive side outside a change), so the file's
/// current stamp goes with `stat`; else the slot gets `STALE` and its first read, seek or
/// `fstat` under the lock re-stamps it. None: no free slot (the caller uses the shared
/// table).
pub fn open_held(stat: &Stat, flags: u32, fresh: bool) -> Option<u32> {
    let c = core();
    let i = claim(c)?;
    let gen = if fresh { super::names::stamp(stat.ino).unwrap_or(STALE) } else { STALE };
    fill(c, &LISTS[c].slots[i], stat, gen, flags);
    // The publication is ordered before the lock's release (which orders it before a later
    // change's scan); a SeqCst fence also orders it before this core's next loads.
    fence(Ordering::SeqCst);
    Some(fd_of(c, i))
}

/// `fstat` without the lock: the `Stat` taken at open, if no change happened since (the
/// file's stamp is still the slot's). None: ask under the lock.
pub fn fstat(fd: u32) -> Option<Stat> {
    let s = slot_of(fd)?;
    if s.state.load(Ordering::Acquire) != OPEN {
        return None;
    }
    // Acquire: `restamp` stores the `Stat` before a new stamp.
    let gen = stamp_of(s);
    let ino = s.ino.load(Ordering::Relaxed) as u32;
    let mut w = [0u64; 4];
    for (x, a) in w.iter_mut().zip(&s.stat) {
        *x = a.load(Ordering::Relaxed);
    }
    fence(Ordering::Acquire);
    let still = s.state.load(Ordering::Relaxed) == OPEN && stamp_of(s) == gen;
    (still && super::names::still(ino, gen) && s.mount.load(Ordering::Relaxed) == MOUNT.load(Ordering::Relaxed)).then(|| super::names::unpack(w))
}

/// A slot's stamp (the generation word with acquire: `restamp` stores the `Stat` and the
/// epoch before it).
fn stamp_of(s: &Slot) -> Stamp {
    let gen = s.gen.load(Ordering::Acquire);
    Stamp { gen, epoch: s.epoch.load(Ordering::Relaxed) }
}

/// Close a per-core slot in the `OPEN` state without the lock. `Some(ino)` if it was open
/// (the caller checks the file's `watch` next); None if the slot is forwarded (close it under
/// the lock) or not open (`BadDescriptor`, told apart by [`close_named`]).
pub fn close_open(fd: u32) -> Option<u64> {
    let s = slot_of(fd)?;
    let ino = s.ino.load(Ordering::Relaxed);
    s.state.compare_exchange(OPEN, FREE, Ordering::SeqCst, Ordering::Relaxed).ok()?;
    uncount(fd, ino);
    free_bit(fd);
    Some(ino)
}

/// Close a slot from before the current mount (its file system went with the unmount):
/// freed, and the caller answers `BadDescriptor`. True if it was such a slot.
pub fn close_stale(fd: u32) -> bool {
    let Some(s) = slot_of(fd) else { return false };
    let st = s.state.load(Ordering::Acquire);
    if (st & 0xff != OPEN && st & 0xff != FWD) || s.mount.load(Ordering::Relaxed) == MOUNT.load(Ordering::Relaxed) {
        return false;
    }
    if s.state.compare_exchange(st, FREE, Ordering::SeqCst, Ordering::Relaxed).is_ok() {
        uncount(fd, s.ino.load(Ordering::Relaxed));
        free_bit(fd);
    }
    true
}

/// A slot went back to `FREE`: on its own core, tell the core's hint (another core's close
/// leaves the owner's lines alone: the owner finds the slot when its hint runs dry).
fn free_bit(fd: u32) {
    let (c, i) = (((fd & !FAST_BIT) >> 6) as usize, fd & 63);
    if c == core() {
        if let Some(l) = LISTS.get(c) {
            l.free_hint.fetch_or(1u64 << i, Ordering::Relaxed);
        }
    }
}

/// Under the lock: what `fd` names, or None (not a per-core descriptor, closed, or from an
/// earlier mount).
pub fn named(fd: u32) -> Option<Named> {
    let s = slot_of(fd)?;
    let st = s.state.load(Ordering::Acquire);
    if s.mount.load(Ordering::Relaxed) != MOUNT.load(Ordering::Relaxed) {
        return None;
    }
    match st & 0xff {
        OPEN => Some(Named::Open { ino: s.ino.load(Ordering::Relaxed) as u32, off: s.off.load(Ordering::Relaxed), flags: s.flags.load(Ordering::Relaxed) as u32 }),
        FWD => Some(Named::Forwarded((st >> 8) as u32)),
        _ => None,
    }
}

/// An `OPEN` slot's offset after `forward` took it: no read or seek may move it any more.
const FROZEN: u64 = u64::MAX;

/// Move an `OPEN` slot's offset from `from` to `to` (reads and seeks with or without the
/// lock). False if it is not `from` any more (another read or seek of the same descriptor
/// moved it, or `forward` froze it): the caller starts over.
pub fn advance_off(fd: u32, from: u64, to: u64) -> bool {
    from != FROZEN && to != FROZEN && slot_of(fd).is_some_and(|s| s.off.compare_exchange(from, to, Ordering::SeqCst, Ordering::Relaxed).is_ok())
}

/// Under the lock (so no `forward` runs): set an `OPEN` slot's offset (after a `write`).
pub fn set_off(fd: u32, to: u64) {
    if let Some(s) = slot_of(fd) {
        if to != FROZEN && s.off.load(Ordering::Relaxed) != FROZEN {
            s.off.store(to, Ordering::SeqCst);
        }
    }
}

/// Under `TABLES` (held by every exclusive call too, so no `restamp` or locked offset move
/// runs meanwhile): make an `OPEN` slot name the open file description `desc` from now on, and
/// give its offset (frozen first, so that a read or seek without the lock that moves it after
/// this fails its `advance_off` and starts over on the description). None if the slot was
/// closed meanwhile (a fast close on its core).
pub fn forward(fd: u32, desc: u32) -> Option<u64> {
    let s = slot_of(fd)?;
    let off = s.off.swap(FROZEN, Ordering::SeqCst);
    s.state.compare_exchange(OPEN, FWD | (desc as u64) << 8, Ordering::SeqCst, Ordering::Relaxed).ok()?;
    Some(off)
}

/// Under the lock (so no change runs): make an `OPEN` slot whose stamp went stale current
/// again, with `stat` (the file's `Stat` now) and the file's current stamp, so its reads,
/// seeks and `fstat` go without the lock again until the next change to that file. The slot is taken out of `OPEN` while its words are written (a compare-and-swap
/// to `RESTAMP`), so a reader without the lock never pairs the new generation with the old
/// `Stat` (it sees the state not `OPEN`, or the words before or after: the state's release
/// store orders them), and a close without the lock in that moment falls back to the lock,
/// which we hold: it finds the slot `OPEN` again. False if the slot was not `OPEN`.
pub fn restamp(fd: u32, stat: &Stat) -> bool {
    let Some(s) = slot_of(fd) else { return false };
    let Some(now) = super::names::stamp(stat.ino) else { return false };
    if s.state.compare_exchange(OPEN, RESTAMP, Ordering::SeqCst, Ordering::Relaxed).is_err() {
        return false;
    }
    for (w, a) in super::names::pack(stat).iter().zip(&s.stat) {
        a.store(*w, Ordering::Relaxed);
    }
    s.epoch.store(now.epoch, Ordering::Relaxed);
    // Release: a reader that loads the new generation (acquire) sees the new `Stat`.
    s.gen.store(now.gen, Ordering::Release);
    s.state.store(OPEN, Ordering::Release);
    true
}

/// Whether `fd` is an `OPEN` slot whose stamp is not its file's current one (`restamp` would
/// help). Loads only.
pub fn stale(fd: u32) -> bool {
    slot_of(fd).is_some_and(|s| s.state.load(Ordering::Acquire) == OPEN && Some(stamp_of(s)) != super::names::stamp(s.ino.load(Ordering::Relaxed) as u32))
}

/// What a read or seek without the lock starts from: an `OPEN` slot of the current mount
/// whose file's stamp is still the current one (no change to that file since the open).
#[derive(Clone, Copy, Debug)]
pub struct Snapshot {
    pub ino: u32,
    pub off: u64,
    pub gen: Stamp,
    pub mount: u64,
    /// The file's size at the open (true while the file's stamp is `gen`).
    pub size: u64,
    /// The open's flags.
    pub flags: u32,
}

/// The slot `fd` names, if a read may use it without the lock (see `Snapshot`). Loads only.
pub fn snapshot(fd: u32) -> Option<Snapshot> {
    let s = slot_of(fd)?;
    if s.state.load(Ordering::Acquire) != OPEN {
        return None;
    }
    // The stamp first, with acquire: `restamp` stores the `Stat` before it.
    let gen = stamp_of(s);
    let snap = Snapshot {
        ino: s.ino.load(Ordering::Relaxed) as u32,
        off: s.off.load(Ordering::Acquire),
        gen,
        mount: s.mount.load(Ordering::Relaxed),
        size: s.stat[1].load(Ordering::Relaxed),
        flags: s.flags.load(Ordering::Relaxed) as u32,
    };
    fence(Ordering::Acquire);
    let live = snap.off != FROZEN && s.state.load(Ordering::Relaxed) == OPEN && stamp_of(s) == snap.gen;
    (live && snap.mount == MOUNT.load(Ordering::Acquire) && unchanged(snap.ino, snap.gen)).then_some(snap)
}

/// No change to file `ino` (nor of the epoch) started since its stamp was `gen` (loads made
/// before this call saw the state of stamp `gen`; `names::still`'s fence orders them before
/// the check).
pub fn unchanged(ino: u32, gen: Stamp) -> bool {
    super::names::still(ino, gen)
}

/// Under `TABLES`: free a forwarded slot (its description is released by the caller).
pub fn close_forwarded(fd: u32) {
    if let Some(s) = slot_of(fd) {
        s.state.store(FREE, Ordering::Release);
        uncount(fd, s.ino.load(Ordering::Relaxed));
        free_bit(fd);
    }
}

/// Under the lock (a change running on `ino`'s stripe, `names::begin`): whether any core's list has `ino`
/// open on the current mount. Loads only.
pub fn is_open(ino: u32) -> bool {
    fence(Ordering::SeqCst);
    let mount = MOUNT.load(Ordering::Relaxed);
    // Only the cores this process has (another core's list is never filled).
    let n = crate::heap::cores().clamp(1, CORES);
    LISTS[..n].iter().enumerate().any(|(c, l)| {
        // A core with no filled slot of the stripe: nothing of its list to read.
        if open_count(c, ino as u64).load(Ordering::SeqCst) == 0 {
            return false;
        }
        let used = l.used.load(Ordering::Acquire);
        used != 0
            && l.slots.iter().enumerate().any(|(i, s)| {
                used & (1 << i) != 0 && matches!(s.state.load(Ordering::Acquire), OPEN | RESTAMP) && s.ino.load(Ordering::Relaxed) == ino as u64 && s.mount.load(Ordering::Relaxed) == mount
            })
    })
}

/// Slots in the `OPEN` state on the calling core's list (tests).
pub fn open_here() -> u32 {
    LISTS.get(core()).map(|l| l.slots.iter().filter(|s| s.state.load(Ordering::Relaxed) == OPEN).count() as u32).unwrap_or(0)
}
