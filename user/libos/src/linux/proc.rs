//! Linux processes on Corey's primitives (docs/linux-abi.md, "Processes"): `fork`, `vfork`
//! and `clone` without `CLONE_VM` are a `cfork` of the runtime's whole context (the program,
//! the runtime and its heap, copy-on-write) that resumes the program at the same place with
//! `rax = 0`; `execve` replaces the image in place; `wait4`/`waitid` join the child's pcore;
//! process ids, groups, sessions and pending signals live in the *process table*, one
//! segment every process of the session maps at the same address.
//!
//! The session (one per program the runtime starts, `start_session`/`end_session`): a share
//! `S` that every process of the program gets in its share set, holding the process table's
//! segment and every pipe's open files (`pipe.rs`: kernel-object descriptors, `Scope::Table`),
//! so that a descriptor a parent passes to its child names the same pipe in both. Nothing else
//! is shared: each process's descriptor table, memory, signal actions and working directory
//! are its own copy (`dispatch::Process`, copied by the `cfork`).
//!
//! Where a child runs: on the next core of the session in turn (a counter in the table), as
//! long as that core takes it; otherwise on its parent's own core, which every process that
//! forks makes a time-sharing core (TC, docs/roles.md: up to 16 contexts queued per core,
//! round-robin at the timer tick and at every `pcore_yield`). So a fork storm works at one
//! vCPU: every process is a context of core 0's run queue. The kernel saves and restores a
//! context's x87/SSE state when a TC switches contexts (Linux programs use SSE).
//!
//! Status: a child's `pcore` ends with its Linux wait status as the exit code
//! (`code_of_exit`, `code_of_signal`); a fault the kernel reports as `EXIT_FAULT_BASE +
//! vector` reads as the signal Linux would send for it (`wait_status`).
//!
//! Reparenting: a process that exits hands its running children to init (pid 1, the first
//! program) through the session share, and reaps the ones that have ended (`orphan_children`,
//! `adopt_orphans`). Shared file offsets: a file's open file description carried across a
//! fork keeps one offset in a cell of the table (`offset_cell_new`, `with_offset_cell`).
//!
//! Limits: a pending signal from another process acts when the target next makes a system
//! call or wakes (every sleep a signal ends is woken by the poster); a process halted from
//! outside while it holds an offset cell's lock (mid-read or write) leaves the cell locked.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use abi::{ObjName, ObjectId, SegMapping, MAP_READ, MAP_WRITE, MEMID_SELF};
use linuxabi::errno::*;
use percore::spin::TicketLock;

use super::dispatch::{lock_proc, Process, PROC};
use super::upcall::Frame;
use crate::cfork::{cfork, CforkOpts, Child};

/// Where every process of a session maps the process table (clear of the program's regions
/// and of the library OS's arena: `layout::SHARED_BASE` + 1 TiB).
const TABLE_VA: u64 = crate::layout::SHARED_BASE + (1 << 40);
const TABLE_BYTES: u64 = 24 << 10;
/// The process slots' part of the table; the rest holds the shared file offsets
/// (`OFFSET_CELLS`).
const SLOTS_BYTES: u64 = 16 << 10;
/// Words per slot: one 64-byte line each.
const SLOT_WORDS: usize = 8;
/// Slots (slot 0 is the header: the next pid, the next core).
pub const SLOTS: usize = (SLOTS_BYTES as usize / 8) / SLOT_WORDS;
// The words of a slot.
const W_PID: usize = 0;
const W_PPID: usize = 1;
const W_PGID: usize = 2;
const W_SID: usize = 3;
/// Signals pending for the process (bit `sig - 1`), and the core + 1 of its runtime while it
/// sleeps waiting for one (0: none): words 4 and 5 of a slot are laid out as
/// `linux::signal::SignalSlot` (`repr(C)`: pending, sleeper), so a slot's signal part is
/// that structure at `signal_slot_va(slot)`.
pub const W_PENDING: usize = 4;
pub const W_SLEEPER: usize = 5;
/// An orphan waiting for init (pid 1) to take it over: its share (held by the session share
/// meanwhile; 0: none) and its pcore object in that share. Written by the exiting parent,
/// taken by init (`adopt_orphans`).
const W_ORPHAN_SHARE: usize = 6;
const W_ORPHAN_PCORE: usize = 7;
/// Init's pid: the session's first program, which adopts orphans.
pub const INIT_PID: u32 = 1;
// The header's words.
const H_NEXT_PID: usize = 0;
const H_NEXT_CORE: usize = 1;

/// Children one process may have at once (`EAGAIN` beyond, as Linux's `RLIMIT_NPROC`).
pub const MAX_CHILDREN: usize = 32;

pub const SIGKILL: u32 = 9;
pub const SIGPIPE: u32 = 13;
pub const SIGCHLD: u32 = 17;

/// The session every process of one program belongs to (copied into each child by the
/// `cfork`: the same ids in all of them).
#[derive(Clone, Copy, Debug, Default)]
pub struct Session {
    /// Held by the first process's process share; in every child's share set.
    pub share: ObjectId,
    pub table_seg: ObjectId,
}

static SESSION: TicketLock<Session> = TicketLock::new(Session { share: 0, table_seg: 0 });

/// This process's slot in the table (each process has its own copy of this static), for
/// code that runs while the dispatcher holds the process lock (`pipe::write`).
static MY_SLOT: AtomicU64 = AtomicU64::new(0);

pub fn my_slot() -> Option<usize> {
    match MY_SLOT.load(Ordering::Relaxed) as usize {
        0 => None,
        s => Some(s),
    }
}

pub fn session() -> Session {
    *SESSION.lock()
}

