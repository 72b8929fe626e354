//! The ext2 on-disk format (revision 0 and 1, no journal): superblock, group descriptors,
//! inodes, direct and indirect blocks, linear directories. Our own reader and writer, written
//! for this system: `no_std` with `alloc`, no `unsafe`, no dependency, so the one crate serves
//! the library OS (over its buffer cache) and the host tool (`cargo xtask fs ls|cat`, over an
//! image file), and is tested on the host against images made by `mke2fs -d`, corrupted ones
//! included (`xtask/src/fs/tests.rs`), and on memory disks (this crate's own tests).
//!
//! | module | what |
//! | --- | --- |
//! | this file | the `Disk` trait, errors, the on-disk structures, mount, inodes, block maps, reading (locked, and `read_unlocked`: the same read through a byte source that may refuse), directories read, path walk |
//! | `write` | allocation (bitmaps, counts, per-core reserves), block maps, write, truncate |
//! | `dir` | directory changes: create, mkdir, symlink, link, unlink (orphans), rmdir, rename |
//!
//! **Nothing on the disk is trusted.** Every number read from it (block numbers, inode numbers,
//! counts, sizes, directory record lengths) is bounds-checked before it is used as an index,
//! offset or loop bound; a violation is `FsError::Corrupt` naming what was wrong, never a panic
//! and never an unbounded loop. Features this code does not implement are refused at mount
//! (`Unsupported`), or, for read-only-compatible ones, make the file system read-only.
//!
//! Layout reminders (all little-endian): the superblock is the 1024 bytes at byte 1024; the
//! group descriptor table starts in the block after the superblock's (`first_data_block + 1`);
//! inode `n` (from 1) is entry `(n - 1) % inodes_per_group` of group `(n - 1) /
//! inodes_per_group`'s inode table; an inode maps its blocks through 12 direct pointers, then
//! one single-, one double- and one triple-indirect block; a directory is a list of records
//! `(inode u32, rec_len u16, name_len u8, file_type u8, name)` that never cross a block.

#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod dir;
pub mod index;
pub mod write;

pub use dir::split_path;

use alloc::vec;
use alloc::vec::Vec;

/// What can go wrong, for the library calls above this layer too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsError {
    /// The device failed a request.
    Io,
    /// The image says something impossible (what, in words).
    Corrupt(&'static str),
    /// The image uses something this implementation does not (what, in words).
    Unsupported(&'static str),
    NotFound,
    NotDir,
    IsDir,
    NameTooLong,
    InvalidArgument,
    NoSpace,
    Exists,
    NotEmpty,
    BadDescriptor,
    ReadOnly,
    NoMemory,
    /// No disk, or it is used by someone else.
    NoDevice,
    /// More than `MAX_SYMLINK_HOPS` symbolic links on one path (a loop).
    TooManyLinks,
    /// A change run with the allocation state frozen (`Ext2::frozen`: the library OS's
    /// per-directory side) needs the bitmaps or the counts, or a second directory lock that
    /// is busy. Returned before the change wrote anything; the caller runs it again with
    /// the whole file system to itself. Never seen by the library's callers.
    Contended,
}

impl FsError {
    pub fn as_str(&self) -> &'static str {
        match self {
            FsError::Io => "I/O error",
            FsError::Corrupt(w) => w,
            FsError::Unsupported(w) => w,
            FsError::NotFound => "no such file or directory",
            FsError::NotDir => "not a directory",
            FsError::IsDir => "is a directory",
            FsError::NameTooLong => "name too long",
            FsError::InvalidArgument => "invalid argument",
            FsError::NoSpace => "no space left on device",
            FsError::Exists => "file exists",
            FsError::NotEmpty => "directory not empty",
            FsError::BadDescriptor => "bad file descriptor",
            FsError::ReadOnly => "read-only file system",
            FsError::NoMemory => "out of memory",
            FsError::NoDevice => "no disk",
            FsError::TooManyLinks => "too many levels of symbolic links",
            FsError::Contended => "contended (retried exclusively)",
        }
    }

    /// A short class name for messages ("corrupt", "unsupported", ...).
    pub fn kind(&self) -> &'static str {
        match self {
            FsError::Corrupt(_) => "corrupt image",
            FsError::Unsupported(_) => "unsupported",
            _ => "error",
        }
    }
}

pub type Result<T> = core::result::Result<T, FsError>;

/// The device under the file system, addressed in bytes. The file system reads single inodes
/// (128 bytes), block pointers (4 bytes) and file data straight into the caller's buffer, and
/// patches group descriptors in place (32 bytes): an implementation handles any byte range
/// inside the device (the buffer cache copies only the bytes asked for).
pub trait Disk {
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<()>;
    fn write_at(&mut self, off: u64, buf: &[u8]) -> Result<()>;
    /// The block at byte `off` was just written as file data (a buffer cache writes such
    /// blocks back before the metadata that names them). Nothing by default.
    fn note_data(&mut self, _off: u64) {}
    /// Bytes on the device.
    fn size(&self) -> u64;
    /// A value that stays the same while nothing changes the entries of directory `dir`, and
    /// `None` while such a change may run or when the device cannot tell: the directory
    /// indexes (`index`) are used only while it is the one they were made at. `None` by
    /// default (no index: every lookup scans the directory).
    fn dir_stamp(&self, _dir: u32) -> Option<[u64; 2]> {
        None
    }
}

pub const MAGIC: u16 = 0xEF53;
pub const ROOT_INO: u32 = 2;
pub const NAME_MAX: usize = 255;
/// Most symbolic links followed while resolving one path.
pub const MAX_SYMLINK_HOPS: u32 = 8;
/// A symbolic link whose target fits in the block pointers (below 60 bytes) keeps it there.
pub const FAST_SYMLINK_MAX: usize = 59;
/// Most bytes of a directory this code reads (bounds the work a corrupt size can cause).
pub const DIR_MAX_BYTES: u64 = 64 << 20;

