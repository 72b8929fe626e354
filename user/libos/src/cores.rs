//! Running code on other cores: `Core::prepare` builds a root address range for a core (the
//! program image mapped read-only and executable, a fresh stack), `Core::start` runs a Rust
//! function there with `pcore_run`, `Core::wait` polls `pcore_stat` until the context halts.
//!
//! Objects a `Core` owns live in a share of its own (`Core::share`), which the new context
//! also gets in its share set, so it can name its own root range (`CoreCtx::root_ar`) and map
//! more memory into it. The pcore object is in the parent's root share.
//!
//! The new context sees the program image through a read-only mapping of the same segment:
//! it reads the parent's statics (how `__rt_core_entry` finds its function and argument) but
//! must not write any, so it must not use the heap. Only the first program (on the core it
//! started on) may call `prepare`.

use crate::layout::{CORE_STACK_SIZE, CORE_STACK_TOP};
use abi::{
    ArKind, ArMapping, Error, ObjName, ObjectId, PcoreContext, PcoreStat, SegMapping, MAP_EXEC, MAP_READ, MAP_WRITE,
    MAX_CONTEXT_SHARES, PAGE_SIZE, PCORE_HALTED, PCORE_IDLE, ROLE_XC,
};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What a function run on another core gets.
#[derive(Clone, Copy, Debug)]
pub struct CoreCtx {
    /// The argument given to `Core::start`.
    pub arg: u64,
    /// The context's own (private) root share; it holds the pcore object.
    pub root_share: ObjectId,
    /// The context's pcore, named through `root_share`.
    pub pcore: ObjName,
    /// The `Core`'s share (in the share set): holds `root_ar` and the stack segment.
    pub share: ObjectId,
    /// The context's root address range.
    pub root_ar: ObjName,
    /// The physical core number given to `Core::prepare`.
    pub core: u64,
}

/// Entry function type: the returned value is the exit code.
pub type CoreFn = fn(&CoreCtx) -> u64;

/// Hand-over slots, written by the parent before `pcore_run` and read by the new context
/// through its read-only view of the image.
pub(crate) struct Slot {
    busy: AtomicBool,
    entry: AtomicU64,
    arg: AtomicU64,
    share: AtomicU64,
    ar: AtomicU64,
    core: AtomicU64,
}

const NSLOTS: usize = 64;

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    busy: AtomicBool::new(false),
    entry: AtomicU64::new(0),
    arg: AtomicU64::new(0),
    share: AtomicU64::new(0),
    ar: AtomicU64::new(0),
    core: AtomicU64::new(0),
};
static SLOTS: [Slot; NSLOTS] = [EMPTY; NSLOTS];

/// Rust side of `__rt_core_entry` (start.rs): `rdi` = the slot, `rsi` = the new root share,
/// `rdx` = the pcore id, as `pcore_run` sets them.
pub(crate) extern "C" fn rt_core_start(slot: *const Slot, root_share: u64, pcore: u64) -> ! {
    // SAFETY: the parent passed the address of one of `SLOTS` (in the image, mapped readable
    // here) and filled it before `pcore_run`; we only read it.
    let slot = unsafe { &*slot };
    let entry = slot.entry.load(Ordering::Acquire);
    let ctx = CoreCtx {
        arg: slot.arg.load(Ordering::Relaxed),
        root_share,
        pcore: ObjName::new(root_share, pcore),
        share: slot.share.load(Ordering::Relaxed),
        root_ar: ObjName::new(slot.share.load(Ordering::Relaxed), slot.ar.load(Ordering::Relaxed)),
        core: slot.core.load(Ordering::Relaxed),
    };
    // SAFETY: `entry` was stored from a `CoreFn` by `Core::start` (same image, same address).
    let f: CoreFn = unsafe { core::mem::transmute::<usize, CoreFn>(entry as usize) };
    let code = f(&ctx);
    let _ = crate::sys::pcore_halt(ctx.pcore, code);
    crate::launch::halt(code)
}

#[cfg(target_os = "none")]
extern "C" {
    fn __rt_core_entry();
}

