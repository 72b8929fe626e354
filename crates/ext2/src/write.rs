//! Writing ext2 (the other half of `lib.rs`, same rules: `core` and `alloc` only, no
//! `unsafe`, every on-disk number checked): block and inode
//! allocation through the bitmaps (counts kept in the group descriptors and the superblock),
//! block mapping with indirect blocks allocated on demand, file writes (sparse files keep their
//! holes), truncate. Directory operations (create, mkdir, symlink, link, unlink, rmdir, rename)
//! are in `dir.rs`.
//!
//! Everything goes through the `Disk` (the buffer cache in the library OS); nothing here
//! orders writes. The caller's sync writes the data blocks recorded in `dirty_data` first, then
//! the metadata, so a crash between the two leaves data without the metadata naming it, which
//! `e2fsck -fy` repairs, never metadata naming blocks that were not written.
//!
//! Not yet: access times, timestamps from a clock (new times are the superblock's last write
//! time).

use alloc::vec;

use crate::{le32, Disk, Ext2, FsError, Inode, Reserve, Result, RESERVE_BLOCKS, RESERVE_CORES, RESERVE_INODES, S_IFMT, S_IFREG};

#[inline]
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

impl<D: Disk> Ext2<D> {
    pub(crate) fn writable(&self) -> Result<()> {
        if self.sb.writable() {
            Ok(())
        } else {
            Err(FsError::ReadOnly)
        }
    }

    /// The time new and changed inodes get (no clock yet: the last write time on the disk).
    pub(crate) fn now(&self) -> u32 {
        self.sb.wtime.max(1)
    }

    pub fn write_block(&mut self, b: u64, buf: &[u8]) -> Result<()> {
        if b <= self.sb.first_data_block as u64 || b >= self.sb.blocks_count as u64 {
            return Err(FsError::Corrupt("write to a block outside the data area"));
        }
        self.dev.write_at(b * self.bs, &buf[..self.bs as usize])
    }

    /// Write bytes `lo..hi` of block `b` (whose whole contents are `buf`) and no others.
    pub(crate) fn write_block_range(&mut self, b: u64, buf: &[u8], lo: usize, hi: usize) -> Result<()> {
        if b <= self.sb.first_data_block as u64 || b >= self.sb.blocks_count as u64 {
            return Err(FsError::Corrupt("write to a block outside the data area"));
        }
        let hi = hi.min(self.bs as usize);
        if lo >= hi {
            return Ok(());
        }
        self.dev.write_at(b * self.bs + lo as u64, &buf[lo..hi])
    }

