//! The private descriptor table: one per context, in user memory right after the context
//! page, read and written by that context only (no lock, no atomic instruction, no system
//! call for `dup` and `close`; docs/fd.md).

use abi::{Error, ObjName, ObjectId, MEMID_SELF, PAGE_SIZE, SHARE_PRIVATE};

use super::file::{decode, encode, Kind};
use super::kinds::{make_object, with_file};
use super::window::{unmap_all, unmap_one};

/// Bit 63 of `Fd::obj` marks a private descriptor. Kernel object ids are `(core + 1) << 40 |
/// sequence`, so no kernel-object descriptor has it.
pub const PRIVATE_FD: u64 = 1 << 63;
/// Slot generations are 31 bits (bit 63 of the descriptor is the mark).
const GEN_MASK: u32 = 0x7fff_ffff;

/// Slots (descriptors) of a context's private table; the table is full at this many open
/// private descriptors (`Busy`). Also the most open files it can hold, since every open file
/// has at least one slot. Linux's default limit (`RLIMIT_NOFILE`'s soft value). The table's
/// pages are demand-zero: a context pays for the pages its descriptors touch, not for the
/// limit.
pub const PRIVATE_SLOTS: usize = 1024;
const WORDS: usize = PRIVATE_SLOTS / 64;

#[derive(Clone, Copy)]
#[repr(C)]
struct Slot {
    /// Index of the open file in `PrivateTable::files`.
    file: u32,
    /// Bumped at every close (masked by `GEN_MASK`).
    generation: u32,
}

#[derive(Clone, Copy)]
#[repr(C)]
struct OpenFile {
    /// The kernel object (in `Ctx::private_fds`).
    obj: ObjectId,
    /// `encode(Kind)`.
    kind: u64,
}

/// A context's private descriptor table, at `arena() + PAGE_SIZE` in the context's own
/// segment (`ctx::CTX_BYTES`). Only the owner context maps it, reads it or writes it, so it
/// needs no lock; every field is a plain integer, valid for any bits.
#[repr(C)]
pub struct PrivateTable {
    slot_used: [u64; WORDS],
    file_used: [u64; WORDS],
    slots: [Slot; PRIVATE_SLOTS],
    files: [OpenFile; PRIVATE_SLOTS],
    /// Slots pointing at each open file.
    refs: [u32; PRIVATE_SLOTS],
}

/// Counts of this context's private table (for tests and tools).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PrivateCounts {
    /// Descriptors (slots in use).
    pub descriptors: u32,
    /// Open files (kernel objects the table holds).
    pub open_files: u32,
}

// The table lies in the context segment's pages after the context page.
const _: () = assert!(core::mem::size_of::<PrivateTable>() as u64 <= crate::ctx::FD_TABLE_PAGES * PAGE_SIZE);

/// This context's private table. Callers first check that this context has a context page
/// (`try_ctx`) and must not hold two results at once.
#[inline]
pub(super) fn private_table() -> &'static mut PrivateTable {
    let p = (crate::ctx::arena() + PAGE_SIZE) as *mut PrivateTable;
    // SAFETY: every library-OS context maps its own context segment (`CTX_BYTES` bytes,
    // read-write) at `arena()`, and the table lies after the first page of it; no other
    // context maps that segment, one context runs on one core at a time, and callers hold
    // one reference at a time. All fields are integers, valid for any bit pattern.
    unsafe { &mut *p }
}

#[inline]
fn take_bit(bits: &mut [u64; WORDS]) -> Option<usize> {
    for (i, w) in bits.iter_mut().enumerate() {
        if *w != u64::MAX {
            let b = w.trailing_ones() as usize;
            *w |= 1 << b;
            return Some(i * 64 + b);
        }
    }
    None
}

#[inline]
fn clear_bit(bits: &mut [u64; WORDS], i: usize) {
    bits[i / 64] &= !(1 << (i % 64));
}

#[inline]
fn bit(bits: &[u64; WORDS], i: usize) -> bool {
    bits[i / 64] & (1 << (i % 64)) != 0
}

impl PrivateTable {
    #[inline]
    pub(super) fn fd_obj(&self, slot: usize) -> ObjectId {
        PRIVATE_FD | (self.slots[slot].generation as u64) << 32 | slot as u64
    }

    /// The slot a private descriptor names, if it is open (same generation).
    #[inline]
    pub(super) fn slot_of(&self, obj: ObjectId) -> Option<usize> {
        let slot = (obj & 0xffff_ffff) as usize;
        let generation = (obj >> 32) & GEN_MASK as u64;
        (slot < PRIVATE_SLOTS && bit(&self.slot_used, slot) && self.slots[slot].generation as u64 == generation).then_some(slot)
    }

    #[inline]
    pub(super) fn file_of(&self, slot: usize) -> usize {
        self.slots[slot].file as usize
    }

    /// The entry (kind) of open file `file`; `None` for a word no kind encodes.
    #[inline]
    pub(super) fn kind_of(&self, file: usize) -> Option<Kind> {
        decode(self.files[file].kind)
    }

    /// The kernel object of open file `file` (0 for an `fs` file, which has none).
    #[inline]
    pub(super) fn object_of(&self, file: usize) -> ObjectId {
        self.files[file].obj
    }

    /// A new slot for open file `file`.
    #[inline]
    pub(super) fn new_slot(&mut self, file: usize) -> Result<usize, Error> {
        let s = take_bit(&mut self.slot_used).ok_or(Error::Busy)?;
        self.slots[s].file = file as u32;
        self.refs[file] += 1;
        Ok(s)
    }
}

