//! The Linux program's anonymous `mmap`s: a window of its own below its stack, with one
//! demand-zero segment per mapping in the program's share (deleted with it). Records are a
//! sorted vector without a fixed limit (musl's allocator maps many small groups). The
//! kernel changes no mapping in place, so `munmap` and `mprotect` of part of a mapping unmap
//! it whole and map the pieces that stay again from the same segment, as `crate::mman` does.

use alloc::vec::Vec;

use abi::{ObjName, ObjectId, SegMapping, MAP_READ, MAP_WRITE, MEMID_SELF, PAGE_SIZE};
use linuxabi::errno::*;

/// The window: `[LO, HI)`, 48 TiB, clear of the library OS's arena and the runtime's stacks.
pub const LO: u64 = 0x5800_0000_0000;
pub const HI: u64 = 0x7000_0000_0000;

const PROT_READ: u64 = 1;
const PROT_WRITE: u64 = 2;

#[derive(Clone, Copy, Debug)]
struct Vma {
    lo: u64,
    hi: u64,
    seg: ObjectId,
    soff: u64,
    prot: u64,
}

#[derive(Debug, Default)]
pub struct Mmaps {
    v: Vec<Vma>,
    share: ObjectId,
}

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
        Mmaps { v: Vec::new(), share }
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
        let len = len.checked_next_multiple_of(PAGE_SIZE).filter(|&l| l > 0 && l <= HI - LO).ok_or(-ENOMEM)?;
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
        let seg = crate::sys::segment_alloc(self.share, "linux-mmap", MEMID_SELF, len).map_err(|_| -ENOMEM)?;
        let m = Vma { lo: at, hi: at + len, seg, soff: 0, prot };
        if self.map_kernel(&m).is_err() {
            let _ = crate::sys::share_delobj(ObjName::new(self.share, seg));
            return Err(-ENOMEM);
        }
        self.v.insert(idx, m);
        Ok(at)
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
            let piece = |a: u64, b: u64, p: u64| Vma { lo: a, hi: b, seg: m.seg, soff: m.soff + (a - m.lo), prot: p };
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
        for m in out.iter().filter(|p| touched.iter().any(|t| t.seg == p.seg)) {
            if self.map_kernel(m).is_err() {
                return Err(-ENOMEM);
            }
        }
        for t in &touched {
            if !out.iter().any(|p| p.seg == t.seg) && !touched.iter().any(|o| o.seg == t.seg && o.lo < t.lo) {
                let _ = crate::sys::share_delobj(ObjName::new(self.share, t.seg));
            }
        }
        self.v = out;
        Ok(())
    }

    pub fn unmap(&mut self, addr: u64, len: u64) -> Result<(), i64> {
        if addr % PAGE_SIZE != 0 || len == 0 {
            return Err(-EINVAL);
        }
        let end = addr.checked_add(len.next_multiple_of(PAGE_SIZE)).ok_or(-EINVAL)?;
        self.rewrite(addr, end, None)
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

    /// Remove every mapping (the segments go with the program's share).
    pub fn release(&mut self) {
        for m in &self.v {
            Self::unmap_kernel(m);
        }
        self.v.clear();
    }
}
