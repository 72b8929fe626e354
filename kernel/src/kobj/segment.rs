//! Segments: physical memory, allocated page by page on first touch (demand-zero) from the
//! NUMA node of the core `memid` named, copied eagerly or copy-on-write.
//!
//! Pages are `KRef<Frame>`: a copy-on-write copy shares the frames, and a write to a frame
//! referenced by more than one segment copies it first. Each segment keeps a reverse map of
//! where it is mapped, so a copy-on-write copy can write-protect the existing mappings.

use alloc::vec::Vec;

use super::kref::{KRef, KWeak};
use super::{try_push, KObject, ObjRef};
use crate::mm::{frame, phys_to_virt, PAGE_SIZE};
use crate::mm::nodevec::NodeVec;
use abi::Error;
use percore::TicketLock;

/// Largest segment: 64 GiB (the page vector itself must fit in kernel memory).
pub const MAX_SEGMENT_BYTES: u64 = 64 << 30;

/// One physical page; freed when the last segment holding it lets go.
pub struct Frame {
    pub pa: u64,
}

impl Drop for Frame {
    fn drop(&mut self) {
        frame::free_page(self.pa);
    }
}

/// A place this segment is mapped: `[voff, voff + len)` of an address range, starting at
/// segment offset `soff`.
pub struct SegMap {
    pub ar: KWeak<KObject>,
    pub ar_key: usize,
    pub voff: u64,
    pub soff: u64,
    pub len: u64,
}

pub struct SegInner {
    nbytes: u64,
    /// From the memory of `memid`'s node, like the pages (`NodeVec`).
    pages: NodeVec<Option<KRef<Frame>>>,
    pub maps: Vec<SegMap>,
    /// Pins held by devices that DMA into the pages (`pin`): while any is held the pinned
    /// frames stay in place (no shrinking below them, no copy-on-write sharing).
    pins: u32,
    /// The most pages any pin covers (from page 0).
    pinned_pages: usize,
}

pub struct Segment {
    pub node_core: u32,
    /// `SegInner::nbytes`, written only under the lock, read without it (`nbytes`): a size
    /// query writes no line (the lock's would be one), and this sits on a line apart from the
    /// lock, so copies and other locked work on the segment do not touch it.
    size: SizeLine,
    pub inner: TicketLock<SegInner>,
}

#[repr(align(64))]
struct SizeLine(core::sync::atomic::AtomicU64);

fn pages_for(nbytes: u64) -> u64 {
    nbytes.div_ceil(PAGE_SIZE)
}

/// A zeroed page from the NUMA node of core `home` (the segment's `memid`).
fn zeroed_page(home: u32) -> Result<KRef<Frame>, Error> {
    let pa = frame::alloc_page_for_core(home as usize).ok_or(Error::NoMemory)?;
    // SAFETY: a page we just allocated, mapped in the physical window.
    unsafe { core::ptr::write_bytes(phys_to_virt(pa) as *mut u8, 0, PAGE_SIZE as usize) };
    KRef::try_new_on_node(Frame { pa }, super::node_of_core(home)).map_err(|f| {
        drop(f);
        Error::NoMemory
    })
}

fn copy_of(src: &Frame, home: u32) -> Result<KRef<Frame>, Error> {
    let pa = frame::alloc_page_for_core(home as usize).ok_or(Error::NoMemory)?;
    // SAFETY: both pages are valid and distinct; the source is kept alive by `src`.
    unsafe {
        core::ptr::copy_nonoverlapping(phys_to_virt(src.pa) as *const u8, phys_to_virt(pa) as *mut u8, PAGE_SIZE as usize)
    };
    KRef::try_new_on_node(Frame { pa }, super::node_of_core(home)).map_err(|f| {
        drop(f);
        Error::NoMemory
    })
}

/// `n` absent pages, the list in the memory of core `home`'s node.
fn page_vec(n: u64, home: u32) -> Result<NodeVec<Option<KRef<Frame>>>, Error> {
    NodeVec::try_from_fn(n as usize, super::node_of_core(home), |_| None).map_err(|_| Error::NoMemory)
}

impl Segment {
    pub fn new(nbytes: u64, node_core: u32) -> Result<Segment, Error> {
        if nbytes > MAX_SEGMENT_BYTES {
            return Err(Error::OutOfRange);
        }
        Ok(Segment { node_core, size: SizeLine(core::sync::atomic::AtomicU64::new(nbytes)), inner: TicketLock::new(SegInner { nbytes, pages: page_vec(pages_for(nbytes), node_core)?, maps: Vec::new(), pins: 0, pinned_pages: 0 }) })
    }

    pub fn nbytes(&self) -> u64 {
        self.size.0.load(core::sync::atomic::Ordering::Acquire)
    }

