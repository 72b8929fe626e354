//! ext2 directory operations (with `write.rs`, same rules: `core` and `alloc` only, no
//! `unsafe`, every on-disk number checked): entries added in
//! the first gap big enough or a new block, removed by merging into the previous record;
//! create, mkdir, symbolic links (fast below 60 bytes, in the block pointers; slow below 4 KiB,
//! in a data block), hard links, unlink (with in-memory orphans for open files), rmdir, rename.
//!
//! Not yet: an htree index (a directory written here loses its index flag: it is read
//! linearly), the on-disk orphan list.

use alloc::vec;

use crate::{
    le16, le32, Disk, Ext2, FsError, Inode, Result, FAST_SYMLINK_MAX, FT_DIR, FT_REG, FT_SYMLINK, INCOMPAT_FILETYPE, INODE_INDEX_FL, NAME_MAX, ROOT_INO,
    S_IFDIR, S_IFLNK, S_IFMT, S_IFREG,
};
use crate::write::{put16, put32};

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

/// The directory entry at `at` of block `blk`: its inode (0: a free record), its record length
/// and its name's length, checked to lie inside the block.
fn entry_at(blk: &[u8], at: usize) -> Result<(u32, usize, usize)> {
    let rec = le16(blk, at + 4) as usize;
    let nl = blk[at + 6] as usize;
    if rec < 8 || at + rec > blk.len() || 8 + nl > rec {
        return Err(FsError::Corrupt("directory entry with an impossible length"));
    }
    Ok((le32(blk, at), rec, nl))
}

