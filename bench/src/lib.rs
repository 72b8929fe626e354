//! One benchmark suite for two systems.
//!
//! The benchmarks of Corey (section 8), Tornado (section 7) and MOSBENCH-style counters are
//! written once, in [`suite`], against the [`Platform`] trait. A backend implements the trait
//! for one system: [`linux`] (std + libc, run as `/init` of a Linux guest) and [`ours`] (this
//! system's library OS, built into the `bench-ours` user program for x86_64-unknown-none).
//!
//! The library is `no_std` and allocation-free so the library-OS backend can link it on
//! `x86_64-unknown-none`. All memory the harness needs comes from [`Platform::map`].

#![no_std]

#[cfg(target_os = "linux")]
extern crate std;
// The Metis rows (mapreduce/) allocate: both programs that link this crate have an allocator
// (the library OS's per-core heap, std's).
extern crate alloc;

pub use testdefs::bench_catalog as catalog;
pub mod commute_posix;
pub mod harness;
#[cfg(target_os = "linux")]
pub mod linux;
pub mod metis;
#[cfg(target_os = "linux")]
pub mod metis_linux;
#[cfg(target_os = "none")]
pub mod metis_ours;
pub mod ours;
pub mod params;
pub use testdefs::posix_cases;
pub mod report;
pub mod suite;

pub use catalog::{BenchSpec, Placement, Shape, BENCHES};

/// Why a benchmark could not run. Benchmarks never panic on a platform failure: they return
/// this, and the program prints a `bench-error` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The platform call failed; `what` names the call, `code` is the system's error number.
    Sys { what: &'static str, code: i64 },
    /// The backend does not provide this operation (yet).
    Unsupported(&'static str),
    /// The benchmark's own result check failed (e.g. a counter lost updates).
    Check(&'static str),
    /// Bad parameters.
    Param(&'static str),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Sys { what, code } => write!(f, "{what} failed (error {code})"),
            Error::Unsupported(what) => write!(f, "{what} is not provided by this backend"),
            Error::Check(what) => write!(f, "result check failed: {what}"),
            Error::Param(what) => write!(f, "bad parameter: {what}"),
        }
    }
}

/// A system object named by a small integer: a descriptor on Linux, an object or share id on
/// ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handle(pub u64);

/// How a mapping is shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapKind {
    /// Demand-zero memory private to the address space (threads of it see it; forked
    /// processes get their own copy).
    Private,
    /// Demand-zero memory that stays common to every process started after it was mapped
    /// (Linux: `MAP_SHARED|MAP_ANONYMOUS`; ours: a shared address range / segment).
    Shared,
}

/// Scope of the table a worker's descriptors or share entries live in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// One table for the whole process (POSIX descriptors; Corey's global share).
    Process,
    /// A table private to the calling worker (Linux: `unshare(CLONE_FILES)`; ours: the
    /// core's private root share / private-scope descriptors).
    Worker,
}

/// What a system must provide to run the suite. Every method may be called from any worker
/// concurrently, except where noted.
///
/// Timing uses the TSC on both systems ([`Platform::ticks`]); region markers for the
/// instruction-counting plugin are executed through [`Platform::marker`].
pub trait Platform: Sync {
    /// Short system name used in result lines ("linux", "ours").
    fn name(&self) -> &'static str;
    /// Cores the workers may use; worker `w` runs on core `w % cores()`.
    fn cores(&self) -> usize;

    /// Run `body(w)` for every `w` in `0..n` as threads of one address space, worker `w`
    /// pinned to core `w % cores()`; returns when all have returned. Called by one worker only
    /// (the program's main one).
    fn run_threads(&self, n: usize, body: &(dyn Fn(usize) + Sync)) -> Result<(), Error>;
    /// As [`run_threads`](Self::run_threads) but one process (address space, descriptor table)
    /// per worker. Memory mapped [`MapKind::Shared`] before the call is common to all of them
    /// and to the caller; writes to anything else stay in the worker's process.
    fn run_processes(&self, n: usize, body: &(dyn Fn(usize) + Sync)) -> Result<(), Error>;
    /// Create one thread that does nothing and wait for it to finish (Tornado's thread test).
    fn thread_create_join(&self) -> Result<(), Error>;

    /// Map `bytes` (a multiple of 4096) of demand-zero memory; pages are allocated on first
    /// touch by the touching core.
    fn map(&self, bytes: usize, kind: MapKind) -> Result<*mut u8, Error>;
    /// Unmap what [`map`](Self::map) or [`object_map`](Self::object_map) returned.
    fn unmap(&self, ptr: *mut u8, bytes: usize) -> Result<(), Error>;
    /// Create a memory object of `bytes` whose pages are resident when this returns (Linux: a
    /// tmpfs file written once; ours: a segment). It also serves as the file for `stat`.
    fn object_create(&self, bytes: usize) -> Result<Handle, Error>;
    /// Map an object read-write, shared; touching a page takes an in-core (minor) fault.
    fn object_map(&self, obj: Handle, bytes: usize) -> Result<*mut u8, Error>;
    /// Release an object.
    fn object_destroy(&self, obj: Handle) -> Result<(), Error>;
    /// Allocate a memory object of `bytes` (0 allowed) with no page allocated yet (ours:
    /// `segment_alloc` into the worker's share; Linux: `memfd_create`, then `ftruncate` to
    /// `bytes` unless 0).
    fn segment_alloc(&self, bytes: usize) -> Result<Handle, Error>;
    /// Free what `segment_alloc` made (ours: `share_delobj` of its only reference; Linux:
    /// `close` of its only descriptor).
    fn segment_free(&self, seg: Handle) -> Result<(), Error>;
    /// `fstat` the object (Tornado's file stat).
    fn stat(&self, obj: Handle) -> Result<(), Error>;