    /// Write group `g`'s descriptor back (fields this code does not know are kept).
    pub(crate) fn write_group(&mut self, g: usize) -> Result<()> {
        self.counts_gen += 1;
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

    pub(crate) fn write_super(&mut self) -> Result<()> {
        self.counts_gen += 1;
        let mut b = [0u8; 1024];
        self.dev.read_at(1024, &mut b)?;
        put32(&mut b, 12, self.sb.free_blocks_count);
        put32(&mut b, 16, self.sb.free_inodes_count);
        put32(&mut b, 100, self.sb.feature_ro_compat);
        self.dev.write_at(1024, &b)
    }

    pub(crate) fn itable_blocks(&self) -> u64 {
        (self.sb.inodes_per_group as u64 * self.sb.inode_size as u64).div_ceil(self.bs)
    }

    /// Take a free block, looking in group `goal` first: from the calling core's reserve when
    /// reserves are on (refilled from the bitmaps in a batch when empty), else from the
    /// bitmaps.
    pub fn alloc_block(&mut self, goal: usize) -> Result<u64> {
        self.writable()?;
        if let Some(c) = self.reserve_slot() {
            if self.reserves[c].n_blocks == 0 {
                match self.fill_block_reserve(c, goal) {
                    Ok(()) => {}
                    // Other cores' reserves may hold the last free blocks: give every reserve
                    // back and take one from the bitmaps.
                    Err(FsError::NoSpace) => {
                        self.return_reserves()?;
                        return self.alloc_block_bitmap(goal);
                    }
                    Err(e) => return Err(e),
                }
            }
            let r = &mut self.reserves[c];
            r.n_blocks -= 1;
            return Ok(r.blocks[r.n_blocks]);
        }
        self.alloc_block_bitmap(goal)
    }

    /// Up to `max` free blocks of one group (group `goal` first) marked used in the bitmap,
    /// the counts lowered by as many. `NoSpace` if no group has one.
    fn take_blocks(&mut self, goal: usize, max: usize, out: &mut [u64]) -> Result<usize> {
        if self.frozen {
            return Err(FsError::Contended);
        }
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
            let grp = self.groups[g];
            let it = grp.inode_table as u64;
            let mut n = 0;
            for i in 0..count {
                if n == max || n == grp.free_blocks as usize {
                    break;
                }
                if bits[(i / 8) as usize] & (1 << (i % 8)) != 0 {
                    continue;
                }
                let b = first + i;
                if b <= self.sb.first_data_block as u64 || b == grp.block_bitmap as u64 || b == grp.inode_bitmap as u64 || (b >= it && b < it + self.itable_blocks()) {
                    return Err(FsError::Corrupt("block bitmap marks metadata free"));
                }
                bits[(i / 8) as usize] |= 1 << (i % 8);
                out[n] = b;
                n += 1;
            }
            if n == 0 {
                continue;
            }
            self.write_block(bm, &bits)?;
            self.groups[g].free_blocks -= n as u16;
            self.sb.free_blocks_count = self.sb.free_blocks_count.saturating_sub(n as u32);
            self.write_group(g)?;
            self.write_super()?;
            return Ok(n);
        }
        Err(FsError::NoSpace)
    }

    fn alloc_block_bitmap(&mut self, goal: usize) -> Result<u64> {
        let mut b = [0u64; 1];
        self.take_blocks(goal, 1, &mut b)?;
        Ok(b[0])
    }

    /// Refill core `c`'s empty block reserve with a batch from the bitmaps.
    fn fill_block_reserve(&mut self, c: usize, goal: usize) -> Result<()> {
        let mut got = [0u64; RESERVE_BLOCKS];
        let n = self.take_blocks(goal, RESERVE_BLOCKS, &mut got)?;
        // Handed out from the end: lowest block first.
        let r = &mut self.reserves[c];
        for (k, &b) in got[..n].iter().rev().enumerate() {
            r.blocks[k] = b;
        }
        r.n_blocks = n;
        Ok(())
    }

    /// A free block, zeroed (indirect blocks, directory blocks).
    pub(crate) fn alloc_zeroed(&mut self, goal: usize) -> Result<u64> {
        let b = self.alloc_block(goal)?;
        let z = vec![0u8; self.bs as usize];
        if let Err(e) = self.write_block(b, &z) {
            let _ = self.free_block(b);
            return Err(e);
        }
        Ok(b)
    }

    /// Free block `b`: into the calling core's reserve while it has room (reserves on), else
    /// into the bitmap. `Corrupt` if it is outside the file system or already free.
    pub fn free_block(&mut self, b: u64) -> Result<()> {
        let (g, i, bm) = self.block_bit(b)?;
        // The one byte of the bitmap that holds the bit (not the whole block: this runs on
        // every free).
        if !self.bit_set(bm, i)? {
            return Err(FsError::Corrupt("freeing a block that is already free"));
        }
        self.dirty_data.remove(&b);
        if let Some(c) = self.reserve_slot() {
            let r = &mut self.reserves[c];
            if r.blocks[..r.n_blocks].contains(&b) {
                return Err(FsError::Corrupt("freeing a block that is already free"));
            }
            if r.n_blocks < RESERVE_BLOCKS {
                r.blocks[r.n_blocks] = b;
                r.n_blocks += 1;
                return Ok(());
            }
        }
        if self.frozen {
            // Marked used, not counted free: given back with the reserves.
            self.spilled_blocks.try_reserve(1).map_err(|_| FsError::NoMemory)?;
            self.spilled_blocks.push(b);
            return Ok(());
        }
        self.clear_block_bit_at(g, i, bm)
    }

