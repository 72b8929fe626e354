//! Linux threads: `clone` with musl's `pthread_create` flags, each thread's own state (its
//! slot in [`SLOTS`]), `exit` of one thread against `exit_group`, `gettid`,
//! `set_tid_address`, `set_robust_list`/`get_robust_list`, `sched_getaffinity`/
//! `sched_setaffinity`.
//!
//! What a Linux process shares between its threads is the dispatcher's `Process` (address
//! space, descriptors, working directory, signal actions, the thread table [`Threads`]),
//! behind the process lock. What each thread has is its slot: tid, FS base,
//! `clear_child_tid`, robust list head, signal mask and pending signals, its futex wait
//! state, the root address range it runs in. Slots are atomics in a static table of the
//! runtime's image (which every thread's root maps), so a thread reads its own without the
//! process lock, and another thread (a waker, a signal poster) can write one.
//!
//! A Linux thread is a library-OS thread of the runtime (`crate::thread::spawn`): a context
//! of its own with its own root range, in which the runtime's image, heaps and first stack
//! are mapped as for any library-OS thread, and the program's memory (image, stack, brk
//! heap, mmaps) is mapped too: the new thread copies the program's mappings from the first
//! context's root into its own before it runs (`start`), and every later change to the
//! program's mappings is made in every thread's root ([`map_all`], [`unmap_all`]), under the
//! process lock. Each context registers the personality itself and runs the program's code
//! with the upcall stack below its `enter_thread` frame (`upcall.rs`).
//!
//! Placement: the k-th thread created (k = 1, 2, ...) goes on core `(main + k) % cores`, the
//! main thread's core being the runtime's. With as many cores as threads, each thread has a
//! core of its own; with more threads than cores, several share a core, which is then a TC
//! (time-sharing, docs/roles.md): the main thread turns its own core into a TC at its first
//! `clone`, and each new thread turns its core into one as it starts.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use abi::{ArMapping, ObjName, SegMapping};
use linuxabi::errno::*;
use percore::pad::CachePadded;

use super::dispatch::{lock_proc, Process};
use super::upcall::{self, Frame};

/// The main thread's tid in its slot until the process has its pid (`set_main_tid`).
const MAIN_TID: i64 = 1;

/// Most threads of a program at once (the main thread included): `clone` beyond is `EAGAIN`.
pub const MAX_THREADS: usize = 64;

/// One thread's own state.
#[derive(Default)]
pub struct Slot {
    /// The thread's id; 0: the slot is free.
    pub tid: AtomicI64,
    pub fs_base: AtomicU64,
    /// `CLONE_CHILD_CLEARTID` / `set_tid_address`: cleared and futex-woken at its exit.
    pub clear_child_tid: AtomicU64,
    pub robust_head: AtomicU64,
    pub robust_len: AtomicU64,
    /// `rt_sigprocmask`'s mask.
    pub sigmask: AtomicU64,
    /// Signals pending for this thread (bit `sig - 1`).
    pub pending: AtomicU64,
    /// The core it runs on.
    pub core: AtomicU64,
    /// Its root range, as every context of the runtime names it (share, object; 0: none).
    pub root_share: AtomicU64,
    pub root_obj: AtomicU64,
    /// Futex wait (`futex.rs`): the word's address, the bitset, the queue order, whether a
    /// waker took it off the queue, and its core + 1 while it may halt (0: not sleeping).
    pub futex_addr: AtomicU64,
    pub futex_bits: AtomicU64,
    pub futex_seq: AtomicU64,
    pub woken: AtomicU64,
    pub sleeper: AtomicU64,
    /// 1 once a new thread has mapped the program and runs (or 2: it could not start).
    pub started: AtomicU64,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            tid: AtomicI64::new(0),
            fs_base: AtomicU64::new(0),
            clear_child_tid: AtomicU64::new(0),
            robust_head: AtomicU64::new(0),
            robust_len: AtomicU64::new(0),
            sigmask: AtomicU64::new(0),
            pending: AtomicU64::new(0),
            core: AtomicU64::new(0),
            root_share: AtomicU64::new(0),
            root_obj: AtomicU64::new(0),
            futex_addr: AtomicU64::new(0),
            futex_bits: AtomicU64::new(0),
            futex_seq: AtomicU64::new(0),
            woken: AtomicU64::new(0),
            sleeper: AtomicU64::new(0),
            started: AtomicU64::new(0),
        }
    }

    fn clear(&self) {
        for w in [&self.fs_base, &self.clear_child_tid, &self.robust_head, &self.robust_len, &self.sigmask, &self.pending, &self.core, &self.root_share, &self.root_obj, &self.futex_addr, &self.futex_bits, &self.futex_seq, &self.woken, &self.sleeper, &self.started] {
            w.store(0, Ordering::Relaxed);
        }
    }

    /// Its root range, if it has one yet.
    fn root(&self) -> Option<ObjName> {
        let (s, o) = (self.root_share.load(Ordering::Relaxed), self.root_obj.load(Ordering::Relaxed));
        (s != 0).then(|| ObjName::new(s, o))
    }
}

