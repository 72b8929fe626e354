//! The disk under the file system: the block device object (`abi::blk`) and, in front of it,
//! the buffer cache. This module holds the file system's only `unsafe`: the request segment
//! is read and written through its mapping at `BLK_VA`.
//!
//! **First version, per process.** The cache is an ordinary heap structure of the process that
//! mounted the disk, under the file system's one lock (`fs::FS`): it is *not yet* the issue's
//! design (pages in segments mapped through shared address ranges so cores and cfork'd
//! processes see one cache, lock-free lookups, per-core block reserves, sloppy reference
//! counts). Two processes must not mount the same disk: the kernel enforces it (one block
//! device object per disk; the second `device_alloc` is `Busy`).

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::vec;

use abi::{DeviceBuf, DeviceInfo, Error, ObjName, ObjectId, SegMapping, BLK_MAX_REQUEST, BLK_SECTOR, BUF_BLK_FLUSH, BUF_BLK_READ, BUF_BLK_WRITE, DEVICE_BLOCK, MAP_READ, MAP_WRITE, MEMID_SELF};

use super::ext2::{Disk, FsError};

/// Where a context maps the request segment (each core in its own root range, on first use).
pub const BLK_VA: u64 = 0x3900_0000_0000;
/// Bytes of the request segment: the largest request.
pub const REQ_BYTES: u64 = BLK_MAX_REQUEST;
/// Bytes of one cache page.
pub const PAGE: u64 = 4096;
/// Cache pages kept at most (16 MiB).
pub const CACHE_PAGES: usize = 4096;

/// The first disk `device_list` shows.
pub fn find_disk() -> Result<DeviceInfo, Error> {
    let mut l = [DeviceInfo::default(); 16];
    let n = crate::sys::device_list(&mut l)? as usize;
    l[..n].iter().find(|d| d.kind == DEVICE_BLOCK).copied().ok_or(Error::NotFound)
}

/// A block device object and its request segment, in the process share.
pub struct BlockDevice {
    pub dev: ObjName,
    seg: ObjName,
    /// Sectors on the disk.
    pub capacity: u64,
    /// For each core, the root range (object id) in which this core mapped the request
    /// segment, or 0. A context that ends takes its root range and the mapping with it, so a
    /// later context on the same core (another thread) is told apart by its root range.
    mapped: [u64; 64],
}

impl BlockDevice {
    /// Make a block device object over the first disk, with its request segment.
    pub fn open(share: ObjectId) -> Result<BlockDevice, Error> {
        let disk = find_disk()?;
        let seg = ObjName::new(share, crate::sys::segment_alloc(share, "blk-requests", MEMID_SELF, REQ_BYTES)?);
        // SAFETY: no pointers: the kernel checks every argument.
        let dev = match unsafe { crate::sys::call(abi::nr::DEVICE_ALLOC, share, disk.hwid, MEMID_SELF, seg.share, seg.object, 0) } {
            Ok(d) => ObjName::new(share, d),
            Err(e) => {
                let _ = crate::sys::share_delobj(seg);
                return Err(e);
            }
        };
        // From here on, dropping `b` frees both objects.
        let mut b = BlockDevice { dev, seg, capacity: 0, mapped: [0; 64] };
        b.capacity = crate::sys::device_stat(dev)?.buffers;
        Ok(b)
    }

    /// Map the request segment in this core's root range if it is not yet.
    fn map_here(&mut self) -> Result<(), Error> {
        let c = crate::ctx::ctx().core;
        if c >= 64 {
            return Err(Error::NoSuchCore);
        }
        let ar = crate::ctx::ctx().root_ar;
        if self.mapped[c as usize] != ar.object {
            crate::sys::ar_set_seg(ar, &SegMapping { voff: BLK_VA, seg: self.seg, soff: 0, len: REQ_BYTES, flags: MAP_READ | MAP_WRITE })?;
            self.mapped[c as usize] = ar.object;
        }
        Ok(())
    }

    fn request(&self, kind: u64, sector: u64, len: u64) -> Result<u64, Error> {
        crate::sys::device_buf(self.dev, &DeviceBuf { seg: ObjName::new(sector, 0), offset: 0, len, buf_type: kind })
    }