    /// Whether bit `i` of the bitmap in block `bm` is set (reads one byte).
    fn bit_set(&mut self, bm: u64, i: u64) -> Result<bool> {
        if bm >= self.sb.blocks_count as u64 {
            return Err(FsError::Corrupt("bitmap past the end of the file system"));
        }
        let mut byte = [0u8; 1];
        self.dev.read_at(bm * self.bs + i / 8, &mut byte)?;
        Ok(byte[0] & (1 << (i % 8)) != 0)
    }

    /// Block `b`'s group, bit in the group's bitmap, and the bitmap's block.
    fn block_bit(&self, b: u64) -> Result<(usize, u64, u64)> {
        if b <= self.sb.first_data_block as u64 || b >= self.sb.blocks_count as u64 {
            return Err(FsError::Corrupt("freeing a block outside the file system"));
        }
        let rel = b - self.sb.first_data_block as u64;
        let g = (rel / self.sb.blocks_per_group as u64) as usize;
        let i = rel % self.sb.blocks_per_group as u64;
        let bm = self.groups.get(g).ok_or(FsError::Corrupt("block in no group"))?.block_bitmap as u64;
        Ok((g, i, bm))
    }

    /// Take a free inode (group `goal` first) and zero its slot on the disk. A regular file's
    /// or symbolic link's comes from the calling core's reserve when reserves are on; a
    /// directory's always from the bitmap (its group's `used_dirs` count changes with it).
    pub(crate) fn alloc_inode(&mut self, dir: bool, goal: usize) -> Result<u32> {
        self.writable()?;
        // On the frozen side a directory's inode comes from the reserve too, its group's
        // `used_dirs` raised later (`pending_dirs`, `fold_pending_dirs`).
        let from_reserve = !dir || self.frozen;
        let ino = match self.reserve_slot() {
            Some(c) if from_reserve => {
                if self.reserves[c].n_inodes == 0 {
                    match self.fill_inode_reserve(c, goal) {
                        Ok(()) => {}
                        Err(FsError::NoSpace) => self.return_reserves()?,
                        Err(e) => return Err(e),
                    }
                }
                if dir {
                    self.pending_dirs.try_reserve(1).map_err(|_| FsError::NoMemory)?;
                }
                let r = &mut self.reserves[c];
                if r.n_inodes > 0 {
                    r.n_inodes -= 1;
                    let ino = r.inodes[r.n_inodes];
                    if dir {
                        self.pending_dirs.push(ino);
                    }
                    ino
                } else {
                    self.alloc_inode_bitmap(dir, goal)?
                }
            }
            _ => self.alloc_inode_bitmap(dir, goal)?,
        };
        // A recycled slot holds its old inode: start from zeros (all `inode_size` bytes).
        let zeroed = self.inode_pos(ino).and_then(|(blk, at)| {
            let z = vec![0u8; self.sb.inode_size as usize];
            self.dev.write_at(blk * self.bs + at as u64, &z)
        });
        if let Err(e) = zeroed {
            let _ = self.free_inode(ino, dir);
            return Err(e);
        }
        Ok(ino)
    }

