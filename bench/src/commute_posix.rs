//! The guest side of the POSIX commutativity checker (docs/commute.md), one program
//! for both systems: `bench-ours` runs it on the library OS's file system, `bench-linux` on
//! Linux's ext2 (the same disk image), when their command line holds the word
//! [`COMMAND_WORD`].
//!
//! Per case (the table is `posix_cases.rs`): worker 0 (core 0) makes the fixture, both workers
//! build their call's path before the region, then worker 0 runs call A and worker 1 (core 1)
//! call B, each between its own vCPU's start/stop markers; after both stopped worker 0
//! executes the epoch marker (the sharing plugin writes the lines shared in the regions), prints
//! `commute-posix i=N a=RES b=RES` and removes the fixture. The hand-over between the workers
//! (`GO`, `DONE`, B's result bytes) is written and read outside the regions only.

use alloc::format;
use alloc::string::String;
use core::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering::SeqCst};

use crate::posix_cases::{self as pc, FixtureOpen, OpenMode, Op, Whence, D, P};
use crate::Platform;

/// The command-line word that selects this program instead of a benchmark.
pub const COMMAND_WORD: &str = "commute-posix";
/// The last line of a finished run.
pub const DONE_LINE: &str = "commute-done";

/// A file-system error, as both systems' errors map onto it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PErr {
    NotFound,
    Exists,
    IsDir,
    NotDir,
    BadFd,
    Inval,
    NotEmpty,
    /// `EPERM` (Linux: a link to a directory).
    Perm,
    /// `ENOMEM` (`mprotect` of pages that are not mapped).
    NoMem,
    /// `EPIPE` (a write to a pipe with no read end open).
    BrokenPipe,
    /// Anything else: the system's own code.
    Other(i64),
}

impl PErr {
    fn label(self) -> String {
        match self {
            PErr::NotFound => pc::ERR_NOT_FOUND.into(),
            PErr::Exists => pc::ERR_EXISTS.into(),
            PErr::IsDir => pc::ERR_IS_DIR.into(),
            PErr::NotDir => pc::ERR_NOT_DIR.into(),
            PErr::BadFd => pc::ERR_BAD_FD.into(),
            PErr::Inval => pc::ERR_INVAL.into(),
            PErr::NotEmpty => pc::ERR_NOT_EMPTY.into(),
            PErr::Perm => pc::ERR_PERM.into(),
            PErr::NoMem => pc::ERR_NO_MEM.into(),
            PErr::BrokenPipe => pc::ERR_BROKEN_PIPE.into(),
            PErr::Other(c) => format!("E:Other{c}"),
        }
    }
}

/// What `stat` and `fstat` report that the cases look at.
#[derive(Clone, Copy, Debug)]
pub struct PStat {
    pub ino: u64,
    pub nlink: u64,
    pub size: u64,
    pub dir: bool,
}

/// The POSIX calls of one system. Paths are absolute and NUL-terminated (built before the
/// measured region, so a call allocates nothing for its path inside it).
pub trait PosixFs {
    /// The directory the fixture directory goes in (no trailing `/`).
    fn root(&self) -> &str;
    fn p_open(&self, path: &[u8], mode: OpenMode) -> Result<u64, PErr>;
    /// `O_RDWR` (with `create`: `| O_CREAT | O_EXCL`; with `append`: `| O_APPEND`).
    fn p_open_rw(&self, path: &[u8], create: bool, append: bool) -> Result<u64, PErr>;
    /// `openat(dir, rel, mode)`: `rel` a relative name, NUL-terminated.
    fn p_openat(&self, dir: u64, rel: &[u8], mode: OpenMode) -> Result<u64, PErr>;
    fn p_truncate(&self, path: &[u8], len: u64) -> Result<(), PErr>;
    /// `pipe()`: (read end, write end). Pipe descriptors are used only through the `p_pipe_*`
    /// calls (on the library OS they are `libos::fd` descriptors, not `libos::fs` ones).
    fn p_pipe(&self) -> Result<(u64, u64), PErr>;
    fn p_pipe_read(&self, fd: u64, buf: &mut [u8]) -> Result<usize, PErr>;
    fn p_pipe_write(&self, fd: u64, buf: &[u8]) -> Result<usize, PErr>;
    fn p_pipe_close(&self, fd: u64) -> Result<(), PErr>;
    /// Close what is still open of a pipe and free it (teardown).
    fn p_pipe_free(&self, r: u64, w: u64);
    /// Before a region: make a pipe descriptor usable without first-use work (the library OS
    /// maps the pipe's ring into the calling context's window on first use).
    fn p_pipe_warm(&self, _fd: u64) {}
    /// After a case, on each worker (outside the regions): drop per-context state the case's
    /// pipe left (the library OS: the ring's mapping).
    fn p_after_case(&self) {}
    /// Once, before the workers start.
    fn p_setup(&self) -> Result<(), PErr> {
        Ok(())
    }
    fn p_close(&self, fd: u64) -> Result<(), PErr>;
    fn p_stat(&self, path: &[u8]) -> Result<PStat, PErr>;
    fn p_fstat(&self, fd: u64) -> Result<PStat, PErr>;
    fn p_read(&self, fd: u64, buf: &mut [u8]) -> Result<usize, PErr>;
    fn p_pread(&self, fd: u64, buf: &mut [u8], off: u64) -> Result<usize, PErr>;
    fn p_write(&self, fd: u64, buf: &[u8]) -> Result<usize, PErr>;
    fn p_pwrite(&self, fd: u64, buf: &[u8], off: u64) -> Result<usize, PErr>;
    fn p_lseek(&self, fd: u64, off: i64, whence: Whence) -> Result<u64, PErr>;
    fn p_unlink(&self, path: &[u8]) -> Result<(), PErr>;
    fn p_link(&self, old: &[u8], new: &[u8]) -> Result<(), PErr>;
    fn p_mkdir(&self, path: &[u8]) -> Result<(), PErr>;
    fn p_rmdir(&self, path: &[u8]) -> Result<(), PErr>;
    fn p_rename(&self, old: &[u8], new: &[u8]) -> Result<(), PErr>;
    fn p_dup(&self, fd: u64) -> Result<u64, PErr>;
    fn p_ftruncate(&self, fd: u64, len: u64) -> Result<(), PErr>;
    fn p_fsync(&self, fd: u64) -> Result<(), PErr>;
    /// The directory's entries (all of them, to the end), each given to `out.push`.
    fn p_readdir(&self, path: &[u8], out: &mut DirNames) -> Result<(), PErr>;
    /// `symlink(target, path)`; `target` NUL-terminated.
    fn p_symlink(&self, target: &[u8], path: &[u8]) -> Result<(), PErr>;
    /// `readlink(path)` into `buf`: the target's length (cut to `buf`).
    fn p_readlink(&self, path: &[u8], buf: &mut [u8]) -> Result<usize, PErr>;
    /// Anonymous private memory of `len` bytes; returns its address.
    fn p_mmap(&self, len: u64, prot: u64) -> Result<u64, PErr>;
    fn p_munmap(&self, addr: u64, len: u64) -> Result<(), PErr>;
    fn p_mprotect(&self, addr: u64, len: u64, prot: u64) -> Result<(), PErr>;
}

