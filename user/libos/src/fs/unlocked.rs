//! The file system's lock-free paths: reads of per-core descriptors without the lock
//! (`read_unlocked`: the name cache's generation checked after the copy), the mount geometry
//! those reads need, re-stamping a descriptor after a locked read, and filling the name
//! cache (`fill_name`) so that `stat` and read-only `open` of a path go without the lock next
//! time. docs/fs.md, "Reads without the lock" and "Names and descriptors".

use super::cache::{self, Cache};
use super::ext2::{self, Ext2, Inode, Stat};
use super::locks::{CoreFs, Mounted};
use super::names;
use super::open_files;
use super::tables::{Fd, Result, O_ACCMODE, O_WRONLY};

/// The inodes the walk of the absolute `path` goes through, the root first and the file last,
/// for the name cache (`names::insert`). None (do not cache) for a relative path, a `.` or
/// `..` component, a symbolic link anywhere on the way (its target's directories would not be
/// on the chain), a chain longer than `names::CHAIN`, or any error.
pub(super) fn name_chain(fs: &mut CoreFs, path: &[u8]) -> Option<([u32; names::CHAIN], usize)> {
    if path.first() != Some(&b'/') {
        return None;
    }
    let mut chain = [ext2::ROOT_INO; names::CHAIN];
    let mut n = 1;
    let mut dir = fs.inode(ext2::ROOT_INO).ok()?;
    for comp in path.split(|b| *b == b'/').filter(|c| !c.is_empty()) {
        if comp == b"." || comp == b".." || !dir.is_dir() || n == names::CHAIN {
            return None;
        }
        let i = fs.lookup(&dir, comp).ok()?;
        let ino = fs.inode(i).ok()?;
        if ino.is_symlink() {
            return None;
        }
        chain[n] = i;
        n += 1;
        dir = ino;
    }
    Some((chain, n))
}

/// Under the lock, no change running: resolve `path` and put it in the name cache (when
/// `name_chain` allows).
pub(super) fn fill_name(m: &mut Mounted, path: &str) -> Result<Stat> {
    let ino = m.fs.resolve(path.as_bytes())?;
    let st = Ext2::<Cache>::stat_of(&ino);
    if let Some((chain, n)) = name_chain(m.fs, path.as_bytes()) {
        names::NAMES.insert(path.as_bytes(), &chain[..n], &st);
    }
    Ok(st)
}

/// Under the lock, after a locked read of a per-core descriptor: if it read under the lock
/// because a change made its generation stale, make it current (`open_files::restamp`), so
/// that its next reads go without the lock again.
pub(super) fn restamp_if_stale(fd: Fd, ino: &Inode) {
    if open_files::is_fast(fd.0) && open_files::stale(fd.0) {
        open_files::restamp(fd.0, &Ext2::<Cache>::stat_of(ino));
    }
}

/// The mounted file system's `Geometry` (where inodes lie; fixed while mounted), for readers
/// without the lock: written under the lock at mount, before `open_files::MOUNT` publishes
/// the mount; read only by a reader that saw that `MOUNT` (acquire) and holds a borrow that
/// keeps the unmount waiting (`cache::with_unlocked`), so never torn by a later mount.
pub(super) struct SharedGeometry {
    pub(super) words: [core::sync::atomic::AtomicU64; 8],
    pub(super) tables: [core::sync::atomic::AtomicU32; ext2::GEOMETRY_GROUPS],
}

pub(super) static GEOMETRY: SharedGeometry = SharedGeometry { words: [const { core::sync::atomic::AtomicU64::new(0) }; 8], tables: [const { core::sync::atomic::AtomicU32::new(0) }; ext2::GEOMETRY_GROUPS] };

impl SharedGeometry {
    pub(super) fn set(&self, g: &ext2::Geometry) {
        use core::sync::atomic::Ordering::Relaxed;
        let w = [g.bs, g.blocks_count, g.first_data_block, g.inodes_count as u64, g.inodes_per_group as u64, g.inode_size, g.dev_bytes, g.groups as u64];
        for (a, v) in self.words.iter().zip(w) {
            a.store(v, Relaxed);
        }
        for (a, v) in self.tables.iter().zip(g.inode_tables) {
            a.store(v, Relaxed);
        }
    }

