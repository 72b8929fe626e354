//! Files (docs/fs.md): POSIX-shaped library calls over an ext2 file system on the
//! first virtio-blk disk.
//!
//! | layer | file |
//! | --- | --- |
//! | library calls: `mount`, `open` (`O_CREAT`, `O_EXCL`, `O_TRUNC`, `O_APPEND`), `openat`, `dup`, `read`, `pread`, `write`, `pwrite`, `lseek`, `close`, `fstat`, `stat`, `readdir`, `mkdir`, `rmdir`, `unlink`, `link`, `rename`, `symlink`, `readlink`, `lstat`, `truncate`, `ftruncate`, `fsync`, `sync`, `df` | this file |
//! | the locks: per-core `Ext2`s, directory stripes, the exclusive side, change records | `locks.rs` |
//! | the shared open-file table: descriptors, open file descriptions (offset), orphans; open flags | `tables.rs` |
//! | the lock-free paths: reads without the lock, the mount geometry, filling the name cache | `unlocked.rs` |
//! | ext2 (our own; also used by `cargo xtask fs`): on-disk format, reading, writing, directories | crate `ext2` (`crates/ext2`) |
//! | the lock-free path-name cache behind `stat` and read-only `open` | `names.rs` |
//! | per-core lists of open files (read-only opens of cached names; `fstat`, `close`) | `open_files.rs` |
//! | the buffer cache: `ext2::Disk` over the table (crate `bcache`, `crates/bcache`) | `cache.rs` |
//! | the block device object client: `bcache::BlockIo` | `disk.rs` |
//! | the device object | kernel `dev/blk.rs`, contract `abi/src/blk.rs` |
//!
//! **Locks** (`locks.rs`; docs/fs.md, "Create and unlink"). One mounted file system per
//! process, with one `Ext2` per core over the one buffer cache, each under its core's lock
//! (`CORE_FS`: a big-reader lock whose reader side is exclusive per core). Create, unlink of
//! a file, an `open` that makes its file, `close`, and `write`, `pwrite`,
//! `truncate`, `ftruncate`, `link`, `symlink`, `mkdir` take their core's lock and the lock
//! of the directory (and file) stripes they change (`with_dir_change`, `DIR_LOCKS`); the
//! allocation state is frozen there (reserve refills go exclusive). Everything else takes
//! every core's lock (`exclusive`). The shared open-file table has a lock of its own
//! (`TABLES`: `dup`'s descriptions, directories' descriptors), the cache's misses theirs
//! (`cache::CACHE`). Without any lock: `stat` of a cached path (`names`), an `open` of one that
//! changes nothing (any access mode), and `fstat`, `close`, `read`, `pread`, `lseek` of
//! per-core descriptors while their file is unchanged (`open_files`, `read_unlocked`:
//! docs/fs.md, "Names and descriptors").
//! Descriptors here name a per-core slot (bit 30: every regular file's) or index
//! this module's shared table (`Fd`); `fd::open` puts one in the common descriptor tables
//! (docs/fd.md).
//! A context that uses the file system on another core maps the request segment and links
//! the buffer cache there on first use (under the lock).

pub mod cache;
pub mod disk;
pub use ext2;
pub mod names;
pub mod open_files;
mod locks;
mod tables;
mod unlocked;

use alloc::vec::Vec;

use cache::{Cache, CacheStats};
use ext2::{Ext2, Inode};
pub use ext2::{DirEntry, FsError, Stat, FT_DIR, FT_REG, S_IFDIR, S_IFMT, S_IFREG};
pub use locks::dir_side_changes;
use locks::*;
pub use tables::{Fd, Result, MAX_OPEN, O_ACCMODE, O_APPEND, O_CREAT, O_EXCL, O_RDONLY, O_RDWR, O_TRUNC, O_WRONLY, SEEK_CUR, SEEK_END, SEEK_SET};
use tables::*;
pub use unlocked::unlocked_reads;
use unlocked::*;

/// Mount the ext2 file system on the first disk (a block device object and its request
/// segment in the process share). `NoDevice` without a disk or when another process holds it.
pub fn mount() -> Result<()> {
    mount_with(disk::DiskMode::Polling)
}

/// `mount`, with the disk in `mode` (`disk::DiskMode`: Polling, or Dedicated through a kernel
/// core's per-core rings). Nothing happens if a file system is mounted already.
pub fn mount_with(mode: disk::DiskMode) -> Result<()> {
    use core::sync::atomic::Ordering::{Relaxed, SeqCst};
    let mut x = exclusive();
    if x.tables.is_some() {
        return Ok(());
    }
    let dev = mode.open(crate::process::proc_share()).map_err(|e| match e {
        abi::Error::NoMemory => FsError::NoMemory,
        _ => FsError::NoDevice,
    })?;
    // On an error the cache (and with it the device object) is dropped, which frees both.
    let d = cache::install(Cache::new(dev)?);
    let mut fs = match Ext2::mount(d.clone()) {
        Ok(fs) => fs,
        Err(e) => {
            cache::uninstall();
            return Err(e);
        }
    };
    // Creates, unlinks and writes draw inodes and blocks from the reserve of the `Ext2`
    // they run on, which is the calling core's (`ext2::Reserve`; one reserve each);
    // every sync gives the reserves back to the bitmaps.
    fs.reserve_core = Some(|| 0);
    // Changes name the inodes they change (`with_change`, `with_dir_change`).
    fs.change_hook = Some(change_hook);
    // One `Ext2` per core the process has (a context on a core past them uses the exclusive
    // side only).
    let n = crate::heap::cores().clamp(1, open_files::CORES);
    for l in &CORE_FS[1..n] {
        x.cores.push(l.lock());
    }
    for g in x.cores.iter_mut().skip(1) {
        **g = Some(fs.clone_with(d.clone()));
    }
    names::NAMES.begin_change();
    // Before the mount is published: readers without the lock check `MOUNT` first.
    GEOMETRY.set(&fs.geometry());
    open_files::MOUNT.fetch_add(1, SeqCst);
    *x.cores[0] = Some(fs);
    *x.tables = Some(Tables { files: Vec::new(), descs: Vec::new(), orphans: Default::default() });
    NCORE_FS.store(n, Relaxed);
    names::NAMES.end_change();
    Ok(())
}

pub fn mounted() -> bool {
    TABLES.lock().is_some()
}

