//! How this program was launched: what start-up learnt (`abi::StartInfo`, the launcher's
//! extension block), read by every other module; and how a context halts itself. Written
//! once by `start::rt_start` before `main`; contexts on other cores see these through the
//! read-only image mapping and must not rely on them for their own identity (they get
//! `cores::CoreCtx` or the context page instead).

use abi::{ObjName, ObjectId, StartInfo};
use core::sync::atomic::{AtomicU64, Ordering};

// What the first program learnt at start-up. Written once by `rt_start` before `main`;
// contexts on other cores see these through the read-only image mapping and must not rely
// on them for their own identity (they get `cores::CoreCtx` instead).
pub(crate) static ROOT_SHARE: AtomicU64 = AtomicU64::new(0);
pub(crate) static PCORE: AtomicU64 = AtomicU64::new(0);
pub(crate) static ARGS_PTR: AtomicU64 = AtomicU64::new(0);
pub(crate) static ARGS_LEN: AtomicU64 = AtomicU64::new(0);
pub(crate) static TSC_PER_MS: AtomicU64 = AtomicU64::new(0);
pub(crate) static CORES: AtomicU64 = AtomicU64::new(0);
pub(crate) static ROOT_AR: AtomicU64 = AtomicU64::new(0);
pub(crate) static IMAGE_SEG: AtomicU64 = AtomicU64::new(0);
pub(crate) static STACK_SEG: AtomicU64 = AtomicU64::new(0);

#[cfg(target_os = "none")]
extern "C" {
    static __image_end: u8;
}

/// First address past the program image (from the linker script).
#[cfg(target_os = "none")]
pub fn image_end() -> u64 {
    // Only the address of the linker-defined symbol is taken (safe since Rust 1.82); it is
    // never read.
    core::ptr::addr_of!(__image_end) as u64
}

#[cfg(not(target_os = "none"))]
pub fn image_end() -> u64 {
    crate::layout::IMAGE_BASE
}

/// Extension block a launcher (the shell) puts right after `StartInfo` when it sets
/// `StartInfo::root_share` to 0 (the kernel never does): where the arena goes, the share
/// holding the objects `StartInfo` names, and, for a program run inside the launcher's own
/// context, the stack pointer `exit` returns to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct LaunchExt {
    pub magic: u64,
    pub arena: u64,
    /// Share (in the share set) holding `root_ar`, `image_seg` and `stack_seg`; 0 if they
    /// are in the root share already.
    pub share: ObjectId,
    /// Embedded run: the launcher's saved stack pointer (`exec::embed_call` writes it).
    pub exit_rsp: u64,
    /// Embedded run: the launcher's root share and pcore (the context is the launcher's).
    pub root_share: ObjectId,
    pub pcore: ObjectId,
    /// Embedded run: the launcher's own mappings in the shared root range (what it had
    /// before it mapped the program), as a pointer to `host_nmaps` `abi::ArMapping`s in the
    /// launcher's memory, valid until the program's first context exits. They are not the
    /// program's: `cfork` does not copy them (the program cannot even name most of their
    /// objects, which the launcher keeps in its own process shares).
    pub host_maps: u64,
    pub host_nmaps: u64,
}

pub const LAUNCH_MAGIC: u64 = 0x6c61_756e_6368_3031; // "launch01"

/// Whether the kernel started this program (as init) rather than a launcher.
pub(crate) static BY_KERNEL: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Whether the kernel started this program as init (`init=NAME`): then nothing else runs
/// and every core but ours is free, unless the program started something there. A program
/// the shell runs (`exec::spawn` or `exec::run_here`) shares the machine with the shell.
pub fn started_by_kernel() -> bool {
    BY_KERNEL.load(Ordering::Relaxed)
}

/// Embedded run: where `exit` returns to (0: halt the context as usual).
pub(crate) static EXIT_RSP: AtomicU64 = AtomicU64::new(0);
/// Embedded run: the launcher's mappings (`LaunchExt::host_maps`) and the root range they are
/// in (the launcher's, which our first context runs in).
pub(crate) static HOST_MAPS: AtomicU64 = AtomicU64::new(0);
pub(crate) static HOST_NMAPS: AtomicU64 = AtomicU64::new(0);
pub(crate) static HOST_ROOT_AR: AtomicU64 = AtomicU64::new(0);

