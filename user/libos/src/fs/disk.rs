//! The block layer: the block device object (`abi::blk`) and its request segment, the bottom
//! of the file system's stack (docs/architecture.md, "Storage"):
//!
//! ext2 (crate `ext2`, over the `ext2::Disk` trait) -> the buffer cache (`cache.rs`, over the
//! table of crate `bcache`) -> this module (`bcache::BlockIo` for `BlockDevice`) -> the disk.
//!
//! Nothing here knows the cache or the file system above: a request reads or writes whole
//! sectors of the disk through the request segment, in either of the device's modes. This
//! module and `cache` hold the file system's only `unsafe`: the request segment is read and
//! written through its mapping at `BLK_VA`.

use abi::{
    blk_data_offset, blk_done_page, blk_done_parse, blk_slot_word, blk_submit_page, blk_submit_words, blk_tag, ArMapping, DeviceBuf, DeviceConf,
    DeviceInfo, Error, ObjName, ObjectId, SegMapping, BLK_DETACHED, BLK_MAX_REQUEST, BLK_MAX_RINGS, BLK_MODE_DEDICATED, BLK_RING_CONSUMER,
    BLK_RING_ENTRIES, BLK_SECTOR, BUF_BLK_FLUSH, BUF_BLK_READ, BUF_BLK_WRITE, CONF_BLK_MODE, DEVICE_BLOCK, MAP_READ, MAP_WRITE, MEMID_SELF,
};
use alloc::vec::Vec;
use bcache::{BlockIo, IoError};
use core::sync::atomic::{AtomicU64, Ordering};

/// Where a context maps the request segment (each core in its own root range, on first use).
pub const BLK_VA: u64 = 0x3900_0000_0000;
/// Bytes of the request segment: the largest request.
pub const REQ_BYTES: u64 = BLK_MAX_REQUEST;
/// Dedicated: how long a request may wait to be taken by the kernel core named in the ring
/// header before `NoSuchCore` (a kernel core takes an entry within a poll round; this is
/// seconds so that a vCPU descheduled by a loaded host is not mistaken for a missing core).
pub const TAKE_WAIT_NS: u64 = 5_000_000_000;
/// Dedicated: how long a request taken by the kernel core may wait for the disk before `Io`.
pub const DONE_WAIT_NS: u64 = 60_000_000_000;
/// Bytes of one page of the request segment (the ring pages).
pub const PAGE: u64 = 4096;

/// Map `link` at `va` in `root` unless `target` is mapped there already (a cfork'd child
/// whose parent shared it); something else there (a stale mapping of an earlier mount, or a
/// cfork copy) is replaced.
pub(super) fn map_in_root(root: ObjName, va: u64, len: u64, target: ObjName, link: impl Fn() -> Result<u64, Error>) -> Result<(), Error> {
    match link() {
        Ok(_) => Ok(()),
        Err(Error::Overlap) => {
            let mut maps = [ArMapping::default(); 128];
            let n = (crate::sys::ar_get(root, &mut maps)? as usize).min(maps.len());
            if maps[..n].iter().any(|m| m.voff == va && m.target == target.object) {
                return Ok(());
            }
            // Replace what is there only with something this context can name (a cfork'd
            // child not given the cache keeps its copy and gets the error).
            crate::sys::obj_stat(target)?;
            crate::sys::ar_unmap(root, va, len)?;
            link().map(|_| ())
        }
        Err(e) => Err(e),
    }
}

/// How a mounted file system reaches the disk (`fs::mount_with`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskMode {
    /// Each cache miss and write-back is a `device_buf` call (the virtqueue under the kernel's
    /// lock). What `fs::mount` uses.
    Polling,
    /// A kernel core owns the virtqueue; the cache's misses and write-backs go through the
    /// calling core's ring (`BlockDevice::open_dedicated`). `kernel_core` is a pcore object
    /// whose core the caller made a kernel core (and keeps one while mounted); `rings` covers
    /// cores 0..rings, the cores that may use the file system (a core past them gets `Io`).
    Dedicated { kernel_core: ObjName, rings: u64 },
}

impl DiskMode {
    /// The block device object for a mount in this mode.
    pub fn open(self, share: ObjectId) -> Result<BlockDevice, Error> {
        match self {
            DiskMode::Polling => BlockDevice::open(share),
            DiskMode::Dedicated { kernel_core, rings } => BlockDevice::open_dedicated(share, rings, kernel_core),
        }
    }
}