fn entry_address() -> u64 {
    #[cfg(target_os = "none")]
    {
        __rt_core_entry as *const () as usize as u64
    }
    #[cfg(not(target_os = "none"))]
    {
        0
    }
}

/// Options for `Core::prepare`.
#[derive(Clone, Copy, Debug)]
pub struct CoreOpts<'a> {
    /// Stack bytes (page multiple).
    pub stack_bytes: u64,
    /// More shares for the context's share set (at most `MAX_CONTEXT_SHARES - 1`).
    pub shares: &'a [ObjectId],
    /// Where object metadata and pages come from (default: the target core).
    pub memid: Option<u64>,
}

impl Default for CoreOpts<'_> {
    fn default() -> Self {
        Self { stack_bytes: CORE_STACK_SIZE, shares: &[], memid: None }
    }
}

/// A core set up to run a context (and, after `start`, running or halted).
#[derive(Debug)]
pub struct Core {
    pub core: u64,
    /// Share holding `root_ar` and the stack; in the parent's root share and the context's
    /// share set.
    pub share: ObjectId,
    pub pcore: ObjName,
    pub root_ar: ObjName,
    pub stack: ObjName,
    shares: [ObjectId; MAX_CONTEXT_SHARES],
    nshares: usize,
    slot: usize,
    runs_before: u64,
    started: bool,
}

fn take_slot() -> Option<usize> {
    (0..NSLOTS).find(|&i| SLOTS[i].busy.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_ok())
}

/// Map every mapping of the image segment in the first program's root range into `ar`,
/// without write permission.
fn map_image(ar: ObjName) -> Result<(), Error> {
    let root = crate::launch::root_share();
    let si = crate::launch::start_info();
    let mut maps = [ArMapping::default(); 64];
    let n = crate::sys::ar_get(ObjName::new(root, si.root_ar), &mut maps)? as usize;
    let mut found = 0;
    for m in maps[..n.min(maps.len())].iter().filter(|m| m.target == si.image_seg) {
        let flags = (m.flags & !MAP_WRITE) | MAP_READ;
        let sm = SegMapping { voff: m.voff, seg: ObjName::new(root, si.image_seg), soff: m.soff, len: m.len, flags };
        crate::sys::ar_set_seg(ar, &sm)?;
        found += 1;
    }
    if found == 0 {
        // The root range does not list the image (or not as that segment): assume the
        // segment holds the image from its first page, linked at IMAGE_BASE.
        let len = (crate::launch::image_end() - crate::layout::IMAGE_BASE).next_multiple_of(PAGE_SIZE);
        let sm = SegMapping {
            voff: crate::layout::IMAGE_BASE,
            seg: ObjName::new(root, si.image_seg),
            soff: 0,
            len,
            flags: MAP_READ | MAP_EXEC,
        };
        crate::sys::ar_set_seg(ar, &sm)?;
    }
    Ok(())
}

impl Core {
    /// Allocate a pcore for physical core `core`, a root range with the image and a stack.
    pub fn prepare(core: u64, opts: &CoreOpts) -> Result<Core, Error> {
        if opts.shares.len() > MAX_CONTEXT_SHARES - 1 || opts.stack_bytes == 0 || !opts.stack_bytes.is_multiple_of(PAGE_SIZE) {
            return Err(Error::InvalidArgument);
        }
        let root = crate::launch::root_share();
        let memid = opts.memid.unwrap_or(core);
        let slot = take_slot().ok_or(Error::Busy)?;
        let mut c = Core {
            core,
            share: 0,
            pcore: ObjName::default(),
            root_ar: ObjName::default(),
            stack: ObjName::default(),
            shares: [0; MAX_CONTEXT_SHARES],
            nshares: 0,
            slot,
            runs_before: 0,
            started: false,
        };
        // On error `c` is dropped, which deletes what was made so far.
        c.share = crate::sys::share_alloc(root, "core", memid, 0)?;
        c.root_ar = ObjName::new(c.share, crate::sys::ar_alloc(c.share, "core-root", memid, ArKind::Root)?);
        map_image(c.root_ar)?;
        c.stack = ObjName::new(c.share, crate::sys::segment_alloc(c.share, "core-stack", memid, opts.stack_bytes)?);
        let sm = SegMapping {
            voff: CORE_STACK_TOP - opts.stack_bytes,
            seg: c.stack,
            soff: 0,
            len: opts.stack_bytes,
            flags: MAP_READ | MAP_WRITE,
        };
        crate::sys::ar_set_seg(c.root_ar, &sm)?;
        c.pcore = ObjName::new(root, crate::sys::pcore_alloc(root, "core", core)?);
        c.shares[0] = c.share;
        c.shares[1..1 + opts.shares.len()].copy_from_slice(opts.shares);
        c.nshares = 1 + opts.shares.len();
        Ok(c)
    }