fn words() -> &'static [AtomicU64] {
    super::mem::mapped_words(TABLE_VA, TABLE_BYTES as usize / 8)
}

fn slot_word(slot: usize, w: usize) -> &'static AtomicU64 {
    &words()[slot * SLOT_WORDS + w]
}

/// A child this process made and has not reaped.
pub struct ChildProc {
    pub pid: u32,
    pub slot: usize,
    pub child: Child,
}

/// The process-related part of a `Process`.
#[derive(Default)]
pub struct ProcState {
    pub pid: u32,
    pub ppid: u32,
    /// This process's slot in the table.
    pub slot: usize,
    pub children: Vec<ChildProc>,
    /// The signal that ends the process (its default action), if one did.
    pub killed_by: Option<u32>,
    /// The absolute path of the program it runs (what Linux's `/proc/self/exe` names).
    pub exe: alloc::string::String,
}

/// Make the session for a new program: its share, the table mapped at `TABLE_VA`, slot 1 for
/// the program (pid 1, its own group and session, parent 0). Also makes this core a
/// time-sharing core, so that children can queue on it.
pub fn start_session() -> Result<ProcState, abi::Error> {
    let share = crate::process::new_share("linux-session", MEMID_SELF)?;
    let r = (|| -> Result<ObjectId, abi::Error> {
        let seg = crate::sys::segment_alloc(share, "linux-proctable", MEMID_SELF, TABLE_BYTES)?;
        // Also held by the process share: `cfork` finds segments to share there.
        crate::sys::share_addobj(crate::process::proc_share(), ObjName::new(share, seg))?;
        let m = SegMapping { voff: TABLE_VA, seg: ObjName::new(share, seg), soff: 0, len: TABLE_BYTES, flags: MAP_READ | MAP_WRITE };
        if let Err(e) = crate::sys::ar_set_seg(crate::ctx::ctx().root_ar, &m) {
            let _ = crate::sys::share_delobj(ObjName::new(crate::process::proc_share(), seg));
            return Err(e);
        }
        Ok(seg)
    })();
    let seg = match r {
        Ok(s) => s,
        Err(e) => {
            crate::process::del_share(share);
            return Err(e);
        }
    };
    *SESSION.lock() = Session { share, table_seg: seg };
    for w in words() {
        w.store(0, Ordering::Relaxed);
    }
    words()[H_NEXT_PID].store(2, Ordering::Relaxed);
    let me = ProcState { pid: 1, ppid: 0, slot: 1, children: Vec::new(), killed_by: None, exe: alloc::string::String::new() };
    for (w, v) in [(W_PPID, 0), (W_PGID, 1), (W_SID, 1), (W_PENDING, 0), (W_PID, 1)] {
        slot_word(1, w).store(v, Ordering::Release);
    }
    MY_SLOT.store(1, Ordering::Relaxed);
    Ok(me)
}

/// Map the session's process table into `root` too (a new thread's root range: its calls
/// read this process's slot, e.g. the pending signals on every way back).
pub fn map_table(root: ObjName) -> Result<(), abi::Error> {
    let (share, seg) = {
        let s = SESSION.lock();
        (s.share, s.table_seg)
    };
    let m = SegMapping { voff: TABLE_VA, seg: ObjName::new(share, seg), soff: 0, len: TABLE_BYTES, flags: MAP_READ | MAP_WRITE };
    crate::sys::ar_set_seg(root, &m).map(|_| ())
}

/// End the session: every child still running is halted and deleted, the table unmapped, the
/// share (and every pipe still open in it) deleted.
pub fn end_session(p: &mut Process) {
    // Orphans not taken over yet are init's too: halted with its children.
    adopt_orphans(p);
    p.procs.children.clear();
    p.sig.slot = &super::signal::OWN;
    MY_SLOT.store(0, Ordering::Relaxed);
    let s = core::mem::take(&mut *SESSION.lock());
    if s.share == 0 {
        return;
    }
    let _ = crate::sys::ar_unmap(crate::ctx::ctx().root_ar, TABLE_VA, TABLE_BYTES);
    let _ = crate::sys::share_delobj(ObjName::new(crate::process::proc_share(), s.table_seg));
    crate::process::del_share(s.share);
}

/// A fresh id from the pid counter (a new thread's tid). Only while a session runs (its
/// table mapped).
pub fn new_id() -> u32 {
    words()[H_NEXT_PID].fetch_add(1, Ordering::Relaxed) as u32
}

/// A free slot for a new process with parent `ppid`, group `pgid`, session `sid`; its pid.
fn alloc_slot(ppid: u32, pgid: u32, sid: u32) -> Option<(usize, u32)> {
    for slot in 1..SLOTS {
        let w = slot_word(slot, W_PID);
        // Claimed with a placeholder (`u32::MAX`), filled, then published with the pid.
        if w.compare_exchange(0, u64::from(u32::MAX), Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            let pid = words()[H_NEXT_PID].fetch_add(1, Ordering::Relaxed) as u32;
            for (k, v) in [(W_PPID, ppid), (W_PGID, pgid), (W_SID, sid)] {
                slot_word(slot, k).store(u64::from(v), Ordering::Relaxed);
            }
            for k in [W_PENDING, W_SLEEPER, W_ORPHAN_SHARE, W_ORPHAN_PCORE] {
                slot_word(slot, k).store(0, Ordering::Relaxed);
            }
            w.store(u64::from(pid), Ordering::Release);
            return Some((slot, pid));
        }
    }
    None
}

fn free_slot(slot: usize) {
    slot_word(slot, W_PID).store(0, Ordering::Release);
}

