//! The buffer cache: the middle of the file system's stack (docs/architecture.md, "Storage").
//! Above, ext2 reads and writes device bytes through `ext2::Disk`, which `Cache` and
//! `CoreDisk` implement here; below, the table (crate `bcache`) reads and writes whole pages
//! through `bcache::BlockIo`, which the block device implements (`disk.rs`). A read goes down
//! once: ext2 -> this module -> the table -> the block device, and nothing below calls up.
//! This module and `disk` hold the file system's only `unsafe`: the cache's table is reached
//! through its mapping at `CACHE_VA`.
//!
//! **The cache lives in an address range** (Corey §5, §7: the library OS keeps the buffer
//! cache, in memory it maps). `Cache::new` makes a segment holding a `bcache::Table`, maps it
//! in an address range of its own (`ArKind::Span1G`) and links that range at `CACHE_VA` into
//! each core's root range on first use, as the request segment is mapped at `BLK_VA`. Every
//! thread of the process uses the one table. **Private by default:** `cfork` copies the range
//! (copy-on-write) like any other, so a child gets a snapshot it cannot write back (it cannot
//! name the device object). **Shared where asked:** a caller that lists `Cache::sharing()`'s
//! share, request segment and range in `CforkOpts` gives the child the very same table: the
//! child's file-system calls then hit the pages its parent cached (and dirtied) without reading
//! the disk, and both sides' misses and write-backs are serialised by the table's fill lock,
//! which lives in the shared memory. What stays per process is the file system above the cache
//! (the superblock's and group descriptors' counts, the per-core reserves, open files, the
//! name cache): a child that shares the cache may read anything and overwrite file data in
//! place, and allocates (create, extend, mkdir...) only through the hand-over of
//! `fs::give_back_reserves` and `fs::reload_counts` (docs/fs.md, "Sharing the cache with a
//! child that allocates").

use abi::{ArKind, Error, ObjName, ObjectId, SegMapping, BLK_SECTOR, MAP_READ, MAP_WRITE, MEMID_SELF};
use bcache::{IoError, Table};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use ext2::{Disk, FsError};
use percore::borrow::BorrowSlots;
use percore::pad::CachePadded;

use super::disk::{map_in_root, BlockDevice};

/// Where the buffer cache's address range is linked (1 GiB aligned).
pub const CACHE_VA: u64 = 0x3A00_0000_0000;
/// Bytes of one cache page.
pub const PAGE: u64 = bcache::PAGE as u64;
/// Cache pages by default (16 MiB of pages).
pub const CACHE_PAGES: usize = 4096;

fn io(e: Error) -> FsError {
    match e {
        Error::NoMemory => FsError::NoMemory,
        _ => FsError::Io,
    }
}

fn fs_err(e: IoError) -> FsError {
    match e {
        IoError::Io => FsError::Io,
        IoError::NoMemory => FsError::NoMemory,
    }
}

/// What the cache counted (summed over cores and over every process sharing the table).
#[derive(Clone, Copy, Debug, Default)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub writebacks: u64,
    /// Pages holding a block now.
    pub pages: u64,
    /// Pages read from the disk (misses that were not whole-page writes).
    pub disk_reads: u64,
    /// Clean pages dropped to make room.
    pub evictions: u64,
}

/// The ids a `cfork` caller lists in `CforkOpts` to give the child this cache: `share` in
/// `shares` (it holds the device object, the request segment and the range), `request_seg` in
/// `segments`, `range` in `ranges`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheSharing {
    pub share: ObjectId,
    pub request_seg: ObjectId,
    pub range: ObjectId,
}

/// One cache per process at a time (it has one address, `CACHE_VA`).
static CACHE_IN_USE: AtomicBool = AtomicBool::new(false);

/// For each core, the root range in which the current cache is linked at `CACHE_VA` (0: not
/// linked, or no cache). Written under the file system's lock (`Cache::link_here`, and
/// cleared by `Cache::drop`); read by readers without the lock (`with_unlocked`).
static LINKED: [CachePadded<AtomicU64>; 64] = [const { CachePadded::new(AtomicU64::new(0)) }; 64];