/// Write everything back, then free the device object. Open descriptors become invalid.
pub fn unmount() -> Result<()> {
    let mut x = exclusive();
    let Some(t) = x.tables.as_mut() else { return Ok(()) };
    // Open descriptors go with the mount: their orphans are freed now.
    let orphans: Vec<u32> = t.orphans.iter().copied().collect();
    let mut r = Ok(());
    let me = x.me();
    if let Some(fs) = x.cores[me].as_mut() {
        for n in orphans {
            if let Err(e) = fs.release_orphan(n) {
                r = Err(e);
            }
        }
    }
    x.broadcast(me);
    let r = r.and(x.sync());
    names::NAMES.begin_change();
    open_files::MOUNT.fetch_add(1, core::sync::atomic::Ordering::SeqCst);
    open_files::watch_reset();
    // No reader without the lock starts on this mount now; wait for those running before the
    // cache's memory goes (`cache::with_unlocked`).
    cache::drain_unlocked();
    for g in x.cores.iter_mut() {
        **g = None;
    }
    *x.tables = None;
    // The shared table's descriptions went with it (`TABLES` is held).
    TABLE_DESCS.store(0, core::sync::atomic::Ordering::SeqCst);
    NCORE_FS.store(0, core::sync::atomic::Ordering::Relaxed);
    cache::uninstall();
    names::NAMES.end_change();
    r
}

fn file<'a>(m: &'a mut Mounted<'_>, fd: Fd) -> Result<&'a mut OpenFile> {
    let d = desc_index(m, fd)?;
    m.descs.get_mut(d as usize).and_then(|f| f.as_mut()).ok_or(FsError::BadDescriptor)
}

/// The open file description `fd` names. A per-core descriptor still `OPEN` is forwarded to
/// a new description first (with its inode and offset), so every locked call works on it.
fn desc_index(m: &mut Mounted, fd: Fd) -> Result<u32> {
    desc_index_in(m.files, m.descs, fd)
}

/// Move `fd`'s offset from `from` to `to` (under the lock). `Ok(false)`: a per-core
/// descriptor's offset is not `from` any more (a read or seek without the lock moved it, or
/// it was forwarded meanwhile): the caller starts over.
fn move_offset(m: &mut Mounted, fd: Fd, from: u64, to: u64) -> Result<bool> {
    if let Some(open_files::Named::Open { .. }) = open_files::named(fd.0) {
        return Ok(open_files::advance_off(fd.0, from, to));
    }
    file(m, fd)?.off = to;
    Ok(true)
}

/// Whether any open file description names inode `ino`.
fn is_open(m: &Mounted, ino: u32) -> bool {
    m.descs.iter().flatten().any(|d| d.ino == ino) || open_files::is_open(ino)
}

/// Open `path`: `O_RDONLY`, `O_WRONLY` or `O_RDWR`, with `O_CREAT` (a new empty file, mode
/// 0644), `O_EXCL` (with `O_CREAT`: `Exists` if it is there), `O_TRUNC`, `O_APPEND`. A
/// directory opens read-only (for `fstat`); writing one is `IsDir`.
///
/// A read-only open of a regular file whose absolute path the name cache holds takes no lock:
/// the descriptor is a slot of this core's open-file list (`open_files`). A read-only open
/// under the lock puts the path in the name cache, so the next one is lock-free.
pub fn open(path: &str, flags: u32) -> Result<Fd> {
    // An open of an existing file that changes nothing (any access mode, `O_APPEND`, an
    // `O_CREAT` that finds the name): the per-core list without a lock.
    if check_open_flags(flags).is_ok() && flags & (O_EXCL | O_TRUNC) == 0 {
        let fast = |flags: u32| -> Option<Fd> {
            let (st, gen) = names::NAMES.lookup_stamp(path.as_bytes())?;
            if st.mode & S_IFMT != S_IFREG {
                return None;
            }
            let o = open_files::open(&st, gen, flags & (O_ACCMODE | O_APPEND));
            after_taken_back(&o);
            o.fd().map(Fd)
        };
        if let Some(fd) = fast(flags) {
            return Ok(fd);
        }
        // Not in the name cache (or a directory): walk it on this core's lock only. A regular
        // file whose path the name cache can hold is put there first (under the lock, once),
        // so that the next opens of it take the path above; any other existing file is
        // opened here, and a name that is not there is answered here.
        let taken_back = core::cell::Cell::new(None);
        let fill = core::cell::Cell::new(false);
        let r = with_core(|fs| match fs.resolve(path.as_bytes()) {
            Ok(first) if first.is_reg() && name_chain(fs, path.as_bytes()).is_some() => {
                fill.set(true);
                Err(FsError::Contended)
            }
            Ok(first) => open_existing(fs, path, first, flags, &taken_back),
            // Made by the `O_CREAT` path below.
            Err(FsError::NotFound) if flags & O_CREAT != 0 => Err(FsError::Contended),
            Err(e) => Err(e),
        });
        if let Some(r) = settle(r, &taken_back) {
            return r;
        }
        // Put the path in the name cache under the lock (no change runs while we hold it, so
        // the entry is true now) and try the per-core list once more. An error here (no such
        // file, ...) is left to the locked open below to report.
        if fill.get() && with(|m| fill_name(m, path)).is_ok() {
            if let Some(fd) = fast(flags) {
                return Ok(fd);
            }
        }
    }
    if flags & O_CREAT != 0 {
        // The per-directory side, for an open that makes the file: it is made and its
        // descriptor installed while its directory's stripe is locked, so an unlink of the
        // name (which needs that lock) comes after and finds the descriptor. An existing
        // file is opened by the stamp protocol of `open_existing` (not under the stripe of
        // the directory its name was found in, which for a symbolic link's target is not
        // the one locked here).
        let taken_back = core::cell::Cell::new(None);
        let r = with_dir_change(|fs| {
            check_open_flags(flags)?;
            match fs.resolve(path.as_bytes()) {
                Ok(_) if flags & O_EXCL != 0 => Err(FsError::Exists),
                Ok(first) => open_existing(fs, path, first, flags, &taken_back),
                Err(FsError::NotFound) => {
                    let ino = match fs.create(path.as_bytes(), 0o644) {
                        // Made by another core since the walk: without `O_EXCL` it is
                        // opened, on the exclusive side.
                        Err(FsError::Exists) if flags & O_EXCL == 0 => return Err(FsError::Contended),
                        r => r?,
                    };
                    // A per-core descriptor (stale stamp: this change is running), installed
                    // before the stripe is unlocked.
                    if let Some(fd) = open_files::open_held(&Ext2::<Cache>::stat_of(&ino), flags & (O_ACCMODE | O_APPEND), false) {
                        return Ok(Fd(fd));
                    }
                    let mut t = TABLES.lock();
                    let t = t.as_mut().ok_or(FsError::NoDevice)?;
                    install_fd(&mut t.files, &mut t.descs, ino.ino, flags)
                }
                Err(e) => Err(e),
            }
        });
        if let Some(r) = settle(r, &taken_back) {
            return r;
        }
    }
    let body = |m: &mut Mounted| open_in(m, path, flags);
    if flags & (O_CREAT | O_TRUNC) != 0 {
        with_change(body)
    } else {
        with(body)
    }
}

