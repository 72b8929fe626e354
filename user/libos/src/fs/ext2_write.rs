//! Writing ext2 (the other half of `ext2.rs`, same rules: `core` and `alloc` only, no
//! `unsafe`, every on-disk number checked, compiled into the host tool too): block and inode
//! allocation through the bitmaps (counts kept in the group descriptors and the superblock),
//! block mapping with indirect blocks allocated on demand, file writes (sparse files keep their
//! holes), truncate, create, mkdir, unlink, rmdir, hard links and rename.
//!
//! Everything goes through the `Disk` (the buffer cache in the library OS); nothing here
//! orders writes. The caller's sync writes the data blocks recorded in `dirty_data` first, then
//! the metadata, so a crash between the two leaves data without the metadata naming it, which
//! `e2fsck -fy` repairs, never metadata naming blocks that were not written.
//!
//! Symbolic links are made fast (the target in the block pointers, below 60 bytes) or slow
//! (in a data block, below 4 KiB). Not yet: an htree index (a directory written here loses its index
//! flag: it is read linearly), the orphan list (an unlinked file's blocks are freed at once,
//! even if it is open), access times, timestamps from a clock (new times are the superblock's
//! last write time).

use alloc::vec;

use super::ext2::{
    le16, le32, Disk, Ext2, FsError, Inode, Result, FAST_SYMLINK_MAX, FT_DIR, FT_REG, FT_SYMLINK, INCOMPAT_FILETYPE, INODE_INDEX_FL, NAME_MAX, ROOT_INO,
    S_IFDIR, S_IFLNK, S_IFMT, S_IFREG,
};

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// The directory-entry type of an inode.
fn ft_of(ino: &Inode) -> u8 {
    match ino.mode & S_IFMT {
        S_IFDIR => FT_DIR,
        S_IFLNK => FT_SYMLINK,
        _ => FT_REG,
    }
}

/// Bytes a directory entry with a name of `n` bytes needs.
fn rec_need(n: usize) -> usize {
    (8 + n).next_multiple_of(4)
}

/// Split a path into its parent directory and last name (trailing slashes ignored).
pub fn split_path(path: &[u8]) -> Result<(&[u8], &[u8])> {
    let mut end = path.len();
    while end > 0 && path[end - 1] == b'/' {
        end -= 1;
    }
    let p = &path[..end];
    let (parent, name) = match p.iter().rposition(|&c| c == b'/') {
        Some(i) => (&p[..i], &p[i + 1..]),
        None => (&b""[..], p),
    };
    if name.is_empty() || name == b"." || name == b".." {
        return Err(FsError::InvalidArgument);
    }
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    Ok((parent, name))
}

impl<D: Disk> Ext2<D> {
    fn writable(&self) -> Result<()> {
        if self.sb.writable() {
            Ok(())
        } else {
            Err(FsError::ReadOnly)
        }
    }

    /// The time new and changed inodes get (no clock yet: the last write time on the disk).
    fn now(&self) -> u32 {
        self.sb.wtime.max(1)
    }

    pub fn write_block(&mut self, b: u64, buf: &[u8]) -> Result<()> {
        if b <= self.sb.first_data_block as u64 || b >= self.sb.blocks_count as u64 {
            return Err(FsError::Corrupt("write to a block outside the data area"));
        }
        self.dev.write_at(b * self.bs, &buf[..self.bs as usize])
    }

    /// Write group `g`'s descriptor back (fields this code does not know are kept).
    fn write_group(&mut self, g: usize) -> Result<()> {
        let grp = self.groups[g];
        let off = (self.sb.first_data_block as u64 + 1) * self.bs + g as u64 * 32;
        let mut d = [0u8; 32];
        self.dev.read_at(off, &mut d)?;
        put32(&mut d, 0, grp.block_bitmap);
        put32(&mut d, 4, grp.inode_bitmap);
        put32(&mut d, 8, grp.inode_table);
        put16(&mut d, 12, grp.free_blocks);
        put16(&mut d, 14, grp.free_inodes);
        put16(&mut d, 16, grp.used_dirs);
        self.dev.write_at(off, &d)
    }

    fn write_super(&mut self) -> Result<()> {
        let mut b = [0u8; 1024];
        self.dev.read_at(1024, &mut b)?;
        put32(&mut b, 12, self.sb.free_blocks_count);
        put32(&mut b, 16, self.sb.free_inodes_count);
        put32(&mut b, 100, self.sb.feature_ro_compat);
        self.dev.write_at(1024, &b)
    }

