//! The file system's shared open-file table (under its own lock, `TABLES`): descriptors
//! that index it, the open file descriptions they name (inode, offset, flags: the one offset
//! of a file opened outside the per-core lists, shared by every `dup`), and files unlinked
//! while open. Also the open flags and the descriptor type every call takes. The per-core
//! lists (`open_files.rs`) hold the other descriptions; `desc_index_in` moves one from a
//! per-core slot into this table when a `dup` needs it shared.

use alloc::vec::Vec;

use super::ext2::FsError;
use super::open_files;
use percore::mcs::McsLock as Mutex;

pub type Result<T> = core::result::Result<T, FsError>;

/// Open flags (Linux's values).
pub const O_RDONLY: u32 = 0;
pub const O_WRONLY: u32 = 1;
pub const O_RDWR: u32 = 2;
pub const O_ACCMODE: u32 = 3;
pub const O_CREAT: u32 = 0x40;
pub const O_EXCL: u32 = 0x80;
pub const O_TRUNC: u32 = 0x200;
pub const O_APPEND: u32 = 0x400;

/// `lseek` origins.
pub const SEEK_SET: u32 = 0;
pub const SEEK_CUR: u32 = 1;
pub const SEEK_END: u32 = 2;

/// Most files open at once in one process.
pub const MAX_OPEN: usize = 256;

/// A descriptor of this module's open-file table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fd(pub u32);

/// An open file description: what `open` made, shared by the descriptors `dup` makes.
pub(super) struct OpenFile {
    pub(super) ino: u32,
    pub(super) off: u64,
    pub(super) flags: u32,
    /// Descriptors naming it.
    pub(super) refs: u32,
}

/// The open-file tables (descriptors, descriptions, orphans), under `TABLES`.
pub(super) struct Tables {
    /// Descriptor -> open file description (index into `descs`).
    pub(super) files: Vec<Option<u32>>,
    pub(super) descs: Vec<Option<OpenFile>>,
    /// Files unlinked while open: freed when their last descriptor closes (or at unmount).
    pub(super) orphans: alloc::collections::BTreeSet<u32>,
}

/// The open-file tables: taken last, after a core's lock or all of them; its holders run no
/// file-system operation under it (a scan or an update of the tables).
// On its own line: `dup` and `close` of a shared descriptor take this lock, and whatever the
// linker puts next to it (the context arena every call reads, the core count) must not share
// the line (the POSIX commutativity check names the shared line when it does).
pub(super) static TABLES: percore::pad::CachePadded<Mutex<Option<Tables>>> = percore::pad::CachePadded::new(Mutex::new(None));

/// `desc_index` on the tables alone (their lock held, no core's lock needed: a `forward`
/// races only with what holds `TABLES` too, or with calls without a lock that the slot's
/// compare-and-swaps order: see `open_files::forward`).
pub(super) fn desc_index_in(files: &mut Vec<Option<u32>>, descs: &mut Vec<Option<OpenFile>>, fd: Fd) -> Result<u32> {
    if !open_files::is_fast(fd.0) {
        return files.get(fd.0 as usize).copied().flatten().ok_or(FsError::BadDescriptor);
    }
    match open_files::named(fd.0).ok_or(FsError::BadDescriptor)? {
        open_files::Named::Forwarded(d) => Ok(d),
        open_files::Named::Open { ino, flags, .. } => {
            // The description is counted (`TABLE_DESCS`) before the slot stops being `OPEN`,
            // so an unlink's scan sees one or the other.
            let d = new_desc_in(descs, OpenFile { ino, off: 0, flags, refs: 1 });
            match (open_files::forward(fd.0, d as u32), descs[d].as_mut()) {
                (Some(off), Some(desc)) => {
                    // The offset as `forward` froze it (a read without the lock may have
                    // moved it since `named`).
                    desc.off = off;
                    Ok(d as u32)
                }
                _ => {
                    // Closed on its core meanwhile.
                    drop_desc(descs, d);
                    Err(FsError::BadDescriptor)
                }
            }
        }
    }
}

pub(super) fn new_desc_in(descs: &mut Vec<Option<OpenFile>>, desc: OpenFile) -> usize {
    TABLE_DESCS.fetch_add(1, core::sync::atomic::Ordering::SeqCst);
    match descs.iter().position(|d| d.is_none()) {
        Some(i) => {
            descs[i] = Some(desc);
            i
        }
        None => {
            descs.push(Some(desc));
            descs.len() - 1
        }
    }
}

/// Live open file descriptions in the shared table (`Tables::descs`), changed only under
/// `TABLES`: an `unlink` on the per-directory side looks at the shared table (under its
/// lock) only when this is not 0, so with every descriptor in the per-core lists it never
/// takes `TABLES`. Why a load is enough: descriptions are made on the exclusive side (every
/// core's lock, which such an unlink holds one of) or by an `O_CREAT` open holding the new
/// file's directory stripe (which an unlink of that name takes first); one that goes meanwhile
/// (a close on another core) only makes the unlink look for nothing.
/// On its own line: a `dup` or `close` of a shared description writes it, and it must not
/// share a line with what every read looks at (`open_files::MOUNT`).
pub(super) static TABLE_DESCS: percore::pad::CachePadded<core::sync::atomic::AtomicU64> = percore::pad::CachePadded::new(core::sync::atomic::AtomicU64::new(0));

/// Free description `d` of the shared table.
pub(super) fn drop_desc(descs: &mut [Option<OpenFile>], d: usize) {
    if let Some(x) = descs.get_mut(d) {
        if x.take().is_some() {
            TABLE_DESCS.fetch_sub(1, core::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// One descriptor's reference to description `d` of the shared table goes: `Some(inode)` when
/// it was the last (the description is freed), `None` while others remain.
pub(super) fn unref_desc(descs: &mut [Option<OpenFile>], d: usize) -> Result<Option<u32>> {
    let desc = descs.get_mut(d).and_then(|x| x.as_mut()).ok_or(FsError::BadDescriptor)?;
    desc.refs -= 1;
    if desc.refs > 0 {
        return Ok(None);
    }
    let ino = desc.ino;
    drop_desc(descs, d);
    Ok(Some(ino))
}

pub(super) fn new_slot_in(files: &mut Vec<Option<u32>>) -> Result<usize> {
    match files.iter().position(|f| f.is_none()) {
        Some(i) => Ok(i),
        None if files.len() < MAX_OPEN => {
            files.push(None);
            Ok(files.len() - 1)
        }
        None => Err(FsError::NoMemory),
    }
}

/// `InvalidArgument` for flags `open` does not know.
pub(super) fn check_open_flags(flags: u32) -> Result<()> {
    if flags & O_ACCMODE == 3 || flags & !(O_ACCMODE | O_CREAT | O_EXCL | O_TRUNC | O_APPEND) != 0 {
        return Err(FsError::InvalidArgument);
    }
    Ok(())
}

/// A new descriptor and open file description for inode `ino`.
pub(super) fn install_fd(files: &mut Vec<Option<u32>>, descs: &mut Vec<Option<OpenFile>>, ino: u32, flags: u32) -> Result<Fd> {
    let slot = new_slot_in(files)?;
    let d = new_desc_in(descs, OpenFile { ino, off: 0, flags, refs: 1 });
    files[slot] = Some(d as u32);
    Ok(Fd(slot as u32))
}
