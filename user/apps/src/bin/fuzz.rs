//! fuzz: random system calls on every core at once, from a seeded generator.
//!
//! Arguments (words): `seed=S` (default 1), `calls=N` (total over all cores, default
//! 100000), `cores=K` (default: all), `trace` (print every call before issuing it: slow, for
//! locating a kernel crash), `inject=SPEC` (only echoed in the replay line: the kernel command
//! line configures injection), `inject_from=boot` (the kernel injects from before the program
//! starts; otherwise core 0 arms the configured injection with `inject_ctl(INJECT_ARM)` once
//! every core's set-up is done, just before the cores start fuzzing, and reports the failures
//! injected by system call at the end).
//!
//! Each core draws its calls from its own stream, `splitmix(seed, core, attempt)`, so a run is
//! replayed by `cargo xtask fuzz --seed S` with the same `--calls`, `--smp` and `--inject`
//! (ids returned by the kernel and the interleaving of cores differ between runs; the calls a
//! core makes from a given state do not).
//!
//! Arguments come from these classes: ids of objects this core made (valid), ids it deleted
//! (stale), ids published by other cores (their private shares, their root shares), random
//! numbers, kernel-half and non-canonical addresses, null, unmapped, misaligned, read-only and
//! straddling pointers, huge and negative lengths, overlapping mappings and offset ranges
//! that overflow. Every result must be `Ok` or an `abi::Error` that the call can return
//! (`allowed`); anything else is a failure: the core prints the seed and its last 16 calls.
//!
//! What the fuzzer must not do to itself: output buffers only ever point into its own scratch
//! pages (or at memory that is not writable), its own root range is changed only inside its
//! fuzz window, pcores are run with contexts whose `rip` is never mapped, and it deletes only
//! what it made. At the end each core deletes everything it made and core 0 checks that free
//! pages and kernel objects are back (the kernel checks again after the program exits).
//!
//! Under allocation fault injection (`inject=` on the kernel command line) a demand-zero fault
//! that gets no memory kills the context (`EXIT_FAULT_BASE + 14`). The fuzzer touches all its
//! memory before the run through system calls, which fail with `BadAddress` instead and are
//! retried; a worker that still dies at start-up is restarted (up to 8 times).
#![no_std]
#![no_main]

use abi::{
    nr, ArKind, BatchEntry, DeviceBuf, DeviceConf, DeviceInfo, Error, ObjName, ObjectId, PcoreContext, PpcGate, SegMapping, SysInfo, EXIT_FAULT_BASE,
    MAP_READ, MAP_WRITE, MAX_CONTEXT_SHARES, MEMID_SELF, PAGE_SIZE, SHARE_PRIVATE, USER_END,
};
use core::sync::atomic::{AtomicU64, Ordering};
use libos::cores::{Core, CoreCtx, CoreOpts};
use libos::{println, sys};

libos::main!(main);

/// The handler of the gates the fuzzer registers (runs on our scratch's top page).
fn fuzz_handler(a0: u64, a1: u64, a2: u64, a3: u64) -> Result<u64, Error> {
    Ok((a0 ^ a1.rotate_left(13) ^ a2.rotate_left(29) ^ a3.rotate_left(47)) >> 1)
}

// ---------------------------------------------------------------------------------------
// Layout and shared control block

/// The control block, shared by every core (mapped at the same address in every root range).
const CTL_BASE: u64 = 0x2000_0000_0000;
const CTL_PAGES: u64 = 12;
/// Each core's scratch pages (its own segment, in its own root range): all output buffers.
const SCR_BASE: u64 = 0x3000_0000_0000;
const SCR_PAGES: u64 = 8;
const SCR_END: u64 = SCR_BASE + SCR_PAGES * PAGE_SIZE;
/// Inside the scratch: input structures, names, batch entries; outputs anywhere.
const IN_OFF: u64 = 5 * PAGE_SIZE;
const NAME_OFF: u64 = 6 * PAGE_SIZE;
const BATCH_OFF: u64 = 6 * PAGE_SIZE + 512;
/// The fuzz window: the only part of its own root range a core maps into or unmaps.
const WIN: u64 = 0x4000_0000_0000;
const WIN_SPAN: u64 = 512 << 30;
/// Never mapped (above where the fuzzer maps anything in the window): `rip` of contexts it runs.
const NEVER_MAPPED: u64 = WIN + WIN_SPAN - (1 << 30);

const MAXC: usize = 32;
const RING: usize = 16;
const TABLE: usize = 48;
const STALE: usize = 16;
/// (call, result) pairs: result 0 = Ok, 1..=21 = errors (every `Error`).
const NRES: usize = 22;
const PATH_WORDS: usize = (NCALLS * NRES).div_ceil(64);

#[repr(C, align(128))]
struct Slot {
    /// Published ids: root share, private share, root range, a segment in the private share.
    root: AtomicU64,
    private: AtomicU64,
    rar: AtomicU64,
    seg: AtomicU64,
    /// A pcore this core allocated in X (reachable by every core, runnable and haltable only
    /// by this one): other cores try to halt and run it and must be refused.
    xpcore: AtomicU64,
    calls: AtomicU64,
    ok: AtomicU64,
    failures: AtomicU64,
    ticks: AtomicU64,
    attempt: AtomicU64,
    done: AtomicU64,
    paths: [AtomicU64; PATH_WORDS],
    /// Per call type: how many were issued directly and the ticks they took.
    count: [AtomicU64; NCALLS],
    cost: [AtomicU64; NCALLS],
}

#[repr(C)]
struct Ctl {
    go: AtomicU64,
    /// Workers whose set-up is done (they wait for `go`): core 0 arms injection once all are.
    ready: AtomicU64,
    /// Workers started by core 0 (how many `ready` must reach).
    started: AtomicU64,
    /// `inject_ctl(INJECT_ARM)`'s result: 0 not asked, 1 armed, 2 no injection configured,
    /// 3 the call failed.
    armed: AtomicU64,
    /// Core 0 waits for every worker's set-up before arming (not when injecting from boot,
    /// where a worker can die in its set-up and is restarted only at the join).
    wait_ready: AtomicU64,
    stop: AtomicU64,
    seed: AtomicU64,
    calls_per_core: AtomicU64,
    ncores: AtomicU64,
    x_share: AtomicU64,
    trace: AtomicU64,
    console_hwid: AtomicU64,
    /// The network card's hwid (0 when booted without one): virtual NICs over it.
    net_hwid: AtomicU64,
    /// The first disk's hwid (0: no disk attached). Requests may write anywhere on it: boot
    /// the fuzzer with a scratch image only.
    disk_hwid: AtomicU64,
    /// The pcores the harness's own contexts run on: init's (index 0) and each worker's
    /// (`Core::pcore`). No core may halt or run one: that would end or replace a fuzzing
    /// context, a failure the fuzzer caused, not the kernel.
    harness_pcores: [AtomicU64; MAXC],
    slots: [Slot; MAXC],
}

const _: () = assert!(core::mem::size_of::<Ctl>() as u64 <= CTL_PAGES * PAGE_SIZE);

fn ctl() -> &'static Ctl {
    // SAFETY: every context running fuzz code maps the control segment read-write at
    // CTL_BASE before it calls this (core 0 in `main`, workers through their root range set up
    // by core 0), and never unmaps it while fuzz code runs; the segment is zero-filled demand
    // memory, a valid bit pattern for a struct of atomics.
    unsafe { &*(CTL_BASE as *const Ctl) }
}

// ---------------------------------------------------------------------------------------
// Random numbers

struct Rng(u64);

/// splitmix64's output function: a bijection that spreads every input bit over the word.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    fn new(seed: u64, core: u64, attempt: u64) -> Rng {
        // Core and attempt go through the mixing function: splitmix64 steps its state by a
        // constant, so states that differ by a multiple of that constant (as `seed ^ (core + 1)
        // * gamma` did) give the same stream shifted by a few draws on every core.
        let mut r = Rng(mix64(seed ^ mix64(core.wrapping_add(1) ^ mix64(attempt.wrapping_add(0xA076_1D64_78BD_642F)))));
        r.next();
        r
    }
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.0)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    fn pct(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
}

// ---------------------------------------------------------------------------------------
// Calls, their names and the errors each may return

struct CallInfo {
    nr: u64,
    name: &'static str,
    /// Errors this call may return besides the common ones (see `allowed`).
    extra: u32,
    /// The call names objects (ShareNotReachable, NoSuchObject, WrongType, NotPermitted).
    names_objects: bool,
}

const fn bit(e: Error) -> u32 {
    1 << (e as u32)
}

const NAME_ERRS: u32 = bit(Error::NameTooLong);
const BUF_ERRS: u32 = bit(Error::BufferTooSmall);
const MAP_ERRS: u32 = bit(Error::Misaligned) | bit(Error::Overlap) | bit(Error::Busy);

