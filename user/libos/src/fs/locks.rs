//! The file system's locks: one `Ext2` per core under that core's lock (`CORE_FS`, a
//! big-reader lock whose reader side is exclusive per core), directory stripe locks for
//! changes confined to one directory (the per-directory side), every core's lock for the rest
//! (the exclusive side), and the per-core record of what a running change names, which keeps
//! the name cache and the lock-free paths right (`change_hook`). docs/fs.md, "Create and
//! unlink".

use alloc::vec::Vec;

use percore::pad::CachePadded;

use super::cache;
use super::ext2::{Ext2, FsError};
use super::names;
use super::open_files;
use super::tables::{OpenFile, Result, Tables, TABLES};
use percore::mcs::{McsGuard as MutexGuard, McsLock as Mutex};

/// One core's `Ext2`: the shared buffer cache through a `CoreDisk`, with that core's copy of
/// the superblock and group descriptors and its own reserve (`Ext2::clone_with`).
pub(super) type CoreFs = Ext2<cache::CoreDisk>;

/// What a call runs on: the calling core's `Ext2` and the open-file tables.
pub(super) struct Mounted<'a> {
    pub(super) fs: &'a mut CoreFs,
    pub(super) files: &'a mut Vec<Option<u32>>,
    pub(super) descs: &'a mut Vec<Option<OpenFile>>,
    pub(super) orphans: &'a mut alloc::collections::BTreeSet<u32>,
}

/// The file system's big-reader lock: one lock per core, each on its own line, holding that
/// core's `Ext2`. A change confined to one directory (create, unlink of a file, `open` with
/// `O_CREAT`, an orphan's release: `with_dir_change`) takes its own core's lock only, plus the
/// directory's stripe lock (`DIR_LOCKS`, through `change_hook`); everything else takes every
/// core's lock in order, then `TABLES` (`exclusive`). So changes in different directories on
/// different cores write no shared line of the file system's, and anything structural
/// (rename, rmdir, sync, mount, unmount, reserve refills) sees
/// the whole file system still. (A per-core lock rather than a per-core reader count: the
/// core's `Ext2`, its reserve and its change record are then the lock holder's alone, even
/// with several contexts on one core.)
pub(super) static CORE_FS: [CachePadded<Mutex<Option<CoreFs>>>; open_files::CORES] = [const { CachePadded::new(Mutex::new(None)) }; open_files::CORES];

/// How many of `CORE_FS` hold an `Ext2` (0: not mounted). Changed only with every lock held
/// (mount, unmount); read after taking `CORE_FS[0]`.
pub(super) static NCORE_FS: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// Directory locks: a stripe per multiplicative hash of the inode number, each on its own
/// 128 bytes. Held by a change on the per-directory side from the moment `change_hook` names
/// the inode (before anything of it is written) to the end of the change. The acquisition
/// rule (the first stripe of a change waits, a later one only if free) is
/// `percore::StripeLocks::acquire`, model-checked with this file system's two sides in
/// percore/tests/loom.rs (`stripe_*`).
pub(super) const DIR_STRIPES: usize = 64;
pub(super) static DIR_LOCKS: percore::StripeLocks<DIR_STRIPES> = percore::StripeLocks::new();

pub(super) fn dir_stripe(ino: u32) -> usize {
    percore::StripeLocks::<DIR_STRIPES>::stripe_of(ino)
}

pub(super) fn unlock_stripe(s: usize) {
    DIR_LOCKS.unlock(s);
}

/// Every core's lock (in order) and the tables: the exclusive side.
pub(super) struct Exclusive {
    pub(super) cores: Vec<MutexGuard<'static, Option<CoreFs>>>,
    pub(super) tables: MutexGuard<'static, Option<Tables>>,
}

