//! `cfork` (seeds/000 section 5): start a function on another core in a new pcore whose
//! root address range is a copy-on-write copy of the caller's.
//!
//! The child's root range maps, at the same addresses as the caller's root range:
//!
//! - a `segment_copy(COPY_ON_WRITE)` of every segment mapped there (image, stack, heap
//!   chunks, anything the program mapped itself), except segments listed in
//!   `CforkOpts::segments`, which are mapped as they are (shared memory);
//! - for every address range linked there (the heap ranges, ranges a program linked): the
//!   same range if listed in `CforkOpts::ranges` (shared page tables), otherwise a new range
//!   of the same kind whose segments are copied the same way (recursively);
//! - a fresh context page and a fresh stack; descriptor-layer windows are not copied;
//! - the process-wide descriptor table only if the caller lists the share and segment
//!   `fd::cfork_share_table()` returns in `shares` and `segments` (then both processes use
//!   one table); otherwise the child forgets its copy and starts with an empty one;
//! - nothing of the launcher's, for a program the shell runs inside its own context (the
//!   root range is the shell's then: its image, stack and arena stay out of the child, see
//!   `start::launcher_mappings`).
//!
//! Its share set is a new share `T` (held by the process share; it holds the child's pcore,
//! root range and every copy) plus `CforkOpts::shares`. In the child, `T` plays the process
//! share: the heap state (copied with the image) is rebound to the copied heap ranges, so
//! the child allocates and frees on its own copy of the heap.
//!
//! The function runs with a copy of the caller's memory as it was when `cfork` copied it:
//! it may read anything the caller had (statics, heap blocks, e.g. data passed by pointer in
//! `arg`). Other threads of the caller that run during the copy may leave the child an
//! inconsistent copy of what they change (as with `fork` in a threaded POSIX program).

use crate::layout::{CFORK_STACK_OFF, CFORK_STACK_SLOTS, MAPWIN_OFF, MAPWIN_SLOT, MAPWIN_SLOTS, THREAD_STACK_SIZE};
use abi::{ArKind, ArMapping, Error, ObjName, ObjType, ObjectId, PcoreContext, SegMapping, COPY_ON_WRITE, MAP_READ, MAP_WRITE, MAX_CONTEXT_SHARES, ROLE_XC};
use alloc::boxed::Box;

/// What the caller shares with the child instead of copying.
#[derive(Clone, Copy, Debug, Default)]
pub struct CforkOpts<'a> {
    /// Shares added to the child's share set (at most `MAX_CONTEXT_SHARES - 1`).
    pub shares: &'a [ObjectId],
    /// Segments (by id, as mapped in the caller's root range) to map in the child as they
    /// are instead of copying them.
    pub segments: &'a [ObjectId],
    /// Address ranges (by id) to link in the child as they are instead of copying them.
    pub ranges: &'a [ObjectId],
}

struct CforkStart {
    f: fn(u64) -> u64,
    arg: u64,
    core: u64,
    share: ObjectId,
    root_ar: ObjectId,
    ctx_seg: ObjectId,
    image_voff: u64,
    /// The caller shares its process-wide descriptor table with the child
    /// (`fd::shared_with_child`).
    fds_shared: bool,
}

/// A child made by `cfork`: join it to get its exit code. Dropping it halts it if it still
/// runs and deletes everything it had.
#[derive(Debug)]
pub struct Child {
    pub core: u64,
    /// The child's share (its process share), held by the caller's process share.
    pub share: ObjectId,
    pub pcore: ObjName,
    runs_before: u64,
    joined: bool,
}

impl Child {
    pub fn join_timeout(&mut self, timeout_ms: u64) -> Result<u64, Error> {
        let code = crate::thread::wait_halted(self.pcore, self.runs_before, timeout_ms, None)?;
        self.joined = true;
        Ok(code)
    }

    pub fn join(mut self) -> Result<u64, Error> {
        self.join_timeout(u64::MAX / 4)
    }

    /// Take over a child another process made (handed over through a share both reach,
    /// then held by this process's share): `share` is its share, `pcore` its pcore object.
    /// A cfork'd pcore is fresh (it had not run before its start), so it is waited for as
    /// one the caller made itself.
    pub fn adopt(share: ObjectId, pcore: ObjName) -> Child {
        Child { core: 0, share, pcore, runs_before: 0, joined: false }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if !self.joined && self.pcore.object != 0 {
            let _ = crate::sys::pcore_halt(self.pcore, abi::EXIT_FAULT_BASE - 1);
            let _ = crate::thread::wait_halted(self.pcore, self.runs_before, 2000, None);
        }
        crate::process::del_share(self.share);
    }
}

