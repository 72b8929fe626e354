//! The Linux program's `mmap`s: a window of its own below its stack, with one demand-zero
//! segment per anonymous or private file mapping in the program's share (deleted with it).
//! A private file mapping is its segment filled with the file's bytes at `mmap` (a copy:
//! later writes to the file do not show in it). Shared file mappings of one file (one
//! inode) map one segment, the file's *shared segment* (`FileSeg`), so every shared mapping
//! of it in the program sees every other's writes; `msync`, `munmap` and the program's end
//! write the bytes of its writable shared mappings back to the file (within the file's size,
//! as Linux never extends a file through a mapping), through a descriptor of its own (a
//! `dup` of the one mapped, so closing that one keeps the mapping working). Not coherent with
//! `write`: a write to the file after the mapping was made does not show in it, and a
//! later write-back of the mapping overwrites it. Records are a
//! sorted vector without a fixed limit (musl's allocator maps many small groups). The
//! kernel changes no mapping in place, so `munmap` and `mprotect` of part of a mapping unmap
//! it whole and map the pieces that stay again from the same segment, as `crate::mman` does.

use alloc::vec::Vec;

use abi::{ObjName, ObjectId, SegMapping, MAP_READ, MAP_WRITE, MEMID_SELF, PAGE_SIZE};
use linuxabi::errno::*;

/// The window: `[LO, HI)`, 48 TiB, clear of the library OS's arena and the runtime's stacks.
pub const LO: u64 = 0x5800_0000_0000;
pub const HI: u64 = 0x7000_0000_0000;
/// The end of a Linux process's address space (x86-64 `TASK_SIZE`: the user half less its
/// top page).
pub const TASK_SIZE: u64 = 0x7fff_ffff_f000;

const PROT_READ: u64 = 1;
const PROT_WRITE: u64 = 2;

#[derive(Clone, Copy, Debug)]
struct Vma {
    lo: u64,
    hi: u64,
    seg: ObjectId,
    soff: u64,
    prot: u64,
    /// A shared file mapping: its segment is `FileSeg::seg` of the file with this inode.
    shared: Option<u32>,
}

/// The shared segment of a file mapped `MAP_SHARED`: the file's bytes from offset 0, the
/// descriptor write-backs go through, and the file's inode.
#[derive(Clone, Copy, Debug)]
struct FileSeg {
    ino: u32,
    seg: ObjectId,
    /// Bytes of the segment (a multiple of the page size).
    len: u64,
    fd: crate::fd::Fd,
}

#[derive(Debug, Default)]
pub struct Mmaps {
    v: Vec<Vma>,
    files: Vec<FileSeg>,
    share: ObjectId,
}

/// Reads a file's bytes at an offset into a buffer (0 at its end), for filling a mapping.
pub type ReadAt<'a> = &'a mut dyn FnMut(u64, &mut [u8]) -> Result<usize, i64>;

fn flags(prot: u64) -> u64 {
    if prot & PROT_WRITE != 0 {
        MAP_READ | MAP_WRITE
    } else if prot & PROT_READ != 0 {
        MAP_READ
    } else {
        0
    }
}

impl Mmaps {
    pub fn new(share: ObjectId) -> Mmaps {
        Mmaps { v: Vec::new(), files: Vec::new(), share }
    }

    fn map_kernel(&self, m: &Vma) -> Result<(), abi::Error> {
        if flags(m.prot) == 0 {
            return Ok(());
        }
        // In every thread's root range (`thread::map_all`).
        super::thread::map_all(&SegMapping { voff: m.lo, seg: ObjName::new(self.share, m.seg), soff: m.soff, len: m.hi - m.lo, flags: flags(m.prot) })
    }

    fn unmap_kernel(m: &Vma) {
        if flags(m.prot) != 0 {
            super::thread::unmap_all(m.lo, m.hi - m.lo);
        }
    }

    /// `mmap(NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS)`: zeroed pages, first fit.
    pub fn map(&mut self, len: u64, prot: u64) -> Result<u64, i64> {
        self.map_private(len, prot, None)
    }