// Only the initializer of the array below (each element is its own slot).
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: CachePadded<Slot> = CachePadded::new(Slot::new());
/// Every thread's slot; slot 0 is the main thread's (the runtime's own context).
pub static SLOTS: [CachePadded<Slot>; MAX_THREADS] = [EMPTY; MAX_THREADS];

/// `exit_group`'s status + 1 once a thread called it (0: running). Every thread leaves at
/// its next system call or wake-up.
pub static GROUP_EXIT: AtomicU64 = AtomicU64::new(0);

/// While a thread's `execve` ends the others: its slot + 1 (0: none). Every other thread
/// leaves at its next system call or wake-up (`must_leave`); the main thread, if it is not
/// the caller, waits instead for the exec to hand it the new image (`EXEC_HANDOVER`) and
/// runs it, so the new program runs in the process's first context with the pid as its
/// tid, as Linux's exec makes the caller the leader.
static EXEC_BY: AtomicU64 = AtomicU64::new(0);

/// What a thread's `execve` hands the main thread (the checked file and arguments).
pub static EXEC_HANDOVER: percore::spin::TicketLock<Option<super::exec::Prepared>> = percore::spin::TicketLock::new(None);

/// Whether the calling thread must stop what it waits for and leave its call: the program
/// ends (`exit_group`), or another thread's `execve` ends this one.
pub fn must_leave() -> bool {
    group_exit().is_some() || exec_ends_me()
}

/// Whether another thread's `execve` is ending this one.
#[inline]
pub fn exec_ends_me() -> bool {
    match EXEC_BY.load(Ordering::Acquire) {
        0 => false,
        by => by - 1 != upcall::my_slot() as u64,
    }
}

/// `execve` from `slot` ends every other thread: each leaves at its next call or wake-up;
/// one that makes none within `grace_ms` (spinning in the program's code) is halted. The
/// main thread, when it is not the caller, is left parked (`park_for_exec`). Returns once
/// only the caller (and a parked main thread) is left. No lock held by the caller.
pub fn end_others_for_exec(slot: usize, grace_ms: u64) {
    EXEC_BY.store(slot as u64 + 1, Ordering::Release);
    kick_all();
    let me = &SLOTS[slot];
    let deadline = crate::time::now_ns() + grace_ms * 1_000_000;
    let others_gone = || {
        SLOTS.iter().enumerate().all(|(i, s)| i == slot || i == 0 || s.tid.load(Ordering::Acquire) == 0) && (slot == 0 || MAIN_PARKED.load(Ordering::Acquire) != 0)
    };
    loop {
        // Polled in short steps: a leaving thread kicks only the main thread's slot.
        let step = crate::time::now_ns() + 1_000_000;
        if super::futex::sleep_until(me, step.min(deadline), others_gone) || crate::time::now_ns() >= deadline {
            break;
        }
        kick_all();
    }
    // Threads that made no call: halted (their contexts are freed with the table's zombies).
    let mut g = lock_proc();
    if let Some(p) = g.as_mut() {
        let t = &mut p.threads;
        let mut i = 0;
        while i < t.recs.len() {
            let r = t.recs[i].slot;
            if r != 0 && r != slot {
                let rec = t.recs.swap_remove(i);
                if let Some(h) = rec.handle {
                    drop(h); // halts it and waits for the halt
                }
                SLOTS[r].tid.store(0, Ordering::Release);
            } else {
                i += 1;
            }
        }
    }
}

/// The exec is over (done or failed before the others were told): threads run normally.
pub fn exec_done() {
    EXEC_BY.store(0, Ordering::Release);
    MAIN_PARKED.store(0, Ordering::Release);
}

/// Set while the main thread waits for a thread's `execve` to hand it the new image.
static MAIN_PARKED: AtomicU64 = AtomicU64::new(0);