pub const S_IFMT: u16 = 0xF000;
pub const S_IFREG: u16 = 0x8000;
pub const S_IFDIR: u16 = 0x4000;
pub const S_IFLNK: u16 = 0xA000;

/// incompat: directory entries carry a file type.
pub const INCOMPAT_FILETYPE: u32 = 0x0002;
/// ro_compat features we understand: sparse superblocks, files over 2 GiB, (unused) btree dirs.
pub const RO_COMPAT_KNOWN: u32 = 0x0001 | 0x0002 | 0x0004;
pub const RO_COMPAT_LARGE_FILE: u32 = 0x0002;
/// compat dir_index: directories may carry an htree index (readable linearly; a writer must
/// clear the directory's index flag, which is what `write` support will do).
pub const COMPAT_DIR_INDEX: u32 = 0x0020;
pub const INODE_INDEX_FL: u32 = 0x1000;

#[inline]
pub(crate) fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
#[inline]
pub(crate) fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The superblock fields this code uses.
#[derive(Clone, Copy, Debug, Default)]
pub struct Superblock {
    pub inodes_count: u32,
    pub blocks_count: u32,
    pub r_blocks_count: u32,
    pub free_blocks_count: u32,
    pub free_inodes_count: u32,
    pub first_data_block: u32,
    pub log_block_size: u32,
    pub blocks_per_group: u32,
    pub inodes_per_group: u32,
    pub wtime: u32,
    pub state: u16,
    pub rev_level: u32,
    pub first_ino: u32,
    pub inode_size: u16,
    pub feature_compat: u32,
    pub feature_incompat: u32,
    pub feature_ro_compat: u32,
    pub volume_name: [u8; 16],
}

impl Superblock {
    /// Parse and check the 1024 superblock bytes against a device of `dev_bytes` bytes.
    pub fn parse(b: &[u8], dev_bytes: u64) -> Result<Superblock> {
        if b.len() < 1024 {
            return Err(FsError::Corrupt("superblock: short"));
        }
        if le16(b, 56) != MAGIC {
            return Err(FsError::Corrupt("superblock: bad magic (not ext2)"));
        }
        let mut sb = Superblock {
            inodes_count: le32(b, 0),
            blocks_count: le32(b, 4),
            r_blocks_count: le32(b, 8),
            free_blocks_count: le32(b, 12),
            free_inodes_count: le32(b, 16),
            first_data_block: le32(b, 20),
            log_block_size: le32(b, 24),
            blocks_per_group: le32(b, 32),
            inodes_per_group: le32(b, 40),
            state: le16(b, 58),
            rev_level: le32(b, 76),
            wtime: le32(b, 48),
            first_ino: 11,
            inode_size: 128,
            ..Default::default()
        };
        if sb.rev_level > 1 {
            return Err(FsError::Unsupported("superblock: revision above 1"));
        }
        if sb.rev_level == 1 {
            sb.first_ino = le32(b, 84);
            sb.inode_size = le16(b, 88);
            sb.feature_compat = le32(b, 92);
            sb.feature_incompat = le32(b, 96);
            sb.feature_ro_compat = le32(b, 100);
            sb.volume_name.copy_from_slice(&b[120..136]);
        }
        if sb.log_block_size > 6 {
            return Err(FsError::Corrupt("superblock: block size above 64 KiB"));
        }
        let bs = sb.block_size();
        if sb.feature_incompat & !INCOMPAT_FILETYPE != 0 {
            return Err(FsError::Unsupported("superblock: incompatible features (journal, extents, 64bit, meta_bg, ...)"));
        }
        if sb.first_data_block != if bs == 1024 { 1 } else { 0 } {
            return Err(FsError::Corrupt("superblock: first data block does not match the block size"));
        }
        if sb.blocks_per_group == 0 || sb.blocks_per_group as u64 > 8 * bs {
            return Err(FsError::Corrupt("superblock: blocks per group out of range"));
        }
        if sb.inodes_per_group == 0 || sb.inodes_per_group as u64 > 8 * bs {
            return Err(FsError::Corrupt("superblock: inodes per group out of range"));
        }
        if sb.blocks_count <= sb.first_data_block + 1 {
            return Err(FsError::Corrupt("superblock: too few blocks"));
        }
        if sb.blocks_count as u64 * bs > dev_bytes {
            return Err(FsError::Corrupt("superblock: the file system is larger than the device"));
        }
        let is = sb.inode_size as u64;
        if is < 128 || !is.is_power_of_two() || is > bs {
            return Err(FsError::Corrupt("superblock: inode size out of range"));
        }
        let groups = sb.groups();
        if sb.inodes_count as u64 > groups * sb.inodes_per_group as u64 || sb.inodes_count < ROOT_INO {
            return Err(FsError::Corrupt("superblock: inode count past the inode tables"));
        }
        if sb.first_ino < 3 || sb.first_ino > sb.inodes_count {
            return Err(FsError::Corrupt("superblock: first inode out of range"));
        }
        // The descriptor table must fit between the superblock and the first group's end.
        if (groups * 32).div_ceil(bs) >= sb.blocks_per_group as u64 {
            return Err(FsError::Corrupt("superblock: group descriptor table larger than a group"));
        }
        Ok(sb)
    }

    pub fn block_size(&self) -> u64 {
        1024u64 << self.log_block_size
    }

    pub fn groups(&self) -> u64 {
        ((self.blocks_count - self.first_data_block) as u64).div_ceil(self.blocks_per_group as u64)
    }