pub(super) fn exclusive() -> Exclusive {
    let first = CORE_FS[0].lock();
    let n = NCORE_FS.load(core::sync::atomic::Ordering::Relaxed).clamp(1, open_files::CORES);
    let mut cores = Vec::with_capacity(n);
    cores.push(first);
    for l in &CORE_FS[1..n] {
        cores.push(l.lock());
    }
    Exclusive { cores, tables: TABLES.lock() }
}

impl Exclusive {
    /// The `Ext2` the calling core runs exclusive calls on.
    pub(super) fn me(&self) -> usize {
        (crate::ctx::ctx().core as usize).min(self.cores.len() - 1)
    }

    pub(super) fn run<R>(&mut self, f: &mut impl FnMut(&mut Mounted) -> Result<R>) -> Result<R> {
        let me = self.me();
        let t = self.tables.as_mut().ok_or(FsError::NoDevice)?;
        let fs = self.cores[me].as_mut().ok_or(FsError::NoDevice)?;
        let gen = fs.counts_gen;
        let r = f(&mut Mounted { fs, files: &mut t.files, descs: &mut t.descs, orphans: &mut t.orphans });
        // Only when the counts changed: else the other cores' lines stay unwritten.
        if self.cores[me].as_ref().is_some_and(|fs| fs.counts_gen != gen) {
            self.broadcast(me);
        }
        r
    }

    /// Make every core's superblock and group descriptors those of core `from`'s `Ext2` (only
    /// an exclusive call changes them: `Ext2::frozen`).
    pub(super) fn broadcast(&mut self, from: usize) {
        let Some(src) = self.cores[from].take() else { return };
        for (i, g) in self.cores.iter_mut().enumerate() {
            if let (true, Some(fs)) = (i != from, g.as_mut()) {
                fs.copy_counts_from(&src);
            }
        }
        *self.cores[from] = Some(src);
    }

    /// Give every core's reserve (and spilled frees) back to the bitmaps and the counts, one
    /// core after the other, each starting from the counts the one before left.
    pub(super) fn return_reserves(&mut self) -> Result<()> {
        let me = self.me();
        let Some(mut src) = self.cores[me].take() else { return Err(FsError::NoDevice) };
        let mut r = Ok(());
        for g in self.cores.iter_mut() {
            if let Some(fs) = g.as_mut() {
                fs.copy_counts_from(&src);
                let x = fs.return_reserves();
                r = r.and(x);
                src.copy_counts_from(fs);
            }
        }
        let x = src.return_reserves();
        *self.cores[me] = Some(src);
        self.broadcast(me);
        r.and(x)
    }

    /// `Ext2::fold_pending_dirs` on every core, one after the other, each starting from the
    /// counts the one before left (as `return_reserves`), then the result on every core.
    pub(super) fn fold_pending_dirs(&mut self) -> Result<()> {
        let me = self.me();
        let Some(mut src) = self.cores[me].take() else { return Err(FsError::NoDevice) };
        let mut r = src.fold_pending_dirs();
        for g in self.cores.iter_mut() {
            if let Some(fs) = g.as_mut() {
                if fs.has_pending_dirs() {
                    fs.copy_counts_from(&src);
                    let x = fs.fold_pending_dirs();
                    r = r.and(x);
                    src.copy_counts_from(fs);
                }
            }
        }
        *self.cores[me] = Some(src);
        self.broadcast(me);
        r
    }

    /// Inodes and blocks every core's reserve holds.
    pub(super) fn reserved(&self) -> (u64, u64) {
        self.cores.iter().filter_map(|g| g.as_ref()).map(|fs| fs.reserved()).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    }

    /// Ordered write-back: the data blocks written since the last sync, a flush, then the
    /// metadata (bitmaps, inodes, directories, descriptors, superblock), a flush. A crash in
    /// between leaves written data that no inode names yet (e2fsck -fy frees it), never an
    /// inode naming blocks that were not written.
    pub(super) fn sync(&mut self) -> Result<()> {
        // The cache knows which dirty pages are data (`Disk::note_data`) and writes those
        // first, flushes, then the rest, then flushes. The per-core reserves go back to the
        // bitmaps and counts first, so what reaches the disk is exact (`e2fsck -fn` clean).
        // Written back even if that fails.
        let r = self.return_reserves();
        cache::with_cache(|c| c.sync())?;
        for fs in self.cores.iter_mut().filter_map(|g| g.as_mut()) {
            fs.dirty_data.clear();
        }
        r
    }
}