    /// Up to `max` free inodes marked used in one group's bitmap (group `goal` first), all in
    /// the inode-table block of the first free one (so two cores' batches lie in different
    /// blocks), the counts lowered by as many. `NoSpace` if no group has one.
    fn take_inodes(&mut self, dir: bool, goal: usize, max: usize, out: &mut [u32]) -> Result<usize> {
        if self.frozen {
            return Err(FsError::Contended);
        }
        let ng = self.groups.len();
        let ipg = self.sb.inodes_per_group as u64;
        let per_block = (self.bs / self.sb.inode_size as u64).max(1);
        let mut bits = vec![0u8; self.bs as usize];
        for k in 0..ng {
            let g = (goal + k) % ng;
            if self.groups[g].free_inodes == 0 {
                continue;
            }
            let bm = self.groups[g].inode_bitmap as u64;
            self.read_block(bm, &mut bits)?;
            let first_ok = self.sb.first_ino as u64;
            let usable = |bits: &[u8], i: u64| g as u64 * ipg + i + 1 >= first_ok && g as u64 * ipg + i < self.sb.inodes_count as u64 && bits[(i / 8) as usize] & (1 << (i % 8)) == 0;
            let Some(i0) = (0..ipg).find(|&i| usable(&bits, i)) else { continue };
            let end = ((i0 / per_block + 1) * per_block).min(ipg);
            let mut n = 0;
            for i in i0..end {
                if n == max || n == self.groups[g].free_inodes as usize {
                    break;
                }
                if usable(&bits, i) {
                    bits[(i / 8) as usize] |= 1 << (i % 8);
                    out[n] = (g as u64 * ipg + i + 1) as u32;
                    n += 1;
                }
            }
            self.write_block(bm, &bits)?;
            self.groups[g].free_inodes -= n as u16;
            if dir {
                self.groups[g].used_dirs = self.groups[g].used_dirs.saturating_add(n as u16);
            }
            self.sb.free_inodes_count = self.sb.free_inodes_count.saturating_sub(n as u32);
            self.write_group(g)?;
            self.write_super()?;
            return Ok(n);
        }
        Err(FsError::NoSpace)
    }

    fn alloc_inode_bitmap(&mut self, dir: bool, goal: usize) -> Result<u32> {
        let mut n = [0u32; 1];
        self.take_inodes(dir, goal, 1, &mut n)?;
        Ok(n[0])
    }

    /// Refill core `c`'s empty inode reserve with a batch from the bitmaps.
    fn fill_inode_reserve(&mut self, c: usize, goal: usize) -> Result<()> {
        let mut got = [0u32; RESERVE_INODES];
        let n = self.take_inodes(false, goal, RESERVE_INODES, &mut got)?;
        let r = &mut self.reserves[c];
        for (k, &i) in got[..n].iter().rev().enumerate() {
            r.inodes[k] = i;
        }
        r.n_inodes = n;
        Ok(())
    }