    /// Whether this code may write the file system: it understands every ro_compat feature,
    /// and blocks are below 64 KiB (whose record lengths need an encoding not written here).
    pub fn writable(&self) -> bool {
        self.feature_ro_compat & !RO_COMPAT_KNOWN == 0 && self.block_size() < 65536
    }
}

/// One block group's descriptor.
#[derive(Clone, Copy, Debug, Default)]
pub struct Group {
    pub block_bitmap: u32,
    pub inode_bitmap: u32,
    pub inode_table: u32,
    pub free_blocks: u16,
    pub free_inodes: u16,
    pub used_dirs: u16,
}

/// An inode: the fields this code uses, and its raw bytes (the first 128) for writing back.
#[derive(Clone, Copy, Debug)]
pub struct Inode {
    pub ino: u32,
    pub mode: u16,
    pub uid: u16,
    pub gid: u16,
    pub size: u64,
    pub atime: u32,
    pub ctime: u32,
    pub mtime: u32,
    pub links: u16,
    /// 512-byte units allocated (data and indirect blocks).
    pub blocks512: u32,
    pub flags: u32,
    pub block: [u32; 15],
    pub raw: [u8; 128],
}

impl Inode {
    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }
    pub fn is_reg(&self) -> bool {
        self.mode & S_IFMT == S_IFREG
    }
    pub fn is_symlink(&self) -> bool {
        self.mode & S_IFMT == S_IFLNK
    }
}

/// A directory entry as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub ino: u32,
    pub file_type: u8,
    pub name: Vec<u8>,
}

/// `file_type` values in directory entries.
pub const FT_REG: u8 = 1;
pub const FT_DIR: u8 = 2;
pub const FT_SYMLINK: u8 = 7;

/// What `stat` reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    pub ino: u32,
    pub mode: u16,
    pub links: u16,
    pub uid: u16,
    pub gid: u16,
    pub size: u64,
    pub blocks512: u32,
    pub mtime: u32,
}

/// Most inodes a core's reserve holds (a batch is at most one inode-table block's worth).
pub const RESERVE_INODES: usize = 32;
/// Most blocks a core's reserve holds (a batch, and the most it keeps of what it frees).
pub const RESERVE_BLOCKS: usize = 64;
/// Cores with a reserve; a core past this allocates from the bitmaps.
pub const RESERVE_CORES: usize = 64;

/// One core's reserve of free inodes and blocks (docs/fs.md, "Create and unlink"; taken and
/// given back in `write.rs`). What it
/// holds is marked used in the bitmaps and not counted free in the group descriptors and the
/// superblock (taken out in a batch), so the on-disk state is consistent at every moment but
/// for allocated, unreferenced items, which `return_reserves` (every sync) gives back. On a
/// line pair of its own: only its core writes it.
#[derive(Clone)]
#[repr(align(128))]
pub struct Reserve {
    pub(crate) inodes: [u32; RESERVE_INODES],
    pub(crate) n_inodes: usize,
    pub(crate) blocks: [u64; RESERVE_BLOCKS],
    pub(crate) n_blocks: usize,
}

impl Default for Reserve {
    fn default() -> Self {
        Reserve { inodes: [0; RESERVE_INODES], n_inodes: 0, blocks: [0; RESERVE_BLOCKS], n_blocks: 0 }
    }
}

/// A mounted ext2 file system over a `Disk`.
pub struct Ext2<D: Disk> {
    pub dev: D,
    pub sb: Superblock,
    pub bs: u64,
    pub groups: Vec<Group>,
    /// Per-core reserves of inodes and blocks (`Reserve`; taken and given back in `write.rs`), indexed by core;
    /// used only while `reserve_core` is set.
    pub(crate) reserves: Vec<Reserve>,
    /// Which core's reserve a call draws from and gives back to (the library OS: the calling
    /// core). `None` (the host tool's default): no reserves, every allocation goes through
    /// the bitmaps.
    pub reserve_core: Option<fn() -> usize>,
    /// Where a relative path starts (the root unless a caller sets it, as `openat` does for
    /// one call).
    pub base: u32,
    /// Data blocks written since the last sync (they go to the disk before the metadata).
    pub dirty_data: alloc::collections::BTreeSet<u64>,
    /// Called with each inode a change is about to change (a directory whose entries or link
    /// count it changes, a file it writes, truncates, links or removes), before it writes
    /// anything of it (`dir.rs`, `Ext2::changing`; an error stops the change before it
    /// writes). The library OS sets it at mount (`fs::change_hook`: the name cache's per-inode
    /// generations, recorded per core); `None` (the host tool): nothing is called.
    pub change_hook: Option<fn(u32) -> Result<()>>,
    /// The allocation state is frozen (the library OS sets it while a change runs under one
    /// directory's lock only, beside changes on other cores, each on its own `Ext2` over the
    /// same cache: `fs`, "Locks"). Then nothing reads-modifies-writes the bitmaps or changes
    /// the counts (`sb`, `groups`), which every core's copy must agree on: a reserve refill
    /// is `Contended` (before anything is written), and what is freed past the reserve's
    /// room goes to `spilled_*` (still marked used on the disk, like a reserve's items,
    /// given back by `return_reserves` with the exclusive side held).
    pub frozen: bool,
    /// Inodes (and whether each was a directory's) and blocks freed while `frozen` that the
    /// reserve had no room for.
    pub(crate) spilled_inodes: Vec<(u32, bool)>,
    pub(crate) spilled_blocks: Vec<u64>,
    /// Directories made while `frozen` (their inodes from the reserve): their groups'
    /// `used_dirs` is not raised yet (a shared count); `fold_pending_dirs` raises it with the
    /// exclusive side held (every sync, and before every exclusive change).
    pub(crate) pending_dirs: Vec<u32>,
    /// Moved by every write of a group descriptor or the superblock, i.e. after every change
    /// of the counts: the library OS copies them to the other cores' `Ext2`s only when it
    /// moved (`copy_counts_from`).
    pub counts_gen: u64,
    /// Directories read once and kept as hashes of their names (`index`), used while the
    /// device's `dir_stamp` for them is unchanged.
    pub dir_index: index::DirIndexes,
}