/// The slot of live process `pid`.
fn find(pid: u32) -> Option<usize> {
    if pid == 0 {
        return None;
    }
    (1..SLOTS).find(|&s| slot_word(s, W_PID).load(Ordering::Acquire) == u64::from(pid))
}

/// Every live process's `(slot, pid)`.
fn live() -> impl Iterator<Item = (usize, u32)> {
    (1..SLOTS).filter_map(|s| match slot_word(s, W_PID).load(Ordering::Acquire) {
        0 => None,
        v if v == u64::from(u32::MAX) => None,
        v => Some((s, v as u32)),
    })
}

/// The address of slot `slot`'s signal words (pending, sleeper: `linux::signal::SignalSlot`).
pub fn signal_slot_va(slot: usize) -> u64 {
    TABLE_VA + ((slot * SLOT_WORDS + W_PENDING) * 8) as u64
}

/// Make signal `sig` pending for the process in `slot` (the word `linux::signal` and
/// `take_pending` read) and wake its runtime if it sleeps waiting for a signal: what
/// `linux::signal::post` does to a `SignalSlot`.
pub fn post_slot(slot: usize, sig: u32) {
    if (1..=64).contains(&sig) {
        slot_word(slot, W_PENDING).fetch_or(1 << (sig - 1), Ordering::SeqCst);
        // Every core on which a thread of the process sleeps waiting for a signal.
        super::signal::wake_cores(slot_word(slot, W_SLEEPER).load(Ordering::SeqCst));
    }
}

/// This process's pending word.
pub fn pending(p: &Process) -> &'static AtomicU64 {
    slot_word(p.procs.slot, W_PENDING)
}

// ---------------------------------------------------------------------------------------
// Wait statuses

/// The exit code a child's pcore ends with: its Linux wait status.
pub fn code_of_exit(status: u64) -> u64 {
    (status & 0xff) << 8
}

pub fn code_of_signal(sig: u32) -> u64 {
    u64::from(sig & 0x7f)
}

/// The Linux wait status of a child whose pcore ended with `code`: its own (exit or signal),
/// or, for a fault the kernel caught (`EXIT_FAULT_BASE + vector`), the signal Linux sends for
/// it; a child halted from outside (`EXIT_FAULT_BASE - 1`, `Child`'s drop) as `SIGKILL`.
pub fn wait_status(code: u64) -> u32 {
    if code >= abi::EXIT_FAULT_BASE {
        return match code - abi::EXIT_FAULT_BASE {
            0 => 8,       // #DE: SIGFPE
            6 => 4,       // #UD: SIGILL
            17 => 7,      // #AC: SIGBUS
            _ => 11,      // #GP, #PF and the rest: SIGSEGV
        };
    }
    if code == abi::EXIT_FAULT_BASE - 1 {
        return SIGKILL;
    }
    (code & 0xffff) as u32
}

// ---------------------------------------------------------------------------------------
// fork

/// What a child needs that its copy of the parent's memory does not say.
struct ForkStart {
    frame: Frame,
    pid: u32,
    slot: usize,
    /// The parent's root-range mappings `(voff, segment)`, to find each copy by address.
    parent_maps: Vec<(u64, ObjectId)>,
    /// How each descriptor goes to the child (`pipe::carry`).
    carried: Vec<(usize, super::pipe::Carried)>,
    /// The forking thread's slot (`thread::SLOTS`): the child's only thread is that one, with
    /// its FS base and mask (the child's new context page does not say which it was).
    thread: usize,
}

/// Handed to the child through its copy of memory (set just before the `cfork`, taken back
/// by the parent right after it).
static FORK_START: TicketLock<Option<ForkStart>> = TicketLock::new(None);

const CLONE_VM: u64 = 0x100;
const CLONE_VFORK: u64 = 0x4000;
const CLONE_PARENT_SETTID: u64 = 0x0010_0000;
const CLONE_CHILD_CLEARTID: u64 = 0x0020_0000;
const CLONE_CHILD_SETTID: u64 = 0x0100_0000;
const CSIGNAL: u64 = 0xff;

pub fn sys_fork(f: &mut Frame) -> i64 {
    fork_copying(f)
}

/// `fork`: the child's copies are copy-on-write, from a threaded process too (each thread's
/// root range maps the same segments; a copy-on-write break clears the other ranges' entries
/// for the page, so none keeps the page the child then owns).
fn fork_copying(f: &mut Frame) -> i64 {
    fork(f)
}

/// `clone` without `CLONE_VM`: a fork. The exit signal must be SIGCHLD (or none); the tid
/// flags glibc's and musl's `fork` pass are honoured; every other flag is `EINVAL`.
pub fn sys_clone(f: &mut Frame) -> i64 {
    let (flags, stack, ptid, ctid) = (f.rdi, f.rsi, f.rdx, f.r10);
    if flags & CLONE_VM != 0 {
        // Threads (`CLONE_VM`) are another part's (`linux::thread`).
        return -EINVAL;
    }
    let known = CSIGNAL | CLONE_VFORK | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID | CLONE_CHILD_SETTID;
    let sig = flags & CSIGNAL;
    if flags & !known != 0 || (sig != 0 && sig != u64::from(SIGCHLD)) || stack != 0 {
        return -EINVAL;
    }
    {
        let g = PROC.lock();
        let Some(p) = g.as_ref() else { return -ENOSYS };
        if flags & CLONE_PARENT_SETTID != 0 && !p.image.space.ok(ptid, 4, true) {
            return -EFAULT;
        }
        if flags & (CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID) != 0 && !p.image.space.ok(ctid, 4, true) {
            return -EFAULT;
        }
    }
    let pid = fork_copying(f);
    if pid > 0 && flags & CLONE_PARENT_SETTID != 0 {
        if let Some(p) = PROC.lock().as_ref() {
            p.image.space.put(ptid, &(pid as u32).to_le_bytes());
        }
    }
    pid
}