/// Readers of the cache without the file system's lock: each holds a borrow slot of its core
/// (`percore::borrow`) naming the cache for the whole read, so that `drain_unlocked` (at
/// unmount, before the cache's memory goes) can wait for them.
static READERS: BorrowSlots<64> = BorrowSlots::new();

/// What a reader's borrow slot names: the cache (there is one per process).
fn cache_mark() -> *mut () {
    CACHE_VA as usize as *mut ()
}

/// Run `f` on the buffer cache's table without the file system's lock, for a descriptor
/// opened on mount `mount`, as the mount counter `current` counts them (`open_files::MOUNT`,
/// passed down by the caller: the cache does not reach up into the descriptors). `None` (take
/// the lock) when that mount is gone, when the cache is not linked in this context's root
/// range yet, or when `f` says so.
///
/// Why the table's memory stays mapped while `f` runs: the reader publishes its borrow slot
/// (a store and a full fence) *then* checks that `current` is still `mount`; an
/// unmount raises `MOUNT` (a `SeqCst` increment) *then* waits until no slot names the cache
/// (`drain_unlocked`) before it drops the cache, so either the reader sees the new mount and
/// leaves, or the unmount sees the slot and waits (percore::borrow's Dekker argument). The
/// link record (`LINKED`) is written under the lock before the mount is published, and
/// cleared only when the cache is dropped, after the drain.
pub(super) fn with_unlocked<R>(mount: u64, current: &AtomicU64, f: impl FnOnce(&Table, usize) -> Option<R>) -> Option<R> {
    let ctx = crate::ctx::ctx();
    let c = ctx.core as usize;
    let root = ctx.root_ar.object;
    let slot = READERS.publish(c, cache_mark())?;
    let r = if current.load(Ordering::SeqCst) == mount && LINKED.get(c).is_some_and(|l| l.load(Ordering::Acquire) == root) {
        // SAFETY: the current mount's cache table is mapped at CACHE_VA in this context's
        // root range (LINKED), and stays mapped until our borrow ends (see above); `attach`
        // checks the table's magic before using it.
        unsafe { Table::attach(CACHE_VA as usize) }.and_then(|t| f(&t, c))
    } else {
        None
    };
    READERS.release(c, slot);
    r
}

/// At unmount, after `open_files::MOUNT` was raised: wait until no reader without the lock
/// uses the cache (`with_unlocked`). Readers are short (copies from cached pages), and none
/// starts now.
pub(super) fn drain_unlocked() {
    core::sync::atomic::fence(Ordering::SeqCst);
    while READERS.held(64, cache_mark()) {
        core::hint::spin_loop();
    }
}

/// Copy device bytes `[off, off + buf.len())` from the table's cached pages without a lock;
/// `false` as soon as one page is not cached (or a writer is in it).
pub(super) fn try_copy(t: &Table, core: usize, off: u64, buf: &mut [u8]) -> bool {
    pieces(off, buf.len()).all(|(p, at, r)| t.try_read(core, p, at, &mut buf[r]))
}

/// Device bytes `[off, off + len)` cut at cache-page boundaries: for each piece its page,
/// its offset in that page, and its range in the caller's buffer.
fn pieces(off: u64, len: usize) -> impl Iterator<Item = (u64, usize, core::ops::Range<usize>)> {
    let mut done = 0usize;
    core::iter::from_fn(move || {
        if done >= len {
            return None;
        }
        let pos = off + done as u64;
        let (p, at) = (pos / PAGE, (pos % PAGE) as usize);
        let r = done..done + (len - done).min(PAGE as usize - at);
        done = r.end;
        Some((p, at, r))
    })
}

/// The buffer cache: a `bcache::Table` of 4 KiB pages of the disk in a segment mapped through
/// an address range at `CACHE_VA`, write-back (dirty pages go to the disk at `sync`, in order,
/// or when no clean page is left to evict), clock eviction of clean pages.
pub struct Cache {
    pub dev: BlockDevice,
    table: Table,
    seg: ObjName,
    range: ObjName,
    /// For each core, the root range in which this core linked `range`, or 0 (as
    /// `BlockDevice::mapped`).
    linked: [u64; 64],
}