/// Shares besides the usual ones in which `cfork` looks for the objects it copies: shares a
/// program keeps its own mappings' segments in (the Linux personality's program share),
/// reachable from the process share but not one of `name_of`'s candidates. Per process.
static LOOKUP_SHARES: [core::sync::atomic::AtomicU64; 4] = [const { core::sync::atomic::AtomicU64::new(0) }; 4];

/// Also look for copied segments in `share` (until `remove_lookup_share`). `Busy` when four
/// are registered already.
pub fn add_lookup_share(share: ObjectId) -> Result<(), Error> {
    use core::sync::atomic::Ordering;
    LOOKUP_SHARES.iter().find(|s| s.compare_exchange(0, share, Ordering::AcqRel, Ordering::Relaxed).is_ok()).map(|_| ()).ok_or(Error::Busy)
}

pub fn remove_lookup_share(share: ObjectId) {
    use core::sync::atomic::Ordering;
    for s in &LOOKUP_SHARES {
        let _ = s.compare_exchange(share, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// The shares through which this context may name an object `cfork` copies: the root
/// share, the process share, the heap shares, the share set, the registered lookup shares.
/// Gathered once per `cfork` (the share set is a system call), with the share the last
/// object was found in: a process keeps most of its segments in one or two shares, so
/// trying that one first finds most objects with one `obj_stat` instead of one per share
/// tried before it (about 40 per fork of a Linux program).
struct Names {
    cands: [u64; 64],
    n: usize,
    last: usize,
}

impl Names {
    fn new() -> Names {
        let c = crate::ctx::ctx();
        let mut names = Names { cands: [0; 64], n: 0, last: 0 };
        names.push(c.root_share);
        names.push(c.root_ar.share);
        names.push(crate::process::proc_share());
        for h in 0..crate::heap::cores() {
            names.push(crate::heap::range_of(h).share);
        }
        let mut set = [0u64; 1 + MAX_CONTEXT_SHARES];
        let k = crate::sys::self_shares(&mut set).unwrap_or(0) as usize;
        for &s in &set[..k.min(set.len())] {
            names.push(s);
        }
        for s in &LOOKUP_SHARES {
            names.push(s.load(core::sync::atomic::Ordering::Relaxed));
        }
        names
    }

    fn push(&mut self, s: ObjectId) {
        if s != 0 && self.n < self.cands.len() && !self.cands[..self.n].contains(&s) {
            self.cands[self.n] = s;
            self.n += 1;
        }
    }

    /// A name of object `id` (object ids are kernel-wide: any share holding it names the
    /// same object): the share of the last hit first, then the others in order.
    fn name_of(&mut self, id: ObjectId) -> Result<ObjName, Error> {
        let last = self.last;
        let order = core::iter::once(last).chain((0..self.n).filter(move |&i| i != last));
        for i in order.take(self.n) {
            let s = self.cands[i];
            if crate::sys::obj_stat(ObjName::new(s, id)).is_ok() {
                self.last = i;
                return Ok(ObjName::new(s, id));
            }
        }
        Err(Error::NoSuchObject)
    }
}

fn kind_of_span(len: u64) -> Option<ArKind> {
    [ArKind::Span512G, ArKind::Span1G, ArKind::Span2M].into_iter().find(|k| k.span() == len)
}

/// Copy the mappings of `src` (listed in `maps`) into `dst`, segments copy-on-write.
/// `base` is the virtual address of offset 0 of `src` (to skip the context page and the
/// descriptor windows, which exist only in the root).
fn copy_mappings(names: &mut Names, dst: ObjName, share: ObjectId, maps: &[ArMapping], opts: &CforkOpts, base: u64, depth: u32) -> Result<(), Error> {
    let c = crate::ctx::ctx();
    let arena = crate::ctx::arena();
    // Copies of segments mapped more than once (the image) are made once.
    let mut copied: [(ObjectId, ObjectId); 16] = [(0, 0); 16];
    let mut ncopied = 0;
    for m in maps {
        let va = base + m.voff;
        if m.target_type == ObjType::Segment as u32 {
            if m.target == c.ctx_seg || (va >= arena + MAPWIN_OFF && va < arena + MAPWIN_OFF + MAPWIN_SLOTS * MAPWIN_SLOT) {
                continue;
            }
            let seg = if opts.segments.contains(&m.target) {
                names.name_of(m.target)?
            } else if let Some(&(_, new)) = copied[..ncopied].iter().find(|(old, _)| *old == m.target) {
                ObjName::new(share, new)
            } else {
                // Copy-on-write also for a segment other ranges of this process map as well (a
                // Linux program's threads, each with its root range): a break clears their
                // entries for the page (the kernel's `fault_page`).
                let new = match crate::sys::segment_copy(share, names.name_of(m.target)?, "cfork", COPY_ON_WRITE) {
                    Ok(n) => n,
                    // A segment a device object pinned (a disk's or NIC's request memory)
                    // cannot be copied; the child gets nothing mapped there (the device is
                    // its parent's; `CforkOpts::segments` shares it instead). Before this, any
                    // cfork of a process with a mounted disk failed with `Busy`.
                    Err(Error::Busy) => continue,
                    Err(e) => return Err(e),
                };
                if ncopied < copied.len() {
                    copied[ncopied] = (m.target, new);
                    ncopied += 1;
                }
                ObjName::new(share, new)
            };
            crate::sys::ar_set_seg(dst, &SegMapping { voff: m.voff, seg, soff: m.soff, len: m.len, flags: m.flags })?;
        } else if m.target_type == ObjType::AddressRange as u32 {
            let src = names.name_of(m.target)?;
            if opts.ranges.contains(&m.target) {
                crate::sys::ar_set_ar(dst, m.voff, src)?;
                continue;
            }
            let kind = kind_of_span(m.len).ok_or(Error::Unsupported)?;
            if depth > 3 {
                return Err(Error::Unsupported);
            }
            let new = ObjName::new(share, crate::sys::ar_alloc(share, "cfork", abi::MEMID_SELF, kind)?);
            let mut inner = alloc_maps();
            let k = crate::sys::ar_get(src, &mut inner[..])? as usize;
            copy_mappings(names, new, share, &inner[..k], opts, va, depth + 1)?;
            crate::sys::ar_set_ar(dst, m.voff, new)?;
        }
    }
    Ok(())
}

/// Mapping buffers live on the stack: cfork must not allocate while it copies the heap.
fn alloc_maps() -> [ArMapping; 128] {
    [ArMapping::default(); 128]
}

#[cfg(target_os = "none")]
core::arch::global_asm!(
    ".global __libos_cfork_entry",
    "__libos_cfork_entry:",
    "    xor ebp, ebp",
    "    and rsp, -16",
    "    call {entry}",
    "    ud2",
    entry = sym cfork_start,
);

#[cfg(target_os = "none")]
extern "C" {
    fn __libos_cfork_entry();
}

fn entry_address() -> u64 {
    #[cfg(target_os = "none")]
    {
        __libos_cfork_entry as *const () as usize as u64
    }
    #[cfg(not(target_os = "none"))]
    {
        0
    }
}

extern "C" fn cfork_start(start: *mut CforkStart, root_share: u64, pcore: u64) -> ! {
    // SAFETY: the parent allocated the block on its heap before copying the heap, so our
    // copy of the heap holds it at the same address.
    let s = unsafe { core::ptr::read(start) };
    let root_ar = ObjName::new(s.share, s.root_ar);
    crate::ctx::init(s.core, root_share, ObjName::new(root_share, pcore), root_ar, s.ctx_seg, crate::ctx::KIND_CHILD);
    // The image copy: the segment now mapped where the parent's image starts.
    let mut maps = alloc_maps();
    let n = crate::sys::ar_get(root_ar, &mut maps).unwrap_or(0) as usize;
    let img = maps[..n].iter().find(|m| m.voff == s.image_voff).map(|m| m.target).unwrap_or(0);
    crate::process::set_after_cfork(s.share, ObjName::new(s.share, img));
    crate::fd::after_cfork(s.fds_shared);
    let code = match crate::heap::rebind(s.share, root_ar) {
        Ok(()) => {
            // SAFETY: our copy of the block; freed once (into our copy of the heap).
            drop(unsafe { Box::from_raw(start) });
            (s.f)(s.arg)
        }
        Err(_) => abi::EXIT_FAULT_BASE - 2,
    };
    crate::fd::close_private_at_exit();
    let _ = crate::sys::pcore_halt(ObjName::new(root_share, pcore), code);
    crate::launch::halt(code)
}

/// Start `f(arg)` on core `core` in a copy-on-write copy of this context's address space
/// (see the module comment). Returns the child to join.
pub fn cfork(core: u64, opts: &CforkOpts, f: fn(u64) -> u64, arg: u64) -> Result<Child, Error> {
    if opts.shares.len() > MAX_CONTEXT_SHARES - 1 {
        return Err(Error::InvalidArgument);
    }
    let me = crate::ctx::ctx();
    let share = crate::process::new_share("cfork", core)?;
    let mut child = Child { core, share, pcore: ObjName::default(), runs_before: 0, joined: true };
    let root = ObjName::new(share, crate::sys::ar_alloc(share, "cfork-root", core, ArKind::Root)?);
    let mut maps = alloc_maps();
    let n = crate::sys::ar_get(me.root_ar, &mut maps)? as usize;
    // In a program the shell runs inside its own context, the root range also holds the
    // shell's mappings (its image, stack, arena and heap ranges): not ours to copy, and the
    // shell's heap ranges cannot even be named from here (they are in the shell's heap
    // shares, two levels below its root share), so copying them failed with NoSuchObject.
    let host = crate::launch::launcher_mappings(me.root_ar);
    let mut k = 0;
    for i in 0..n {
        let m = maps[i];
        if !host.iter().any(|h| h.voff == m.voff && h.target == m.target) {
            maps[k] = m;
            k += 1;
        }
    }
    let maps = &maps[..k];
    let img = crate::process::image().object;
    let image_voff = maps.iter().filter(|m| m.target == img).map(|m| m.voff).min().unwrap_or(crate::layout::IMAGE_BASE);
    // A stack slot no mapping of ours covers.
    let arena = crate::ctx::arena();
    let stack_top = (0..CFORK_STACK_SLOTS)
        .map(|k| arena + CFORK_STACK_OFF + (k + 1) * (1 << 30))
        .find(|&top| !maps.iter().any(|m| m.voff < top && top - THREAD_STACK_SIZE < m.voff + m.len))
        .ok_or(Error::Busy)?;
    // Allocate the start block before the heap is copied, so the child's copy has it.
    let start = Box::into_raw(Box::new(CforkStart { f, arg, core, share, root_ar: root.object, ctx_seg: 0, image_voff, fds_shared: crate::fd::shared_with_child(opts.shares, opts.segments) }));
    let r = (|| -> Result<(), Error> {
        let ctx_seg = crate::ctx::map_new(share, root, core)?;
        // SAFETY: `start` is our live block; the child reads its copy, made below.
        unsafe { (*start).ctx_seg = ctx_seg };
        copy_mappings(&mut Names::new(), root, share, maps, opts, 0, 0)?;
        let stack = crate::sys::segment_alloc(share, "cfork-stack", core, THREAD_STACK_SIZE)?;
        let sm = SegMapping { voff: stack_top - THREAD_STACK_SIZE, seg: ObjName::new(share, stack), soff: 0, len: THREAD_STACK_SIZE, flags: MAP_READ | MAP_WRITE };
        crate::sys::ar_set_seg(root, &sm)?;
        child.pcore = ObjName::new(share, crate::sys::pcore_alloc(share, "cfork", core)?);
        Ok(())
    })();
    // SAFETY: the block is ours; the child has its own copy (or never starts).
    drop(unsafe { Box::from_raw(start) });
    r?;
    let mut shares = [0; MAX_CONTEXT_SHARES];
    shares[0] = share;
    shares[1..1 + opts.shares.len()].copy_from_slice(opts.shares);
    let ctx = PcoreContext {
        rip: entry_address(),
        rsp: stack_top,
        arg: start as u64,
        root_ar: root,
        nshares: 1 + opts.shares.len() as u64,
        shares,
        role: ROLE_XC,
    };
    child.runs_before = crate::sys::pcore_stat(child.pcore).map(|s| s.runs).unwrap_or(0);
    crate::sys::pcore_run(child.pcore, &ctx)?;
    child.joined = false;
    Ok(child)
}