const CALLS: [CallInfo; 53] = [
    CallInfo { nr: nr::OBJ_GET_NAME, name: "obj_get_name", extra: BUF_ERRS, names_objects: true },
    CallInfo { nr: nr::OBJ_STAT, name: "obj_stat", extra: 0, names_objects: true },
    CallInfo { nr: nr::SHARE_ALLOC, name: "share_alloc", extra: NAME_ERRS | bit(Error::NoSuchCore), names_objects: true },
    CallInfo { nr: nr::SHARE_ADDOBJ, name: "share_addobj", extra: bit(Error::AlreadyExists), names_objects: true },
    CallInfo { nr: nr::SHARE_DELOBJ, name: "share_delobj", extra: 0, names_objects: true },
    CallInfo { nr: nr::SELF_DROP, name: "self_drop", extra: 0, names_objects: true },
    CallInfo { nr: nr::SELF_SHARES, name: "self_shares", extra: BUF_ERRS, names_objects: false },
    CallInfo { nr: nr::SHARE_LIST, name: "share_list", extra: BUF_ERRS, names_objects: true },
    CallInfo { nr: nr::SEGMENT_ALLOC, name: "segment_alloc", extra: NAME_ERRS | bit(Error::NoSuchCore), names_objects: true },
    // Busy: a copy-on-write copy of a segment a device has pinned (abi::net, abi::blk).
    CallInfo { nr: nr::SEGMENT_COPY, name: "segment_copy", extra: NAME_ERRS | bit(Error::Busy), names_objects: true },
    CallInfo { nr: nr::SEGMENT_GET_NBYTES, name: "segment_get_nbytes", extra: 0, names_objects: true },
    CallInfo { nr: nr::SEGMENT_SET_NBYTES, name: "segment_set_nbytes", extra: bit(Error::Busy), names_objects: true },
    CallInfo { nr: nr::AR_ALLOC, name: "ar_alloc", extra: NAME_ERRS | bit(Error::NoSuchCore), names_objects: true },
    CallInfo { nr: nr::AR_SET_SEG, name: "ar_set_seg", extra: MAP_ERRS, names_objects: true },
    CallInfo { nr: nr::AR_SET_AR, name: "ar_set_ar", extra: MAP_ERRS, names_objects: true },
    CallInfo { nr: nr::AR_GET, name: "ar_get", extra: BUF_ERRS, names_objects: true },
    CallInfo { nr: nr::AR_UNMAP, name: "ar_unmap", extra: MAP_ERRS, names_objects: true },
    CallInfo { nr: nr::PCORE_ALLOC, name: "pcore_alloc", extra: NAME_ERRS | bit(Error::NoSuchCore), names_objects: true },
    CallInfo { nr: nr::PCORE_CURRENT, name: "pcore_current", extra: 0, names_objects: false },
    CallInfo { nr: nr::PCORE_RUN, name: "pcore_run", extra: bit(Error::Busy) | bit(Error::NoSuchCore) | bit(Error::Unsupported), names_objects: true },
    CallInfo { nr: nr::PCORE_SET_INTERVAL, name: "pcore_set_interval", extra: 0, names_objects: true },
    CallInfo { nr: nr::PCORE_HALT, name: "pcore_halt", extra: 0, names_objects: true },
    CallInfo { nr: nr::PCORE_STAT, name: "pcore_stat", extra: 0, names_objects: true },
    CallInfo {
        nr: nr::PCORE_SET_ROLE,
        name: "pcore_set_role",
        extra: bit(Error::Busy) | bit(Error::NoSuchCore) | bit(Error::Unsupported),
        names_objects: true,
    },
    CallInfo {
        nr: nr::DEVICE_ALLOC,
        name: "device_alloc",
        // A virtual NIC (abi::net) checks its channel count and segment size; a block device
        // object (abi::blk) its reserved argument and segment, and may meet a disk error.
        extra: bit(Error::NotFound) | bit(Error::NoSuchCore) | bit(Error::Busy) | bit(Error::InvalidArgument) | bit(Error::OutOfRange) | bit(Error::Unsupported) | bit(Error::Io),
        names_objects: true,
    },
    CallInfo { nr: nr::DEVICE_LIST, name: "device_list", extra: BUF_ERRS, names_objects: false },
    CallInfo { nr: nr::DEVICE_STAT, name: "device_stat", extra: 0, names_objects: true },
    // Busy: a disk's mode changed while attached or with requests in flight (abi::blk).
    CallInfo { nr: nr::DEVICE_CONF, name: "device_conf", extra: bit(Error::Unsupported) | bit(Error::NotPermitted) | bit(Error::Busy), names_objects: true },
    CallInfo {
        nr: nr::DEVICE_BUF,
        name: "device_buf",
        // A virtual NIC's data path: Busy when its queue is full, NotPermitted in Dedicated mode.
        // A disk (abi::blk): Misaligned, NotPermitted (read-only disk), Busy, Io.
        extra: bit(Error::Unsupported) | bit(Error::OutOfRange) | bit(Error::NotPermitted) | bit(Error::Busy) | bit(Error::Misaligned) | bit(Error::Io),
        names_objects: true,
    },
    CallInfo {
        nr: nr::PCORE_ADD_DEVICE,
        name: "pcore_add_device",
        extra: bit(Error::Unsupported) | bit(Error::Busy) | bit(Error::NoSuchCore),
        names_objects: true,
    },
    CallInfo { nr: nr::PCORE_DEL_DEVICE, name: "pcore_del_device", extra: bit(Error::NotFound) | bit(Error::Unsupported), names_objects: true },
    CallInfo { nr: nr::LOCALITY_GET, name: "locality_get", extra: BUF_ERRS | bit(Error::NoSuchCore), names_objects: false },
    CallInfo { nr: nr::CONSOLE_WRITE, name: "console_write", extra: 0, names_objects: false },
    CallInfo { nr: nr::CONSOLE_READ, name: "console_read", extra: 0, names_objects: false },
    CallInfo { nr: nr::TIME_NOW, name: "time_now", extra: 0, names_objects: false },
    CallInfo { nr: nr::SYS_INFO, name: "sys_info", extra: 0, names_objects: false },
    CallInfo { nr: nr::CORE_STATS, name: "core_stats", extra: bit(Error::NoSuchCore), names_objects: false },
    CallInfo { nr: nr::INITRD_GET, name: "initrd_get", extra: NAME_ERRS | bit(Error::NotFound), names_objects: true },
    CallInfo { nr: nr::NULL, name: "null", extra: 0, names_objects: false },
    CallInfo { nr: nr::SYSCALL_BATCH, name: "syscall_batch", extra: 0, names_objects: false },
    CallInfo { nr: nr::PCORE_YIELD, name: "pcore_yield", extra: 0, names_objects: false },
    CallInfo {
        nr: nr::CORE_REQUEST,
        name: "core_request",
        extra: bit(Error::Unsupported) | bit(Error::Busy) | bit(Error::NoSuchCore),
        names_objects: false,
    },
    CallInfo { nr: nr::CORE_RELEASE, name: "core_release", extra: bit(Error::Unsupported) | bit(Error::NoSuchCore) | bit(Error::NotFound), names_objects: false },
    CallInfo { nr: nr::PPC_REGISTER, name: "ppc_register", extra: NAME_ERRS | bit(Error::Misaligned) | bit(Error::NoSuchCore), names_objects: true },
    CallInfo { nr: nr::PPC_CALL, name: "ppc_call", extra: bit(Error::WrongCore) | bit(Error::Busy) | bit(Error::CallAborted), names_objects: true },
    // Never in a call here: always NotPermitted (a naming error's bit, hence names_objects).
    CallInfo { nr: nr::PPC_RETURN, name: "ppc_return", extra: 0, names_objects: true },
    // Busy: every slot taken.
    CallInfo { nr: nr::PPC_BIND, name: "ppc_bind", extra: bit(Error::WrongCore) | bit(Error::Busy), names_objects: true },
    // NoSuchObject for a slot out of range, empty or another identity's.
    CallInfo { nr: nr::PPC_UNBIND, name: "ppc_unbind", extra: 0, names_objects: true },
    // Unsupported: the command line configured no injection.
    CallInfo { nr: nr::INJECT_CTL, name: "inject_ctl", extra: bit(Error::Unsupported), names_objects: false },
    // NotPermitted: a call forwarded to a kernel core or made through a syscall ring.
    CallInfo { nr: nr::WAIT, name: "wait", extra: bit(Error::NotPermitted), names_objects: false },
    // NoSuchCore: not an online core. Reached through the random call numbers (78..178).
    CallInfo { nr: nr::WAKE, name: "wake", extra: bit(Error::NoSuchCore), names_objects: false },
    // NotPermitted: forwarded, inside a protected procedure call, from a ring, or
    // `LINUX_SET_FS` without a personality. Reached through the random call numbers (78..178)
    // with random arguments only: a random `op` is `LINUX_ON` with a chance of 2^-64, and a
    // personality whose native range left out the fuzzer's own code would send its next calls
    // to the random upcall (the linux-abi suite tests the personality).
    CallInfo { nr: nr::LINUX_PERSONALITY, name: "linux_personality", extra: bit(Error::NotPermitted), names_objects: false },
    CallInfo { nr: u64::MAX, name: "(unknown)", extra: 0, names_objects: false },
];
const NCALLS: usize = CALLS.len();
const UNKNOWN: usize = NCALLS - 1;

fn call_index(n: u64) -> usize {
    CALLS.iter().position(|c| c.nr == n).unwrap_or(UNKNOWN)
}

/// Whether `err` is a documented result of call `ci`. Common to every known call: a bad
/// argument, a bad pointer, a range error, out of memory. Object naming errors only for calls
/// that name objects; the rest per call (`CallInfo::extra`).
fn allowed(ci: usize, err: Error) -> bool {
    if ci == UNKNOWN {
        return err == Error::NoSuchCall;
    }
    let c = &CALLS[ci];
    match err {
        Error::NoSuchCall => false,
        Error::InvalidArgument | Error::BadAddress | Error::OutOfRange => true,
        // Calls that allocate nothing cannot run out of memory.
        Error::NoMemory => !matches!(c.nr, nr::NULL | nr::TIME_NOW | nr::PCORE_CURRENT | nr::PCORE_YIELD | nr::PPC_CALL | nr::PPC_RETURN | nr::PPC_UNBIND | nr::INJECT_CTL),
        Error::ShareNotReachable | Error::NoSuchObject | Error::WrongType | Error::NotPermitted => c.names_objects,
        e => c.extra & bit(e) != 0,
    }
}

/// A `fmt::Write` into a byte array (truncating), for formatting without a heap.
struct Cursor<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl core::fmt::Write for Cursor<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        for &b in s.as_bytes() {
            if self.len < self.buf.len() {
                self.buf[self.len] = b;
                self.len += 1;
            }
        }
        Ok(())
    }
}

/// A call as issued: number, arguments, raw result.
#[derive(Clone, Copy, Default)]
struct Rec {
    seq: u64,
    nr: u64,
    a: [u64; 6],
    r: i64,
}

fn print_rec(core: u64, rec: &Rec) {
    let ci = call_index(rec.nr);
    let res = if rec.r >= 0 {
        RecRes::Ok(rec.r as u64)
    } else {
        match Error::from_code(-rec.r) {
            Some(e) => RecRes::Err(e),
            None => RecRes::Raw(rec.r),
        }
    };
    println!(
        "fuzz[{core}]   #{} {}({:#x}, {:#x}, {:#x}, {:#x}, {:#x}, {:#x}) -> {:?}",
        rec.seq, CALLS[ci].name, rec.a[0], rec.a[1], rec.a[2], rec.a[3], rec.a[4], rec.a[5], res
    );
}

#[derive(Debug)]
#[allow(dead_code)] // the fields are printed with {:?}
enum RecRes {
    Ok(u64),
    Err(Error),
    Raw(i64),
}

// ---------------------------------------------------------------------------------------
// Per-core fuzzer state (on the core's own stack: no heap, no writable statics)

#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum Kind {
    #[default]
    Free,
    Share,
    Seg,
    Ar(u64),
    Pcore(u64),
    Device,
    /// A protected-procedure-call gate (`ppc_register`).
    Gate,
    /// A reference added with share_addobj (type not tracked).
    Ref,
}

#[derive(Clone, Copy, Default)]
struct Obj {
    n: ObjName,
    kind: Kind,
}

struct Fuzz {
    core: u64,
    ncores: u64,
    seed: u64,
    attempt: u64,
    rng: Rng,
    root: ObjectId,
    private: ObjectId,
    x: ObjectId,
    /// The worker's own shared share (holds its root range); 0 on core 0.
    core_share: ObjectId,
    rar: ObjName,
    pcore: ObjName,
    table: [Obj; TABLE],
    stale: [ObjName; STALE],
    nstale: usize,
    ring: [Rec; RING],
    seq: u64,
    ok: u64,
    failures: u64,
    trace: bool,
    paths: [u64; PATH_WORDS],
    count: [u64; NCALLS],
    cost: [u64; NCALLS],
    /// Set when a call changed state that `cleanup` must restore (interval, role, console).
    touched_interval: bool,
    touched_role: bool,
    touched_console: Option<ObjName>,
}

/// Addresses no call may write through (kernel half, non-canonical, wrap-around).
const KERNEL_ADDRS: [u64; 6] =
    [0xffff_8000_0000_0000, 0xffff_ffff_8000_0000, 0xffff_ff80_0000_0000, u64::MAX - 7, 0x0000_8000_0000_0000, 0x1234_5678_9abc_def0];

impl Fuzz {
    // ---- argument classes

    fn random_id(&mut self) -> u64 {
        match self.rng.below(4) {
            0 => self.rng.next(),
            1 => self.rng.below(64),
            // Looks like an id of some core, with a sequence number no core reaches.
            2 => ((self.rng.below(self.ncores + 2) + 1) << 40) | (1 << 39) | self.rng.below(1 << 20),
            _ => [0, u64::MAX, 1 << 40, i64::MIN as u64][self.rng.below(4) as usize],
        }
    }

