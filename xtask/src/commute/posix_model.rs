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

use super::pipeline::{model_of_case_table, Style};
use testdefs::posix_cases::{self as pc, OpenMode, Op, Whence, D, P};
use std::collections::BTreeMap;

/// An inode: a fixture one (by its first name) or one a call made (0 = A, 1 = B).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ino {
    /// The fixture directory itself.
    Root,
    Fix(&'static str),
    New(u8),
    /// The fixture pipe (its bytes are `State::pipe`).
    Pipe,
    /// The fixture's empty pipe, whose write end is closed (`E0` reads end of file).
    EmptyPipe,
}

impl Ino {
    fn label(self) -> &'static str {
        match self {
            Ino::Root => "cm",
            Ino::Fix(n) => n,
            Ino::New(_) => "new",
            Ino::Pipe | Ino::EmptyPipe => "pipe",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inode {
    pub dir: bool,
    pub nlink: u64,
    pub data: Vec<u8>,
    /// A symbolic link's target (relative to the link's directory); `None` for a file or a
    /// directory.
    pub link: Option<&'static str>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    pub inodes: BTreeMap<Ino, Inode>,
    /// Paths relative to the fixture directory (`rename(d, m)` moves `d/c` to `m/c`).
    pub names: BTreeMap<String, Ino>,
    /// The fixture's descriptors still open: inode and offset.
    pub fds: BTreeMap<D, (Ino, u64)>,
    /// The bytes waiting in the fixture pipe, oldest first.
    pub pipe: Vec<u8>,
    /// The fixture mapping `M0`, page by page: its protection, `None` where unmapped.
    /// (Contents are not modelled: no case reads or writes the memory, see docs/commute.md.)
    pub mem: Vec<Option<u64>>,
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
        let file = |seed: u8, n: u64| Inode { dir: false, nlink: 1, data: (0..n).map(|i| pc::fixture_byte(seed, i)).collect(), link: None };
        let mut inodes = BTreeMap::new();
        inodes.insert(Ino::Root, Inode { dir: true, nlink: 3, data: Vec::new(), link: None });
        inodes.insert(Ino::Fix("a"), file(1, pc::FILE_BYTES));
        inodes.insert(Ino::Fix("b"), file(2, pc::FILE_BYTES));
        inodes.insert(Ino::Fix("d"), Inode { dir: true, nlink: 2, data: Vec::new(), link: None });
        inodes.insert(Ino::Fix("c"), file(3, pc::SMALL_BYTES));
        let names = [("a", Ino::Fix("a")), ("b", Ino::Fix("b")), ("d", Ino::Fix("d")), ("d/c", Ino::Fix("c"))].into_iter().map(|(n, i)| (n.to_string(), i)).collect();
        let mut fds: BTreeMap<D, (Ino, u64)> = pc::DESCS.iter().map(|d| (*d, (Ino::Fix(d.file().expect("a file descriptor").rel()), 0))).collect();
        for d in pc::PIPE_ENDS {
            fds.insert(d, (Ino::Pipe, 0));
        }
        fds.insert(D::E0, (Ino::EmptyPipe, 0));
        let pipe = (0..pc::PIPE_FIXTURE_BYTES).map(pc::pipe_byte).collect();
        let mem = (0..pc::MEM_PAGES).map(|p| (p != pc::MEM_HOLE).then_some(pc::PROT_RW)).collect();
        State { inodes, names, fds, pipe, mem }
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

    /// What the path `rel` names once a symbolic link as its last part is followed (its
    /// target is taken from the link's directory, as POSIX says); `None` if nothing (a
    /// dangling link). One hop: no case can make a link to a link (posix_cases' `symlink`).
    fn follow(&self, rel: &str) -> Option<Ino> {
        let i = *self.names.get(rel)?;
        match self.inodes[&i].link {
            None => Some(i),
            Some(target) => {
                let at = match rel.rsplit_once('/') {
                    Some((dir, _)) => format!("{dir}/{target}"),
                    None => target.to_string(),
                };
                let j = *self.names.get(&at)?;
                assert!(self.inodes[&j].link.is_none(), "a link to a link: posix_cases has no such class");
                Some(j)
            }
        }
    }

    /// `lookup` for the calls that follow a final symbolic link (`stat`, `truncate`,
    /// `readdir`, `open` without `O_EXCL`).
    fn lookup_follow(&self, p: P) -> Result<Ino, String> {
        self.dir_of(p)?;
        self.follow(p.rel()).ok_or_else(|| pc::ERR_NOT_FOUND.to_string())
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

    /// The pages of `M0` that `[off, off + len)` covers; `EINVAL` for an unaligned offset or
    /// an empty range.
    fn pages(&self, off: u64, len: u64) -> Result<std::ops::Range<u64>, String> {
        if !off.is_multiple_of(pc::PAGE) || len == 0 {
            return err(pc::ERR_INVAL);
        }
        Ok(off / pc::PAGE..(off + len).div_ceil(pc::PAGE))
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

    /// `open` of the name `rel` (relative to the fixture directory, its directory known to
    /// exist) with `mode`.
    fn open_name(&mut self, rel: String, mode: OpenMode, who: u8) -> Result<String, String> {
        // `O_CREAT | O_EXCL` fails on any existing name, a dangling link too (POSIX); the other
        // modes open what a link names.
        let found = match mode {
            OpenMode::CreateExcl => self.names.get(&rel).copied(),
            _ => self.follow(&rel),
        };
        match (mode, found) {
            (OpenMode::CreateExcl, Some(_)) => err(pc::ERR_EXISTS),
            (OpenMode::CreateExcl, None) => {
                let i = Ino::New(who);
                self.inodes.insert(i, Inode { dir: false, nlink: 1, data: Vec::new(), link: None });
                self.names.insert(rel, i);
                Ok("fd".into())
            }
            (_, None) => err(pc::ERR_NOT_FOUND),
            (OpenMode::Read, Some(_)) => Ok("fd".into()),
            // Opening a directory for writing is EISDIR (POSIX), before any truncation.
            (OpenMode::Trunc | OpenMode::Append, Some(i)) if self.inodes[&i].dir => err(pc::ERR_IS_DIR),
            (OpenMode::Trunc, Some(i)) => {
                self.inodes.get_mut(&i).expect("named inode").data.clear();
                Ok("fd".into())
            }
            (OpenMode::Append, Some(_)) => Ok("fd".into()),
        }
    }

    /// Run `op` as call `who` (0 = A, 1 = B): its result, in the guest's format.
    pub fn apply(&mut self, op: Op, who: u8) -> String {
        match self.step(op, who) {
            Ok(s) | Err(s) => s,
        }
    }

    fn step(&mut self, op: Op, who: u8) -> Result<String, String> {
        match op {
            Op::Open(p, mode) => {
                self.dir_of(p)?;
                self.open_name(p.rel().to_string(), mode, who)
            }
            Op::Openat(p, mode) => {
                // The directory `Dd` holds, under whatever name it has now (rename moves it).
                let (dir, _) = self.fd(D::Dd)?;
                let Some(dir_path) = self.names.iter().find(|(_, i)| **i == dir).map(|(n, _)| n.clone()) else {
                    // Removed (rmdir): nothing can be found or made in it (Linux: ENOENT).
                    return err(pc::ERR_NOT_FOUND);
                };
                self.open_name(format!("{dir_path}/{}", p.leaf()), mode, who)
            }
            Op::Truncate(p, len) => {
                let i = self.lookup_follow(p)?;
                if self.inodes[&i].dir {
                    return err(pc::ERR_IS_DIR);
                }
                self.inodes.get_mut(&i).expect("named inode").data.resize(len as usize, 0);
                Ok("0".into())
            }
            // A new pipe: two new descriptors, nothing a case looks at.
            Op::Pipe => Ok("fd".into()),
            // A new mapping at an address the system chose (never in M0, which is mapped, nor
            // in its one-page hole: the cases map at least 2 pages). Linux checks the length
            // before anything else.
            Op::Mmap(len, prot) => {
                if len == 0 || prot & !pc::PROT_RW != 0 {
                    return err(pc::ERR_INVAL);
                }
                Ok("map".into())
            }
            // Unmapped pages in the range are no error (POSIX); an unaligned address or an
            // empty range is EINVAL.
            Op::Munmap(off, len) => {
                let pages = self.pages(off, len)?;
                for p in pages {
                    if let Some(m) = self.mem.get_mut(p as usize) {
                        *m = None;
                    }
                }
                Ok("0".into())
            }
            // Every page must be mapped (ENOMEM otherwise, nothing changed: the classes' ranges
            // start in the hole or are mapped throughout, where Linux changes nothing either);
            // a zero length is no error on Linux (checked after the address's alignment).
            Op::Mprotect(off, len, prot) => {
                if !off.is_multiple_of(pc::PAGE) || prot & !pc::PROT_RW != 0 {
                    return err(pc::ERR_INVAL);
                }
                if len == 0 {
                    return Ok("0".into());
                }
                let pages = self.pages(off, len)?;
                if pages.clone().any(|p| self.mem.get(p as usize).copied().flatten().is_none()) {
                    return err(pc::ERR_NO_MEM);
                }
                for p in pages {
                    self.mem[p as usize] = Some(prot);
                }
                Ok("0".into())
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
                let i = self.lookup_follow(p)?;
                Ok(self.stat_text(i))
            }
            Op::Fstat(d) => {
                let (i, _) = self.fd(d)?;
                Ok(self.stat_text(i))
            }
            Op::Read(d) => {
                let (i, off) = self.fd(d)?;
                if i == Ino::EmptyPipe {
                    // Empty with no write end open: end of file, 0 bytes.
                    return Ok(format!("0:{:08x}", pc::fnv(&[])));
                }
                if i == Ino::Pipe {
                    if d != D::P0 {
                        return err(pc::ERR_BAD_FD);
                    }
                    if self.pipe.is_empty() {
                        // End of file once no write end is open; with one open the read would
                        // wait, which no case can reach (the fixture's 24 bytes outlast the one
                        // read a case makes): say so rather than guess.
                        return if self.fds.contains_key(&D::P1) { err("E:WouldBlock") } else { Ok(format!("0:{:08x}", pc::fnv(&[]))) };
                    }
                    // The oldest bytes, which leave the pipe.
                    let n = self.pipe.len().min(pc::IO_BYTES);
                    let got: Vec<u8> = self.pipe.drain(..n).collect();
                    return Ok(format!("{n}:{:08x}", pc::fnv(&got)));
                }
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
                if i == Ino::Pipe {
                    if d != D::P1 {
                        return err(pc::ERR_BAD_FD);
                    }
                    // No read end open: nobody can read the bytes (POSIX: EPIPE; Linux also
                    // raises SIGPIPE, which the guest ignores).
                    if !self.fds.contains_key(&D::P0) {
                        return err(pc::ERR_BROKEN_PIPE);
                    }
                    self.pipe.extend((0..pc::IO_BYTES).map(|k| pc::write_byte(who, k)));
                    return Ok(pc::IO_BYTES.to_string());
                }
                // O_APPEND: at the end of the file, whatever the offset was.
                let off = if d == D::Dap { self.inodes[&i].data.len() as u64 } else { off };
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
            // Durability is not part of the state (no case crashes the system): only the
            // descriptor is checked, so fsync commutes with everything but its descriptor's
            // close.
            Op::Fsync(d) => {
                self.fd(d)?;
                Ok("0".into())
            }
            // A new name for a new link inode (the directory's link count does not change).
            Op::Symlink(p) => {
                self.dir_of(p)?;
                if self.names.contains_key(p.rel()) {
                    return err(pc::ERR_EXISTS);
                }
                let i = Ino::New(who);
                self.inodes.insert(i, Inode { dir: false, nlink: 1, data: pc::SYMLINK_TARGET.as_bytes().to_vec(), link: Some(pc::SYMLINK_TARGET) });
                self.names.insert(p.rel().to_string(), i);
                Ok("0".into())
            }
            // The name itself, not followed.
            Op::Readlink(p) => {
                let i = self.lookup(p)?;
                match self.inodes[&i].link {
                    Some(t) => Ok(format!("link:{t}")),
                    None => err(pc::ERR_INVAL),
                }
            }
            // The names directly in the directory, sorted (`names` is a sorted map of paths,
            // so its order is the byte order the guest sorts by), without `.` and `..`.
            Op::Readdir(p) => {
                let i = self.lookup_follow(p)?;
                if !self.inodes[&i].dir {
                    return err(pc::ERR_NOT_DIR);
                }
                let prefix = format!("{}/", p.rel());
                let names: Vec<&str> = self.names.keys().filter_map(|k| k.strip_prefix(&prefix)).filter(|leaf| !leaf.contains('/')).collect();
                Ok(format!("dir:{}", names.join(",")))
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
                self.inodes.insert(i, Inode { dir: true, nlink: 2, data: Vec::new(), link: None });
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

/// The POSIX calls as the pipeline sees them (posix_cases.rs, this model).
pub struct Posix;

model_of_case_table!(Posix, pc, "commute-posix", Style { call_width: 10, call_heads: ("call A", "call B"), index_width: 5, list_width: 10, by_pair: true, got_word: "got", results_word: "results" });

#[cfg(test)]
mod tests {
    use super::*;
    use super::super::pipeline::{self, Verdict};

    /// The pipeline's decision on this model.
    fn decide(start: &State, a: Op, b: Op) -> Verdict {
        pipeline::decide::<Posix>(start, a, b)
    }
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
        assert!(s.inodes.contains_key(&Ino::Fix("a")), "Dap still holds it");
        assert_eq!(s.apply(Op::Close(Dap), 0), "0");
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

    // Catches O_TRUNC that does not empty the file (or empties a directory), and an O_APPEND
    // write that goes to the descriptor's offset instead of the end: an append and a write at
    // offset 0 of the same file commute; two appends do not; a truncating open conflicts with
    // a read of the file but not with one of another file.
    #[test]
    fn truncating_opens_and_appends() {
        let mut s = State::fixture();
        assert_eq!(s.apply(Op::Open(A, OpenMode::Trunc), 0), "fd");
        assert_eq!(s.apply(Op::Stat(A), 0), "f:a:1:0");
        assert_eq!(s.apply(Op::Open(Sub, OpenMode::Trunc), 0), pc::ERR_IS_DIR);
        assert_eq!(s.apply(Op::Open(M, OpenMode::Trunc), 0), pc::ERR_NOT_FOUND);
        assert!(!commutes(Op::Open(A, OpenMode::Trunc), Op::Pread(D0, 0)));
        assert!(commutes(Op::Open(A, OpenMode::Trunc), Op::Pread(D2, 0)));
        assert!(commutes(Op::Open(A, OpenMode::Trunc), Op::Open(A, OpenMode::Trunc)));
        let mut s = State::fixture();
        assert_eq!(s.apply(Op::Write(Dap), 0), "16");
        assert_eq!(s.apply(Op::Fstat(D0), 0), "f:a:1:8208");
        assert!(commutes(Op::Write(Dap), Op::Write(D0)));
        assert!(!commutes(Op::Write(Dap), Op::Write(Dap)));
        assert!(!commutes(Op::Write(Dap), Op::Pwrite(D0, 8192)));
        assert!(!commutes(Op::Write(Dap), Op::Stat(A)));
    }

    // Catches truncate by path that ignores directories or the size: a grow and a shrink of
    // one file do not commute, truncates of two files do; a directory is EISDIR.
    #[test]
    fn truncate_by_path() {
        let mut s = State::fixture();
        assert_eq!(s.apply(Op::Truncate(DC, 8192), 0), "0");
        assert_eq!(s.apply(Op::Stat(DC), 0), "f:c:1:8192");
        assert_eq!(s.apply(Op::Truncate(Sub, 0), 0), pc::ERR_IS_DIR);
        assert!(commutes(Op::Truncate(A, 4096), Op::Truncate(B, 0)));
        assert!(!commutes(Op::Truncate(A, 4096), Op::Ftruncate(D1, 8192)));
        assert!(!commutes(Op::Truncate(A, 4096), Op::Fstat(D0)));
        // After the unlink the truncate is NotFound.
        assert!(!commutes(Op::Truncate(A, 4096), Op::Unlink(A)));
    }

    // Catches openat resolved by the directory's name instead of the directory: after `d` is
    // renamed to `m`, openat through `Dd` still finds `c` (and creates `n` in `m`), so rename
    // of `d` commutes with openat (of an existing name, or making one) but not with
    // open("d/c") or open("d/n", O_CREAT). A closed `Dd` is EBADF.
    #[test]
    fn openat_follows_the_directory() {
        let mut s = State::fixture();
        assert_eq!(s.apply(Op::Rename(Sub, M), 0), "0");
        assert_eq!(s.apply(Op::Openat(DC, OpenMode::Read), 0), "fd");
        assert_eq!(s.apply(Op::Openat(DN, OpenMode::CreateExcl), 0), "fd");
        assert!(s.names.contains_key("m/n"));
        assert!(commutes(Op::Rename(Sub, M), Op::Openat(DC, OpenMode::Read)));
        assert!(!commutes(Op::Rename(Sub, M), Op::Open(DC, OpenMode::Read)));
        // Made in `d` and moved with it, or made in `m`: `m/n` either way.
        assert!(commutes(Op::Rename(Sub, M), Op::Openat(DN, OpenMode::CreateExcl)));
        assert!(!commutes(Op::Rename(Sub, M), Op::Open(DN, OpenMode::CreateExcl)));
        assert!(!commutes(Op::Close(Dd), Op::Openat(DC, OpenMode::Read)));
        assert!(!commutes(Op::Openat(DN, OpenMode::CreateExcl), Op::Open(DN, OpenMode::CreateExcl)));
        assert!(commutes(Op::Openat(DN, OpenMode::CreateExcl), Op::Open(M, OpenMode::CreateExcl)));
        assert!(!commutes(Op::Openat(DC, OpenMode::Trunc), Op::Stat(DC)));
        assert_eq!(State::fixture().apply(Op::Openat(DC, OpenMode::CreateExcl), 0), pc::ERR_EXISTS);
    }

    // Catches a pipe model whose reads do not consume or whose writes do not queue: two reads
    // of the pipe get different bytes (do not commute), a read and a write commute while the
    // pipe holds more than one read takes, two writes do not (their bytes' order), and a write
    // after the write end's close is EBADF.
    #[test]
    fn pipe_reads_consume_and_writes_queue() {
        let mut s = State::fixture();
        let first = s.apply(Op::Read(P0), 0);
        assert!(first.starts_with("16:"), "{first}");
        assert!(s.apply(Op::Read(P0), 1).starts_with("8:"));
        assert!(!commutes(Op::Read(P0), Op::Read(P0)));
        assert!(commutes(Op::Read(P0), Op::Write(P1)));
        assert!(!commutes(Op::Write(P1), Op::Write(P1)));
        assert!(commutes(Op::Read(P0), Op::Close(P1)));
        assert!(!commutes(Op::Write(P1), Op::Close(P1)));
        assert!(commutes(Op::Pipe, Op::Pipe));
        assert!(commutes(Op::Pipe, Op::Write(P1)));
        // A pipe is not a file: a write to it commutes with file reads and writes.
        assert!(commutes(Op::Write(P1), Op::Write(D0)));
        assert_eq!(State::fixture().apply(Op::Write(P0), 0), pc::ERR_BAD_FD);
    }

    // Catches a model where closing the read end changes nothing: a write to the pipe then
    // fails (EPIPE), so `close(P0)` and `write(P1)` do not commute; a read of the empty pipe
    // whose write end is closed is end of file and commutes with every other pipe call.
    #[test]
    fn pipe_read_end_close_and_end_of_file() {
        let mut s = State::fixture();
        assert_eq!(s.apply(Op::Close(P0), 0), "0");
        assert_eq!(s.apply(Op::Write(P1), 1), pc::ERR_BROKEN_PIPE);
        assert_eq!(s.apply(Op::Read(P0), 1), pc::ERR_BAD_FD);
        let v = decide(&State::fixture(), Op::Close(P0), Op::Write(P1));
        assert!(!v.commutes);
        assert_eq!(v.ba, ("0".to_string(), pc::IO_BYTES.to_string()));
        assert!(!commutes(Op::Close(P0), Op::Read(P0)));
        assert!(commutes(Op::Close(P0), Op::Close(P1)));
        assert!(commutes(Op::Close(P0), Op::Read(D0)));
        let eof = format!("0:{:08x}", pc::fnv(&[]));
        assert_eq!(State::fixture().apply(Op::Read(E0), 0), eof);
        assert!(commutes(Op::Read(E0), Op::Read(E0)));
        assert!(commutes(Op::Read(E0), Op::Close(P1)));
        assert!(commutes(Op::Read(E0), Op::Write(P1)));
        // The fixture pipe, emptied, reads end of file once its write end is closed.
        let mut s = State::fixture();
        s.pipe.clear();
        assert_eq!(s.apply(Op::Close(P1), 0), "0");
        assert_eq!(s.apply(Op::Read(P0), 0), eof);
    }

    // Catches an fsync that is not checked against its descriptor or that changes the state:
    // it commutes with writes and reads of its own file, not with its descriptor's close.
    #[test]
    fn fsync_checks_only_its_descriptor() {
        assert_eq!(State::fixture().apply(Op::Fsync(D0), 0), "0");
        assert!(commutes(Op::Fsync(D0), Op::Write(D0)));
        assert!(commutes(Op::Fsync(D0), Op::Fsync(D0)));
        assert!(commutes(Op::Fsync(D0), Op::Unlink(A)));
        assert!(!commutes(Op::Fsync(D0), Op::Close(D0)));
        assert!(commutes(Op::Fsync(D0), Op::Close(D1)));
        let mut s = State::fixture();
        s.apply(Op::Close(D2), 0);
        assert_eq!(s.apply(Op::Fsync(D2), 0), pc::ERR_BAD_FD);
    }

    // Catches a readdir that ignores the directory's entries (or lists its own path's
    // siblings): it conflicts with creates, removes and renames of names in the directory,
    // not with those elsewhere nor with writes to its files.
    #[test]
    fn readdir_lists_the_directory() {
        assert_eq!(State::fixture().apply(Op::Readdir(Sub), 0), "dir:c");
        assert_eq!(State::fixture().apply(Op::Readdir(M), 0), pc::ERR_NOT_FOUND);
        assert_eq!(State::fixture().apply(Op::Readdir(A), 0), pc::ERR_NOT_DIR);
        let mut s = State::fixture();
        assert_eq!(s.apply(Op::Link(B, DN), 0), "0");
        assert_eq!(s.apply(Op::Readdir(Sub), 0), "dir:c,n");
        let mut s = State::fixture();
        assert_eq!(s.apply(Op::Rename(Sub, M), 0), "0");
        assert_eq!(s.apply(Op::Readdir(M), 0), "dir:c");
        assert_eq!(s.apply(Op::Readdir(Sub), 0), pc::ERR_NOT_FOUND);
        let mut s = State::fixture();
        assert_eq!(s.apply(Op::Mkdir(M), 0), "0");
        assert_eq!(s.apply(Op::Readdir(M), 0), "dir:");
        assert!(!commutes(Op::Readdir(Sub), Op::Unlink(DC)));
        assert!(!commutes(Op::Readdir(Sub), Op::Open(DN, OpenMode::CreateExcl)));
        assert!(!commutes(Op::Readdir(Sub), Op::Rename(DC, DN)));
        assert!(!commutes(Op::Readdir(M), Op::Mkdir(M)));
        assert!(!commutes(Op::Readdir(M), Op::Open(M, OpenMode::CreateExcl)));
        assert!(commutes(Op::Readdir(Sub), Op::Open(N, OpenMode::CreateExcl)));
        assert!(commutes(Op::Readdir(Sub), Op::Write(D0)));
        assert!(commutes(Op::Readdir(Sub), Op::Truncate(DC, 0)));
        assert!(commutes(Op::Readdir(Sub), Op::Readdir(Sub)));
        assert!(commutes(Op::Readdir(A), Op::Unlink(DC)));
    }

    // Catches a symlink that the calls do not follow (stat of the link is the target's),
    // one followed by O_EXCL or by rmdir/unlink, and a relative target taken from the
    // fixture directory instead of the link's own.
    #[test]
    fn symlink_followed_by_stat_and_open_not_by_unlink() {
        let mut s = State::fixture();
        assert_eq!(s.apply(Op::Symlink(N), 0), "0");
        assert_eq!(s.apply(Op::Readlink(N), 1), "link:a");
        assert_eq!(s.apply(Op::Stat(N), 1), "f:a:1:8192");
        assert_eq!(s.apply(Op::Open(N, OpenMode::Read), 1), "fd");
        assert_eq!(s.apply(Op::Open(N, OpenMode::CreateExcl), 1), pc::ERR_EXISTS);
        assert_eq!(s.apply(Op::Rmdir(N), 1), pc::ERR_NOT_DIR);
        assert_eq!(s.apply(Op::Symlink(N), 1), pc::ERR_EXISTS);
        assert_eq!(s.apply(Op::Unlink(N), 1), "0");
        assert_eq!(s.apply(Op::Stat(A), 1), "f:a:1:8192");
        // d/n -> d/a, which does not exist: dangling, but the name exists.
        let mut s = State::fixture();
        assert_eq!(s.apply(Op::Symlink(DN), 0), "0");
        assert_eq!(s.apply(Op::Stat(DN), 1), pc::ERR_NOT_FOUND);
        assert_eq!(s.apply(Op::Openat(DN, OpenMode::Read), 1), pc::ERR_NOT_FOUND);
        assert_eq!(s.apply(Op::Openat(DN, OpenMode::CreateExcl), 1), pc::ERR_EXISTS);
        assert_eq!(s.apply(Op::Readdir(Sub), 1), "dir:c,n");
        assert_eq!(State::fixture().apply(Op::Readlink(A), 0), pc::ERR_INVAL);
        assert_eq!(State::fixture().apply(Op::Readlink(N), 0), pc::ERR_NOT_FOUND);
        assert!(!commutes(Op::Symlink(N), Op::Stat(N)));
        assert!(!commutes(Op::Symlink(N), Op::Readlink(N)));
        assert!(!commutes(Op::Symlink(DN), Op::Readdir(Sub)));
        assert!(commutes(Op::Symlink(N), Op::Symlink(DN)));
        assert!(commutes(Op::Symlink(N), Op::Stat(A)));
        assert!(commutes(Op::Symlink(N), Op::Readdir(Sub)));
        assert!(commutes(Op::Readlink(A), Op::Readlink(N)));
        assert!(!commutes(Op::Symlink(N), Op::Symlink(N)));
    }

    #[test]
    fn memory_calls_by_page() {
        let pg = pc::PAGE;
        let mut s = State::fixture();
        assert_eq!(s.apply(Op::Mmap(0, pc::PROT_RW), 0), pc::ERR_INVAL);
        assert_eq!(s.apply(Op::Munmap(8, pg), 0), pc::ERR_INVAL);
        assert_eq!(s.apply(Op::Munmap(0, 0), 0), pc::ERR_INVAL);
        assert_eq!(s.apply(Op::Mprotect(8, pg, pc::PROT_READ), 0), pc::ERR_INVAL);
        assert_eq!(s.apply(Op::Mprotect(pc::MEM_HOLE * pg, pg, pc::PROT_READ), 0), pc::ERR_NO_MEM);
        assert_eq!(s.apply(Op::Munmap(pc::MEM_HOLE * pg, pg), 0), "0");
        assert_eq!(s.apply(Op::Munmap(0, pg), 0), "0");
        assert_eq!(s.apply(Op::Mprotect(0, pg, pc::PROT_READ), 0), pc::ERR_NO_MEM);
        assert_eq!(s.apply(Op::Mprotect(pg, pg, pc::PROT_NONE), 0), "0");
        assert_eq!(s.mem, vec![None, Some(pc::PROT_NONE), Some(pc::PROT_RW), Some(pc::PROT_RW), None, Some(pc::PROT_RW)]);
        // Different pages commute; the same page in different ways does not.
        assert!(commutes(Op::Mprotect(0, pg, pc::PROT_READ), Op::Mprotect(pg, pg, pc::PROT_READ)));
        assert!(commutes(Op::Mprotect(0, pg, pc::PROT_READ), Op::Munmap(pg, pg)));
        assert!(!commutes(Op::Mprotect(0, pg, pc::PROT_READ), Op::Munmap(0, pg)));
        assert!(!commutes(Op::Mprotect(0, pg, pc::PROT_READ), Op::Mprotect(0, pg, pc::PROT_NONE)));
        assert!(!commutes(Op::Mprotect(0, 4 * pg, pc::PROT_RW), Op::Mprotect(pg, pg, pc::PROT_READ)));
        assert!(commutes(Op::Mprotect(0, pg, pc::PROT_READ), Op::Mprotect(0, pg, pc::PROT_READ)));
        assert!(commutes(Op::Munmap(0, 4 * pg), Op::Munmap(0, pg)));
        assert!(commutes(Op::Mmap(2 * pg, pc::PROT_RW), Op::Munmap(0, 4 * pg)));
        assert!(commutes(Op::Mmap(2 * pg, pc::PROT_RW), Op::Stat(P::A)));
    }
}