    /// Read `buf.len()` bytes (whole sectors) from `sector` on.
    pub fn read(&mut self, sector: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.map_here()?;
        let mut done = 0usize;
        while done < buf.len() {
            let n = (buf.len() - done).min(REQ_BYTES as usize);
            self.request(BUF_BLK_READ, sector + (done as u64) / BLK_SECTOR, n as u64)?;
            // SAFETY: the request segment is mapped at BLK_VA in this core's root range
            // (`map_here`) for REQ_BYTES >= n bytes, and nothing else in this process uses that
            // window; the disk finished writing it before `device_buf` returned.
            let src = unsafe { core::slice::from_raw_parts(BLK_VA as *const u8, n) };
            buf[done..done + n].copy_from_slice(src);
            done += n;
        }
        Ok(())
    }

    /// Write `buf.len()` bytes (whole sectors) from `sector` on.
    pub fn write(&mut self, sector: u64, buf: &[u8]) -> Result<(), Error> {
        self.map_here()?;
        let mut done = 0usize;
        while done < buf.len() {
            let n = (buf.len() - done).min(REQ_BYTES as usize);
            // SAFETY: as in `read`; no request is in flight (requests are synchronous).
            let dst = unsafe { core::slice::from_raw_parts_mut(BLK_VA as *mut u8, n) };
            dst.copy_from_slice(&buf[done..done + n]);
            self.request(BUF_BLK_WRITE, sector + (done as u64) / BLK_SECTOR, n as u64)?;
            done += n;
        }
        Ok(())
    }

    /// Make the writes so far durable.
    pub fn flush(&mut self) -> Result<(), Error> {
        crate::sys::device_buf(self.dev, &DeviceBuf { seg: ObjName::new(0, 0), offset: 0, len: 0, buf_type: BUF_BLK_FLUSH }).map(|_| ())
    }
}

impl Drop for BlockDevice {
    fn drop(&mut self) {
        // Only this core's mapping can be removed from here; another core's stays in its root
        // range (holding the segment) until that context ends.
        let c = crate::ctx::ctx().core.min(63) as usize;
        if self.mapped[c] != 0 && self.mapped[c] == crate::ctx::ctx().root_ar.object {
            let _ = crate::sys::ar_unmap(crate::ctx::ctx().root_ar, BLK_VA, REQ_BYTES);
        }
        let _ = crate::sys::share_delobj(self.dev);
        let _ = crate::sys::share_delobj(self.seg);
    }
}

fn io(e: Error) -> FsError {
    match e {
        Error::NoMemory => FsError::NoMemory,
        _ => FsError::Io,
    }
}

struct Slot {
    data: Box<[u8]>,
    dirty: bool,
    used: u64,
}

/// What the cache counted.
#[derive(Clone, Copy, Debug, Default)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub writebacks: u64,
    pub pages: u64,
}

/// The buffer cache: 4 KiB pages of the disk, write-back (dirty pages go to the disk at `sync`
/// or when evicted), least-recently-used eviction of clean pages first.
pub struct Cache {
    pub dev: BlockDevice,
    pages: BTreeMap<u64, Slot>,
    clock: u64,
    pub stats: CacheStats,
}

impl Cache {
    pub fn new(dev: BlockDevice) -> Cache {
        Cache { dev, pages: BTreeMap::new(), clock: 0, stats: CacheStats::default() }
    }

    fn disk_bytes(&self) -> u64 {
        self.dev.capacity * BLK_SECTOR
    }

    /// Bytes of page `p` that exist on the disk (the last page may be short).
    fn page_len(&self, p: u64) -> usize {
        (self.disk_bytes() - p * PAGE).min(PAGE) as usize
    }

    fn write_back(&mut self, p: u64) -> Result<(), FsError> {
        let len = self.page_len(p);
        let Some(s) = self.pages.get_mut(&p) else { return Ok(()) };
        if s.dirty {
            self.dev.write(p * PAGE / BLK_SECTOR, &s.data[..len]).map_err(io)?;
            s.dirty = false;
            self.stats.writebacks += 1;
        }
        Ok(())
    }