impl<D: Disk> Ext2<D> {
    /// Read and check the superblock and the group descriptors.
    pub fn mount(mut dev: D) -> Result<Ext2<D>> {
        let mut sbb = vec![0u8; 1024];
        if dev.size() < 2048 {
            return Err(FsError::Corrupt("device too small for a superblock"));
        }
        dev.read_at(1024, &mut sbb)?;
        let sb = Superblock::parse(&sbb, dev.size())?;
        let bs = sb.block_size();
        let ngroups = sb.groups();
        let mut fs = Ext2 { dev, sb, bs, groups: Vec::new(), reserves: Vec::new(), reserve_core: None, dirty_data: Default::default(), base: ROOT_INO, change_hook: None, frozen: false, spilled_inodes: Vec::new(), spilled_blocks: Vec::new(), pending_dirs: Vec::new(), counts_gen: 0, dir_index: Default::default() };
        let gdt_block = sb.first_data_block as u64 + 1;
        let gdt_blocks = (ngroups * 32).div_ceil(bs);
        let mut gdt = vec![0u8; (gdt_blocks * bs) as usize];
        fs.dev.read_at(gdt_block * bs, &mut gdt)?;
        let itable_blocks = (sb.inodes_per_group as u64 * sb.inode_size as u64).div_ceil(bs);
        for g in 0..ngroups as usize {
            let d = &gdt[g * 32..g * 32 + 32];
            let grp = Group {
                block_bitmap: le32(d, 0),
                inode_bitmap: le32(d, 4),
                inode_table: le32(d, 8),
                free_blocks: le16(d, 12),
                free_inodes: le16(d, 14),
                used_dirs: le16(d, 16),
            };
            let inside = |b: u64, n: u64| b >= gdt_block && b.checked_add(n).is_some_and(|e| e <= sb.blocks_count as u64);
            if !inside(grp.block_bitmap as u64, 1) || !inside(grp.inode_bitmap as u64, 1) || !inside(grp.inode_table as u64, itable_blocks) {
                return Err(FsError::Corrupt("group descriptor: bitmap or inode table outside the file system"));
            }
            fs.groups.push(grp);
        }
        let root = fs.inode(ROOT_INO)?;
        if !root.is_dir() {
            return Err(FsError::Corrupt("root inode is not a directory"));
        }
        Ok(fs)
    }

    /// Another `Ext2` over `dev` (the same disk seen through another handle) with this one's
    /// superblock, groups and hooks, and reserves of its own (empty): the library OS keeps
    /// one per core.
    pub fn clone_with<E: Disk>(&self, dev: E) -> Ext2<E> {
        Ext2 {
            dev,
            sb: self.sb,
            bs: self.bs,
            groups: self.groups.clone(),
            reserves: Vec::new(),
            reserve_core: self.reserve_core,
            dirty_data: Default::default(),
            base: ROOT_INO,
            change_hook: self.change_hook,
            frozen: false,
            spilled_inodes: Vec::new(),
            spilled_blocks: Vec::new(),
            pending_dirs: Vec::new(),
            counts_gen: 0,
            dir_index: Default::default(),
        }
    }

    /// Take `o`'s superblock and group descriptors (counts included): after a change with
    /// the exclusive side, every core's copy is made equal to the one that ran it.
    pub fn copy_counts_from<E: Disk>(&mut self, o: &Ext2<E>) {
        self.sb = o.sb;
        self.groups.clone_from(&o.groups);
    }

    /// Read block `b` (checked to be inside the file system) into `buf`.
    pub fn read_block(&mut self, b: u64, buf: &mut [u8]) -> Result<()> {
        if b >= self.sb.blocks_count as u64 {
            return Err(FsError::Corrupt("block number past the end of the file system"));
        }
        self.dev.read_at(b * self.bs, &mut buf[..self.bs as usize])
    }

    /// Where inode `ino` is: (block, byte offset in it).
    pub(crate) fn inode_pos(&self, ino: u32) -> Result<(u64, usize)> {
        if ino == 0 || ino > self.sb.inodes_count {
            return Err(FsError::Corrupt("inode number out of range"));
        }
        let idx = (ino - 1) as u64;
        let g = (idx / self.sb.inodes_per_group as u64) as usize;
        let slot = idx % self.sb.inodes_per_group as u64;
        let grp = self.groups.get(g).ok_or(FsError::Corrupt("inode in a group that does not exist"))?;
        let byte = slot * self.sb.inode_size as u64;
        Ok((grp.inode_table as u64 + byte / self.bs, (byte % self.bs) as usize))
    }

    pub fn inode(&mut self, ino: u32) -> Result<Inode> {
        let (blk, at) = self.inode_pos(ino)?;
        if blk >= self.sb.blocks_count as u64 {
            return Err(FsError::Corrupt("inode table past the end of the file system"));
        }
        // Only the inode's bytes: the cache copies 128 bytes, not the block.
        let mut raw = [0u8; 128];
        self.dev.read_at(blk * self.bs + at as u64, &mut raw)?;
        let mode = le16(&raw, 0);
        let size = raw_size(&raw, mode);
        let block = raw_block_ptrs(&raw);
        Ok(Inode {
            ino,
            mode,
            uid: le16(&raw, 2),
            gid: le16(&raw, 24),
            size,
            atime: le32(&raw, 8),
            ctime: le32(&raw, 12),
            mtime: le32(&raw, 16),
            links: le16(&raw, 26),
            blocks512: le32(&raw, 28),
            flags: le32(&raw, 32),
            block,
            raw,
        })
    }