fn fork(f: &mut Frame) -> i64 {
    let sess = session();
    let mut g = PROC.lock();
    let Some(p) = g.as_mut() else { return -ENOSYS };
    if p.procs.children.len() >= MAX_CHILDREN {
        return -EAGAIN;
    }
    let me = p.procs.slot;
    let (pgid, sid) = (slot_word(me, W_PGID).load(Ordering::Relaxed) as u32, slot_word(me, W_SID).load(Ordering::Relaxed) as u32);
    let Some((slot, pid)) = alloc_slot(p.procs.pid, pgid, sid) else { return -EAGAIN };
    let carried = match super::pipe::carry(&mut p.files, sess.share) {
        Ok(v) => v,
        Err(e) => {
            free_slot(slot);
            return e;
        }
    };
    let mut maps = [abi::ArMapping::default(); 128];
    let n = crate::sys::ar_get(crate::ctx::ctx().root_ar, &mut maps).unwrap_or(0) as usize;
    let parent_maps = maps[..n.min(maps.len())].iter().filter(|m| m.target_type == abi::ObjType::Segment as u32).map(|m| (m.voff, m.target)).collect();
    let mut frame = *f;
    frame.ret = 0;
    *FORK_START.lock() = Some(ForkStart { frame, pid, slot, parent_maps, carried, thread: super::upcall::my_slot() });
    // The child's copy of the dispatcher's state must not be locked: it resumes the program
    // without returning through this call.
    drop(g);
    let r = spawn(&sess);
    let start = FORK_START.lock().take();
    let mut g = PROC.lock();
    let Some(p) = g.as_mut() else { return -ENOSYS };
    match r {
        Ok(child) => {
            drop(start);
            p.procs.children.push(ChildProc { pid, slot, child });
            i64::from(pid)
        }
        Err(e) => {
            if let Some(s) = start {
                super::pipe::release(s.carried);
            }
            free_slot(slot);
            crate::println!("linux: fork: the child could not start: {e:?}");
            match e {
                abi::Error::NoMemory => -ENOMEM,
                _ => -EAGAIN,
            }
        }
    }
}

/// Start the child: on the session's next core if it takes it, else on this core (made a
/// time-sharing core first, so the child queues behind us).
fn spawn(sess: &Session) -> Result<Child, abi::Error> {
    let mut shares = [sess.share, 0];
    let mut segs = [sess.table_seg, 0];
    let mut ranges = [0];
    let (ns, nr) = match crate::fs::cache_sharing() {
        Ok(c) => {
            // The child allocates from the shared bitmaps, never from a copy of our reserves.
            crate::fs::give_back_reserves().map_err(|_| abi::Error::Busy)?;
            shares[1] = c.share;
            segs[1] = c.request_seg;
            ranges[0] = c.range;
            (2, 1)
        }
        Err(_) => (1, 0),
    };
    let opts = CforkOpts { shares: &shares[..ns], segments: &segs[..ns], ranges: &ranges[..nr] };
    let me = crate::core_id();
    let cores = crate::heap::cores().max(1) as u64;
    if cores > 1 {
        let next = words()[H_NEXT_CORE].fetch_add(1, Ordering::Relaxed) % cores;
        if next != me {
            match cfork(next, &opts, child_main, 0) {
                Ok(c) => return Ok(c),
                Err(abi::Error::Busy | abi::Error::NotPermitted) => {}
                Err(e) => return Err(e),
            }
        }
    }
    let ctx = crate::ctx::ctx();
    crate::sys::pcore_set_role(ctx.pcore, abi::ROLE_TC)?;
    // The role takes effect from this context's next system call.
    let _ = crate::sys::pcore_yield();
    cfork(me, &opts, child_main, 0)
}

/// The child's first code (in its own context, on its copy of everything): take over the
/// copies of the program's memory, its pipes and its slot, then continue the program.
fn child_main(_: u64) -> u64 {
    let Some(start) = FORK_START.lock().take() else { return code_of_exit(127) };
    let fs_base = match adopt(start.pid, start.slot, &start.parent_maps, &start.carried, start.thread) {
        Ok(b) => b,
        Err(_) => return code_of_signal(SIGKILL),
    };
    let status = super::upcall::resume_child(&start.frame, fs_base);
    drop(start);
    finish(status.ok())
}