/// After a try of `open` on a per-core side: finish what `open_existing` took back, and
/// `Some(the answer)` unless the try gave up (`Contended`: the next side tries).
#[inline(always)]
fn settle(r: Result<Fd>, taken_back: &core::cell::Cell<Option<open_files::Opened>>) -> Option<Result<Fd>> {
    if let Some(o) = taken_back.take() {
        after_taken_back(&o);
    }
    match r {
        Err(FsError::Contended) => None,
        r => Some(r),
    }
}

/// Open the existing file `first` that a walk of `path` on this core's side (`with_core` or
/// `with_dir_change`) found, without `O_TRUNC`. A directory gets a descriptor of the shared
/// table (it can go only by rmdir or rename, exclusive, so not while this core's lock is
/// held). A regular file gets a per-core slot by the protocol of an open from the name
/// cache (`open_files::open`) with a stamp taken *before* a second walk: the file's stamp
/// `s` (none while a change runs on its stripe: `Contended`), then `path` walked again to the
/// same inode. An unlink of that name names the inode (`names::begin`) before it removes the
/// entry, so if the stamp is still `s` once the slot is published (`open_files::open`'s
/// re-check), no unlink of it had started when the second walk saw the name, and any later
/// one scans the lists after the slot is visible and finds it (docs/fs.md, "Is this inode
/// open anywhere?"). Anything else: `Contended` (the exclusive side opens it).
fn open_existing(fs: &mut CoreFs, path: &str, first: Inode, flags: u32, taken_back: &core::cell::Cell<Option<open_files::Opened>>) -> Result<Fd> {
    if first.is_dir() {
        if flags & O_ACCMODE != O_RDONLY || flags & O_TRUNC != 0 {
            return Err(FsError::IsDir);
        }
        let mut t = TABLES.lock();
        let t = t.as_mut().ok_or(FsError::NoDevice)?;
        return install_fd(&mut t.files, &mut t.descs, first.ino, flags);
    }
    if !first.is_reg() || flags & O_TRUNC != 0 {
        return Err(FsError::Contended);
    }
    let Some(s) = names::stamp(first.ino) else { return Err(FsError::Contended) };
    let again = fs.resolve(path.as_bytes())?;
    if again.ino != first.ino || !again.is_reg() {
        return Err(FsError::Contended);
    }
    let o = open_files::open(&Ext2::<Cache>::stat_of(&again), s, flags & (O_ACCMODE | O_APPEND));
    let fd = o.fd();
    // Looked at by the caller once this core's lock is released (`after_taken_back`).
    taken_back.set(Some(o));
    fd.map(Fd).ok_or(FsError::Contended)
}

/// After an open without the lock took its slot back (a change to the file started): if the
/// change may have made the file an orphan because of that slot, free it under the lock when
/// nothing else has it open, as a close would. Called holding no file-system lock.
fn after_taken_back(o: &open_files::Opened) {
    if let Some(ino) = o.orphan_check() {
        let _ = with(|m| release_if_orphan(m, ino));
    }
}

/// `open` with a relative `path` taken from the directory open as `dir` (an absolute path
/// ignores it). `NotDir` if `dir` is not a directory.
pub fn openat(dir: Fd, path: &str, flags: u32) -> Result<Fd> {
    let body = |m: &mut Mounted| {
        let (d, _, _) = inode_of(m, dir)?;
        if !d.is_dir() {
            return Err(FsError::NotDir);
        }
        let d = d.ino;
        m.fs.base = d;
        let r = open_in(m, path, flags);
        m.fs.base = ext2::ROOT_INO;
        r
    };
    if flags & (O_CREAT | O_TRUNC) != 0 {
        with_change(body)
    } else {
        with(body)
    }
}

fn open_in(m: &mut Mounted, path: &str, flags: u32) -> Result<Fd> {
    let ino = open_inode(m.fs, path, flags)?;
    // A regular file gets a per-core descriptor (every core's lock is held: no change can
    // remove the file before it is visible). Outside a change (no `O_CREAT`/`O_TRUNC`) it
    // takes the file's current stamp, so its reads go without the lock at once.
    if ino.is_reg() {
        let fresh = flags & (O_CREAT | O_TRUNC) == 0;
        if let Some(fd) = open_files::open_held(&Ext2::<Cache>::stat_of(&ino), flags & (O_ACCMODE | O_APPEND), fresh) {
            return Ok(Fd(fd));
        }
    }
    install_fd(m.files, m.descs, ino.ino, flags)
}

/// What `open` opens: the file `path` names, made (`O_CREAT`) or emptied (`O_TRUNC`) first.
fn open_inode(fs: &mut CoreFs, path: &str, flags: u32) -> Result<Inode> {
    check_open_flags(flags)?;
    let acc = flags & O_ACCMODE;
    let mut ino = match fs.resolve(path.as_bytes()) {
        Ok(_) if flags & O_CREAT != 0 && flags & O_EXCL != 0 => return Err(FsError::Exists),
        Ok(i) => i,
        Err(FsError::NotFound) if flags & O_CREAT != 0 => fs.create(path.as_bytes(), 0o644)?,
        Err(e) => return Err(e),
    };
    if ino.is_dir() && (acc != O_RDONLY || flags & O_TRUNC != 0) {
        return Err(FsError::IsDir);
    }
    if flags & O_TRUNC != 0 && acc != O_RDONLY && ino.size != 0 {
        fs.truncate(&mut ino, 0)?;
    }
    Ok(ino)
}