    /// What a block pointer is checked against.
    fn limits(&self) -> PtrLimits {
        PtrLimits { bs: self.bs, first_data_block: self.sb.first_data_block as u64, blocks_count: self.sb.blocks_count as u64 }
    }

    /// Check a block pointer read from the disk (0 is a hole).
    pub(crate) fn check_ptr(&self, p: u32) -> Result<u64> {
        self.limits().check_ptr(p)
    }

    /// Pointer `i` of indirect block `b`.
    pub(crate) fn indirect(&mut self, b: u64, i: u64) -> Result<u64> {
        let lim = self.limits();
        let dev = &mut self.dev;
        lim.indirect(b, i, &mut |o, p| dev.read_at(o, p))
    }

    /// The block holding logical block `lblk` of `ino` (0: a hole).
    pub fn bmap(&mut self, ino: &Inode, lblk: u64) -> Result<u64> {
        let lim = self.limits();
        let dev = &mut self.dev;
        map_block(&lim, &ino.block, lblk, |b, i| lim.indirect(b, i, &mut |o, p| dev.read_at(o, p)))
    }

    /// What a reader without the lock needs to find inodes and check block pointers
    /// (`read_unlocked`); fixed while the file system is mounted.
    pub fn geometry(&self) -> Geometry {
        let mut inode_tables = [0u32; GEOMETRY_GROUPS];
        for (t, g) in inode_tables.iter_mut().zip(&self.groups) {
            *t = g.inode_table;
        }
        Geometry {
            bs: self.bs,
            blocks_count: self.sb.blocks_count as u64,
            first_data_block: self.sb.first_data_block as u64,
            inodes_count: self.sb.inodes_count,
            inodes_per_group: self.sb.inodes_per_group,
            inode_size: self.sb.inode_size as u64,
            dev_bytes: self.dev.size(),
            groups: (self.groups.len()).min(GEOMETRY_GROUPS) as u32,
            inode_tables,
        }
    }

    /// Read up to `buf.len()` bytes of `ino` from byte `off`; returns how many (0 at the end).
    /// Straight from the `Disk` (the buffer cache) into the caller's buffer, by `read_file`,
    /// the one read loop (`read_unlocked` runs it too).
    pub fn read(&mut self, ino: &Inode, off: u64, buf: &mut [u8]) -> Result<usize> {
        let lim = self.limits();
        let dev = &mut self.dev;
        read_file(&lim, &ino.block, ino.size, off, buf, &mut |o, b| dev.read_at(o, b))
    }

    /// Call `f` for every live entry of directory `dir` until it returns `Some`.
    pub fn scan_dir<R>(&mut self, dir: &Inode, mut f: impl FnMut(u32, u8, &[u8]) -> Option<R>) -> Result<Option<R>> {
        if !dir.is_dir() {
            return Err(FsError::NotDir);
        }
        if dir.size > DIR_MAX_BYTES {
            return Err(FsError::Corrupt("directory larger than this implementation reads"));
        }
        let nblocks = dir.size.div_ceil(self.bs);
        let mut blk = vec![0u8; self.bs as usize];
        for l in 0..nblocks {
            let b = self.bmap(dir, l)?;
            if b == 0 {
                return Err(FsError::Corrupt("directory with a hole"));
            }
            self.read_block(b, &mut blk)?;
            let mut at = 0usize;
            while at < blk.len() {
                if blk.len() - at < 8 {
                    return Err(FsError::Corrupt("directory entry crosses the block end"));
                }
                let ino = le32(&blk, at);
                let rec_len = le16(&blk, at + 4) as usize;
                let name_len = blk[at + 6] as usize;
                let ft = blk[at + 7];
                if rec_len < 8 || !rec_len.is_multiple_of(4) || at + rec_len > blk.len() || 8 + name_len > rec_len {
                    return Err(FsError::Corrupt("directory entry with an impossible length"));
                }
                if ino > self.sb.inodes_count {
                    return Err(FsError::Corrupt("directory entry names an inode out of range"));
                }
                if ino != 0 && name_len > 0 {
                    if let Some(r) = f(ino, ft, &blk[at + 8..at + 8 + name_len]) {
                        return Ok(Some(r));
                    }
                }
                at += rec_len;
            }
        }
        Ok(None)
    }

    /// Every entry of directory `dir` (including `.` and `..`).
    pub fn read_dir(&mut self, dir: &Inode) -> Result<Vec<DirEntry>> {
        if let Some(v) = self.with_index(dir, |x| x.entries().map(|(ino, ft, name)| DirEntry { ino, file_type: ft, name: name.to_vec() }).collect()) {
            return Ok(v);
        }
        let mut v = Vec::new();
        self.scan_dir(dir, |ino, ft, name| {
            v.push(DirEntry { ino, file_type: ft, name: name.to_vec() });
            None::<()>
        })?;
        Ok(v)
    }

    /// Give `f` every file (non-directory) reachable from the root, depth first, visiting
    /// at most `max` inodes and 16 levels: a walk that ends on a corrupt image too (a
    /// directory loop, a wild inode number); inodes and directories that cannot be read are
    /// passed over. Returns the inodes visited. For the corrupt-image tests (host and guest).
    pub fn walk_bounded(&mut self, max: usize, mut f: impl FnMut(&mut Self, &Inode)) -> usize {
        let mut todo = alloc::vec![(ROOT_INO, 0u32)];
        let mut seen = 0;
        while let Some((ino, depth)) = todo.pop() {
            seen += 1;
            if seen > max || depth > 16 {
                break;
            }
            let Ok(i) = self.inode(ino) else { continue };
            if !i.is_dir() {
                f(self, &i);
            } else if let Ok(es) = self.read_dir(&i) {
                todo.extend(es.into_iter().filter(|e| e.name != b"." && e.name != b"..").map(|e| (e.ino, depth + 1)));
            }
        }
        seen
    }

