//! The model of the POSIX calls the commutativity checker decides with (docs/commute.md,
//! "POSIX calls"): the state of the fixture directory (names, inodes with their link counts
//! and bytes, the fixture's descriptors with their offsets), and each call's result and state
//! change, following POSIX and, where POSIX leaves the error open, Linux (unlink of a
//! directory is `EISDIR`). The cases are `bench/src/posix_cases.rs`.
//!
//! Two calls **commute** when running A then B and B then A give each call the same result
//! and leave the same state. A new descriptor's number is unspecified (sv6's `O_ANYFD`): an
//! open's result is `fd` whatever number it got. Times (atime, mtime, ctime) are not modelled.
//!
//! Results are strings in the format the guest prints (`bench/src/commute_posix.rs`).

use super::posix_cases::{self as pc, OpenMode, Op, Whence, D, P};
use std::collections::BTreeMap;

/// An inode: a fixture one (by its first name) or one a call made (0 = A, 1 = B).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ino {
    /// The fixture directory itself.
    Root,
    Fix(&'static str),
    New(u8),
}

impl Ino {
    fn label(self) -> &'static str {
        match self {
            Ino::Root => "cm",
            Ino::Fix(n) => n,
            Ino::New(_) => "new",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inode {
    pub dir: bool,
    pub nlink: u64,
    pub data: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    pub inodes: BTreeMap<Ino, Inode>,
    /// Paths relative to the fixture directory (`rename(d, m)` moves `d/c` to `m/c`).
    pub names: BTreeMap<String, Ino>,
    /// The fixture's descriptors still open: inode and offset.
    pub fds: BTreeMap<D, (Ino, u64)>,
}

fn err<T>(e: &str) -> Result<T, String> {
    Err(e.to_string())
}

/// The directory a name is in: `None` for the fixture directory, else the parent's path.
fn parent(p: P) -> Option<&'static str> {
    p.rel().rsplit_once('/').map(|(d, _)| match d {
        "d" => "d",
        _ => unreachable!("posix_cases has one level of subdirectory"),
    })
}

impl State {
    pub fn fixture() -> State {
        let file = |seed: u8, n: u64| Inode { dir: false, nlink: 1, data: (0..n).map(|i| pc::fixture_byte(seed, i)).collect() };
        let mut inodes = BTreeMap::new();
        inodes.insert(Ino::Root, Inode { dir: true, nlink: 3, data: Vec::new() });
        inodes.insert(Ino::Fix("a"), file(1, pc::FILE_BYTES));
        inodes.insert(Ino::Fix("b"), file(2, pc::FILE_BYTES));
        inodes.insert(Ino::Fix("d"), Inode { dir: true, nlink: 2, data: Vec::new() });
        inodes.insert(Ino::Fix("c"), file(3, pc::SMALL_BYTES));
        let names = [("a", Ino::Fix("a")), ("b", Ino::Fix("b")), ("d", Ino::Fix("d")), ("d/c", Ino::Fix("c"))].into_iter().map(|(n, i)| (n.to_string(), i)).collect();
        let fds = pc::DESCS.iter().map(|d| (*d, (Ino::Fix(d.file().rel()), 0))).collect();
        State { inodes, names, fds }
    }

    /// The directory `p` is in, which must exist and be a directory.
    fn dir_of(&self, p: P) -> Result<Ino, String> {
        match parent(p) {
            None => Ok(Ino::Root),
            Some(d) => match self.names.get(d) {
                None => err(pc::ERR_NOT_FOUND),
                Some(i) if !self.inodes[i].dir => err(pc::ERR_NOT_DIR),
                Some(i) => Ok(*i),
            },
        }
    }

    fn lookup(&self, p: P) -> Result<Ino, String> {
        self.dir_of(p)?;
        self.names.get(p.rel()).copied().ok_or_else(|| pc::ERR_NOT_FOUND.to_string())
    }

    fn has_children(&self, dir: &str) -> bool {
        let prefix = format!("{dir}/");
        self.names.keys().any(|k| k.starts_with(&prefix))
    }

    fn stat_text(&self, i: Ino) -> String {
        let n = &self.inodes[&i];
        if n.dir {
            format!("d:{}:{}", i.label(), n.nlink)
        } else {
            format!("f:{}:{}:{}", i.label(), n.nlink, n.data.len())
        }
    }

