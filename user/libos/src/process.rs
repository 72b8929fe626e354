//! Process-wide state of a program: its process share and image, set up by the first
//! context (`init_main`) and shared by its threads through the image's statics.
//!
//! The process share (`proc_share`) is an ordinary (shared) share held by the first
//! context's root share. It holds what every context of the program must be able to name:
//! the image segment, the per-core heap shares, thread and child shares, process-wide
//! descriptor tables. Threads get it in their share set.

use abi::{ObjName, ObjectId, StartInfo, MEMID_SELF};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static PROC_SHARE: AtomicU64 = AtomicU64::new(0);
static IMAGE_SHARE: AtomicU64 = AtomicU64::new(0);
static IMAGE_SEG: AtomicU64 = AtomicU64::new(0);
static STACK_SEG: AtomicU64 = AtomicU64::new(0);
static READY: AtomicBool = AtomicBool::new(false);

pub fn proc_share() -> ObjectId {
    PROC_SHARE.load(Ordering::Relaxed)
}

/// The program image segment, named through the process share.
pub fn image() -> ObjName {
    ObjName::new(IMAGE_SHARE.load(Ordering::Relaxed), IMAGE_SEG.load(Ordering::Relaxed))
}

/// The first context's stack segment, named through the process share (threads map it:
/// locks queue waiters on their stacks, so every stack must be visible to every thread).
pub fn main_stack() -> ObjName {
    ObjName::new(IMAGE_SHARE.load(Ordering::Relaxed), STACK_SEG.load(Ordering::Relaxed))
}

/// Whether the library OS is set up (the heap and context page work).
pub fn ready() -> bool {
    READY.load(Ordering::Acquire)
}

pub(crate) fn set_after_cfork(proc_share: ObjectId, image: ObjName) {
    PROC_SHARE.store(proc_share, Ordering::Relaxed);
    IMAGE_SHARE.store(image.share, Ordering::Relaxed);
    IMAGE_SEG.store(image.object, Ordering::Relaxed);
    STACK_SEG.store(0, Ordering::Relaxed);
}

/// The first context's process state: its context page, the process share holding the
/// image and the first stack. Returns the process share; `start` then makes the heap on it and
/// calls `set_ready`.
pub(crate) fn init_main(si: &StartInfo) -> Result<ObjectId, abi::Error> {
    let root = si.root_share;
    let root_ar = ObjName::new(root, si.root_ar);
    let pcore = ObjName::new(root, si.pcore);
    let core = crate::sys::pcore_stat(pcore)?.core as u64;
    let ctx_seg = crate::ctx::map_new(root, root_ar, MEMID_SELF)?;
    crate::ctx::init(core, root, pcore, root_ar, ctx_seg, crate::ctx::KIND_MAIN);
    percore::cpu::set_cpu_id_provider(crate::ctx::core_id);
    percore::cpu::set_core_count((si.cores as usize).clamp(1, percore::cpu::MAX_CORES));
    let p = crate::sys::share_alloc(root, "proc", MEMID_SELF, 0)?;
    PROC_SHARE.store(p, Ordering::Relaxed);
    crate::sys::share_addobj(p, ObjName::new(root, si.image_seg))?;
    IMAGE_SHARE.store(p, Ordering::Relaxed);
    IMAGE_SEG.store(si.image_seg, Ordering::Relaxed);
    crate::sys::share_addobj(p, ObjName::new(root, si.stack_seg))?;
    STACK_SEG.store(si.stack_seg, Ordering::Relaxed);
    Ok(p)
}

/// The heap is made: the library OS's state is complete (`ready`).
pub(crate) fn set_ready() {
    READY.store(true, Ordering::Release);
}

/// Make a share held by the process share, so every thread can name objects in it. The
/// kernel resolves a share one level deep (the share set, or a share held by one of those):
/// the first context has the process share only inside its root share, not in its share
/// set, so the new share is added to its root share as well.
pub fn new_share(name: &str, memid: u64) -> Result<ObjectId, abi::Error> {
    let p = proc_share();
    let s = crate::sys::share_alloc(p, name, memid, 0)?;
    if let Some(c) = crate::ctx::try_ctx().filter(|c| c.kind == crate::ctx::KIND_MAIN) {
        if let Err(e) = crate::sys::share_addobj(c.root_share, ObjName::new(p, s)) {
            let _ = crate::sys::share_delobj(ObjName::new(p, s));
            return Err(e);
        }
    }
    Ok(s)
}

/// Delete a share made with `new_share` (from the process share and the root share).
pub fn del_share(s: ObjectId) {
    if let Some(c) = crate::ctx::try_ctx().filter(|c| c.kind == crate::ctx::KIND_MAIN) {
        let _ = crate::sys::share_delobj(ObjName::new(c.root_share, s));
    }
    let _ = crate::sys::share_delobj(ObjName::new(proc_share(), s));
}
