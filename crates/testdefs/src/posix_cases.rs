//! The POSIX half of the commutativity checker (docs/commute.md): the test cases, one
//! table shared by the host (`xtask/src/commute/posix.rs` uses it from this crate, decides
//! which cases commute with its model and scores them) and the guest program of both
//! systems (`bench::commute_posix`, run by `bench-ours` on the library OS and by `bench-linux`
//! on Linux). No dependencies and no allocation, so it compiles on every side; all enumerate the
//! same cases in the same order, so a case is named by its index.
//!
//! Every case starts from the same **fixture**, made fresh for it in the fixture directory
//! (`/cm` under the file tree's root) and removed after it:
//!
//! - `a`, `b`: regular files of [`FILE_BYTES`] bytes (byte `i` of `a` is [`fixture_byte`]`(1, i)`,
//!   of `b` `fixture_byte(2, i)`);
//! - `d`: a directory holding `d/c`, a file of [`SMALL_BYTES`] bytes (`fixture_byte(3, i)`);
//! - descriptors `D0` and `D1`: two opens of `a` (read-write; two open file descriptions, so
//!   two offsets), `D2`: an open of `b` (read-write); every offset is 0;
//! - `Dd`: a read-only open of the directory `d` (what `openat` is relative to: it follows the
//!   directory, not its name, so a rename of `d` does not change what it finds);
//! - `Dap`: an `O_RDWR | O_APPEND` open of `a` (its writes go to the end of the file);
//! - `P0`, `P1`: the read and write ends of a pipe holding [`PIPE_FIXTURE_BYTES`] bytes
//!   (`fixture_byte(4, i)`), so every read of the pipe a case makes finds bytes waiting (a
//!   read of an empty pipe would block on Linux).
//!
//! - `E0`: the read end of a second pipe, **empty, its write end closed** by the fixture, so
//!   a read of it is end of file (0 bytes) on both systems instead of blocking (a read of an
//!   empty pipe whose write end is open waits: such cases are not modelled). No class closes
//!   `E0` (the teardown frees the pipe through it).
//!
//! - `M0`: an anonymous read-write mapping of [`MEM_PAGES`] pages at an address the system
//!   chose, whose page [`MEM_HOLE`] (the next to last) is unmapped again, so `mprotect` of it
//!   is `ENOMEM`; the cases' own `mmap`s are at least 2 pages, so they cannot land in the
//!   one-page hole between mapped pages.
//!
//! `m` and `n` (and `d/n`) are missing names a case may create. A case is a pair of calls with
//! concrete arguments drawn from each call's argument classes ([`CALLS`]): same / different
//! file, same / different directory, existing / missing name, same / different descriptor or
//! open file description, same / different offset. Pairs are unordered (call `i` with call
//! `j >= i`); call A runs on core 0, call B on core 1.

/// A name in the fixture directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum P {
    A,
    B,
    /// `d`
    Sub,
    /// `d/c`
    DC,
    M,
    N,
    /// `d/n`
    DN,
}

impl P {
    /// The path relative to the fixture directory.
    pub fn rel(self) -> &'static str {
        match self {
            P::A => "a",
            P::B => "b",
            P::Sub => "d",
            P::DC => "d/c",
            P::M => "m",
            P::N => "n",
            P::DN => "d/n",
        }
    }
    /// The last part of the path (what `openat` relative to its directory names).
    pub fn leaf(self) -> &'static str {
        match self.rel().rsplit_once('/') {
            Some((_, leaf)) => leaf,
            None => self.rel(),
        }
    }
}

/// The names in the fixture directory a case can leave; a directory among them may hold
/// [`TEARDOWN_CHILDREN`] (`rename(d, m)` moves `d`'s entries under `m`).
pub const TEARDOWN: [&str; 5] = ["d", "m", "n", "a", "b"];
pub const TEARDOWN_CHILDREN: [&str; 2] = ["c", "n"];

/// A fixture descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum D {
    D0,
    D1,
    D2,
    /// `d`, read-only (for `openat`).
    Dd,
    /// `a`, `O_RDWR | O_APPEND`.
    Dap,
    /// The fixture pipe's read end.
    P0,
    /// The fixture pipe's write end.
    P1,
    /// The read end of the fixture's empty pipe, whose write end the fixture closed.
    E0,
}

/// The fixture's descriptors of the file tree (the pipe's ends are [`PIPE_ENDS`]).
pub const DESCS: [D; 5] = [D::D0, D::D1, D::D2, D::Dd, D::Dap];
/// The fixture pipe's ends, read end first.
pub const PIPE_ENDS: [D; 2] = [D::P0, D::P1];
/// How many fixture descriptors there are (`D::index` is below it).
pub const ALL_DESCS: usize = 8;