/// The calling thread's way out when another thread's `execve` ends it: a thread other than
/// the main one leaves its table entry and ends; the main thread waits for the handover and
/// returns it (the caller loads the new image and resumes into it), or `None` if the program
/// ended meanwhile.
pub fn leave_for_exec() -> Option<super::exec::Prepared> {
    let slot = upcall::my_slot();
    if slot != 0 {
        // Linux's de_thread kills them: no clear_child_tid store, the memory goes anyway.
        SLOTS[slot].clear_child_tid.store(0, Ordering::Relaxed);
        end_thread(slot);
        upcall::leave(0);
    }
    let main = &SLOTS[0];
    MAIN_PARKED.store(1, Ordering::Release);
    for s in SLOTS.iter() {
        if s.tid.load(Ordering::Relaxed) != 0 {
            kick(s);
        }
    }
    // Not `futex::sleep_until`: that gives up at once while an exec ends this thread.
    let core = crate::ctx::ctx().core;
    while EXEC_HANDOVER.lock().is_none() && group_exit().is_none() {
        let _ = crate::sys::pcore_yield();
        main.sleeper.store(core + 1, Ordering::SeqCst);
        if EXEC_HANDOVER.lock().is_none() && group_exit().is_none() {
            let _ = crate::sys::wait(0, 100_000);
        }
        main.sleeper.store(0, Ordering::SeqCst);
    }
    let h = EXEC_HANDOVER.lock().take();
    exec_done();
    h
}

/// The running thread's slot.
pub fn me() -> &'static Slot {
    &SLOTS[upcall::my_slot()]
}

/// The status the program ends with, if a thread called `exit_group`.
pub fn group_exit() -> Option<u64> {
    GROUP_EXIT.load(Ordering::Acquire).checked_sub(1)
}

/// The main thread's tid is the process's pid (set once the process has one, and again in a
/// forked child, which has a pid of its own and only the forking thread, now its main).
pub fn set_main_tid(pid: u32) {
    SLOTS[0].tid.store(i64::from(pid), Ordering::Relaxed);
}

/// A forked child's thread table (in the child, on its copy of the parent's): the forking
/// thread only (`forking`: its slot in the parent), now the main thread in slot 0 with its FS
/// base and signal mask (Linux's child has no `clear_child_tid` and no robust list unless
/// `clone` asked for them). The FS base must be the forking thread's: the C library's fork
/// finds its own thread descriptor through it (musl's child walks its thread list from
/// there, and loops forever on another thread's).
pub fn after_fork(p: &mut Process, forking: usize) {
    let mine = &SLOTS[forking.min(MAX_THREADS - 1)];
    let (fs, mask) = (mine.fs_base.load(Ordering::Relaxed), mine.sigmask.load(Ordering::Relaxed));
    let old = core::mem::replace(&mut p.threads, Threads::new(p.image.share));
    // The copy names the parent's threads (their contexts and stacks): not the child's to
    // halt or free.
    core::mem::forget(old);
    let s = &SLOTS[0];
    s.fs_base.store(fs, Ordering::Relaxed);
    s.sigmask.store(mask, Ordering::Relaxed);
    set_main_tid(p.procs.pid);
}

/// Wake the core of every thread that may be halted (after `exit_group`).
fn kick_all() {
    for s in SLOTS.iter() {
        if s.tid.load(Ordering::Relaxed) != 0 {
            kick(s);
        }
    }
}

/// Wake `s`'s core if it may be halted waiting.
pub fn kick(s: &Slot) {
    let c = s.sleeper.load(Ordering::SeqCst);
    if c != 0 {
        let _ = crate::sys::wake(c - 1);
    }
}

/// One thread of the process table.
struct Rec {
    slot: usize,
    /// The library-OS thread running it (`None` for the main thread).
    handle: Option<crate::thread::Thread>,
    /// Its registers for its first return to the program (taken as it starts).
    start: Option<Frame>,
}

/// The process's threads (in `Process`, under the process lock).
pub struct Threads {
    recs: Vec<Rec>,
    /// Threads that have exited, whose contexts are joined and freed later.
    zombies: Vec<crate::thread::Thread>,
    next_tid: i64,
    /// Threads created, for the placement rule.
    created: u64,
    /// The first context's core and whether it was made a TC (undone at the end).
    main_core: u64,
    made_tc: bool,
    /// Other cores made TCs for threads (bit per core; they stay TCs).
    tc_cores: u64,
    /// The first context's root range, added to the process share so threads can name it.
    main_root: ObjName,
    shared_root: bool,
    /// The share holding the program's segments (image, stack, brk, mmaps).
    prog_share: abi::ObjectId,
}