    /// A private mapping of `len` bytes, zeroed, or filled from `file` (a private file
    /// mapping: the file's bytes from the offset `file` reads at, zeros past its end).
    pub fn map_private(&mut self, len: u64, prot: u64, file: Option<ReadAt>) -> Result<u64, i64> {
        let len = len.checked_next_multiple_of(PAGE_SIZE).filter(|&l| l > 0 && l <= HI - LO).ok_or(-ENOMEM)?;
        let (at, idx) = self.gap(len)?;
        let seg = crate::sys::segment_alloc(self.share, "linux-mmap", MEMID_SELF, len).map_err(|_| -ENOMEM)?;
        if let Some(read) = file {
            if let Err(e) = self.fill(at, seg, 0, len, read) {
                let _ = crate::sys::share_delobj(ObjName::new(self.share, seg));
                return Err(e);
            }
        }
        let m = Vma { lo: at, hi: at + len, seg, soff: 0, prot, shared: None };
        if self.map_kernel(&m).is_err() {
            let _ = crate::sys::share_delobj(ObjName::new(self.share, seg));
            return Err(-ENOMEM);
        }
        self.v.insert(idx, m);
        Ok(at)
    }

    /// Fill `[soff, soff + len)` of segment `seg` from `read` (at file offset 0 of that range
    /// = `soff` for shared segments; private ones read at the mapping's offset themselves),
    /// mapping it read-write at `at` (a free range of the window) meanwhile.
    fn fill(&self, at: u64, seg: ObjectId, soff: u64, len: u64, read: ReadAt) -> Result<(), i64> {
        let tmp = Vma { lo: at, hi: at + len, seg, soff, prot: PROT_READ | PROT_WRITE, shared: None };
        self.map_kernel(&tmp).map_err(|_| -ENOMEM)?;
        let dst = super::mem::mapped_slice(at, len);
        let mut done = 0usize;
        let r = loop {
            if done == dst.len() {
                break Ok(());
            }
            match read(soff + done as u64, &mut dst[done..]) {
                Ok(0) => break Ok(()),
                Ok(n) => done += n,
                Err(e) => break Err(e),
            }
        };
        Self::unmap_kernel(&tmp);
        r
    }

    /// A `MAP_SHARED` mapping of `len` bytes of the file with inode `ino` from offset `off`
    /// (page-aligned), `read` reading the file and `fd` a descriptor of it the mappings keep
    /// (owned from here: closed when its last mapping goes, or now on an error or if the file
    /// already has a shared segment).
    pub fn map_shared(&mut self, len: u64, prot: u64, ino: u32, off: u64, fd: crate::fd::Fd, read: ReadAt) -> Result<u64, i64> {
        let r = self.map_shared_inner(len, prot, ino, off, fd, read);
        if r.is_err() || self.files.iter().all(|f| f.fd != fd) {
            let _ = crate::fd::close(fd);
        }
        r
    }

    fn map_shared_inner(&mut self, len: u64, prot: u64, ino: u32, off: u64, fd: crate::fd::Fd, read: ReadAt) -> Result<u64, i64> {
        let len = len.checked_next_multiple_of(PAGE_SIZE).filter(|&l| l > 0 && l <= HI - LO).ok_or(-ENOMEM)?;
        let need = off.checked_add(len).filter(|&e| e <= HI - LO).ok_or(-ENOMEM)?;
        let (at, idx) = self.gap(len.max(need))?;
        let fi = match self.files.iter().position(|f| f.ino == ino) {
            Some(i) => {
                let f = self.files[i];
                if need > f.len {
                    // Grow the shared segment and fill the new part from the file.
                    let name = ObjName::new(self.share, f.seg);
                    crate::sys::segment_set_nbytes(name, need).map_err(|_| -ENOMEM)?;
                    if let Err(e) = self.fill(at, f.seg, f.len, need - f.len, read) {
                        let _ = crate::sys::segment_set_nbytes(name, f.len);
                        return Err(e);
                    }
                    self.files[i].len = need;
                }
                i
            }
            None => {
                let seg = crate::sys::segment_alloc(self.share, "linux-mmap-shared", MEMID_SELF, need).map_err(|_| -ENOMEM)?;
                if let Err(e) = self.fill(at, seg, 0, need, read) {
                    let _ = crate::sys::share_delobj(ObjName::new(self.share, seg));
                    return Err(e);
                }
                self.files.push(FileSeg { ino, seg, len: need, fd });
                self.files.len() - 1
            }
        };
        let f = self.files[fi];
        let m = Vma { lo: at, hi: at + len, seg: f.seg, soff: off, prot, shared: Some(ino) };
        if self.map_kernel(&m).is_err() {
            self.drop_unused_files();
            return Err(-ENOMEM);
        }
        self.v.insert(idx, m);
        Ok(at)
    }