/// Close a descriptor; the open file description goes with its last descriptor, and a file
/// unlinked while open goes with its last description.
pub fn close(fd: Fd) -> Result<()> {
    use core::sync::atomic::Ordering::SeqCst;
    if open_files::close_stale(fd.0) {
        // From before an unmount: its file system is gone.
        return Err(FsError::BadDescriptor);
    }
    if open_files::is_fast(fd.0) {
        // A per-core slot: closed without the lock, unless an unlink may have made its file
        // an orphan (`open_files`: why reading ORPHAN_WATCH after the slot is freed is enough).
        if let Some(ino) = open_files::close_open(fd.0) {
            if open_files::watch(ino as u32).load(SeqCst) != 0 {
                return with(|m| release_if_orphan(m, ino as u32));
            }
            return Ok(());
        }
    }
    {
        // A descriptor of the shared table, or a forwarded per-core one: this core's lock
        // (for the orphan's release, which draws on this core's `Ext2`), then the tables'.
        // `Contended` when the closure did not run (nothing mounted here) or met a slot being
        // re-stamped: the exclusive side below then answers.
        match with_dir_change(|fs| close_in_tables(fs, fd)) {
            Err(FsError::Contended) => {}
            r => return r,
        }
    }
    // `with`, not `with_change`: freeing an orphan changes no name or cached `stat`.
    with(|m| {
        let d = if open_files::is_fast(fd.0) {
            match open_files::named(fd.0) {
                Some(open_files::Named::Forwarded(d)) => {
                    open_files::close_forwarded(fd.0);
                    d as usize
                }
                // Its fast close met the slot being re-stamped (`open_files::restamp`, under
                // the lock we now hold): it is open again.
                Some(open_files::Named::Open { .. }) => match open_files::close_open(fd.0) {
                    Some(ino) => return release_if_orphan(m, ino as u32),
                    None => return Err(FsError::BadDescriptor),
                },
                _ => return Err(FsError::BadDescriptor),
            }
        } else {
            m.files.get_mut(fd.0 as usize).and_then(|f| f.take()).ok_or(FsError::BadDescriptor)? as usize
        };
        match unref_desc(m.descs, d)? {
            Some(ino) => release_if_orphan(m, ino),
            None => Ok(()),
        }
    })
}

/// `close` of a descriptor of the shared table or of a forwarded per-core slot, on the
/// per-directory side: the tables' lock for the table, and the orphan (if its last
/// description went) released on `fs` after it. A frozen `Ext2` frees into its reserve or its
/// spill; `Contended` only for a slot that is `OPEN` again (the exclusive side closes it).
fn close_in_tables(fs: &mut CoreFs, fd: Fd) -> Result<()> {
    let orphan = {
        let mut g = TABLES.lock();
        let t = g.as_mut().ok_or(FsError::NoDevice)?;
        let d = if open_files::is_fast(fd.0) {
            // `forward` and `close_forwarded` run only under `TABLES`, which we hold.
            match open_files::named(fd.0) {
                Some(open_files::Named::Forwarded(d)) => {
                    open_files::close_forwarded(fd.0);
                    d as usize
                }
                // Being re-stamped under the exclusive side (or open again since): there.
                Some(open_files::Named::Open { .. }) => return Err(FsError::Contended),
                None => return Err(FsError::BadDescriptor),
            }
        } else {
            t.files.get_mut(fd.0 as usize).and_then(|f| f.take()).ok_or(FsError::BadDescriptor)? as usize
        };
        let Some(ino) = unref_desc(&mut t.descs, d)? else { return Ok(()) };
        if t.orphans.contains(&ino) && !(t.descs.iter().flatten().any(|d| d.ino == ino) || open_files::is_open(ino)) {
            t.orphans.remove(&ino);
            open_files::watch(ino).fetch_sub(1, core::sync::atomic::Ordering::SeqCst);
            Some(ino)
        } else {
            None
        }
    };
    match orphan {
        Some(ino) => {
            // The file's stripe first: an unlink on another core that made it an orphan holds
            // it until it has written the inode (links 0); releasing before that would free
            // an inode the unlink then writes over (or find links still 1 and leak it).
            change_hook(ino)?;
            fs.release_orphan(ino)
        }
        None => Ok(()),
    }
}

/// Free `ino` if it was unlinked while open and nothing has it open any more.
fn release_if_orphan(m: &mut Mounted, ino: u32) -> Result<()> {
    if m.orphans.contains(&ino) && !is_open(m, ino) {
        m.orphans.remove(&ino);
        open_files::watch(ino).fetch_sub(1, core::sync::atomic::Ordering::SeqCst);
        m.fs.release_orphan(ino)?;
    }
    Ok(())
}

/// A second descriptor for the same open file description (they share the offset). Under
/// the tables' lock only (no core's lock: `dup` runs no file-system operation), from any
/// core: a per-core descriptor is forwarded to a description of the shared table first
/// (`desc_index_in`), whose offset both then use.
pub fn dup(fd: Fd) -> Result<Fd> {
    if open_files::close_stale(fd.0) {
        return Err(FsError::BadDescriptor);
    }
    let mut g = TABLES.lock();
    let t = g.as_mut().ok_or(FsError::NoDevice)?;
    let d = desc_index_in(&mut t.files, &mut t.descs, fd)?;
    let slot = new_slot_in(&mut t.files)?;
    let desc = t.descs.get_mut(d as usize).and_then(|x| x.as_mut()).ok_or(FsError::BadDescriptor)?;
    desc.refs += 1;
    t.files[slot] = Some(d);
    Ok(Fd(slot as u32))
}

/// The inode, offset and open flags of what `fd` names (under the lock). A per-core
/// descriptor is used in place, not forwarded.
fn inode_of(m: &mut Mounted, fd: Fd) -> Result<(Inode, u64, u32)> {
    if let Some(open_files::Named::Open { ino, off, flags }) = open_files::named(fd.0) {
        return Ok((m.fs.inode(ino)?, off, flags));
    }
    let (ino, off, flags) = {
        let f = file(m, fd)?;
        (f.ino, f.off, f.flags)
    };
    Ok((m.fs.inode(ino)?, off, flags))
}

/// `inode_of` for `read` and `pread`: `BadDescriptor` for a descriptor opened write-only,
/// `IsDir` for a directory.
fn readable_of(m: &mut Mounted, fd: Fd) -> Result<(Inode, u64)> {
    let (ino, off, flags) = inode_of(m, fd)?;
    if flags & O_ACCMODE == O_WRONLY {
        return Err(FsError::BadDescriptor);
    }
    if ino.is_dir() {
        return Err(FsError::IsDir);
    }
    Ok((ino, off))
}

/// Read from the descriptor's offset, advancing it. 0 at the end of the file.
///
/// A per-core descriptor (a read-only open of a cached name, `open_files`) reads without the
/// lock while nothing changed since its open (`read_unlocked`); else, and on a cache miss,
/// under the lock.
pub fn read(fd: Fd, buf: &mut [u8]) -> Result<usize> {
    if open_files::is_fast(fd.0) {
        if let Some(n) = read_unlocked(fd, buf, None) {
            return Ok(n);
        }
    }
    with(|m| loop {
        let (ino, off) = readable_of(m, fd)?;
        let n = m.fs.read(&ino, off, buf)?;
        if move_offset(m, fd, off, off + n as u64)? {
            restamp_if_stale(fd, &ino);
            return Ok(n);
        }
    })
}