/// Rebuild the child's `Process` from its copy of the parent's: ids, memory (the program's
/// segments are now the cfork's copies, moved into a program share of the child's own, so
/// that `execve` and the exit delete them as the parent's are), pipes. Returns the FS base.
fn adopt(pid: u32, slot: usize, parent_maps: &[(u64, ObjectId)], carried: &[(usize, super::pipe::Carried)], thread: usize) -> Result<u64, abi::Error> {
    let mut g = PROC.lock();
    let p = g.as_mut().ok_or(abi::Error::NoSuchObject)?;
    // The copy of the parent's children list names the parent's children: not ours to halt.
    core::mem::forget(core::mem::take(&mut p.procs.children));
    p.procs.ppid = p.procs.pid;
    p.procs.pid = pid;
    p.procs.slot = slot;
    use_table_slot(p);
    p.sig.after_fork();
    MY_SLOT.store(slot as u64, Ordering::Relaxed);
    p.procs.killed_by = None;
    p.sig.killed_by = None;
    p.exit = None;
    let mut maps = [abi::ArMapping::default(); 128];
    let root = crate::ctx::ctx().root_ar;
    let n = crate::sys::ar_get(root, &mut maps)? as usize;
    let copy_of = |old: ObjectId| -> Option<ObjectId> {
        let voffs = parent_maps.iter().filter(|(_, s)| *s == old).map(|(v, _)| *v);
        for v in voffs {
            if let Some(m) = maps[..n.min(maps.len())].iter().find(|m| m.voff == v && m.target_type == abi::ObjType::Segment as u32) {
                return Some(m.target);
            }
        }
        None
    };
    let share = crate::process::new_share("linux-prog", MEMID_SELF)?;
    let mine = crate::process::proc_share();
    // The program's segments (image, stack, brk heap, mmaps: the ones mapped at its
    // addresses, not the runtime's), each once.
    let mut renamed: Vec<(ObjectId, ObjectId)> = Vec::new();
    for &(va, old) in parent_maps {
        if !is_program_va(p, va) || renamed.iter().any(|&(o, _)| o == old) {
            continue;
        }
        if let Some(new) = copy_of(old) {
            crate::sys::share_addobj(share, ObjName::new(mine, new))?;
            let _ = crate::sys::share_delobj(ObjName::new(mine, new));
            renamed.push((old, new));
        }
    }
    // The parent's program share (in our copy of the registry) is not ours.
    crate::cfork::remove_lookup_share(p.image.share);
    crate::cfork::add_lookup_share(share)?;
    p.image.share = share;
    let rename = |old: ObjectId| renamed.iter().find(|(o, _)| *o == old).map(|(_, n)| *n);
    // The brk heap: its copy if any of it was mapped, else a fresh empty segment (nothing of
    // it was in use; it grows with the break, `load::set_brk`).
    p.image.brk_seg = match rename(p.image.brk_seg.object) {
        Some(new) => ObjName::new(share, new),
        None => ObjName::new(share, crate::sys::segment_alloc(share, "linux-brk", MEMID_SELF, 0)?),
    };
    p.image.space.mmaps.rebind(share, &rename)?;
    super::pipe::adopt(&mut p.files, carried);
    // The child has the forking thread only (as Linux), now its main thread.
    super::thread::after_fork(p, thread);
    Ok(super::thread::me().fs_base.load(Ordering::Relaxed))
}

/// Whether `va` is one of the program's own addresses (image, stack, brk heap, mmaps), not
/// the runtime's.
fn is_program_va(p: &Process, va: u64) -> bool {
    let (runtime_lo, _) = super::upcall::native_range();
    va < runtime_lo || (super::vm::LO..super::vm::HI).contains(&va) || va == super::load::STACK_TOP - super::load::STACK_SIZE || (p.image.space.brk_lo..p.image.brk_limit).contains(&va)
}

/// The child's program has ended (`status`: what `exit` gave; `None`: the personality was
/// refused): release what it had, tell the parent, and give the pcore's exit code.
fn finish(status: Option<u64>) -> u64 {
    let mut g = PROC.lock();
    let Some(p) = g.as_mut() else { return code_of_exit(127) };
    let code = match (p.procs.killed_by.or(p.sig.killed_by), status) {
        (Some(sig), _) => code_of_signal(sig),
        (None, Some(s)) => code_of_exit(s),
        (None, None) => code_of_exit(127),
    };
    release(p);
    // What this child's reserves hold goes back to the shared bitmaps (the parent reads the
    // counts when it reaps us: `wait_child`).
    let _ = crate::fs::give_back_reserves();
    code
}

/// Everything a process had, at its end: its children (reparented to init: those that
/// ended are reaped, the others go on), its files, its memory; then SIGCHLD to its parent
/// (init, if the parent ended first).
pub fn release(p: &mut Process) {
    orphan_children(p);
    p.files.close_all();
    super::load::unload(&mut p.image);
    let ppid = slot_word(p.procs.slot, W_PPID).load(Ordering::Acquire) as u32;
    if let Some(ps) = find(ppid) {
        post_slot(ps, SIGCHLD);
    }
}

/// The exiting process's children, as Linux reparents them to init: one that has ended (a
/// zombie) is reaped now (init would reap it at once); one still running is handed to init:
/// its share moves to the session share, where init's next `wait4`/`waitid` (or the session's
/// end) takes it (`adopt_orphans`), and its parent becomes pid 1. Each stays a context of its
/// own; nothing of it is halted.
fn orphan_children(p: &mut Process) {
    let sess = session();
    for mut c in core::mem::take(&mut p.procs.children) {
        let halted = crate::sys::pcore_stat(c.child.pcore).is_ok_and(|s| s.state == abi::PCORE_HALTED);
        if halted || sess.share == 0 || p.procs.pid == INIT_PID {
            if halted {
                let _ = c.child.join_timeout(1000);
            }
            free_slot(c.slot);
            drop(c);
            continue;
        }
        let share = c.child.share;
        let held = crate::sys::share_addobj(sess.share, ObjName::new(crate::process::proc_share(), share));
        if held.is_err() {
            // No room to hand it over: it ends with us, as before reparenting.
            free_slot(c.slot);
            drop(c);
            continue;
        }
        slot_word(c.slot, W_ORPHAN_PCORE).store(c.child.pcore.object, Ordering::Relaxed);
        slot_word(c.slot, W_ORPHAN_SHARE).store(share, Ordering::Release);
        slot_word(c.slot, W_PPID).store(u64::from(INIT_PID), Ordering::Release);
        // The child is init's now: our process share lets go of its share, the handle is
        // forgotten (dropping it would halt the child).
        crate::process::del_share(share);
        core::mem::forget(c.child);
        if let Some(init) = find(INIT_PID) {
            // Init learns of it at its next look (its wait4 sleeps on its signal slot).
            super::signal::wake_cores(slot_word(init, W_SLEEPER).load(Ordering::SeqCst));
        }
    }
}