    /// Shared segments no mapping uses any more: deleted, their descriptors closed.
    fn drop_unused_files(&mut self) {
        let v = &self.v;
        let share = self.share;
        self.files.retain(|f| {
            let used = v.iter().any(|m| m.shared == Some(f.ino));
            if !used {
                let _ = crate::sys::share_delobj(ObjName::new(share, f.seg));
                let _ = crate::fd::close(f.fd);
            }
            used
        });
    }

    /// Write the bytes of the writable shared mappings in `[lo, hi)` back to their files
    /// (within each file's size). The first error, after trying every piece.
    pub fn write_back(&self, lo: u64, hi: u64) -> Result<(), i64> {
        let mut r = Ok(());
        for m in self.v.iter().filter(|m| m.shared.is_some() && m.prot & PROT_WRITE != 0 && m.lo < hi && m.hi > lo) {
            let Some(f) = self.files.iter().find(|f| Some(f.ino) == m.shared) else { continue };
            let size = crate::fd::fstat(f.fd).map(|s| s.size).unwrap_or(0);
            let (a, b) = (m.lo.max(lo), m.hi.min(hi));
            let off = m.soff + (a - m.lo);
            if off >= size {
                continue;
            }
            let n = (b - a).min(size - off);
            let src = super::mem::mapped_slice(a, n);
            if let Err(e) = crate::fd::write_at(f.fd, off, src) {
                if r.is_ok() {
                    r = Err(if e == abi::Error::NoMemory { -ENOSPC } else { -EIO });
                }
            }
        }
        r
    }

    /// The first free range of `len` bytes: its address and the index its record goes at.
    fn gap(&self, len: u64) -> Result<(u64, usize), i64> {
        let mut at = LO;
        let mut idx = self.v.len();
        for (i, m) in self.v.iter().enumerate() {
            if m.lo - at >= len {
                idx = i;
                break;
            }
            at = m.hi;
        }
        if idx == self.v.len() && HI - at < len {
            return Err(-ENOMEM);
        }
        Ok((at, idx))
    }

    /// Replace `[lo, hi)`: removed (`None`) or given protection `prot`.
    fn rewrite(&mut self, lo: u64, hi: u64, prot: Option<u64>) -> Result<(), i64> {
        let mut out = Vec::with_capacity(self.v.len() + 2);
        let mut touched = Vec::new();
        for m in &self.v {
            if m.hi <= lo || m.lo >= hi {
                out.push(*m);
                continue;
            }
            touched.push(*m);
            let piece = |a: u64, b: u64, p: u64| Vma { lo: a, hi: b, seg: m.seg, soff: m.soff + (a - m.lo), prot: p, shared: m.shared };
            if m.lo < lo {
                out.push(piece(m.lo, lo, m.prot));
            }
            if let Some(p) = prot {
                out.push(piece(m.lo.max(lo), m.hi.min(hi), p));
            }
            if m.hi > hi {
                out.push(piece(hi, m.hi, m.prot));
            }
        }
        for m in &touched {
            Self::unmap_kernel(m);
        }
        // Only the pieces of what was touched: other mappings of the same segment (pieces of
        // one split mapping, shared mappings of one file) stay mapped as they are.
        for m in out.iter().filter(|p| touched.iter().any(|t| t.seg == p.seg && p.lo >= t.lo && p.hi <= t.hi)) {
            if self.map_kernel(m).is_err() {
                return Err(-ENOMEM);
            }
        }
        for t in &touched {
            if t.shared.is_none() && !out.iter().any(|p| p.seg == t.seg) && !touched.iter().any(|o| o.seg == t.seg && o.lo < t.lo) {
                let _ = crate::sys::share_delobj(ObjName::new(self.share, t.seg));
            }
        }
        self.v = out;
        self.drop_unused_files();
        Ok(())
    }