    /// The inode number `name` has in directory `dir`.
    pub fn lookup(&mut self, dir: &Inode, name: &[u8]) -> Result<u32> {
        self.lookup_typed(dir, name).map(|(ino, _)| ino)
    }

    /// `lookup`, with the file type the entry gives (0 where the file system keeps none).
    fn lookup_typed(&mut self, dir: &Inode, name: &[u8]) -> Result<(u32, u8)> {
        if name.len() > NAME_MAX {
            return Err(FsError::NameTooLong);
        }
        if let Some(r) = self.with_index(dir, |x| x.get(name)) {
            return r.ok_or(FsError::NotFound);
        }
        self.scan_dir(dir, |ino, ft, n| (n == name).then_some((ino, ft)))?.ok_or(FsError::NotFound)
    }

    /// `f` of directory `dir`'s index (`index`): the one made at the stamp the device gives
    /// now, else one made now by a scan. `None` (the caller scans) when the device gives no
    /// stamp, the directory is too large to index or its scan fails.
    fn with_index<R>(&mut self, dir: &Inode, f: impl FnOnce(&index::DirIndex) -> R) -> Option<R> {
        if !dir.is_dir() || dir.size > index::MAX_BYTES {
            return None;
        }
        // Read before the scan: a change that starts during the scan moves the stamp, so the
        // index it made is never used.
        let stamp = self.dev.dir_stamp(dir.ino)?;
        if self.dir_index.find(dir.ino, stamp).is_none() {
            // The inode read again after the stamp: the caller's copy may be older than a
            // change that ended just before it (another core's create that grew the
            // directory), and an index made from its size would miss that change's entries
            // although the stamp already counts it.
            let dir = self.inode(dir.ino).ok()?;
            if !dir.is_dir() || dir.size > index::MAX_BYTES {
                return None;
            }
            let mut x = index::DirIndex::new(dir, stamp);
            self.scan_dir(&dir, |ino, ft, name| {
                x.push(ino, ft, name);
                None::<()>
            })
            .ok()?;
            x.seal();
            self.dir_index.put(x);
        }
        let r = f(self.dir_index.find(dir.ino, stamp)?);
        self.dir_index.uses += 1;
        Some(r)
    }

    /// Whether `ino` is a symbolic link whose target is stored in its block pointers.
    pub fn is_fast_symlink(&self, ino: &Inode) -> bool {
        let acl_blocks = if le32(&ino.raw, 104) != 0 { (self.bs / 512) as u32 } else { 0 };
        ino.is_symlink() && ino.size <= FAST_SYMLINK_MAX as u64 && ino.blocks512 == acl_blocks
    }

    /// The target of symbolic link `ino`.
    pub fn read_link(&mut self, ino: &Inode) -> Result<Vec<u8>> {
        if !ino.is_symlink() {
            return Err(FsError::InvalidArgument);
        }
        if ino.size == 0 || ino.size > self.bs.min(4096) {
            return Err(FsError::Corrupt("symbolic link of an impossible length"));
        }
        if self.is_fast_symlink(ino) {
            return Ok(ino.raw[40..40 + ino.size as usize].to_vec());
        }
        let mut v = vec![0u8; ino.size as usize];
        let n = self.read(ino, 0, &mut v)?;
        v.truncate(n);
        Ok(v)
    }

    /// The inode a path names (absolute, or relative to `base`, normally the root; `.`, `..` and repeated `/`
    /// as usual; `..` at the root stays at the root), following symbolic links (at most
    /// `MAX_SYMLINK_HOPS`; a relative target is taken from the link's directory).
    pub fn resolve(&mut self, path: &[u8]) -> Result<Inode> {
        self.resolve_at(path, true)
    }

    /// `resolve`, but a symbolic link as the last component is returned itself (`lstat`).
    pub fn resolve_nofollow(&mut self, path: &[u8]) -> Result<Inode> {
        self.resolve_at(path, false)
    }