/// A `readdir`'s names, collected on the stack inside the measured region (sorted and
/// formatted after it).
pub struct DirNames {
    names: [[u8; pc::DIR_NAME_MAX]; pc::DIR_MAX_NAMES],
    lens: [usize; pc::DIR_MAX_NAMES],
    count: usize,
    /// A name longer than `DIR_NAME_MAX` or more than `DIR_MAX_NAMES` names: the result says
    /// so rather than showing a cut list.
    overflow: bool,
}

impl DirNames {
    fn new() -> DirNames {
        DirNames { names: [[0; pc::DIR_NAME_MAX]; pc::DIR_MAX_NAMES], lens: [0; pc::DIR_MAX_NAMES], count: 0, overflow: false }
    }
    /// One entry as the system listed it; `.` and `..` are left out.
    pub fn push(&mut self, name: &[u8]) {
        if name == b"." || name == b".." {
            return;
        }
        if self.count == pc::DIR_MAX_NAMES || name.len() > pc::DIR_NAME_MAX {
            self.overflow = true;
            return;
        }
        self.names[self.count][..name.len()].copy_from_slice(name);
        self.lens[self.count] = name.len();
        self.count += 1;
    }
    /// `dir:` and the names in byte order joined by `,` (the model's format).
    fn text(&self) -> String {
        if self.overflow {
            return "E:DirNamesOverflow".into();
        }
        let mut v: alloc::vec::Vec<&[u8]> = (0..self.count).map(|k| &self.names[k][..self.lens[k]]).collect();
        v.sort();
        let mut t = String::from("dir:");
        for (k, n) in v.iter().enumerate() {
            if k > 0 {
                t.push(',');
            }
            t.push_str(core::str::from_utf8(n).unwrap_or("?"));
        }
        t
    }
}

/// A NUL-terminated path on the stack.
struct Path {
    buf: [u8; 128],
    len: usize,
}

impl Path {
    /// `ROOT/cm` or `ROOT/cm/REL`.
    fn new(root: &str, rel: Option<&str>) -> Path {
        let mut p = Path { buf: [0; 128], len: 0 };
        p.push(root.as_bytes());
        p.push(b"/cm");
        if let Some(r) = rel {
            p.push(b"/");
            p.push(r.as_bytes());
        }
        p
    }
    /// A relative name alone (for `openat`).
    fn leaf(name: &str) -> Path {
        let mut p = Path { buf: [0; 128], len: 0 };
        p.push(name.as_bytes());
        p
    }
    fn push(&mut self, s: &[u8]) {
        let n = s.len().min(self.buf.len() - 1 - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s[..n]);
        self.len += n;
    }
    /// With the NUL.
    fn c(&self) -> &[u8] {
        &self.buf[..=self.len]
    }
}

/// A call's prepared arguments: its paths, its descriptor (the fixture's number), its buffer.
struct Prepared {
    p1: Path,
    p2: Path,
    fd: u64,
    buf: [u8; pc::IO_BYTES],
    dir: DirNames,
}

fn paths_of(op: Op) -> (Option<P>, Option<P>) {
    match op {
        Op::Open(p, _) | Op::Stat(p) | Op::Unlink(p) | Op::Mkdir(p) | Op::Rmdir(p) | Op::Truncate(p, _) | Op::Readdir(p) | Op::Symlink(p) | Op::Readlink(p) => (Some(p), None),
        Op::Link(a, b) | Op::Rename(a, b) => (Some(a), Some(b)),
        _ => (None, None),
    }
}

fn desc_of(op: Op) -> Option<D> {
    match op {
        Op::Close(d) | Op::Fstat(d) | Op::Read(d) | Op::Pread(d, _) | Op::Write(d) | Op::Pwrite(d, _) | Op::Lseek(d, _, _) | Op::Dup(d) | Op::Ftruncate(d, _) | Op::Fsync(d) => Some(d),
        Op::Openat(..) => Some(D::Dd),
        _ => None,
    }
}

fn prepare<F: PosixFs>(fs: &F, root: &str, op: Op, who: u8, fds: &[AtomicU64; pc::ALL_DESCS]) -> Prepared {
    let (a, b) = paths_of(op);
    let mut buf = [0u8; pc::IO_BYTES];
    if matches!(op, Op::Write(_) | Op::Pwrite(..)) {
        for (i, x) in buf.iter_mut().enumerate() {
            *x = pc::write_byte(who, i);
        }
    }
    let fd = match op {
        Op::Munmap(..) | Op::Mprotect(..) => MEM_BASE.load(SeqCst),
        _ => desc_of(op).map(|d| fds[d.index()].load(SeqCst)).unwrap_or(u64::MAX),
    };
    if desc_of(op).is_some_and(D::is_pipe) {
        fs.p_pipe_warm(fd);
    }
    Prepared {
        p1: match op {
            Op::Openat(p, _) => Path::leaf(p.leaf()),
            _ => Path::new(root, a.map(P::rel)),
        },
        p2: Path::new(root, b.map(P::rel)),
        fd,
        buf,
        dir: DirNames::new(),
    }
}

/// The raw outcome of one call, turned into its result string after the region.
enum Raw {
    Unit(Result<(), PErr>),
    Fd(Result<u64, PErr>),
    /// `pipe`'s two descriptors.
    Pipe(Result<(u64, u64), PErr>),
    /// `mmap`'s address and length.
    Map(Result<(u64, u64), PErr>),
    Stat(Result<PStat, PErr>),
    Num(Result<u64, PErr>),
    Data(Result<usize, PErr>),
    /// `readdir`: the names are in `Prepared::dir`.
    Dir(Result<(), PErr>),
    /// `readlink`: the target's length; its bytes are in `Prepared::buf`.
    Link(Result<usize, PErr>),
}