    pub fn unmap(&mut self, addr: u64, len: u64) -> Result<(), i64> {
        // Linux's checks: a range that leaves the user half is EINVAL, whatever is mapped in
        // it (before, a length of 2^49 unmapped every mapping above `addr`; found by the
        // Linux fuzzer, docs/fuzz.md).
        if addr % PAGE_SIZE != 0 || len == 0 || addr > TASK_SIZE || len > TASK_SIZE - addr {
            return Err(-EINVAL);
        }
        let end = addr + len.next_multiple_of(PAGE_SIZE);
        // A shared mapping's bytes reach its file before the pages go (an error there is
        // not `munmap`'s: Linux writes back later and reports nothing to it).
        let _ = self.write_back(addr, end);
        self.rewrite(addr, end, None)
    }

    /// `mremap` of the anonymous or private mapping `[old, old + old_len)` (one whole
    /// mapping) to `new_len` bytes: shrunk in place, or grown by growing its segment, in
    /// place when the window after it is free, else (with `may_move`) moved by mapping the
    /// same segment elsewhere: no bytes are copied. Shared file mappings: `EINVAL`.
    pub fn remap(&mut self, old: u64, old_len: u64, new_len: u64, may_move: bool) -> Result<u64, i64> {
        let old_len = old_len.next_multiple_of(PAGE_SIZE);
        let new_len = new_len.checked_next_multiple_of(PAGE_SIZE).filter(|&l| l > 0 && l <= HI - LO).ok_or(-EINVAL)?;
        let Some(i) = self.v.iter().position(|m| m.lo == old) else { return Err(-EFAULT) };
        let m = self.v[i];
        if new_len <= old_len {
            if !self.covered(old, old + old_len, |_| true) {
                return Err(-EFAULT);
            }
            if new_len < old_len {
                self.rewrite(old + new_len, old + old_len, None)?;
            }
            return Ok(old);
        }
        if m.hi - m.lo != old_len || m.soff != 0 || m.shared.is_some() {
            return Err(if m.shared.is_some() { -EINVAL } else { -EFAULT });
        }
        let name = ObjName::new(self.share, m.seg);
        if crate::sys::segment_get_nbytes(name).map_err(|_| -EFAULT)? != old_len {
            return Err(-EFAULT);
        }
        let free_after = self.v.get(i + 1).map_or(HI, |n| n.lo).saturating_sub(m.hi) >= new_len - old_len && old + new_len <= HI;
        if !free_after && !may_move {
            return Err(-ENOMEM);
        }
        crate::sys::segment_set_nbytes(name, new_len).map_err(|_| -ENOMEM)?;
        let (at, _) = if free_after { (old, i) } else { self.gap(new_len)? };
        Self::unmap_kernel(&m);
        let grown = Vma { lo: at, hi: at + new_len, ..m };
        if self.map_kernel(&grown).is_err() {
            let _ = crate::sys::segment_set_nbytes(name, old_len);
            let _ = self.map_kernel(&m);
            return Err(-ENOMEM);
        }
        self.v.remove(i);
        let idx = self.v.iter().position(|x| x.lo > at).unwrap_or(self.v.len());
        self.v.insert(idx, grown);
        Ok(at)
    }

    /// `madvise(MADV_DONTNEED)` of `[addr, addr + len)`: the writable private pages read as
    /// zeros again (as Linux's anonymous and private file mappings do). Shared mappings keep
    /// their bytes (they are the file's).
    pub fn dont_need(&self, addr: u64, len: u64) {
        let hi = addr.saturating_add(len);
        for m in self.v.iter().filter(|m| m.shared.is_none() && m.prot & PROT_WRITE != 0 && m.lo < hi && m.hi > addr) {
            let (a, b) = (m.lo.max(addr), m.hi.min(hi));
            super::mem::mapped_slice(a, b - a).fill(0);
        }
    }

