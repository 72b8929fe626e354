//! Loading programs from the boot image in user space and running them.
//!
//! `initrd_get` gives a copy-on-write segment holding the ELF file. `load` maps it in a
//! scratch window, checks the header (64-bit x86-64 `ET_EXEC`, loadable segments inside
//! `[USER_BASE, INIT_IMAGE_LIMIT)`), copies each `PT_LOAD` into a new image segment and
//! returns where each part goes and with which permissions.
//!
//! - `spawn` runs the program on another core: a fresh root range with the image and a
//!   stack, `StartInfo` and the arguments in the stack's top page (as the kernel does for
//!   init) with `StartInfo::root_share = 0` and a `start::LaunchExt` naming the share that
//!   holds the objects, then `pcore_run`.
//! - `run_here` runs it inside the caller's own context (the caller is the shell, linked at
//!   `layout::SH_IMAGE_BASE` so the program's image fits at `IMAGE_BASE` beside it): the
//!   image goes into the caller's root range, the program's library OS uses the arena at
//!   `layout::ARENA_EMBEDDED`, and its `exit` returns here through `embed_call` instead of
//!   halting the core. Afterwards every mapping and object the program left is removed.
//!   This is how a core that runs the shell can run a program too (one context per core).

use crate::layout::{ARENA_DEFAULT, ARENA_EMBEDDED, EMBEDDED_STACK_TOP, LOADER_SCRATCH, SH_IMAGE_BASE};
use crate::launch::{LaunchExt, LAUNCH_MAGIC};
use abi::{ArKind, ArMapping, Error, ObjName, ObjectId, PcoreContext, SegMapping, StartInfo, INIT_IMAGE_LIMIT, INIT_STACK_SIZE, INIT_STACK_TOP, MAP_EXEC, MAP_READ, MAP_WRITE, PAGE_SIZE, ROLE_XC, USER_BASE};
use alloc::vec::Vec;

/// A loaded image: the segment and where its parts go.
#[derive(Debug)]
pub struct Image {
    pub seg: ObjName,
    /// Virtual address of the segment's first byte.
    pub base: u64,
    pub entry: u64,
    /// `(voff, len, flags)` of each part.
    pub parts: Vec<(u64, u64, u64)>,
}

fn rd<const N: usize>(d: &[u8], o: usize) -> Result<[u8; N], Error> {
    d.get(o..o + N).and_then(|b| b.try_into().ok()).ok_or(Error::InvalidArgument)
}
fn u16_at(d: &[u8], o: usize) -> Result<u16, Error> {
    rd::<2>(d, o).map(u16::from_le_bytes)
}
fn u32_at(d: &[u8], o: usize) -> Result<u32, Error> {
    rd::<4>(d, o).map(u32::from_le_bytes)
}
fn u64_at(d: &[u8], o: usize) -> Result<u64, Error> {
    rd::<8>(d, o).map(u64::from_le_bytes)
}

/// Map `seg` (`len` bytes) at `va` in our root range for the duration of `f`.
fn with_mapped<R>(seg: ObjName, va: u64, len: u64, flags: u64, f: impl FnOnce(&mut [u8]) -> R) -> Result<R, Error> {
    let root = crate::ctx::ctx().root_ar;
    let len = len.next_multiple_of(PAGE_SIZE);
    crate::sys::ar_set_seg(root, &SegMapping { voff: va, seg, soff: 0, len, flags })?;
    // SAFETY: `[va, va + len)` was just mapped (readable; writable if asked) and nothing
    // else uses this scratch window while `f` runs.
    let r = f(unsafe { core::slice::from_raw_parts_mut(va as *mut u8, len as usize) });
    let _ = crate::sys::ar_unmap(root, va, len);
    Ok(r)
}

/// Load program `name` from the boot image into a new segment in `share`.
pub fn load(share: ObjectId, name: &str, memid: u64) -> Result<Image, Error> {
    let file = ObjName::new(share, crate::sys::initrd_get(share, name)?);
    let r = load_from(share, file, memid);
    let _ = crate::sys::share_delobj(file);
    r
}