/// Run the call (inside the region: no allocation, no shared user memory).
fn call<F: PosixFs>(fs: &F, op: Op, a: &mut Prepared) -> Raw {
    match op {
        Op::Open(_, m) => Raw::Fd(fs.p_open(a.p1.c(), m)),
        Op::Close(d) if d.is_pipe() => Raw::Unit(fs.p_pipe_close(a.fd)),
        Op::Close(_) => Raw::Unit(fs.p_close(a.fd)),
        Op::Stat(_) => Raw::Stat(fs.p_stat(a.p1.c())),
        Op::Fstat(_) => Raw::Stat(fs.p_fstat(a.fd)),
        Op::Read(d) if d.is_pipe() => Raw::Data(fs.p_pipe_read(a.fd, &mut a.buf)),
        Op::Read(_) => Raw::Data(fs.p_read(a.fd, &mut a.buf)),
        Op::Pread(_, off) => Raw::Data(fs.p_pread(a.fd, &mut a.buf, off)),
        Op::Write(d) if d.is_pipe() => Raw::Num(fs.p_pipe_write(a.fd, &a.buf).map(|n| n as u64)),
        Op::Write(_) => Raw::Num(fs.p_write(a.fd, &a.buf).map(|n| n as u64)),
        Op::Pwrite(_, off) => Raw::Num(fs.p_pwrite(a.fd, &a.buf, off).map(|n| n as u64)),
        Op::Lseek(_, off, w) => Raw::Num(fs.p_lseek(a.fd, off, w)),
        Op::Unlink(_) => Raw::Unit(fs.p_unlink(a.p1.c())),
        Op::Link(..) => Raw::Unit(fs.p_link(a.p1.c(), a.p2.c())),
        Op::Mkdir(_) => Raw::Unit(fs.p_mkdir(a.p1.c())),
        Op::Rename(..) => Raw::Unit(fs.p_rename(a.p1.c(), a.p2.c())),
        Op::Dup(_) => Raw::Fd(fs.p_dup(a.fd)),
        Op::Ftruncate(_, len) => Raw::Unit(fs.p_ftruncate(a.fd, len)),
        Op::Fsync(_) => Raw::Unit(fs.p_fsync(a.fd)),
        Op::Readdir(_) => Raw::Dir(fs.p_readdir(a.p1.c(), &mut a.dir)),
        Op::Symlink(_) => Raw::Unit(fs.p_symlink(SYMLINK_TARGET_C, a.p1.c())),
        Op::Readlink(_) => Raw::Link(fs.p_readlink(a.p1.c(), &mut a.buf)),
        Op::Rmdir(_) => Raw::Unit(fs.p_rmdir(a.p1.c())),
        Op::Openat(_, m) => Raw::Fd(fs.p_openat(a.fd, a.p1.c(), m)),
        Op::Truncate(_, len) => Raw::Unit(fs.p_truncate(a.p1.c(), len)),
        Op::Pipe => Raw::Pipe(fs.p_pipe()),
        Op::Mmap(len, prot) => Raw::Map(fs.p_mmap(len, prot).map(|a| (a, len))),
        Op::Munmap(off, len) => Raw::Unit(fs.p_munmap(a.fd + off, len)),
        Op::Mprotect(off, len, prot) => Raw::Unit(fs.p_mprotect(a.fd + off, len, prot)),
    }
}

/// `pc::SYMLINK_TARGET` with its NUL.
const SYMLINK_TARGET_C: &[u8] = b"a\0";
const _: () = assert!(SYMLINK_TARGET_C.len() == pc::SYMLINK_TARGET.len() + 1 && SYMLINK_TARGET_C[0] == pc::SYMLINK_TARGET.as_bytes()[0]);

/// The fixture's inode numbers, to name a stat's inode: `a`, `b`, `d`, `d/c`.
const INO_NAMES: [&str; 4] = ["a", "b", "d", "c"];

/// The result in the model's format (`xtask/src/commute/posix_model.rs`).
fn result_text(r: &Raw, buf: &[u8], dir: &DirNames, inos: &[AtomicU64; 4]) -> String {
    match r {
        Raw::Dir(Ok(())) => dir.text(),
        Raw::Link(Ok(n)) => format!("link:{}", core::str::from_utf8(&buf[..*n]).unwrap_or("?")),
        Raw::Unit(Ok(())) => "0".into(),
        Raw::Fd(Ok(_)) | Raw::Pipe(Ok(_)) => "fd".into(),
        Raw::Map(Ok(_)) => "map".into(),
        Raw::Num(Ok(n)) => format!("{n}"),
        Raw::Data(Ok(n)) => format!("{n}:{:08x}", pc::fnv(&buf[..*n])),
        Raw::Stat(Ok(s)) => {
            let name = inos.iter().position(|i| i.load(SeqCst) == s.ino).map(|k| INO_NAMES[k]).unwrap_or("new");
            if s.dir {
                format!("d:{name}:{}", s.nlink)
            } else {
                format!("f:{name}:{}:{}", s.nlink, s.size)
            }
        }
        Raw::Unit(Err(e)) | Raw::Fd(Err(e)) | Raw::Pipe(Err(e)) | Raw::Map(Err(e)) | Raw::Stat(Err(e)) | Raw::Num(Err(e)) | Raw::Data(Err(e)) | Raw::Dir(Err(e)) | Raw::Link(Err(e)) => e.label(),
    }
}

/// The descriptors a call made, for the teardown: a file descriptor, or a pipe's two ends.
#[derive(Clone, Copy)]
enum NewFds {
    None,
    File(u64),
    Pipe(u64, u64),
    /// A mapping: address and length.
    Map(u64, u64),
}

impl NewFds {
    fn of(r: &Raw) -> NewFds {
        match r {
            Raw::Fd(Ok(fd)) => NewFds::File(*fd),
            Raw::Pipe(Ok((r, w))) => NewFds::Pipe(*r, *w),
            Raw::Map(Ok((a, len))) => NewFds::Map(*a, *len),
            _ => NewFds::None,
        }
    }
    /// As three words for the hand-over between the workers: kind, first, second.
    fn store(self, to: &[AtomicU64; 3]) {
        let (k, a, b) = match self {
            NewFds::None => (0, 0, 0),
            NewFds::File(f) => (1, f, 0),
            NewFds::Pipe(r, w) => (2, r, w),
            NewFds::Map(a, len) => (3, a, len),
        };
        to[1].store(a, SeqCst);
        to[2].store(b, SeqCst);
        to[0].store(k, SeqCst);
    }
    fn load(from: &[AtomicU64; 3]) -> NewFds {
        let (a, b) = (from[1].load(SeqCst), from[2].load(SeqCst));
        match from[0].load(SeqCst) {
            1 => NewFds::File(a),
            2 => NewFds::Pipe(a, b),
            3 => NewFds::Map(a, b),
            _ => NewFds::None,
        }
    }
}

/// The fixture mapping `M0`'s address (made by worker 0 before each case; memory calls of a
/// case address it through `Prepared::fd`).
static MEM_BASE: AtomicU64 = AtomicU64::new(0);

/// The write end of the fixture's empty pipe (`E0`'s other end), closed by the fixture and
/// kept for the teardown's `p_pipe_free`.
static EMPTY_PIPE_W: AtomicU64 = AtomicU64::new(0);