/// The first disk `device_list` shows.
pub fn find_disk() -> Result<DeviceInfo, Error> {
    let mut l = [DeviceInfo::default(); 16];
    let n = crate::sys::device_list(&mut l)? as usize;
    l[..n].iter().find(|d| d.kind == DEVICE_BLOCK).copied().ok_or(Error::NotFound)
}

/// A block device object and its request segment, in the process share.
///
/// **Two modes** (`abi::blk`): `open` makes a Polling device (each request is a `device_buf`
/// call; the kernel places it in the disk's queue under its lock; the whole request segment is
/// one data area, so requests are serialised by `&mut self`). `open_dedicated` makes a
/// Dedicated one: a kernel core owns the disk's queue, and core `c` posts its requests on ring
/// `c` of the request segment and spins on its completion ring, no system call and nothing
/// shared with another requesting core; each ring has its own data area, so `read_here` /
/// `write_here` may run on several cores at once (`&self`). The file system above uses either
/// through `read`/`write`/`flush`.
pub struct BlockDevice {
    pub dev: ObjName,
    pub(super) seg: ObjName,
    /// Sectors on the disk.
    pub capacity: u64,
    /// Bytes of the request segment (all mapped at `BLK_VA`).
    seg_bytes: u64,
    /// Rings of Dedicated mode (0: Polling).
    nrings: u64,
    /// Per-core data areas (core `c` uses area `c`), or 0: one area, serialised by `&mut self`.
    areas: u64,
    /// For each core, the root range (object id) in which this core mapped the request
    /// segment, or 0. A context that ends takes its root range and the mapping with it, so a
    /// later context on the same core (another thread) is told apart by its root range.
    mapped: [AtomicU64; 64],
    /// Dedicated: each ring's producer and consumer positions (written by its core only, on
    /// lines of their own).
    cursors: Vec<Cursor>,
}

/// One ring's positions on the program's side.
#[derive(Default)]
#[repr(align(128))]
struct Cursor {
    /// Submit entries sent, and the kernel's count of those it took as last read.
    sent: AtomicU64,
    taken_seen: AtomicU64,
    /// Completion entries received.
    received: AtomicU64,
}