fn load_from(share: ObjectId, file: ObjName, memid: u64) -> Result<Image, Error> {
    let size = crate::sys::segment_get_nbytes(file)?;
    // Parse the headers and collect the loadable parts.
    let mut loads: Vec<(u64, u64, u64, u64, u64)> = Vec::new(); // vaddr, memsz, offset, filesz, flags
    let entry = with_mapped(file, LOADER_SCRATCH, size, MAP_READ, |d| -> Result<u64, Error> {
        let d = &d[..size as usize];
        if d.get(..4) != Some(b"\x7fELF") || d.get(4) != Some(&2) || u16_at(d, 16)? != 2 || u16_at(d, 18)? != 62 {
            return Err(Error::WrongType);
        }
        let (phoff, phentsize, phnum) = (u64_at(d, 32)? as usize, u16_at(d, 54)? as usize, u16_at(d, 56)? as usize);
        for i in 0..phnum {
            let o = phoff + i * phentsize;
            if u32_at(d, o)? != 1 {
                continue; // not PT_LOAD
            }
            let pf = u32_at(d, o + 4)? as u64;
            let (off, va, filesz, memsz) = (u64_at(d, o + 8)?, u64_at(d, o + 16)?, u64_at(d, o + 32)?, u64_at(d, o + 40)?);
            if filesz > memsz || off.checked_add(filesz).is_none_or(|e| e > size) {
                return Err(Error::OutOfRange);
            }
            let flags = (if pf & 4 != 0 { MAP_READ } else { 0 }) | (if pf & 2 != 0 { MAP_WRITE } else { 0 }) | (if pf & 1 != 0 { MAP_EXEC } else { 0 });
            loads.push((va, memsz, off, filesz, flags));
        }
        u64_at(d, 24)
    })??;
    if loads.is_empty() {
        return Err(Error::WrongType);
    }
    let lo = loads.iter().map(|l| l.0 & !(PAGE_SIZE - 1)).min().unwrap_or(0);
    let hi = loads.iter().map(|l| (l.0 + l.1).next_multiple_of(PAGE_SIZE)).max().unwrap_or(0);
    if lo < USER_BASE || hi > INIT_IMAGE_LIMIT || hi <= lo {
        return Err(Error::OutOfRange);
    }
    let seg = ObjName::new(share, crate::sys::segment_alloc(share, "image", memid, hi - lo)?);
    let copy = (|| -> Result<(), Error> {
        with_mapped(file, LOADER_SCRATCH, size, MAP_READ, |src| {
            with_mapped(seg, LOADER_SCRATCH + (1 << 30), hi - lo, MAP_READ | MAP_WRITE, |dst| {
                for &(va, _, off, filesz, _) in &loads {
                    let d = (va - lo) as usize;
                    dst[d..d + filesz as usize].copy_from_slice(&src[off as usize..(off + filesz) as usize]);
                }
            })
        })??;
        Ok(())
    })();
    if let Err(e) = copy {
        let _ = crate::sys::share_delobj(seg);
        return Err(e);
    }
    let parts = loads
        .iter()
        .map(|&(va, memsz, _, _, flags)| {
            let s = va & !(PAGE_SIZE - 1);
            (s, (va + memsz).next_multiple_of(PAGE_SIZE) - s, flags)
        })
        .collect();
    Ok(Image { seg, base: lo, entry, parts })
}

fn map_image(ar: ObjName, img: &Image) -> Result<(), Error> {
    for &(voff, len, flags) in &img.parts {
        crate::sys::ar_set_seg(ar, &SegMapping { voff, seg: img.seg, soff: voff - img.base, len, flags })?;
    }
    Ok(())
}

/// Write `StartInfo`, a `LaunchExt` and the argument bytes into `page` (the stack's top
/// page, mapped at `page_va`). Returns the offset of the ext block's `exit_rsp` field.
fn write_start(page: &mut [u8], page_va: u64, mut si: StartInfo, ext: LaunchExt, args: &str) -> u64 {
    let si_len = core::mem::size_of::<StartInfo>();
    let ext_len = core::mem::size_of::<LaunchExt>();
    let args = &args.as_bytes()[..args.len().min(PAGE_SIZE as usize - si_len - ext_len)];
    si.args_ptr = page_va + (si_len + ext_len) as u64;
    si.args_len = args.len() as u64;
    // SAFETY: both are repr(C) plain-data structs; we copy their bytes into the page, which
    // is large enough (checked lengths above).
    unsafe {
        core::ptr::copy_nonoverlapping(&si as *const StartInfo as *const u8, page.as_mut_ptr(), si_len);
        core::ptr::copy_nonoverlapping(&ext as *const LaunchExt as *const u8, page.as_mut_ptr().add(si_len), ext_len);
    }
    page[si_len + ext_len..si_len + ext_len + args.len()].copy_from_slice(args);
    (si_len + core::mem::offset_of!(LaunchExt, exit_rsp)) as u64
}