    /// Make the calling worker's descriptor table have `scope` (call before `desc_*`).
    fn desc_scope(&self, scope: Scope) -> Result<(), Error>;
    /// A descriptor for the calling worker to duplicate.
    fn desc_open(&self) -> Result<Handle, Error>;
    fn desc_dup(&self, d: Handle) -> Result<Handle, Error>;
    fn desc_close(&self, d: Handle) -> Result<(), Error>;

    /// A share of `scope` for the calling worker (Corey's global vs per-core share).
    fn share_open(&self, scope: Scope) -> Result<Handle, Error>;
    /// Add `obj` to `share`, returning the entry's id (Linux: `dup` into the table).
    fn share_add(&self, share: Handle, obj: Handle) -> Result<Handle, Error>;
    /// Delete entry `id` from `share` (Linux: `close`).
    fn share_del(&self, share: Handle, id: Handle) -> Result<(), Error>;

    /// The cheapest system call there is (Linux: getpid). Returns what the call returned, as
    /// a number that is [`Platform::null_expected`] when it did what it should (ours: 0 for
    /// `Ok(0)`, `u64::MAX` for an error; Linux: the pid).
    fn null_syscall(&self) -> u64;
    /// What every `null_syscall` made by the calling worker must return.
    fn null_expected(&self) -> u64;
    /// `n` null calls as one batch (ours: `syscall_batch`), each call's result checked.
    fn null_syscall_batch(&self, n: usize) -> Result<(), Error>;

    /// Make another core a kernel core and the calling core an application core, whose system
    /// calls then run on the kernel core (docs/roles.md). Needs a core no worker runs on;
    /// one caller at a time. After a failure nothing is left changed.
    fn forward_begin(&self) -> Result<(), Error>;
    /// Undo [`forward_begin`](Self::forward_begin): both cores get their roles back. Returns
    /// the system calls the kernel core ran in between (checked against the operations).
    fn forward_end(&self) -> Result<u64, Error>;

    /// Time stamp counter of the calling core.
    fn ticks(&self) -> u64 {
        harness::rdtsc()
    }
    /// TSC frequency, measured or known by the backend.
    fn ticks_per_sec(&self) -> u64;
    /// Execute region marker `v` (see docs/plugins.md) if this backend may; a no-op otherwise.
    fn marker(&self, v: u8);

    /// Make the benchmark file tree (catalog `FS_*`) reachable: Linux mounts the disk image
    /// at /mnt (a native run builds the tree in a temporary directory), ours mounts it in the
    /// library OS. Called by one worker before the others start; idempotent.
    fn fs_prepare(&self) -> Result<(), Error> {
        Err(Error::Unsupported("files"))
    }
    /// `stat` of `path` (relative to the tree's root, starting with `/`); returns the size.
    fn fs_stat(&self, _path: &str) -> Result<u64, Error> {
        Err(Error::Unsupported("files"))
    }
    /// Open `path` read-only.
    fn fs_open(&self, _path: &str) -> Result<Handle, Error> {
        Err(Error::Unsupported("files"))
    }
    /// Create `path` (exclusive, write-only; it must not exist).
    fn fs_create(&self, _path: &str) -> Result<Handle, Error> {
        Err(Error::Unsupported("files"))
    }
    /// Read at the descriptor's offset, advancing it; the bytes read.
    fn fs_read(&self, _fd: Handle, _buf: &mut [u8]) -> Result<usize, Error> {
        Err(Error::Unsupported("files"))
    }
    /// Read at `off` without moving the offset; the bytes read.
    fn fs_pread(&self, _fd: Handle, _buf: &mut [u8], _off: u64) -> Result<usize, Error> {
        Err(Error::Unsupported("files"))
    }
    /// `fstat` of an open file; returns the size.
    fn fs_fstat(&self, _fd: Handle) -> Result<u64, Error> {
        Err(Error::Unsupported("files"))
    }
    fn fs_close(&self, _fd: Handle) -> Result<(), Error> {
        Err(Error::Unsupported("files"))
    }
    fn fs_unlink(&self, _path: &str) -> Result<(), Error> {
        Err(Error::Unsupported("files"))
    }

    /// Call `f` with this system's MapReduce environment (mapreduce/; the `metis_*` rows):
    /// threads from this backend, intermediate data in Corey's per-core layout where the
    /// system has one. Everything the environment made is given back when `f` returns.
    fn with_metis_env(&self, _f: &mut dyn FnMut(&dyn mapreduce::Env)) -> Result<(), Error> {
        Err(Error::Unsupported("MapReduce environment"))
    }
}