/// Read at `off` without moving the descriptor's offset.
pub fn pread(fd: Fd, buf: &mut [u8], off: u64) -> Result<usize> {
    if open_files::is_fast(fd.0) {
        if let Some(n) = read_unlocked(fd, buf, Some(off)) {
            return Ok(n);
        }
    }
    with(|m| {
        let (ino, _) = readable_of(m, fd)?;
        let n = m.fs.read(&ino, off, buf)?;
        restamp_if_stale(fd, &ino);
        Ok(n)
    })
}

fn writable_file(m: &mut Mounted, fd: Fd) -> Result<(Inode, u64, u32)> {
    let (ino, off, flags) = inode_of(m, fd)?;
    if flags & O_ACCMODE == O_RDONLY {
        return Err(FsError::BadDescriptor);
    }
    Ok((ino, off, flags))
}

/// Set `fd`'s offset under the lock after a `write`. A per-core descriptor's offset is
/// stored in its slot (no `forward` runs meanwhile: that needs the lock); a read without the
/// lock of the same descriptor racing the write may have its move overwritten, as with two
/// racing calls on one descriptor anywhere.
fn set_offset(m: &mut Mounted, fd: Fd, to: u64) -> Result<()> {
    if let Some(open_files::Named::Open { .. }) = open_files::named(fd.0) {
        open_files::set_off(fd.0, to);
        return Ok(());
    }
    file(m, fd)?.off = to;
    Ok(())
}

/// Write at the descriptor's offset (at the end with `O_APPEND`), advancing it. Fewer bytes
/// than asked only when the disk filled up after some were written; `NoSpace` if none were.
///
/// On the per-directory side first (`fd_dir_change`: this core's lock and the file's stripe;
/// blocks from this core's reserve, `Contended` before anything is written if it has too
/// few), else on the exclusive side.
pub fn write(fd: Fd, buf: &[u8]) -> Result<usize> {
    match fd_dir_change(fd, |fs, ino, off, flags| {
        let at = if flags & O_APPEND != 0 { ino.size } else { off };
        let n = fs.write(ino, at, buf)?;
        Ok((n, Some(at + n as u64)))
    }) {
        Err(FsError::Contended) => {}
        r => return r,
    }
    with_change(|m| {
        let (mut ino, off, flags) = writable_file(m, fd)?;
        let at = if flags & O_APPEND != 0 { ino.size } else { off };
        let n = m.fs.write(&mut ino, at, buf)?;
        set_offset(m, fd, at + n as u64)?;
        Ok(n)
    })
}

/// Write at `off` without moving the descriptor's offset (per-directory side first, as
/// `write`).
pub fn pwrite(fd: Fd, buf: &[u8], off: u64) -> Result<usize> {
    match fd_dir_change(fd, |fs, ino, _, _| fs.write(ino, off, buf).map(|n| (n, None))) {
        Err(FsError::Contended) => {}
        r => return r,
    }
    with_change(|m| {
        let (mut ino, _, _) = writable_file(m, fd)?;
        m.fs.write(&mut ino, off, buf)
    })
}

/// Set the size of an open file (shrinking frees blocks; growing leaves a hole). Per-directory
/// side first (shrinking frees into this core's reserve or its spill: never `Contended`).
pub fn ftruncate(fd: Fd, size: u64) -> Result<()> {
    match fd_dir_change(fd, |fs, ino, _, _| fs.truncate(ino, size).map(|()| ((), None))) {
        Err(FsError::Contended) => {}
        r => return r,
    }
    with_change(|m| {
        let (mut ino, _, _) = writable_file(m, fd)?;
        m.fs.truncate(&mut ino, size)
    })
}

/// `truncate` by name. Per-directory side first for an absolute path naming a regular file
/// (`truncate_dir_side`), else (and for every error, which the exclusive side then gives
/// exactly) on the exclusive side.
pub fn truncate(path: &str, size: u64) -> Result<()> {
    match with_dir_change(|fs| truncate_dir_side(fs, path, size)) {
        Err(FsError::Contended) => {}
        r => return r,
    }
    with_change(|m| {
        let mut ino = m.fs.resolve(path.as_bytes())?;
        m.fs.truncate(&mut ino, size)
    })
}

/// What `fd` names: the shared table's description index (`None` for a per-core slot still
/// `OPEN`, `open_files`), the inode, the offset and the open flags. `TABLES` is taken only for
/// a descriptor of the shared table or a forwarded slot, and only for the look-up. `Contended`
/// for a slot `named` does not know (closed, or from before an unmount): the exclusive side
/// gives the exact error.
fn fd_desc(fd: Fd) -> Result<(Option<u32>, u32, u64, u32)> {
    let d = if open_files::is_fast(fd.0) {
        match open_files::named(fd.0) {
            Some(open_files::Named::Open { ino, off, flags }) => return Ok((None, ino, off, flags)),
            Some(open_files::Named::Forwarded(d)) => Some(d),
            None => return Err(FsError::Contended),
        }
    } else {
        None
    };
    let g = TABLES.lock();
    let t = g.as_ref().ok_or(FsError::NoDevice)?;
    let d = match d {
        Some(d) => d,
        None => t.files.get(fd.0 as usize).copied().flatten().ok_or(FsError::BadDescriptor)?,
    };
    let desc = t.descs.get(d as usize).and_then(|x| x.as_ref()).ok_or(FsError::BadDescriptor)?;
    Ok((Some(d), desc.ino, desc.off, desc.flags))
}