/// Make the fixture: the directory, the files with their bytes, the descriptors.
fn make_fixture<F: PosixFs>(fs: &F, fds: &[AtomicU64; pc::ALL_DESCS], inos: &[AtomicU64; 4]) -> Result<(), String> {
    let root = fs.root();
    fn e(what: &'static str) -> impl Fn(PErr) -> String {
        move |x| format!("fixture: {what}: {x:?}")
    }
    fs.p_mkdir(Path::new(root, None).c()).map_err(e("mkdir cm"))?;
    fs.p_mkdir(Path::new(root, Some("d")).c()).map_err(e("mkdir d"))?;
    for (p, seed, bytes) in [(P::A, 1u8, pc::FILE_BYTES), (P::B, 2, pc::FILE_BYTES), (P::DC, 3, pc::SMALL_BYTES)] {
        let fd = fs.p_open_rw(Path::new(root, Some(p.rel())).c(), true, false).map_err(e("create"))?;
        let mut block = [0u8; 512];
        let mut off = 0u64;
        while off < bytes {
            let n = (bytes - off).min(512) as usize;
            for (i, b) in block[..n].iter_mut().enumerate() {
                *b = pc::fixture_byte(seed, off + i as u64);
            }
            let w = fs.p_write(fd, &block[..n]).map_err(e("write"))?;
            if w != n {
                return Err(format!("fixture: short write of {}", p.rel()));
            }
            off += n as u64;
        }
        fs.p_close(fd).map_err(e("close"))?;
    }
    for d in pc::DESCS {
        let path = Path::new(root, d.file().map(P::rel));
        let fd = match d.fixture_open() {
            FixtureOpen::ReadWrite => fs.p_open_rw(path.c(), false, false),
            FixtureOpen::Append => fs.p_open_rw(path.c(), false, true),
            FixtureOpen::Directory => fs.p_open(path.c(), OpenMode::Read),
        };
        fds[d.index()].store(fd.map_err(e("open"))?, SeqCst);
    }
    let (r, w) = fs.p_pipe().map_err(e("pipe"))?;
    fds[pc::D::P0.index()].store(r, SeqCst);
    fds[pc::D::P1.index()].store(w, SeqCst);
    let mut bytes = [0u8; pc::PIPE_FIXTURE_BYTES];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = pc::pipe_byte(i);
    }
    if fs.p_pipe_write(w, &bytes).map_err(e("pipe write"))? != bytes.len() {
        return Err("fixture: short pipe write".into());
    }
    // E0: an empty pipe with its write end closed, so its reads are end of file.
    let (er, ew) = fs.p_pipe().map_err(e("pipe E"))?;
    fs.p_pipe_close(ew).map_err(e("close of E's write end"))?;
    fds[pc::D::E0.index()].store(er, SeqCst);
    EMPTY_PIPE_W.store(ew, SeqCst);
    // M0: MEM_PAGES pages read-write, the last one unmapped again (the hole).
    let m0 = fs.p_mmap(pc::MEM_PAGES * pc::PAGE, pc::PROT_RW).map_err(e("mmap"))?;
    fs.p_munmap(m0 + pc::MEM_HOLE * pc::PAGE, pc::PAGE).map_err(e("munmap of the hole"))?;
    MEM_BASE.store(m0, SeqCst);
    for (k, rel) in ["a", "b", "d", "d/c"].iter().enumerate() {
        inos[k].store(fs.p_stat(Path::new(root, Some(rel)).c()).map_err(e("stat"))?.ino, SeqCst);
    }
    Ok(())
}

/// Remove whatever the fixture and the case left: descriptors, names, directories.
fn remove_fixture<F: PosixFs>(fs: &F, fds: &[AtomicU64; pc::ALL_DESCS], new_fds: [NewFds; 2], m0_left: [bool; pc::MEM_PAGES as usize]) -> Result<(), String> {
    let root = fs.root();
    fs.p_after_case();
    // The case's new descriptors first: one may have reused the number of a fixture
    // descriptor the other call closed (Linux gives the lowest free number).
    for n in new_fds {
        match n {
            NewFds::None => {}
            NewFds::File(fd) => fs.p_close(fd).map_err(|x| format!("teardown: close of a case's descriptor: {x:?}"))?,
            NewFds::Pipe(r, w) => fs.p_pipe_free(r, w),
            NewFds::Map(a, len) => fs.p_munmap(a, len).map_err(|x| format!("teardown: munmap of a case's mapping: {x:?}"))?,
        }
    }
    for d in pc::DESCS {
        let _ = fs.p_close(fds[d.index()].load(SeqCst));
    }
    // M0's pages the case left mapped, one by one: a page the fixture (the hole) or the
    // case unmapped may hold memory the system mapped since (on Linux, musl's allocator
    // maps small groups of pages), which must not be unmapped.
    let base = MEM_BASE.load(SeqCst);
    for (k, _) in m0_left.iter().enumerate().filter(|(_, left)| **left) {
        fs.p_munmap(base + k as u64 * pc::PAGE, pc::PAGE).map_err(|x| format!("teardown: munmap of M0: {x:?}"))?;
    }
    // A closed end (`close(P1)`) gives an error here, which is fine: the other end frees it.
    fs.p_pipe_free(fds[pc::D::P0.index()].load(SeqCst), fds[pc::D::P1.index()].load(SeqCst));
    // No class closes E0, so the pipe is found through it.
    fs.p_pipe_free(fds[pc::D::E0.index()].load(SeqCst), EMPTY_PIPE_W.load(SeqCst));
    let remove = |rel: &str| -> Result<(), String> {
        let path = Path::new(root, Some(rel));
        match fs.p_stat(path.c()) {
            Ok(s) if s.dir => fs.p_rmdir(path.c()).map_err(|x| format!("teardown: rmdir {rel}: {x:?}")),
            Ok(_) => fs.p_unlink(path.c()).map_err(|x| format!("teardown: unlink {rel}: {x:?}")),
            // Missing, or a dangling link (`d/n` -> `d/a`: `stat` follows it), which only
            // `unlink` removes.
            Err(_) => match fs.p_unlink(path.c()) {
                Ok(()) | Err(PErr::NotFound) | Err(PErr::NotDir) => Ok(()),
                Err(x) => Err(format!("teardown: unlink {rel} (not found by stat): {x:?}")),
            },
        }
    };
    for top in pc::TEARDOWN {
        for child in pc::TEARDOWN_CHILDREN {
            remove(&format!("{top}/{child}"))?;
        }
        remove(top)?;
    }
    fs.p_rmdir(Path::new(root, None).c()).map_err(|x| format!("teardown: rmdir cm: {x:?}"))
}

/// The pages of `M0` still mapped after a case: all but the hole and those a successful
/// `munmap` of the case removed.
fn m0_pages_left(calls: [(Op, &str); 2]) -> [bool; pc::MEM_PAGES as usize] {
    let mut left = [true; pc::MEM_PAGES as usize];
    left[pc::MEM_HOLE as usize] = false;
    for (op, res) in calls {
        if let (Op::Munmap(off, len), "0") = (op, res) {
            for k in off / pc::PAGE..(off + len).div_ceil(pc::PAGE).min(pc::MEM_PAGES) {
                left[k as usize] = false;
            }
        }
    }
    left
}

