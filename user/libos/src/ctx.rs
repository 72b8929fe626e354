//! The context page: per-context ("thread-local") state at the start of the arena.
//!
//! Every context the library OS runs (the first program, each thread, each cfork child) has
//! its own root address range, and each root maps a private one-page segment at
//! `arena()` + 0. Code reads "who am I" from there with a plain load and no system call:
//! the core index (`percore`'s cpu-id provider, the heap's owner check), the root share, the
//! pcore and the root range. Threads share the image (statics) but not this page, which is
//! how they tell themselves apart.

use abi::{ObjName, ObjectId};
use core::sync::atomic::{AtomicU64, Ordering};

/// Base of this program's arena (see `layout`). Process-wide (a static).
static ARENA: AtomicU64 = AtomicU64::new(crate::layout::ARENA_DEFAULT);

pub fn arena() -> u64 {
    ARENA.load(Ordering::Relaxed)
}

pub(crate) fn set_arena(a: u64) {
    ARENA.store(a, Ordering::Relaxed);
}

const MAGIC: u64 = 0x6c69_626f_735f_6378; // "libos_cx"

/// Slots of the descriptor layer's mapping cache.
pub const MAP_SLOTS: usize = 64;

#[repr(C)]
pub struct Ctx {
    pub magic: u64,
    /// Physical core index this context runs on.
    pub core: u64,
    pub root_share: ObjectId,
    pub pcore: ObjName,
    pub root_ar: ObjName,
    /// This page's segment (cfork does not copy it).
    pub ctx_seg: ObjectId,
    /// `KIND_MAIN`, `KIND_THREAD` or `KIND_CHILD`.
    pub kind: u64,
    /// The share holding the kernel objects of this context's private open files (a
    /// `SHARE_PRIVATE` share in `root_share`; 0 until first used). The private descriptor
    /// table itself is user memory after this page (`fd::PrivateTable`).
    pub private_fds: ObjectId,
    /// Descriptor layer: segment id mapped in window slot i (0 = free).
    pub mapped: [ObjectId; MAP_SLOTS],
}

/// Pages after the context page for the private descriptor table (`fd::PrivateTable`, at
/// `arena() + PAGE_SIZE`; `fd` checks at compile time that it fits).
pub const FD_TABLE_PAGES: u64 = 8;

/// Bytes of a context's segment: the context page, then the private descriptor table. The
/// segment is demand-zero, so the table's pages cost nothing until the context first opens
/// a private descriptor.
pub const CTX_BYTES: u64 = abi::PAGE_SIZE * (1 + FD_TABLE_PAGES);

const _: () = assert!(core::mem::size_of::<Ctx>() as u64 <= abi::PAGE_SIZE);

/// The context page, if this context has one (contexts started with `cores::Core` do not).
pub fn try_ctx() -> Option<&'static mut Ctx> {
    let p = arena() as *mut Ctx;
    // SAFETY: reading the first word of the arena: every library-OS context maps its
    // context page there before anything calls this; a `cores::Core` context does not, and
    // must not call this (documented), since the load would fault.
    let c = unsafe { &mut *p };
    (c.magic == MAGIC).then_some(c)
}

/// The context page (panics in a context without one).
pub fn ctx() -> &'static mut Ctx {
    match try_ctx() {
        Some(c) => c,
        None => panic!("libos: no context page"),
    }
}

/// Fill this context's page (mapped writable at `arena()` by whoever set up the context).
pub const KIND_MAIN: u64 = 0;
pub const KIND_THREAD: u64 = 1;
pub const KIND_CHILD: u64 = 2;

pub(crate) fn init(core: u64, root_share: ObjectId, pcore: ObjName, root_ar: ObjName, ctx_seg: ObjectId, kind: u64) {
    let p = arena() as *mut Ctx;
    // SAFETY: the page is mapped read-write at the arena base and belongs to this context
    // alone; nothing else holds a reference to it yet.
    unsafe {
        core::ptr::write_bytes(p as *mut u8, 0, core::mem::size_of::<Ctx>());
        (*p).core = core;
        (*p).root_share = root_share;
        (*p).pcore = pcore;
        (*p).root_ar = root_ar;
        (*p).ctx_seg = ctx_seg;
        (*p).kind = kind;
        (*p).magic = MAGIC;
    }
}

/// The calling context's core index (the `percore` cpu-id provider).
pub fn core_id() -> usize {
    ctx().core as usize
}

/// Map a fresh context segment (`CTX_BYTES`: the context page and the private descriptor
/// table) at `arena()` into `root_ar`, its segment in `share`.
pub(crate) fn map_new(share: ObjectId, root_ar: ObjName, memid: u64) -> Result<ObjectId, abi::Error> {
    let seg = crate::sys::segment_alloc(share, "ctx", memid, CTX_BYTES)?;
    let m = abi::SegMapping { voff: arena(), seg: ObjName::new(share, seg), soff: 0, len: CTX_BYTES, flags: abi::MAP_READ | abi::MAP_WRITE };
    if let Err(e) = crate::sys::ar_set_seg(root_ar, &m) {
        let _ = crate::sys::share_delobj(ObjName::new(share, seg));
        return Err(e);
    }
    Ok(seg)
}