    fn itable_blocks(&self) -> u64 {
        (self.sb.inodes_per_group as u64 * self.sb.inode_size as u64).div_ceil(self.bs)
    }

    /// Take a free block, looking in group `goal` first.
    pub fn alloc_block(&mut self, goal: usize) -> Result<u64> {
        self.writable()?;
        let ng = self.groups.len();
        let bpg = self.sb.blocks_per_group as u64;
        let mut bits = vec![0u8; self.bs as usize];
        for k in 0..ng {
            let g = (goal + k) % ng;
            if self.groups[g].free_blocks == 0 {
                continue;
            }
            let first = self.sb.first_data_block as u64 + g as u64 * bpg;
            let count = bpg.min(self.sb.blocks_count as u64 - first);
            let bm = self.groups[g].block_bitmap as u64;
            self.read_block(bm, &mut bits)?;
            let Some(i) = (0..count).find(|&i| bits[(i / 8) as usize] & (1 << (i % 8)) == 0) else { continue };
            let b = first + i;
            let grp = self.groups[g];
            let it = grp.inode_table as u64;
            if b <= self.sb.first_data_block as u64 || b == grp.block_bitmap as u64 || b == grp.inode_bitmap as u64 || (b >= it && b < it + self.itable_blocks()) {
                return Err(FsError::Corrupt("block bitmap marks metadata free"));
            }
            bits[(i / 8) as usize] |= 1 << (i % 8);
            self.write_block(bm, &bits)?;
            self.groups[g].free_blocks -= 1;
            self.sb.free_blocks_count = self.sb.free_blocks_count.saturating_sub(1);
            self.write_group(g)?;
            self.write_super()?;
            return Ok(b);
        }
        Err(FsError::NoSpace)
    }

    /// A free block, zeroed (indirect blocks, directory blocks).
    fn alloc_zeroed(&mut self, goal: usize) -> Result<u64> {
        let b = self.alloc_block(goal)?;
        let z = vec![0u8; self.bs as usize];
        self.write_block(b, &z)?;
        Ok(b)
    }

    pub fn free_block(&mut self, b: u64) -> Result<()> {
        if b <= self.sb.first_data_block as u64 || b >= self.sb.blocks_count as u64 {
            return Err(FsError::Corrupt("freeing a block outside the file system"));
        }
        let rel = b - self.sb.first_data_block as u64;
        let g = (rel / self.sb.blocks_per_group as u64) as usize;
        let i = rel % self.sb.blocks_per_group as u64;
        let bm = self.groups.get(g).ok_or(FsError::Corrupt("block in no group"))?.block_bitmap as u64;
        let mut bits = vec![0u8; self.bs as usize];
        self.read_block(bm, &mut bits)?;
        if bits[(i / 8) as usize] & (1 << (i % 8)) == 0 {
            return Err(FsError::Corrupt("freeing a block that is already free"));
        }
        bits[(i / 8) as usize] &= !(1 << (i % 8));
        self.write_block(bm, &bits)?;
        self.groups[g].free_blocks = self.groups[g].free_blocks.saturating_add(1);
        self.sb.free_blocks_count = self.sb.free_blocks_count.saturating_add(1);
        self.dirty_data.remove(&b);
        self.write_group(g)?;
        self.write_super()
    }

    /// Take a free inode (group `goal` first) and zero its slot on the disk.
    fn alloc_inode(&mut self, dir: bool, goal: usize) -> Result<u32> {
        self.writable()?;
        let ng = self.groups.len();
        let ipg = self.sb.inodes_per_group as u64;
        let mut bits = vec![0u8; self.bs as usize];
        for k in 0..ng {
            let g = (goal + k) % ng;
            if self.groups[g].free_inodes == 0 {
                continue;
            }
            let bm = self.groups[g].inode_bitmap as u64;
            self.read_block(bm, &mut bits)?;
            let first_ok = self.sb.first_ino as u64;
            let Some(i) = (0..ipg).find(|&i| g as u64 * ipg + i + 1 >= first_ok && g as u64 * ipg + i < self.sb.inodes_count as u64 && bits[(i / 8) as usize] & (1 << (i % 8)) == 0) else {
                continue;
            };
            bits[(i / 8) as usize] |= 1 << (i % 8);
            self.write_block(bm, &bits)?;
            self.groups[g].free_inodes -= 1;
            if dir {
                self.groups[g].used_dirs = self.groups[g].used_dirs.saturating_add(1);
            }
            self.sb.free_inodes_count = self.sb.free_inodes_count.saturating_sub(1);
            self.write_group(g)?;
            self.write_super()?;
            let ino = (g as u64 * ipg + i + 1) as u32;
            // A recycled slot holds its old inode: start from zeros (all `inode_size` bytes).
            let (blk, at) = self.inode_pos(ino)?;
            let mut s = core::mem::take(&mut self.scratch);
            let r = self.read_block(blk, &mut s).and_then(|()| {
                s[at..at + self.sb.inode_size as usize].fill(0);
                self.write_block(blk, &s)
            });
            self.scratch = s;
            r?;
            return Ok(ino);
        }
        Err(FsError::NoSpace)
    }