fn base_info() -> StartInfo {
    StartInfo {
        tsc_per_ms: crate::time::tsc_per_ms(),
        cores: crate::sys::sys_info().map(|s| s.cores).unwrap_or(1),
        ..Default::default()
    }
}

/// A program started on another core with `spawn`.
#[derive(Debug)]
pub struct Running {
    pub core: u64,
    /// Share holding everything of the program's (held by our process share).
    pub share: ObjectId,
    pub pcore: ObjName,
    runs_before: u64,
    done: bool,
}

impl Running {
    /// Wait until the program ends; returns its exit code and deletes its objects.
    pub fn wait(&mut self, timeout_ms: u64) -> Result<u64, Error> {
        let code = crate::thread::wait_halted(self.pcore, self.runs_before, timeout_ms, None)?;
        self.done = true;
        Ok(code)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.done && self.pcore.object != 0 {
            let _ = crate::sys::pcore_halt(self.pcore, abi::EXIT_FAULT_BASE - 1);
            let _ = crate::thread::wait_halted(self.pcore, self.runs_before, 2000, None);
        }
        crate::process::del_share(self.share);
    }
}

/// Start program `name` with `args` on core `core` (not the calling core).
pub fn spawn(core: u64, name: &str, args: &str) -> Result<Running, Error> {
    let share = crate::process::new_share("prog", core)?;
    let mut r = Running { core, share, pcore: ObjName::default(), runs_before: 0, done: true };
    let img = load(share, name, core)?;
    let root = ObjName::new(share, crate::sys::ar_alloc(share, "prog-root", core, ArKind::Root)?);
    map_image(root, &img)?;
    let stack = ObjName::new(share, crate::sys::segment_alloc(share, "prog-stack", core, INIT_STACK_SIZE)?);
    crate::sys::ar_set_seg(root, &SegMapping { voff: INIT_STACK_TOP - INIT_STACK_SIZE, seg: stack, soff: 0, len: INIT_STACK_SIZE, flags: MAP_READ | MAP_WRITE })?;
    let si = StartInfo { root_ar: root.object, image_seg: img.seg.object, stack_seg: stack.object, ..base_info() };
    let ext = LaunchExt { magic: LAUNCH_MAGIC, arena: ARENA_DEFAULT, share, ..Default::default() };
    // Fill the stack's top page through a scratch mapping of that page only.
    let root_me = crate::ctx::ctx().root_ar;
    let page_off = INIT_STACK_SIZE - PAGE_SIZE;
    crate::sys::ar_set_seg(root_me, &SegMapping { voff: LOADER_SCRATCH, seg: stack, soff: page_off, len: PAGE_SIZE, flags: MAP_READ | MAP_WRITE })?;
    // SAFETY: the page was just mapped read-write at LOADER_SCRATCH.
    let page = unsafe { core::slice::from_raw_parts_mut(LOADER_SCRATCH as *mut u8, PAGE_SIZE as usize) };
    write_start(page, abi::INIT_START_INFO, si, ext, args);
    let _ = crate::sys::ar_unmap(root_me, LOADER_SCRATCH, PAGE_SIZE);
    r.pcore = ObjName::new(share, crate::sys::pcore_alloc(share, "prog", core)?);
    let mut shares = [0; abi::MAX_CONTEXT_SHARES];
    shares[0] = share;
    let ctx = PcoreContext { rip: img.entry, rsp: abi::INIT_START_INFO, arg: abi::INIT_START_INFO, root_ar: root, nshares: 1, shares, role: ROLE_XC };
    r.runs_before = crate::sys::pcore_stat(r.pcore).map(|s| s.runs).unwrap_or(0);
    crate::sys::pcore_run(r.pcore, &ctx)?;
    r.done = false;
    Ok(r)
}

#[cfg(target_os = "none")]
core::arch::global_asm!(
    // embed_call(info, entry, exit_slot, root_share, pcore) -> exit code
    ".global __libos_embed_call",
    "__libos_embed_call:",
    push_callee_saved!(),
    "    mov [rdx], rsp",
    "    mov rax, rsi",
    "    mov rsp, rdi",
    "    mov rsi, rcx",
    "    mov rdx, r8",
    "    xor ebp, ebp",
    "    jmp rax",
    // embed_return(saved_rsp, code): back into __libos_embed_call's frame.
    ".global __libos_embed_return",
    "__libos_embed_return:",
    return_to_saved_frame!(),
);