/// Run `f` on the exclusive side (every core's lock, then the tables).
pub(super) fn with<R>(mut f: impl FnMut(&mut Mounted) -> Result<R>) -> Result<R> {
    exclusive().run(&mut f)
}

/// Run `f` on the exclusive side with the `Exclusive` itself (sync, df, ...).
pub(super) fn with_all<R>(f: impl FnOnce(&mut Exclusive) -> Result<R>) -> Result<R> {
    let mut x = exclusive();
    if x.tables.is_none() {
        return Err(FsError::NoDevice);
    }
    f(&mut x)
}

/// `with` for a call that may change names or attributes. Every inode whose directory
/// entries or `Stat` it changes is named, before anything of it is written, to
/// `names::begin` (through `Ext2::change_hook`, which the directory operations, `write` and
/// `truncate` call: `Ext2::changing`), and to `names::end` after; the name cache's entries
/// through those inodes and the per-core descriptors of them stop being used from the first
/// and stay unused after (`names`: why that keeps lock-free `stat`, `open`, `fstat` and
/// `read` right). Entries and descriptors of other inodes stay good. (Before 2026-11-29
/// every change moved one generation for the whole cache; mount and unmount still move its
/// epoch.) The inodes are recorded on the calling core's own line (`CHANGES`), so recording
/// writes nothing another core reads. A `NoSpace` while another core's reserve holds
/// something gives every reserve back and runs `f` once more (a reserve never causes a false
/// `NoSpace`; the failed run freed what it took).
pub(super) fn with_change<R>(mut f: impl FnMut(&mut Mounted) -> Result<R>) -> Result<R> {
    let mut x = exclusive();
    // Directories made on the per-directory side count in their groups' `used_dirs` before
    // any exclusive change (an rmdir of one would otherwise lower a count not yet raised).
    if x.cores.iter().any(|g| g.as_ref().is_some_and(|fs| fs.has_pending_dirs())) {
        x.fold_pending_dirs()?;
    }
    let r = change_recorded(false, || x.run(&mut f));
    if matches!(r, Err(FsError::NoSpace)) && x.reserved() != (0, 0) {
        x.return_reserves()?;
        return change_recorded(false, || x.run(&mut f));
    }
    r
}

/// The per-directory side: run the change `f` on the calling core's `Ext2` with its own
/// lock only, the allocation state frozen (`Ext2::frozen`), and the lock of each directory
/// stripe `change_hook` is given. `Contended` (nothing written) when `f` needs more: the
/// caller runs it again on the exclusive side. Why walks need no directory lock here: on this
/// side a directory only gains or loses a record, each by one write of the bytes that change
/// inside one block (one write of the cache page's parts that hold those bytes, all of them
/// locked for it: a reader validates every part it copied, so it copies the record whole or
/// not at all: `percore::seqparts`), or gains a block written before the size that exposes
/// it; so a walk through a directory another core is changing sees it before or after that
/// change, never half of it (a directory never shrinks or moves here: rmdir and rename are
/// exclusive; a `mkdir` here only adds a record to its parent).
pub(super) fn with_dir_change<R>(f: impl FnOnce(&mut CoreFs) -> Result<R>) -> Result<R> {
    let c = crate::ctx::ctx().core as usize;
    let Some(l) = CORE_FS.get(c) else { return Err(FsError::Contended) };
    let mut g = l.lock();
    // Not mounted, or a core without an `Ext2`: the exclusive side decides.
    let Some(fs) = g.as_mut() else { return Err(FsError::Contended) };
    fs.frozen = true;
    let r = change_recorded(true, || f(fs));
    fs.frozen = false;
    if !matches!(r, Err(FsError::Contended)) {
        // Only this core writes its record.
        let d = &my_changes().dir_side;
        d.store(d.load(core::sync::atomic::Ordering::Relaxed) + 1, core::sync::atomic::Ordering::Relaxed);
    }
    r
}