    fn free_inode(&mut self, ino: u32, dir: bool) -> Result<()> {
        let idx = (ino - 1) as u64;
        let ipg = self.sb.inodes_per_group as u64;
        let g = (idx / ipg) as usize;
        let i = idx % ipg;
        let bm = self.groups.get(g).ok_or(FsError::Corrupt("inode in no group"))?.inode_bitmap as u64;
        let mut bits = vec![0u8; self.bs as usize];
        self.read_block(bm, &mut bits)?;
        if bits[(i / 8) as usize] & (1 << (i % 8)) == 0 {
            return Err(FsError::Corrupt("freeing an inode that is already free"));
        }
        bits[(i / 8) as usize] &= !(1 << (i % 8));
        self.write_block(bm, &bits)?;
        self.groups[g].free_inodes = self.groups[g].free_inodes.saturating_add(1);
        if dir {
            self.groups[g].used_dirs = self.groups[g].used_dirs.saturating_sub(1);
        }
        self.sb.free_inodes_count = self.sb.free_inodes_count.saturating_add(1);
        self.write_group(g)?;
        self.write_super()
    }

    fn group_of(&self, ino: u32) -> usize {
        ((ino.saturating_sub(1)) / self.sb.inodes_per_group) as usize
    }

    /// Write an inode's fields back into its slot.
    pub fn write_inode(&mut self, ino: &mut Inode) -> Result<()> {
        let r = &mut ino.raw;
        put16(r, 0, ino.mode);
        put16(r, 2, ino.uid);
        put32(r, 4, ino.size as u32);
        put32(r, 8, ino.atime);
        put32(r, 12, ino.ctime);
        put32(r, 16, ino.mtime);
        put16(r, 24, ino.gid);
        put16(r, 26, ino.links);
        put32(r, 28, ino.blocks512);
        put32(r, 32, ino.flags);
        for (i, b) in ino.block.iter().enumerate() {
            put32(r, 40 + 4 * i, *b);
        }
        if ino.mode & S_IFMT == S_IFREG {
            put32(r, 108, (ino.size >> 32) as u32);
        }
        let (blk, at) = self.inode_pos(ino.ino)?;
        let mut s = core::mem::take(&mut self.scratch);
        let raw = ino.raw;
        let res = self.read_block(blk, &mut s).and_then(|()| {
            s[at..at + 128].copy_from_slice(&raw);
            self.write_block(blk, &s)
        });
        self.scratch = s;
        res
    }

    /// The block of logical block `lblk`, allocated (with any indirect block on the way) if it
    /// is a hole. Returns it and whether it is new (its old contents are garbage).
    pub fn bmap_alloc(&mut self, ino: &mut Inode, lblk: u64) -> Result<(u64, bool)> {
        let p = self.bs / 4;
        let goal = self.group_of(ino.ino);
        let per = (self.bs / 512) as u32;
        if lblk < 12 {
            let cur = self.check_ptr(ino.block[lblk as usize])?;
            if cur != 0 {
                return Ok((cur, false));
            }
            let b = self.alloc_block(goal)?;
            ino.block[lblk as usize] = b as u32;
            ino.blocks512 += per;
            return Ok((b, true));
        }
        let mut l = lblk - 12;
        let (root, path): (usize, [u64; 3]) = if l < p {
            (12, [l, 0, 0])
        } else {
            l -= p;
            if l < p * p {
                (13, [l / p, l % p, 0])
            } else {
                l -= p * p;
                if l >= p * p * p {
                    return Err(FsError::InvalidArgument);
                }
                (14, [l / (p * p), (l / p) % p, l % p])
            }
        };
        let mut cur = self.check_ptr(ino.block[root])?;
        if cur == 0 {
            cur = self.alloc_zeroed(goal)?;
            ino.block[root] = cur as u32;
            ino.blocks512 += per;
        }
        let mut blk = vec![0u8; self.bs as usize];
        for (depth, &idx) in path[..root_depth(root)].iter().enumerate() {
            let last = depth + 1 == root_depth(root);
            self.read_block(cur, &mut blk)?;
            let next = self.check_ptr(le32(&blk, (idx * 4) as usize))?;
            if next != 0 {
                cur = next;
                continue;
            }
            let new = if last { self.alloc_block(goal)? } else { self.alloc_zeroed(goal)? };
            put32(&mut blk, (idx * 4) as usize, new as u32);
            self.write_block(cur, &blk)?;
            ino.blocks512 += per;
            if last {
                return Ok((new, true));
            }
            cur = new;
        }
        Ok((cur, false))
    }