impl Cache {
    /// A cache of `CACHE_PAGES` pages in front of `dev`. `NoDevice` while this process has
    /// another cache; `NoMemory` if the segment or range cannot be made. On an error `dev` is
    /// dropped (freeing the device object).
    pub fn new(dev: BlockDevice) -> Result<Cache, FsError> {
        Cache::with_pages(dev, CACHE_PAGES)
    }

    /// A cache of `pages` pages (tests use small ones to make eviction happen).
    pub fn with_pages(dev: BlockDevice, pages: usize) -> Result<Cache, FsError> {
        if pages == 0 || pages > bcache::MAX_SLOTS || bcache::table_bytes(pages) as u64 > (1 << 30) {
            return Err(FsError::InvalidArgument);
        }
        if CACHE_IN_USE.swap(true, Ordering::Acquire) {
            return Err(FsError::NoDevice);
        }
        let share = crate::process::proc_share();
        let bytes = bcache::table_bytes(pages) as u64;
        let made = (|| -> Result<(ObjName, ObjName), Error> {
            let seg = ObjName::new(share, crate::sys::segment_alloc(share, "bcache", MEMID_SELF, bytes)?);
            let range = match crate::sys::ar_alloc(share, "bcache", MEMID_SELF, ArKind::Span1G) {
                Ok(r) => ObjName::new(share, r),
                Err(e) => {
                    let _ = crate::sys::share_delobj(seg);
                    return Err(e);
                }
            };
            if let Err(e) = crate::sys::ar_set_seg(range, &SegMapping { voff: 0, seg, soff: 0, len: bytes, flags: MAP_READ | MAP_WRITE }) {
                let _ = crate::sys::share_delobj(range);
                let _ = crate::sys::share_delobj(seg);
                return Err(e);
            }
            Ok((seg, range))
        })();
        let (seg, range) = match made {
            Ok(x) => x,
            Err(e) => {
                CACHE_IN_USE.store(false, Ordering::Release);
                return Err(io(e));
            }
        };
        // A placeholder table until the memory is linked here; `Drop` undoes everything.
        let mut c = Cache { dev, table: Table::placeholder(), seg, range, linked: [0; 64] };
        c.link_here().map_err(io)?;
        // SAFETY: the segment (bytes >= table_bytes(pages), zeroed, page aligned) is mapped
        // read-write at CACHE_VA on this core (`link_here`), and is new: nobody else uses it.
        c.table = unsafe { Table::init(CACHE_VA as usize, bytes as usize, pages) }.ok_or(FsError::NoMemory)?;
        Ok(c)
    }

    /// Link the cache's range into this core's root range if it is not yet.
    fn link_here(&mut self) -> Result<(), Error> {
        let c = crate::ctx::ctx().core;
        if c >= 64 {
            return Err(Error::NoSuchCore);
        }
        let root = crate::ctx::ctx().root_ar;
        if self.linked[c as usize] != root.object {
            let range = self.range;
            map_in_root(root, CACHE_VA, 1 << 30, range, || crate::sys::ar_set_ar(root, CACHE_VA, range))?;
            self.linked[c as usize] = root.object;
            LINKED[c as usize].store(root.object, Ordering::Release);
        }
        Ok(())
    }

    /// What a `cfork` caller lists to share this cache with the child (see `CacheSharing`).
    pub fn sharing(&self) -> CacheSharing {
        CacheSharing { share: self.range.share, request_seg: self.dev.seg.object, range: self.range.object }
    }

    fn disk_bytes(&self) -> u64 {
        self.dev.capacity * BLK_SECTOR
    }

    fn ready(&mut self) -> Result<usize, FsError> {
        self.link_here().map_err(io)?;
        Ok(crate::ctx::ctx().core as usize)
    }