#[cfg(target_os = "none")]
extern "C" {
    fn __libos_embed_call(info: u64, entry: u64, exit_slot: *mut u64, root_share: u64, pcore: u64) -> u64;
    fn __libos_embed_return(rsp: u64, code: u64) -> !;
}

/// Jump back into the launcher's `embed_call` frame.
///
/// # Safety
/// `rsp` must be the value `embed_call` saved, and that call must still be live.
#[cfg(target_os = "none")]
pub(crate) unsafe fn embed_return(rsp: u64, code: u64) -> ! {
    // SAFETY: forwarded to the caller.
    unsafe { __libos_embed_return(rsp, code) }
}

/// Run program `name` inside this context (see the module comment); returns its exit code.
#[cfg(target_os = "none")]
pub fn run_here(name: &str, args: &str) -> Result<u64, Error> {
    let c = crate::ctx::ctx();
    let (root, root_ar) = (c.root_share, c.root_ar);
    // What exists before, to remove whatever the program leaves.
    let mut objs_before = alloc::vec![0u64; 4096];
    let n = crate::sys::share_list(root, &mut objs_before)? as usize;
    objs_before.truncate(n);
    let mut maps_before = alloc::vec![ArMapping::default(); 256];
    let m = crate::sys::ar_get(root_ar, &mut maps_before)? as usize;
    maps_before.truncate(m);
    let result = (|| -> Result<u64, Error> {
        let img = load(root, name, abi::MEMID_SELF)?;
        if img.parts.iter().any(|p| p.0 + p.1 > SH_IMAGE_BASE) {
            return Err(Error::Overlap);
        }
        map_image(root_ar, &img)?;
        let stack = ObjName::new(root, crate::sys::segment_alloc(root, "prog-stack", abi::MEMID_SELF, INIT_STACK_SIZE)?);
        crate::sys::ar_set_seg(root_ar, &SegMapping { voff: EMBEDDED_STACK_TOP - INIT_STACK_SIZE, seg: stack, soff: 0, len: INIT_STACK_SIZE, flags: MAP_READ | MAP_WRITE })?;
        let info_va = EMBEDDED_STACK_TOP - PAGE_SIZE;
        let si = StartInfo { root_ar: root_ar.object, image_seg: img.seg.object, stack_seg: stack.object, ..base_info() };
        // Our own mappings: the program must leave them alone (cfork does not copy them).
        let ext = LaunchExt {
            magic: LAUNCH_MAGIC,
            arena: ARENA_EMBEDDED,
            share: 0,
            exit_rsp: 0,
            root_share: root,
            pcore: c.pcore.object,
            host_maps: maps_before.as_ptr() as u64,
            host_nmaps: maps_before.len() as u64,
        };
        // SAFETY: the stack's top page is mapped read-write at `info_va` in our own range.
        let page = unsafe { core::slice::from_raw_parts_mut(info_va as *mut u8, PAGE_SIZE as usize) };
        let slot_off = write_start(page, info_va, si, ext, args);
        // SAFETY: the program's `_start` runs on its own stack in our context and comes back
        // through `embed_return` (its `exit`), which restores our callee-saved registers and
        // stack; `exit_slot` is in the program's start page, read by its start-up.
        Ok(unsafe { __libos_embed_call(info_va, img.entry, (info_va + slot_off) as *mut u64, root, c.pcore.object) })
    })();
    // Remove what the program left: mappings, then objects.
    let mut maps_after = alloc::vec![ArMapping::default(); 256];
    if let Ok(k) = crate::sys::ar_get(root_ar, &mut maps_after) {
        for a in &maps_after[..k as usize] {
            if !maps_before.iter().any(|b| b.voff == a.voff && b.target == a.target) {
                let _ = crate::sys::ar_unmap(root_ar, a.voff, a.len);
            }
        }
    }
    let mut objs_after = alloc::vec![0u64; 4096];
    if let Ok(k) = crate::sys::share_list(root, &mut objs_after) {
        for &o in &objs_after[..k as usize] {
            if objs_before.binary_search(&o).is_err() {
                let _ = crate::sys::share_delobj(ObjName::new(root, o));
            }
        }
    }
    result
}