/// Is case `i` picked by `pick` (`I,J-K,...`; none: every case)?
pub fn picked(pick: Option<&str>, i: usize) -> bool {
    let Some(p) = pick else { return true };
    p.split(',').any(|r| match r.split_once('-') {
        Some((a, b)) => matches!((a.parse::<usize>(), b.parse::<usize>()), (Ok(a), Ok(b)) if a <= i && i <= b),
        None => r.parse::<usize>() == Ok(i),
    })
}

/// `pick=...` from the command line.
pub fn pick_word(line: &str) -> Option<&str> {
    line.split_ascii_whitespace().find_map(|w| w.strip_prefix("pick="))
}

const QUIT: usize = usize::MAX;

/// Run the picked cases on two workers; `emit` prints a line on the console.
pub fn run<T: Platform + PosixFs>(p: &T, pick: Option<&str>, emit: fn(&str)) -> Result<(), String> {
    if p.cores() < 2 {
        return Err("commute-posix needs 2 cores".into());
    }
    p.fs_prepare().map_err(|e| format!("fs_prepare: {e:?}"))?;
    // A directory an earlier, interrupted run left (a native run) is an error, not reused.
    if p.p_stat(Path::new(p.root(), None).c()).is_ok() {
        return Err(format!("{}/cm exists already", p.root()));
    }
    let go = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    p.p_setup().map_err(|e| format!("setup: {e:?}"))?;
    let fds: [AtomicU64; pc::ALL_DESCS] = Default::default();
    let inos: [AtomicU64; 4] = Default::default();
    let b_text: [AtomicU8; 64] = [const { AtomicU8::new(0) }; 64];
    let b_len = AtomicUsize::new(0);
    let b_fds: [AtomicU64; 3] = Default::default();
    let failed: AtomicUsize = AtomicUsize::new(0);
    let body = |w: usize| {
        if w == 1 {
            // Worker 1: call B of each case worker 0 starts (GO = index + 1).
            let mut last = 0;
            loop {
                let g = loop {
                    let g = go.load(SeqCst);
                    if g != last {
                        break g;
                    }
                    core::hint::spin_loop();
                };
                if g == QUIT {
                    return;
                }
                last = g;
                let Some(c) = testdefs::pairs::case(pc::CALLS, g - 1) else { return };
                let mut prep = prepare(p, p.root(), c.b, 1, &fds);
                p.marker(1);
                let r = call(p, c.b, &mut prep);
                p.marker(2);
                let t = result_text(&r, &prep.buf, &prep.dir, &inos);
                for (i, b) in t.bytes().take(b_text.len()).enumerate() {
                    b_text[i].store(b, SeqCst);
                }
                b_len.store(t.len().min(b_text.len()), SeqCst);
                NewFds::of(&r).store(&b_fds);
                p.p_after_case();
                done.store(g, SeqCst);
            }
        }
        if w != 0 {
            return;
        }
        let mut outcome = Ok(());
        for i in 0..testdefs::pairs::count(pc::CALLS) {
            if !picked(pick, i) {
                continue;
            }
            let Some(c) = testdefs::pairs::case(pc::CALLS, i) else { break };
            if let Err(why) = make_fixture(p, &fds, &inos) {
                outcome = Err(why);
                break;
            }
            let mut prep = prepare(p, p.root(), c.a, 0, &fds);
            go.store(i + 1, SeqCst);
            p.marker(1);
            let r = call(p, c.a, &mut prep);
            p.marker(2);
            while done.load(SeqCst) != i + 1 {
                core::hint::spin_loop();
            }
            p.marker(5);
            let a = result_text(&r, &prep.buf, &prep.dir, &inos);
            let n = b_len.load(SeqCst);
            let bt: String = b_text[..n].iter().map(|b| b.load(SeqCst) as char).collect();
            emit(&format!("commute-posix i={i} a={a} b={bt}"));
            let left = m0_pages_left([(c.a, a.as_str()), (c.b, bt.as_str())]);
            if let Err(why) = remove_fixture(p, &fds, [NewFds::of(&r), NewFds::load(&b_fds)], left) {
                outcome = Err(format!("case {i}: {why}"));
                break;
            }
        }
        go.store(QUIT, SeqCst);
        if let Err(why) = outcome {
            emit(&format!("commute-error {why}"));
            failed.store(1, SeqCst);
        }
    };
    p.run_threads(2, &body).map_err(|e| format!("run_threads: {e:?}"))?;
    if failed.load(SeqCst) != 0 {
        return Err("a case failed (see the commute-error line)".into());
    }
    emit(DONE_LINE);
    Ok(())
}

#[cfg(target_os = "linux")]
mod linux_fs {
    use super::*;
    use crate::linux::Linux;

