//! The disk: `virtio-blk-pci` through the `virtio-drivers` crate's `VirtIOBlk` (PCI transport,
//! our `Hal`), as a Corey device object. `abi::blk` has the contract (request segment,
//! `device_buf` request shape, errors, counters); docs/fs.md the layers above it.
//!
//! A *block device object* (`BlkDev`) owns one disk while it lives. Its request segment is
//! pinned (`Segment::pin`): the disk reads into and writes from the segment's pages in place,
//! at the physical addresses recorded here. Nothing a program passes is trusted: every request
//! is checked against the disk's capacity and the segment's size (`abi::blk_check`) before the
//! driver sees it, so the crate's own assertions (non-empty, whole sectors) never fire.
//!
//! **Polling, as Corey's Polling NIC configuration:** one virtqueue under one MCS lock, taken
//! twice per disk request by the requesting core: once to place the request in the queue
//! (`*_blocks_nb`), once to take its completion (`complete_*_blocks`). Between the two the core
//! spins *without* the lock, re-taking it only to look at the used ring, so several cores'
//! requests are in the device at once and no core holds the lock while the disk works. The
//! request header and status live on the requesting core's kernel stack (physically
//! contiguous, in the physical window) until the completion is taken. The used ring is taken in
//! order: a core whose completion is behind another core's waits until that core takes its own
//! (it is spinning for it too). A flush waits until no request is in flight, then runs alone
//! (the crate's flush is synchronous and would take another core's completion otherwise).
//! Per-core queues (virtio-blk multiqueue) or a kernel core that owns the queue (the NIC's
//! Dedicated mode) are not built.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use abi::{blk_check, DeviceStat, Error, BLK_SECTOR, BUF_BLK_FLUSH, BUF_BLK_READ, BUF_BLK_WRITE, DEVICE_BLOCK, PAGE_SIZE};
use percore::mcs::McsLock;
use percore::pad::CachePadded;
use percore::TicketLock;
use virtio_drivers::device::blk::{BlkReq, BlkResp, VirtIOBlk};
use virtio_drivers::transport::pci::PciTransport;
use virtio_drivers::transport::DeviceType;

use super::pci;
use super::virtio::KernelHal;
use crate::kobj::ObjRef;
use crate::mm::phys_to_virt;

type Driver = VirtIOBlk<KernelHal, PciTransport>;

/// The driver and how many requests are in the device.
struct DriverState {
    drv: Driver,
    inflight: u32,
}

/// hwids of the disks a block device object owns now.
static TAKEN: TicketLock<Vec<u64>> = TicketLock::new(Vec::new());

/// A block device object: one disk and the pinned request segment.
pub struct BlkDev {
    pub hwid: u64,
    seg: ObjRef,
    /// Physical address of every page of the pinned segment (its size when it was bound:
    /// pages added later by growing the segment are not the device's).
    pages: Vec<u64>,
    capacity: u64,
    readonly: bool,
    /// The driver (a Vec of at most one, for a fallible allocation; empty once reset).
    driver: McsLock<Vec<DriverState>>,
    /// Counters, one set per core (each written by its own core only, on its own lines; summed
    /// by `stat`). Cores past the list (none at boot) share the last set.
    counts: Vec<CachePadded<Counts>>,
}

#[derive(Default)]
struct Counts {
    reads: AtomicU64,
    writes: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    errors: AtomicU64,
    flushes: AtomicU64,
}

fn io_error(e: virtio_drivers::Error) -> Error {
    match e {
        virtio_drivers::Error::DmaError => Error::NoMemory,
        virtio_drivers::Error::Unsupported => Error::Unsupported,
        _ => Error::Io,
    }
}

/// Give back a disk taken in `BlkDev::open`.
fn release(hwid: u64) {
    let mut t = TAKEN.lock();
    t.retain(|&h| h != hwid);
    if t.is_empty() {
        // Give the list's memory back too (the leak check counts heap objects).
        *t = Vec::new();
    }
}