    /// Free inode `ino`: a regular file's or link's into the calling core's reserve while it
    /// has room (reserves on), else into the bitmap. `Corrupt` if it is already free.
    pub(crate) fn free_inode(&mut self, ino: u32, dir: bool) -> Result<()> {
        let (g, i, bm) = self.inode_bit(ino)?;
        if !self.bit_set(bm, i)? {
            return Err(FsError::Corrupt("freeing an inode that is already free"));
        }
        // A directory made on this core whose `used_dirs` was never raised: freed as a file.
        let dir = match self.pending_dirs.iter().position(|&d| d == ino) {
            Some(k) if dir => {
                self.pending_dirs.swap_remove(k);
                false
            }
            _ => dir,
        };
        if let Some(c) = self.reserve_slot() {
            let r = &mut self.reserves[c];
            if r.inodes[..r.n_inodes].contains(&ino) {
                return Err(FsError::Corrupt("freeing an inode that is already free"));
            }
            if !dir && r.n_inodes < RESERVE_INODES {
                r.inodes[r.n_inodes] = ino;
                r.n_inodes += 1;
                return Ok(());
            }
        }
        if self.frozen {
            self.spilled_inodes.try_reserve(1).map_err(|_| FsError::NoMemory)?;
            self.spilled_inodes.push((ino, dir));
            return Ok(());
        }
        let mut bits = vec![0u8; self.bs as usize];
        self.read_block(bm, &mut bits)?;
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

    /// Inode `ino`'s group, bit in the group's bitmap, and the bitmap's block.
    fn inode_bit(&self, ino: u32) -> Result<(usize, u64, u64)> {
        if ino == 0 || ino > self.sb.inodes_count {
            return Err(FsError::Corrupt("freeing an inode out of range"));
        }
        let idx = (ino - 1) as u64;
        let ipg = self.sb.inodes_per_group as u64;
        let g = (idx / ipg) as usize;
        let bm = self.groups.get(g).ok_or(FsError::Corrupt("inode in no group"))?.inode_bitmap as u64;
        Ok((g, idx % ipg, bm))
    }

    /// The calling core's reserve (made on first use), or `None` when reserves are off or the
    /// core is past `RESERVE_CORES` (then it allocates from the bitmaps).
    fn reserve_slot(&mut self) -> Option<usize> {
        let c = (self.reserve_core?)();
        if c >= RESERVE_CORES {
            return None;
        }
        if self.reserves.len() <= c {
            self.reserves.resize(c + 1, Reserve::default());
        }
        Some(c)
    }

    /// Inodes and blocks the per-core reserves hold (free on the disk's terms: they go back
    /// at the next `return_reserves`).
    pub fn reserved(&self) -> (u64, u64) {
        let (i, b) = self.reserves.iter().fold((0, 0), |(i, b), r| (i + r.n_inodes as u64, b + r.n_blocks as u64));
        (i + self.spilled_inodes.len() as u64, b + self.spilled_blocks.len() as u64)
    }

    /// For `df`: free blocks, blocks, free inodes, inodes. What the per-core reserves hold counts as free
    /// (it goes back to the bitmaps at the next sync).
    pub fn usage(&self) -> (u64, u64, u64, u64) {
        let (ri, rb) = self.reserved();
        (self.sb.free_blocks_count as u64 + rb, self.sb.blocks_count as u64, self.sb.free_inodes_count as u64 + ri, self.sb.inodes_count as u64)
    }

    /// A core whose reserve holds a block, and that block (for tests of double frees).
    pub fn reserves_first_block(&self) -> Option<(usize, u64)> {
        self.reserves.iter().position(|r| r.n_blocks > 0).map(|c| (c, self.reserves[c].blocks[0]))
    }

    /// Give every core's reserve back to the bitmaps and the counts (before a sync, so the
    /// disk's bitmaps and counts are exact: `e2fsck -fn` clean). Everything is given back
    /// even when one entry fails; the first error is returned.
    pub fn return_reserves(&mut self) -> Result<()> {
        if self.frozen {
            return Err(FsError::Contended);
        }
        let mut res = self.fold_pending_dirs();
        for (ino, dir) in core::mem::take(&mut self.spilled_inodes) {
            let x = self.clear_inode_bit(ino);
            if dir && x.is_ok() {
                let g = self.group_of(ino);
                if let Some(grp) = self.groups.get_mut(g) {
                    grp.used_dirs = grp.used_dirs.saturating_sub(1);
                }
                let y = self.write_group(g);
                res = res.and(y);
            }
            res = res.and(x);
        }
        for b in core::mem::take(&mut self.spilled_blocks) {
            let x = self.clear_block_bit(b);
            res = res.and(x);
        }
        let reserves = core::mem::take(&mut self.reserves);
        for r in &reserves {
            for &ino in &r.inodes[..r.n_inodes] {
                let x = self.clear_inode_bit(ino);
                res = res.and(x);
            }
            for &b in &r.blocks[..r.n_blocks] {
                let x = self.clear_block_bit(b);
                res = res.and(x);
            }
        }
        // Keep the (now empty) per-core slots where they are.
        self.reserves = reserves;
        for r in &mut self.reserves {
            r.n_inodes = 0;
            r.n_blocks = 0;
        }
        res
    }

    /// Raise the `used_dirs` count of the group of every directory made on the frozen side
    /// (`pending_dirs`). Not while frozen.
    pub fn fold_pending_dirs(&mut self) -> Result<()> {
        if self.frozen {
            return Err(FsError::Contended);
        }
        let mut res = Ok(());
        // The list keeps its buffer: this runs on whichever core holds the exclusive side,
        // and freeing another core's allocation writes that core's heap lines (seen in the
        // POSIX commutativity audit as `libos::heap::HEAPS` in 380 cases).
        let mut pending = core::mem::take(&mut self.pending_dirs);
        for &ino in &pending {
            let g = self.group_of(ino);
            if let Some(grp) = self.groups.get_mut(g) {
                grp.used_dirs = grp.used_dirs.saturating_add(1);
                let x = self.write_group(g);
                res = res.and(x);
            }
        }
        pending.clear();
        self.pending_dirs = pending;
        res
    }

    /// Whether directories made on the frozen side wait for `fold_pending_dirs`.
    pub fn has_pending_dirs(&self) -> bool {
        !self.pending_dirs.is_empty()
    }

    fn clear_inode_bit(&mut self, ino: u32) -> Result<()> {
        let (g, i, bm) = self.inode_bit(ino)?;
        let mut bits = vec![0u8; self.bs as usize];
        self.read_block(bm, &mut bits)?;
        if bits[(i / 8) as usize] & (1 << (i % 8)) == 0 {
            return Err(FsError::Corrupt("a reserved inode is free in the bitmap"));
        }
        bits[(i / 8) as usize] &= !(1 << (i % 8));
        self.write_block(bm, &bits)?;
        self.groups[g].free_inodes = self.groups[g].free_inodes.saturating_add(1);
        self.sb.free_inodes_count = self.sb.free_inodes_count.saturating_add(1);
        self.write_group(g)?;
        self.write_super()
    }

    fn clear_block_bit(&mut self, b: u64) -> Result<()> {
        let (g, i, bm) = self.block_bit(b)?;
        self.clear_block_bit_at(g, i, bm)
    }

    /// Clear bit `i` of group `g`'s block bitmap (block `bm`) and count the block free.
    fn clear_block_bit_at(&mut self, g: usize, i: u64, bm: u64) -> Result<()> {
        let mut bits = vec![0u8; self.bs as usize];
        self.read_block(bm, &mut bits)?;
        if bits[(i / 8) as usize] & (1 << (i % 8)) == 0 {
            return Err(FsError::Corrupt("a reserved block is free in the bitmap"));
        }
        bits[(i / 8) as usize] &= !(1 << (i % 8));
        self.write_block(bm, &bits)?;
        self.groups[g].free_blocks = self.groups[g].free_blocks.saturating_add(1);
        self.sb.free_blocks_count = self.sb.free_blocks_count.saturating_add(1);
        self.write_group(g)?;
        self.write_super()
    }

    pub(crate) fn group_of(&self, ino: u32) -> usize {
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
        let off = blk * self.bs + at as u64;
        // Unchanged bytes are not written: a write marks the cache page dirty and takes its
        // lock, a line every core using that inode-table block would then share (a
        // directory's inode, rewritten with the same times by each create in it).
        let mut cur = [0u8; 128];
        self.dev.read_at(off, &mut cur)?;
        if cur == ino.raw {
            return Ok(());
        }
        self.dev.write_at(off, &ino.raw)
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
        let (root, path) = indirect_path(lblk, p)?;
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
        self.changing(ino.ino)?;
        if !ino.is_reg() {
            return Err(if ino.is_dir() { FsError::IsDir } else { FsError::InvalidArgument });
        }
        let end = off.checked_add(data.len() as u64).ok_or(FsError::InvalidArgument)?;
        if end > (1u64 << 31) - 1 && self.sb.feature_ro_compat & crate::RO_COMPAT_LARGE_FILE == 0 {
            return Err(FsError::InvalidArgument);
        }
        self.frozen_blocks_ok(ino, off, data.len() as u64)?;
        self.write_data(ino, off, data)
    }

    /// On the per-directory side (`frozen`): `Contended` unless the calling core's reserve
    /// holds every block that writing bytes `off..off + len` of `ino` would allocate (a data
    /// block per hole and the indirect blocks missing on their way), checked before anything
    /// is written, so a write there never meets a refill halfway (a refill reads-modifies-
    /// writes a bitmap and the counts: the exclusive side's). A write that only overwrites
    /// existing blocks needs none. Anything odd on the way (a corrupt pointer, an offset past
    /// the triple-indirect block) is `Contended` too: the exclusive side gives the exact
    /// result (a partial write, `Corrupt`, ...). Off the frozen side it always says yes.
    pub(crate) fn frozen_blocks_ok(&mut self, ino: &Inode, off: u64, len: u64) -> Result<()> {
        if !self.frozen || len == 0 {
            return Ok(());
        }
        let avail = match self.reserve_slot() {
            Some(c) => self.reserves[c].n_blocks as u64,
            None => 0,
        };
        let (first, last) = (off / self.bs, (off + len - 1) / self.bs);
        let nl = last - first + 1;
        let p = self.bs / 4;
        // At most a data block per logical block, and the indirect blocks over them: one
        // root per kind, one double-indirect child per `p` blocks (and one more at each end),
        // as many triple-indirect grandchildren.
        if nl + 3 + 2 * (nl / p + 2) <= avail {
            return Ok(());
        }
        // Indirect blocks counted already (root slot, depth, index prefix): a range's missing
        // subtree is counted once, not once per logical block under it.
        let mut seen: alloc::vec::Vec<(usize, usize, u64)> = alloc::vec::Vec::new();
        let mut need = 0u64;
        for l in first..=last {
            need += self.missing_blocks(ino, l, &mut seen).map_err(|_| FsError::Contended)?;
            if need > avail {
                return Err(FsError::Contended);
            }
        }
        Ok(())
    }

    /// The blocks `bmap_alloc(ino, lblk)` would allocate (without allocating): the data block
    /// if it is a hole, and each indirect block missing on its way not yet in `seen`.
    fn missing_blocks(&mut self, ino: &Inode, lblk: u64, seen: &mut alloc::vec::Vec<(usize, usize, u64)>) -> Result<u64> {
        if lblk < 12 {
            return Ok((self.check_ptr(ino.block[lblk as usize])? == 0) as u64);
        }
        let p = self.bs / 4;
        let (root, path) = indirect_path(lblk, p)?;
        let depth = root_depth(root);
        // The depth of the first missing block on the way (`depth`: the data block).
        let mut missing_from = None;
        let mut cur = self.check_ptr(ino.block[root])?;
        if cur == 0 {
            missing_from = Some(0);
        } else {
            for (k, &idx) in path[..depth].iter().enumerate() {
                let next = self.indirect(cur, idx)?;
                if next == 0 {
                    missing_from = Some(k + 1);
                    break;
                }
                cur = next;
            }
        }
        let Some(k0) = missing_from else { return Ok(0) };
        let mut n = 1; // the data block
        for k in k0..depth {
            // Indirect block at depth k: named by the indexes above it.
            let prefix = path[..k].iter().fold(0u64, |a, &i| a * p + i);
            if !seen.contains(&(root, k, prefix)) {
                seen.try_reserve(1).map_err(|_| FsError::NoMemory)?;
                seen.push((root, k, prefix));
                n += 1;
            }
        }
        Ok(n)
    }

    /// The body of `write`, for regular files and the block of a long symbolic link.
    pub(crate) fn write_data(&mut self, ino: &mut Inode, off: u64, data: &[u8]) -> Result<usize> {
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
            self.dev.note_data(b * self.bs);
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
    pub(crate) fn free_tree(&mut self, ptr: &mut u32, level: u32, base: u64, keep: u64, ino: &mut Inode, budget: &mut u64) -> Result<()> {
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
        self.changing(ino.ino)?;
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
                    self.dev.note_data(b * self.bs);
                }
            }
        }
        ino.size = size;
        ino.mtime = self.now();
        ino.ctime = ino.mtime;
        self.write_inode(ino)
    }

    /// Free every block of `ino` that maps bytes at or past `size`.
    pub(crate) fn free_from(&mut self, ino: &mut Inode, size: u64) -> Result<()> {
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
}

/// Where logical block `lblk` (12 or more) hangs below the inode with `p` pointers per
/// block: the inode's root slot (12 single, 13 double, 14 triple indirect) and the index at
/// each level below it. `InvalidArgument` beyond the triple-indirect tree.
fn indirect_path(lblk: u64, p: u64) -> Result<(usize, [u64; 3])> {
    let mut l = lblk - 12;
    if l < p {
        return Ok((12, [l, 0, 0]));
    }
    l -= p;
    if l < p * p {
        return Ok((13, [l / p, l % p, 0]));
    }
    l -= p * p;
    if l >= p * p * p {
        return Err(FsError::InvalidArgument);
    }
    Ok((14, [l / (p * p), (l / p) % p, l % p]))
}

/// How many levels of indirect blocks hang under root slot `root` (12, 13, 14).
fn root_depth(root: usize) -> usize {
    root - 11
}