/// Words of a page of the request segment mapped at `BLK_VA`.
fn ring_words(page: u64) -> &'static [AtomicU64; 512] {
    // SAFETY: callers map the request segment at BLK_VA on this core first (`map_here`), and
    // the ring pages are inside it; every access is atomic (the kernel core writes them too).
    unsafe { &*((BLK_VA + page * PAGE) as *const [AtomicU64; 512]) }
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
        let mut b = BlockDevice { dev, seg, capacity: 0, seg_bytes: REQ_BYTES, nrings: 0, areas: 0, mapped: [const { AtomicU64::new(0) }; 64], cursors: Vec::new() };
        b.capacity = crate::sys::device_stat(dev)?.buffers;
        Ok(b)
    }

    /// Make a Dedicated block device object over the first disk with `nrings` rings (cores
    /// 0..nrings may make requests), attached to the kernel core of `kernel_core` (a pcore
    /// object whose core is a kernel core). The request segment holds the rings and one
    /// `REQ_BYTES` data area per ring.
    pub fn open_dedicated(share: ObjectId, nrings: u64, kernel_core: ObjName) -> Result<BlockDevice, Error> {
        if nrings == 0 || nrings > BLK_MAX_RINGS {
            return Err(Error::InvalidArgument);
        }
        let disk = find_disk()?;
        let bytes = blk_data_offset(nrings) + nrings * REQ_BYTES;
        let seg = ObjName::new(share, crate::sys::segment_alloc(share, "blk-rings", MEMID_SELF, bytes)?);
        // SAFETY: no pointers: the kernel checks every argument.
        let dev = match unsafe { crate::sys::call(abi::nr::DEVICE_ALLOC, share, disk.hwid, MEMID_SELF, seg.share, seg.object, 0) } {
            Ok(d) => ObjName::new(share, d),
            Err(e) => {
                let _ = crate::sys::share_delobj(seg);
                return Err(e);
            }
        };
        let mut b = BlockDevice { dev, seg, capacity: 0, seg_bytes: bytes, nrings: 0, areas: 0, mapped: [const { AtomicU64::new(0) }; 64], cursors: Vec::new() };
        b.capacity = crate::sys::device_stat(dev)?.buffers;
        b.cursors.try_reserve_exact(nrings as usize).map_err(|_| Error::NoMemory)?;
        b.cursors.extend((0..nrings).map(|_| Cursor::default()));
        crate::sys::device_conf(dev, &DeviceConf { key: CONF_BLK_MODE, value: BLK_MODE_DEDICATED | nrings << 8 })?;
        b.nrings = nrings;
        b.areas = nrings;
        crate::ring::pcore_add_device(kernel_core, dev)?;
        // The header names the core once its kernel-core loop polls the device (a core just
        // made a kernel core enters its loop when it next looks at its role): wait for that,
        // bounded, so that the first request does not get `NoSuchCore` for a core about to
        // serve it, and a core that never starts is a clear error here.
        b.map_here()?;
        let t0 = crate::time::now_ns();
        while ring_words(0)[2].load(Ordering::Acquire) == BLK_DETACHED {
            if crate::time::now_ns() - t0 > TAKE_WAIT_NS {
                return Err(Error::NoSuchCore);
            }
            core::hint::spin_loop();
        }
        Ok(b)
    }

    /// A Polling device whose request segment has a data area for each of cores
    /// 0..`ncores`, so that `read_here`/`write_here` may run on them at once (each request
    /// still a `device_buf` under the kernel's queue lock): the Polling side of a comparison
    /// with `open_dedicated`.
    pub fn open_polling_per_core(share: ObjectId, ncores: u64) -> Result<BlockDevice, Error> {
        if ncores == 0 || ncores > 64 {
            return Err(Error::InvalidArgument);
        }
        let disk = find_disk()?;
        let bytes = ncores * REQ_BYTES;
        let seg = ObjName::new(share, crate::sys::segment_alloc(share, "blk-requests", MEMID_SELF, bytes)?);
        // SAFETY: no pointers: the kernel checks every argument.
        let dev = match unsafe { crate::sys::call(abi::nr::DEVICE_ALLOC, share, disk.hwid, MEMID_SELF, seg.share, seg.object, 0) } {
            Ok(d) => ObjName::new(share, d),
            Err(e) => {
                let _ = crate::sys::share_delobj(seg);
                return Err(e);
            }
        };
        let mut b = BlockDevice { dev, seg, capacity: 0, seg_bytes: bytes, nrings: 0, areas: ncores, mapped: [const { AtomicU64::new(0) }; 64], cursors: Vec::new() };
        b.capacity = crate::sys::device_stat(dev)?.buffers;
        Ok(b)
    }

    /// Whether this device is in Dedicated mode.
    pub fn dedicated(&self) -> bool {
        self.nrings != 0
    }

    /// Map the request segment in this core's root range if it is not yet.
    fn map_here(&self) -> Result<(), Error> {
        let c = crate::ctx::ctx().core;
        if c >= 64 {
            return Err(Error::NoSuchCore);
        }
        let ar = crate::ctx::ctx().root_ar;
        if self.mapped[c as usize].load(Ordering::Relaxed) != ar.object {
            let (seg, len) = (self.seg, self.seg_bytes);
            map_in_root(ar, BLK_VA, len, seg, || crate::sys::ar_set_seg(ar, &SegMapping { voff: BLK_VA, seg, soff: 0, len, flags: MAP_READ | MAP_WRITE }))?;
            self.mapped[c as usize].store(ar.object, Ordering::Relaxed);
        }
        Ok(())
    }

    /// This core's ring (Dedicated) and the byte offset of its data area.
    fn area(&self) -> Result<(u64, u64), Error> {
        if self.areas == 0 {
            return Ok((0, 0));
        }
        let r = crate::ctx::ctx().core as u64;
        if r >= self.areas {
            return Err(Error::NoSuchCore);
        }
        Ok((r, blk_data_offset(self.nrings) * (self.nrings != 0) as u64 + r * REQ_BYTES))
    }

    fn request(&self, kind: u64, sector: u64, offset: u64, len: u64) -> Result<u64, Error> {
        if self.dedicated() {
            let (r, _) = self.area()?;
            return self.ring_request(r, kind, sector, offset, len);
        }
        crate::sys::device_buf(self.dev, &DeviceBuf { seg: ObjName::new(sector, 0), offset, len, buf_type: kind })
    }

    /// Post one request on ring `r` and wait for its completion (Dedicated). `NoSuchCore` if
    /// no kernel core serves the ring (see `wait_done`). A request given up that way stays on
    /// the ring: the next request on this ring first waits for its completion (`settle`), so a
    /// given-up write is never served later from a data area already reused.
    fn ring_request(&self, r: u64, op: u64, sector: u64, offset: u64, len: u64) -> Result<u64, Error> {
        self.settle(r)?;
        let cur = &self.cursors[r as usize];
        let sub = ring_words(blk_submit_page(r));
        let sent = cur.sent.load(Ordering::Relaxed);
        // Room on the submit ring: every earlier entry was answered (`settle`), so the kernel
        // took them all; the last reading of its count may only be stale.
        if sent - cur.taken_seen.load(Ordering::Relaxed) >= BLK_RING_ENTRIES {
            cur.taken_seen.store(sub[(BLK_RING_CONSUMER / 8) as usize].load(Ordering::Acquire), Ordering::Relaxed);
            if sent - cur.taken_seen.load(Ordering::Relaxed) >= BLK_RING_ENTRIES {
                return Err(Error::Io); // the kernel answered entries it did not take: cannot happen
            }
        }
        let at = blk_slot_word(sent);
        for (k, v) in blk_submit_words(op, sector, offset, len).iter().enumerate() {
            sub[at + 1 + k].store(*v, Ordering::Relaxed);
        }
        // Release: the words before the tag that says they are there.
        sub[at].store(blk_tag(sent), Ordering::Release);
        cur.sent.store(sent + 1, Ordering::Relaxed);
        match self.wait_done(r, sent + 1)? {
            Some(res) => res,
            None => Err(Error::Io), // unreachable: wait_done returns the last entry's result
        }
    }

    /// Wait until every request posted on ring `r` is answered (completions of requests given
    /// up earlier), before this core's data area or ring is used again. The same errors as
    /// `wait_done`; on an error nothing was posted and the data area was not touched.
    fn settle(&self, r: u64) -> Result<(), Error> {
        let cur = &self.cursors[r as usize];
        let sent = cur.sent.load(Ordering::Relaxed);
        if cur.received.load(Ordering::Relaxed) < sent {
            self.wait_done(r, sent)?;
        }
        Ok(())
    }

    /// Take ring `r`'s completions until `upto` entries are answered; the result of entry
    /// `upto - 1` if it was among them (`None` if `upto` were answered already).
    ///
    /// Every wait is bounded: `NoSuchCore` when the header says no kernel core polls the device
    /// (read every 256 polls: the header line is written only at attach and detach, so reading
    /// it costs no transfer), or when an entry waits `TAKE_WAIT_NS` without being taken (the
    /// header names a core but nothing takes the ring's entries: the ring was stopped, or the
    /// core does not poll); `Io` when the kernel took every entry but one is not answered after
    /// `DONE_WAIT_NS` (the disk does not complete). The clock is read every 4096 polls (no
    /// shared line); the kernel's count of entries taken only once the first bound is past.
    fn wait_done(&self, r: u64, upto: u64) -> Result<Option<Result<u64, Error>>, Error> {
        let cur = &self.cursors[r as usize];
        let done = ring_words(blk_done_page(r));
        let header = ring_words(0);
        let mut last = None;
        let mut spins = 0u64;
        let mut since = 0u64;
        loop {
            let got = cur.received.load(Ordering::Relaxed);
            if got >= upto {
                return Ok(last);
            }
            let at = blk_slot_word(got);
            if done[at].load(Ordering::Acquire) == blk_tag(got) {
                let (seq, res) = blk_done_parse([done[at + 1].load(Ordering::Relaxed), done[at + 2].load(Ordering::Relaxed), done[at + 3].load(Ordering::Relaxed)]);
                cur.received.store(got + 1, Ordering::Relaxed);
                // Release: our reads of the slot before the kernel may reuse it.
                done[(BLK_RING_CONSUMER / 8) as usize].store(got + 1, Ordering::Release);
                // Completions come in submit order; an earlier one is a request given up.
                last = (seq == upto - 1).then_some(res);
                since = 0;
                continue;
            }
            spins += 1;
            if spins % 256 == 0 && header[2].load(Ordering::Acquire) == BLK_DETACHED {
                return Err(Error::NoSuchCore);
            }
            if spins % 4096 == 0 {
                let now = crate::time::now_ns();
                if since == 0 {
                    since = now;
                } else if now - since > TAKE_WAIT_NS {
                    let taken = ring_words(blk_submit_page(r))[(BLK_RING_CONSUMER / 8) as usize].load(Ordering::Acquire);
                    if taken < upto {
                        return Err(Error::NoSuchCore);
                    }
                    if now - since > DONE_WAIT_NS {
                        return Err(Error::Io);
                    }
                }
            }
            core::hint::spin_loop();
        }
    }

    /// Read `buf.len()` bytes (whole sectors) from `sector` on.
    pub fn read(&mut self, sector: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.read_shared(sector, buf)
    }

    /// Write `buf.len()` bytes (whole sectors) from `sector` on.
    pub fn write(&mut self, sector: u64, buf: &[u8]) -> Result<(), Error> {
        self.write_shared(sector, buf)
    }

    /// `read` from several cores at once: each core has its own data area (and, Dedicated, its
    /// own ring). `NotPermitted` for a device made by `open`, whose one data area `&mut self`
    /// serialises.
    pub fn read_here(&self, sector: u64, buf: &mut [u8]) -> Result<(), Error> {
        if self.areas == 0 {
            return Err(Error::NotPermitted);
        }
        self.read_shared(sector, buf)
    }

    /// `write` from several cores at once (as `read_here`).
    pub fn write_here(&self, sector: u64, buf: &[u8]) -> Result<(), Error> {
        if self.areas == 0 {
            return Err(Error::NotPermitted);
        }
        self.write_shared(sector, buf)
    }

    /// Callers: `&mut self`, or per-core data areas, so this core's data area is its own.
    fn read_shared(&self, sector: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.map_here()?;
        let (_, base) = self.area()?;
        let mut done = 0usize;
        while done < buf.len() {
            let n = (buf.len() - done).min(REQ_BYTES as usize);
            self.request(BUF_BLK_READ, sector + (done as u64) / BLK_SECTOR, base, n as u64)?;
            // SAFETY: the request segment is mapped at BLK_VA in this core's root range
            // (`map_here`), and this core's data area (`area`: REQ_BYTES >= n bytes from `base`)
            // is used by no other thread of this process (see the callers); the disk finished
            // writing it before the request returned.
            let src = unsafe { core::slice::from_raw_parts((BLK_VA + base) as *const u8, n) };
            buf[done..done + n].copy_from_slice(src);
            done += n;
        }
        Ok(())
    }

    /// `read_shared` into words (`words.len() * 8` bytes, whole sectors): the bytes land in
    /// the words as they are on the disk (little-endian, as `u64::from_le_bytes` reads them),
    /// with no byte buffer between (the buffer cache's misses: `BlockIo::read_page_words`).
    fn read_shared_words(&self, sector: u64, words: &mut [u64]) -> Result<(), Error> {
        self.map_here()?;
        let (_, base) = self.area()?;
        let len = words.len() * 8;
        let mut done = 0usize;
        while done < len {
            let n = (len - done).min(REQ_BYTES as usize);
            self.request(BUF_BLK_READ, sector + (done as u64) / BLK_SECTOR, base, n as u64)?;
            // SAFETY: the source is this core's data area, as in `read_shared` (mapped, n <=
            // REQ_BYTES bytes from `base`, used by no other thread, written by the disk before
            // the request returned). The destination is bytes `done..done + n` of `words`
            // (done + n <= len = its size in bytes), which this function borrows mutably; any
            // bytes are a valid `u64`, and a byte copy needs no alignment of either side.
            unsafe { core::ptr::copy_nonoverlapping((BLK_VA + base) as *const u8, (words.as_mut_ptr() as *mut u8).add(done), n) };
            done += n;
        }
        Ok(())
    }

    fn write_shared(&self, sector: u64, buf: &[u8]) -> Result<(), Error> {
        self.map_here()?;
        let (r, base) = self.area()?;
        let mut done = 0usize;
        while done < buf.len() {
            let n = (buf.len() - done).min(REQ_BYTES as usize);
            if self.dedicated() {
                // A request given up earlier (`NoSuchCore`) may still be served from this data
                // area: it must be answered before the area is overwritten.
                self.settle(r)?;
            }
            // SAFETY: as in `read_shared`; no request of this core is in flight (requests are
            // synchronous, and one given up was answered: `settle`).
            let dst = unsafe { core::slice::from_raw_parts_mut((BLK_VA + base) as *mut u8, n) };
            dst.copy_from_slice(&buf[done..done + n]);
            self.request(BUF_BLK_WRITE, sector + (done as u64) / BLK_SECTOR, base, n as u64)?;
            done += n;
        }
        Ok(())
    }

    /// Make the writes so far durable.
    pub fn flush(&mut self) -> Result<(), Error> {
        if self.dedicated() {
            self.map_here()?;
            return self.request(BUF_BLK_FLUSH, 0, 0, 0).map(|_| ());
        }
        crate::sys::device_buf(self.dev, &DeviceBuf { seg: ObjName::new(0, 0), offset: 0, len: 0, buf_type: BUF_BLK_FLUSH }).map(|_| ())
    }

    /// Post raw words on this core's submit ring and return its completion (tests: bad entries
    /// the kernel core must refuse). Dedicated only.
    pub fn raw_ring_request(&self, op: u64, sector: u64, offset: u64, len: u64) -> Result<u64, Error> {
        if !self.dedicated() {
            return Err(Error::NotPermitted);
        }
        self.map_here()?;
        let (r, _) = self.area()?;
        self.ring_request(r, op, sector, offset, len)
    }

    /// The kernel core serving the rings now, as the header says (Dedicated): `None` while no
    /// kernel core polls the device (detached, or its core is no longer a kernel core).
    pub fn kernel_core(&self) -> Result<Option<u64>, Error> {
        if !self.dedicated() {
            return Err(Error::NotPermitted);
        }
        self.map_here()?;
        let c = ring_words(0)[2].load(Ordering::Acquire);
        Ok((c != BLK_DETACHED).then_some(c))
    }

    /// Byte offset of this core's data area in the request segment, and the segment (tests).
    pub fn data_area(&self) -> Result<(u64, ObjName), Error> {
        self.area().map(|(_, b)| (b, self.seg))
    }
}