    /// Write `data` at byte `off` of regular file `ino` (growing it; holes stay holes).
    /// Returns the bytes written: fewer than asked only when the disk filled up after some
    /// were written (then the inode still records every block it got).
    pub fn write(&mut self, ino: &mut Inode, off: u64, data: &[u8]) -> Result<usize> {
        self.writable()?;
        if !ino.is_reg() {
            return Err(if ino.is_dir() { FsError::IsDir } else { FsError::InvalidArgument });
        }
        let end = off.checked_add(data.len() as u64).ok_or(FsError::InvalidArgument)?;
        if end > (1u64 << 31) - 1 && self.sb.feature_ro_compat & super::ext2::RO_COMPAT_LARGE_FILE == 0 {
            return Err(FsError::InvalidArgument);
        }
        self.write_data(ino, off, data)
    }

    /// The body of `write`, for regular files and the block of a long symbolic link.
    fn write_data(&mut self, ino: &mut Inode, off: u64, data: &[u8]) -> Result<usize> {
        let bs = self.bs as usize;
        let mut done = 0usize;
        let mut blk = vec![0u8; bs];
        let mut err = None;
        while done < data.len() {
            let pos = off + done as u64;
            let (lblk, at) = (pos / self.bs, (pos % self.bs) as usize);
            let n = (data.len() - done).min(bs - at);
            let (b, fresh) = match self.bmap_alloc(ino, lblk) {
                Ok(x) => x,
                Err(e) => {
                    err = Some(e);
                    break;
                }
            };
            if n == bs {
                blk.copy_from_slice(&data[done..done + n]);
            } else if fresh {
                blk.fill(0);
            } else if let Err(e) = self.read_block(b, &mut blk) {
                err = Some(e);
                break;
            }
            blk[at..at + n].copy_from_slice(&data[done..done + n]);
            if let Err(e) = self.write_block(b, &blk) {
                err = Some(e);
                break;
            }
            self.dirty_data.insert(b);
            done += n;
        }
        if done > 0 {
            ino.size = ino.size.max(off + done as u64);
            ino.mtime = self.now();
            ino.ctime = ino.mtime;
        }
        self.write_inode(ino)?;
        match err {
            Some(e) if done == 0 => Err(e),
            _ => Ok(done),
        }
    }

    /// Free the blocks of the subtree at `*ptr` (an indirect block of `level`, 0 = a data block)
    /// that map logical blocks at or past `keep`; the subtree starts at logical block `base`.
    fn free_tree(&mut self, ptr: &mut u32, level: u32, base: u64, keep: u64, ino: &mut Inode, budget: &mut u64) -> Result<()> {
        let b = self.check_ptr(*ptr)?;
        if b == 0 {
            return Ok(());
        }
        *budget = budget.checked_sub(1).ok_or(FsError::Corrupt("block tree larger than the file system"))?;
        let p = self.bs / 4;
        let span = p.pow(level);
        if level > 0 {
            let mut blk = vec![0u8; self.bs as usize];
            self.read_block(b, &mut blk)?;
            let mut changed = false;
            for i in 0..p {
                let child_base = base + i * (span / p);
                if child_base + span / p <= keep {
                    continue;
                }
                let mut c = le32(&blk, (i * 4) as usize);
                if c == 0 {
                    continue;
                }
                self.free_tree(&mut c, level - 1, child_base, keep, ino, budget)?;
                if c == 0 {
                    put32(&mut blk, (i * 4) as usize, 0);
                    changed = true;
                }
            }
            if base < keep {
                if changed {
                    self.write_block(b, &blk)?;
                }
                return Ok(());
            }
        } else if base < keep {
            return Ok(());
        }
        self.free_block(b)?;
        ino.blocks512 = ino.blocks512.saturating_sub((self.bs / 512) as u32);
        *ptr = 0;
        Ok(())
    }

