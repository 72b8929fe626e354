//! The benchmark catalog: names, what each measures, its shape and its default parameters.
//!
//! This module is the one list both sides agree on. The `bench` crate re-exports it as
//! `bench::catalog`, and the host tool (`xtask/src/bench.rs`) uses it from this crate, so the
//! harness can validate `--only` and pass parameters without linking the guest code. It uses
//! `core` only and no other module of this crate.

/// How a benchmark's workers relate in time, which decides how per-core throughput is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Every worker runs at once; throughput = ops / elapsed / workers.
    Parallel,
    /// Workers take turns (mempass passes a buffer from core to core); throughput = ops /
    /// the sum of the workers' own busy times, so a perfect system stays flat with cores.
    Relay,
}

/// Where the workers live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Threads of one address space (one descriptor table, one page table).
    Threads,
    /// One process per worker (separate address spaces and descriptor tables); only memory
    /// mapped as shared before the workers start is common.
    Processes,
}

#[derive(Debug, Clone, Copy)]
pub struct BenchSpec {
    pub name: &'static str,
    /// The plot/table group ("corey", "tornado", "counter", "base", "calibration", "selftest").
    pub group: &'static str,
    pub placement: Placement,
    pub shape: Shape,
    /// One line: what an operation is.
    pub op: &'static str,
    /// Default parameters, all integers, passed on the guest command line as `key=value`.
    pub defaults: &'static [(&'static str, u64)],
    /// Not in the default matrix (only with `--only`): self-tests of the harness.
    pub hidden: bool,
    /// Needs a kernel core (docs/roles.md): one worker only, on an application core whose system
    /// calls a second core, made a kernel core for the run, executes. Needs at least 2 cores;
    /// a system without kernel cores (Linux) cannot run it.
    pub kernel_core: bool,
    /// Driven from the host (docs/net.md): the guest program is a service (`tcpserv`), the host's
    /// load generator measures it (xtask/src/bench/net.rs). The suite here does not run it.
    pub host_driven: bool,
}

impl BenchSpec {
    /// Workers a run of this benchmark has on `cores` cores: one per core, or one for a
    /// benchmark whose second core is a kernel core.
    pub const fn workers(&self, cores: usize) -> usize {
        if self.kernel_core {
            1
        } else {
            cores
        }
    }
}

const fn b(
    name: &'static str,
    group: &'static str,
    placement: Placement,
    shape: Shape,
    op: &'static str,
    defaults: &'static [(&'static str, u64)],
) -> BenchSpec {
    BenchSpec { name, group, placement, shape, op, defaults, hidden: false, kernel_core: false, host_driven: false }
}

/// A benchmark driven from the host over the guest NIC.
const fn net(name: &'static str, op: &'static str, defaults: &'static [(&'static str, u64)]) -> BenchSpec {
    BenchSpec { host_driven: true, ..b(name, "corey", Placement::Threads, Shape::Parallel, op, defaults) }
}

/// A webd filesum row (docs/webd.md): host-driven, its mode and file size in its name.
const fn webd(name: &'static str, op: &'static str) -> BenchSpec {
    // conns 8: Linux's SO_REUSEPORT spreads keep-alive connections over its threads by a hash
    // the host cannot steer; with 2, both land on one thread half the time (measured: one
    // thread served all 208 requests), with 8 a thread is left idle ~1% of the time.
    // wake 1: ours' front-ends wake a sleeping application core when they hand it a request;
    // 0 runs webd with `--wake off` (the core waits out its sleep), to measure what that saves.
    // steal 2 (random-mode rows only): ours' front-end sums a file itself when the application
    // core has 2 of its requests unanswered; 0 never (Corey's configuration).
    net(name, op, &[("files", 8), ("requests", 400), ("conns", 8), ("warmup", 8), ("wake", 1), ("steal", 2)])
}

/// A single-worker benchmark on an application core served by a kernel core.
const fn kc(name: &'static str, op: &'static str, defaults: &'static [(&'static str, u64)]) -> BenchSpec {
    BenchSpec { kernel_core: true, ..b(name, "base", Placement::Threads, Shape::Parallel, op, defaults) }
}

