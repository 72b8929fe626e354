//! Threads: one thread per pcore, with join, plus a barrier and a mutex.
//!
//! A thread gets a root address range of its own in which the library OS maps
//!
//! - the program image segment with the *same* permissions as the first context (text read
//!   and execute, data and bss read-write): it is the same segment, so threads share every
//!   static (the data pages are the same frames; each root has its own page-table entries);
//! - every core's heap range, linked (shared page tables): a block allocated on any core is
//!   readable on all, and frees from any core work (remote frees go back to the owner);
//! - the first context's stack segment, at its address, and
//! - a private context page at the arena base (who am I).
//!
//! A thread's stack is a block of the spawner's heap. Every stack is thus visible to every
//! thread, which queue locks need: an MCS waiter's node is on its stack, and the releasing
//! thread writes it.
//!
//! Its share set is the process share plus the descriptor tables whose scope includes its
//! core. Memory a thread maps itself into its root range is private to it.
//!
//! `Mutex` is `percore`'s MCS lock and `Barrier` a sense-reversing barrier over `percore`'s
//! cache-padded counters; both work between threads because they live in shared memory (a
//! static or the heap).

use crate::layout::THREAD_STACK_SIZE;
use abi::{ArKind, ArMapping, Error, ObjName, ObjectId, PcoreContext, SegMapping, MAX_CONTEXT_SHARES, PCORE_HALTED, PCORE_IDLE, ROLE_XC};
use alloc::boxed::Box;
use core::sync::atomic::{AtomicU64, Ordering};
use percore::pad::CachePadded;

pub use percore::mcs::{McsGuard as MutexGuard, McsLock as Mutex};

/// What a new thread reads at entry (heap-allocated by the spawner, freed by the thread).
struct ThreadStart {
    f: fn(u64) -> u64,
    arg: u64,
    core: u64,
    root_ar: ObjName,
    ctx_seg: ObjectId,
    /// The `Thread`'s join word (`time::wait_until_woken`): the thread wakes its joiner.
    join_word: *const AtomicU64,
}

/// A running (or finished) thread.
#[derive(Debug)]
pub struct Thread {
    pub core: u64,
    /// Share holding the thread's objects (in the process share).
    pub share: ObjectId,
    pub pcore: ObjName,
    runs_before: u64,
    joined: bool,
    stack: *mut u8,
    /// A halted joiner's core (`time::wait_until_woken`), which the thread wakes as it ends.
    join_word: Box<JoinWord>,
}

// SAFETY: the handle owns its stack block (`stack`, a heap block freed only in `Drop`, after
// the thread has halted) and its join word; nothing in it is tied to the creating thread, so
// another thread of the program may hold, join and drop it (the Linux personality's thread
// table, behind its process lock, does).
unsafe impl Send for Thread {}

/// A thread's join word, on its own cache line.
#[derive(Debug, Default)]
#[repr(align(64))]
struct JoinWord(AtomicU64);

const STACK_LAYOUT: core::alloc::Layout = match core::alloc::Layout::from_size_align(THREAD_STACK_SIZE as usize, 4096) {
    Ok(l) => l,
    Err(_) => panic!("stack layout"),
};

/// Map the image of this program into `ar` with the first context's permissions.
pub(crate) fn map_image_shared(ar: ObjName) -> Result<(), Error> {
    let img = crate::process::image();
    let stack = crate::process::main_stack();
    let me = crate::ctx::ctx();
    let mut maps = [ArMapping::default(); 96];
    let n = crate::sys::ar_get(me.root_ar, &mut maps)? as usize;
    let mut found = 0;
    for m in maps[..n].iter().filter(|m| (m.target == img.object || (stack.object != 0 && m.target == stack.object)) && m.target_type == abi::ObjType::Segment as u32) {
        let seg = if m.target == img.object { img } else { stack };
        let sm = SegMapping { voff: m.voff, seg, soff: m.soff, len: m.len, flags: m.flags };
        crate::sys::ar_set_seg(ar, &sm)?;
        found += 1;
    }
    if found == 0 {
        return Err(Error::NoSuchObject);
    }
    Ok(())
}