    /// Set the size of regular file `ino`: shrinking frees the blocks past the end (and zeroes
    /// the rest of the last block, so growing again reads zeros); growing leaves a hole.
    pub fn truncate(&mut self, ino: &mut Inode, size: u64) -> Result<()> {
        self.writable()?;
        if ino.is_dir() {
            return Err(FsError::IsDir);
        }
        if !ino.is_reg() {
            return Err(FsError::InvalidArgument);
        }
        if size < ino.size {
            self.free_from(ino, size)?;
            let at = (size % self.bs) as usize;
            if at != 0 {
                let b = self.bmap(ino, size / self.bs)?;
                if b != 0 {
                    let mut blk = vec![0u8; self.bs as usize];
                    self.read_block(b, &mut blk)?;
                    blk[at..].fill(0);
                    self.write_block(b, &blk)?;
                    self.dirty_data.insert(b);
                }
            }
        }
        ino.size = size;
        ino.mtime = self.now();
        ino.ctime = ino.mtime;
        self.write_inode(ino)
    }

    /// Free every block of `ino` that maps bytes at or past `size`.
    fn free_from(&mut self, ino: &mut Inode, size: u64) -> Result<()> {
        let keep = size.div_ceil(self.bs);
        let p = self.bs / 4;
        let mut budget = self.sb.blocks_count as u64;
        for l in keep.min(12)..12 {
            let mut ptr = ino.block[l as usize];
            self.free_tree(&mut ptr, 0, l, keep, ino, &mut budget)?;
            ino.block[l as usize] = ptr;
        }
        let roots = [(12usize, 1u32, 12u64), (13, 2, 12 + p), (14, 3, 12 + p + p * p)];
        for (slot, level, base) in roots {
            let mut ptr = ino.block[slot];
            self.free_tree(&mut ptr, level, base, keep, ino, &mut budget)?;
            ino.block[slot] = ptr;
        }
        Ok(())
    }

    /// Add `name -> ino` to directory `dir` (in the first gap big enough, else a new block).
    fn add_entry(&mut self, dir: &mut Inode, name: &[u8], ino: u32, ft: u8) -> Result<()> {
        let need = rec_need(name.len());
        let ft = if self.sb.feature_incompat & INCOMPAT_FILETYPE != 0 { ft } else { 0 };
        let bs = self.bs as usize;
        let mut blk = vec![0u8; bs];
        let nblocks = dir.size / self.bs;
        let fill = |blk: &mut [u8], at: usize, rec_len: usize| {
            put32(blk, at, ino);
            put16(blk, at + 4, rec_len as u16);
            blk[at + 6] = name.len() as u8;
            blk[at + 7] = ft;
            blk[at + 8..at + 8 + name.len()].copy_from_slice(name);
        };
        for l in 0..nblocks {
            let b = self.bmap(dir, l)?;
            if b == 0 {
                return Err(FsError::Corrupt("directory with a hole"));
            }
            self.read_block(b, &mut blk)?;
            let mut at = 0;
            while at + 8 <= bs {
                let e_ino = le32(&blk, at);
                let rec = le16(&blk, at + 4) as usize;
                let nl = blk[at + 6] as usize;
                if rec < 8 || at + rec > bs || 8 + nl > rec {
                    return Err(FsError::Corrupt("directory entry with an impossible length"));
                }
                let used = if e_ino == 0 { 0 } else { rec_need(nl) };
                if rec - used >= need {
                    if e_ino == 0 {
                        fill(&mut blk, at, rec);
                    } else {
                        put16(&mut blk, at + 4, used as u16);
                        fill(&mut blk, at + used, rec - used);
                    }
                    self.write_block(b, &blk)?;
                    return self.touch_dir(dir);
                }
                at += rec;
            }
        }
        let (b, _) = self.bmap_alloc(dir, nblocks)?;
        blk.fill(0);
        fill(&mut blk, 0, bs);
        self.write_block(b, &blk)?;
        dir.size += self.bs;
        self.touch_dir(dir)
    }

    /// A directory changed: new times, and no htree index any more (it would be stale).
    fn touch_dir(&mut self, dir: &mut Inode) -> Result<()> {
        dir.flags &= !INODE_INDEX_FL;
        dir.mtime = self.now();
        dir.ctime = dir.mtime;
        self.write_inode(dir)
    }