/// How the fixture opens a descriptor of the file tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FixtureOpen {
    /// `O_RDWR`
    ReadWrite,
    /// `O_RDONLY` (a directory)
    Directory,
    /// `O_RDWR | O_APPEND`
    Append,
}

impl D {
    pub fn index(self) -> usize {
        self as usize
    }
    /// The name the fixture opens as this descriptor; `None` for the pipe's ends.
    pub fn file(self) -> Option<P> {
        match self {
            D::D0 | D::D1 | D::Dap => Some(P::A),
            D::D2 => Some(P::B),
            D::Dd => Some(P::Sub),
            D::P0 | D::P1 | D::E0 => None,
        }
    }
    pub fn fixture_open(self) -> FixtureOpen {
        match self {
            D::Dd => FixtureOpen::Directory,
            D::Dap => FixtureOpen::Append,
            _ => FixtureOpen::ReadWrite,
        }
    }
    pub fn is_pipe(self) -> bool {
        matches!(self, D::P0 | D::P1 | D::E0)
    }
}

/// Bytes waiting in the fixture pipe: more than one read takes ([`IO_BYTES`]) and fewer than
/// two, so two reads get different bytes and neither finds the pipe empty.
pub const PIPE_FIXTURE_BYTES: usize = 24;
/// Byte `i` of the fixture pipe.
pub fn pipe_byte(i: usize) -> u8 {
    fixture_byte(4, i as u64)
}

/// Bytes of `a` and `b` in the fixture: two 4 KiB blocks.
pub const FILE_BYTES: u64 = 8192;
/// Bytes of `d/c`.
pub const SMALL_BYTES: u64 = 100;
/// Bytes one `read`, `pread`, `write` or `pwrite` of a case moves.
pub const IO_BYTES: usize = 16;

/// Byte `i` of fixture file `seed` (1 = `a`, 2 = `b`, 3 = `d/c`).
pub fn fixture_byte(seed: u8, i: u64) -> u8 {
    (i as u8).wrapping_mul(7).wrapping_add(seed.wrapping_mul(31))
}

/// Byte `i` of what call `who` (0 = A, 1 = B) writes: different for A and B, so the file's
/// contents show which write came last.
pub fn write_byte(who: u8, i: usize) -> u8 {
    0xa0 + who * 0x10 + i as u8
}