/// Init (pid 1) takes over the orphans handed to it (`orphan_children`): each becomes one of
/// its children, waitable and reaped as its own. A no-op in any other process.
fn adopt_orphans(p: &mut Process) {
    if p.procs.pid != INIT_PID || session().share == 0 {
        return;
    }
    let sess = session();
    for slot in 1..SLOTS {
        if slot_word(slot, W_ORPHAN_SHARE).load(Ordering::Acquire) == 0 {
            continue;
        }
        let share = slot_word(slot, W_ORPHAN_SHARE).swap(0, Ordering::AcqRel);
        let pcore = slot_word(slot, W_ORPHAN_PCORE).load(Ordering::Relaxed);
        let pid = slot_word(slot, W_PID).load(Ordering::Acquire) as u32;
        if share == 0 {
            continue;
        }
        let moved = crate::sys::share_addobj(crate::process::proc_share(), ObjName::new(sess.share, share));
        let _ = crate::sys::share_delobj(ObjName::new(sess.share, share));
        if moved.is_err() {
            crate::println!("linux: init cannot take over orphan {pid}");
            free_slot(slot);
            continue;
        }
        let child = crate::cfork::Child::adopt(share, ObjName::new(share, pcore));
        p.procs.children.push(ChildProc { pid, slot, child });
    }
}

// ---------------------------------------------------------------------------------------
// wait4, waitid

const WNOHANG: u64 = 1;
const WUNTRACED: u64 = 2;
const WEXITED: u64 = 4;
const WCONTINUED: u64 = 8;
const WNOWAIT: u64 = 0x0100_0000;
const WNOTHREAD: u64 = 0x2000_0000;
const WALL: u64 = 0x4000_0000;
const WCLONE: u64 = 0x8000_0000;

/// Which children a wait is for.
#[derive(Clone, Copy)]
enum Which {
    Any,
    Pid(u32),
    Group(u32),
}

fn matches(w: Which, c: &ChildProc) -> bool {
    match w {
        Which::Any => true,
        Which::Pid(pid) => c.pid == pid,
        Which::Group(g) => slot_word(c.slot, W_PGID).load(Ordering::Relaxed) == u64::from(g),
    }
}

/// Wait for a child that `which` names to end; `Ok(None)` with `nohang` if none has yet.
/// `reap`: remove it (else it stays waitable, `WNOWAIT`). Returns `(pid, wait status)`.
/// Sleeps without the process lock (the program's other threads go on), woken by a
/// child's `SIGCHLD` or any signal to the process; a signal that does something ends the
/// wait (`ERESTARTSYS`: restarted after an `SA_RESTART` handler, else `EINTR`).
fn wait_child(which: Which, nohang: bool, reap: bool) -> Result<Option<(u32, u32)>, i64> {
    let me = super::thread::me();
    loop {
        let psig = {
            let mut g = lock_proc();
            let p = g.as_mut().ok_or(-ENOSYS)?;
            adopt_orphans(p);
            if !p.procs.children.iter().any(|c| matches(which, c)) {
                return Err(-ECHILD);
            }
            let ended = p.procs.children.iter().position(|c| {
                matches(which, c) && crate::sys::pcore_stat(c.child.pcore).is_ok_and(|s| s.state == abi::PCORE_HALTED)
            });
            if let Some(i) = ended {
                let c = &mut p.procs.children[i];
                let code = c.child.join_timeout(1000).map_err(|_| -ECHILD)?;
                let r = (c.pid, wait_status(code));
                // The child may have made, changed or removed files through the shared cache.
                let _ = crate::fs::reload_counts();
                if reap {
                    let c = p.procs.children.remove(i);
                    free_slot(c.slot);
                    drop(c);
                }
                return Ok(Some(r));
            }
            if nohang {
                return Ok(None);
            }
            if super::signal::wait_check(p, u64::MAX).0 {
                return Err(super::signal::interrupted(p, super::signal::ERESTARTSYS));
            }
            p.sig.slot
        };
        if super::thread::must_leave() {
            return Err(-EINTR);
        }
        // The children may be queued behind us on this core: `sleep_until_sig` gives them the
        // turn. A child posts SIGCHLD just before its context halts: look again soon.
        let step = crate::time::now_ns() + 1_000_000;
        super::futex::sleep_until_sig(me, Some(psig), step, || super::signal::pending_for_me(psig));
    }
}

fn which_of_pid(p: &Process, pid: i32) -> Which {
    match pid {
        -1 => Which::Any,
        0 => Which::Group(slot_word(p.procs.slot, W_PGID).load(Ordering::Relaxed) as u32),
        x if x < -1 => Which::Group(x.unsigned_abs()),
        x => Which::Pid(x as u32),
    }
}

/// `wait4(pid, status, options, rusage)`.
pub fn sys_wait4(f: &mut Frame) -> i64 {
    let (pid, st, opts, ru) = (f.rdi as i32, f.rsi, f.rdx, f.r10);
    if opts & !(WNOHANG | WUNTRACED | WCONTINUED | WNOTHREAD | WALL | WCLONE) != 0 {
        return -EINVAL;
    }
    let which = {
        let g = lock_proc();
        let Some(p) = g.as_ref() else { return -ENOSYS };
        // Every pointer checked before a child is reaped.
        if st != 0 && !p.image.space.ok(st, 4, true) {
            return -EFAULT;
        }
        if ru != 0 && !p.image.space.ok(ru, 144, true) {
            return -EFAULT;
        }
        if pid == i32::MIN {
            return -ESRCH;
        }
        which_of_pid(p, pid)
    };
    match wait_child(which, opts & WNOHANG != 0, true) {
        Ok(None) => 0,
        Ok(Some((pid, status))) => {
            let g = lock_proc();
            if let Some(p) = g.as_ref() {
                if st != 0 {
                    p.image.space.put(st, &status.to_le_bytes());
                }
                if ru != 0 {
                    // No per-process accounting: the times and counts are zero.
                    p.image.space.put(ru, &[0u8; 144]);
                }
            }
            i64::from(pid)
        }
        Err(e) => e,
    }
}