impl BlkDev {
    /// `device_alloc` of a disk: a block device object over `seg`.
    pub fn open(hwid: u64, seg: ObjRef, reserved: u64) -> Result<BlkDev, Error> {
        let f = pci::by_hwid(hwid).filter(|f| f.virtio == Some(DeviceType::Block)).ok_or(Error::NotFound)?;
        if reserved != 0 {
            return Err(Error::InvalidArgument);
        }
        let nbytes = seg.as_segment()?.nbytes();
        if nbytes < BLK_SECTOR {
            return Err(Error::OutOfRange);
        }
        // Every page the segment has when it is bound (requests name byte offsets in it).
        let npages = nbytes.div_ceil(PAGE_SIZE) as usize;
        {
            let mut t = TAKEN.lock();
            if t.contains(&hwid) {
                return Err(Error::Busy);
            }
            t.try_reserve(1).map_err(|_| Error::NoMemory)?;
            t.push(hwid);
        }
        let pages = match seg.as_segment().and_then(|s| s.pin(npages)) {
            Ok(p) => p,
            Err(e) => {
                release(hwid);
                return Err(e);
            }
        };
        // From here on, dropping `dev` unpins the segment and gives the disk back.
        let mut dev = BlkDev {
            hwid,
            seg,
            pages,
            capacity: 0,
            readonly: false,
            driver: McsLock::new(Vec::new()),
            counts: Vec::new(),
        };
        let ncores = crate::percpu::online_count().max(1);
        dev.counts.try_reserve_exact(ncores).map_err(|_| Error::NoMemory)?;
        dev.counts.extend((0..ncores).map(|_| CachePadded::new(Counts::default())));
        let mut slot = Vec::new();
        slot.try_reserve_exact(1).map_err(|_| Error::NoMemory)?;
        let transport = pci::with_root(|root| PciTransport::new::<KernelHal, _>(root, f.df)).ok_or(Error::NotFound)?.map_err(|_| Error::Unsupported)?;
        let drv = Driver::new(transport).map_err(io_error)?;
        dev.capacity = drv.capacity();
        dev.readonly = drv.readonly();
        slot.push(DriverState { drv, inflight: 0 });
        *dev.driver.lock() = slot;
        Ok(dev)
    }

    fn seg_bytes(&self) -> u64 {
        self.pages.len() as u64 * PAGE_SIZE
    }

