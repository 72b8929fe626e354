//! Loading a static Linux program into the runtime's own address space: its image (checked
//! and planned by `linuxabi::elf`), its stack with Linux's initial block
//! (`linuxabi::initstack`), and the segment its `brk` heap grows in. Everything goes into one
//! share the caller deletes after the program (with the mappings removed first).

use alloc::string::String;
use alloc::vec::Vec;

use abi::{ObjName, ObjectId, SegMapping, MAP_EXEC, MAP_READ, MAP_WRITE, MEMID_SELF, PAGE_SIZE};
use linuxabi::elf::{self, PF_W, PF_X};
use linuxabi::initstack;

use super::mem::{Region, Space};

/// Lowest address a program may use (Linux's default `mmap_min_addr`).
pub const MIN_ADDR: u64 = 0x1_0000;
/// Where a static PIE goes (its image and `brk` must stay below the runtime).
pub const PIE_BASE: u64 = 0x1000_0000;
/// The stack: `[STACK_TOP - STACK_SIZE, STACK_TOP)`, Linux's default 8 MiB.
pub const STACK_TOP: u64 = 0x7E00_0000_0000;
pub const STACK_SIZE: u64 = 8 << 20;
/// The top of the stack that holds argv, envp and auxv (Linux allows a quarter of the
/// stack; we give 128 KiB).
pub const ARG_ROOM: usize = 128 << 10;
/// Largest `brk` heap.
pub const BRK_MAX: u64 = 64 << 20;

/// A loaded program, ready to enter.
pub struct Loaded {
    pub entry: u64,
    pub rsp: u64,
    pub space: Space,
    /// Mappings made in our root range (to remove afterwards).
    pub maps: Vec<(u64, u64)>,
    /// The share holding the program's segments.
    pub share: ObjectId,
    pub brk_seg: ObjName,
    pub brk_limit: u64,
}

fn perms(f: u32) -> u64 {
    MAP_READ | if f & PF_W != 0 { MAP_WRITE } else { 0 } | if f & PF_X != 0 { MAP_EXEC } else { 0 }
}