/// Link every core's heap range into `ar`.
pub(crate) fn link_heaps(ar: ObjName) -> Result<(), Error> {
    for c in 0..crate::heap::cores() {
        crate::sys::ar_set_ar(ar, crate::heap::window(c), crate::heap::range_of(c))?;
    }
    Ok(())
}

#[cfg(target_os = "none")]
core::arch::global_asm!(
    ".global __libos_thread_entry",
    "__libos_thread_entry:",
    "    xor ebp, ebp",
    "    and rsp, -16",
    "    call {entry}",
    "    ud2",
    entry = sym thread_start,
);

#[cfg(target_os = "none")]
extern "C" {
    fn __libos_thread_entry();
}

pub(crate) fn thread_entry_address() -> u64 {
    #[cfg(target_os = "none")]
    {
        __libos_thread_entry as *const () as usize as u64
    }
    #[cfg(not(target_os = "none"))]
    {
        0
    }
}

extern "C" fn thread_start(start: *mut ThreadStart, root_share: u64, pcore: u64) -> ! {
    // SAFETY: the spawner passed a pointer to a live `ThreadStart` on its heap, readable
    // here through the linked heap ranges; it is not freed until we free it below.
    let s = unsafe { core::ptr::read(start) };
    crate::ctx::init(s.core, root_share, ObjName::new(root_share, pcore), s.root_ar, s.ctx_seg, crate::ctx::KIND_THREAD);
    // SAFETY: the block came from `Box::into_raw` in `spawn` and is freed once, here (a
    // remote free if the spawner is on another core).
    drop(unsafe { Box::from_raw(start) });
    let code = (s.f)(s.arg);
    crate::fd::close_private_at_exit();
    // A joiner halted in `wait_halted` wakes now and polls until the halt below shows.
    // SAFETY: the word is the `Thread`'s, which frees it only after this context halted.
    crate::time::wake_sleeper(unsafe { &*s.join_word });
    let _ = crate::sys::pcore_halt(ObjName::new(root_share, pcore), code);
    crate::launch::halt(code)
}

/// Run `f(arg)` on core `core` as a new thread of this program. `extra_shares` are added to
/// its share set (besides the process share and the descriptor tables scoped to `core`).
pub fn spawn_with(core: u64, f: fn(u64) -> u64, arg: u64, extra_shares: &[ObjectId]) -> Result<Thread, Error> {
    let p = crate::process::proc_share();
    let share = crate::process::new_share("thread", core)?;
    let mut t = Thread { core, share, pcore: ObjName::default(), runs_before: 0, joined: true, stack: core::ptr::null_mut(), join_word: Box::default() };
    let root = ObjName::new(share, crate::sys::ar_alloc(share, "thread-root", core, ArKind::Root)?);
    map_image_shared(root)?;
    link_heaps(root)?;
    let ctx_seg = crate::ctx::map_new(share, root, core)?;
    // SAFETY: a non-zero-sized layout; the block is freed in `Drop` after the thread ended.
    t.stack = unsafe { alloc::alloc::alloc(STACK_LAYOUT) };
    if t.stack.is_null() {
        return Err(Error::NoMemory);
    }
    t.pcore = ObjName::new(share, crate::sys::pcore_alloc(share, "thread", core)?);
    let mut shares = [0; MAX_CONTEXT_SHARES];
    shares[0] = p;
    let mut n = 1;
    for s in crate::fd::shares_for_core(core).iter().chain(extra_shares.iter()).copied().filter(|&s| s != 0) {
        if n == MAX_CONTEXT_SHARES {
            return Err(Error::InvalidArgument);
        }
        if !shares[..n].contains(&s) {
            shares[n] = s;
            n += 1;
        }
    }
    let start = Box::into_raw(Box::new(ThreadStart { f, arg, core, root_ar: root, ctx_seg, join_word: &t.join_word.0 }));
    let ctx = PcoreContext {
        rip: thread_entry_address(),
        rsp: t.stack as u64 + THREAD_STACK_SIZE,
        arg: start as u64,
        root_ar: root,
        nshares: n as u64,
        shares,
        role: ROLE_XC,
    };
    t.runs_before = crate::sys::pcore_stat(t.pcore).map(|s| s.runs).unwrap_or(0);
    if let Err(e) = crate::sys::pcore_run(t.pcore, &ctx) {
        // SAFETY: the thread never started, so the block is still ours.
        drop(unsafe { Box::from_raw(start) });
        return Err(e);
    }
    t.joined = false;
    Ok(t)
}