    /// Remove `name` from directory `dir`; returns the inode it named.
    fn remove_entry(&mut self, dir: &mut Inode, name: &[u8]) -> Result<u32> {
        let bs = self.bs as usize;
        let mut blk = vec![0u8; bs];
        for l in 0..dir.size / self.bs {
            let b = self.bmap(dir, l)?;
            if b == 0 {
                return Err(FsError::Corrupt("directory with a hole"));
            }
            self.read_block(b, &mut blk)?;
            let (mut at, mut prev) = (0usize, None);
            while at + 8 <= bs {
                let e_ino = le32(&blk, at);
                let rec = le16(&blk, at + 4) as usize;
                let nl = blk[at + 6] as usize;
                if rec < 8 || at + rec > bs || 8 + nl > rec {
                    return Err(FsError::Corrupt("directory entry with an impossible length"));
                }
                if e_ino != 0 && &blk[at + 8..at + 8 + nl] == name {
                    match prev {
                        Some(p) => {
                            let prec = le16(&blk, p + 4) as usize;
                            put16(&mut blk, p + 4, (prec + rec) as u16);
                        }
                        None => put32(&mut blk, at, 0),
                    }
                    self.write_block(b, &blk)?;
                    self.touch_dir(dir)?;
                    return Ok(e_ino);
                }
                prev = Some(at);
                at += rec;
            }
        }
        Err(FsError::NotFound)
    }