    fn fd(&self, d: D) -> Result<(Ino, u64), String> {
        self.fds.get(&d).copied().ok_or_else(|| pc::ERR_BAD_FD.to_string())
    }

    fn read_at(&self, i: Ino, off: u64) -> String {
        let data = &self.inodes[&i].data;
        let from = (off as usize).min(data.len());
        let to = (from + pc::IO_BYTES).min(data.len());
        format!("{}:{:08x}", to - from, pc::fnv(&data[from..to]))
    }

    fn write_at(&mut self, i: Ino, off: u64, who: u8) {
        let data = &mut self.inodes.get_mut(&i).expect("open inode").data;
        let end = off as usize + pc::IO_BYTES;
        if data.len() < end {
            data.resize(end, 0);
        }
        for k in 0..pc::IO_BYTES {
            data[off as usize + k] = pc::write_byte(who, k);
        }
    }

    /// Drop one link of `i`; an inode with no link and no fixture descriptor is gone.
    fn unlink_ino(&mut self, i: Ino) {
        let n = self.inodes.get_mut(&i).expect("named inode");
        n.nlink -= if n.dir { 2 } else { 1 };
        if n.nlink == 0 && !self.fds.values().any(|(j, _)| *j == i) {
            self.inodes.remove(&i);
        }
    }

    fn dir_nlink(&mut self, d: Ino, delta: i64) {
        let n = self.inodes.get_mut(&d).expect("directory");
        n.nlink = (n.nlink as i64 + delta) as u64;
    }

    /// Run `op` as call `who` (0 = A, 1 = B): its result, in the guest's format.
    pub fn apply(&mut self, op: Op, who: u8) -> String {
        match self.step(op, who) {
            Ok(s) | Err(s) => s,
        }
    }