use Placement::{Processes, Threads};
use Shape::{Parallel, Relay};

/// Every benchmark, in report order. Iteration counts are sized so one run takes well under a
/// second of guest time under TCG at 1 vCPU (at least ~100 ms each, so
/// TCG's scheduling noise does not dominate) on this workplace's 2-core machines.
pub const BENCHES: &[BenchSpec] = &[
    // Corey section 8.1: private memory per core, demand-zero faults.
    b("memclone_threads", "corey", Threads, Parallel, "first touch of a demand-zero page", &[("pages", 8192)]),
    b("memclone_procs", "corey", Processes, Parallel, "first touch of a demand-zero page", &[("pages", 8192)]),
    // Corey section 8.1: one buffer passed from core to core.
    b("mempass_threads", "corey", Threads, Relay, "one core touching one page of the passed buffer", &[("pages", 8192)]),
    b("mempass_procs", "corey", Processes, Relay, "one core touching one page of the passed buffer", &[("pages", 8192)]),
    // Corey sections 1 and 8.4: descriptors.
    // 50k: ours' process-wide table at 2 vCPUs runs ~10k ops/s/core under load here.
    b("dupclose", "corey", Threads, Parallel, "dup + close of a descriptor, process-wide table", &[("iters", 50000)]),
    b("dupclose_private", "corey", Threads, Parallel, "dup + close of a descriptor, per-worker table", &[("iters", 50000)]),
    // Corey section 8.3: shares (on Linux: dup/close in the shared vs an unshared table).
    b("share_global", "corey", Threads, Parallel, "add + delete of an object in one global share", &[("iters", 100000)]),
    b("share_local", "corey", Threads, Parallel, "add + delete of an object in a per-core share", &[("iters", 100000)]),
    // Corey section 3 (figure 5): a memory object made and freed, no pages touched.
    // 20k: Linux's memfd_create + ftruncate + close runs ~16k ops/s here.
    b("segment_allocfree", "corey", Threads, Parallel, "alloc + free of a `bytes`-byte memory object", &[("iters", 20000), ("bytes", 4096)]),
    // Tornado figure 1: counter layouts.
    b("counter_shared", "counter", Threads, Parallel, "atomic increment of one shared word", &[("iters", 20000000)]),
    b("counter_array", "counter", Threads, Parallel, "atomic increment of the worker's slot in a packed array", &[("iters", 20000000)]),
    b("counter_padded", "counter", Threads, Parallel, "atomic increment of the worker's 128-byte slot", &[("iters", 20000000)]),
    b("counter_sloppy", "counter", Threads, Parallel, "sloppy increment: local slot, global every `batch`", &[("iters", 20000000), ("batch", 64)]),
    b("counter_clustered", "counter", Threads, Parallel, "increment of the worker's own rep, allocated by that worker", &[("iters", 20000000)]),
    // Tornado section 7.2, multithreaded (mt) and multiprogrammed (mp).
    b("thread_mt", "tornado", Threads, Parallel, "create + join of an empty thread", &[("iters", 300)]),
    b("thread_mp", "tornado", Processes, Parallel, "create + join of an empty thread", &[("iters", 300)]),
    // 100 rounds: ours' pagefault_mt at 2 vCPUs (a TLB shootdown per unmap) took 60 s of
    // guest time for 3 x 200 rounds under load here.
    b("pagefault_mt", "tornado", Threads, Parallel, "in-core page fault on a fresh mapping of a resident object", &[("pages", 64), ("rounds", 100)]),
    b("pagefault_mp", "tornado", Processes, Parallel, "in-core page fault on a fresh mapping of a resident object", &[("pages", 64), ("rounds", 100)]),
    b("stat_mt", "tornado", Threads, Parallel, "fstat of the worker's own file", &[("iters", 40000)]),
    b("stat_mp", "tornado", Processes, Parallel, "fstat of the worker's own file", &[("iters", 40000)]),
    // Base costs.
    b("nullsyscall", "base", Threads, Parallel, "getpid (null system call)", &[("iters", 200000)]),
    // The null call from an application core, executed by a kernel core (one worker;
    // the kernel core is the second core). Forwarded one by one costs a cross-vCPU hand-off
    // each (microseconds under TCG), hence fewer iterations.
    kc("nullsyscall_forwarded", "null call forwarded to a kernel core", &[("iters", 20000)]),
    kc("nullsyscall_batched", "null call in a syscall_batch of `batch`, forwarded to a kernel core", &[("iters", 200000), ("batch", 64)]),
    // Corey section 8.2 (docs/net.md): the TCP service on every service core, the host's load
    // generator as the client through QEMU's user-mode network. One operation is one
    // connection; `conns` per round, `reps` rounds, the fastest reported; `concurrency`
    // connections open at once. Ours runs its Dedicated configuration in `tcp_accept`, its
    // Polling one in `tcp_accept_polling` (Linux has one configuration: `tcp_accept`).
    // concurrency 2: QEMU's user-mode network listens on the host port with a backlog of 1;
    // more connects in flight lose SYNs to 1 s retransmissions (xtask/src/net/load.rs).
    net("tcp_accept", "TCP connection: accept, write 128 bytes, close (ours: Dedicated)", &[("conns", 300), ("concurrency", 2)]),
    net("tcp_accept_polling", "TCP connection: accept, write 128 bytes, close (ours: Polling)", &[("conns", 300), ("concurrency", 2)]),
    // Corey section 6.2 / 8.4 (figure 12; docs/webd.md): webd with filesum, driven from the host
    // (xtask/src/bench/webd.rs). One operation is one request `/filesum/NAME` (the files in
    // turn), answered with the sum of the file's bytes; `files` files of the row's size,
    // `requests` per round on `conns` keep-alive connections after `warmup` untimed ones.
    // Ours: random (any application core sums), locality (each file's home core sums it),
    // same-core (the front-end sums through a protected procedure call); Linux: random only.
    webd("webd_filesum_random_64k", "HTTP request: filesum of a 64 KiB file (random mode)"),
    webd("webd_filesum_random_512k", "HTTP request: filesum of a 512 KiB file (random mode)"),
    webd("webd_filesum_random_1m", "HTTP request: filesum of a 1 MiB file (random mode)"),
    webd("webd_filesum_locality_64k", "HTTP request: filesum of a 64 KiB file (locality mode)"),
    webd("webd_filesum_locality_512k", "HTTP request: filesum of a 512 KiB file (locality mode)"),
    webd("webd_filesum_locality_1m", "HTTP request: filesum of a 1 MiB file (locality mode)"),
    webd("webd_filesum_same_core_64k", "HTTP request: filesum of a 64 KiB file (same-core mode)"),
    webd("webd_filesum_same_core_512k", "HTTP request: filesum of a 512 KiB file (same-core mode)"),
    webd("webd_filesum_same_core_1m", "HTTP request: filesum of a 1 MiB file (same-core mode)"),
    b("pagefault_zero", "base", Processes, Parallel, "demand-zero fault, map/touch/unmap 64-page region", &[("pages", 64), ("rounds", 80)]),
    // Corey section 6.1 / 8.4 (figure 10; docs/metis.md): Metis MapReduce over generated text
    // (bench/src/metis.rs); 4 MiB is ~0.1-0.3 s of map+reduce at 2 vCPUs under TCG.
    b("metis_wc", "metis", Threads, Parallel, "one input byte through wc (map, reduce, merge)", &[("size", 4 << 20), ("seed", 1), ("prep", 1), ("tlbgrow", 0)]),
    b("metis_wri", "metis", Threads, Parallel, "one input byte through wri (map, reduce, merge)", &[("size", 4 << 20), ("seed", 1), ("prep", 1), ("tlbgrow", 0)]),
    b("metis_wrmem", "metis", Threads, Parallel, "one input byte through wrmem (text generated, then wri)", &[("size", 4 << 20), ("seed", 1), ("prep", 1), ("tlbgrow", 0)]),
    // Files on the same ext2 image on both systems (Linux mounts it; ours' library OS
    // reads it), the layout in `FS_*` below (xtask/src/bench/fsimage.rs builds the image).
    // MOSBENCH (seeds/002): read-only lookups of one name from every core; Tornado fig. 11:
    // fstat of one shared file vs a file per worker.
    b("fs_stat_same", "files", Threads, Parallel, "stat of one path every worker names", &[("iters", 20000)]),
    b("fs_open_same", "files", Threads, Parallel, "open + read 1 byte + close of one shared file", &[("iters", 5000)]),
    b("fs_openclose_same", "files", Threads, Parallel, "open + close of one shared file", &[("iters", 5000)]),
    b("fs_open_private", "files", Threads, Parallel, "open + read 1 byte + close of the worker's own file in its own directory", &[("iters", 5000)]),
    b("fs_create_private", "files", Threads, Parallel, "create + close + unlink of a file in the worker's own directory", &[("iters", 1000)]),
    b("fs_create_shared", "files", Threads, Parallel, "create + close + unlink of a file (one name per worker) in one directory", &[("iters", 1000)]),
    b("fs_read_cached", "files", Threads, Parallel, "pread of 64 KiB of the worker's own file from the buffer cache", &[("iters", 300)]),
    b("fstat_shared", "files", Threads, Parallel, "fstat of the worker's descriptor of one shared file", &[("iters", 20000)]),
    b("fstat_private", "files", Threads, Parallel, "fstat of the worker's descriptor of its own file", &[("iters", 20000)]),
    // Share-nothing calibration: user-only arithmetic, no memory traffic, no kernel.
    b("calib", "calibration", Threads, Parallel, "one step of a register-only xorshift loop", &[("iters", 40000000)]),
    // Harness self-test: never finishes, to exercise the timeout path.
    BenchSpec { name: "selftest_hang", group: "selftest", placement: Threads, shape: Parallel, op: "none (spins forever)", defaults: &[], hidden: true, kernel_core: false, host_driven: false },
];