    /// The parent directory of `path` and the new name in it.
    fn parent_of<'p>(&mut self, path: &'p [u8]) -> Result<(Inode, &'p [u8])> {
        let (parent, name) = split_path(path)?;
        let dir = self.resolve(parent)?;
        if !dir.is_dir() {
            return Err(FsError::NotDir);
        }
        Ok((dir, name))
    }

    fn new_inode(&self, ino: u32, mode: u16, links: u16) -> Inode {
        let t = self.now();
        Inode { ino, mode, uid: 0, gid: 0, size: 0, atime: t, ctime: t, mtime: t, links, blocks512: 0, flags: 0, block: [0; 15], raw: [0; 128] }
    }

    /// Make an empty regular file (`Exists` if the name is taken).
    pub fn create(&mut self, path: &[u8], perm: u16) -> Result<Inode> {
        self.writable()?;
        let (mut dir, name) = self.parent_of(path)?;
        match self.lookup(&dir, name) {
            Ok(_) => return Err(FsError::Exists),
            Err(FsError::NotFound) => {}
            Err(e) => return Err(e),
        }
        let n = self.alloc_inode(false, self.group_of(dir.ino))?;
        let mut ino = self.new_inode(n, S_IFREG | (perm & 0o7777), 1);
        self.write_inode(&mut ino)?;
        if let Err(e) = self.add_entry(&mut dir, name, n, FT_REG) {
            let _ = self.free_inode(n, false);
            return Err(e);
        }
        Ok(ino)
    }

    /// Make a directory with `.` and `..`.
    pub fn mkdir(&mut self, path: &[u8], perm: u16) -> Result<Inode> {
        self.writable()?;
        let (mut dir, name) = self.parent_of(path)?;
        match self.lookup(&dir, name) {
            Ok(_) => return Err(FsError::Exists),
            Err(FsError::NotFound) => {}
            Err(e) => return Err(e),
        }
        let n = self.alloc_inode(true, self.group_of(dir.ino))?;
        let mut ino = self.new_inode(n, S_IFDIR | (perm & 0o7777), 2);
        let b = match self.alloc_block(self.group_of(n)) {
            Ok(b) => b,
            Err(e) => {
                let _ = self.free_inode(n, true);
                return Err(e);
            }
        };
        let bs = self.bs as usize;
        let mut blk = vec![0u8; bs];
        let ft = if self.sb.feature_incompat & INCOMPAT_FILETYPE != 0 { FT_DIR } else { 0 };
        put32(&mut blk, 0, n);
        put16(&mut blk, 4, 12);
        blk[6] = 1;
        blk[7] = ft;
        blk[8] = b'.';
        put32(&mut blk, 12, dir.ino);
        put16(&mut blk, 16, (bs - 12) as u16);
        blk[18] = 2;
        blk[19] = ft;
        blk[20] = b'.';
        blk[21] = b'.';
        self.write_block(b, &blk)?;
        ino.block[0] = b as u32;
        ino.size = self.bs;
        ino.blocks512 = (self.bs / 512) as u32;
        self.write_inode(&mut ino)?;
        self.add_entry(&mut dir, name, n, FT_DIR)?;
        dir.links = dir.links.saturating_add(1);
        self.write_inode(&mut dir)?;
        Ok(ino)
    }

    /// Another name for an existing file (not a directory).
    pub fn link(&mut self, existing: &[u8], new: &[u8]) -> Result<()> {
        self.writable()?;
        let mut target = self.resolve(existing)?;
        if target.is_dir() {
            return Err(FsError::IsDir);
        }
        let (mut dir, name) = self.parent_of(new)?;
        if self.lookup(&dir, name).is_ok() {
            return Err(FsError::Exists);
        }
        if target.links == u16::MAX {
            return Err(FsError::NoSpace);
        }
        target.links += 1;
        self.write_inode(&mut target)?;
        self.add_entry(&mut dir, name, target.ino, ft_of(&target))
    }

    /// A symbolic link at `path` pointing at `target` (kept as given, not resolved).
    pub fn symlink(&mut self, target: &[u8], path: &[u8]) -> Result<Inode> {
        self.writable()?;
        if target.is_empty() {
            return Err(FsError::InvalidArgument);
        }
        if target.len() >= 4096 || target.len() as u64 >= self.bs {
            return Err(FsError::NameTooLong);
        }
        let (mut dir, name) = self.parent_of(path)?;
        match self.lookup(&dir, name) {
            Ok(_) => return Err(FsError::Exists),
            Err(FsError::NotFound) => {}
            Err(e) => return Err(e),
        }
        let n = self.alloc_inode(false, self.group_of(dir.ino))?;
        let mut ino = self.new_inode(n, S_IFLNK | 0o777, 1);
        if target.len() <= FAST_SYMLINK_MAX {
            let mut bytes = [0u8; 60];
            bytes[..target.len()].copy_from_slice(target);
            for (i, b) in ino.block.iter_mut().enumerate() {
                *b = le32(&bytes, 4 * i);
            }
            ino.size = target.len() as u64;
            self.write_inode(&mut ino)?;
        } else {
            // A slow link: the target in a data block.
            self.write_inode(&mut ino)?;
            match self.write_data(&mut ino, 0, target) {
                Ok(k) if k == target.len() => {}
                Ok(_) | Err(_) => {
                    let _ = self.release(&mut ino, false);
                    return Err(FsError::NoSpace);
                }
            }
        }
        if let Err(e) = self.add_entry(&mut dir, name, n, FT_SYMLINK) {
            let _ = self.free_inode(n, false);
            return Err(e);
        }
        Ok(ino)
    }

    /// Remove a name of a file (or symbolic link); the file goes when its last name does.
    pub fn unlink(&mut self, path: &[u8]) -> Result<()> {
        self.unlink_with(path, &|_| false).map(|_| ())
    }

    /// `unlink`, but a file whose last name goes while `open(ino)` says it is open keeps its
    /// blocks (an orphan: link count 0) until `release_orphan`. Returns the orphan's number.
    pub fn unlink_with(&mut self, path: &[u8], open: &dyn Fn(u32) -> bool) -> Result<Option<u32>> {
        self.writable()?;
        let (mut dir, name) = self.parent_of(path)?;
        let n = self.lookup(&dir, name)?;
        let mut ino = self.inode(n)?;
        if ino.is_dir() {
            return Err(FsError::IsDir);
        }
        self.remove_entry(&mut dir, name)?;
        ino.links = ino.links.saturating_sub(1);
        ino.ctime = self.now();
        if ino.links == 0 {
            if open(n) {
                self.write_inode(&mut ino)?;
                return Ok(Some(n));
            }
            return self.release(&mut ino, false).map(|()| None);
        }
        self.write_inode(&mut ino).map(|()| None)
    }

    /// Free an orphan left by `unlink_with` (its last descriptor closed). Nothing happens if
    /// it has a name again (`links` above 0).
    pub fn release_orphan(&mut self, n: u32) -> Result<()> {
        let mut ino = self.inode(n)?;
        if ino.links != 0 {
            return Ok(());
        }
        let dir = ino.is_dir();
        self.release(&mut ino, dir)
    }

    /// An inode with no name left: free its blocks and itself.
    fn release(&mut self, ino: &mut Inode, dir: bool) -> Result<()> {
        if self.is_fast_symlink(ino) {
            // Its "block pointers" are the target's bytes: nothing to free.
            ino.block = [0; 15];
        } else {
            self.free_from(ino, 0)?;
        }
        ino.size = 0;
        ino.links = 0;
        put32(&mut ino.raw, 20, self.now()); // dtime: e2fsck wants it set on a freed inode
        self.write_inode(ino)?;
        self.free_inode(ino.ino, dir)
    }

    /// Remove an empty directory.
    pub fn rmdir(&mut self, path: &[u8]) -> Result<()> {
        self.writable()?;
        let (mut parent, name) = self.parent_of(path)?;
        let n = self.lookup(&parent, name)?;
        if n == ROOT_INO {
            return Err(FsError::InvalidArgument);
        }
        let mut ino = self.inode(n)?;
        if !ino.is_dir() {
            return Err(FsError::NotDir);
        }
        let busy = self.scan_dir(&ino, |_, _, nm| (nm != b"." && nm != b"..").then_some(()))?;
        if busy.is_some() {
            return Err(FsError::NotEmpty);
        }
        self.remove_entry(&mut parent, name)?;
        parent.links = parent.links.saturating_sub(1);
        self.write_inode(&mut parent)?;
        self.release(&mut ino, true)
    }
}