/// How many changes (create, unlink, `open` with `O_CREAT`, close) core `c` finished on the
/// per-directory side, without the exclusive side.
pub fn dir_side_changes(c: usize) -> u64 {
    CHANGES[c.min(open_files::CORES - 1)].dir_side.load(core::sync::atomic::Ordering::Relaxed)
}

/// Run `f` as one change recorded on this core's `CHANGES` (the caller holds this core's lock
/// or every core's): `names::end` for every inode it named, and (`per_dir`) its directory
/// stripes unlocked, after it.
pub(super) fn change_recorded<R>(per_dir: bool, f: impl FnOnce() -> Result<R>) -> Result<R> {
    use core::sync::atomic::Ordering::Relaxed;
    let rec = my_changes();
    rec.n.store(0, Relaxed);
    rec.nstripes.store(0, Relaxed);
    rec.per_dir.store(per_dir as u32, Relaxed);
    rec.active.store(1, Relaxed);
    let r = f();
    rec.active.store(0, Relaxed);
    let n = rec.n.load(Relaxed) as usize;
    let mut inos = [0u32; CHANGED_MAX];
    for (i, a) in inos.iter_mut().zip(&rec.inos).take(n) {
        *i = a.load(Relaxed);
    }
    names::end(&inos[..n]);
    for s in rec.stripes.iter().take(rec.nstripes.load(Relaxed) as usize) {
        unlock_stripe(s.load(Relaxed) as usize);
    }
    rec.nstripes.store(0, Relaxed);
    r
}

/// Most distinct inodes one change names (`rename` replacing a name: two parents, the moved
/// inode, the replaced one; room to spare).
pub(super) const CHANGED_MAX: usize = 8;

/// One core's record of the inodes the change it runs has named (only that core touches it).
pub(super) struct ChangeRecord {
    pub(super) active: core::sync::atomic::AtomicU32,
    /// The change runs on the per-directory side (`with_dir_change`): lock each stripe.
    pub(super) per_dir: core::sync::atomic::AtomicU32,
    pub(super) n: core::sync::atomic::AtomicU32,
    pub(super) inos: [core::sync::atomic::AtomicU32; CHANGED_MAX],
    pub(super) nstripes: core::sync::atomic::AtomicU32,
    pub(super) stripes: [core::sync::atomic::AtomicU32; CHANGED_MAX],
    /// Changes this core finished on the per-directory side (tests look).
    pub(super) dir_side: core::sync::atomic::AtomicU64,
}

pub(super) static CHANGES: [CachePadded<ChangeRecord>; open_files::CORES] = [const {
    CachePadded::new(ChangeRecord {
        active: core::sync::atomic::AtomicU32::new(0),
        per_dir: core::sync::atomic::AtomicU32::new(0),
        n: core::sync::atomic::AtomicU32::new(0),
        inos: [const { core::sync::atomic::AtomicU32::new(0) }; CHANGED_MAX],
        nstripes: core::sync::atomic::AtomicU32::new(0),
        stripes: [const { core::sync::atomic::AtomicU32::new(0) }; CHANGED_MAX],
        dir_side: core::sync::atomic::AtomicU64::new(0),
    })
}; open_files::CORES];

/// The calling core's change record (a context does not move between cores while it runs a
/// change, which holds its core's lock or every core's).
pub(super) fn my_changes() -> &'static ChangeRecord {
    &CHANGES[(crate::ctx::ctx().core as usize).min(open_files::CORES - 1)]
}