    fn errno() -> i64 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0) as i64
    }

    fn err() -> PErr {
        match errno() as i32 {
            libc::ENOENT => PErr::NotFound,
            libc::EEXIST => PErr::Exists,
            libc::EISDIR => PErr::IsDir,
            libc::ENOTDIR => PErr::NotDir,
            libc::EBADF => PErr::BadFd,
            libc::EINVAL => PErr::Inval,
            libc::ENOTEMPTY => PErr::NotEmpty,
            libc::EPERM => PErr::Perm,
            libc::ENOMEM => PErr::NoMem,
            libc::EPIPE => PErr::BrokenPipe,
            c => PErr::Other(c as i64),
        }
    }

    fn ok(r: i64) -> Result<i64, PErr> {
        if r < 0 {
            Err(err())
        } else {
            Ok(r)
        }
    }

    fn open_flags(mode: OpenMode) -> libc::c_int {
        match mode {
            OpenMode::Read => libc::O_RDONLY,
            OpenMode::CreateExcl => libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
            OpenMode::Trunc => libc::O_RDWR | libc::O_TRUNC,
            OpenMode::Append => libc::O_WRONLY | libc::O_APPEND,
        }
    }

    fn cp(path: &[u8]) -> *const libc::c_char {
        path.as_ptr() as *const libc::c_char
    }

    fn pstat(s: &libc::stat) -> PStat {
        PStat { ino: s.st_ino, nlink: s.st_nlink, size: s.st_size as u64, dir: s.st_mode & libc::S_IFMT == libc::S_IFDIR }
    }

    // SAFETY (every libc call below): the paths are NUL-terminated buffers (`Path::c`), the
    // buffers are valid for their lengths, `stat` structs are plain data written by the call.
    impl PosixFs for Linux {
        fn root(&self) -> &str {
            // The guest's /init mounts the disk at /mnt (`fs_prepare`); a native run uses the temporary directory.
            static NATIVE: std::sync::OnceLock<std::string::String> = std::sync::OnceLock::new();
            if std::process::id() == 1 {
                "/mnt"
            } else {
                NATIVE.get_or_init(|| std::env::temp_dir().to_string_lossy().trim_end_matches('/').into())
            }
        }
        fn p_open(&self, path: &[u8], mode: OpenMode) -> Result<u64, PErr> {
            // SAFETY: see the impl's comment (NUL-terminated path, valid buffer or struct).
            ok(unsafe { libc::open(cp(path), open_flags(mode), 0o644) } as i64).map(|f| f as u64)
        }
        fn p_open_rw(&self, path: &[u8], create: bool, append: bool) -> Result<u64, PErr> {
            let flags = libc::O_RDWR | if create { libc::O_CREAT | libc::O_EXCL } else { 0 } | if append { libc::O_APPEND } else { 0 };
            // SAFETY: see the impl's comment (NUL-terminated path, valid buffer or struct).
            ok(unsafe { libc::open(cp(path), flags, 0o644) } as i64).map(|f| f as u64)
        }
        fn p_openat(&self, dir: u64, rel: &[u8], mode: OpenMode) -> Result<u64, PErr> {
            // SAFETY: see the impl's comment (NUL-terminated path, valid buffer or struct).
            ok(unsafe { libc::openat(dir as i32, cp(rel), open_flags(mode), 0o644) } as i64).map(|f| f as u64)
        }
        fn p_truncate(&self, path: &[u8], len: u64) -> Result<(), PErr> {
            // SAFETY: see the impl's comment (NUL-terminated path, valid buffer or struct).
            ok(unsafe { libc::truncate(cp(path), len as libc::off_t) } as i64).map(|_| ())
        }
        fn p_pipe(&self) -> Result<(u64, u64), PErr> {
            let mut fds = [0 as libc::c_int; 2];
            // SAFETY: see the impl's comment (`fds` is the two ints pipe writes).
            ok(unsafe { libc::pipe(fds.as_mut_ptr()) } as i64).map(|_| (fds[0] as u64, fds[1] as u64))
        }
        fn p_pipe_read(&self, fd: u64, buf: &mut [u8]) -> Result<usize, PErr> {
            self.p_read(fd, buf)
        }
        fn p_mmap(&self, len: u64, prot: u64) -> Result<u64, PErr> {
            // SAFETY: an anonymous private mapping at an address the kernel picks touches no
            // existing memory.
            let p = unsafe { libc::mmap(core::ptr::null_mut(), len as usize, prot as libc::c_int, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
            if p == libc::MAP_FAILED {
                return Err(err());
            }
            Ok(p as u64)
        }
        // munmap and mprotect go straight to the kernel: the guest's musl rounds mprotect's
        // address down to a page (an unaligned one then succeeds), glibc does not.
        fn p_munmap(&self, addr: u64, len: u64) -> Result<(), PErr> {
            // SAFETY: the addresses are the fixture mapping's or a case's own mapping's; no
            // reference into them exists.
            ok(unsafe { libc::syscall(libc::SYS_munmap, addr, len) } as i64).map(|_| ())
        }
        fn p_mprotect(&self, addr: u64, len: u64, prot: u64) -> Result<(), PErr> {
            // SAFETY: as `p_munmap`: only the fixture mapping, which nothing reads or writes.
            ok(unsafe { libc::syscall(libc::SYS_mprotect, addr, len, prot) } as i64).map(|_| ())
        }
        fn p_pipe_write(&self, fd: u64, buf: &[u8]) -> Result<usize, PErr> {
            self.p_write(fd, buf)
        }
        fn p_pipe_close(&self, fd: u64) -> Result<(), PErr> {
            self.p_close(fd)
        }
        fn p_pipe_free(&self, r: u64, w: u64) {
            let _ = self.p_close(r);
            let _ = self.p_close(w);
        }
        fn p_close(&self, fd: u64) -> Result<(), PErr> {
            // SAFETY: see the impl's comment (NUL-terminated path, valid buffer or struct).
            ok(unsafe { libc::close(fd as i32) } as i64).map(|_| ())
        }
        fn p_stat(&self, path: &[u8]) -> Result<PStat, PErr> {
            // SAFETY: see the impl's comment (NUL-terminated path, valid buffer or struct).
            let mut s: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: see the impl's comment (NUL-terminated path, valid buffer or struct).
            ok(unsafe { libc::stat(cp(path), &mut s) } as i64).map(|_| pstat(&s))
        }
        fn p_fstat(&self, fd: u64) -> Result<PStat, PErr> {
            // SAFETY: see the impl's comment (NUL-terminated path, valid buffer or struct).
            let mut s: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: see the impl's comment (NUL-terminated path, valid buffer or struct).
            ok(unsafe { libc::fstat(fd as i32, &mut s) } as i64).map(|_| pstat(&s))
        }
        fn p_read(&self, fd: u64, buf: &mut [u8]) -> Result<usize, PErr> {
            // SAFETY: see the impl's comment (NUL-terminated path, valid buffer or struct).
            ok(unsafe { libc::read(fd as i32, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) } as i64).map(|n| n as usize)
        }
        fn p_pread(&self, fd: u64, buf: &mut [u8], off: u64) -> Result<usize, PErr> {
            // SAFETY: see the impl's comment (NUL-terminated path, valid buffer or struct).
            ok(unsafe { libc::pread(fd as i32, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), off as libc::off_t) } as i64).map(|n| n as usize)
        }
        fn p_write(&self, fd: u64, buf: &[u8]) -> Result<usize, PErr> {
            // SAFETY: see the impl's comment (NUL-terminated path, valid buffer or struct).
            ok(unsafe { libc::write(fd as i32, buf.as_ptr() as *const libc::c_void, buf.len()) } as i64).map(|n| n as usize)
        }
        fn p_pwrite(&self, fd: u64, buf: &[u8], off: u64) -> Result<usize, PErr> {
            // SAFETY: see the impl's comment (NUL-terminated path, valid buffer or struct).
            ok(unsafe { libc::pwrite(fd as i32, buf.as_ptr() as *const libc::c_void, buf.len(), off as libc::off_t) } as i64).map(|n| n as usize)
        }
        fn p_lseek(&self, fd: u64, off: i64, whence: Whence) -> Result<u64, PErr> {
            let w = match whence {
                Whence::Set => libc::SEEK_SET,
                Whence::Cur => libc::SEEK_CUR,
                Whence::End => libc::SEEK_END,
            };
            // SAFETY: see the impl's comment (NUL-terminated path, valid buffer or struct).
            ok(unsafe { libc::lseek(fd as i32, off as libc::off_t, w) } as i64).map(|n| n as u64)
        }
        fn p_unlink(&self, path: &[u8]) -> Result<(), PErr> {
            // SAFETY: see the impl's comment (NUL-terminated path, valid buffer or struct).
            ok(unsafe { libc::unlink(cp(path)) } as i64).map(|_| ())
        }
        fn p_link(&self, old: &[u8], new: &[u8]) -> Result<(), PErr> {
            // SAFETY: see the impl's comment (NUL-terminated path, valid buffer or struct).
            ok(unsafe { libc::link(cp(old), cp(new)) } as i64).map(|_| ())
        }
        fn p_mkdir(&self, path: &[u8]) -> Result<(), PErr> {
            // SAFETY: see the impl's comment (NUL-terminated path, valid buffer or struct).
            ok(unsafe { libc::mkdir(cp(path), 0o755) } as i64).map(|_| ())
        }
        fn p_rmdir(&self, path: &[u8]) -> Result<(), PErr> {
            // SAFETY: see the impl's comment (NUL-terminated path, valid buffer or struct).
            ok(unsafe { libc::rmdir(cp(path)) } as i64).map(|_| ())
        }
        fn p_rename(&self, old: &[u8], new: &[u8]) -> Result<(), PErr> {
            // SAFETY: see the impl's comment (NUL-terminated path, valid buffer or struct).
            ok(unsafe { libc::rename(cp(old), cp(new)) } as i64).map(|_| ())
        }
        fn p_dup(&self, fd: u64) -> Result<u64, PErr> {
            // SAFETY: see the impl's comment (dup has no memory arguments).
            ok(unsafe { libc::dup(fd as i32) } as i64).map(|f| f as u64)
        }
        fn p_ftruncate(&self, fd: u64, len: u64) -> Result<(), PErr> {
            // SAFETY: see the impl's comment (ftruncate has no memory arguments).
            ok(unsafe { libc::ftruncate(fd as i32, len as libc::off_t) } as i64).map(|_| ())
        }
        fn p_fsync(&self, fd: u64) -> Result<(), PErr> {
            // SAFETY: see the impl's comment (fsync has no memory arguments).
            ok(unsafe { libc::fsync(fd as i32) } as i64).map(|_| ())
        }
        fn p_readdir(&self, path: &[u8], out: &mut DirNames) -> Result<(), PErr> {
            // What opendir/readdir/closedir do, without opendir's allocation: open the
            // directory, getdents64 into a stack buffer until it returns 0, close.
            // SAFETY: `path` is NUL-terminated (`Path::c`).
            let fd = ok(unsafe { libc::open(cp(path), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) } as i64)? as i32;
            let mut buf = [0u8; 1024];
            let r = loop {
                // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`, which lives
                // across the call.
                let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
                let n = match ok(n) {
                    Ok(0) => break Ok(()),
                    Ok(n) => n as usize,
                    Err(e) => break Err(e),
                };
                // linux_dirent64: u64 ino, i64 off, u16 reclen, u8 type, NUL-terminated name.
                let mut at = 0;
                while at + 19 < n {
                    let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
                    if reclen < 20 || at + reclen > n {
                        break;
                    }
                    let name = &buf[at + 19..at + reclen];
                    let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
                    out.push(&name[..len]);
                    at += reclen;
                }
            };
            // SAFETY: `fd` is the descriptor opened above, closed once.
            unsafe { libc::close(fd) };
            r
        }
        fn p_symlink(&self, target: &[u8], path: &[u8]) -> Result<(), PErr> {
            // SAFETY: both NUL-terminated.
            ok(unsafe { libc::symlink(cp(target), cp(path)) } as i64).map(|_| ())
        }
        fn p_readlink(&self, path: &[u8], buf: &mut [u8]) -> Result<usize, PErr> {
            // SAFETY: `path` is NUL-terminated; the kernel writes at most `buf.len()` bytes.
            ok(unsafe { libc::readlink(cp(path), buf.as_mut_ptr() as *mut libc::c_char, buf.len()) } as i64).map(|n| n as usize)
        }
        fn p_setup(&self) -> Result<(), PErr> {
            // A write to a pipe whose read end is closed (`close(P0)` then `write(P1)`) must
            // return EPIPE, as the model says, not kill the program with SIGPIPE.
            // SAFETY: SIG_IGN installs no handler code; nothing else in the program uses
            // SIGPIPE.
            if unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) } == libc::SIG_ERR {
                return Err(err());
            }
            Ok(())
        }
    }
}