impl Threads {
    /// The table for a program whose only thread is the runtime's context; its slot is 0.
    pub fn new(prog_share: abi::ObjectId) -> Threads {
        GROUP_EXIT.store(0, Ordering::Relaxed);
        for s in SLOTS.iter() {
            s.tid.store(0, Ordering::Relaxed);
            s.clear();
        }
        let c = crate::ctx::ctx();
        let main = &SLOTS[0];
        main.tid.store(MAIN_TID, Ordering::Relaxed);
        main.core.store(c.core, Ordering::Relaxed);
        main.root_share.store(c.root_ar.share, Ordering::Relaxed);
        main.root_obj.store(c.root_ar.object, Ordering::Relaxed);
        upcall::set_my_slot(0);
        // Room for every thread up front: the tables never grow, so no thread allocates a
        // block of them on its own core's heap (which it gives back when it ends, `start`).
        let mut recs = Vec::with_capacity(MAX_THREADS);
        recs.push(Rec { slot: 0, handle: None, start: None });
        Threads { recs, zombies: Vec::with_capacity(MAX_THREADS), next_tid: MAIN_TID + 1, created: 0, main_core: c.core, made_tc: false, tc_cores: 0, main_root: c.root_ar, shared_root: false, prog_share }
    }

    /// A table with no thread (what the process holds once `finish` has taken its own).
    pub fn empty() -> Threads {
        Threads { recs: Vec::new(), zombies: Vec::new(), next_tid: MAIN_TID + 1, created: 0, main_core: 0, made_tc: false, tc_cores: 0, main_root: ObjName::default(), shared_root: false, prog_share: 0 }
    }

    /// After `execve`: the program's segments are in the new image's share, where a new
    /// thread finds them to map (`copy_program`).
    pub fn set_prog_share(&mut self, share: abi::ObjectId) {
        self.prog_share = share;
    }

    /// Live threads besides the main one.
    pub fn others(&self) -> usize {
        self.recs.iter().filter(|r| r.slot != 0).count()
    }

    /// Join the threads that have ended (none waits).
    fn reap(&mut self) {
        self.zombies.retain_mut(|t| t.join_timeout(0).is_err());
    }

    /// After the program: end every thread still running (each leaves at its next call or
    /// wake-up; one that makes none within `grace_ms` is halted), free them, give the first
    /// context's root and core back as they were. Called by the main thread with no lock held
    /// and the personality off.
    pub fn finish(&mut self, grace_ms: u64) {
        if GROUP_EXIT.load(Ordering::Acquire) == 0 {
            GROUP_EXIT.store(1, Ordering::Release);
        }
        kick_all();
        let mut all: Vec<crate::thread::Thread> = core::mem::take(&mut self.zombies);
        all.extend(self.recs.drain(..).filter_map(|r| r.handle));
        for mut t in all {
            // Dropping an unjoined thread halts it and waits for the halt.
            let _ = t.join_timeout(grace_ms);
            drop(t);
        }
        if self.shared_root {
            SLOTS[0].root_share.store(self.main_root.share, Ordering::Relaxed);
            let _ = crate::sys::share_delobj(ObjName::new(crate::process::proc_share(), self.main_root.object));
            self.shared_root = false;
        }
        if self.made_tc {
            let _ = crate::sys::pcore_set_role(crate::ctx::ctx().pcore, abi::ROLE_XC);
            self.made_tc = false;
        }
        // The main thread's slot stays: the program's memory is unmapped through it.
        for s in SLOTS[1..].iter() {
            s.tid.store(0, Ordering::Relaxed);
        }
    }
}

/// Apply `m` (a mapping of the program's memory) to every thread's root range; on a failure
/// the roots already changed are unmapped again. The caller holds the process lock.
pub fn map_all(m: &SegMapping) -> Result<(), abi::Error> {
    let mut done: Vec<ObjName> = Vec::new();
    for s in SLOTS.iter() {
        let Some(root) = s.root().filter(|_| s.tid.load(Ordering::Relaxed) != 0) else { continue };
        if let Err(e) = crate::sys::ar_set_seg(root, m) {
            for r in done {
                unmap_retrying(r, m.voff, m.len);
            }
            return Err(e);
        }
        done.push(root);
    }
    Ok(())
}

/// Remove `[va, va + len)` of the program's memory from every thread's root range. The
/// caller holds the process lock.
pub fn unmap_all(va: u64, len: u64) {
    for s in SLOTS.iter() {
        if let Some(root) = s.root().filter(|_| s.tid.load(Ordering::Relaxed) != 0) {
            unmap_retrying(root, va, len);
        }
    }
}