    fn resolve_at(&mut self, path: &[u8], follow_last: bool) -> Result<Inode> {
        if let Some(r) = self.resolve_plain(path, follow_last) {
            return r;
        }
        let start = if path.first() == Some(&b'/') { ROOT_INO } else { self.base };
        let mut cur = self.inode(start)?;
        // The path still to walk (owned: a link's target is spliced in front of the rest).
        let mut rest: Vec<u8> = path.to_vec();
        let mut hops = 0u32;
        loop {
            let trimmed = rest.iter().position(|&c| c != b'/').unwrap_or(rest.len());
            rest.drain(..trimmed);
            if rest.is_empty() {
                return Ok(cur);
            }
            let end = rest.iter().position(|&c| c == b'/').unwrap_or(rest.len());
            let comp: Vec<u8> = rest[..end].to_vec();
            rest.drain(..end);
            if comp == b"." {
                continue;
            }
            if !cur.is_dir() {
                return Err(FsError::NotDir);
            }
            let ino = self.lookup(&cur, &comp)?;
            let next = self.inode(ino)?;
            let last = rest.iter().all(|&c| c == b'/');
            if next.is_symlink() && (!last || follow_last) {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(FsError::TooManyLinks);
                }
                let target = self.read_link(&next)?;
                if target.first() == Some(&b'/') {
                    cur = self.inode(ROOT_INO)?;
                }
                let mut spliced = target;
                spliced.push(b'/');
                spliced.extend_from_slice(&rest);
                rest = spliced;
                continue;
            }
            cur = next;
        }
    }

    /// Inode `ino`: from its directory index when it is a directory with one made at the
    /// stamp the device gives now (a walk through it reads no inode), else read.
    fn inode_indexed(&mut self, ino: u32) -> Result<Inode> {
        if let Some(x) = self.dev.dir_stamp(ino).and_then(|s| self.dir_index.find(ino, s)) {
            return Ok(x.inode);
        }
        self.inode(ino)
    }

    /// The walk of `resolve_at` over the path in place, with no copy of it: `None` at the
    /// first symbolic link it would follow (the caller then walks again, splicing the
    /// targets). The same steps in the same order as `resolve_at`'s loop, so the same answer
    /// and the same error.
    fn resolve_plain(&mut self, path: &[u8], follow_last: bool) -> Option<Result<Inode>> {
        let start = if path.first() == Some(&b'/') { ROOT_INO } else { self.base };
        let mut cur = match self.inode_indexed(start) {
            Ok(i) => i,
            Err(e) => return Some(Err(e)),
        };
        let mut comps = path.split(|&c| c == b'/').filter(|c| !c.is_empty()).peekable();
        while let Some(comp) = comps.next() {
            if comp == b"." {
                continue;
            }
            if !cur.is_dir() {
                return Some(Err(FsError::NotDir));
            }
            // The entry's file type says where an index may hold the inode (a directory's);
            // only a hint: `inode_indexed` finds an index only for a directory's inode.
            let next = match self.lookup_typed(&cur, comp).and_then(|(ino, ft)| if ft == FT_DIR { self.inode_indexed(ino) } else { self.inode(ino) }) {
                Ok(i) => i,
                Err(e) => return Some(Err(e)),
            };
            let last = comps.peek().is_none();
            if next.is_symlink() && (!last || follow_last) {
                return None;
            }
            cur = next;
        }
        Some(Ok(cur))
    }

    pub fn stat_of(ino: &Inode) -> Stat {
        Stat { ino: ino.ino, mode: ino.mode, links: ino.links, uid: ino.uid, gid: ino.gid, size: ino.size, blocks512: ino.blocks512, mtime: ino.mtime }
    }
}

/// Groups whose inode tables a [`Geometry`] carries (inodes of later groups are read under the
/// lock only).
pub const GEOMETRY_GROUPS: usize = 32;

/// The fixed shape of a mounted file system: where inodes lie and the limits a block pointer
/// is checked against (`Ext2::geometry`). The library OS keeps a copy outside its lock for
/// `read_unlocked`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub bs: u64,
    pub blocks_count: u64,
    pub first_data_block: u64,
    pub inodes_count: u32,
    pub inodes_per_group: u32,
    pub inode_size: u64,
    /// Bytes on the device.
    pub dev_bytes: u64,
    /// Groups with an entry in `inode_tables` (at most `GEOMETRY_GROUPS`).
    pub groups: u32,
    pub inode_tables: [u32; GEOMETRY_GROUPS],
}

/// What a block pointer is checked against.
pub(crate) struct PtrLimits {
    pub bs: u64,
    pub first_data_block: u64,
    pub blocks_count: u64,
}

impl PtrLimits {
    /// Check a block pointer read from the disk (0 is a hole).
    #[inline]
    fn check_ptr(&self, p: u32) -> Result<u64> {
        if p != 0 && ((p as u64) < self.first_data_block || p as u64 >= self.blocks_count) {
            return Err(FsError::Corrupt("block pointer outside the file system"));
        }
        Ok(p as u64)
    }

    /// Pointer `i` of indirect block `b`, read through `get` (only the pointer's 4 bytes, not
    /// the whole indirect block) and checked.
    fn indirect(&self, b: u64, i: u64, get: &mut impl FnMut(u64, &mut [u8]) -> Result<()>) -> Result<u64> {
        if b >= self.blocks_count || i >= self.bs / 4 {
            return Err(FsError::Corrupt("block number past the end of the file system"));
        }
        let mut p = [0u8; 4];
        get(b * self.bs + i * 4, &mut p)?;
        self.check_ptr(u32::from_le_bytes(p))
    }
}

/// An inode's size from its raw bytes (the high 32 bits only for a regular file: in revision
/// 0 and for directories that field is something else). Inlined, over a fixed-size array, so
/// that the caller in another crate (the library OS's read without the lock) compiles it to
/// plain loads, as when this code was part of the library OS.
#[inline]
fn raw_size(raw: &[u8; 128], mode: u16) -> u64 {
    let mut size = le32(raw, 4) as u64;
    if mode & S_IFMT == S_IFREG {
        size |= (le32(raw, 108) as u64) << 32;
    }
    size
}

/// An inode's 15 block pointers from its raw bytes (unchecked: `map_block` checks each one
/// it follows). Inlined over a fixed-size array, as `raw_size`: a call with a slice costs a
/// bounds check per byte (about 480 instructions more per unlocked read, measured).
#[inline]
fn raw_block_ptrs(raw: &[u8; 128]) -> [u32; 15] {
    let mut block = [0u32; 15];
    for (i, b) in block.iter_mut().enumerate() {
        *b = le32(raw, 40 + 4 * i);
    }
    block
}

/// The one read loop of a file: up to `buf.len()` bytes of a file of `size` bytes whose block
/// pointers are `block`, from byte `off`, through `get(device offset, buf)` (which reads
/// device bytes, or refuses with an error); how many bytes (0 at the end). Holes read as
/// zeros. `Ext2::read` runs it over its `Disk`, `read_unlocked` over a source that may refuse.
fn read_file(lim: &PtrLimits, block: &[u32; 15], size: u64, off: u64, buf: &mut [u8], get: &mut impl FnMut(u64, &mut [u8]) -> Result<()>) -> Result<usize> {
    if off >= size {
        return Ok(0);
    }
    let want = ((size - off).min(buf.len() as u64)) as usize;
    let bs = lim.bs;
    let mut done = 0usize;
    while done < want {
        let pos = off + done as u64;
        let lblk = pos / bs;
        let in_blk = (pos % bs) as usize;
        let n = (want - done).min(bs as usize - in_blk);
        let b = map_block(lim, block, lblk, |b, i| lim.indirect(b, i, get))?;
        let dst = &mut buf[done..done + n];
        if b == 0 {
            dst.fill(0);
        } else {
            if b >= lim.blocks_count {
                return Err(FsError::Corrupt("block number past the end of the file system"));
            }
            get(b * bs + in_blk as u64, dst)?;
        }
        done += n;
    }
    Ok(done)
}