/// `write`, `pwrite`, `ftruncate` on the per-directory side: `f` gets this core's `Ext2`, the
/// file's inode, the descriptor's offset and flags, and returns its result and the new offset
/// (if it moves). The file's stripe is taken (waiting: it is the change's first) and the inode
/// named to `names::begin` before anything is read for the change; then the descriptor is
/// looked up *again*: if it still names the same inode, the inode cannot be freed under the
/// change: an orphan is released by the close of its last descriptor either on the exclusive
/// side (a per-core slot's close: `release_if_orphan` under `with`, which waits for this
/// core's lock) or after taking the same stripe (`close_in_tables`), and an unlink frees a
/// file that is not open only with its stripe (only if free). The offset read now is the
/// one to use (two changes of one file are serialized by its stripe). A descriptor closed
/// between the two look-ups is `BadDescriptor` (the write lost the race to the close); one
/// re-opened onto another file meanwhile runs on the exclusive side. The new offset is stored
/// only if the descriptor still names the file (as `set_offset` does on the exclusive side:
/// a plain store into the slot, or the description's offset).
fn fd_dir_change<R>(fd: Fd, f: impl FnOnce(&mut CoreFs, &mut Inode, u64, u32) -> Result<(R, Option<u64>)>) -> Result<R> {
    with_dir_change(|fs| {
        let (_, ino0, _, _) = fd_desc(fd)?;
        change_hook(ino0)?;
        let (d, ino, off, flags) = fd_desc(fd)?;
        if ino != ino0 {
            return Err(FsError::Contended);
        }
        if flags & O_ACCMODE == O_RDONLY {
            return Err(FsError::BadDescriptor);
        }
        let mut inode = fs.inode(ino)?;
        if inode.is_dir() {
            return Err(FsError::Contended);
        }
        let (r, new_off) = f(fs, &mut inode, off, flags)?;
        if let Some(o) = new_off {
            match d {
                None => {
                    if matches!(open_files::named(fd.0), Some(open_files::Named::Open { ino: i, .. }) if i == ino) {
                        open_files::set_off(fd.0, o);
                    }
                }
                Some(d) => {
                    if let Some(desc) = TABLES.lock().as_mut().and_then(|t| t.descs.get_mut(d as usize)).and_then(|x| x.as_mut()) {
                        if desc.ino == ino {
                            desc.off = o;
                        }
                    }
                }
            }
        }
        Ok(r)
    })
}

/// The per-directory side's look-up of an absolute `path`'s last name with its directory's
/// stripe held (`hold_stripe`: waiting, not named to `names`), for `truncate_dir_side` and
/// `link_dir_side`: the name is looked up again under the stripe, so no unlink can free its
/// file before the caller takes the file's own stripe. Anything else (a relative path, a
/// trailing `/`, a look-up error, a parent that is not a directory) is `Contended`, before
/// anything is written: the exclusive side gives the exact result.
fn last_name_under_its_directory(fs: &mut CoreFs, path: &str) -> Result<u32> {
    let p = path.as_bytes();
    if p.first() != Some(&b'/') || p.last() == Some(&b'/') {
        return Err(FsError::Contended);
    }
    let (parent, name) = ext2::dir::split_path(p).map_err(|_| FsError::Contended)?;
    let dir = fs.resolve(parent).map_err(|_| FsError::Contended)?;
    if !dir.is_dir() {
        return Err(FsError::Contended);
    }
    hold_stripe(dir.ino)?;
    let dir = fs.inode(dir.ino)?;
    fs.lookup(&dir, name).map_err(|_| FsError::Contended)
}

/// `truncate(path)` on the per-directory side. The walk to the parent takes no lock; then the
/// parent's stripe is taken (waiting; without naming it to `names`: its entries do not
/// change) and the last name looked up again under it, so no unlink can free the file
/// between the look-up and its own stripe (`Ext2::truncate` takes that one, `Contended` if
/// another change holds it; rename and rmdir, which could move the name otherwise, are
/// exclusive). Anything but an absolute path naming a regular file (a symbolic link to
/// follow, an error to report) is `Contended`, before anything is written: the exclusive
/// side does it exactly.
fn truncate_dir_side(fs: &mut CoreFs, path: &str, size: u64) -> Result<()> {
    let n = last_name_under_its_directory(fs, path)?;
    // The file's stripe before its inode is read: a write on another core may be changing
    // its size and blocks until then.
    change_hook(n)?;
    let mut ino = fs.inode(n)?;
    if !ino.is_reg() {
        return Err(FsError::Contended);
    }
    fs.truncate(&mut ino, size)
}

/// `link(existing, new)` on the per-directory side: as `truncate_dir_side`, the directory
/// `existing` is named in is locked (waiting; not named to `names`) and the name looked up
/// again under it, so no unlink frees the target before `Ext2::link` takes its stripe (only
/// if free, like the new name's directory's: else `Contended`). `link` changes two inodes:
/// the new name's directory and the target's link count (read again under its stripe). A
/// symbolic link to follow, a directory, or any error of the look-up is `Contended`: the
/// exclusive side gives the exact result.
fn link_dir_side(fs: &mut CoreFs, existing: &str, new: &str) -> Result<()> {
    let n = last_name_under_its_directory(fs, existing)?;
    let target = fs.inode(n)?;
    if target.is_dir() || target.is_symlink() {
        return Err(FsError::Contended);
    }
    fs.link(existing.as_bytes(), new.as_bytes())
}

/// Make a directory. Per-directory side first, as a create: its parent's stripe, its inode
/// and block from this core's reserve (`Contended` on a refill), its group's `used_dirs`
/// raised later with the exclusive side held (`Ext2::pending_dirs`). Why that is safe for
/// walks without locks: the new directory's block and inode are written before the entry
/// that names it, as a create's inode.
pub fn mkdir(path: &str) -> Result<()> {
    match with_dir_change(|fs| fs.mkdir(path.as_bytes(), 0o755).map(|_| ())) {
        Err(FsError::Contended) => {}
        r => return r,
    }
    with_change(|m| m.fs.mkdir(path.as_bytes(), 0o755).map(|_| ()))
}

pub fn rmdir(path: &str) -> Result<()> {
    with_change(|m| m.fs.rmdir(path.as_bytes()))
}