/// `ar_unmap`, tried again while the kernel has no memory for it (splitting a mapping
/// allocates): an unmap that gave up would leave the program's pages mapped after `munmap`
/// said they were gone, and the segment alive after its name was deleted (found by the Linux
/// fuzzer under allocation injection: a kernel object more after the program). Bounded: after
/// 1000 refusals it gives up as before.
fn unmap_retrying(root: ObjName, va: u64, len: u64) {
    for _ in 0..1000 {
        match crate::sys::ar_unmap(root, va, len) {
            Err(abi::Error::NoMemory) => continue,
            _ => return,
        }
    }
}

/// Whether `voff` is in one of the program's ranges (image and brk heap below the runtime,
/// mmap window, stack).
fn program_address(voff: u64) -> bool {
    let (runtime_lo, _) = upcall::native_range();
    (super::load::MIN_ADDR..runtime_lo).contains(&voff)
        || (super::vm::LO..super::vm::HI).contains(&voff)
        || (super::load::STACK_TOP - super::load::STACK_SIZE..super::load::STACK_TOP).contains(&voff)
}

/// Copy the program's mappings from the first context's root into `root`.
fn copy_program(threads: &Threads, root: ObjName) -> Result<(), abi::Error> {
    let from = ObjName::new(crate::process::proc_share(), threads.main_root.object);
    let mut buf: Vec<ArMapping> = alloc::vec![ArMapping::default(); 256];
    let n = loop {
        match crate::sys::ar_get(from, &mut buf) {
            Ok(n) => break n as usize,
            Err(abi::Error::BufferTooSmall) if buf.len() < 1 << 16 => buf.resize(buf.len() * 4, ArMapping::default()),
            Err(e) => return Err(e),
        }
    };
    for m in buf[..n].iter().filter(|m| m.target_type == abi::ObjType::Segment as u32 && program_address(m.voff)) {
        let sm = SegMapping { voff: m.voff, seg: ObjName::new(threads.prog_share, m.target), soff: m.soff, len: m.len, flags: m.flags };
        crate::sys::ar_set_seg(root, &sm)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// clone

pub const CLONE_VM: u64 = 0x100;
pub const CLONE_FS: u64 = 0x200;
pub const CLONE_FILES: u64 = 0x400;
pub const CLONE_SIGHAND: u64 = 0x800;
pub const CLONE_PIDFD: u64 = 0x1000;
pub const CLONE_PTRACE: u64 = 0x2000;
pub const CLONE_VFORK: u64 = 0x4000;
pub const CLONE_PARENT: u64 = 0x8000;
pub const CLONE_THREAD: u64 = 0x10000;
pub const CLONE_NEWNS: u64 = 0x20000;
pub const CLONE_SYSVSEM: u64 = 0x40000;
pub const CLONE_SETTLS: u64 = 0x80000;
pub const CLONE_PARENT_SETTID: u64 = 0x100000;
pub const CLONE_CHILD_CLEARTID: u64 = 0x200000;
pub const CLONE_DETACHED: u64 = 0x400000;
pub const CLONE_CHILD_SETTID: u64 = 0x1000000;

/// What a thread `clone` needs, and what it may add.
const THREAD_NEEDS: u64 = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD;
const THREAD_MAY: u64 = THREAD_NEEDS | CLONE_SYSVSEM | CLONE_SETTLS | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID | CLONE_DETACHED | CLONE_CHILD_SETTID | 0xff;

/// `clone(flags, stack, parent_tid, child_tid, tls)`: a new thread. The flag checks Linux
/// makes first (`EINVAL`); a `clone` without `CLONE_VM` is a new process (not here:
/// `ENOSYS`); a thread needs `THREAD_NEEDS`, may add `THREAD_MAY` and must give a stack.
pub fn sys_clone(f: &mut Frame) -> i64 {
    let (flags, stack, ptid, ctid, tls) = (f.rdi, f.rsi, f.rdx, f.r10, f.r8);
    // Linux's own checks (kernel/fork.c, copy_process).
    if flags & (CLONE_NEWNS | CLONE_FS) == (CLONE_NEWNS | CLONE_FS) {
        return -EINVAL;
    }
    if flags & CLONE_THREAD != 0 && flags & CLONE_SIGHAND == 0 {
        return -EINVAL;
    }
    if flags & CLONE_SIGHAND != 0 && flags & CLONE_VM == 0 {
        return -EINVAL;
    }
    if flags & CLONE_VM == 0 {
        return -ENOSYS; // a new process: not built here
    }
    if flags & THREAD_NEEDS != THREAD_NEEDS || flags & !THREAD_MAY != 0 || flags & 0xff != 0 {
        return -EINVAL; // CLONE_VM without a whole thread (vfork-like sharing): not supported
    }
    if stack == 0 {
        return -EINVAL;
    }
    let mut g = lock_proc();
    let Some(p) = g.as_mut() else { return -ENOSYS };
    // Every pointer checked before anything changes.
    if flags & CLONE_PARENT_SETTID != 0 && !p.image.space.ok(ptid, 4, true) {
        return -EFAULT;
    }
    if flags & (CLONE_CHILD_CLEARTID | CLONE_CHILD_SETTID) != 0 && !p.image.space.ok(ctid, 4, true) {
        return -EFAULT;
    }
    p.threads.reap();
    let Some(slot) = (1..MAX_THREADS).find(|&i| SLOTS[i].tid.load(Ordering::Relaxed) == 0) else { return -EAGAIN };
    let r = create(p, f, slot, flags, ctid, tls);
    let tid = match r {
        Ok(tid) => tid,
        Err(e) => return e,
    };
    if flags & CLONE_PARENT_SETTID != 0 {
        p.image.space.put(ptid, &(tid as u32).to_le_bytes());
    }
    if flags & CLONE_CHILD_SETTID != 0 {
        p.image.space.put(ctid, &(tid as u32).to_le_bytes());
    }
    drop(g);
    // The child maps the program and registers its personality itself; wait for it, so that
    // a thread that cannot start is this call's error, not a lost thread.
    let s = &SLOTS[slot];
    super::futex::sleep_until(me(), u64::MAX, || s.started.load(Ordering::Acquire) != 0);
    if s.started.load(Ordering::Acquire) == 1 {
        return tid;
    }
    let mut g = lock_proc();
    if let Some(p) = g.as_mut() {
        if let Some(i) = p.threads.recs.iter().position(|r| r.slot == slot) {
            let r = p.threads.recs.swap_remove(i);
            p.threads.zombies.extend(r.handle);
        }
    }
    s.tid.store(0, Ordering::Release);
    -EAGAIN
}

/// Make the thread record and start its context; returns its tid.
fn create(p: &mut Process, f: &Frame, slot: usize, flags: u64, ctid: u64, tls: u64) -> Result<i64, i64> {
    // The descriptors go to the process-wide table, which every thread's context reaches.
    p.files.to_process_scope().map_err(|e| {
        crate::println!("linux: clone: cannot move the descriptors to the process-wide table: {e:?}");
        -EAGAIN
    })?;
    let t = &mut p.threads;
    if !t.shared_root {
        // Threads name the first context's root through the process share (to copy the
        // program's mappings from it).
        crate::sys::share_addobj(crate::process::proc_share(), t.main_root).map_err(|e| {
            crate::println!("linux: clone: cannot share the first root range: {e:?}");
            -EAGAIN
        })?;
        t.shared_root = true;
        SLOTS[0].root_share.store(crate::process::proc_share(), Ordering::Relaxed);
    }
    let cores = crate::heap::cores().max(1) as u64;
    // A program with sockets keeps every thread on the runtime's core: its sockets are that
    // core's stack's, which no other core can reach (`linux::net`).
    let core = if super::net::is_up() { t.main_core } else { (t.main_core + t.created + 1) % cores };
    if core != t.main_core && t.tc_cores & (1 << (core % 64)) == 0 {
        // Several threads may share this core later: it time-shares from the start. Only the
        // allocator of a pcore object may set its core's role, and only while the core is
        // idle (or by its own context): a pcore object of ours, made for this and deleted.
        make_tc(core).map_err(|e| {
            crate::println!("linux: clone: cannot make core {core} a TC: {e:?}");
            -EAGAIN
        })?;
        t.tc_cores |= 1 << (core % 64);
    }
    if core == t.main_core && !t.made_tc {
        crate::sys::pcore_set_role(crate::ctx::ctx().pcore, abi::ROLE_TC).map_err(|e| {
            crate::println!("linux: clone: cannot make core {core} a TC: {e:?}");
            -EAGAIN
        })?;
        t.made_tc = true;
    }
    // Thread ids come from the process table's pid counter, so no tid is another process's
    // pid (a table-less run counts on from the main thread's).
    let tid = i64::from(super::proc::new_id());
    let s = &SLOTS[slot];
    s.clear();
    let mine = me();
    s.fs_base.store(if flags & CLONE_SETTLS != 0 { tls } else { mine.fs_base.load(Ordering::Relaxed) }, Ordering::Relaxed);
    s.sigmask.store(mine.sigmask.load(Ordering::Relaxed), Ordering::Relaxed);
    if flags & CLONE_CHILD_CLEARTID != 0 {
        s.clear_child_tid.store(ctid, Ordering::Relaxed);
    }
    s.core.store(core, Ordering::Relaxed);
    s.tid.store(tid, Ordering::Release);
    let mut child = *f;
    child.ret = 0;
    child.rsp = f.rsi;
    t.recs.push(Rec { slot, handle: None, start: Some(child) });
    match crate::thread::spawn(core, start, slot as u64).inspect_err(|e| crate::println!("linux: clone: no thread on core {core}: {e:?}")) {
        Ok(h) => {
            if let Some(r) = t.recs.last_mut() {
                r.handle = Some(h);
            }
            t.next_tid += 1;
            t.created += 1;
            Ok(tid)
        }
        Err(_) => {
            t.recs.pop();
            s.tid.store(0, Ordering::Release);
            Err(-EAGAIN)
        }
    }
}

/// A new thread's first code (a library-OS thread of the runtime): map the program, record
/// its root, then run the program's code until the thread ends; returns its status.
fn start(slot: u64) -> u64 {
    let slot = slot as usize;
    upcall::set_my_slot(slot);
    let s = &SLOTS[slot];
    let c = crate::ctx::ctx();
    let frame = {
        let mut g = lock_proc();
        let ready = match g.as_mut() {
            Some(p) => prepare(p, slot, c),
            None => Err("the process is gone"),
        };
        drop(g);
        match ready {
            Ok(f) => f,
            Err(why) => {
                crate::println!("linux: thread {} could not start: {why}", s.tid.load(Ordering::Relaxed));
                s.started.store(2, Ordering::Release);
                kick_all();
                return 1;
            }
        }
    };
    s.started.store(1, Ordering::Release);
    kick_all();
    let status = match upcall::enter_thread(&frame, s.fs_base.load(Ordering::Relaxed)) {
        Ok(status) => status,
        Err(_) => {
            // The kernel refused the personality: the thread ends as if it had exited.
            end_thread(slot);
            1
        }
    };
    // This core's heap grew for the thread's set-up: give it back if nothing of it is live
    // (under the process lock: another thread time-sharing the core may use the heap).
    let g = lock_proc();
    crate::heap::trim();
    drop(g);
    status
}

/// Make idle core `core` a TC.
fn make_tc(core: u64) -> Result<(), abi::Error> {
    let share = crate::process::proc_share();
    let pc = ObjName::new(share, crate::sys::pcore_alloc(share, "linux-tc", core)?);
    let r = crate::sys::pcore_set_role(pc, abi::ROLE_TC);
    let _ = crate::sys::share_delobj(pc);
    r.map(|_| ())
}

/// A new thread's set-up, under the process lock: its registers, the program's memory in its
/// root, its core time-sharing.
fn prepare(p: &mut Process, slot: usize, c: &crate::ctx::Ctx) -> Result<Frame, &'static str> {
    let frame = p.threads.recs.iter_mut().find(|r| r.slot == slot).and_then(|r| r.start.take()).ok_or("no thread record")?;
    copy_program(&p.threads, c.root_ar).map_err(|e| {
        crate::println!("linux: copying the program's mappings: {e:?}");
        "cannot map the program"
    })?;
    super::proc::map_table(c.root_ar).map_err(|e| {
        crate::println!("linux: mapping the process table: {e:?}");
        "cannot map the process table"
    })?;
    super::net::map_in_thread().map_err(|e| {
        crate::println!("linux: mapping the network card's channels: {e:?}");
        "cannot map the network card"
    })?;
    let s = &SLOTS[slot];
    s.root_share.store(c.root_ar.share, Ordering::Relaxed);
    s.root_obj.store(c.root_ar.object, Ordering::Relaxed);
    Ok(frame)
}

// ---------------------------------------------------------------------------------------
// exit, exit_group

/// `exit(status)`: this thread ends (the main thread: the program ends with its status once
/// every other thread has). `clear_child_tid` is cleared and futex-woken.
pub fn sys_exit(f: &mut Frame) -> i64 {
    let status = f.rdi & 0xff;
    let slot = upcall::my_slot();
    end_thread(slot);
    if slot == 0 {
        // The main thread: wait for the others (their exits kick it), then end the program.
        let main = &SLOTS[0];
        super::futex::sleep_until(main, u64::MAX, || lock_proc().as_ref().is_none_or(|p| p.threads.others() == 0));
        let st = group_exit().unwrap_or(status);
        if let Some(p) = lock_proc().as_mut() {
            p.exit = Some(st);
        }
        upcall::leave(st);
    }
    upcall::leave(status)
}

/// `exit_group(status)`: every thread ends; the program's status is `status`.
pub fn sys_exit_group(f: &mut Frame) -> i64 {
    let status = f.rdi & 0xff;
    let _ = GROUP_EXIT.compare_exchange(0, status + 1, Ordering::AcqRel, Ordering::Acquire);
    kick_all();
    if let Some(p) = lock_proc().as_mut() {
        p.exit = group_exit();
    }
    upcall::leave(group_exit().unwrap_or(status))
}

/// The thread in `slot` ends: clear and futex-wake its `clear_child_tid`, take it out of the
/// table (its context is joined later), wake the main thread.
fn end_thread(slot: usize) {
    let s = &SLOTS[slot];
    let ctid = s.clear_child_tid.swap(0, Ordering::Relaxed);
    {
        let mut g = lock_proc();
        if let Some(p) = g.as_mut() {
            if ctid != 0 && p.image.space.put(ctid, &0u32.to_le_bytes()) {
                drop(g);
                super::futex::wake(ctid, 1, u32::MAX);
                g = lock_proc();
            }
            if let Some(p) = g.as_mut() {
                if slot != 0 {
                    if let Some(i) = p.threads.recs.iter().position(|r| r.slot == slot) {
                        let r = p.threads.recs.swap_remove(i);
                        p.threads.zombies.extend(r.handle);
                    }
                    s.tid.store(0, Ordering::Release);
                }
            }
        }
    }
    kick(&SLOTS[0]);
}

// ---------------------------------------------------------------------------------------
// Ids, robust lists, affinity

pub fn sys_gettid(_p: &mut Process, _a: &[u64; 6]) -> i64 {
    me().tid.load(Ordering::Relaxed)
}

pub fn sys_set_tid_address(_p: &mut Process, a: &[u64; 6]) -> i64 {
    let s = me();
    s.clear_child_tid.store(a[0], Ordering::Relaxed);
    s.tid.load(Ordering::Relaxed)
}

/// `struct robust_list_head`'s size.
const ROBUST_HEAD_LEN: u64 = 24;

pub fn sys_set_robust_list(_p: &mut Process, a: &[u64; 6]) -> i64 {
    if a[1] != ROBUST_HEAD_LEN {
        return -EINVAL;
    }
    let s = me();
    s.robust_head.store(a[0], Ordering::Relaxed);
    s.robust_len.store(a[1], Ordering::Relaxed);
    0
}

/// The slot of thread `tid` of this process (0: the caller).
fn find(tid: i64) -> Option<&'static Slot> {
    if tid == 0 {
        return Some(me());
    }
    SLOTS.iter().map(|s| &**s).find(|s| s.tid.load(Ordering::Relaxed) == tid)
}