impl Geometry {
    #[inline]
    fn limits(&self) -> PtrLimits {
        PtrLimits { bs: self.bs, first_data_block: self.first_data_block, blocks_count: self.blocks_count }
    }

    /// Byte offset of inode `ino` on the device, if its group is in `inode_tables`.
    #[inline]
    pub fn inode_offset(&self, ino: u32) -> Option<u64> {
        if ino == 0 || ino > self.inodes_count || self.inodes_per_group == 0 || self.bs == 0 {
            return None;
        }
        let idx = (ino - 1) as u64;
        let g = idx / self.inodes_per_group as u64;
        if g >= self.groups as u64 {
            return None;
        }
        let byte = (idx % self.inodes_per_group as u64) * self.inode_size;
        let blk = self.inode_tables[g as usize] as u64 + byte / self.bs;
        (blk < self.blocks_count).then_some(blk * self.bs + byte % self.bs)
    }
}

/// The block holding logical block `lblk` of a file with block pointers `block` (0: a hole);
/// `indirect(b, i)` reads pointer `i` of indirect block `b` and checks it. Shared by the
/// locked `Ext2::bmap` and `read_file`, so every read maps blocks the same way. The direct
/// blocks are mapped inline; the indirect levels are kept out of line (`map_indirect`):
/// inlined into `read_file`'s loop, the compiler hoisted the three indirect roots' checks and
/// `p²`, `p³` in front of it, which every read, even of one direct block, then paid (about 30
/// instructions more per unlocked read, measured with insngate's profile).
#[inline]
pub(crate) fn map_block(geo: &PtrLimits, block: &[u32; 15], lblk: u64, indirect: impl FnMut(u64, u64) -> Result<u64>) -> Result<u64> {
    if lblk < 12 {
        return geo.check_ptr(block[lblk as usize]);
    }
    map_indirect(geo, block, lblk, indirect)
}

/// `map_block` past the direct blocks (`lblk >= 12`).
#[inline(never)]
fn map_indirect(geo: &PtrLimits, block: &[u32; 15], lblk: u64, mut indirect: impl FnMut(u64, u64) -> Result<u64>) -> Result<u64> {
    let p = geo.bs / 4;
    let mut l = lblk - 12;
    if l < p {
        let b = geo.check_ptr(block[12])?;
        return if b == 0 { Ok(0) } else { indirect(b, l) };
    }
    l -= p;
    if l < p * p {
        let b = geo.check_ptr(block[13])?;
        if b == 0 {
            return Ok(0);
        }
        let b = indirect(b, l / p)?;
        return if b == 0 { Ok(0) } else { indirect(b, l % p) };
    }
    l -= p * p;
    if l < p * p * p {
        let b = geo.check_ptr(block[14])?;
        if b == 0 {
            return Ok(0);
        }
        let b = indirect(b, l / (p * p))?;
        if b == 0 {
            return Ok(0);
        }
        let b = indirect(b, (l / p) % p)?;
        return if b == 0 { Ok(0) } else { indirect(b, l % p) };
    }
    Err(FsError::Corrupt("file offset beyond the triple-indirect block"))
}

/// 128 bytes of an inode, 8-byte aligned (so a buffer cache can copy whole words into it).
#[repr(C, align(8))]
struct RawInode([u8; 128]);

/// `Ext2::inode` + `Ext2::read` of regular file `ino` from byte `off`, through `get(off, buf)`,
/// which copies bytes of the device and may refuse (`false`: not cached, or in the way of a
/// writer). Reads nothing but what it needs (the inode's first 112 bytes, one pointer per
/// indirect level, the data). `Some((bytes read, file size))`, or `None` whenever `get`
/// refused, the inode is not a regular file, its group is not in `geo`, or anything looks
/// corrupt: the caller then reads under the lock, which reports errors. The caller also
/// decides whether what `get` returned was consistent (the library OS checks the name
/// cache's generation around the whole call: docs/fs.md).
pub fn read_unlocked(geo: &Geometry, ino: u32, off: u64, buf: &mut [u8], get: &mut impl FnMut(u64, &mut [u8]) -> bool) -> Option<(usize, u64)> {
    let at = geo.inode_offset(ino)?;
    let mut raw = RawInode([0; 128]);
    let end = at.checked_add(112)?;
    if end > geo.dev_bytes || !get(at, &mut raw.0[..112]) {
        return None;
    }
    let raw = &raw.0;
    let mode = le16(raw, 0);
    if mode & S_IFMT != S_IFREG {
        return None;
    }
    let size = raw_size(raw, mode);
    let block = raw_block_ptrs(raw);
    // `get` sees only ranges inside the device: `Geometry` comes from a mounted file system,
    // whose blocks (`blocks_count`, checked against the device at mount) all are.
    let dev_bytes = geo.dev_bytes;
    let mut source = |o: u64, b: &mut [u8]| if o.checked_add(b.len() as u64).is_some_and(|e| e <= dev_bytes) && get(o, b) { Ok(()) } else { Err(FsError::Io) };
    let n = read_file(&geo.limits(), &block, size, off, buf, &mut source).ok()?;
    Some((n, size))
}