#[cfg(target_os = "none")]
mod ours_fs {
    use super::*;
    use crate::ours::Ours;
    use libos::fd as lfd;
    use libos::fs::{self as lfs, Fd, FsError};

    /// The process-wide descriptor table pipes are made in (`p_setup`).
    static PIPE_TABLE: AtomicU64 = AtomicU64::new(0);

    fn pfd(obj: u64) -> lfd::Fd {
        lfd::Fd { table: PIPE_TABLE.load(SeqCst), obj }
    }

    fn perr(e: abi::Error) -> PErr {
        match e {
            // A closed descriptor (its slot's generation changed), or the wrong end of a pipe.
            abi::Error::NoSuchObject | abi::Error::NotPermitted => PErr::BadFd,
            abi::Error::InvalidArgument => PErr::Inval,
            abi::Error::NoMemory => PErr::NoMem,
            abi::Error::BrokenPipe => PErr::BrokenPipe,
            _ => PErr::Other(1100),
        }
    }

    fn open_flags(mode: OpenMode) -> u32 {
        match mode {
            OpenMode::Read => lfs::O_RDONLY,
            OpenMode::CreateExcl => lfs::O_CREAT | lfs::O_EXCL | lfs::O_RDWR,
            OpenMode::Trunc => lfs::O_RDWR | lfs::O_TRUNC,
            OpenMode::Append => lfs::O_WRONLY | lfs::O_APPEND,
        }
    }

    fn err(e: FsError) -> PErr {
        match e {
            FsError::NotFound => PErr::NotFound,
            FsError::Exists => PErr::Exists,
            FsError::IsDir => PErr::IsDir,
            FsError::NotDir => PErr::NotDir,
            FsError::BadDescriptor => PErr::BadFd,
            FsError::InvalidArgument => PErr::Inval,
            // Offset by 1000 so it is not mistaken for a Linux errno.
            FsError::NoSpace => PErr::Other(1001),
            FsError::NotEmpty => PErr::NotEmpty,
            FsError::NameTooLong => PErr::Other(1003),
            FsError::Io => PErr::Other(1004),
            FsError::NoMemory => PErr::Other(1005),
            _ => PErr::Other(1000),
        }
    }

    /// The path without its NUL.
    fn s(path: &[u8]) -> &str {
        core::str::from_utf8(&path[..path.len().saturating_sub(1)]).unwrap_or("")
    }

    fn pstat(st: lfs::Stat) -> PStat {
        PStat { ino: st.ino as u64, nlink: st.links as u64, size: st.size, dir: st.mode & lfs::S_IFMT == lfs::S_IFDIR }
    }