/// Load `file` (the program's bytes). `limit`: the first address of the runtime's image.
pub fn load(file: &[u8], path: &str, argv: &[&[u8]], envp: &[&[u8]], limit: u64, random: [u8; 16]) -> Result<Loaded, String> {
    let plan = elf::plan(file, PIE_BASE, MIN_ADDR, limit).map_err(|e| alloc::format!("{path}: {e}"))?;
    let root = crate::ctx::ctx().root_ar;
    let share = crate::process::new_share("linux-prog", MEMID_SELF).map_err(|e| alloc::format!("{path}: no share ({e:?})"))?;
    let mut l = Loaded { entry: plan.entry, rsp: 0, space: Space::default(), maps: Vec::new(), share, brk_seg: ObjName::default(), brk_limit: 0 };
    match fill(&mut l, &plan, file, path, argv, envp, limit, random, root) {
        // `fork` copies the program's segments: `cfork` must find them here.
        Ok(()) => match crate::cfork::add_lookup_share(share) {
            Ok(()) => Ok(l),
            Err(e) => {
                let mut l = l;
                unload(&mut l);
                Err(alloc::format!("{path}: no room to register the program's share ({e:?})"))
            }
        },
        Err(e) => {
            let mut l = l;
            unload(&mut l);
            Err(e)
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn fill(l: &mut Loaded, plan: &elf::Plan, file: &[u8], path: &str, argv: &[&[u8]], envp: &[&[u8]], limit: u64, random: [u8; 16], root: ObjName) -> Result<(), String> {
    let err = |what: &str, e: abi::Error| alloc::format!("{path}: {what}: {e:?}");
    let (lo, hi) = (plan.lo, plan.hi);
    let seg = ObjName::new(l.share, crate::sys::segment_alloc(l.share, "linux-image", MEMID_SELF, hi - lo).map_err(|e| err("image segment", e))?);
    // Fill it through a writable mapping at its final place, then map each run as it asks.
    crate::sys::ar_set_seg(root, &SegMapping { voff: lo, seg, soff: 0, len: hi - lo, flags: MAP_READ | MAP_WRITE }).map_err(|e| err("mapping the image", e))?;
    l.maps.push((lo, hi - lo));
    for ld in plan.loads() {
        let dst = l_slice(lo, hi - lo);
        let at = (ld.vaddr - lo) as usize;
        dst[at..at + ld.filesz as usize].copy_from_slice(&file[ld.offset as usize..(ld.offset + ld.filesz) as usize]);
    }
    crate::sys::ar_unmap(root, lo, hi - lo).map_err(|e| err("remapping the image", e))?;
    l.maps.clear();
    let mut runs = [(0u64, 0u64, 0u32); elf::MAX_LOADS];
    let n = plan.mappings(&mut runs);
    for &(s, e, f) in &runs[..n] {
        crate::sys::ar_set_seg(root, &SegMapping { voff: s, seg, soff: s - lo, len: e - s, flags: perms(f) }).map_err(|e| err("mapping a segment", e))?;
        l.maps.push((s, e - s));
        l.space.regions.push(Region { lo: s, hi: e, write: f & PF_W != 0 });
    }
    // The stack.
    let stack = ObjName::new(l.share, crate::sys::segment_alloc(l.share, "linux-stack", MEMID_SELF, STACK_SIZE).map_err(|e| err("stack segment", e))?);
    let slo = STACK_TOP - STACK_SIZE;
    crate::sys::ar_set_seg(root, &SegMapping { voff: slo, seg: stack, soff: 0, len: STACK_SIZE, flags: MAP_READ | MAP_WRITE }).map_err(|e| err("mapping the stack", e))?;
    l.maps.push((slo, STACK_SIZE));
    l.space.regions.push(Region { lo: slo, hi: STACK_TOP, write: true });
    let aux = initstack::AuxInfo { phdr: plan.phdr, phent: elf::PHENT as u64, phnum: plan.phnum as u64, entry: plan.entry, hwcap: hwcap(), random };
    let block = l_slice(STACK_TOP - ARG_ROOM as u64, ARG_ROOM as u64);
    l.rsp = initstack::build(block, STACK_TOP, argv, envp, path.as_bytes(), &aux).map_err(|e| alloc::format!("{path}: {e}"))?;
    // The brk heap: a segment mapped page by page as the break moves (`set_brk`). It starts
    // empty and grows with the break: the kernel keeps a slot per page of a segment's size,
    // which every fork's copy, and every delete, walks (a 64 MiB segment made up front cost a
    // forked child about 250 000 instructions for a heap most programs never touch).
    let brk_limit = (hi + BRK_MAX).min(limit);
    l.brk_seg = ObjName::new(l.share, crate::sys::segment_alloc(l.share, "linux-brk", MEMID_SELF, 0).map_err(|e| err("brk segment", e))?);
    l.brk_limit = brk_limit;
    l.space.brk_lo = hi;
    l.space.mmaps = super::vm::Mmaps::new(l.share);
    l.space.brk = hi;
    Ok(())
}

/// The mapped bytes `[va, va + len)` of the program (just mapped read-write by `fill`).
fn l_slice(va: u64, len: u64) -> &'static mut [u8] {
    super::mem::mapped_slice(va, len)
}

/// `AT_HWCAP`: CPUID leaf 1's EDX, as Linux gives it.
fn hwcap() -> u64 {
    let r = core::arch::x86_64::__cpuid(1);
    u64::from(r.edx)
}

/// Move the break to `new` (page-mapped above it); returns the break (unchanged on failure).
pub fn set_brk(l: &mut Loaded, new: u64) -> u64 {
    let cur = l.space.brk;
    if new < l.space.brk_lo || new > l.brk_limit {
        return cur;
    }
    let (old_top, new_top) = (cur.next_multiple_of(PAGE_SIZE), new.next_multiple_of(PAGE_SIZE));
    // In every thread's root range (`thread::map_all`).
    if new_top > old_top {
        if grow_brk_seg(l, new_top - l.space.brk_lo).is_err() {
            return cur;
        }
        let m = SegMapping { voff: old_top, seg: l.brk_seg, soff: old_top - l.space.brk_lo, len: new_top - old_top, flags: MAP_READ | MAP_WRITE };
        if super::thread::map_all(&m).is_err() {
            return cur;
        }
    } else if new_top < old_top {
        // Linux gives back zeroed pages if the break grows again: clear what is released.
        l_slice(new_top, old_top - new_top).fill(0);
        super::thread::unmap_all(new_top, old_top - new_top);
    }
    l.space.brk = new;
    new
}

/// Make the brk segment at least `need` bytes: to twice its size or `need`, whichever is
/// more (at most the brk limit), so a break that grows a page at a time resizes the segment
/// a logarithmic number of times.
pub fn grow_brk_seg(l: &Loaded, need: u64) -> Result<(), abi::Error> {
    let have = crate::sys::segment_get_nbytes(l.brk_seg)?;
    if have >= need {
        return Ok(());
    }
    let room = l.brk_limit - l.space.brk_lo;
    let want = need.max(have.saturating_mul(2)).max(16 * PAGE_SIZE).min(room);
    crate::sys::segment_set_nbytes(l.brk_seg, want).map(|_| ())
}

/// Remove the program's mappings and objects.
pub fn unload(l: &mut Loaded) {
    let root = crate::ctx::ctx().root_ar;
    l.space.mmaps.release();
    for &(va, len) in &l.maps {
        let _ = crate::sys::ar_unmap(root, va, len);
    }
    let (blo, btop) = (l.space.brk_lo, l.space.brk.next_multiple_of(PAGE_SIZE));
    if btop > blo {
        let _ = crate::sys::ar_unmap(root, blo, btop - blo);
    }
    crate::cfork::remove_lookup_share(l.share);
    crate::process::del_share(l.share);
}