    /// `device_buf` on a block device object: `sector` is the first sector, `offset`/`len`
    /// the bytes of the request segment. Returns the bytes transferred.
    pub fn buf(&self, buf_type: u64, sector: u64, reserved: u64, offset: u64, len: u64) -> Result<u64, Error> {
        if reserved != 0 {
            return Err(Error::InvalidArgument);
        }
        match buf_type {
            BUF_BLK_FLUSH => {
                if sector != 0 || offset != 0 || len != 0 {
                    return Err(Error::InvalidArgument);
                }
                self.mine().flushes.fetch_add(1, Ordering::Relaxed);
                loop {
                    let mut g = self.driver.lock_irqsave();
                    let st = g.first_mut().ok_or(Error::Busy)?;
                    if st.inflight == 0 {
                        // Alone in the queue: the synchronous flush takes only its own completion.
                        return st.drv.flush().map(|()| 0).map_err(|e| {
                            self.mine().errors.fetch_add(1, Ordering::Relaxed);
                            io_error(e)
                        });
                    }
                    drop(g);
                    backoff();
                }
            }
            BUF_BLK_READ | BUF_BLK_WRITE => {}
            _ => return Err(Error::Unsupported),
        }
        blk_check(sector, offset, len, self.capacity, self.seg_bytes())?;
        let write = buf_type == BUF_BLK_WRITE;
        if write && self.readonly {
            return Err(Error::NotPermitted);
        }
        // One disk request per page of the segment: its pages are not physically contiguous.
        let mut done = 0u64;
        while done < len {
            let off = offset + done;
            let in_page = off % PAGE_SIZE;
            let n = (len - done).min(PAGE_SIZE - in_page);
            // `blk_check` bounded `off + n` by the pinned pages.
            let va = phys_to_virt(self.pages[(off / PAGE_SIZE) as usize] + in_page);
            // SAFETY: `n` bytes inside one pinned page of the segment, which stays allocated and
            // in place while `self` lives (we hold it). The program may access the same bytes
            // meanwhile; the slice is only handed to the driver, which passes its physical
            // address to the disk and does not read it otherwise.
            let buf = unsafe { core::slice::from_raw_parts_mut(va as *mut u8, n as usize) };
            let first = (sector + done / BLK_SECTOR) as usize;
            if let Err(e) = self.transfer(write, first, buf) {
                self.mine().errors.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
            done += n;
        }
        if write {
            self.mine().writes.fetch_add(1, Ordering::Relaxed);
            self.mine().bytes_out.fetch_add(len, Ordering::Relaxed);
        } else {
            self.mine().reads.fetch_add(1, Ordering::Relaxed);
            self.mine().bytes_in.fetch_add(len, Ordering::Relaxed);
        }
        Ok(len)
    }

    /// One disk request: place it (lock), wait for the device without the lock, take its
    /// completion (lock).
    fn transfer(&self, write: bool, first: usize, buf: &mut [u8]) -> Result<(), Error> {
        let mut req = BlkReq::default();
        let mut resp = BlkResp::default();
        let token = loop {
            let mut g = self.driver.lock_irqsave();
            let st = g.first_mut().ok_or(Error::Busy)?;
            // SAFETY: `req`, `buf` and `resp` stay alive (this frame does not return before the
            // completion is taken below, or the device is reset) and this code does not touch
            // them until then; `buf` is inside a pinned page (see `buf`).
            let r = unsafe {
                if write {
                    st.drv.write_blocks_nb(first, &mut req, buf, &mut resp)
                } else {
                    st.drv.read_blocks_nb(first, &mut req, buf, &mut resp)
                }
            };
            match r {
                Ok(t) => {
                    st.inflight += 1;
                    break t;
                }
                // Other cores' requests fill the queue: let them finish.
                Err(virtio_drivers::Error::QueueFull) => {}
                Err(e) => return Err(io_error(e)),
            }
            drop(g);
            backoff();
        };
        loop {
            let mut g = self.driver.lock_irqsave();
            // No driver: the device was reset, so nothing of ours is in flight any more (cannot
            // happen while this call holds the device object; handled without a panic).
            let st = g.first_mut().ok_or(Error::Busy)?;
            if st.drv.peek_used() == Some(token) {
                st.inflight -= 1;
                // SAFETY: the same buffers `*_blocks_nb` was given with this token.
                let r = unsafe {
                    if write {
                        st.drv.complete_write_blocks(token, &req, buf, &mut resp)
                    } else {
                        st.drv.complete_read_blocks(token, &req, buf, &mut resp)
                    }
                };
                return r.map_err(io_error);
            }
            drop(g);
            backoff();
        }
    }

    /// This core's counters.
    fn mine(&self) -> &Counts {
        let c = percore::cpu_id().min(self.counts.len() - 1);
        &self.counts[c]
    }

    pub fn stat(&self) -> DeviceStat {
        let mut s = DeviceStat { hwid: self.hwid, kind: DEVICE_BLOCK, buffers: self.capacity, ..Default::default() };
        for c in &self.counts {
            s.bytes_in += c.bytes_in.load(Ordering::Relaxed);
            s.bytes_out += c.bytes_out.load(Ordering::Relaxed);
            s.packets_in += c.reads.load(Ordering::Relaxed);
            s.packets_out += c.writes.load(Ordering::Relaxed);
            s.drops += c.flushes.load(Ordering::Relaxed);
            s.errors += c.errors.load(Ordering::Relaxed);
        }
        s
    }
}

/// A short pause between looks at the queue (the lock is free meanwhile).
fn backoff() {
    for _ in 0..64 {
        core::hint::spin_loop();
    }
}

impl Drop for BlkDev {
    fn drop(&mut self) {
        // Dropping the driver resets the disk (the transport's drop): no DMA after the unpin.
        let driver = core::mem::take(&mut *self.driver.lock());
        drop(driver);
        if let Ok(s) = self.seg.as_segment() {
            s.unpin();
        }
        release(self.hwid);
    }
}