/// The mappings of `root_ar` that belong to the launcher whose context this program runs in
/// (empty unless `root_ar` is that shared root range, i.e. unless the caller is the first
/// context of a program the shell runs inside its own context). A thread's root, a cfork
/// child's root or the first root of a program with a context of its own has none.
pub(crate) fn launcher_mappings(root_ar: ObjName) -> &'static [abi::ArMapping] {
    let (ptr, n) = (HOST_MAPS.load(Ordering::Relaxed), HOST_NMAPS.load(Ordering::Relaxed));
    if ptr == 0 || n == 0 || root_ar.object != HOST_ROOT_AR.load(Ordering::Relaxed) || root_ar.share != ROOT_SHARE.load(Ordering::Relaxed) {
        return &[];
    }
    // SAFETY: the launcher passed `n` mappings at `ptr` in its own memory, which is mapped
    // in its root range (the one named `root_ar`, so we run in it now) and stays unchanged
    // while it waits in `embed_call` for our first context to exit. Other contexts have other
    // root ranges and never get here.
    unsafe { core::slice::from_raw_parts(ptr as *const abi::ArMapping, n as usize) }
}

/// The command-line arguments (the words after `--` on the kernel command line), or "".
pub fn args() -> &'static str {
    let ptr = ARGS_PTR.load(Ordering::Relaxed);
    let len = ARGS_LEN.load(Ordering::Relaxed);
    if ptr == 0 || len == 0 || len > abi::PAGE_SIZE {
        return "";
    }
    // SAFETY: the kernel placed `len` argument bytes at `ptr` in the top page of our stack
    // mapping, which stays mapped and is never written by us (it is above `rsp`).
    let bytes = unsafe { core::slice::from_raw_parts(ptr as *const u8, len as usize) };
    core::str::from_utf8(bytes).unwrap_or("")
}

/// The first program's start information (what `_start` received), with the runtime's view.
pub fn start_info() -> StartInfo {
    StartInfo {
        args_ptr: ARGS_PTR.load(Ordering::Relaxed),
        args_len: ARGS_LEN.load(Ordering::Relaxed),
        tsc_per_ms: TSC_PER_MS.load(Ordering::Relaxed),
        cores: CORES.load(Ordering::Relaxed),
        root_ar: ROOT_AR.load(Ordering::Relaxed),
        image_seg: IMAGE_SEG.load(Ordering::Relaxed),
        stack_seg: STACK_SEG.load(Ordering::Relaxed),
        root_share: ROOT_SHARE.load(Ordering::Relaxed),
        pcore: PCORE.load(Ordering::Relaxed),
    }
}

/// The first program's root share (valid on the core the program started on).
pub fn root_share() -> ObjectId {
    ROOT_SHARE.load(Ordering::Relaxed)
}

/// The first program's pcore, named in its root share.
pub fn pcore() -> ObjName {
    ObjName::new(root_share(), PCORE.load(Ordering::Relaxed))
}

/// Halt the calling context with `code`, working out its pcore with system calls only (no
/// runtime state, so it works in any context): `pcore_current()`, named through each share of
/// the share set in turn (the root share, which holds it, comes first).
///
/// The first program's pcore is tried first through its root share (`pcore_current` and
/// `pcore_halt` allocate nothing; `self_shares` does): without that, a program could not end
/// while allocations fail (fault injection, or memory running out), and `exit` would fault
/// instead. The id comes from `pcore_current`, so in any other context this names our own
/// pcore or nothing. `self_shares` is retried while it gets `NoMemory`.
pub fn self_halt(code: u64) -> Result<core::convert::Infallible, abi::Error> {
    let me = crate::sys::pcore_current()?;
    let root = ROOT_SHARE.load(Ordering::Relaxed);
    if root != 0 {
        let _ = crate::sys::pcore_halt(ObjName::new(root, me), code);
    }
    let mut shares = [0u64; 1 + abi::MAX_CONTEXT_SHARES];
    let mut listed = crate::sys::self_shares(&mut shares);
    for _ in 0..1000 {
        if listed != Err(abi::Error::NoMemory) {
            break;
        }
        listed = crate::sys::self_shares(&mut shares);
    }
    let n = listed? as usize;
    let mut last = abi::Error::NoSuchObject;
    for &s in &shares[..n.min(shares.len())] {
        if let Err(e) = crate::sys::pcore_halt(ObjName::new(s, me), code) {
            last = e;
        }
    }
    Err(last)
}

/// End the calling context with exit code `code` by halting its pcore (`self_halt`); if that
/// fails, by a fault (nothing else can stop it). What `exit` does in every context but a
/// program's first one run inside its launcher's context; threads, cfork children and
/// `cores::Core` contexts end here.
pub fn halt(code: u64) -> ! {
    let err = match self_halt(code) {
        Err(e) => e,
        Ok(never) => match never {},
    };
    crate::println!("libos: exit({code}): pcore_halt failed: {err:?}; faulting instead");
    // Nothing else can stop us: an invalid instruction makes the kernel end the context
    // (exit code EXIT_FAULT_BASE + 6).
    #[cfg(target_os = "none")]
    // SAFETY: `ud2` raises #UD; the kernel kills the context and never returns here.
    unsafe {
        core::arch::asm!("ud2", options(noreturn))
    }
    #[cfg(not(target_os = "none"))]
    loop {
        core::hint::spin_loop();
    }
}