/// Remove a name. A file whose last name goes while it is open here stays readable and
/// writable through its descriptors, and is freed when the last one closes (or at unmount).
pub fn unlink(path: &str) -> Result<()> {
    use core::sync::atomic::Ordering::SeqCst;
    // The per-directory side first: the parent's stripe lock (and the victim's, if free).
    match with_dir_change(|fs| {
        // As below. The per-core lists are scanned with loads only; the shared table only if
        // it holds any description (`TABLE_DESCS`), under its lock, and an orphan is recorded
        // under that lock. A close on another core either ran before the scan (not open), or
        // finds the raised watch count and frees the orphan on the exclusive side (which waits
        // for this core's lock, so for the record), or (a shared-table close, under
        // `TABLES`) finds it in `orphans`.
        let raised = core::cell::Cell::new(None);
        let orphaned = core::cell::Cell::new(false);
        let open = |ino: u32| {
            open_files::watch(ino).fetch_add(1, SeqCst);
            raised.set(Some(ino));
            let in_lists = open_files::is_open(ino);
            if !in_lists && TABLE_DESCS.load(SeqCst) == 0 {
                return false;
            }
            let mut g = TABLES.lock();
            let Some(t) = g.as_mut() else { return false };
            let o = in_lists || t.descs.iter().flatten().any(|d| d.ino == ino);
            if o {
                t.orphans.insert(ino);
                orphaned.set(true);
            }
            o
        };
        match fs.unlink_with(path.as_bytes(), &open) {
            Ok(Some(_)) => Ok(()),
            r => {
                if let Some(ino) = raised.get() {
                    if orphaned.get() {
                        if let Some(t) = TABLES.lock().as_mut() {
                            t.orphans.remove(&ino);
                        }
                    }
                    open_files::watch(ino).fetch_sub(1, SeqCst);
                }
                r.map(|_| ())
            }
        }
    }) {
        Err(FsError::Contended) => {}
        r => return r,
    }
    // The victim's inode is named (`Ext2::unlink_with` calls `changing` before `open`), so
    // `names::begin` fences before the per-core lists are scanned (`open_files`: why an
    // open without the lock then sees the change).
    with_change(|m| {
        // `open` runs only when the last name goes, with the victim: its stripe's watch count
        // is raised before the per-core lists are scanned (`open_files`: a fast close that
        // misses it freed its slot before the scan).
        let raised = core::cell::Cell::new(None);
        let descs = &m.descs;
        let open = |ino: u32| {
            open_files::watch(ino).fetch_add(1, SeqCst);
            raised.set(Some(ino));
            descs.iter().flatten().any(|d| d.ino == ino) || open_files::is_open(ino)
        };
        match m.fs.unlink_with(path.as_bytes(), &open) {
            Ok(Some(n)) => {
                // Stays raised until the orphan is freed (`release_if_orphan`).
                m.orphans.insert(n);
                Ok(())
            }
            r => {
                if let Some(ino) = raised.get() {
                    open_files::watch(ino).fetch_sub(1, SeqCst);
                }
                r.map(|_| ())
            }
        }
    })
}

/// Rename (replacing a file by a file, or an empty directory by a directory).
///
/// A file replaced while it is open stays readable and writable through its descriptors and
/// is freed at its last close (an orphan, as `unlink` of its last name makes one).
pub fn rename(old: &str, new: &str) -> Result<()> {
    use core::sync::atomic::Ordering::SeqCst;
    // Both parents, the moved inode (a directory's `..` changes) and a replaced one: named by
    // `Ext2::rename` itself (the replaced one before `open` runs on it, as in `unlink`).
    with_change(|m| {
        let raised = core::cell::Cell::new(None);
        let orphaned = core::cell::Cell::new(false);
        let descs = &m.descs;
        let open = |ino: u32| {
            open_files::watch(ino).fetch_add(1, SeqCst);
            raised.set(Some(ino));
            let o = descs.iter().flatten().any(|d| d.ino == ino) || open_files::is_open(ino);
            orphaned.set(o);
            o
        };
        let r = m.fs.rename_with(old.as_bytes(), new.as_bytes(), &open);
        match (raised.get(), orphaned.get()) {
            // The replaced file lost its last name while open: an orphan, even if a later
            // step of the rename failed (its name is gone either way). The watch count stays
            // raised until it is freed (`release_if_orphan`).
            (Some(ino), true) => {
                m.orphans.insert(ino);
            }
            (Some(ino), false) => {
                open_files::watch(ino).fetch_sub(1, SeqCst);
            }
            _ => {}
        }
        r
    })
}

/// A second name for a file.
///
/// Per-directory side first (`link_dir_side`), else exclusive.
pub fn link(existing: &str, new: &str) -> Result<()> {
    match with_dir_change(|fs| link_dir_side(fs, existing, new)) {
        Err(FsError::Contended) => {}
        r => return r,
    }
    with_change(|m| m.fs.link(existing.as_bytes(), new.as_bytes()))
}

/// Make a file's data and the metadata naming it durable. First version: the whole file
/// system is synced (in the same order as `sync`).
pub fn fsync(fd: Fd) -> Result<()> {
    with_all(|x| {
        x.run(&mut |m: &mut Mounted| inode_of(m, fd).map(|_| ()))?;
        x.sync()
    })
}

/// Move the offset; returns the new one. A negative result is `InvalidArgument`.
pub fn lseek(fd: Fd, off: i64, whence: u32) -> Result<u64> {
    let to = |base: u64| (base as i64).checked_add(off).filter(|v| *v >= 0).ok_or(FsError::InvalidArgument).map(|v| v as u64);
    if whence > SEEK_END {
        return Err(FsError::InvalidArgument);
    }
    // A per-core descriptor: without the lock, from the slot's offset and (SEEK_END) the size
    // taken at its open, while nothing changed since (`open_files::snapshot`).
    if let Some(snap) = open_files::snapshot(fd.0) {
        let base = [0, snap.off, snap.size][whence as usize];
        let new = to(base)?;
        if open_files::advance_off(fd.0, snap.off, new) {
            return Ok(new);
        }
    }
    with(|m| loop {
        let (ino, cur, _) = inode_of(m, fd)?;
        let new = to([0, cur, ino.size][whence as usize])?;
        if move_offset(m, fd, cur, new)? {
            restamp_if_stale(fd, &ino);
            return Ok(new);
        }
    })
}

pub fn fstat(fd: Fd) -> Result<Stat> {
    // A per-core descriptor answers from the `Stat` it took at open while nothing changed.
    if let Some(st) = open_files::fstat(fd.0) {
        return Ok(st);
    }
    with(|m| {
        let (ino, _, _) = inode_of(m, fd)?;
        restamp_if_stale(fd, &ino);
        Ok(Ext2::<Cache>::stat_of(&ino))
    })
}

/// `stat` of a path: from the name cache without a lock when it was looked up before and
/// nothing changed since (`names`), else a walk under the lock that fills the cache.
pub fn stat(path: &str) -> Result<Stat> {
    if let Some(st) = names::NAMES.lookup(path.as_bytes()) {
        return Ok(st);
    }
    with(|m| fill_name(m, path))
}

/// Under the lock, `f` of the inode `path` names (its last component, if a symbolic link,
/// followed with `follow`).
fn with_inode<R>(path: &str, follow: bool, mut f: impl FnMut(&mut Mounted, &Inode) -> Result<R>) -> Result<R> {
    with(|m| {
        let ino = if follow { m.fs.resolve(path.as_bytes()) } else { m.fs.resolve_nofollow(path.as_bytes()) }?;
        f(m, &ino)
    })
}

/// `stat` of a path whose last component, if a symbolic link, is not followed.
pub fn lstat(path: &str) -> Result<Stat> {
    with_inode(path, false, |_, ino| Ok(Ext2::<Cache>::stat_of(ino)))
}