impl<D: Disk> Ext2<D> {
    /// Rename `old` to `new` (POSIX: a file replaces a file, an empty directory replaces an
    /// empty directory; a directory cannot move into itself). The new name is added before the
    /// old one goes, so a crash in between leaves two names (e2fsck fixes the count), never none.
    pub fn rename(&mut self, old: &[u8], new: &[u8]) -> Result<()> {
        self.writable()?;
        let (op, oname) = self.parent_of(old)?;
        let ino_n = self.lookup(&op, oname)?;
        let moving = self.inode(ino_n)?;
        let (np, nname) = self.parent_of(new)?;
        let (op_n, np_n) = (op.ino, np.ino);
        if moving.is_dir() && op_n != np_n {
            // The new parent must not be the directory itself or inside it.
            let mut cur = np_n;
            let mut steps = 0u32;
            while cur != ROOT_INO {
                if cur == ino_n {
                    return Err(FsError::InvalidArgument);
                }
                steps += 1;
                if steps > 4096 {
                    return Err(FsError::Corrupt("directory tree deeper than 4096 (a loop?)"));
                }
                let d = self.inode(cur)?;
                cur = self.lookup(&d, b"..")?;
            }
        }
        match self.lookup(&np, nname) {
            Ok(existing) if existing == ino_n => return Ok(()),
            Ok(existing) => {
                let e = self.inode(existing)?;
                match (moving.is_dir(), e.is_dir()) {
                    (true, true) => {
                        let path = new;
                        self.rmdir(path)?;
                    }
                    (false, false) => self.unlink(new)?,
                    (true, false) => return Err(FsError::NotDir),
                    (false, true) => return Err(FsError::IsDir),
                }
            }
            Err(FsError::NotFound) => {}
            Err(e) => return Err(e),
        }
        let ft = ft_of(&moving);
        // Fresh copies each time: the parents may be the same inode, changed by the step before.
        let mut np = self.inode(np_n)?;
        self.add_entry(&mut np, nname, ino_n, ft)?;
        let mut op = self.inode(op_n)?;
        self.remove_entry(&mut op, oname)?;
        if moving.is_dir() && op_n != np_n {
            // `..` of the moved directory names its new parent; the link counts follow.
            let b = self.bmap(&moving, 0)?;
            if b == 0 {
                return Err(FsError::Corrupt("directory with a hole"));
            }
            let mut blk = vec![0u8; self.bs as usize];
            self.read_block(b, &mut blk)?;
            let mut at = 0usize;
            let mut fixed = false;
            while at + 8 <= blk.len() {
                let rec = le16(&blk, at + 4) as usize;
                let nl = blk[at + 6] as usize;
                if rec < 8 || at + rec > blk.len() || 8 + nl > rec {
                    return Err(FsError::Corrupt("directory entry with an impossible length"));
                }
                if &blk[at + 8..at + 8 + nl] == b".." {
                    put32(&mut blk, at, np_n);
                    fixed = true;
                    break;
                }
                at += rec;
            }
            if !fixed {
                return Err(FsError::Corrupt("directory without `..`"));
            }
            self.write_block(b, &blk)?;
            let mut op = self.inode(op_n)?;
            op.links = op.links.saturating_sub(1);
            self.write_inode(&mut op)?;
            let mut np = self.inode(np_n)?;
            np.links = np.links.saturating_add(1);
            self.write_inode(&mut np)?;
        }
        let mut m = self.inode(ino_n)?;
        m.ctime = self.now();
        self.write_inode(&mut m)
    }
}

/// How many levels of indirect blocks hang under root slot `root` (12, 13, 14).
fn root_depth(root: usize) -> usize {
    root - 11
}