const P_ALL: u64 = 0;
const P_PID: u64 = 1;
const P_PGID: u64 = 2;
const CLD_EXITED: u32 = 1;
const CLD_KILLED: u32 = 2;

/// `waitid(idtype, id, infop, options, rusage)`.
pub fn sys_waitid(f: &mut Frame) -> i64 {
    let (idtype, id, info, opts, ru) = (f.rdi, f.rsi as u32, f.rdx, f.r10, f.r8);
    if opts & !(WNOHANG | WEXITED | WUNTRACED | WCONTINUED | WNOWAIT | WNOTHREAD | WALL | WCLONE) != 0 || opts & (WEXITED | WUNTRACED | WCONTINUED) == 0 {
        return -EINVAL;
    }
    let which = {
        let g = lock_proc();
        let Some(p) = g.as_ref() else { return -ENOSYS };
        if info != 0 && !p.image.space.ok(info, 128, true) {
            return -EFAULT;
        }
        if ru != 0 && !p.image.space.ok(ru, 144, true) {
            return -EFAULT;
        }
        match idtype {
            P_ALL => Which::Any,
            P_PID if id > 0 => Which::Pid(id),
            P_PGID if id > 0 => Which::Group(id),
            P_PGID => Which::Group(slot_word(p.procs.slot, W_PGID).load(Ordering::Relaxed) as u32),
            _ => return -EINVAL,
        }
    };
    if opts & WEXITED == 0 {
        // Only stops and continues asked for: there are none (no job-control stops).
        return if opts & WNOHANG != 0 { 0 } else { -ECHILD };
    }
    let r = wait_child(which, opts & WNOHANG != 0, opts & WNOWAIT == 0);
    let g = lock_proc();
    let Some(p) = g.as_ref() else { return -ENOSYS };
    match r {
        Ok(found) => {
            // siginfo_t: signo, errno, code, then pid, uid, status (Linux zeroes it for
            // WNOHANG with nothing to report).
            let mut b = [0u8; 128];
            if let Some((pid, status)) = found {
                let (code, st) = if status & 0x7f == 0 { (CLD_EXITED, (status >> 8) & 0xff) } else { (CLD_KILLED, status & 0x7f) };
                b[0..4].copy_from_slice(&SIGCHLD.to_le_bytes());
                b[8..12].copy_from_slice(&code.to_le_bytes());
                b[16..20].copy_from_slice(&pid.to_le_bytes());
                b[24..28].copy_from_slice(&st.to_le_bytes());
            }
            if info != 0 {
                p.image.space.put(info, &b);
            }
            if ru != 0 {
                p.image.space.put(ru, &[0u8; 144]);
            }
            0
        }
        Err(e) => e,
    }
}

// ---------------------------------------------------------------------------------------
// Ids, groups, sessions

pub fn sys_getpid(p: &mut Process, _a: &[u64; 6]) -> i64 {
    i64::from(p.procs.pid)
}

pub fn sys_getppid(p: &mut Process, _a: &[u64; 6]) -> i64 {
    // The table's word: init's pid once the parent has exited (reparenting).
    match p.procs.slot {
        0 => i64::from(p.procs.ppid),
        s => slot_word(s, W_PPID).load(Ordering::Acquire) as i64,
    }
}

/// The slot of `pid` (0: the caller) for the group and session calls.
fn slot_of(p: &Process, pid: i64) -> Result<usize, i64> {
    match pid {
        0 => Ok(p.procs.slot),
        x if x < 0 || x > i64::from(u32::MAX - 1) => Err(-EINVAL),
        x => find(x as u32).ok_or(-ESRCH),
    }
}

pub fn sys_getpgid(p: &mut Process, a: &[u64; 6]) -> i64 {
    match slot_of(p, a[0] as i32 as i64) {
        Ok(s) => slot_word(s, W_PGID).load(Ordering::Relaxed) as i64,
        Err(e) if e == -EINVAL => -ESRCH,
        Err(e) => e,
    }
}

pub fn sys_getpgrp(p: &mut Process, _a: &[u64; 6]) -> i64 {
    slot_word(p.procs.slot, W_PGID).load(Ordering::Relaxed) as i64
}

pub fn sys_getsid(p: &mut Process, a: &[u64; 6]) -> i64 {
    match slot_of(p, a[0] as i32 as i64) {
        Ok(s) => slot_word(s, W_SID).load(Ordering::Relaxed) as i64,
        Err(e) if e == -EINVAL => -ESRCH,
        Err(e) => e,
    }
}

/// `setsid`: a new session and group led by the caller; `EPERM` for a group leader.
pub fn sys_setsid(p: &mut Process, _a: &[u64; 6]) -> i64 {
    let (s, pid) = (p.procs.slot, u64::from(p.procs.pid));
    if slot_word(s, W_PGID).load(Ordering::Relaxed) == pid || live().any(|(o, _)| slot_word(o, W_PGID).load(Ordering::Relaxed) == pid) {
        return -EPERM;
    }
    slot_word(s, W_SID).store(pid, Ordering::Relaxed);
    slot_word(s, W_PGID).store(pid, Ordering::Relaxed);
    pid as i64
}