    fn step(&mut self, op: Op, who: u8) -> Result<String, String> {
        match op {
            Op::Open(p, OpenMode::Read) => {
                self.lookup(p)?;
                Ok("fd".into())
            }
            Op::Open(p, OpenMode::CreateExcl) => {
                self.dir_of(p)?;
                if self.names.contains_key(p.rel()) {
                    return err(pc::ERR_EXISTS);
                }
                let i = Ino::New(who);
                self.inodes.insert(i, Inode { dir: false, nlink: 1, data: Vec::new() });
                self.names.insert(p.rel().to_string(), i);
                Ok("fd".into())
            }
            Op::Close(d) => {
                let (i, _) = self.fd(d)?;
                self.fds.remove(&d);
                if self.inodes.get(&i).is_some_and(|n| n.nlink == 0) && !self.fds.values().any(|(j, _)| *j == i) {
                    self.inodes.remove(&i);
                }
                Ok("0".into())
            }
            Op::Stat(p) => {
                let i = self.lookup(p)?;
                Ok(self.stat_text(i))
            }
            Op::Fstat(d) => {
                let (i, _) = self.fd(d)?;
                Ok(self.stat_text(i))
            }
            Op::Read(d) => {
                let (i, off) = self.fd(d)?;
                let r = self.read_at(i, off);
                let n = (self.inodes[&i].data.len() as u64).saturating_sub(off).min(pc::IO_BYTES as u64);
                self.fds.insert(d, (i, off + n));
                Ok(r)
            }
            Op::Pread(d, off) => {
                let (i, _) = self.fd(d)?;
                Ok(self.read_at(i, off))
            }
            Op::Write(d) => {
                let (i, off) = self.fd(d)?;
                self.write_at(i, off, who);
                self.fds.insert(d, (i, off + pc::IO_BYTES as u64));
                Ok(pc::IO_BYTES.to_string())
            }
            Op::Pwrite(d, off) => {
                let (i, _) = self.fd(d)?;
                self.write_at(i, off, who);
                Ok(pc::IO_BYTES.to_string())
            }
            Op::Lseek(d, off, whence) => {
                let (i, cur) = self.fd(d)?;
                let base = match whence {
                    Whence::Set => 0,
                    Whence::Cur => cur as i64,
                    Whence::End => self.inodes[&i].data.len() as i64,
                };
                if base + off < 0 {
                    return err(pc::ERR_INVAL);
                }
                let to = (base + off) as u64;
                self.fds.insert(d, (i, to));
                Ok(to.to_string())
            }
            Op::Dup(d) => {
                self.fd(d)?;
                Ok("fd".into())
            }
            Op::Ftruncate(d, len) => {
                let (i, _) = self.fd(d)?;
                self.inodes.get_mut(&i).expect("open inode").data.resize(len as usize, 0);
                Ok("0".into())
            }
            Op::Rmdir(p) => {
                let parent = self.dir_of(p)?;
                let i = self.lookup(p)?;
                if !self.inodes[&i].dir {
                    return err(pc::ERR_NOT_DIR);
                }
                if self.has_children(p.rel()) {
                    return err(pc::ERR_NOT_EMPTY);
                }
                self.names.remove(p.rel());
                self.dir_nlink(parent, -1);
                self.unlink_ino(i);
                Ok("0".into())
            }
            Op::Unlink(p) => {
                let i = self.lookup(p)?;
                if self.inodes[&i].dir {
                    return err(pc::ERR_IS_DIR);
                }
                self.names.remove(p.rel());
                self.unlink_ino(i);
                Ok("0".into())
            }
            Op::Link(old, new) => {
                let i = self.lookup(old)?;
                self.dir_of(new)?;
                if self.names.contains_key(new.rel()) {
                    return err(pc::ERR_EXISTS);
                }
                if self.inodes[&i].dir {
                    return err(pc::ERR_PERM);
                }
                self.names.insert(new.rel().to_string(), i);
                self.inodes.get_mut(&i).expect("named inode").nlink += 1;
                Ok("0".into())
            }
            Op::Mkdir(p) => {
                let parent = self.dir_of(p)?;
                if self.names.contains_key(p.rel()) {
                    return err(pc::ERR_EXISTS);
                }
                let i = Ino::New(who);
                self.inodes.insert(i, Inode { dir: true, nlink: 2, data: Vec::new() });
                self.names.insert(p.rel().to_string(), i);
                self.dir_nlink(parent, 1);
                Ok("0".into())
            }
            Op::Rename(old, new) => {
                let i = self.lookup(old)?;
                let new_dir = self.dir_of(new)?;
                let old_dir = self.dir_of(old)?;
                let is_dir = self.inodes[&i].dir;
                if let Some(&j) = self.names.get(new.rel()) {
                    if j == i {
                        return Ok("0".into());
                    }
                    match (is_dir, self.inodes[&j].dir) {
                        (false, true) => return err(pc::ERR_IS_DIR),
                        (true, false) => return err(pc::ERR_NOT_DIR),
                        (true, true) if self.has_children(new.rel()) => return err(pc::ERR_NOT_EMPTY),
                        _ => {}
                    }
                    self.names.remove(new.rel());
                    if self.inodes[&j].dir {
                        self.dir_nlink(new_dir, -1);
                    }
                    self.unlink_ino(j);
                }
                self.names.remove(old.rel());
                self.names.insert(new.rel().to_string(), i);
                // A directory's entries move with it.
                let prefix = format!("{}/", old.rel());
                let moved: Vec<String> = self.names.keys().filter(|k| k.starts_with(&prefix)).cloned().collect();
                for k in moved {
                    let v = self.names.remove(&k).expect("listed");
                    self.names.insert(format!("{}/{}", new.rel(), &k[prefix.len()..]), v);
                }
                if is_dir && old_dir != new_dir {
                    self.dir_nlink(old_dir, -1);
                    self.dir_nlink(new_dir, 1);
                }
                Ok("0".into())
            }
        }
    }
}

pub use super::model::Verdict;

/// Do `a` (call A) and `b` (call B) commute on `start`?
pub fn decide(start: &State, a: Op, b: Op) -> Verdict {
    let mut s1 = start.clone();
    let ra1 = s1.apply(a, 0);
    let rb1 = s1.apply(b, 1);
    let mut s2 = start.clone();
    let rb2 = s2.apply(b, 1);
    let ra2 = s2.apply(a, 0);
    Verdict { commutes: ra1 == ra2 && rb1 == rb2 && s1 == s2, ab: (ra1, rb1), ba: (ra2, rb2) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use D::*;
    use P::*;

    fn commutes(a: Op, b: Op) -> bool {
        decide(&State::fixture(), a, b).commutes
    }

    // Catches a model that serialises a directory: creating two different names in one
    // directory commutes; creating the same name does not (one gets Exists).
    #[test]
    fn creates_of_different_names_commute() {
        assert!(commutes(Op::Open(M, OpenMode::CreateExcl), Op::Open(N, OpenMode::CreateExcl)));
        assert!(commutes(Op::Mkdir(M), Op::Link(A, N)));
        let v = decide(&State::fixture(), Op::Open(M, OpenMode::CreateExcl), Op::Mkdir(M));
        assert!(!v.commutes);
        assert_eq!(v.ab, ("fd".to_string(), pc::ERR_EXISTS.to_string()));
    }

    // Catches a model without link counts: a stat sees the count a link changes; a stat of
    // another file does not.
    #[test]
    fn stat_sees_link_counts() {
        assert!(!commutes(Op::Stat(A), Op::Link(A, N)));
        assert!(commutes(Op::Stat(B), Op::Link(A, N)));
        assert!(!commutes(Op::Fstat(D0), Op::Unlink(A)));
        assert_eq!(State::fixture().apply(Op::Stat(A), 0), "f:a:1:8192");
    }

    // Catches offsets shared between open file descriptions: reads through two opens of one
    // file commute, two reads through one description do not.
    #[test]
    fn offsets_belong_to_the_description() {
        assert!(commutes(Op::Read(D0), Op::Read(D1)));
        assert!(!commutes(Op::Read(D0), Op::Read(D0)));
        assert!(!commutes(Op::Read(D0), Op::Lseek(D0, 4096, Whence::Set)));
        assert!(commutes(Op::Pread(D0, 0), Op::Pread(D0, 0)));
    }

    // Catches a data model that ignores ranges: writes to different blocks commute, a read
    // of the written range does not.
    #[test]
    fn writes_and_reads_by_range() {
        assert!(commutes(Op::Pwrite(D0, 0), Op::Pwrite(D0, 4096)));
        assert!(!commutes(Op::Pwrite(D0, 0), Op::Pwrite(D0, 0)));
        assert!(!commutes(Op::Pwrite(D0, 0), Op::Pread(D0, 0)));
        assert!(commutes(Op::Pwrite(D0, 0), Op::Pread(D0, 4096)));
        assert!(!commutes(Op::Write(D0), Op::Read(D1)));
    }

    // Catches an unlinked file that loses its data while a descriptor holds it, and a close
    // that does not end the descriptor.
    #[test]
    fn unlinked_files_live_on_through_descriptors() {
        let mut s = State::fixture();
        assert_eq!(s.apply(Op::Unlink(A), 0), "0");
        assert_eq!(s.apply(Op::Fstat(D0), 1), "f:a:0:8192");
        assert_eq!(s.apply(Op::Close(D0), 0), "0");
        assert_eq!(s.apply(Op::Close(D0), 0), pc::ERR_BAD_FD);
        assert!(s.inodes.contains_key(&Ino::Fix("a")));
        assert_eq!(s.apply(Op::Close(D1), 0), "0");
        assert!(!s.inodes.contains_key(&Ino::Fix("a")));
    }

    // Catches rename semantics: onto a hard link of itself it does nothing; it moves a name.
    #[test]
    fn rename_moves_names() {
        let mut s = State::fixture();
        assert_eq!(s.apply(Op::Link(A, N), 0), "0");
        assert_eq!(s.apply(Op::Rename(A, N), 0), "0");
        assert_eq!(s.apply(Op::Stat(A), 0), "f:a:2:8192");
        let mut s = State::fixture();
        assert_eq!(s.apply(Op::Rename(DC, M), 0), "0");
        assert_eq!(s.apply(Op::Stat(DC), 0), pc::ERR_NOT_FOUND);
        assert_eq!(s.apply(Op::Stat(M), 0), "f:c:1:100");
    }

    // Catches a directory rename that leaves its entries behind, and rmdir of a full one.
    #[test]
    fn directories_move_with_their_entries() {
        let mut s = State::fixture();
        assert_eq!(s.apply(Op::Rmdir(Sub), 0), pc::ERR_NOT_EMPTY);
        assert_eq!(s.apply(Op::Rename(Sub, M), 0), "0");
        assert_eq!(s.apply(Op::Stat(DC), 0), pc::ERR_NOT_FOUND);
        assert!(s.names.contains_key("m/c"));
        assert!(!commutes(Op::Rename(Sub, M), Op::Stat(DC)));
        assert!(commutes(Op::Rmdir(M), Op::Rmdir(N)));
        assert!(!commutes(Op::Mkdir(M), Op::Rmdir(M)));
    }
}