/// `Ext2::change_hook` (set at mount): inside a change, name `ino` once per change to
/// `names::begin` (its generation stripe counts the change as running, with a full fence:
/// before the change writes anything of it, or scans the per-core lists of open files) and
/// record it for `names::end`. On the per-directory side, first lock `ino`'s directory stripe:
/// the first one waiting (a change names its parent directory first), any later one only if
/// it is free, else `Contended` (two changes holding one stripe each and wanting the other's
/// would wait forever; the exclusive side then runs the change). Outside a change nothing.
/// `NoMemory`, before the change writes anything of `ino`, if one change would name more
/// than `CHANGED_MAX` inodes, which none of ext2's operations does.
pub(super) fn change_hook(ino: u32) -> Result<()> {
    use core::sync::atomic::Ordering::Relaxed;
    let rec = my_changes();
    if rec.active.load(Relaxed) == 0 {
        return Ok(());
    }
    let n = rec.n.load(Relaxed) as usize;
    if rec.inos.iter().take(n).any(|a| a.load(Relaxed) == ino) {
        return Ok(());
    }
    // (`hold_stripe` records stripes without inodes: both lists are bounded.)
    if n == CHANGED_MAX || rec.nstripes.load(Relaxed) as usize == CHANGED_MAX {
        return Err(FsError::NoMemory);
    }
    if rec.per_dir.load(Relaxed) != 0 {
        let s = dir_stripe(ino);
        let k = rec.nstripes.load(Relaxed) as usize;
        if !rec.stripes.iter().take(k).any(|a| a.load(Relaxed) as usize == s) {
            DIR_LOCKS.acquire(s, k).map_err(|_| FsError::Contended)?;
            rec.stripes[k].store(s as u32, Relaxed);
            rec.nstripes.store(k as u32 + 1, Relaxed);
        }
    }
    rec.inos[n].store(ino, Relaxed);
    rec.n.store(n as u32 + 1, Relaxed);
    names::begin(&[ino]);
    Ok(())
}

/// On the per-directory side, lock `ino`'s stripe for the rest of the change without naming
/// `ino` to `names` (the change reads under it but does not change it: the directory a
/// `truncate(path)` finds its file in). Waiting if it is the change's first stripe, else only
/// if free (`Contended`), as `change_hook`. Outside a per-directory change nothing.
pub(super) fn hold_stripe(ino: u32) -> Result<()> {
    use core::sync::atomic::Ordering::Relaxed;
    let rec = my_changes();
    if rec.active.load(Relaxed) == 0 || rec.per_dir.load(Relaxed) == 0 {
        return Ok(());
    }
    let s = dir_stripe(ino);
    let k = rec.nstripes.load(Relaxed) as usize;
    if rec.stripes.iter().take(k).any(|a| a.load(Relaxed) as usize == s) {
        return Ok(());
    }
    if k == CHANGED_MAX {
        return Err(FsError::NoMemory);
    }
    // The change's first stripe waits, a later one only if free (`StripeLocks::acquire`).
    DIR_LOCKS.acquire(s, k).map_err(|_| FsError::Contended)?;
    rec.stripes[k].store(s as u32, Relaxed);
    rec.nstripes.store(k as u32 + 1, Relaxed);
    Ok(())
}

/// Run `f` on the calling core's `Ext2` with its own lock only, changing nothing. What it can
/// rely on: no exclusive call runs (they need this lock too), so no directory moves or goes
/// away (mkdir, rmdir, rename, link are exclusive); other cores' per-directory changes
/// (creates, unlinks) run meanwhile, and a walk sees each directory before or after each of
/// them (`with_dir_change`: why walks need no directory lock). `Contended` when this core has
/// no `Ext2` (or nothing is mounted): the caller goes to the exclusive side.
pub(super) fn with_core<R>(f: impl FnOnce(&mut CoreFs) -> Result<R>) -> Result<R> {
    let c = crate::ctx::ctx().core as usize;
    let Some(l) = CORE_FS.get(c) else { return Err(FsError::Contended) };
    let mut g = l.lock();
    let Some(fs) = g.as_mut() else { return Err(FsError::Contended) };
    f(fs)
}