/// `setpgid(pid, pgid)`: the caller or one of its children (`ESRCH` otherwise) into group
/// `pgid` (0: its own pid) of the same session (`EPERM` otherwise, and for a session leader).
pub fn sys_setpgid(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (pid, pgid) = (a[0] as i32, a[1] as i32);
    if pgid < 0 {
        return -EINVAL;
    }
    if pid < 0 {
        return -ESRCH;
    }
    let target = if pid == 0 { p.procs.pid } else { pid as u32 };
    let slot = if target == p.procs.pid {
        p.procs.slot
    } else {
        match p.procs.children.iter().find(|c| c.pid == target) {
            Some(c) => c.slot,
            None => return -ESRCH,
        }
    };
    let pgid = if pgid == 0 { target } else { pgid as u32 };
    let sid = slot_word(slot, W_SID).load(Ordering::Relaxed);
    if sid != slot_word(p.procs.slot, W_SID).load(Ordering::Relaxed) || sid == u64::from(target) {
        return -EPERM;
    }
    if pgid != target && !live().any(|(o, _)| slot_word(o, W_PGID).load(Ordering::Relaxed) == u64::from(pgid) && slot_word(o, W_SID).load(Ordering::Relaxed) == sid) {
        return -EPERM;
    }
    slot_word(slot, W_PGID).store(u64::from(pgid), Ordering::Relaxed);
    0
}

// ---------------------------------------------------------------------------------------
// kill and pending signals

/// `kill(pid, sig)` to any process of the session (to the caller too: its pending word).
pub fn sys_kill(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (pid, sig) = (a[0] as i32, a[1]);
    if sig > 64 {
        return -EINVAL;
    }
    let sig = sig as u32;
    let me = p.procs.pid;
    let targets: Vec<usize> = match pid {
        x if x > 0 => match find(x as u32) {
            Some(s) => alloc::vec![s],
            None => return -ESRCH,
        },
        0 => {
            let g = slot_word(p.procs.slot, W_PGID).load(Ordering::Relaxed);
            live().filter(|&(s, _)| slot_word(s, W_PGID).load(Ordering::Relaxed) == g).map(|(s, _)| s).collect()
        }
        -1 => live().filter(|&(_, q)| q != 1 && q != me).map(|(s, _)| s).collect(),
        i32::MIN => return -ESRCH,
        x => live().filter(|&(s, _)| slot_word(s, W_PGID).load(Ordering::Relaxed) == u64::from(x.unsigned_abs())).map(|(s, _)| s).collect(),
    };
    if targets.is_empty() {
        return -ESRCH;
    }
    if sig == 0 {
        return 0;
    }
    for s in targets {
        if s == p.procs.slot {
            // Itself: through `signal`, which records the sender for the siginfo.
            super::signal::kill_self(p, u64::from(sig));
        } else {
            post_slot(s, sig);
        }
    }
    0
}

/// The process's pending signals are its table slot's (so other processes' `kill` reaches
/// `signal`'s delivery), from the session's start or the fork that made it.
pub fn use_table_slot(p: &mut Process) {
    super::thread::set_main_tid(p.procs.pid);
    p.sig.slot = super::mem::mapped_signal_slot(signal_slot_va(p.procs.slot));
}


// ---------------------------------------------------------------------------------------
// Shared file offsets

/// Words per offset cell: a lock, the holders' count (0: free), the offset, one spare.
const CELL_WORDS: usize = 4;
/// Cells after the process slots (8 KiB of the table).
pub const OFFSET_CELLS: usize = ((TABLE_BYTES - SLOTS_BYTES) as usize / 8) / CELL_WORDS;
const C_LOCK: usize = 0;
const C_REFS: usize = 1;
const C_OFF: usize = 2;

fn cell_word(cell: usize, w: usize) -> &'static AtomicU64 {
    &words()[SLOTS * SLOT_WORDS + cell * CELL_WORDS + w]
}

/// A cell holding a file offset that several processes' open file descriptions share (a
/// description carried across a `fork`, as Linux's `struct file` is shared): `offset` to
/// start with, one holder. `None` without a session or with every cell taken (the caller
/// keeps its offset private then, as before sharing).
pub fn offset_cell_new(offset: u64) -> Option<usize> {
    if session().share == 0 {
        return None;
    }
    for c in 0..OFFSET_CELLS {
        if cell_word(c, C_REFS).compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            cell_word(c, C_OFF).store(offset, Ordering::Relaxed);
            cell_word(c, C_LOCK).store(0, Ordering::Release);
            return Some(c);
        }
    }
    None
}

/// One more holder of `cell` (a child given the description).
pub fn offset_cell_ref(cell: usize) {
    cell_word(cell, C_REFS).fetch_add(1, Ordering::AcqRel);
}

/// A holder let go of `cell` (its description closed); the last frees it.
pub fn offset_cell_unref(cell: usize) {
    let _ = cell_word(cell, C_REFS).fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| r.checked_sub(1));
}

/// Run `f` with the shared offset of `cell` (it returns the new one), under the cell's lock:
/// a read, write or seek of the description in any process is one step on the offset.
/// The holder may be a process queued behind us on this core: the waiter gives its turn.
pub fn with_offset_cell<R>(cell: usize, f: impl FnOnce(u64) -> (u64, R)) -> R {
    let lock = cell_word(cell, C_LOCK);
    while lock.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
        let _ = crate::sys::pcore_yield();
    }
    let (off, r) = f(cell_word(cell, C_OFF).load(Ordering::Relaxed));
    cell_word(cell, C_OFF).store(off, Ordering::Relaxed);
    lock.store(0, Ordering::Release);
    r
}