/// 32-bit FNV-1a: how a read's result shows the bytes it got.
pub fn fnv(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in bytes {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// `O_RDONLY`
    Read,
    /// `O_CREAT | O_EXCL | O_RDWR`
    CreateExcl,
    /// `O_RDWR | O_TRUNC`: empties an existing file.
    Trunc,
    /// `O_WRONLY | O_APPEND`
    Append,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Whence {
    Set,
    Cur,
    End,
}

/// One call with concrete arguments. A new descriptor's number is not part of the result
/// (sv6's `O_ANYFD`: the interface leaves it unspecified, so two opens can commute); the
/// cases never use a descriptor a case's call made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Open(P, OpenMode),
    Close(D),
    Stat(P),
    Fstat(D),
    /// `IO_BYTES` at the descriptor's offset, which moves.
    Read(D),
    Pread(D, u64),
    /// `IO_BYTES` of `write_byte(who, i)` at the descriptor's offset, which moves.
    Write(D),
    Pwrite(D, u64),
    Lseek(D, i64, Whence),
    /// A new descriptor for the same open file description.
    Dup(D),
    Ftruncate(D, u64),
    Unlink(P),
    Link(P, P),
    Mkdir(P),
    Rmdir(P),
    Rename(P, P),
    /// `openat(Dd, NAME, mode)`: the path is the name's last part (`c` of `d/c`), looked up
    /// in the directory `Dd` holds wherever it is now. Only names in `d`.
    Openat(P, OpenMode),
    /// `truncate(path, len)`.
    Truncate(P, u64),
    /// `pipe()`: two new descriptors (a new pipe; the cases never use them).
    Pipe,
    /// `fsync(fd)`: the file's data and the names leading to it made durable.
    Fsync(D),
    /// The entries of the directory at the path (`opendir`/`readdir` to the end/`closedir`,
    /// `getdents64` on Linux): the result is the sorted list of names without `.` and `..`
    /// (`dir:c,n`; `dir:` for an empty directory), so the order a system keeps entries in is
    /// not part of it.
    Readdir(P),
    /// `symlink(SYMLINK_TARGET, path)`: a symbolic link to `a`, relative to the link's own
    /// directory (so `d/n` dangles: `d/a` does not exist).
    Symlink(P),
    /// `readlink(path)`: the link's target (`link:a`); `EINVAL` for a name that is not a link.
    Readlink(P),
    /// `mmap(NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)`: the address is the
    /// system's choice and not part of the result (as a new descriptor's number); the cases
    /// never use the new mapping.
    Mmap(u64, u64),
    /// `munmap(M0 + off, len)` (bytes).
    Munmap(u64, u64),
    /// `mprotect(M0 + off, len, prot)` (bytes).
    Mprotect(u64, u64, u64),
}

/// A call and its argument classes.
pub type Call = crate::pairs::Call<Op>;

use D::*;
use P::*;

/// Pages of the fixture mapping `M0`. The hole is between mapped pages: at the end it would
/// join the free space after `M0`, where a case's `mmap` could start.
pub const MEM_PAGES: u64 = 6;
/// The unmapped page of `M0`.
pub const MEM_HOLE: u64 = 4;
/// The page size both systems use.
pub const PAGE: u64 = 4096;
/// `mmap`/`mprotect` protections (the POSIX values, the same on both systems).
pub const PROT_NONE: u64 = 0;
pub const PROT_READ: u64 = 1;
pub const PROT_WRITE: u64 = 2;
pub const PROT_RW: u64 = PROT_READ | PROT_WRITE;

/// The modelled calls, in enumeration order (docs/commute.md says which POSIX calls are not
/// modelled yet).
pub const CALLS: &[Call] = &[
    Call {
        name: "open",
        variants: &[
            Op::Open(A, OpenMode::Read),
            Op::Open(B, OpenMode::Read),
            Op::Open(DC, OpenMode::Read),
            Op::Open(Sub, OpenMode::Read),
            Op::Open(M, OpenMode::Read),
            Op::Open(N, OpenMode::Read),
            Op::Open(DN, OpenMode::Read),
            Op::Open(M, OpenMode::CreateExcl),
            Op::Open(N, OpenMode::CreateExcl),
            Op::Open(DN, OpenMode::CreateExcl),
            Op::Open(A, OpenMode::CreateExcl),
            Op::Open(DC, OpenMode::CreateExcl),
            Op::Open(A, OpenMode::Trunc),
            Op::Open(DC, OpenMode::Trunc),
            Op::Open(M, OpenMode::Trunc),
            Op::Open(Sub, OpenMode::Trunc),
            Op::Open(B, OpenMode::Append),
        ],
    },
    Call { name: "close", variants: &[Op::Close(D0), Op::Close(D1), Op::Close(D2), Op::Close(Dd), Op::Close(P1), Op::Close(P0)] },
    Call { name: "dup", variants: &[Op::Dup(D0), Op::Dup(D2)] },
    Call { name: "stat", variants: &[Op::Stat(A), Op::Stat(B), Op::Stat(M), Op::Stat(DC), Op::Stat(Sub), Op::Stat(N), Op::Stat(DN)] },
    Call { name: "fstat", variants: &[Op::Fstat(D0), Op::Fstat(D1), Op::Fstat(D2)] },
    Call { name: "read", variants: &[Op::Read(D0), Op::Read(D1), Op::Read(D2), Op::Read(P0), Op::Read(E0)] },
    Call { name: "pread", variants: &[Op::Pread(D0, 0), Op::Pread(D0, 4096), Op::Pread(D2, 0), Op::Pread(D1, 0), Op::Pread(D0, 8192), Op::Pread(D2, 4096)] },
    Call { name: "write", variants: &[Op::Write(D0), Op::Write(D1), Op::Write(D2), Op::Write(Dap), Op::Write(P1)] },
    Call { name: "pwrite", variants: &[Op::Pwrite(D0, 0), Op::Pwrite(D0, 4096), Op::Pwrite(D2, 0), Op::Pwrite(D1, 0), Op::Pwrite(D2, 4096), Op::Pwrite(D0, 8192)] },
    Call {
        name: "lseek",
        variants: &[
            Op::Lseek(D0, 4096, Whence::Set),
            Op::Lseek(D0, 0, Whence::Cur),
            Op::Lseek(D2, 0, Whence::End),
            Op::Lseek(D1, 0, Whence::Set),
            Op::Lseek(D2, 4096, Whence::Set),
            Op::Lseek(D0, 0, Whence::End),
        ],
    },
    Call { name: "ftruncate", variants: &[Op::Ftruncate(D0, 4096), Op::Ftruncate(D2, 0), Op::Ftruncate(D1, 8192)] },
    Call { name: "unlink", variants: &[Op::Unlink(A), Op::Unlink(B), Op::Unlink(M), Op::Unlink(DC), Op::Unlink(N), Op::Unlink(DN), Op::Unlink(Sub)] },
    Call { name: "link", variants: &[Op::Link(A, N), Op::Link(B, DN), Op::Link(A, B), Op::Link(M, N), Op::Link(DC, M), Op::Link(A, DN), Op::Link(B, M), Op::Link(M, DN)] },
    Call { name: "mkdir", variants: &[Op::Mkdir(M), Op::Mkdir(N), Op::Mkdir(DN), Op::Mkdir(A), Op::Mkdir(Sub), Op::Mkdir(DC)] },
    Call { name: "rmdir", variants: &[Op::Rmdir(Sub), Op::Rmdir(M), Op::Rmdir(N)] },
    Call {
        name: "rename",
        variants: &[
            Op::Rename(A, N),
            Op::Rename(B, DN),
            Op::Rename(DC, M),
            Op::Rename(M, N),
            Op::Rename(A, B),
            Op::Rename(N, M),
            Op::Rename(B, A),
            Op::Rename(DC, DN),
            Op::Rename(Sub, M),
        ],
    },
    Call {
        name: "openat",
        variants: &[
            Op::Openat(DC, OpenMode::Read),
            Op::Openat(DN, OpenMode::Read),
            Op::Openat(DN, OpenMode::CreateExcl),
            Op::Openat(DC, OpenMode::CreateExcl),
            Op::Openat(DC, OpenMode::Trunc),
        ],
    },
    Call { name: "truncate", variants: &[Op::Truncate(A, 4096), Op::Truncate(B, 0), Op::Truncate(DC, 8192), Op::Truncate(M, 0), Op::Truncate(Sub, 0)] },
    Call { name: "pipe", variants: &[Op::Pipe] },
    Call { name: "fsync", variants: &[Op::Fsync(D0), Op::Fsync(D2)] },
    // An existing directory (`d`, which creates, renames and unlinks in it change), a missing
    // name (`m`, which `mkdir(m)` or `rename(d, m)` can make a directory, `open(m, O_CREAT)`
    // a file), a file (`a`: ENOTDIR).
    Call { name: "readdir", variants: &[Op::Readdir(Sub), Op::Readdir(M), Op::Readdir(A)] },
    // A link in the fixture directory that resolves (`n` -> `a`) and one in `d` that dangles
    // (`d/n` -> `d/a`). No class makes a link to a link (the target is always `a`, and no
    // class renames a link onto `a`), so a path follows at most one link.
    Call { name: "symlink", variants: &[Op::Symlink(N), Op::Symlink(DN)] },
    // A name a case may make a link (`n`) and a file (`a`: EINVAL).
    Call { name: "readlink", variants: &[Op::Readlink(N), Op::Readlink(A)] },
    Call { name: "mmap", variants: &[Op::Mmap(2 * PAGE, PROT_RW), Op::Mmap(3 * PAGE, PROT_READ), Op::Mmap(0, PROT_RW)] },
    Call {
        name: "munmap",
        variants: &[
            Op::Munmap(0, PAGE),
            Op::Munmap(PAGE, PAGE),
            Op::Munmap(0, 4 * PAGE),
            Op::Munmap(MEM_HOLE * PAGE, PAGE),
            Op::Munmap(8, PAGE),
            Op::Munmap(0, 0),
        ],
    },
    Call {
        name: "mprotect",
        variants: &[
            Op::Mprotect(0, PAGE, PROT_READ),
            Op::Mprotect(PAGE, PAGE, PROT_READ),
            Op::Mprotect(0, PAGE, PROT_NONE),
            Op::Mprotect(0, 4 * PAGE, PROT_RW),
            Op::Mprotect(MEM_HOLE * PAGE, PAGE, PROT_READ),
            Op::Mprotect(8, PAGE, PROT_READ),
        ],
    },
];

/// One case: its index in the enumeration, and the two calls (A on core 0, B on core 1);
/// `crate::pairs::{for_each_case, case, count}` over `CALLS` enumerate them.
pub type Case = crate::pairs::Case<Op>;


/// The error names results use (both systems' errors are mapped onto these).
pub const ERR_NOT_FOUND: &str = "E:NotFound";
pub const ERR_EXISTS: &str = "E:Exists";
pub const ERR_IS_DIR: &str = "E:IsDir";
pub const ERR_NOT_DIR: &str = "E:NotDir";
pub const ERR_BAD_FD: &str = "E:BadFd";
pub const ERR_INVAL: &str = "E:Inval";
pub const ERR_NOT_EMPTY: &str = "E:NotEmpty";
pub const ERR_PERM: &str = "E:Perm";
pub const ERR_NO_MEM: &str = "E:NoMem";
/// `EPIPE`: a write to a pipe with no read end open (Linux's `SIGPIPE` is ignored by the
/// guest program, so the call returns the error).
pub const ERR_BROKEN_PIPE: &str = "E:BrokenPipe";

/// Most names a `readdir` result holds (the fixture directory has at most 5, `d` at most 2):
/// the guest collects them into a fixed buffer inside the measured region.
pub const DIR_MAX_NAMES: usize = 8;
/// Longest name a `readdir` result holds (the fixture's names are one byte).
pub const DIR_NAME_MAX: usize = 8;
/// What every `symlink` of a case points to (relative to the link's directory).
pub const SYMLINK_TARGET: &str = "a";