    /// Make room for one more page.
    fn evict(&mut self) -> Result<(), FsError> {
        if self.pages.len() < CACHE_PAGES {
            return Ok(());
        }
        let clean = self.pages.iter().filter(|(_, s)| !s.dirty).min_by_key(|(_, s)| s.used).map(|(p, _)| *p);
        let victim = match clean {
            Some(p) => p,
            None => {
                let p = self.pages.iter().min_by_key(|(_, s)| s.used).map(|(p, _)| *p).ok_or(FsError::NoMemory)?;
                self.write_back(p)?;
                p
            }
        };
        self.pages.remove(&victim);
        Ok(())
    }

    /// Page `p`, read from the disk unless cached (or `fill == false`: a page about to be
    /// overwritten whole starts zeroed).
    fn page(&mut self, p: u64, fill: bool) -> Result<&mut Slot, FsError> {
        self.clock += 1;
        if self.pages.contains_key(&p) {
            self.stats.hits += 1;
        } else {
            self.stats.misses += 1;
            self.evict()?;
            let mut data = vec![0u8; PAGE as usize].into_boxed_slice();
            let len = self.page_len(p);
            if fill {
                self.dev.read(p * PAGE / BLK_SECTOR, &mut data[..len]).map_err(io)?;
            }
            self.pages.insert(p, Slot { data, dirty: false, used: 0 });
            self.stats.pages = self.pages.len() as u64;
        }
        let clock = self.clock;
        let s = self.pages.get_mut(&p).ok_or(FsError::NoMemory)?;
        s.used = clock;
        Ok(s)
    }

    /// Write every dirty page (in disk order), then flush the disk.
    pub fn sync(&mut self) -> Result<(), FsError> {
        let dirty: alloc::vec::Vec<u64> = self.pages.iter().filter(|(_, s)| s.dirty).map(|(p, _)| *p).collect();
        for p in dirty {
            self.write_back(p)?;
        }
        self.dev.flush().map_err(io)
    }

    /// Write the dirty pages covering bytes `[off, off + len)` (ordered writes: data before
    /// the metadata that names it).
    pub fn sync_range(&mut self, off: u64, len: u64) -> Result<(), FsError> {
        let first = off / PAGE;
        let end = (off + len).div_ceil(PAGE);
        let dirty: alloc::vec::Vec<u64> = self.pages.range(first..end).filter(|(_, s)| s.dirty).map(|(p, _)| *p).collect();
        for p in dirty {
            self.write_back(p)?;
        }
        Ok(())
    }

    /// Ask the disk to make the writes so far durable.
    pub fn flush(&mut self) -> Result<(), FsError> {
        self.dev.flush().map_err(io)
    }

    pub fn dirty_pages(&self) -> usize {
        self.pages.values().filter(|s| s.dirty).count()
    }
}

impl Disk for Cache {
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<(), FsError> {
        if off.checked_add(buf.len() as u64).is_none_or(|e| e > self.disk_bytes()) {
            return Err(FsError::Io);
        }
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let (p, at) = (pos / PAGE, (pos % PAGE) as usize);
            let n = (buf.len() - done).min(PAGE as usize - at);
            let s = self.page(p, true)?;
            buf[done..done + n].copy_from_slice(&s.data[at..at + n]);
            done += n;
        }
        Ok(())
    }

    fn write_at(&mut self, off: u64, buf: &[u8]) -> Result<(), FsError> {
        if off.checked_add(buf.len() as u64).is_none_or(|e| e > self.disk_bytes()) {
            return Err(FsError::Io);
        }
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let (p, at) = (pos / PAGE, (pos % PAGE) as usize);
            let n = (buf.len() - done).min(PAGE as usize - at);
            let whole = at == 0 && n == PAGE as usize;
            let s = self.page(p, !whole)?;
            s.data[at..at + n].copy_from_slice(&buf[done..done + n]);
            s.dirty = true;
            done += n;
        }
        Ok(())
    }

    fn size(&self) -> u64 {
        self.disk_bytes()
    }
}