/// Run `f(arg)` on core `core` as a new thread.
pub fn spawn(core: u64, f: fn(u64) -> u64, arg: u64) -> Result<Thread, Error> {
    spawn_with(core, f, arg, &[])
}

/// Wait (polling `pcore_stat`) until the context started through `pcore` after it had run
/// `runs_before` times has halted; returns its exit code.
pub(crate) fn wait_halted(pcore: ObjName, runs_before: u64, timeout_ms: u64, join_word: Option<&AtomicU64>) -> Result<u64, Error> {
    let mut out = Err(Error::Busy);
    crate::time::wait_until_woken(timeout_ms, join_word, || match crate::sys::pcore_stat(pcore) {
        Ok(st) if st.runs > runs_before && (st.state == PCORE_HALTED || st.state == PCORE_IDLE) => {
            out = Ok(st.exit_code);
            true
        }
        Ok(_) => {
            // On a TC the thread may be queued behind us: let it run (a no-op elsewhere).
            let _ = crate::sys::pcore_yield();
            false
        }
        Err(e) => {
            out = Err(e);
            true
        }
    });
    out
}

impl Thread {
    /// Wait for the thread to end (at most `timeout_ms`) and return its exit code; its
    /// objects are deleted.
    pub fn join_timeout(&mut self, timeout_ms: u64) -> Result<u64, Error> {
        let code = wait_halted(self.pcore, self.runs_before, timeout_ms, Some(&self.join_word.0))?;
        self.joined = true;
        Ok(code)
    }

    pub fn join(mut self) -> Result<u64, Error> {
        self.join_timeout(u64::MAX / 4)
    }
}

impl Drop for Thread {
    fn drop(&mut self) {
        if !self.joined {
            let _ = crate::sys::pcore_halt(self.pcore, abi::EXIT_FAULT_BASE - 1);
            let _ = wait_halted(self.pcore, self.runs_before, 2000, Some(&self.join_word.0));
        }
        crate::process::del_share(self.share);
        if !self.stack.is_null() {
            // SAFETY: allocated in `spawn_with` with this layout; the thread has ended.
            unsafe { alloc::alloc::dealloc(self.stack, STACK_LAYOUT) };
        }
    }
}

/// A sense-reversing barrier for `n` participants. A waiter polls for the first 2 ms
/// (`time::wait_until_woken_set`), so participants that arrive close together, as between a
/// benchmark's measured phases, pass it without a system call; after that its core halts
/// until the last arrival wakes it (`nr::WAKE`), or for at most 1 ms at a time.
pub struct Barrier {
    n: u64,
    count: CachePadded<AtomicU64>,
    generation: CachePadded<AtomicU64>,
    /// The cores of waiters that halt (`time::wake_set`).
    sleepers: CachePadded<AtomicU64>,
}

impl Barrier {
    pub const fn new(n: u64) -> Self {
        Self { n, count: CachePadded::new(AtomicU64::new(0)), generation: CachePadded::new(AtomicU64::new(0)), sleepers: CachePadded::new(AtomicU64::new(0)) }
    }

    /// Wait until `n` callers have arrived. Returns true for exactly one of them.
    pub fn wait(&self) -> bool {
        let gen = self.generation.load(Ordering::Acquire);
        if self.count.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            self.count.store(0, Ordering::Relaxed);
            // SeqCst against the waiters' reads below and `wake_set`'s read of the set.
            self.generation.store(gen + 1, Ordering::SeqCst);
            crate::time::wake_set(&self.sleepers);
            return true;
        }
        crate::time::wait_until_woken_set(u64::MAX / 4, &self.sleepers, || self.generation.load(Ordering::SeqCst) != gen);
        false
    }
}