    fn foreign_slot(&mut self) -> Option<&'static Slot> {
        if self.ncores < 2 {
            return None;
        }
        let mut other = self.rng.below(self.ncores);
        if other == self.core {
            other = (other + 1) % self.ncores;
        }
        Some(&ctl().slots[other as usize])
    }

    /// A share id from any class.
    fn share(&mut self) -> u64 {
        let p = self.rng.below(100);
        if p < 55 {
            // Mostly shares we reach directly (objects made in shares nested two deep are
            // unreachable, which is worth trying but not most of the time).
            let mut picks = [0u64; TABLE + 4];
            let mut n = 0;
            for s in [self.root, self.private, self.x, self.core_share] {
                if s != 0 {
                    picks[n] = s;
                    n += 1;
                }
            }
            if p >= 30 {
                for o in self.table.iter().filter(|o| o.kind == Kind::Share) {
                    picks[n] = o.n.object;
                    n += 1;
                }
            }
            picks[self.rng.below(n as u64) as usize]
        } else if p < 65 {
            self.stale_name().object
        } else if p < 80 {
            match self.foreign_slot() {
                Some(s) => {
                    if self.rng.pct(50) {
                        s.private.load(Ordering::Relaxed)
                    } else {
                        s.root.load(Ordering::Relaxed)
                    }
                }
                None => self.random_id(),
            }
        } else {
            self.random_id()
        }
    }

    fn stale_name(&mut self) -> ObjName {
        if self.nstale == 0 {
            return ObjName::new(self.root, self.random_id());
        }
        self.stale[self.rng.below(self.nstale.min(STALE) as u64) as usize]
    }

    /// Whether `object` is a pcore a harness context runs on: our own, init's or a worker's.
    fn is_harness_pcore(&self, object: ObjectId) -> bool {
        object == self.pcore.object || (object != 0 && ctl().harness_pcores.iter().any(|p| p.load(Ordering::Relaxed) == object))
    }

    /// A pcore for `pcore_halt` and `pcore_run`: ours (made with pcore_alloc), one another core
    /// allocated in X (must be refused), or any other class; never a harness pcore (a stale or
    /// added name of our own pcore names the same object, so the check is by object id).
    fn pcore_arg(&mut self) -> ObjName {
        let is_pcore = |k: Kind| matches!(k, Kind::Pcore(_));
        for _ in 0..8 {
            let p = if self.rng.pct(15) {
                match self.foreign_slot() {
                    Some(s) => ObjName::new(self.x, s.xpcore.load(Ordering::Relaxed)),
                    None => self.obj(is_pcore),
                }
            } else {
                self.obj(is_pcore)
            };
            if !self.is_harness_pcore(p.object) {
                return p;
            }
        }
        // An id shaped like a real one that no core reaches (sequence numbers stay below 2^39).
        ObjName::new(self.root, ((self.core + 1) << 40) | (1 << 39) | self.rng.below(1 << 20))
    }

    /// Whether `object` is a pcore another core published as its own (allocated by it in X).
    fn foreign_pcore(&self, object: ObjectId) -> bool {
        object != 0
            && (0..self.ncores as usize).any(|c| c as u64 != self.core && ctl().slots[c].xpcore.load(Ordering::Relaxed) == object)
    }

    fn pick(&mut self, want: fn(Kind) -> bool) -> Option<ObjName> {
        let n = self.table.iter().filter(|o| want(o.kind)).count() as u64;
        if n == 0 {
            return None;
        }
        let k = self.rng.below(n) as usize;
        self.table.iter().filter(|o| want(o.kind)).nth(k).map(|o| o.n)
    }

    /// An object name: mostly of the wanted type, sometimes of any class.
    fn obj(&mut self, want: fn(Kind) -> bool) -> ObjName {
        let p = self.rng.below(100);
        if p < 60 {
            if let Some(n) = self.pick(want) {
                return n;
            }
        }
        if p < 72 {
            if let Some(n) = self.pick(|k| k != Kind::Free) {
                return n;
            }
        }
        if p < 80 {
            return self.stale_name();
        }
        if p < 90 {
            if let Some(s) = self.foreign_slot() {
                let (root, private, rar, seg) =
                    (s.root.load(Ordering::Relaxed), s.private.load(Ordering::Relaxed), s.rar.load(Ordering::Relaxed), s.seg.load(Ordering::Relaxed));
                return match self.rng.below(4) {
                    0 => ObjName::new(private, seg),
                    1 => ObjName::new(root, rar),
                    // Another core's object, named through one of our own shares.
                    2 => ObjName::new(self.share(), seg),
                    _ => ObjName::new(root, private),
                };
            }
        }
        if p < 95 {
            // Our own base objects, read-only uses are harmless.
            return [self.rar, self.pcore, ObjName::new(self.root, self.private)][self.rng.below(3) as usize];
        }
        ObjName::new(self.share(), self.random_id())
    }

    /// A pointer for the kernel to write `size` bytes to: our scratch, or memory it must refuse.
    fn out_ptr(&mut self, size: u64) -> u64 {
        let p = self.rng.below(100);
        if p < 55 {
            let room = (SCR_PAGES * PAGE_SIZE).saturating_sub(size.min(SCR_PAGES * PAGE_SIZE));
            let mut off = self.rng.below(room + 1);
            if self.rng.pct(70) {
                off &= !7;
            }
            SCR_BASE + off
        } else {
            self.bad_ptr(size)
        }
    }

    /// Memory the kernel must not write (or cannot, all of it).
    fn bad_ptr(&mut self, size: u64) -> u64 {
        match self.rng.below(10) {
            0 => KERNEL_ADDRS[self.rng.below(KERNEL_ADDRS.len() as u64) as usize],
            1 => 0xffff_8000_0000_0000 + self.rng.below(1 << 30) * PAGE_SIZE,
            2 => self.rng.below(PAGE_SIZE),
            // Straddles the end of the user half, or the end of our scratch.
            3 => USER_END - 1 - self.rng.below(size.max(2) - 1).min(USER_END - 1),
            4 => SCR_END - 1 - self.rng.below(size.max(2) - 1).min(SCR_END - SCR_BASE - 1),
            // Read-only: our own code.
            5 => main as *const () as u64 + self.rng.below(64),
            // The fuzz window: mapped or not, readable or not, by our own calls.
            6 => WIN + self.rng.below(64) * PAGE_SIZE + if self.rng.pct(20) { self.rng.below(PAGE_SIZE) } else { 0 },
            7 => 0x5000_0000_0000 + self.rng.below(1 << 30) * 8,
            8 => NEVER_MAPPED,
            _ => self.rng.next(),
        }
    }

    /// Memory no user read may succeed on (kernel half, non-canonical, null page, never mapped,
    /// straddling the end of the user half or of the scratch): `console_write` prints what it
    /// can read, and printing our code or the window's contents would only put noise on the
    /// console the harness reads.
    fn unreadable_ptr(&mut self) -> u64 {
        match self.rng.below(7) {
            0 => KERNEL_ADDRS[self.rng.below(KERNEL_ADDRS.len() as u64) as usize],
            1 => 0xffff_8000_0000_0000 + self.rng.below(1 << 30) * PAGE_SIZE,
            2 => self.rng.below(PAGE_SIZE),
            3 => USER_END - 1 - self.rng.below(15),
            4 => SCR_END - 1 - self.rng.below(15),
            5 => 0x5000_0000_0000 + self.rng.below(1 << 30) * 8,
            _ => NEVER_MAPPED,
        }
    }

    /// A pointer to `size` bytes for the kernel to read.
    fn in_ptr(&mut self, size: u64, good: u64) -> u64 {
        if self.rng.pct(85) {
            good
        } else if self.rng.pct(30) {
            // Our own code is readable: the kernel reads it as a structure.
            main as *const () as u64
        } else {
            self.bad_ptr(size)
        }
    }

    fn len(&mut self) -> u64 {
        match self.rng.below(10) {
            0..=4 => self.rng.below(64),
            5 => self.rng.below(4096),
            6 => [u64::MAX, 1 << 63, (-1i64) as u64 - 4095, 1 << 32, u64::MAX / 2][self.rng.below(5) as usize],
            7 => (-(self.rng.below(4096) as i64)) as u64,
            8 => 0,
            _ => self.rng.next(),
        }
    }

    fn name(&mut self) -> (u64, u64) {
        let p = self.rng.below(100);
        let good = SCR_BASE + NAME_OFF + self.rng.below(8);
        if p < 80 {
            (good, self.rng.below(abi::MAX_NAME as u64 + 1))
        } else if p < 86 {
            (good, abi::MAX_NAME as u64 + 1 + self.rng.below(64))
        } else if p < 89 {
            (good, [u64::MAX, 1 << 63, 1 << 40][self.rng.below(3) as usize])
        } else {
            let l = 1 + self.rng.below(abi::MAX_NAME as u64);
            (self.bad_ptr(l), l)
        }
    }

    fn memid(&mut self) -> u64 {
        match self.rng.below(6) {
            0..=2 => MEMID_SELF,
            3 => self.rng.below(self.ncores),
            4 => self.ncores + self.rng.below(4),
            _ => self.rng.next(),
        }
    }

    fn pages(&mut self) -> u64 {
        match self.rng.below(10) {
            0..=5 => (1 + self.rng.below(16)) * PAGE_SIZE,
            6 => self.rng.below(16 * PAGE_SIZE),
            7 => 0,
            8 => [1 << 30, 2 << 20, (1 << 40) + PAGE_SIZE][self.rng.below(3) as usize],
            _ => [u64::MAX, u64::MAX & !(PAGE_SIZE - 1), 1 << 63, (-(PAGE_SIZE as i64)) as u64][self.rng.below(4) as usize],
        }
    }

    fn flags(&mut self) -> u64 {
        match self.rng.below(10) {
            0..=7 => self.rng.below(8),
            8 => 0x80 | self.rng.below(8),
            _ => self.rng.next(),
        }
    }

    /// Write `v` into our scratch at `off` and return its address.
    fn put<T: Copy>(&mut self, off: u64, v: T) -> u64 {
        let addr = SCR_BASE + off;
        // SAFETY: `off + size_of::<T>()` lies inside our scratch mapping (callers pass
        // offsets at or below IN_OFF/BATCH_OFF with room for the structure), which is mapped
        // read-write, touched at start-up and used by nothing else; `write_unaligned` needs no
        // alignment.
        unsafe { core::ptr::write_unaligned(addr as *mut T, v) };
        addr
    }

    /// A virtual offset for a mapping in range `ar` (of kind `kind`); for our own root range,
    /// inside the fuzz window or somewhere the kernel must refuse.
    fn voff(&mut self, ar: ObjName, kind: Option<u64>) -> u64 {
        // By object id: our root range may also be named through a share we added it to.
        let own = ar.object == self.rar.object;
        let (base, span) = match kind {
            Some(k) if !own => (0, ArKind::from_u64(k).map(|k| k.span()).unwrap_or(USER_END)),
            _ => (WIN, WIN_SPAN),
        };
        match self.rng.below(10) {
            0..=5 => base + self.rng.below(64) * PAGE_SIZE,
            6 => base + self.rng.below(64) * PAGE_SIZE + 8 * (1 + self.rng.below(511)),
            7 => {
                if own {
                    // Outside the user half entirely: the kernel must refuse before looking.
                    [USER_END, 0xffff_8000_0000_0000, u64::MAX & !(PAGE_SIZE - 1)][self.rng.below(3) as usize]
                } else {
                    span - PAGE_SIZE
                }
            }
            8 => {
                if own {
                    WIN + (WIN_SPAN / 2)
                } else {
                    [span, USER_END, 0xffff_8000_0000_0000][self.rng.below(3) as usize]
                }
            }
            _ => {
                if own {
                    KERNEL_ADDRS[self.rng.below(KERNEL_ADDRS.len() as u64) as usize] & !(PAGE_SIZE - 1)
                } else {
                    self.rng.next()
                }
            }
        }
    }

    fn ar_kind(&mut self, ar: ObjName) -> Option<u64> {
        if ar == self.rar {
            return Some(ArKind::Root as u64);
        }
        self.table.iter().find(|o| o.n == ar).and_then(|o| if let Kind::Ar(k) = o.kind { Some(k) } else { None })
    }

    // ---- generating one call

    /// A bound-gate slot number: mostly in range, sometimes just past it or anything.
    fn slot(&mut self) -> u64 {
        match self.rng.below(10) {
            0 => abi::PPC_BOUND_SLOTS + self.rng.below(2),
            1 => self.rng.next(),
            _ => self.rng.below(abi::PPC_BOUND_SLOTS),
        }
    }

    fn gen(&mut self, in_batch: bool) -> (u64, [u64; 6]) {
        let r = self.rng.below(1000);
        // Weights: mapping and object calls most, services less.
        let ci = match r {
            0..=39 => call_index(nr::OBJ_GET_NAME),
            40..=79 => call_index(nr::OBJ_STAT),
            80..=139 => call_index(nr::SHARE_ALLOC),
            140..=199 => call_index(nr::SHARE_ADDOBJ),
            200..=269 => call_index(nr::SHARE_DELOBJ),
            270..=284 => call_index(nr::SELF_DROP),
            285..=299 => call_index(nr::SELF_SHARES),
            300..=319 => call_index(nr::SHARE_LIST),
            320..=389 => call_index(nr::SEGMENT_ALLOC),
            390..=419 => call_index(nr::SEGMENT_COPY),
            420..=434 => call_index(nr::SEGMENT_GET_NBYTES),
            435..=459 => call_index(nr::SEGMENT_SET_NBYTES),
            460..=499 => call_index(nr::AR_ALLOC),
            500..=579 => call_index(nr::AR_SET_SEG),
            580..=619 => call_index(nr::AR_SET_AR),
            620..=639 => call_index(nr::AR_GET),
            640..=689 => call_index(nr::AR_UNMAP),
            690..=709 => call_index(nr::PCORE_ALLOC),
            710..=714 => call_index(nr::PCORE_CURRENT),
            715..=734 => call_index(nr::PCORE_RUN),
            735..=744 => call_index(nr::PCORE_SET_INTERVAL),
            745..=759 => call_index(nr::PCORE_HALT),
            760..=769 => call_index(nr::PCORE_STAT),
            770..=779 => call_index(nr::PCORE_SET_ROLE),
            780..=794 => call_index(nr::DEVICE_ALLOC),
            795..=799 => call_index(nr::DEVICE_LIST),
            800..=804 => call_index(nr::PCORE_ADD_DEVICE),
            805..=809 => call_index(nr::DEVICE_STAT),
            810..=814 => call_index(nr::PCORE_DEL_DEVICE),
            815..=824 => call_index(nr::DEVICE_CONF),
            825..=839 => call_index(nr::DEVICE_BUF),
            840..=849 => call_index(nr::LOCALITY_GET),
            850..=864 => call_index(nr::CONSOLE_WRITE),
            865..=874 => call_index(nr::CONSOLE_READ),
            875..=879 => call_index(nr::TIME_NOW),
            880..=894 => call_index(nr::SYS_INFO),
            895..=909 => call_index(nr::CORE_STATS),
            910..=924 => call_index(nr::INITRD_GET),
            925..=934 => call_index(nr::NULL),
            935..=969 => {
                if in_batch {
                    call_index(nr::NULL)
                } else {
                    call_index(nr::SYSCALL_BATCH)
                }
            }
            970..=974 => call_index(nr::CORE_REQUEST),
            975..=979 => call_index(nr::CORE_RELEASE),
            980..=984 => call_index(nr::PCORE_YIELD),
            985..=987 => call_index(nr::PPC_REGISTER),
            988..=990 => call_index(nr::PPC_BIND),
            991..=994 => call_index(nr::PPC_CALL),
            995 => call_index(nr::PPC_UNBIND),
            996 => call_index(nr::PPC_RETURN),
            997 => call_index(nr::WAIT),
            998 => call_index(nr::INJECT_CTL),
            _ => UNKNOWN,
        };
        let n = CALLS[ci].nr;
        let is_ar = |k: Kind| matches!(k, Kind::Ar(_));
        let is_seg = |k: Kind| k == Kind::Seg;
        let is_pcore = |k: Kind| matches!(k, Kind::Pcore(_));
        let is_dev = |k: Kind| k == Kind::Device;
        let mut a = [0u64; 6];
        match n {
            nr::OBJ_GET_NAME => {
                let o = self.obj(|k| k != Kind::Free);
                let cap = self.len();
                a = [o.share, o.object, self.out_ptr(cap.min(64)), cap, 0, 0];
            }
            nr::OBJ_STAT => {
                let o = self.obj(|k| k != Kind::Free);
                a = [o.share, o.object, self.out_ptr(32), 0, 0, 0];
            }
            nr::SHARE_ALLOC => {
                let (p, l) = self.name();
                let flags = match self.rng.below(6) {
                    0..=2 => 0,
                    3 | 4 => SHARE_PRIVATE,
                    _ => self.flags(),
                };
                a = [self.share(), p, l, self.memid(), flags, 0];
            }
            nr::SHARE_ADDOBJ => {
                let o = self.obj(|k| k != Kind::Free);
                a = [self.share(), o.share, o.object, 0, 0, 0];
            }
            nr::SHARE_DELOBJ => {
                // Only names we made, stale ones, other cores' and random ones: never our base
                // objects (the root range we run on, the shares the harness needs).
                let o = match self.rng.below(10) {
                    0..=5 => self.pick(|k| k != Kind::Free).unwrap_or_else(|| self.stale_name()),
                    6 => self.stale_name(),
                    7 => match self.foreign_slot() {
                        Some(s) => ObjName::new(s.private.load(Ordering::Relaxed), s.seg.load(Ordering::Relaxed)),
                        None => self.stale_name(),
                    },
                    _ => ObjName::new(self.share(), self.random_id()),
                };
                a = [o.share, o.object, 0, 0, 0, 0];
            }
            nr::SELF_DROP => {
                // Never the shares the harness itself needs (X, the core's share).
                let mut s = self.share();
                if s == self.x || s == self.core_share {
                    s = self.root;
                }
                a = [s, 0, 0, 0, 0, 0];
            }
            nr::SELF_SHARES => {
                let cap = self.len() % 24;
                a = [self.out_ptr(cap * 8), cap, 0, 0, 0, 0];
            }
            nr::SHARE_LIST => {
                let cap = if self.rng.pct(80) { self.rng.below(80) } else { self.len() };
                a = [self.share(), self.out_ptr(cap.saturating_mul(8)), cap, 0, 0, 0];
            }
            nr::SEGMENT_ALLOC => {
                let (p, l) = self.name();
                a = [self.share(), p, l, self.memid(), self.pages(), 0];
            }
            nr::SEGMENT_COPY => {
                let (p, l) = self.name();
                let src = self.obj(is_seg);
                let mode = if self.rng.pct(85) { self.rng.below(2) } else { self.rng.next() % 5 };
                a = [self.share(), src.share, src.object, p, l, mode];
            }
            nr::SEGMENT_GET_NBYTES => {
                let o = self.obj(is_seg);
                a = [o.share, o.object, 0, 0, 0, 0];
            }
            nr::SEGMENT_SET_NBYTES => {
                // Only our own segments' sizes change (never the image or a stack).
                let o = self.pick(is_seg).unwrap_or_else(|| self.stale_name());
                a = [o.share, o.object, self.pages(), 0, 0, 0];
            }
            nr::AR_ALLOC => {
                let (p, l) = self.name();
                let kind = if self.rng.pct(90) { self.rng.below(4) } else { self.rng.next() % 9 };
                a = [self.share(), p, l, self.memid(), kind, 0];
            }
            nr::AR_SET_SEG => {
                let ar = if self.rng.pct(35) { self.rar } else { self.pick(is_ar).unwrap_or(self.rar) };
                let kind = self.ar_kind(ar);
                let seg = self.obj(is_seg);
                let m = SegMapping { voff: self.voff(ar, kind), seg, soff: if self.rng.pct(70) { self.rng.below(8) * PAGE_SIZE } else { self.pages() }, len: self.pages(), flags: self.flags() };
                let good = self.put(IN_OFF, m);
                a = [ar.share, ar.object, self.in_ptr(48, good), 0, 0, 0];
            }
            nr::AR_SET_AR => {
                let ar = if self.rng.pct(35) { self.rar } else { self.pick(is_ar).unwrap_or(self.rar) };
                let child = self.obj(is_ar);
                let ck = self.ar_kind(child);
                let kind = self.ar_kind(ar);
                let span = ck.and_then(ArKind::from_u64).map(|k| k.span()).unwrap_or(2 << 20);
                let voff = if self.rng.pct(70) {
                    let base = if ar == self.rar || kind.is_none() { WIN } else { 0 };
                    base + self.rng.below(4) * span
                } else {
                    self.voff(ar, kind)
                };
                a = [ar.share, ar.object, voff, child.share, child.object, 0];
            }
            nr::AR_GET => {
                let ar = if self.rng.pct(30) { self.rar } else { self.obj(is_ar) };
                let cap = if self.rng.pct(85) { self.rng.below(16) } else { self.len() };
                a = [ar.share, ar.object, self.out_ptr(cap.saturating_mul(48)), cap, 0, 0];
            }
            nr::AR_UNMAP => {
                let ar = if self.rng.pct(35) { self.rar } else { self.obj(is_ar) };
                let kind = self.ar_kind(ar);
                let voff = self.voff(ar, kind);
                let mut len = self.pages();
                let own = ar.object == self.rar.object;
                if own && (WIN..WIN + WIN_SPAN).contains(&voff) {
                    // Keep unmaps of our own root range inside the window.
                    len = len.min(WIN + WIN_SPAN - voff);
                    if self.rng.pct(10) {
                        len = WIN + WIN_SPAN - voff;
                    }
                }
                if own && !(WIN..WIN + WIN_SPAN).contains(&voff) && voff < USER_END {
                    a = [ar.share, ar.object, WIN, 0, 0, 0]; // zero length: refused
                } else {
                    a = [ar.share, ar.object, voff, len, 0, 0];
                }
            }
            nr::PCORE_ALLOC => {
                let (p, l) = self.name();
                let core = match self.rng.below(8) {
                    0..=3 => self.core,
                    4 | 5 => self.rng.below(self.ncores),
                    6 => self.ncores + self.rng.below(3),
                    _ => self.rng.next(),
                };
                a = [self.share(), p, l, core, 0, 0];
            }
            nr::PCORE_CURRENT => {}
            nr::PCORE_RUN => {
                let p = self.pcore_arg();
                // A context that can only fault at once: `rip` is never mapped, and the root
                // range is one we made (never our own).
                let root_ar = if self.rng.pct(80) { self.pick(|k| k == Kind::Ar(0)).unwrap_or_else(|| self.stale_name()) } else { self.obj(is_ar) };
                let root_ar = if root_ar.object == self.rar.object { ObjName::new(self.root, 0) } else { root_ar };
                let mut shares = [0u64; MAX_CONTEXT_SHARES];
                let nshares = if self.rng.pct(90) { self.rng.below(3) } else { self.rng.below(12) };
                for s in shares.iter_mut().take(nshares as usize) {
                    *s = self.share();
                }
                let rip = match self.rng.below(5) {
                    0..=2 => NEVER_MAPPED,
                    3 => KERNEL_ADDRS[self.rng.below(KERNEL_ADDRS.len() as u64) as usize],
                    _ => 0,
                };
                let role = if self.rng.pct(80) { 0 } else { self.rng.below(5) };
                let c = PcoreContext { rip, rsp: NEVER_MAPPED + PAGE_SIZE, arg: self.rng.next(), root_ar, nshares, shares, role };
                let good = self.put(IN_OFF, c);
                a = [p.share, p.object, self.in_ptr(core::mem::size_of::<PcoreContext>() as u64, good), 0, 0, 0];
            }
            nr::PCORE_SET_INTERVAL => {
                let mut p = if self.rng.pct(40) { self.pcore } else { self.obj(is_pcore) };
                // Another harness context's pcore (a worker's, named by core 0) keeps its
                // interval; ours, under any name, is reset by `cleanup`.
                if self.is_harness_pcore(p.object) && p.object != self.pcore.object {
                    p = self.pcore;
                }
                let hz = [0, 1, 100, 10_000, 10_001, u64::MAX][self.rng.below(6) as usize];
                if p.object == self.pcore.object {
                    self.touched_interval = true;
                }
                a = [p.share, p.object, hz, 0, 0, 0];
            }
            nr::PCORE_HALT => {
                // Never a harness pcore (ours, init's, a worker's: that ends a fuzzing context);
                // pcores we made only halt contexts started through them.
                let p = self.pcore_arg();
                a = [p.share, p.object, self.rng.next(), 0, 0, 0];
            }
            nr::PCORE_STAT => {
                let p = if self.rng.pct(20) { self.pcore } else { self.obj(is_pcore) };
                a = [p.share, p.object, self.out_ptr(40), 0, 0, 0];
            }
            nr::PCORE_SET_ROLE => {
                // Only pcores for our own core (a role change elsewhere could make a core the
                // harness needs a kernel core): Busy, or a switch between XC, TC and AC.
                let me = self.core;
                let p = if self.rng.pct(50) {
                    self.table.iter().find(|o| o.kind == Kind::Pcore(me)).map(|o| o.n).unwrap_or(self.pcore)
                } else {
                    self.stale_name()
                };
                let role = match self.rng.below(6) {
                    0 | 1 => abi::ROLE_XC,
                    2 => abi::ROLE_TC,
                    3 => abi::ROLE_AC,
                    4 => abi::ROLE_KC,
                    _ => self.rng.next(),
                };
                self.touched_role = true;
                a = [p.share, p.object, role, 0, 0, 0];
            }
            nr::DEVICE_ALLOC => {
                if self.rng.pct(30) {
                    // A syscall ring over one of our segments (too small, shared copy-on-write,
                    // or not a segment at all, as it comes), with good and bad slot counts.
                    let seg = self.obj(is_seg);
                    let slots = match self.rng.below(6) {
                        0 => 0,
                        1 => abi::MAX_RING_SLOTS + 1 + self.rng.below(8),
                        2 => u64::MAX - self.rng.below(4),
                        _ => 1 + self.rng.below(64),
                    };
                    a = [self.share(), abi::HWID_SYSCALL_RING, self.memid(), seg.share, seg.object, slots];
                } else if self.rng.pct(40) && ctl().net_hwid.load(Ordering::Relaxed) != 0 {
                    // A virtual NIC over one of our segments: good and bad channel counts,
                    // segments too small, shared copy-on-write, or not segments at all.
                    let seg = self.obj(is_seg);
                    let channels = match self.rng.below(5) {
                        0 => 0,
                        1 => abi::NET_MAX_CHANNELS + 1 + self.rng.below(4),
                        2 => u64::MAX - self.rng.below(4),
                        _ => 1 + self.rng.below(3),
                    };
                    a = [self.share(), ctl().net_hwid.load(Ordering::Relaxed), self.memid(), seg.share, seg.object, channels];
                } else if ctl().disk_hwid.load(Ordering::Relaxed) != 0 && self.rng.pct(30) {
                    // A block device object (abi::blk) over one of our segments, mostly with
                    // the reserved argument 0; one owner at a time, so mostly `Busy`.
                    let seg = self.obj(is_seg);
                    let reserved = if self.rng.pct(80) { 0 } else { self.rng.next() };
                    a = [self.share(), ctl().disk_hwid.load(Ordering::Relaxed), self.memid(), seg.share, seg.object, reserved];
                } else {
                    let hwid = if self.rng.pct(70) { ctl().console_hwid.load(Ordering::Relaxed) } else { self.random_id() };
                    a = [self.share(), hwid, self.memid(), 0, 0, 0];
                }
            }
            nr::PCORE_ADD_DEVICE | nr::PCORE_DEL_DEVICE => {
                // Rings (and the console, which is refused) to our own core, to pcores we made,
                // or to any name; another core's pcore must be refused.
                let p = if self.rng.pct(40) { self.pcore } else { self.obj(is_pcore) };
                let d = self.obj(is_dev);
                a = [p.share, p.object, d.share, d.object, 0, 0];
            }
            nr::DEVICE_LIST => {
                let cap = if self.rng.pct(80) { self.rng.below(4) } else { self.len() };
                a = [self.out_ptr(cap.saturating_mul(core::mem::size_of::<DeviceInfo>() as u64)), cap, 0, 0, 0, 0];
            }
            nr::DEVICE_STAT => {
                let d = self.obj(is_dev);
                a = [d.share, d.object, self.out_ptr(32), 0, 0, 0];
            }
            nr::DEVICE_CONF => {
                let d = self.obj(is_dev);
                let key = match self.rng.below(12) {
                    0..=5 => abi::CONF_CONSOLE_CRLF,
                    6 => abi::CONF_NET_MODE,
                    7 => abi::CONF_NET_POLL,
                    8 => abi::CONF_NET_WAIT,
                    9 => abi::CONF_BLK_MODE,
                    _ => self.rng.below(4),
                };
                // For CONF_NET_WAIT: a channel in the low byte and a short (or too long) timeout.
                let value = if key == abi::CONF_NET_WAIT {
                    self.rng.below(4) | (if self.rng.pct(90) { self.rng.below(500) } else { self.rng.next() >> 8 }) << 8
                } else if key == abi::CONF_BLK_MODE {
                    // A disk's mode (abi::blk): Polling or Dedicated with a few rings (the rings
                    // then hold whatever the segment holds: the kernel core must check them),
                    // or a bad value.
                    if self.rng.pct(80) { self.rng.below(3) | self.rng.below(4) << 8 } else { self.rng.next() }
                } else {
                    self.rng.below(4)
                };
                let conf = DeviceConf { key, value };
                let good = self.put(IN_OFF, conf);
                if self.table.iter().any(|o| o.n == d && o.kind == Kind::Device) {
                    self.touched_console = Some(d);
                }
                a = [d.share, d.object, self.in_ptr(16, good), 0, 0, 0];
            }
            nr::DEVICE_BUF => {
                let d = self.obj(is_dev);
                let seg = self.obj(is_seg);
                // Short transmissions only (a long one is legal, and slow on a serial line).
                let (offset, len) = match self.rng.below(6) {
                    0..=2 => (self.rng.below(2 * PAGE_SIZE), self.rng.below(8)),
                    3 => (self.rng.below(PAGE_SIZE), u64::MAX - self.rng.below(PAGE_SIZE)),
                    4 => (u64::MAX - self.rng.below(8), 1 + self.rng.below(8)),
                    _ => (1 << 40, 4),
                };
                let (mut buf_type, mut seg, mut offset, mut len) = match self.rng.below(20) {
                    // A virtual NIC's transmit or receive: channel in `seg.share`, buffer in
                    // `offset` (good and bad), frame length in `len`.
                    0..=2 => {
                        let t = if self.rng.pct(50) { abi::BUF_NET_TX } else { abi::BUF_NET_RX };
                        let b = if self.rng.pct(70) { self.rng.below(32) } else { self.rng.next() };
                        (t, ObjName::new(self.rng.below(4), 0), b, self.rng.below(2000))
                    }
                    3..=19 if self.rng.pct(85) => (abi::BUF_TX, seg, offset, len),
                    _ => (self.rng.below(4), seg, offset, len),
                };
                if ctl().disk_hwid.load(Ordering::Relaxed) != 0 && self.rng.pct(30) {
                    // Disk requests (abi::blk): `seg.share` is the sector, `seg.object`
                    // reserved; whole sectors mostly, near and past the end of disk and segment.
                    buf_type = [abi::BUF_BLK_READ, abi::BUF_BLK_WRITE, abi::BUF_BLK_FLUSH, abi::BUF_BLK_READ + 7][self.rng.below(4) as usize];
                    let sector = match self.rng.below(4) {
                        0 => self.rng.below(64),
                        1 => self.rng.below(1 << 16),
                        2 => u64::MAX - self.rng.below(64),
                        _ => self.rng.next(),
                    };
                    seg = ObjName::new(sector, if self.rng.pct(90) { 0 } else { self.rng.next() });
                    offset = if self.rng.pct(80) { self.rng.below(64) * abi::BLK_SECTOR } else { self.rng.next() };
                    len = if self.rng.pct(80) { (1 + self.rng.below(16)) * abi::BLK_SECTOR } else { self.rng.below(abi::BLK_MAX_REQUEST * 2) };
                }
                let good = self.put(IN_OFF, DeviceBuf { seg, offset, len, buf_type });
                a = [d.share, d.object, self.in_ptr(40, good), 0, 0, 0];
            }
            nr::LOCALITY_GET => {
                let cap = if self.rng.pct(80) { self.rng.below(self.ncores * self.ncores + 2) } else { self.len() };
                a = [self.out_ptr(cap.saturating_mul(2)), cap, 0, 0, 0, 0];
            }
            nr::CONSOLE_WRITE => {
                // Valid pointers write a few dots at most; the rest must be refused.
                let (p, l) = if self.rng.pct(30) {
                    (SCR_BASE + NAME_OFF + 200, self.rng.below(3))
                } else if self.rng.pct(50) {
                    (self.unreadable_ptr(), 1 + self.rng.below(64))
                } else {
                    // A valid pointer with a length running off the mapping or the address
                    // space; near the end of the scratch, so the bytes the kernel may send
                    // before it meets the unmapped page are few (a serial line is slow).
                    (SCR_END - 1 - self.rng.below(8), [u64::MAX, 1 << 63, SCR_PAGES * PAGE_SIZE][self.rng.below(3) as usize])
                };
                a = [p, l, 0, 0, 0, 0];
            }
            nr::CONSOLE_READ => {
                let cap = if self.rng.pct(80) { self.rng.below(64) } else { self.len() };
                a = [self.out_ptr(cap.min(256)), cap, 0, 0, 0, 0];
            }
            nr::TIME_NOW | nr::NULL | nr::PCORE_YIELD => {
                // Arguments are ignored: give random ones.
                for x in a.iter_mut() {
                    *x = self.rng.next();
                }
            }
            nr::SYS_INFO => a = [self.out_ptr(core::mem::size_of::<SysInfo>() as u64), 0, 0, 0, 0, 0],
            nr::CORE_STATS => {
                let c = if self.rng.pct(80) { self.rng.below(self.ncores) } else { self.ncores + self.rng.below(3) };
                a = [c, self.out_ptr(core::mem::size_of::<abi::CoreStats>() as u64), 0, 0, 0, 0];
            }
            nr::CORE_REQUEST => {
                // Mostly small counts (0 is refused), sometimes more than exist; roles valid,
                // kernel-core, or garbage; near a core, the caller, or off the end.
                let n = if self.rng.pct(80) { self.rng.below(self.ncores + 1) } else { self.rng.next() };
                let role = [abi::GRANT_ROLE_ANY, abi::ROLE_XC, abi::ROLE_TC, abi::ROLE_KC, self.rng.next()][self.rng.below(5) as usize];
                let near = [abi::NEAR_CALLER, self.rng.below(self.ncores), self.ncores + self.rng.below(3)][self.rng.below(3) as usize];
                a = [n, role, near, self.out_ptr(8 * n.min(64)), 0, 0];
            }
            nr::CORE_RELEASE => {
                let c = [abi::CORE_ALL, self.rng.below(self.ncores), self.rng.next()][self.rng.below(3) as usize];
                a = [c, 0, 0, 0, 0, 0];
            }
            nr::INITRD_GET => {
                // Real files are copied whole: rarely, and only the smallest program.
                let (p, l) = if self.rng.pct(3) {
                    (self.put(NAME_OFF + 128, *b"hello\0\0\0"), 5)
                } else {
                    self.name()
                };
                a = [self.share(), p, l, 0, 0, 0];
            }
            nr::PPC_REGISTER => {
                // A gate whose handler is safe to run here: the library OS's trampoline into
                // `fuzz_handler`, on a stack at the top of our scratch, for our own core (a
                // handler on another core's stack in our scratch could race our outputs). Or
                // one that is bad in one way: no handler there, no stack there, another or no
                // core, a bad root range, share list or description.
                let (p, l) = self.name();
                let mut g = PpcGate {
                    entry: libos::ppc::trampoline(),
                    stack_top: SCR_END,
                    cookie: fuzz_handler as *const () as usize as u64,
                    core: self.core,
                    root_ar: self.rar,
                    nshares: 1 + self.rng.below(3),
                    shares: [0; abi::MAX_CONTEXT_SHARES],
                };
                for s in g.shares.iter_mut() {
                    *s = self.share();
                }
                match self.rng.below(12) {
                    0 => g.entry = [0, NEVER_MAPPED, USER_END, KERNEL_ADDRS[self.rng.below(KERNEL_ADDRS.len() as u64) as usize]][self.rng.below(4) as usize],
                    1 => g.stack_top = [NEVER_MAPPED, SCR_END - 8, 0, USER_END + 16, KERNEL_ADDRS[0]][self.rng.below(5) as usize],
                    2 => {
                        // Another core: then the stack is one nothing maps (a call faults).
                        g.core = [self.rng.below(self.ncores), self.ncores + self.rng.below(3), self.rng.next()][self.rng.below(3) as usize];
                        g.stack_top = NEVER_MAPPED;
                    }
                    3 => g.cookie = NEVER_MAPPED,
                    4 => {
                        // Another range (maybe another core's root): a stack nothing maps.
                        g.root_ar = self.obj(|k| k != Kind::Free);
                        g.stack_top = NEVER_MAPPED;
                    }
                    5 => g.nshares = [0, abi::MAX_CONTEXT_SHARES as u64 + 1, self.rng.next()][self.rng.below(3) as usize],
                    6..=8 => {}
                    _ => {
                        // Often just our root share (random share lists mostly hold the share
                        // the gate goes in: a cycle, refused).
                        g.nshares = 1;
                        g.shares[0] = self.root;
                    }
                }
                let sp = if self.rng.pct(95) { self.put(IN_OFF, g) } else { self.bad_ptr(core::mem::size_of::<PpcGate>() as u64) };
                a = [self.share(), p, l, sp, 0, 0];
            }
            nr::PPC_CALL => {
                // A gate by name, or a bound slot (`ppc_bind`), in range or not.
                let (sh, id) = if self.rng.pct(30) {
                    (abi::PPC_BOUND, self.slot())
                } else {
                    let g = self.obj(|k| k == Kind::Gate);
                    (g.share, g.object)
                };
                a = [sh, id, self.rng.next(), self.rng.next(), self.rng.next(), self.rng.next()];
            }
            nr::PPC_BIND => {
                // Mostly a gate we made (there are few: most registrations are bad ones).
                let mine = if self.rng.pct(80) { self.pick(|k| k == Kind::Gate) } else { None };
                let g = match mine {
                    Some(g) => g,
                    None => self.obj(|k| k == Kind::Gate),
                };
                a = [g.share, g.object, 0, 0, 0, 0];
            }
            nr::PPC_UNBIND => {
                a = [self.slot(), 0, 0, 0, 0, 0];
            }
            nr::WAIT => {
                // Short waits only (the fuzzer must keep calling): bad flags and timeouts past
                // the limit are refused; a good one halts this core at most 200 us.
                let flags = [0, abi::WAIT_CONSOLE, 2 + self.rng.below(6), self.rng.next()][self.rng.below(4) as usize];
                let timeout = if self.rng.pct(85) { self.rng.below(200) } else { abi::MAX_WAIT_US + 1 + self.rng.below(1 << 20) };
                a = [flags, timeout, 0, 0, 0, 0];
            }
            nr::INJECT_CTL => {
                // Arming is a no-op by now (the harness armed before fuzzing); counts into any
                // output buffer, with any capacity.
                let op = [abi::INJECT_COUNTS, abi::INJECT_ARM, 2 + self.rng.below(4), self.rng.next()][self.rng.below(4) as usize];
                let cap = if self.rng.pct(70) { self.rng.below(abi::INJECT_CALLS + 2) } else { self.len() };
                let buf = if self.rng.pct(20) { 0 } else { self.out_ptr(cap.min(abi::INJECT_CALLS) * 8) };
                a = [op, buf, cap, 0, 0, 0];
            }
            nr::PPC_RETURN => {
                for x in a.iter_mut() {
                    *x = self.rng.next();
                }
            }
            nr::SYSCALL_BATCH => {
                let n = if self.rng.pct(85) { 1 + self.rng.below(8) } else { [0, abi::MAX_BATCH + 1, u64::MAX][self.rng.below(3) as usize] };
                let k = n.min(8);
                for i in 0..k {
                    let (bnr, bargs) = self.gen(true);
                    let e = BatchEntry { nr: if self.rng.pct(3) { nr::SYSCALL_BATCH } else { bnr }, args: bargs, result: 0 };
                    self.put(BATCH_OFF + i * core::mem::size_of::<BatchEntry>() as u64, e);
                }
                let good = SCR_BASE + BATCH_OFF;
                // Bad batch pointers are never readable memory: entries read from the fuzz
                // window or our code would be calls we did not generate (and could name the
                // harness's own objects, whose ids the kernel wrote there).
                let p = if self.rng.pct(90) {
                    good
                } else {
                    [KERNEL_ADDRS[self.rng.below(KERNEL_ADDRS.len() as u64) as usize], self.rng.below(PAGE_SIZE), USER_END - 64, SCR_END - 32, NEVER_MAPPED]
                        [self.rng.below(5) as usize]
                };
                a = [p, n, 0, 0, 0, 0];
            }
            _ => {
                let n = match self.rng.below(5) {
                    0 => 0,
                    1 => 3 + self.rng.below(7),
                    2 => 78 + self.rng.below(100),
                    3 => u64::MAX - self.rng.below(4),
                    _ => self.rng.next() | (1 << 32),
                };
                for x in a.iter_mut() {
                    *x = self.rng.next();
                }
                return (n, a);
            }
        }
        (n, a)
    }

    // ---- issuing and checking

    fn raw(&self, n: u64, a: [u64; 6]) -> i64 {
        if n == nr::PPC_CALL {
            // A call that enters a handler comes back with every register but rsp changed:
            // only the library OS's stub says so to the compiler.
            return libos::ppc::ppc_call_raw(a[0], a[1], a[2], a[3], a[4], a[5]);
        }
        if n == nr::PPC_RETURN {
            // It clears the argument registers even when it fails: its own stub says so.
            return libos::ppc::ppc_return_raw(a[0]);
        }
        // SAFETY: every pointer argument the generator makes is either inside this core's
        // scratch pages (which hold nothing else) or memory the kernel must refuse to write
        // (kernel half, non-canonical, unmapped, read-only, the fuzz window whose mappings hold
        // only fuzz segments). A kernel that wrongly wrote elsewhere is what we are looking for.
        unsafe { sys::raw6(n, a[0], a[1], a[2], a[3], a[4], a[5]) }
    }

    fn record_path(&mut self, ci: usize, r: i64) {
        let res = if r >= 0 { 0 } else { (-r).clamp(0, NRES as i64 - 1) as usize };
        let bitno = ci * NRES + res;
        self.paths[bitno / 64] |= 1 << (bitno % 64);
    }

    /// Check one result; returns a reason if it is not a documented one.
    fn check(&self, n: u64, a: &[u64; 6], r: i64) -> Option<&'static str> {
        let ci = call_index(n);
        if r < 0 {
            let Some(e) = Error::from_code(-r) else { return Some("undocumented error code") };
            if !allowed(ci, e) {
                return Some("an error this call does not document");
            }
            return None;
        }
        if ci == UNKNOWN {
            return Some("an unknown call number succeeded");
        }
        if matches!(n, nr::PCORE_HALT | nr::PCORE_RUN) && self.foreign_pcore(a[1]) {
            return Some("halted or ran a pcore another core allocated");
        }
        match n {
            nr::CONSOLE_WRITE if r as u64 != a[1] => Some("console_write wrote a different length"),
            nr::SYSCALL_BATCH if r as u64 != a[1] => Some("syscall_batch ran a different number of calls"),
            nr::OBJ_GET_NAME if r as u64 > abi::MAX_NAME as u64 || r as u64 > a[3] => Some("name longer than the buffer or MAX_NAME"),
            nr::SELF_SHARES | nr::SHARE_LIST | nr::AR_GET | nr::DEVICE_LIST => {
                let cap = if n == nr::SELF_SHARES || n == nr::DEVICE_LIST { a[1] } else if n == nr::SHARE_LIST { a[2] } else { a[3] };
                if r as u64 > cap {
                    Some("returned more entries than the buffer holds")
                } else {
                    None
                }
            }
            nr::CONSOLE_READ if r as u64 > a[1] => Some("read more than asked"),
            _ => None,
        }
    }

    fn add(&mut self, n: ObjName, kind: Kind) {
        if let Some(slot) = self.table.iter_mut().find(|o| o.kind == Kind::Free) {
            *slot = Obj { n, kind };
        } else {
            // Full: let it go at once (this call is part of the stream too).
            let r = self.raw(nr::SHARE_DELOBJ, [n.share, n.object, 0, 0, 0, 0]);
            self.note(nr::SHARE_DELOBJ, [n.share, n.object, 0, 0, 0, 0], r);
        }
    }

    fn forget(&mut self, n: ObjName) {
        for o in self.table.iter_mut().filter(|o| o.n == n) {
            o.kind = Kind::Free;
        }
        self.stale[self.nstale % STALE] = n;
        self.nstale += 1;
    }

    /// Learn from a successful call: new objects go in the table, deleted ones become stale.
    fn learn(&mut self, n: u64, a: &[u64; 6], r: i64) {
        if r < 0 {
            return;
        }
        let id = r as u64;
        match n {
            nr::SHARE_ALLOC => self.add(ObjName::new(a[0], id), Kind::Share),
            nr::SEGMENT_ALLOC | nr::INITRD_GET => self.add(ObjName::new(a[0], id), Kind::Seg),
            nr::SEGMENT_COPY => self.add(ObjName::new(a[0], id), Kind::Seg),
            nr::AR_ALLOC => self.add(ObjName::new(a[0], id), Kind::Ar(a[4])),
            nr::PCORE_ALLOC => {
                if a[0] == self.x {
                    ctl().slots[self.core as usize].xpcore.store(id, Ordering::Relaxed);
                }
                self.add(ObjName::new(a[0], id), Kind::Pcore(a[3]))
            }
            nr::DEVICE_ALLOC => self.add(ObjName::new(a[0], id), Kind::Device),
            nr::PPC_REGISTER => self.add(ObjName::new(a[0], id), Kind::Gate),
            nr::SHARE_ADDOBJ => {
                let kind = self.table.iter().find(|o| o.n == ObjName::new(a[1], a[2])).map(|o| o.kind).unwrap_or(Kind::Ref);
                self.add(ObjName::new(a[0], a[2]), kind)
            }
            nr::SHARE_DELOBJ => self.forget(ObjName::new(a[0], a[1])),
            _ => {}
        }
    }

    fn note(&mut self, n: u64, a: [u64; 6], r: i64) {
        self.seq += 1;
        self.ring[(self.seq as usize) % RING] = Rec { seq: self.seq, nr: n, a, r };
        let ci = call_index(n);
        self.record_path(ci, r);
        if r >= 0 {
            self.ok += 1;
        }
        if let Some(why) = self.check(n, &a, r) {
            self.fail(why);
        }
    }

    fn fail(&mut self, why: &str) {
        let rec = self.ring[(self.seq as usize) % RING];
        let mut what = [0u8; 64];
        let mut w = Cursor { buf: &mut what, len: 0 };
        let _ = core::fmt::write(&mut w, format_args!("{} -> {}", CALLS[call_index(rec.nr)].name, rec.r));
        let len = w.len;
        self.fail_with(rec.seq, core::str::from_utf8(&what[..len]).unwrap_or("?"), why);
    }

    /// Report a failure at call number `seq` (`what`: the call and its result) with the last
    /// calls on this core, and stop every core.
    fn fail_with(&mut self, seq: u64, what: &str, why: &str) {
        self.failures += 1;
        println!("fuzz: FAILED seed={} core={} attempt={} call #{}: {} ({})", self.seed, self.core, self.attempt, seq, what, why);
        println!("fuzz[{}] last calls (oldest first):", self.core);
        for i in 1..=RING as u64 {
            let s = self.seq + i;
            let rec = self.ring[(s as usize) % RING];
            if rec.seq != 0 && rec.seq + (RING as u64) > self.seq {
                print_rec(self.core, &rec);
            }
        }
        ctl().stop.store(1, Ordering::Release);
    }

    /// Whether the call (or, for a batch, any of its entries) would halt or run a harness
    /// pcore. `gen` never makes one; this catches a generator change that would, before the
    /// call ends a fuzzing context and the run fails for a reason that is not the kernel's.
    fn halts_harness(&self, n: u64, a: &[u64; 6]) -> bool {
        let bad = |n: u64, a: &[u64; 6]| matches!(n, nr::PCORE_HALT | nr::PCORE_RUN) && self.is_harness_pcore(a[1]);
        if n == nr::SYSCALL_BATCH && a[0] == SCR_BASE + BATCH_OFF {
            return (0..a[1].min(8)).any(|i| {
                let addr = SCR_BASE + BATCH_OFF + i * core::mem::size_of::<BatchEntry>() as u64;
                // SAFETY: the batch entries are in our scratch mapping (written by `gen`).
                let e: BatchEntry = unsafe { core::ptr::read_unaligned(addr as *const BatchEntry) };
                bad(e.nr, &e.args)
            });
        }
        bad(n, a)
    }

    fn step(&mut self) {
        let (n, a) = self.gen(false);
        if self.halts_harness(n, &a) {
            println!(
                "fuzz[{}]   not issued: {}({:#x}, {:#x}, {:#x}, {:#x}, {:#x}, {:#x})",
                self.core,
                CALLS[call_index(n)].name,
                a[0],
                a[1],
                a[2],
                a[3],
                a[4],
                a[5]
            );
            self.fail_with(self.seq + 1, CALLS[call_index(n)].name, "fuzzer bug: a call that halts or runs a harness pcore (not issued)");
            return;
        }
        if self.trace {
            println!("fuzz[{}] #{} {}({:#x}, {:#x}, {:#x}, {:#x}, {:#x}, {:#x})", self.core, self.seq + 1, CALLS[call_index(n)].name, a[0], a[1], a[2], a[3], a[4], a[5]);
        }
        let t0 = libos::time::ticks();
        let r = self.raw(n, a);
        let ci = call_index(n);
        self.cost[ci] += libos::time::ticks() - t0;
        self.count[ci] += 1;
        self.note(n, a, r);
        self.learn(n, &a, r);
        if n == nr::SYSCALL_BATCH && r >= 0 && a[0] == SCR_BASE + BATCH_OFF {
            // Each entry's result must be documented too, and its objects learnt.
            for i in 0..a[1].min(8) {
                let addr = SCR_BASE + BATCH_OFF + i * core::mem::size_of::<BatchEntry>() as u64;
                // SAFETY: the batch entries are in our scratch mapping (written by `gen`).
                let e: BatchEntry = unsafe { core::ptr::read_unaligned(addr as *const BatchEntry) };
                if e.nr == nr::SYSCALL_BATCH {
                    if e.result != -(Error::InvalidArgument as i64) {
                        self.note(e.nr, e.args, e.result);
                        self.fail("a nested syscall_batch was not refused");
                    }
                    continue;
                }
                self.note(e.nr, e.args, e.result);
                self.learn(e.nr, &e.args, e.result);
            }
        }
    }

    /// Delete everything this core made and undo its settings. Retries on `NoMemory`.
    fn cleanup(&mut self) {
        let retry = |f: &mut dyn FnMut() -> Result<u64, Error>| {
            for _ in 0..100 {
                match f() {
                    Err(Error::NoMemory) | Err(Error::BadAddress) => continue,
                    _ => return,
                }
            }
        };
        if self.touched_interval {
            let p = self.pcore;
            retry(&mut || sys::pcore_set_interval(p, 0));
        }
        if self.touched_role {
            let p = self.pcore;
            // SAFETY: pcore_set_role takes no pointers.
            retry(&mut || unsafe { sys::call(nr::PCORE_SET_ROLE, p.share, p.object, abi::ROLE_XC, 0, 0, 0) });
        }
        if let Some(d) = self.touched_console {
            let conf = DeviceConf { key: abi::CONF_CONSOLE_CRLF, value: 1 };
            retry(&mut || sys::device_conf(d, &conf));
        }
        let rar = self.rar;
        retry(&mut || sys::ar_unmap(rar, WIN, WIN_SPAN));
        // Contexts we started through our pcores end before their objects go.
        for o in self.table {
            if matches!(o.kind, Kind::Pcore(_)) && !self.is_harness_pcore(o.n.object) {
                retry(&mut || sys::pcore_halt(o.n, 0));
            }
        }
        for i in 0..TABLE {
            let o = self.table[i];
            if o.kind != Kind::Free {
                retry(&mut || sys::share_delobj(o.n));
                self.table[i].kind = Kind::Free;
            }
        }
    }

    fn publish(&self, slot: &Slot) {
        slot.calls.store(self.seq, Ordering::Relaxed);
        slot.ok.store(self.ok, Ordering::Relaxed);
        slot.failures.store(self.failures, Ordering::Relaxed);
        for (w, v) in slot.paths.iter().zip(self.paths.iter()) {
            w.fetch_or(*v, Ordering::Relaxed);
        }
        for i in 0..NCALLS {
            slot.count[i].fetch_add(self.count[i], Ordering::Relaxed);
            slot.cost[i].fetch_add(self.cost[i], Ordering::Relaxed);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Touching memory through the kernel (no user-mode demand faults under injection)

/// Make the kernel fault in the page at `addr` by writing a `SysInfo` there (only for memory
/// whose contents do not matter yet). Retries while injection makes the fault fail.
fn prefault_write(addr: u64) -> bool {
    for _ in 0..200 {
        // SAFETY: callers pass addresses in fresh scratch memory or below the live stack, where
        // the kernel's write of a SysInfo overwrites nothing in use.
        match unsafe { sys::call(nr::SYS_INFO, addr, 0, 0, 0, 0, 0) } {
            Ok(_) => return true,
            Err(Error::BadAddress) => continue,
            Err(_) => return false,
        }
    }
    false
}

/// Make the kernel read one byte at `addr` (as a one-byte file name: `NotFound`), faulting the
/// page in without changing it.
fn prefault_read(root: ObjectId, addr: u64) -> bool {
    for _ in 0..200 {
        match unsafe_read_probe(root, addr) {
            Err(Error::BadAddress) | Err(Error::NoMemory) => continue,
            _ => return true,
        }
    }
    false
}

fn unsafe_read_probe(root: ObjectId, addr: u64) -> Result<u64, Error> {
    // SAFETY: initrd_get only reads the name bytes (one byte at `addr`).
    unsafe { sys::call(nr::INITRD_GET, root, addr, 1, 0, 0, 0) }
}

/// Fault in the stack from just below the caller's frame down `bytes`.
#[inline(never)]
fn prefault_stack(bytes: u64) {
    let here = {
        let x = 0u8;
        core::ptr::addr_of!(x) as u64
    };
    let mut p = (here & !(PAGE_SIZE - 1)).saturating_sub(PAGE_SIZE);
    let lo = here.saturating_sub(bytes);
    while p >= lo {
        prefault_write(p);
        p -= PAGE_SIZE;
    }
}

fn prefault_image(root: ObjectId) {
    let mut p = libos::layout::IMAGE_BASE;
    while p < libos::image_end() {
        prefault_read(root, p);
        p += PAGE_SIZE;
    }
}

/// Arm the allocation fault injection the kernel command line configured
/// (`inject_ctl(INJECT_ARM)`): 1 armed (or already on from boot), 2 none configured, 3 the
/// call failed otherwise.
fn arm_injection() -> u64 {
    // SAFETY: INJECT_ARM reads and writes no user memory.
    match unsafe { sys::call(nr::INJECT_CTL, abi::INJECT_ARM, 0, 0, 0, 0, 0) } {
        Ok(_) => 1,
        Err(Error::Unsupported) => 2,
        Err(e) => {
            println!("fuzz: inject_ctl(arm) -> {e:?}");
            3
        }
    }
}

/// The failures injected so far, in all and by system call number
/// (`inject_ctl(INJECT_COUNTS)`); `None` if the command line configured no injection.
fn injected_counts(by_call: &mut [u64; abi::INJECT_CALLS as usize]) -> Option<u64> {
    // SAFETY: the kernel writes INJECT_CALLS words into `by_call`, which has that many.
    unsafe { sys::call(nr::INJECT_CTL, abi::INJECT_COUNTS, by_call.as_mut_ptr() as u64, abi::INJECT_CALLS, 0, 0, 0) }.ok()
}

/// Retry `f` while it fails with `NoMemory` (allocation fault injection).
fn persist<T>(mut f: impl FnMut() -> Result<T, Error>) -> Result<T, Error> {
    let mut last = Error::NoMemory;
    for _ in 0..500 {
        match f() {
            Err(Error::NoMemory) => last = Error::NoMemory,
            r => return r,
        }
    }
    Err(last)
}

// ---------------------------------------------------------------------------------------
// The run on one core

struct Base {
    core: u64,
    root: ObjectId,
    x: ObjectId,
    core_share: ObjectId,
    rar: ObjName,
    pcore: ObjName,
    attempt: u64,
}

/// Run this core's share of the calls; returns the number of failures (or a setup error code).
fn fuzz_core(b: &Base) -> u64 {
    let c = ctl();
    let slot = &c.slots[b.core as usize];
    let ncores = c.ncores.load(Ordering::Acquire);
    // Our private share: in X for workers (other cores reach it by nesting and must be
    // refused), in the root share on core 0.
    let parent = if b.core == 0 { b.root } else { b.x };
    let Ok(private) = persist(|| sys::share_alloc(parent, "fuzz-private", MEMID_SELF, SHARE_PRIVATE)) else {
        println!("fuzz[{}]: cannot allocate the private share", b.core);
        return 1000;
    };
    let Ok(seg) = persist(|| sys::segment_alloc(private, "fuzz-pub", MEMID_SELF, PAGE_SIZE)) else {
        let _ = sys::share_delobj(ObjName::new(parent, private));
        return 1001;
    };
    slot.root.store(b.root, Ordering::Relaxed);
    slot.private.store(private, Ordering::Relaxed);
    slot.rar.store(b.rar.object, Ordering::Relaxed);
    slot.seg.store(seg, Ordering::Release);
    let mut f = Fuzz {
        core: b.core,
        ncores,
        seed: c.seed.load(Ordering::Relaxed),
        attempt: b.attempt,
        rng: Rng::new(c.seed.load(Ordering::Relaxed), b.core, b.attempt),
        root: b.root,
        private,
        x: b.x,
        core_share: b.core_share,
        rar: b.rar,
        pcore: b.pcore,
        table: [Obj::default(); TABLE],
        stale: [ObjName::default(); STALE],
        nstale: 0,
        ring: [Rec::default(); RING],
        seq: 0,
        ok: 0,
        failures: 0,
        trace: c.trace.load(Ordering::Relaxed) != 0,
        paths: [0; PATH_WORDS],
        count: [0; NCALLS],
        cost: [0; NCALLS],
        touched_interval: false,
        touched_role: false,
        touched_console: None,
    };
    f.table[0] = Obj { n: ObjName::new(private, seg), kind: Kind::Seg };
    // Harness pcores in the table, as pcores (names of our own pcore through our private
    // share; on core 0 also the workers'): read-only and role uses are fine, and `pcore_arg`
    // must keep them out of pcore_halt and pcore_run however they are named. Planted so that
    // every run exercises that guard, not only runs whose stream happens to add such a name.
    let mut planted = 1;
    let harness: [ObjName; MAXC] = core::array::from_fn(|i| match i {
        0 => b.pcore,
        _ if b.core == 0 && (i as u64) < ncores => ObjName::new(b.root, c.harness_pcores[i].load(Ordering::Relaxed)),
        _ => ObjName::default(),
    });
    for (i, h) in harness.iter().enumerate() {
        // A few are enough (the table is for the objects the stream makes).
        if h.object == 0 || planted > 4 {
            continue;
        }
        if persist(|| sys::share_addobj(private, *h)).is_ok() {
            let core = if i == 0 { b.core } else { i as u64 };
            f.table[planted] = Obj { n: ObjName::new(private, h.object), kind: Kind::Pcore(core) };
            planted += 1;
        }
    }
    // Names for the generator: dots for the console, letters for object names.
    for i in 0..256u64 {
        let ch = if i >= 200 { b'.' } else { b'a' + (i % 26) as u8 };
        f.put(NAME_OFF + i, ch);
    }
    let calls = c.calls_per_core.load(Ordering::Relaxed);
    if b.core == 0 {
        // Every started worker has made its own objects (or was restarted and will make them
        // under injection, which it survives): arm injection, so it meets the fuzzed calls and
        // not the set-up, then let every core go.
        let started = c.started.load(Ordering::Acquire);
        if c.wait_ready.load(Ordering::Relaxed) != 0 {
            libos::time::wait_until(60_000, || c.ready.load(Ordering::Acquire) >= started);
        }
        c.armed.store(arm_injection(), Ordering::Release);
        c.go.store(1, Ordering::Release);
    } else {
        c.ready.fetch_add(1, Ordering::AcqRel);
    }
    libos::time::wait_until(60_000, || c.go.load(Ordering::Acquire) != 0);
    let t0 = libos::time::ticks();
    while f.seq < calls && c.stop.load(Ordering::Relaxed) == 0 {
        f.step();
    }
    let t1 = libos::time::ticks();
    f.cleanup();
    let _ = persist(|| sys::share_delobj(ObjName::new(private, seg)));
    let _ = persist(|| sys::share_delobj(ObjName::new(parent, private)));
    slot.ticks.store(t1 - t0, Ordering::Relaxed);
    f.publish(slot);
    slot.done.store(1, Ordering::Release);
    f.failures
}

fn worker(ctx: &CoreCtx) -> u64 {
    prefault_stack(96 << 10);
    prefault_image(ctx.root_share);
    let mut p = CTL_BASE;
    while p < CTL_BASE + CTL_PAGES * PAGE_SIZE {
        prefault_read(ctx.root_share, p);
        p += PAGE_SIZE;
    }
    let mut p = SCR_BASE;
    while p < SCR_END {
        prefault_write(p);
        p += PAGE_SIZE;
    }
    let b = Base {
        core: ctx.core,
        root: ctx.root_share,
        x: ctl().x_share.load(Ordering::Acquire),
        core_share: ctx.share,
        rar: ctx.root_ar,
        pcore: ctx.pcore,
        attempt: ctx.arg,
    };
    ctl().slots[ctx.core as usize].attempt.store(ctx.arg, Ordering::Relaxed);
    fuzz_core(&b)
}

// ---------------------------------------------------------------------------------------
// Core 0: set-up, its own share of the calls, joining, the report

fn arg_u64(args: &str, key: &str, default: u64) -> u64 {
    args.split_whitespace().find_map(|w| w.strip_prefix(key)?.strip_prefix('=')).and_then(libos::parse_u64).unwrap_or(default)
}

fn map_seg(ar: ObjName, voff: u64, seg: ObjName, len: u64) -> Result<u64, Error> {
    persist(|| sys::ar_set_seg(ar, &SegMapping { voff, seg, soff: 0, len, flags: MAP_READ | MAP_WRITE }))
}

fn main(args: &'static str) -> u64 {
    prefault_stack(200 << 10);
    let root = libos::root_share();
    prefault_image(root);
    let si = match persist(sys::sys_info) {
        Ok(s) => s,
        Err(e) => {
            println!("fuzz: sys_info -> {e:?}");
            return 2;
        }
    };
    let seed = arg_u64(args, "seed", 1);
    let total = arg_u64(args, "calls", 100_000);
    let ncores = arg_u64(args, "cores", si.cores).clamp(1, si.cores.min(MAXC as u64));
    let trace = args.split_whitespace().any(|w| w == "trace");
    let inject = args.split_whitespace().find_map(|w| w.strip_prefix("inject="));
    // `inject_from=boot`: the kernel injects from before we start (testing start-up itself).
    let from_boot = args.split_whitespace().any(|w| w == "inject_from=boot");
    let rar = ObjName::new(root, libos::start_info().root_ar);
    println!("fuzz: seed={seed} calls={total} cores={ncores}{}", if inject.is_some() { " (allocation fault injection on)" } else { "" });

    // The control block and our scratch.
    let Ok(ctl_seg) = persist(|| sys::segment_alloc(root, "fuzz-ctl", MEMID_SELF, CTL_PAGES * PAGE_SIZE)) else { return 3 };
    let ctl_seg = ObjName::new(root, ctl_seg);
    let Ok(scr) = persist(|| sys::segment_alloc(root, "fuzz-scratch", MEMID_SELF, SCR_PAGES * PAGE_SIZE)) else { return 3 };
    let scr = ObjName::new(root, scr);
    if map_seg(rar, CTL_BASE, ctl_seg, CTL_PAGES * PAGE_SIZE).is_err() || map_seg(rar, SCR_BASE, scr, SCR_PAGES * PAGE_SIZE).is_err() {
        println!("fuzz: cannot map the control block");
        return 3;
    }
    for i in 0..CTL_PAGES {
        prefault_write(CTL_BASE + i * PAGE_SIZE);
    }
    for i in 0..SCR_PAGES {
        prefault_write(SCR_BASE + i * PAGE_SIZE);
    }
    // The probes wrote SysInfo bytes: clear the control block.
    for i in 0..(CTL_PAGES * PAGE_SIZE / 8) {
        // SAFETY: CTL_BASE..+CTL_PAGES pages is our read-write mapping of the control segment,
        // faulted in just above; nothing else uses it yet.
        unsafe { core::ptr::write_volatile((CTL_BASE + i * 8) as *mut u64, 0) };
    }
    let c = ctl();
    c.seed.store(seed, Ordering::Relaxed);
    c.calls_per_core.store(total.div_ceil(ncores), Ordering::Relaxed);
    c.ncores.store(ncores, Ordering::Relaxed);
    c.trace.store(trace as u64, Ordering::Relaxed);
    c.wait_ready.store(!from_boot as u64, Ordering::Relaxed);
    let mut devs = [DeviceInfo::default(); 16];
    if let Ok(n) = persist(|| sys::device_list(&mut devs)) {
        if let Some(d) = devs[..n as usize].iter().find(|d| d.kind == abi::DEVICE_CONSOLE) {
            c.console_hwid.store(d.hwid, Ordering::Relaxed);
        }
        if let Some(d) = devs[..n as usize].iter().find(|d| d.kind == abi::DEVICE_BLOCK) {
            c.disk_hwid.store(d.hwid, Ordering::Relaxed);
        }
        if let Some(d) = devs[..n as usize].iter().find(|d| d.kind == abi::DEVICE_NET) {
            c.net_hwid.store(d.hwid, Ordering::Relaxed);
        }
    }
    let Ok(x) = persist(|| sys::share_alloc(root, "fuzz-x", MEMID_SELF, 0)) else { return 3 };
    c.x_share.store(x, Ordering::Release);
    c.harness_pcores[0].store(libos::pcore().object, Ordering::Relaxed);

    // One worker per other core, each with the control block and its own scratch mapped.
    const NONE: Option<Core> = None;
    let mut workers: [Option<Core>; MAXC] = [NONE; MAXC];
    let mut setup_failed = false;
    for i in 1..ncores {
        let opts = CoreOpts { stack_bytes: 128 << 10, shares: &[x], memid: None };
        let core = persist(|| Core::prepare(i, &opts)).and_then(|core| {
            map_seg(core.root_ar, CTL_BASE, ctl_seg, CTL_PAGES * PAGE_SIZE)?;
            let s = persist(|| sys::segment_alloc(core.share, "fuzz-scratch", i, SCR_PAGES * PAGE_SIZE))?;
            map_seg(core.root_ar, SCR_BASE, ObjName::new(core.share, s), SCR_PAGES * PAGE_SIZE)?;
            Ok(core)
        });
        match core {
            Ok(core) => {
                // Published before any core starts fuzzing (the workers start below).
                c.harness_pcores[i as usize].store(core.pcore.object, Ordering::Relaxed);
                workers[i as usize] = Some(core)
            }
            Err(e) => {
                println!("fuzz: cannot prepare core {i}: {e:?}");
                setup_failed = true;
            }
        }
    }
    let start = |w: &mut Core, attempt: u64| -> Result<(), Error> {
        let mut r = Err(Error::Busy);
        libos::time::wait_until(5_000, || {
            r = w.start(worker, attempt);
            !matches!(r, Err(Error::NoMemory) | Err(Error::Busy))
        });
        r
    };
    for (i, w) in workers.iter_mut().enumerate() {
        if let Some(w) = w {
            match start(w, 0) {
                Ok(()) => {
                    c.started.fetch_add(1, Ordering::AcqRel);
                }
                Err(e) => {
                    println!("fuzz: cannot start core {i}: {e:?}");
                    setup_failed = true;
                }
            }
        }
    }
    // `fuzz_core` on core 0 arms injection and sets `go` once every worker is ready.
    let t0 = libos::time::ticks();
    let base = Base { core: 0, root, x, core_share: 0, rar, pcore: libos::pcore(), attempt: 0 };
    let mut failures = fuzz_core(&base);

    // Join the workers; under injection a worker killed by a page fault it could not get
    // memory for is run again (with the next attempt's stream).
    let mut restarts = 0;
    for (i, w) in workers.iter_mut().enumerate() {
        let Some(w) = w else { continue };
        let mut attempt = 0;
        loop {
            match w.join(600_000) {
                Ok(0) => break,
                Ok(code) if code == EXIT_FAULT_BASE + 14 && inject.is_some() && attempt < 8 && c.stop.load(Ordering::Relaxed) == 0 => {
                    attempt += 1;
                    restarts += 1;
                    println!("fuzz: core {i} was killed by a page fault it got no memory for (injection); restarting (attempt {attempt})");
                    c.slots[i].done.store(0, Ordering::Relaxed);
                    if let Err(e) = start(w, attempt) {
                        println!("fuzz: cannot restart core {i}: {e:?}");
                        failures += 1;
                        break;
                    }
                }
                Ok(code) if code < 1000 => {
                    failures += code;
                    break;
                }
                Ok(code) => {
                    println!("fuzz: FAILED seed={seed} core={i}: the worker ended with code {code:#x}");
                    failures += 1;
                    break;
                }
                Err(e) => {
                    println!("fuzz: FAILED seed={seed} core={i}: did not finish ({e:?})");
                    failures += 1;
                    break;
                }
            }
        }
    }
    let wall = libos::time::ticks() - t0;
    // The failures injected while the cores fuzzed (and cleaned up), by the call they met.
    let mut by_call = [0u64; abi::INJECT_CALLS as usize];
    let injected = injected_counts(&mut by_call);
    if let Some(total) = injected {
        println!("fuzz: injected {total} allocation failures inside system calls");
        for (n, &k) in by_call.iter().enumerate().filter(|(_, &k)| k > 0) {
            let ci = call_index(n as u64);
            if ci == UNKNOWN {
                println!("fuzz: injected call {n}: {k}");
            } else {
                println!("fuzz: injected {}: {k}", CALLS[ci].name);
            }
        }
    }

    // The report.
    let (mut calls, mut ok) = (0u64, 0u64);
    let mut paths = [0u64; PATH_WORDS];
    let mut max_ticks = 0;
    for s in c.slots.iter().take(ncores as usize) {
        calls += s.calls.load(Ordering::Relaxed);
        ok += s.ok.load(Ordering::Relaxed);
        max_ticks = max_ticks.max(s.ticks.load(Ordering::Relaxed));
        for (p, w) in paths.iter_mut().zip(s.paths.iter()) {
            *p |= w.load(Ordering::Relaxed);
        }
    }
    let ms = libos::time::ticks_to_ns(max_ticks.max(1)) / 1_000_000;
    let wall_ms = libos::time::ticks_to_ns(wall) / 1_000_000;
    let per_s = calls.saturating_mul(1000) / ms.max(1);
    let npaths: u32 = paths.iter().map(|w| w.count_ones()).sum();
    let error_paths: u32 = (0..NCALLS * NRES).filter(|&b| b % NRES != 0 && paths[b / 64] & (1 << (b % 64)) != 0).count() as u32;
    for (ci, call) in CALLS.iter().enumerate() {
        let mut line = [0u8; 200];
        let mut len = 0;
        for res in 1..NRES {
            let b = ci * NRES + res;
            if paths[b / 64] & (1 << (b % 64)) != 0 {
                let name = Error::from_code(res as i64).map(|e| e.as_str()).unwrap_or("?");
                for &ch in name.as_bytes().iter().chain(b", ") {
                    if len < line.len() {
                        line[len] = ch;
                        len += 1;
                    }
                }
            }
        }
        let okd = paths[(ci * NRES) / 64] & (1 << ((ci * NRES) % 64)) != 0;
        println!(
            "fuzz: paths {}: {}{}",
            call.name,
            if okd { "ok, " } else { "" },
            core::str::from_utf8(&line[..len.saturating_sub(2)]).unwrap_or("")
        );
    }

    // Where the time went: the call types that took the most, with their mean cost.
    let mut count = [0u64; NCALLS];
    let mut cost = [0u64; NCALLS];
    for s in c.slots.iter().take(ncores as usize) {
        for i in 0..NCALLS {
            count[i] += s.count[i].load(Ordering::Relaxed);
            cost[i] += s.cost[i].load(Ordering::Relaxed);
        }
    }
    let mut order = [0usize; NCALLS];
    for (i, o) in order.iter_mut().enumerate() {
        *o = i;
    }
    order.sort_unstable_by_key(|&i| core::cmp::Reverse(cost[i]));
    for &i in order.iter().take(8) {
        if count[i] > 0 {
            println!(
                "fuzz: cost {}: {} calls, {} ms in all, {} us each",
                CALLS[i].name,
                count[i],
                libos::time::ticks_to_ns(cost[i]) / 1_000_000,
                libos::time::ticks_to_ns(cost[i] / count[i]) / 1000
            );
        }
    }

    // Clean up what core 0 made for the harness: workers (their objects), the control block.
    for w in workers.iter_mut() {
        drop(w.take());
    }
    let _ = persist(|| sys::share_delobj(ObjName::new(root, x)));
    let _ = persist(|| sys::ar_unmap(rar, SCR_BASE, SCR_PAGES * PAGE_SIZE));
    let _ = persist(|| sys::share_delobj(scr));
    println!(
        "fuzz: done seed={seed} cores={ncores} calls={calls} ok={ok} errors={} ms={ms} wall_ms={wall_ms} calls_per_s={per_s} per_vcpu={} paths={npaths} error_paths={error_paths} restarts={restarts} setup_failed={} injected={} armed={} failures={failures}",
        calls - ok,
        per_s / ncores.max(1),
        setup_failed as u8,
        injected.unwrap_or(0),
        c.armed.load(Ordering::Acquire),
    );
    if failures > 0 || setup_failed {
        println!(
            "fuzz: replay: cargo xtask fuzz --seed {seed} --calls {total} --smp {}{}{}{}",
            si.cores,
            if inject.is_some() { " --inject " } else { "" },
            inject.unwrap_or(""),
            if from_boot { " --inject-from boot" } else { "" }
        );
    }
    // Last: the control block (nothing reads it any more).
    let _ = persist(|| sys::ar_unmap(rar, CTL_BASE, CTL_PAGES * PAGE_SIZE));
    let _ = persist(|| sys::share_delobj(ctl_seg));
    if failures > 0 || setup_failed {
        1
    } else {
        0
    }
}