/// The calibration benchmark every matrix includes.
pub const CALIBRATION: &str = "calib";

/// Whether a benchmark uses the file system (its guest gets the benchmark image as a disk).
pub fn uses_files(name: &str) -> bool {
    name.starts_with("fs_") || name.starts_with("fstat_")
}

/// The benchmark file tree (docs/fs.md), the same on both systems: the host writes it into an
/// ext2 image (`cargo xtask bench` attaches it, read-only to the host: QEMU `snapshot=on`),
/// the Linux guest mounts that image at `/mnt`, ours' library OS mounts it at its root, and a
/// native run on a host builds it in a temporary directory. Paths are relative to that root.
/// The shared file (`fs_stat_same`, `fs_open_same`, `fstat_shared`).
pub const FS_SHARED_FILE: &str = "/bench/shared/f";
/// The directory every worker creates its names in (`fs_create_shared`).
pub const FS_SHARED_DIR: &str = "/bench/shared";
/// Worker `w`'s directory is `FS_PRIVATE_DIR` followed by `w` (`/bench/c0`, ...), holding its
/// file `f` (`fs_open_private`, `fstat_private`, `fs_read_cached`).
pub const FS_PRIVATE_DIR: &str = "/bench/c";
/// Workers with a directory of their own in the image.
pub const FS_MAX_WORKERS: usize = 64;
/// Bytes of every file in the tree (`fs_read_cached` reads all of it).
pub const FS_FILE_BYTES: usize = 65536;
/// The byte at offset `i` of every file in the tree (checked by the reads).
pub const fn fs_file_byte(i: usize) -> u8 {
    (i % 251) as u8 ^ 0x5a
}

pub fn find(name: &str) -> Option<&'static BenchSpec> {
    BENCHES.iter().find(|b| b.name == name)
}

/// The most workers (and vCPUs) a run may have: the kernel's limit and the harness's arrays.
pub const MAX_CORES: usize = 255;

/// Serial protocol, guest to host. One line per finished run:
/// `bench-result name=N cores=C ops=O ticks=T tsc_hz=H busy_ticks=B check=ok`
/// and on failure `bench-error name=N msg=...`; the guest prints `bench-done` last.
pub const RESULT_PREFIX: &str = "bench-result";
pub const ERROR_PREFIX: &str = "bench-error";
pub const DONE_LINE: &str = "bench-done";