    /// Write every dirty page back in order (the data pages, a flush, the others, a flush).
    pub fn sync(&mut self) -> Result<(), FsError> {
        let core = self.ready()?;
        let t = self.table;
        t.sync(core, &mut self.dev).map_err(fs_err)
    }

    /// Write the dirty pages covering bytes `[off, off + len)` (no flush).
    pub fn sync_range(&mut self, off: u64, len: u64) -> Result<(), FsError> {
        let core = self.ready()?;
        let t = self.table;
        t.sync_pages(core, &mut self.dev, off / PAGE, (off + len).div_ceil(PAGE)).map_err(fs_err)
    }

    /// Ask the disk to make the writes so far durable.
    pub fn flush(&mut self) -> Result<(), FsError> {
        self.dev.flush().map_err(io)
    }

    pub fn dirty_pages(&mut self) -> usize {
        if self.ready().is_err() {
            return 0;
        }
        self.table.dirty_pages()
    }

    /// Drop every clean page (tests: the next reads go to the disk).
    pub fn drop_clean(&mut self) -> Result<(), FsError> {
        self.ready()?;
        self.table.drop_clean();
        Ok(())
    }

    pub fn stats(&mut self) -> CacheStats {
        if self.ready().is_err() {
            return CacheStats::default();
        }
        let s = self.table.stats();
        CacheStats { hits: s.hits, misses: s.misses, writebacks: s.writebacks, pages: self.table.cached_pages() as u64, disk_reads: s.disk_reads, evictions: s.evictions }
    }

    fn check(&self, off: u64, len: usize) -> Result<(), FsError> {
        if off.checked_add(len as u64).is_none_or(|e| e > self.disk_bytes()) {
            return Err(FsError::Io);
        }
        Ok(())
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        // Only this core's link can be removed from here; another core's stays in its root
        // range (holding the range) until that context ends or a later mount replaces it.
        let c = crate::ctx::ctx().core.min(63) as usize;
        if self.linked[c] != 0 && self.linked[c] == crate::ctx::ctx().root_ar.object {
            let _ = crate::sys::ar_unmap(crate::ctx::ctx().root_ar, CACHE_VA, 1 << 30);
        }
        // No reader without the lock is left (`drain_unlocked` ran at unmount; a cache that
        // fails to mount was never published), and none may find a link from now on.
        for l in &LINKED {
            l.store(0, Ordering::Release);
        }
        let _ = crate::sys::share_delobj(self.range);
        let _ = crate::sys::share_delobj(self.seg);
        CACHE_IN_USE.store(false, Ordering::Release);
    }
}

impl Disk for Cache {
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<(), FsError> {
        self.check(off, buf.len())?;
        let core = self.ready()?;
        let t = self.table;
        for (p, at, r) in pieces(off, buf.len()) {
            let dst = &mut buf[r];
            if !t.try_read(core, p, at, dst) {
                t.read(core, &mut self.dev, p, at, dst).map_err(fs_err)?;
            }
        }
        Ok(())
    }

    fn write_at(&mut self, off: u64, buf: &[u8]) -> Result<(), FsError> {
        self.write_inner(off, buf, false)
    }

    fn note_data(&mut self, off: u64) {
        if self.ready().is_ok() {
            self.table.note_data(off / PAGE);
        }
    }

    fn size(&self) -> u64 {
        self.disk_bytes()
    }
}

impl Cache {
    fn write_inner(&mut self, off: u64, buf: &[u8], is_data: bool) -> Result<(), FsError> {
        self.check(off, buf.len())?;
        let core = self.ready()?;
        let t = self.table;
        for (p, at, r) in pieces(off, buf.len()) {
            t.write(core, &mut self.dev, p, at, &buf[r], is_data).map_err(fs_err)?;
        }
        Ok(())
    }
}

/// The process's buffer cache (`Cache`: its device and its per-core links), under a lock of
/// its own that only misses, write-backs, `sync` and the cache's bookkeeping take: hits and
/// writes to cached pages go through a `CoreDisk` without it.
static CACHE: crate::thread::Mutex<Option<Cache>> = crate::thread::Mutex::new(None);