/// Open a private descriptor for a new open file of kind `k` in `share` (the private share);
/// the descriptor's `obj`.
pub(super) fn open_private(share: ObjectId, k: Kind) -> Result<ObjectId, Error> {
    let t = private_table();
    // Room first: a full table changes nothing and makes no kernel object.
    let slot = take_bit(&mut t.slot_used).ok_or(Error::Busy)?;
    let Some(file) = take_bit(&mut t.file_used) else {
        clear_bit(&mut t.slot_used, slot);
        return Err(Error::Busy);
    };
    // An `fs` file needs no kernel object: `fs`'s descriptor is what the open file holds;
    // nor does a socket: its slot in its core's socket table is.
    let made = if let Kind::Fs(_) | Kind::Socket(_) = k { Ok(0) } else { make_object(share, k) };
    match made {
        Ok(obj) => {
            t.files[file] = OpenFile { obj, kind: encode(k) };
            t.refs[file] = 1;
            t.slots[slot].file = file as u32;
            Ok(t.fd_obj(slot))
        }
        Err(e) => {
            clear_bit(&mut t.slot_used, slot);
            clear_bit(&mut t.file_used, file);
            Err(e)
        }
    }
}

#[inline]
pub(super) fn close_private(share: ObjectId, t: &mut PrivateTable, slot: usize) -> Result<(), Error> {
    clear_bit(&mut t.slot_used, slot);
    t.slots[slot].generation = t.slots[slot].generation.wrapping_add(1) & GEN_MASK;
    let f = t.file_of(slot);
    t.refs[f] -= 1;
    if t.refs[f] != 0 {
        return Ok(());
    }
    last_close(share, t, f)
}

/// Close every descriptor left in the calling context's private table, because the context
/// is ending: a thread or a cfork child whose function returned, or a program whose `main`
/// returned. Each pipe end goes, so a reader in another context reads end of file and a writer
/// gets `BrokenPipe` instead of waiting forever, and the last end frees the ring. A file
/// system descriptor's open file goes too, so a file unlinked while open is freed. Before
/// 2026-11-29 nothing closed them, and a pipe whose last reader's thread ended without `close`
/// never reported `BrokenPipe`. Errors are ignored: the context ends whatever they say.
/// Returns how many descriptors it closed.
///
/// Not called by a context that ends any other way: `exit` called from inside a function,
/// a fault, or a halt from outside. `exit` runs in `cores::Core` contexts too, which have no
/// context page to look at.
pub fn close_private_at_exit() -> usize {
    let Some(c) = crate::ctx::try_ctx() else { return 0 };
    let share = c.private_fds;
    if share == 0 {
        return 0;
    }
    let t = private_table();
    let mut closed = 0;
    for slot in 0..PRIVATE_SLOTS {
        if t.slot_used[slot / 64] != 0 && bit(&t.slot_used, slot) {
            let _ = close_private(share, t, slot);
            closed += 1;
        }
    }
    if closed != 0 {
        // The rings the closes mapped to count their ends down.
        unmap_all();
    }
    closed
}

/// The last descriptor of private open file `f` closed: delete its kernel object, release
/// what its kind holds (`FileLike::last_close`), and the pipe ring or file segment behind it if no other private open file uses that (it stays
/// alive in any shared table it was dup'ed into, which holds its own reference).
#[cold]
fn last_close(share: ObjectId, t: &mut PrivateTable, f: usize) -> Result<(), Error> {
    clear_bit(&mut t.file_used, f);
    let OpenFile { obj, kind } = t.files[f];
    // The open file's kernel object (an `fs` file has none).
    let r = if obj == 0 { Ok(()) } else { crate::sys::share_delobj(ObjName::new(share, obj)).map(|_| ()) };
    let Some(k) = decode(kind) else { return r };
    // What the open file held (a pipe end: the last end anywhere frees the ring, from every
    // table holding it, this private share included; an `fs` descriptor).
    match with_file(k, |file| file.last_close(share)) {
        Ok(true) => return r,
        Ok(false) => {}
        Err(e) => return r.and(Err(e)),
    }
    let Some(id) = k.behind() else { return r };
    let used = (0..PRIVATE_SLOTS)
        .filter(|&i| t.file_used[i / 64] != 0 && bit(&t.file_used, i))
        .any(|i| decode(t.files[i].kind).and_then(Kind::behind) == Some(id));
    if used {
        return r;
    }
    unmap_one(id);
    r.and(crate::sys::share_delobj(ObjName::new(share, id)).map(|_| ()))
}

/// Counts of this context's private table (zero before the first private descriptor).
pub fn private_counts() -> PrivateCounts {
    match crate::ctx::try_ctx() {
        Some(c) if c.private_fds != 0 => {
            let t = private_table();
            let ones = |b: &[u64; WORDS]| b.iter().map(|w| w.count_ones()).sum();
            PrivateCounts { descriptors: ones(&t.slot_used), open_files: ones(&t.file_used) }
        }
        _ => PrivateCounts::default(),
    }
}

/// The private share, made (and the table emptied) on this context's first private
/// descriptor. It holds the private open files' kernel objects.
pub(super) fn private_share() -> Result<ObjectId, Error> {
    let c = crate::ctx::ctx();
    if c.private_fds == 0 {
        let s = crate::sys::share_alloc(c.root_share, "fds-private", MEMID_SELF, SHARE_PRIVATE)?;
        // Empty the table: the context segment is demand-zero when new, but this does
        // not depend on it. (Slots and files are read only where the bitmaps say.)
        let t = private_table();
        t.slot_used = [0; WORDS];
        t.file_used = [0; WORDS];
        c.private_fds = s;
    }
    Ok(c.private_fds)
}