/// The slot of live thread `tid` of this process (the main thread's tid is the pid).
pub fn find_tid(tid: i64) -> Option<&'static Slot> {
    if tid <= 0 {
        return None;
    }
    SLOTS.iter().map(|s| &**s).find(|s| s.tid.load(Ordering::Acquire) == tid)
}

pub fn sys_get_robust_list(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (pid, head, len) = (a[0] as i32 as i64, a[1], a[2]);
    let Some(s) = find(pid) else { return -ESRCH };
    if !p.image.space.ok(head, 8, true) || !p.image.space.ok(len, 8, true) {
        return -EFAULT;
    }
    p.image.space.put(head, &s.robust_head.load(Ordering::Relaxed).to_le_bytes());
    p.image.space.put(len, &ROBUST_HEAD_LEN.to_le_bytes());
    0
}

pub fn sys_sched_getaffinity(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (pid, len, mask) = (a[0] as i32 as i64, a[1], a[2]);
    let Some(s) = find(pid) else { return -ESRCH };
    if len < 8 || len % 8 != 0 {
        return -EINVAL;
    }
    // A thread runs on its one core.
    let core = s.core.load(Ordering::Relaxed);
    let m = if core < 64 { 1u64 << core } else { 0 };
    if p.image.space.put(mask, &m.to_le_bytes()) { 8 } else { -EFAULT }
}

pub fn sys_sched_setaffinity(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (pid, len, mask) = (a[0] as i32 as i64, a[1], a[2]);
    let Some(s) = find(pid) else { return -ESRCH };
    let n = len.min(128);
    let Some(b) = p.image.space.read(mask, n) else { return -EFAULT };
    let cores = crate::heap::cores() as u64;
    let online = |c: u64| c < cores && (c / 8) < n && b[(c / 8) as usize] & (1 << (c % 8)) != 0;
    if !(0..cores).any(online) {
        return -EINVAL;
    }
    // Threads do not move between cores: a mask that keeps the thread's core is accepted.
    if online(s.core.load(Ordering::Relaxed)) { 0 } else { -EINVAL }
}