/// Run `f` on the mounted cache (`NoDevice` when there is none).
pub(super) fn with_cache<R>(f: impl FnOnce(&mut Cache) -> Result<R, FsError>) -> Result<R, FsError> {
    let mut g = CACHE.lock();
    f(g.as_mut().ok_or(FsError::NoDevice)?)
}

/// Install `c` as the process's cache (mount) and return a handle on it.
pub(super) fn install(c: Cache) -> CoreDisk {
    let d = CoreDisk { table: c.table, bytes: c.disk_bytes() };
    *CACHE.lock() = Some(c);
    d
}

/// Drop the process's cache (unmount; nothing may use a `CoreDisk` after).
pub(super) fn uninstall() {
    let c = CACHE.lock().take();
    drop(c);
}

/// The buffer cache as one core's `Disk` (the library OS keeps an `Ext2` per core over one of
/// these; `fs`, "Locks"): a read of cached pages and a write into cached pages go straight to
/// the shared table (`Table::try_read`/`try_write`: a seqlock window, the slot's own lock for
/// a write), with no lock of the file system's; anything else (a miss, this core not linked to
/// the cache yet) goes through `Cache` under `CACHE`'s lock, where the fill lock and the
/// device are. A range the fast path wrote part of is written again whole by the slow one
/// (the same bytes: harmless).
#[derive(Clone)]
pub struct CoreDisk {
    table: Table,
    bytes: u64,
}

impl CoreDisk {
    /// This core, if the cache is linked in this context's root range.
    fn here(&self) -> Option<usize> {
        let ctx = crate::ctx::ctx();
        let c = ctx.core as usize;
        LINKED.get(c).filter(|l| l.load(Ordering::Acquire) == ctx.root_ar.object).map(|_| c)
    }

    fn check(&self, off: u64, len: usize) -> Result<(), FsError> {
        if off.checked_add(len as u64).is_none_or(|e| e > self.bytes) {
            return Err(FsError::Io);
        }
        Ok(())
    }
}

impl Disk for CoreDisk {
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<(), FsError> {
        self.check(off, buf.len())?;
        if let Some(core) = self.here() {
            if try_copy(&self.table, core, off, buf) {
                return Ok(());
            }
        }
        with_cache(|c| c.read_at(off, buf))
    }

    fn write_at(&mut self, off: u64, buf: &[u8]) -> Result<(), FsError> {
        self.check(off, buf.len())?;
        if let Some(core) = self.here() {
            let t = self.table;
            let mut done = 0usize;
            for (p, at, r) in pieces(off, buf.len()) {
                if !t.try_write(core, p, at, &buf[r.clone()], false) {
                    break;
                }
                done = r.end;
            }
            if done == buf.len() {
                return Ok(());
            }
            // The pieces written already hold their bytes: the cache writes only the rest.
            return with_cache(|c| c.write_at(off + done as u64, &buf[done..]));
        }
        with_cache(|c| c.write_at(off, buf))
    }

    /// The name cache's stamp of the directory (the mount epoch and its inode's generation
    /// stripe, `names::stamp`): every change to a directory's entries names the directory
    /// first (`fs::change_hook`), and a change it cannot name moves the epoch, as for the
    /// name cache's entries. So an ext2 directory index made at this stamp stays right while
    /// the stamp is unchanged (docs/fs.md, "Directory indexes").
    fn dir_stamp(&self, dir: u32) -> Option<[u64; 2]> {
        // The loads before (an index's scan) are ordered before the stamp's loads.
        core::sync::atomic::fence(Ordering::Acquire);
        super::names::stamp(dir).map(|s| [s.epoch, s.gen])
    }

    fn note_data(&mut self, off: u64) {
        if self.here().is_some() {
            self.table.note_data(off / PAGE);
        } else {
            let _ = with_cache(|c| {
                c.note_data(off);
                Ok(())
            });
        }
    }

    fn size(&self) -> u64 {
        self.bytes
    }
}