    impl PosixFs for Ours {
        fn root(&self) -> &str {
            ""
        }
        fn p_open(&self, path: &[u8], mode: OpenMode) -> Result<u64, PErr> {
            lfs::open(s(path), open_flags(mode)).map(|f| f.0 as u64).map_err(err)
        }
        fn p_open_rw(&self, path: &[u8], create: bool, append: bool) -> Result<u64, PErr> {
            let flags = lfs::O_RDWR | if create { lfs::O_CREAT | lfs::O_EXCL } else { 0 } | if append { lfs::O_APPEND } else { 0 };
            lfs::open(s(path), flags).map(|f| f.0 as u64).map_err(err)
        }
        fn p_openat(&self, dir: u64, rel: &[u8], mode: OpenMode) -> Result<u64, PErr> {
            lfs::openat(Fd(dir as u32), s(rel), open_flags(mode)).map(|f| f.0 as u64).map_err(err)
        }
        fn p_truncate(&self, path: &[u8], len: u64) -> Result<(), PErr> {
            lfs::truncate(s(path), len).map_err(err)
        }
        fn p_setup(&self) -> Result<(), PErr> {
            // The process-wide descriptor table, made before the workers start so both
            // threads find it; pipes go there (a private descriptor is one context's only).
            let t = lfd::table(lfd::Scope::Process).map_err(perr)?;
            PIPE_TABLE.store(t, SeqCst);
            Ok(())
        }
        fn p_pipe(&self) -> Result<(u64, u64), PErr> {
            lfd::pipe(lfd::Scope::Process).map(|(r, w)| (r.obj, w.obj)).map_err(perr)
        }
        fn p_pipe_read(&self, fd: u64, buf: &mut [u8]) -> Result<usize, PErr> {
            lfd::read(pfd(fd), buf).map_err(perr)
        }
        fn p_mmap(&self, len: u64, prot: u64) -> Result<u64, PErr> {
            libos::mman::mmap(len, prot).map_err(perr)
        }
        fn p_munmap(&self, addr: u64, len: u64) -> Result<(), PErr> {
            libos::mman::munmap(addr, len).map_err(perr)
        }
        fn p_mprotect(&self, addr: u64, len: u64, prot: u64) -> Result<(), PErr> {
            libos::mman::mprotect(addr, len, prot).map_err(perr)
        }
        fn p_pipe_write(&self, fd: u64, buf: &[u8]) -> Result<usize, PErr> {
            lfd::write(pfd(fd), buf).map_err(perr)
        }
        fn p_pipe_close(&self, fd: u64) -> Result<(), PErr> {
            lfd::close(pfd(fd)).map_err(perr)
        }
        fn p_pipe_free(&self, r: u64, w: u64) {
            // A process-wide pipe's ring stays in the table's share after its last close
            // (`libos::fd::proc_last_close`): delete it here, or every case would leave 64 KiB.
            let ring = lfd::object(pfd(r)).or_else(|_| lfd::object(pfd(w)));
            let _ = lfd::close(pfd(r));
            let _ = lfd::close(pfd(w));
            if let Ok(ring) = ring {
                let _ = libos::sys::share_delobj(ring);
            }
        }
        fn p_pipe_warm(&self, fd: u64) {
            // `fstat` maps the ring into this context's descriptor window, which the first
            // read or write would otherwise do inside the region.
            let _ = lfd::fstat(pfd(fd));
        }
        fn p_after_case(&self) {
            // The ring's mapping in this context's window holds the ring; the next case's pipe
            // is a new one.
            lfd::unmap_all();
        }
        fn p_close(&self, fd: u64) -> Result<(), PErr> {
            lfs::close(Fd(fd as u32)).map_err(err)
        }
        fn p_stat(&self, path: &[u8]) -> Result<PStat, PErr> {
            lfs::stat(s(path)).map(pstat).map_err(err)
        }
        fn p_fstat(&self, fd: u64) -> Result<PStat, PErr> {
            lfs::fstat(Fd(fd as u32)).map(pstat).map_err(err)
        }
        fn p_read(&self, fd: u64, buf: &mut [u8]) -> Result<usize, PErr> {
            lfs::read(Fd(fd as u32), buf).map_err(err)
        }
        fn p_pread(&self, fd: u64, buf: &mut [u8], off: u64) -> Result<usize, PErr> {
            lfs::pread(Fd(fd as u32), buf, off).map_err(err)
        }
        fn p_write(&self, fd: u64, buf: &[u8]) -> Result<usize, PErr> {
            lfs::write(Fd(fd as u32), buf).map_err(err)
        }
        fn p_pwrite(&self, fd: u64, buf: &[u8], off: u64) -> Result<usize, PErr> {
            lfs::pwrite(Fd(fd as u32), buf, off).map_err(err)
        }
        fn p_lseek(&self, fd: u64, off: i64, whence: Whence) -> Result<u64, PErr> {
            let w = match whence {
                Whence::Set => lfs::SEEK_SET,
                Whence::Cur => lfs::SEEK_CUR,
                Whence::End => lfs::SEEK_END,
            };
            lfs::lseek(Fd(fd as u32), off, w).map_err(err)
        }
        fn p_unlink(&self, path: &[u8]) -> Result<(), PErr> {
            lfs::unlink(s(path)).map_err(err)
        }
        fn p_link(&self, old: &[u8], new: &[u8]) -> Result<(), PErr> {
            lfs::link(s(old), s(new)).map_err(err)
        }
        fn p_mkdir(&self, path: &[u8]) -> Result<(), PErr> {
            lfs::mkdir(s(path)).map_err(err)
        }
        fn p_rmdir(&self, path: &[u8]) -> Result<(), PErr> {
            lfs::rmdir(s(path)).map_err(err)
        }
        fn p_rename(&self, old: &[u8], new: &[u8]) -> Result<(), PErr> {
            lfs::rename(s(old), s(new)).map_err(err)
        }
        fn p_dup(&self, fd: u64) -> Result<u64, PErr> {
            lfs::dup(Fd(fd as u32)).map(|f| f.0 as u64).map_err(err)
        }
        fn p_ftruncate(&self, fd: u64, len: u64) -> Result<(), PErr> {
            lfs::ftruncate(Fd(fd as u32), len).map_err(err)
        }
        fn p_fsync(&self, fd: u64) -> Result<(), PErr> {
            lfs::fsync(Fd(fd as u32)).map_err(err)
        }
        fn p_readdir(&self, path: &[u8], out: &mut DirNames) -> Result<(), PErr> {
            // The library OS reads the whole directory in one call (its own allocation, as
            // the other calls' is part of the system measured).
            for e in lfs::readdir(s(path)).map_err(err)? {
                out.push(&e.name);
            }
            Ok(())
        }
        fn p_symlink(&self, target: &[u8], path: &[u8]) -> Result<(), PErr> {
            lfs::symlink(s(target), s(path)).map_err(err)
        }
        fn p_readlink(&self, path: &[u8], buf: &mut [u8]) -> Result<usize, PErr> {
            let t = lfs::readlink(s(path)).map_err(err)?;
            let n = t.len().min(buf.len());
            buf[..n].copy_from_slice(&t[..n]);
            Ok(n)
        }
    }
}