    /// Whether `[addr, addr + len)` is mapped in this window (any protection).
    pub fn mapped(&self, addr: u64, len: u64) -> bool {
        let Some(end) = addr.checked_add(len) else { return false };
        addr >= LO && end <= HI && self.covered(addr, end, |_| true)
    }

    /// `Ok(false)`: not in this window.
    pub fn protect(&mut self, addr: u64, len: u64, prot: u64) -> Result<bool, i64> {
        let end = addr.checked_add(len.next_multiple_of(PAGE_SIZE)).ok_or(-ENOMEM)?;
        if addr < LO || end > HI {
            return Ok(false);
        }
        if !self.covered(addr, end, |_| true) {
            return Err(-ENOMEM);
        }
        self.rewrite(addr, end, Some(prot & (PROT_READ | PROT_WRITE))).map(|()| true)
    }

    fn covered(&self, lo: u64, hi: u64, ok: impl Fn(&Vma) -> bool) -> bool {
        let mut at = lo;
        for m in &self.v {
            if m.hi <= at {
                continue;
            }
            if m.lo > at || !ok(m) {
                return false;
            }
            at = m.hi;
            if at >= hi {
                return true;
            }
        }
        at >= hi
    }

    /// Whether `[addr, addr + len)` is mapped readable (and writable, with `write`).
    pub fn accessible(&self, addr: u64, len: u64, write: bool) -> bool {
        let Some(end) = addr.checked_add(len) else { return false };
        if addr < LO || end > HI {
            return false;
        }
        self.covered(addr, end, |m| if write { m.prot & PROT_WRITE != 0 } else { m.prot & (PROT_READ | PROT_WRITE) != 0 })
    }

    /// After a fork: the mappings' segments are now the copies `copy_of` names, in `share`.
    /// A mapping that had no copy (mapped with no access, so the fork did not see it) gets a
    /// fresh zeroed segment of its size.
    pub fn rebind(&mut self, share: ObjectId, copy_of: &dyn Fn(ObjectId) -> Option<ObjectId>) -> Result<(), abi::Error> {
        self.share = share;
        for m in &mut self.v {
            m.seg = match copy_of(m.seg) {
                Some(new) => new,
                None => {
                    m.soff = 0;
                    crate::sys::segment_alloc(share, "linux-mmap", MEMID_SELF, m.hi - m.lo)?
                }
            };
        }
        Ok(())
    }

    /// Remove every mapping (the segments go with the program's share), writing shared ones
    /// back to their files first.
    pub fn release(&mut self) {
        let _ = self.write_back(LO, HI);
        for m in &self.v {
            Self::unmap_kernel(m);
        }
        self.v.clear();
        self.drop_unused_files();
    }
}

// ---------------------------------------------------------------------------------------
// The system calls (`mmap` of a file, `msync`, `mremap`, `madvise`)

use super::dispatch::Process;
use super::files;

pub const MAP_SHARED: u64 = 1;
pub const MAP_PRIVATE: u64 = 2;
pub const MAP_SHARED_VALIDATE: u64 = 3;