    pub fn set_nbytes(&self, nbytes: u64) -> Result<(), Error> {
        if nbytes > MAX_SEGMENT_BYTES {
            return Err(Error::OutOfRange);
        }
        let n = pages_for(nbytes) as usize;
        let mut g = self.inner.lock();
        let mapped_end = g.maps.iter().map(|m| m.soff + m.len).max().unwrap_or(0);
        if (n as u64) * PAGE_SIZE < mapped_end || (g.pins > 0 && n < g.pinned_pages) {
            return Err(Error::Busy);
        }
        if n > g.pages.len() {
            let extra = n - g.pages.len();
            g.pages.try_reserve(extra).map_err(|_| Error::NoMemory)?;
            g.pages.resize_with(n, || None);
        } else {
            // Frees the pages past the end in place (no allocation; freeing a frame takes
            // only the page allocator's locks).
            g.pages.truncate(n);
        }
        g.nbytes = nbytes;
        self.size.0.store(nbytes, core::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Split `[offset, offset + len)` into per-page pieces `(page index, offset in page,
    /// bytes, bytes done before)` after checking it lies inside the segment.
    fn pieces(nbytes: u64, offset: u64, len: usize) -> Result<impl Iterator<Item = (usize, usize, usize, usize)>, Error> {
        let end = offset.checked_add(len as u64).ok_or(Error::OutOfRange)?;
        if end > nbytes {
            return Err(Error::OutOfRange);
        }
        let mut done = 0usize;
        Ok(core::iter::from_fn(move || {
            if done >= len {
                return None;
            }
            let pos = offset + done as u64;
            let in_page = (pos % PAGE_SIZE) as usize;
            let n = (PAGE_SIZE as usize - in_page).min(len - done);
            let piece = ((pos / PAGE_SIZE) as usize, in_page, n, done);
            done += n;
            Some(piece)
        }))
    }

    /// Write `data` into the segment at `offset`, allocating pages as needed. For the
    /// kernel's own use (loading programs, start information); bounds are checked.
    pub fn write_bytes(&self, offset: u64, data: &[u8]) -> Result<(), Error> {
        let mut g = self.inner.lock();
        for (idx, in_page, n, done) in Self::pieces(g.nbytes, offset, data.len())? {
            if g.pages[idx].is_none() {
                g.pages[idx] = Some(zeroed_page(self.node_core)?);
            }
            let pa = g.pages[idx].as_ref().map(|f| f.pa).unwrap_or(0);
            // SAFETY: the page belongs to this segment (held under the lock) and the copy stays
            // within it.
            unsafe { core::ptr::copy_nonoverlapping(data[done..].as_ptr(), (phys_to_virt(pa) as *mut u8).add(in_page), n) };
        }
        Ok(())
    }

    /// Read `buf.len()` bytes at `offset` (absent pages read as zero).
    pub fn read_bytes(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let g = self.inner.lock();
        for (idx, in_page, n, done) in Self::pieces(g.nbytes, offset, buf.len())? {
            match &g.pages[idx] {
                // SAFETY: the page belongs to this segment (held under the lock).
                Some(f) => unsafe { core::ptr::copy_nonoverlapping((phys_to_virt(f.pa) as *const u8).add(in_page), buf[done..].as_mut_ptr(), n) },
                None => buf[done..done + n].fill(0),
            }
        }
        Ok(())
    }

    /// The frame for page `idx`, allocated on first touch, copied first if `write` and it is
    /// shared with another segment. Returns (physical address, may be mapped writable,
    /// whether a copy-on-write copy happened).
    pub fn fault_page(&self, idx: u64, write: bool) -> Result<(u64, bool, bool), Error> {
        let mut g = self.inner.lock();
        let slot = g.pages.get_mut(idx as usize).ok_or(Error::OutOfRange)?;
        let mut copied = false;
        match slot {
            None => *slot = Some(zeroed_page(self.node_core)?),
            Some(f) if write && KRef::strong_count(f) > 1 => {
                let fresh = copy_of(f, self.node_core)?;
                *slot = Some(fresh);
                copied = true;
            }
            Some(_) => {}
        }
        let f = slot.as_ref().ok_or(Error::NoMemory)?;
        Ok((f.pa, KRef::strong_count(f) == 1, copied))
    }

    /// Duplicate: `cow == false` copies every present page now; `cow == true` shares them.
    /// Returns the copy and, for copy-on-write, where this segment is mapped (so the caller
    /// can write-protect those mappings outside this segment's lock).
    pub fn duplicate(&self, cow: bool, node_core: u32) -> Result<(Segment, Vec<(KWeak<KObject>, u64, u64)>), Error> {
        let g = self.inner.lock();
        // A pinned page is written by a device behind the page tables' back: sharing it
        // copy-on-write would let that write reach the copy.
        if cow && g.pins > 0 {
            return Err(Error::Busy);
        }
        let mut pages = page_vec(g.pages.len() as u64, node_core)?;
        for (i, p) in g.pages.iter().enumerate() {
            if let Some(f) = p {
                pages[i] = Some(if cow { f.clone() } else { copy_of(f, node_core)? });
            }
        }
        let mut maps = Vec::new();
        if cow {
            maps.try_reserve(g.maps.len()).map_err(|_| Error::NoMemory)?;
            for m in &g.maps {
                maps.push((m.ar.clone(), m.voff, m.len));
            }
        }
        let copy = Segment { node_core, size: SizeLine(core::sync::atomic::AtomicU64::new(g.nbytes)), inner: TicketLock::new(SegInner { nbytes: g.nbytes, pages, maps: Vec::new(), pins: 0, pinned_pages: 0 }) };
        Ok((copy, maps))
    }

    pub fn add_map(&self, m: SegMap) -> Result<(), Error> {
        try_push(&mut self.inner.lock().maps, m)
    }

    /// Forget the mapping of address range `ar_key` at `voff`.
    pub fn remove_map(&self, ar_key: usize, voff: u64) {
        let mut g = self.inner.lock();
        if let Some(i) = g.maps.iter().position(|m| m.ar_key == ar_key && m.voff == voff) {
            let m = g.maps.swap_remove(i);
            drop(g);
            drop(m);
        }
    }

    /// Run `f` on page `idx` seen as 512 atomic words (allocated if absent), under the
    /// segment's lock so the page is neither freed nor replaced meanwhile. For kernel code
    /// that shares memory with user mode through a segment (a syscall ring, which user mode
    /// writes through its own mapping at the same time, hence atomics). `OutOfRange` past the
    /// end; `Busy` if the page is shared copy-on-write with another segment: the kernel never
    /// writes into a page another segment sees.
    pub fn with_shared_page<R>(&self, idx: u64, f: impl FnOnce(&[core::sync::atomic::AtomicU64; 512]) -> R) -> Result<R, Error> {
        let mut g = self.inner.lock();
        let slot = g.pages.get_mut(idx as usize).ok_or(Error::OutOfRange)?;
        if slot.is_none() {
            *slot = Some(zeroed_page(self.node_core)?);
        }
        let f_ref = slot.as_ref().ok_or(Error::NoMemory)?;
        if KRef::strong_count(f_ref) > 1 {
            return Err(Error::Busy);
        }
        // SAFETY: the frame belongs to this segment alone (count 1) and cannot go while we hold
        // the lock; it is a whole 4 KiB page in the physical window, suitably aligned, and
        // every access through the view is atomic (user mode writes it concurrently).
        let words = unsafe { &*(phys_to_virt(f_ref.pa) as *const [core::sync::atomic::AtomicU64; 512]) };
        Ok(f(words))
    }

    /// Pin the first `npages` pages for a device: allocate the absent ones and return each
    /// page's physical address. Until `unpin`, none of those frames is freed or replaced
    /// (shrinking below them and copy-on-write copies are `Busy`), so the device may keep the
    /// addresses. `OutOfRange` if the segment is shorter; `Busy` if a page is shared
    /// copy-on-write with another segment already (a device write would reach it).
    pub fn pin(&self, npages: usize) -> Result<Vec<u64>, Error> {
        let mut g = self.inner.lock();
        if npages > g.pages.len() {
            return Err(Error::OutOfRange);
        }
        let mut pas = Vec::new();
        pas.try_reserve_exact(npages).map_err(|_| Error::NoMemory)?;
        for i in 0..npages {
            if g.pages[i].is_none() {
                g.pages[i] = Some(zeroed_page(self.node_core)?);
            }
            let f = g.pages[i].as_ref().ok_or(Error::NoMemory)?;
            if KRef::strong_count(f) > 1 {
                return Err(Error::Busy);
            }
            pas.push(f.pa);
        }
        g.pins = g.pins.checked_add(1).ok_or(Error::Busy)?;
        g.pinned_pages = g.pinned_pages.max(npages);
        Ok(pas)
    }

    /// Give back a pin taken by `pin`.
    pub fn unpin(&self) {
        let mut g = self.inner.lock();
        g.pins = g.pins.saturating_sub(1);
        if g.pins == 0 {
            g.pinned_pages = 0;
        }
    }

    /// Where the page list is (for the test that it is on `memid`'s node).
    pub fn page_list_addr(&self) -> u64 {
        self.inner.lock().pages.as_ptr() as u64
    }

    pub fn resident_pages(&self) -> usize {
        self.inner.lock().pages.iter().filter(|p| p.is_some()).count()
    }
}

/// Look up the segment behind an object.
pub fn of(obj: &ObjRef) -> Result<&Segment, Error> {
    obj.as_segment()
}