/// The target of the symbolic link `path`.
pub fn readlink(path: &str) -> Result<Vec<u8>> {
    with_inode(path, false, |m, ino| m.fs.read_link(ino))
}

/// Make `path` a symbolic link to `target` (targets below 60 bytes for now).
pub fn symlink(target: &str, path: &str) -> Result<()> {
    // Per-directory side first: a new inode like a create's (from this core's reserve; a
    // slow link's block too, checked before it is written), named in one directory.
    match with_dir_change(|fs| fs.symlink(target.as_bytes(), path.as_bytes()).map(|_| ())) {
        Err(FsError::Contended) => {}
        r => return r,
    }
    with_change(|m| m.fs.symlink(target.as_bytes(), path.as_bytes()).map(|_| ()))
}

/// Change an inode's attributes (for `chmod`, `chown`, `utimensat`): its permission bits
/// (`mode`, the low 12 bits; the type stays), owner and group, modification time (seconds).
/// `follow`: a symbolic link at the end of `path` is followed (else the link itself
/// changes). On the exclusive side, as every change that the name cache's entries depend on.
pub fn set_attr(path: &str, follow: bool, mode: Option<u16>, owner: Option<(u16, u16)>, mtime: Option<u32>) -> Result<()> {
    with_change(|m| {
        let mut ino = if follow { m.fs.resolve(path.as_bytes())? } else { m.fs.resolve_nofollow(path.as_bytes())? };
        // Named to the name cache and the per-core descriptors before it changes: their
        // `Stat`s of it stop being used (`names::begin`).
        locks::change_hook(ino.ino)?;
        if let Some(p) = mode {
            ino.mode = (ino.mode & S_IFMT) | (p & 0o7777);
        }
        if let Some((u, g)) = owner {
            ino.uid = u;
            ino.gid = g;
        }
        if let Some(t) = mtime {
            ino.mtime = t;
        }
        m.fs.write_inode(&mut ino)
    })
}

/// `stat` through the walk under the lock, never the name cache (for comparison).
pub fn stat_walk(path: &str) -> Result<Stat> {
    with_inode(path, true, |_, ino| Ok(Ext2::<Cache>::stat_of(ino)))
}

/// Every entry of the directory `path`, `.` and `..` included, in on-disk order.
pub fn readdir(path: &str) -> Result<Vec<DirEntry>> {
    with_inode(path, true, |m, dir| m.fs.read_dir(dir))
}

/// Read a whole file (at most `max` bytes).
pub fn read_all(path: &str, max: usize) -> Result<Vec<u8>> {
    let fd = open(path, O_RDONLY)?;
    let mut out = Vec::new();
    let mut chunk = alloc::vec![0u8; 16384];
    let r = loop {
        match read(fd, &mut chunk) {
            Ok(0) => break Ok(()),
            Ok(n) => {
                if out.len() + n > max {
                    break Err(FsError::NoMemory);
                }
                out.extend_from_slice(&chunk[..n]);
            }
            Err(e) => break Err(e),
        }
    };
    let _ = close(fd);
    r.map(|()| out)
}

/// Space on the file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    pub block_size: u64,
    pub blocks: u64,
    pub free_blocks: u64,
    pub inodes: u64,
    pub free_inodes: u64,
}

pub fn df() -> Result<Usage> {
    with_all(|x| {
        // Every core's copy of the counts is the same (`Exclusive::broadcast`); the reserves
        // are each core's own.
        let (ri, rb) = x.reserved();
        let fs = x.cores[0].as_ref().ok_or(FsError::NoDevice)?;
        let (fb, b, fi, i) = fs.usage();
        let (ri0, rb0) = fs.reserved();
        Ok(Usage { block_size: fs.bs, blocks: b, free_blocks: fb - rb0 + rb, inodes: i, free_inodes: fi - ri0 + ri })
    })
}

/// Inodes and blocks held in the per-core reserves now (0 right after a sync).
pub fn reserved() -> Result<(u64, u64)> {
    with_all(|x| Ok(x.reserved()))
}

/// Write every dirty cache page to the disk (data first, see `sync_ordered`) and flush it.
pub fn sync() -> Result<()> {
    with_all(|x| x.sync())
}

/// Before a `cfork` whose child shares the buffer cache (`cache_sharing`) and may allocate:
/// every core's reserve goes back to the bitmaps (in the shared cache). A reserve is
/// per-process memory, so the child's copy of a non-empty one would hand out the very inodes
/// and blocks the parent hands out too (two files on one inode). The child gives its own
/// back at its end (`give_back_reserves` again) and the parent then reads the counts the
/// child left (`reload_counts`). This is exact while the two do not allocate at the same
/// time (a shell waiting for its command); two processes allocating at once still share no
/// lock (docs/fs.md, "Sharing the cache with a child").
pub fn give_back_reserves() -> Result<()> {
    with_all(|x| x.return_reserves())
}

/// After a child that shared the buffer cache ended: give back this process's reserves, then
/// take the superblock's and group descriptors' counts from the cache (the child wrote its
/// own there), and drop every cached name and `Stat` (the child may have made, changed or
/// removed any of them): the name cache's epoch moves, as at a mount.
pub fn reload_counts() -> Result<()> {
    with_all(|x| {
        x.return_reserves()?;
        let me = x.me();
        let dev = x.cores[me].as_ref().ok_or(FsError::NoDevice)?.dev.clone();
        let fresh = Ext2::mount(dev)?;
        names::NAMES.begin_change();
        for fs in x.cores.iter_mut().filter_map(|g| g.as_mut()) {
            fs.copy_counts_from(&fresh);
        }
        names::NAMES.end_change();
        Ok(())
    })
}

/// The cache's counters and the device's (requests and bytes each way).
pub fn cache_stats() -> Result<(CacheStats, abi::DeviceStat)> {
    with_all(|_| {
        cache::with_cache(|c| {
            let st = crate::sys::device_stat(c.dev.dev).map_err(|_| FsError::Io)?;
            Ok((c.stats(), st))
        })
    })
}

/// The ids to list in `cfork::CforkOpts` (share, request segment, range) so that the child
/// uses this process's buffer cache instead of a copy of it (`cache::Cache`: what the child
/// may and may not do with it). `NoDevice` if nothing is mounted.
pub fn cache_sharing() -> Result<cache::CacheSharing> {
    with_all(|_| cache::with_cache(|c| Ok(c.sharing())))
}

/// Drop every clean page of the buffer cache (tests: the next reads go to the disk).
pub fn cache_drop_clean() -> Result<()> {
    with_all(|_| cache::with_cache(|c| c.drop_clean()))
}