    /// The `PcoreContext` that `start` passes (for tests that vary it).
    pub fn context(&self, f: CoreFn, arg: u64) -> PcoreContext {
        let s = &SLOTS[self.slot];
        s.arg.store(arg, Ordering::Relaxed);
        s.share.store(self.share, Ordering::Relaxed);
        s.ar.store(self.root_ar.object, Ordering::Relaxed);
        s.core.store(self.core, Ordering::Relaxed);
        s.entry.store(f as *const () as usize as u64, Ordering::Release);
        PcoreContext {
            rip: entry_address(),
            rsp: CORE_STACK_TOP,
            arg: s as *const Slot as u64,
            root_ar: self.root_ar,
            nshares: self.nshares as u64,
            shares: self.shares,
            role: ROLE_XC,
        }
    }

    /// Run `f(&CoreCtx)` on the core.
    pub fn start(&mut self, f: CoreFn, arg: u64) -> Result<(), Error> {
        self.runs_before = crate::sys::pcore_stat(self.pcore).map(|s| s.runs).unwrap_or(0);
        let ctx = self.context(f, arg);
        crate::sys::pcore_run(self.pcore, &ctx)?;
        self.started = true;
        Ok(())
    }

    /// Whether the context started by `start` has halted.
    pub fn halted(&self) -> Result<Option<PcoreStat>, Error> {
        let st = crate::sys::pcore_stat(self.pcore)?;
        // The target core updates the state when it starts the context (RUNNING, then `runs`
        // + 1) and when it ends it, so until `runs` moves the state is the previous run's.
        let done = st.runs > self.runs_before && (st.state == PCORE_HALTED || st.state == PCORE_IDLE);
        Ok(done.then_some(st))
    }

    /// Poll until the context halts (`Err(Busy)` after `timeout_ms`).
    pub fn wait(&mut self, timeout_ms: u64) -> Result<PcoreStat, Error> {
        let mut result = Err(Error::Busy);
        crate::time::wait_until(timeout_ms, || match self.halted() {
            Ok(Some(st)) => {
                result = Ok(st);
                true
            }
            Ok(None) => false,
            Err(e) => {
                result = Err(e);
                true
            }
        });
        if result.is_ok() {
            self.started = false;
        }
        result
    }

    /// Wait for the context and return its exit code.
    pub fn join(&mut self, timeout_ms: u64) -> Result<u64, Error> {
        self.wait(timeout_ms).map(|st| st.exit_code)
    }
}

impl Drop for Core {
    /// Stop the context if it still runs, then drop every object the `Core` made.
    fn drop(&mut self) {
        if self.started {
            let _ = crate::sys::pcore_halt(self.pcore, abi::EXIT_FAULT_BASE - 1);
            let _ = self.wait(2000);
        }
        if self.pcore.object != 0 {
            let _ = crate::sys::share_delobj(self.pcore);
        }
        if self.stack.object != 0 {
            let _ = crate::sys::share_delobj(self.stack);
        }
        if self.root_ar.object != 0 {
            let _ = crate::sys::share_delobj(self.root_ar);
        }
        if self.share != 0 {
            let _ = crate::sys::share_delobj(ObjName::new(crate::launch::root_share(), self.share));
        }
        SLOTS[self.slot].busy.store(false, Ordering::Release);
    }
}
