//! Directory indexes: a directory's entries read once and kept as a hash of name to inode, so
//! that a lookup in a directory of a hundred entries is one hash and one comparison instead of
//! a copy of every block and a comparison per entry.
//!
//! **When an index may be used.** Only when the `Disk` gives a *stamp* for the directory
//! (`Disk::dir_stamp`): a value that changes whenever anything may have changed the directory's
//! entries, and that is `None` while such a change runs. An index is made with the stamp read
//! before its scan and used only while the `Disk` still gives that same stamp; a change that
//! started after the stamp was read makes it differ, so an index that a change overlapped is
//! never used. A `Disk` that gives no stamp (the default: the host tools) gets no index and
//! every lookup scans, as before. The library OS's stamp is the name cache's: the mount epoch
//! and the directory inode's generation stripe (docs/fs.md, "Directory indexes").
//!
//! **This `Ext2`'s own changes** drop the index of every directory they name (`changing`,
//! before anything is written, and again after each entry written: `add_entry`,
//! `remove_entry`, a moved directory's `..`), whatever the stamp says: the crate stays right
//! over a `Disk` whose stamp does not see its own writes.
//!
//! **Bounds.** At most `MAX_DIRS` indexes per `Ext2` (the oldest replaced), directories of at
//! most `MAX_BYTES` bytes (larger ones are scanned); a directory whose scan fails (a corrupt
//! entry) gets no index, and the lookup scans it as before, so the errors are the scan's.

use alloc::vec::Vec;

/// Most directories indexed at once per `Ext2`.
pub const MAX_DIRS: usize = 32;
/// Largest directory indexed, in bytes (a 4 KiB-block directory of 64 blocks: some thousands
/// of entries).
pub const MAX_BYTES: u64 = 256 << 10;

/// What an index keeps of an entry: where its name is in `names`, its length, its file type
/// and its inode.
#[derive(Clone, Copy)]
struct Ent {
    off: u32,
    len: u8,
    ft: u8,
    ino: u32,
}

/// One directory's live entries, in on-disk order, and a hash table over their names.
pub(crate) struct DirIndex {
    pub(crate) dir: u32,
    pub(crate) stamp: [u64; 2],
    /// The directory's inode, read after the stamp (its size and blocks are those the scan
    /// read; a path walk through the directory takes it from here while the stamp holds:
    /// every change of a directory's inode names the directory, as a change of its entries).
    pub(crate) inode: crate::Inode,
    names: Vec<u8>,
    ents: Vec<Ent>,
    /// Open addressing, a power of two at least twice the entries: 0 empty, else an index
    /// into `ents` plus one.
    slots: Vec<u32>,
}

fn hash(name: &[u8]) -> u32 {
    // FNV-1a, 32 bits.
    let mut h: u32 = 0x811c_9dc5;
    for &b in name {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

impl DirIndex {
    pub(crate) fn new(inode: crate::Inode, stamp: [u64; 2]) -> DirIndex {
        DirIndex { dir: inode.ino, stamp, inode, names: Vec::new(), ents: Vec::new(), slots: Vec::new() }
    }

    /// Add an entry (during the scan, in on-disk order; names at most 255 bytes).
    pub(crate) fn push(&mut self, ino: u32, ft: u8, name: &[u8]) {
        self.ents.push(Ent { off: self.names.len() as u32, len: name.len() as u8, ft, ino });
        self.names.extend_from_slice(name);
    }

    /// The scan is done: build the hash table. A name twice in a directory (a corrupt one)
    /// keeps its first entry, as a scan finds it first.
    pub(crate) fn seal(&mut self) {
        let n = (self.ents.len() * 2).next_power_of_two().max(8);
        self.slots = alloc::vec![0u32; n];
        let mask = n - 1;
        for (i, e) in self.ents.iter().enumerate() {
            let name = &self.names[e.off as usize..e.off as usize + e.len as usize];
            let mut s = hash(name) as usize & mask;
            loop {
                match self.slots[s] {
                    0 => {
                        self.slots[s] = i as u32 + 1;
                        break;
                    }
                    k => {
                        let o = self.ents[k as usize - 1];
                        if self.names[o.off as usize..o.off as usize + o.len as usize] == *name {
                            break;
                        }
                    }
                }
                s = (s + 1) & mask;
            }
        }
    }

    /// The inode `name` names here and the entry's file type, if any.
    pub(crate) fn get(&self, name: &[u8]) -> Option<(u32, u8)> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut s = hash(name) as usize & mask;
        loop {
            let k = self.slots[s];
            if k == 0 {
                return None;
            }
            let e = self.ents[k as usize - 1];
            // Length first: most names that share a slot differ in length.
            if e.len as usize == name.len() && self.names[e.off as usize..e.off as usize + name.len()] == *name {
                return Some((e.ino, e.ft));
            }
            s = (s + 1) & mask;
        }
    }

    /// Every entry, in on-disk order: (inode, file type, name).
    pub(crate) fn entries(&self) -> impl Iterator<Item = (u32, u8, &[u8])> {
        self.ents.iter().map(|e| (e.ino, e.ft, &self.names[e.off as usize..e.off as usize + e.len as usize]))
    }
}

/// The indexes one `Ext2` keeps (`Ext2::dir_index`).
#[derive(Default)]
pub struct DirIndexes {
    list: Vec<DirIndex>,
    /// The next one replaced when the list is full.
    next: usize,
    /// Lookups and listings answered from an index, and indexes built (for tests and
    /// measurements).
    pub uses: u64,
    pub builds: u64,
}

impl DirIndexes {
    /// The index of `dir` if it was made at `stamp`.
    pub(crate) fn find(&self, dir: u32, stamp: [u64; 2]) -> Option<&DirIndex> {
        self.list.iter().find(|x| x.dir == dir && x.stamp == stamp)
    }

    pub(crate) fn put(&mut self, x: DirIndex) {
        if let Some(i) = self.list.iter().position(|o| o.dir == x.dir) {
            self.list[i] = x;
        } else if self.list.len() < MAX_DIRS {
            self.list.push(x);
        } else {
            self.list[self.next] = x;
            self.next = (self.next + 1) % MAX_DIRS;
        }
        self.builds += 1;
    }

    /// Drop `dir`'s index (a change to its entries is about to run or just ran).
    pub(crate) fn forget(&mut self, dir: u32) {
        self.list.retain(|x| x.dir != dir);
        if self.next >= self.list.len() {
            self.next = 0;
        }
    }

    /// Drop every index.
    pub fn clear(&mut self) {
        self.list.clear();
        self.next = 0;
    }

    /// Directories indexed now.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

impl Clone for DirIndexes {
    /// A clone starts empty (`Ext2::clone_with` gives each core its own indexes).
    fn clone(&self) -> DirIndexes {
        DirIndexes::default()
    }
}