    pub(super) fn get(&self) -> ext2::Geometry {
        use core::sync::atomic::Ordering::Relaxed;
        let w = |i: usize| self.words[i].load(Relaxed);
        let mut inode_tables = [0u32; ext2::GEOMETRY_GROUPS];
        for (t, a) in inode_tables.iter_mut().zip(&self.tables) {
            *t = a.load(Relaxed);
        }
        ext2::Geometry { bs: w(0), blocks_count: w(1), first_data_block: w(2), inodes_count: w(3) as u32, inodes_per_group: w(4) as u32, inode_size: w(5), dev_bytes: w(6), groups: w(7) as u32, inode_tables }
    }
}

/// `read` (`at` None: from the offset, advancing it) or `pread` (`at`) of a per-core
/// descriptor without the file system's lock. None: use the locked path (the descriptor was
/// forwarded or closed, a change started since its open, a page was not cached or a writer
/// was in it, the offset moved under us, or anything looked wrong).
///
/// Why what it returns is what a locked read would have returned at one moment (docs/fs.md,
/// "Reads without the lock"): the slot's generation `g` is the name cache's generation at
/// which the file's `Stat` was true, and every change to the file system (write, truncate,
/// unlink, rename, ... and mount/unmount) makes the generation odd, with a full fence,
/// *before* it writes a byte of the cache. The inode, its indirect pointers and the data
/// are each copied by a buffer-cache hit (a seqlock window and the page's tag: never torn,
/// never another block's page); after the last copy, an acquire fence and the generation is
/// still `g`: so no change had started when the last byte was copied, and every byte copied
/// is the state of generation `g`, which is what the locked read would have seen then. A
/// garbage copy (a failed window) is never looked at: the locked path overwrites `buf`.
pub(super) fn read_unlocked(fd: Fd, buf: &mut [u8], at: Option<u64>) -> Option<usize> {
    let n = read_unlocked_inner(fd, buf, at)?;
    let c = (crate::ctx::ctx().core as usize).min(63);
    // Only this core writes its counter: a load and a store on its own line.
    UNLOCKED_READS[c].store(UNLOCKED_READS[c].load(core::sync::atomic::Ordering::Relaxed) + 1, core::sync::atomic::Ordering::Relaxed);
    Some(n)
}

/// Reads and `pread`s done without the lock, per core (tests and benchmarks look).
pub(super) static UNLOCKED_READS: [percore::pad::CachePadded<core::sync::atomic::AtomicU64>; 64] = [const { percore::pad::CachePadded::new(core::sync::atomic::AtomicU64::new(0)) }; 64];

/// How many reads core `c` did without the file system's lock.
pub fn unlocked_reads(c: usize) -> u64 {
    UNLOCKED_READS[c.min(63)].load(core::sync::atomic::Ordering::Relaxed)
}

pub(super) fn read_unlocked_inner(fd: Fd, buf: &mut [u8], at: Option<u64>) -> Option<usize> {
    let snap = open_files::snapshot(fd.0)?;
    if snap.flags & O_ACCMODE == O_WRONLY {
        // The locked path says `BadDescriptor`.
        return None;
    }
    let off = at.unwrap_or(snap.off);
    let n = cache::with_unlocked(snap.mount, &super::open_files::MOUNT, |t, core| {
        let geo = GEOMETRY.get();
        let (n, _) = ext2::read_unlocked(&geo, snap.ino, off, buf, &mut |o, b| cache::try_copy(t, core, o, b))?;
        open_files::unchanged(snap.ino, snap.gen).then_some(n)
    })?;
    if at.is_none() && !open_files::advance_off(fd.0, off, off + n as u64) {
        return None;
    }
    Some(n)
}