impl Drop for BlockDevice {
    fn drop(&mut self) {
        // Only this core's mapping can be removed from here; another core's stays in its root
        // range (holding the segment) until that context ends.
        let c = crate::ctx::ctx().core.min(63) as usize;
        let m = self.mapped[c].load(Ordering::Relaxed);
        if m != 0 && m == crate::ctx::ctx().root_ar.object {
            let _ = crate::sys::ar_unmap(crate::ctx::ctx().root_ar, BLK_VA, self.seg_bytes);
        }
        let _ = crate::sys::share_delobj(self.dev);
        let _ = crate::sys::share_delobj(self.seg);
    }
}

/// The block device as the buffer cache's disk: cache page `p` is sectors `p * 8 ..`.
impl BlockIo for BlockDevice {
    fn read_page(&mut self, block: u64, buf: &mut [u8]) -> Result<(), IoError> {
        self.read(block * CACHE_PAGE / BLK_SECTOR, buf).map_err(io_error)
    }
    fn read_page_words(&mut self, block: u64, words: &mut [u64; bcache::PAGE_WORDS]) -> Result<(), IoError> {
        // Whole sectors: the page's bytes on the disk (a multiple of the sector) as words.
        let n = self.page_len(block) / 8;
        self.read_shared_words(block * CACHE_PAGE / BLK_SECTOR, &mut words[..n]).map_err(io_error)
    }
    fn write_page(&mut self, block: u64, buf: &[u8]) -> Result<(), IoError> {
        self.write(block * CACHE_PAGE / BLK_SECTOR, buf).map_err(io_error)
    }
    fn flush(&mut self) -> Result<(), IoError> {
        BlockDevice::flush(self).map_err(|_| IoError::Io)
    }
    fn page_len(&self, block: u64) -> usize {
        (self.capacity * BLK_SECTOR).saturating_sub(block * CACHE_PAGE).min(CACHE_PAGE) as usize
    }
}

/// Bytes of one page of the buffer cache.
const CACHE_PAGE: u64 = bcache::PAGE as u64;

fn io_error(e: Error) -> IoError {
    if e == Error::NoMemory {
        IoError::NoMemory
    } else {
        IoError::Io
    }
}