/// Split a path into its parent directory and last name (trailing slashes ignored).
#[inline]
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
    /// Add `name -> ino` to directory `dir` (in the first gap big enough, else a new block).
    pub(crate) fn add_entry(&mut self, dir: &mut Inode, name: &[u8], ino: u32, ft: u8) -> Result<()> {
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
                let (e_ino, rec, nl) = entry_at(&blk, at)?;
                let used = if e_ino == 0 { 0 } else { rec_need(nl) };
                if rec - used >= need {
                    if e_ino == 0 {
                        fill(&mut blk, at, rec);
                    } else {
                        put16(&mut blk, at + 4, used as u16);
                        fill(&mut blk, at + used, rec - used);
                    }
                    // Only the bytes that changed: the rest of the block's lines stay
                    // untouched for other cores using the directory.
                    self.dir_index.forget(dir.ino);
                    self.write_block_range(b, &blk, at, at + used + 8 + name.len())?;
                    return self.touch_dir(dir);
                }
                at += rec;
            }
        }
        self.dir_index.forget(dir.ino);
        let (b, _) = self.bmap_alloc(dir, nblocks)?;
        blk.fill(0);
        fill(&mut blk, 0, bs);
        self.write_block(b, &blk)?;
        dir.size += self.bs;
        self.touch_dir(dir)
    }

    /// A directory changed: new times, and no htree index any more (it would be stale).
    pub(crate) fn touch_dir(&mut self, dir: &mut Inode) -> Result<()> {
        dir.flags &= !INODE_INDEX_FL;
        dir.mtime = self.now();
        dir.ctime = dir.mtime;
        self.write_inode(dir)
    }

    /// Remove `name` from directory `dir`; returns the inode it named.
    pub(crate) fn remove_entry(&mut self, dir: &mut Inode, name: &[u8]) -> Result<u32> {
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
                let (e_ino, rec, nl) = entry_at(&blk, at)?;
                if e_ino != 0 && &blk[at + 8..at + 8 + nl] == name {
                    let (lo, hi) = match prev {
                        Some(p) => {
                            let prec = le16(&blk, p + 4) as usize;
                            put16(&mut blk, p + 4, (prec + rec) as u16);
                            (p + 4, p + 6)
                        }
                        None => {
                            put32(&mut blk, at, 0);
                            (at, at + 4)
                        }
                    };
                    self.dir_index.forget(dir.ino);
                    self.write_block_range(b, &blk, lo, hi)?;
                    self.touch_dir(dir)?;
                    return Ok(e_ino);
                }
                prev = Some(at);
                at += rec;
            }
        }
        Err(FsError::NotFound)
    }

    /// The parent directory of `path` and the new name in it. Only changes call it: the
    /// directory is named to `changing` (its entries or link count are about to change).
    pub(crate) fn parent_of<'p>(&mut self, path: &'p [u8]) -> Result<(Inode, &'p [u8])> {
        let (parent, name) = split_path(path)?;
        let dir = self.resolve(parent)?;
        if !dir.is_dir() {
            return Err(FsError::NotDir);
        }
        self.changing(dir.ino)?;
        // Read again now that the change is announced (and, in the library OS, the
        // directory's lock is held: `fs::change_hook`): another core may have grown it
        // between the walk and the lock, and a stale size would put a second new block
        // where its new one is.
        let dir = if self.change_hook.is_some() { self.inode(dir.ino)? } else { dir };
        if !dir.is_dir() {
            return Err(FsError::NotDir);
        }
        Ok((dir, name))
    }

    /// A change is about to change inode `ino` (its directory entries, its link count, its
    /// data or size): call `change_hook` with it before anything of it is written. Every
    /// directory operation calls this for the parents (`parent_of`) and for the inode it
    /// links, removes, moves or replaces; `write` and `truncate` for their file. The hook's
    /// error stops the change before it writes.
    pub(crate) fn changing(&mut self, ino: u32) -> Result<()> {
        self.dir_index.forget(ino);
        match self.change_hook {
            Some(hook) => hook(ino),
            None => Ok(()),
        }
    }

    pub(crate) fn new_inode(&self, ino: u32, mode: u16, links: u16) -> Inode {
        let t = self.now();
        Inode { ino, mode, uid: 0, gid: 0, size: 0, atime: t, ctime: t, mtime: t, links, blocks512: 0, flags: 0, block: [0; 15], raw: [0; 128] }
    }

    /// The directory a new name of `path` goes into, and that name: `Exists` if the name is
    /// taken already (and the lookup's own error if it fails otherwise).
    fn parent_for_new<'p>(&mut self, path: &'p [u8]) -> Result<(Inode, &'p [u8])> {
        let (dir, name) = self.parent_of(path)?;
        match self.lookup(&dir, name) {
            Ok(_) => Err(FsError::Exists),
            Err(FsError::NotFound) => Ok((dir, name)),
            Err(e) => Err(e),
        }
    }

    /// Make an empty regular file (`Exists` if the name is taken).
    pub fn create(&mut self, path: &[u8], perm: u16) -> Result<Inode> {
        self.writable()?;
        let (mut dir, name) = self.parent_for_new(path)?;
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
        let (mut dir, name) = self.parent_for_new(path)?;
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
        ino.block[0] = b as u32;
        ino.size = self.bs;
        ino.blocks512 = (self.bs / 512) as u32;
        // A new directory on an inode number an index may still name (a removed directory's).
        self.dir_index.forget(n);
        let made = match self.write_block(b, &blk) {
            Ok(()) => self.write_inode(&mut ino),
            Err(e) => Err(e),
        };
        // Until the entry is added nothing names the new directory: a failure (a parent
        // needing a block the reserve does not have is `Contended`, run again exclusive)
        // gives its block and inode back. (They leaked here before.)
        if let Err(e) = made.and_then(|()| self.add_entry(&mut dir, name, n, FT_DIR)) {
            let _ = self.free_block(b);
            let _ = self.free_inode(n, true);
            return Err(e);
        }
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
        self.changing(target.ino)?;
        // Read again now that the change is announced (in the library OS: the target's
        // stripe is held, `fs::change_hook`): another core's unlink of another of its names
        // may have changed its link count since the walk.
        if self.change_hook.is_some() {
            target = self.inode(target.ino)?;
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
        if let Err(e) = self.add_entry(&mut dir, name, target.ino, ft_of(&target)) {
            // No new name: the count goes back (a `Contended` add, whose directory needed a
            // block the reserve did not have, runs again on the exclusive side; a `NoSpace`
            // one is the caller's error). Without this the count stayed one too high.
            target.links -= 1;
            let _ = self.write_inode(&mut target);
            return Err(e);
        }
        Ok(())
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
        let (mut dir, name) = self.parent_for_new(path)?;
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
            // On the per-directory side its block must be in the reserve already: a refill
            // is `Contended` before the link is named anywhere.
            let r = match self.frozen_blocks_ok(&ino, 0, target.len() as u64) {
                Ok(()) => self.write_data(&mut ino, 0, target),
                Err(e) => Err(e),
            };
            match r {
                Ok(k) if k == target.len() => {}
                r => {
                    let _ = self.release(&mut ino, false);
                    return Err(if matches!(r, Err(FsError::Contended)) { FsError::Contended } else { FsError::NoSpace });
                }
            }
        }
        if let Err(e) = self.add_entry(&mut dir, name, n, FT_SYMLINK) {
            // A slow link's block goes back with its inode (`release`).
            let _ = if target.len() <= FAST_SYMLINK_MAX { self.free_inode(n, false) } else { self.release(&mut ino, false) };
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
        // Before `open(n)` below: the library OS's hook fences before its per-core lists are
        // scanned (`fs::open_files`).
        self.changing(n)?;
        let mut ino = self.inode(n)?;
        if ino.is_dir() {
            return Err(FsError::IsDir);
        }
        if ino.links == 0 {
            // A name of a freed inode (a corrupt directory): freeing it again would put it in
            // a reserve twice or clear a bit another file owns.
            return Err(FsError::Corrupt("a name of an inode with no links"));
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
    pub(crate) fn release(&mut self, ino: &mut Inode, dir: bool) -> Result<()> {
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
        self.changing(n)?;
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
        self.rename_with(old, new, &|_| false)
    }

    /// `rename`, but a file it replaces whose last name goes while `open(ino)` says it is open
    /// keeps its blocks (an orphan, as in `unlink_with`) until `release_orphan`.
    pub fn rename_with(&mut self, old: &[u8], new: &[u8], open: &dyn Fn(u32) -> bool) -> Result<()> {
        self.writable()?;
        let (op, oname) = self.parent_of(old)?;
        let ino_n = self.lookup(&op, oname)?;
        // The moved inode (a directory's `..` changes); a replaced one is named by the
        // `unlink`/`rmdir` below.
        self.changing(ino_n)?;
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
                    (false, false) => {
                        self.unlink_with(new, open)?;
                    }
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
                let (_, rec, nl) = entry_at(&blk, at)?;
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
            self.dir_index.forget(ino_n);
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