/// `mmap` of descriptor `fd` at page-aligned offset `off`: `MAP_PRIVATE` (a copy) or
/// `MAP_SHARED` (the file's shared segment). The descriptor must be a regular file of the
/// file system open for reading (and for writing, for a writable shared mapping).
pub fn mmap_file(p: &mut Process, len: u64, prot: u64, kind: u64, fd: i32, off: u64) -> i64 {
    if off % PAGE_SIZE != 0 {
        return -EINVAL;
    }
    let Some(slot) = p.files.slot(fd) else { return -EBADF };
    let ofd = slot.fd;
    let Some(d) = p.files.desc(fd) else { return -EBADF };
    let (acc, is_dir) = (d.flags & files::O_ACCMODE, d.is_dir);
    let ino = match crate::fd::kind(ofd) {
        Ok(crate::fd::Kind::Fs(_)) if !is_dir => match crate::fd::fstat(ofd) {
            Ok(st) => st.ino,
            Err(_) => return -EBADF,
        },
        _ => return -ENODEV,
    };
    if acc == files::O_WRONLY || acc == 3 {
        return -EACCES;
    }
    let shared = kind != MAP_PRIVATE;
    if shared && prot & PROT_WRITE != 0 && acc != files::O_RDWR {
        return -EACCES;
    }
    let mut read = |at: u64, buf: &mut [u8]| crate::fd::read_at(ofd, at, buf).map_err(|_| -EIO);
    let prot = prot & (PROT_READ | PROT_WRITE);
    let r = if shared {
        // Its own descriptor of the file: the mapping outlives a close of `fd`.
        let own = match crate::fd::dup(ofd, p.files.scope()) {
            Ok(x) => x,
            Err(_) => return -ENFILE,
        };
        p.image.space.mmaps.map_shared(len, prot, ino, off, own, &mut read)
    } else {
        let mut at_off = |at: u64, buf: &mut [u8]| read(off + at, buf);
        p.image.space.mmaps.map_private(len, prot, Some(&mut at_off))
    };
    r.map_or_else(|e| e, |v| v as i64)
}

const MS_ASYNC: u64 = 1;
const MS_INVALIDATE: u64 = 2;
const MS_SYNC: u64 = 4;

pub fn sys_msync(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (addr, len, flags) = (a[0], a[1], a[2]);
    if addr % PAGE_SIZE != 0 || flags & !(MS_ASYNC | MS_INVALIDATE | MS_SYNC) != 0 || flags & (MS_ASYNC | MS_SYNC) == MS_ASYNC | MS_SYNC {
        return -EINVAL;
    }
    let Some(end) = addr.checked_add(len.next_multiple_of(PAGE_SIZE)) else { return -ENOMEM };
    if len == 0 {
        return 0;
    }
    if !p.image.space.mmaps.mapped(addr, end - addr) {
        return -ENOMEM;
    }
    match p.image.space.mmaps.write_back(addr, end) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

const MREMAP_MAYMOVE: u64 = 1;
const MREMAP_FIXED: u64 = 2;
const MREMAP_DONTUNMAP: u64 = 4;

pub fn sys_mremap(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (old, old_len, new_len, flags) = (a[0], a[1], a[2], a[3]);
    if old % PAGE_SIZE != 0 || flags & !(MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP) != 0 || new_len == 0 {
        return -EINVAL;
    }
    if flags & (MREMAP_FIXED | MREMAP_DONTUNMAP) != 0 {
        // A fixed target or keeping the old range: not built (the window chooses addresses).
        return if flags & MREMAP_MAYMOVE == 0 { -EINVAL } else { -ENOMEM };
    }
    if old_len == 0 {
        // Duplicating a shared mapping: not built.
        return -EINVAL;
    }
    match p.image.space.mmaps.remap(old, old_len, new_len, flags & MREMAP_MAYMOVE != 0) {
        Ok(v) => v as i64,
        Err(e) => e,
    }
}

/// The advice values Linux accepts (`include/uapi/asm-generic/mman-common.h`).
const ADVICE: &[u64] = &[0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 100, 101];
const MADV_DONTNEED: u64 = 4;

pub fn sys_madvise(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (addr, len, advice) = (a[0], a[1], a[2]);
    if addr % PAGE_SIZE != 0 || !ADVICE.contains(&advice) {
        return -EINVAL;
    }
    let Some(end) = addr.checked_add(len.next_multiple_of(PAGE_SIZE)) else { return -EINVAL };
    if len == 0 {
        return 0;
    }
    let span = end - addr;
    let ours = p.image.space.mmaps.mapped(addr, span);
    if !ours && !p.image.space.ok(addr, span, false) {
        return -ENOMEM;
    }
    if advice == MADV_DONTNEED && ours {
        p.image.space.mmaps.dont_need(addr, span);
    }
    // Every other advice is a hint this system takes without effect.
    0
}
