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
//! **Polling, as Corey's Polling NIC configuration** (the default mode): one virtqueue under
//! one MCS lock, taken twice per disk request by the requesting core: once to place the
//! request in the queue (`*_blocks_nb`), once to take its completion (`complete_*_blocks`).
//! Between the two the core spins *without* the lock, re-taking it only to look at the used
//! ring, so several cores' requests are in the device at once and no core holds the lock while
//! the disk works. The request header and status live on the requesting core's kernel stack
//! (physically contiguous, in the physical window) until the completion is taken. The used ring
//! is taken in order: a core whose completion is behind another core's waits until that core
//! takes its own (it is spinning for it too). A flush waits until no request is in flight, then
//! runs alone (the crate's flush is synchronous and would take another core's completion
//! otherwise).
//!
//! **Dedicated, as the NIC's** (`abi::blk` has the ring layout): a kernel core the device
//! object is attached to (`attach`, from `pcore_add_device`) owns the virtqueue; requesting
//! cores make no system call. Each round of `poll` (kernel core only; the driver lock is then
//! uncontended) takes the used ring's completions, then looks at every ring: a ring with no
//! request in the device takes its next submit entry, checks it (`blk_check`, the ring pages,
//! the op, a read-only disk) and places its first page in the virtqueue; later pages follow as
//! the earlier ones complete; the last one (or an error) puts the completion entry on the
//! ring's completion ring. One request per ring in the device at a time keeps the kernel
//! core's bookkeeping a fixed table (`RingIo`, with the request header and status the device
//! reads, at a fixed heap address); rings are served round-robin. A completion entry is put
//! only when the ring has room for it (checked before an entry is taken), so a program that
//! never reads its completions stalls only its own ring. Everything in the ring pages is the
//! program's and is read once, into locals, before it is checked.
//!
//! Per-core queues (virtio-blk multiqueue) are not built.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use abi::{
    blk_check, blk_data_offset, blk_done_page, blk_done_words, blk_slot_word, blk_submit_page, blk_submit_parse, blk_tag, DeviceStat,
    Error, BLK_DETACHED, BLK_MAGIC, BLK_MAX_RINGS, BLK_MODE_DEDICATED, BLK_MODE_POLLING, BLK_RING_CONSUMER, BLK_RING_ENTRIES,
    BLK_SECTOR, BUF_BLK_FLUSH, BUF_BLK_READ, BUF_BLK_WRITE, DEVICE_BLOCK, PAGE_SIZE,
};
use core::sync::atomic::{AtomicBool, AtomicU32};
use percore::mcs::McsLock;
use percore::pad::CachePadded;
use percore::TicketLock;
use virtio_drivers::device::blk::{BlkReq, BlkResp, VirtIOBlk};
use virtio_drivers::transport::pci::PciTransport;
use virtio_drivers::transport::DeviceType;

use super::pci;
use super::virtio::KernelHal;
use super::{Armed, Driver, Line, SharedMemory};
use crate::mm::phys_to_virt;

type Virtio = VirtIOBlk<KernelHal, PciTransport>;

/// The driver, how many requests are in the device, and (Dedicated) each ring's request in
/// the device.
struct DriverState {
    drv: Virtio,
    inflight: u32,
    /// `BLK_MAX_RINGS` entries, made at `open` and never resized: the headers and statuses the
    /// device reads stay at their heap addresses while a request is in flight.
    rio: Vec<RingIo>,
}

/// A ring's request being served (Dedicated; the kernel core's alone, under the driver lock).
#[derive(Default)]
struct RingIo {
    active: Option<Active>,
    /// Descriptor token of the page of `active` in the device now.
    token: Option<u16>,
    req: BlkReq,
    resp: BlkResp,
}

/// A checked submit entry and how many of its bytes are done.
#[derive(Clone, Copy)]
struct Active {
    seq: u64,
    write: bool,
    sector: u64,
    offset: u64,
    len: u64,
    done: u64,
}

/// Kernel-side state of one ring (Dedicated), written by the kernel core only (and by the
/// core setting the mode, while no kernel core is attached).
#[derive(Default)]
struct RingPoll {
    /// Submit entries taken; completion entries put; the program's completion count as last read.
    sub_taken: AtomicU64,
    done_put: AtomicU64,
    done_seen: AtomicU64,
    counts: Counts,
    /// Entries refused (bad shape), answered with their error.
    refused: AtomicU64,
    /// The completion ring said something impossible: nothing more is taken or put.
    broken: AtomicBool,
}

/// Empty polls (microseconds) before a kernel core with only disks attached sleeps.
pub const KC_IDLE_US: u64 = 2_000;
/// How often a sleeping kernel core looks at its disks' submit rings. The used ring's
/// interrupt ends a halt at once when a request in the device completes; a new submit entry
/// raises nothing (a program posts it with plain stores and spins on its completion ring, with
/// no doorbell), so it waits for this look: at most this long after an idle stretch.
pub const KC_SLEEP_US: u64 = 1_000;

/// hwids of the disks a block device object owns now.
static TAKEN: TicketLock<Vec<u64>> = TicketLock::new(Vec::new());

/// A block device object: one disk and the pinned request segment.
pub struct BlkDev {
    pub hwid: u64,
    /// The segment the device shares with its program (pinned while `owns` the device).
    seg: Box<dyn SharedMemory>,
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
    /// `BLK_MODE_*`, and the number of rings in Dedicated mode.
    mode: AtomicU64,
    nrings: AtomicU64,
    /// Per ring (`BLK_MAX_RINGS`), Dedicated.
    rings: Vec<CachePadded<RingPoll>>,
    /// The kernel core polling it (`attach`), or `u32::MAX`.
    attached: AtomicU32,
    /// The device object is gone: poll nothing more.
    dead: AtomicBool,
    /// This object holds the disk and a pin on the segment (`shutdown` gives both back once).
    owns: AtomicBool,
    /// The disk's interrupt line (armed only while its kernel core sleeps).
    line: Line,
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
    pub fn open(hwid: u64, seg: Box<dyn SharedMemory>, reserved: u64) -> Result<BlkDev, Error> {
        let f = pci::by_hwid(hwid).filter(|f| f.virtio == Some(DeviceType::Block)).ok_or(Error::NotFound)?;
        if reserved != 0 {
            return Err(Error::InvalidArgument);
        }
        let nbytes = seg.nbytes()?;
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
        let pages = match seg.pin(npages) {
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
            mode: AtomicU64::new(BLK_MODE_POLLING),
            nrings: AtomicU64::new(0),
            rings: Vec::new(),
            attached: AtomicU32::new(u32::MAX),
            dead: AtomicBool::new(false),
            owns: AtomicBool::new(true),
            line: Line::of(f.df),
        };
        dev.rings.try_reserve_exact(BLK_MAX_RINGS as usize).map_err(|_| Error::NoMemory)?;
        dev.rings.extend((0..BLK_MAX_RINGS).map(|_| CachePadded::new(RingPoll::default())));
        let mut rio = Vec::new();
        rio.try_reserve_exact(BLK_MAX_RINGS as usize).map_err(|_| Error::NoMemory)?;
        rio.extend((0..BLK_MAX_RINGS).map(|_| RingIo::default()));
        let ncores = crate::percpu::online_count().max(1);
        dev.counts.try_reserve_exact(ncores).map_err(|_| Error::NoMemory)?;
        dev.counts.extend((0..ncores).map(|_| CachePadded::new(Counts::default())));
        let mut slot = Vec::new();
        slot.try_reserve_exact(1).map_err(|_| Error::NoMemory)?;
        let transport = pci::with_root(|root| PciTransport::new::<KernelHal, _>(root, f.df)).ok_or(Error::NotFound)?.map_err(|_| Error::Unsupported)?;
        let drv = Virtio::new(transport).map_err(io_error)?;
        dev.capacity = drv.capacity();
        dev.readonly = drv.readonly();
        slot.push(DriverState { drv, inflight: 0, rio });
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
        if self.dedicated() {
            return Err(Error::NotPermitted);
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
                    // Checked again under the lock: the mode changes under it.
                    if self.dedicated() {
                        return Err(Error::NotPermitted);
                    }
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
            // The mode changes under the lock (and only with nothing in flight): a request placed
            // here is never in the device while a kernel core owns the queue.
            if self.dedicated() {
                return Err(Error::NotPermitted);
            }
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
        for r in &self.rings {
            s.drops += r.refused.load(Ordering::Relaxed);
        }
        for c in self.counts.iter().map(|c| &**c).chain(self.rings.iter().map(|r| &r.counts)) {
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

// ---- Dedicated mode: a kernel core owns the virtqueue (abi::blk has the ring layout)

impl BlkDev {
    fn dedicated(&self) -> bool {
        self.mode.load(Ordering::Acquire) == BLK_MODE_DEDICATED
    }

    /// Page `p` of the pinned segment as atomic words (the program writes it at the same time).
    fn page(&self, p: u64) -> &[AtomicU64; 512] {
        let pa = self.pages[p as usize];
        // SAFETY: the segment is pinned while `self` lives (its frames stay allocated and in
        // place), `pa` is a whole page in the physical window, and every access is atomic.
        unsafe { &*(phys_to_virt(pa) as *const [AtomicU64; 512]) }
    }

    /// `device_conf` on a block device object.
    pub fn conf(&self, key: u64, value: u64) -> Result<(), Error> {
        if key != abi::CONF_BLK_MODE {
            return Err(Error::Unsupported);
        }
        let (mode, n) = (value & 0xFF, (value >> 8) & 0xFF);
        if value >> 16 != 0 {
            return Err(Error::InvalidArgument);
        }
        match mode {
            BLK_MODE_POLLING if n == 0 => {}
            BLK_MODE_DEDICATED if (1..=BLK_MAX_RINGS).contains(&n) => {
                if blk_data_offset(n) + PAGE_SIZE > self.seg_bytes() {
                    return Err(Error::OutOfRange);
                }
            }
            _ => return Err(Error::InvalidArgument),
        }
        // Under the driver lock: no Polling request is placed and no kernel core polls while
        // the mode changes; and only with nothing in the device.
        let mut g = self.driver.lock_irqsave();
        let st = g.first_mut().ok_or(Error::Busy)?;
        if self.attached.load(Ordering::Acquire) != u32::MAX || st.inflight != 0 || st.rio.iter().any(|r| r.active.is_some()) {
            return Err(Error::Busy);
        }
        if mode == BLK_MODE_DEDICATED {
            // Clear the header and rings (the program may have written anything there).
            for p in 0..blk_data_offset(n) / PAGE_SIZE {
                self.page(p).iter().for_each(|w| w.store(0, Ordering::Relaxed));
            }
            for r in &self.rings {
                r.sub_taken.store(0, Ordering::Relaxed);
                r.done_put.store(0, Ordering::Relaxed);
                r.done_seen.store(0, Ordering::Relaxed);
                r.broken.store(false, Ordering::Relaxed);
            }
            let h = self.page(0);
            h[1].store(n, Ordering::Relaxed);
            h[2].store(BLK_DETACHED, Ordering::Relaxed);
            h[0].store(BLK_MAGIC, Ordering::Release);
        }
        self.nrings.store(n, Ordering::Relaxed);
        self.mode.store(mode, Ordering::Release);
        Ok(())
    }

    fn stop_ring(&self, r: usize, why: &str) {
        let rp = &self.rings[r];
        if !rp.broken.swap(true, Ordering::Relaxed) {
            rp.counts.errors.fetch_add(1, Ordering::Relaxed);
            crate::log::kprintln!("blk: ring {r} stopped: {why}");
        }
    }

    /// Whether ring `r`'s completion ring has a free slot. The program's count is read again
    /// only when the last reading leaves none; an impossible count stops the ring.
    fn done_room(&self, r: usize) -> bool {
        let rp = &self.rings[r];
        let put = rp.done_put.load(Ordering::Relaxed);
        let seen = rp.done_seen.load(Ordering::Relaxed);
        if put - seen < BLK_RING_ENTRIES {
            return true;
        }
        let fresh = self.page(blk_done_page(r as u64))[(BLK_RING_CONSUMER / 8) as usize].load(Ordering::Acquire);
        if fresh < seen || fresh > put {
            self.stop_ring(r, "completion count impossible");
            return false;
        }
        rp.done_seen.store(fresh, Ordering::Relaxed);
        put - fresh < BLK_RING_ENTRIES
    }

    /// Answer submit entry `seq` of ring `r` (room was checked before it was taken), and count
    /// a transfer that succeeded (`write`: `None` for a flush, counted by the caller).
    fn finish(&self, r: usize, seq: u64, write: Option<bool>, res: Result<u64, Error>) {
        let rp = &self.rings[r];
        match (write, res) {
            (None, _) | (_, Err(_)) => {}
            (Some(true), Ok(n)) => {
                rp.counts.writes.fetch_add(1, Ordering::Relaxed);
                rp.counts.bytes_out.fetch_add(n, Ordering::Relaxed);
            }
            (Some(false), Ok(n)) => {
                rp.counts.reads.fetch_add(1, Ordering::Relaxed);
                rp.counts.bytes_in.fetch_add(n, Ordering::Relaxed);
            }
        }
        if rp.broken.load(Ordering::Relaxed) {
            return;
        }
        let w = self.page(blk_done_page(r as u64));
        let put = rp.done_put.load(Ordering::Relaxed);
        let at = blk_slot_word(put);
        let words = blk_done_words(seq, res);
        for (k, v) in words.iter().enumerate() {
            w[at + 1 + k].store(*v, Ordering::Relaxed);
        }
        // Release: the words are visible before the tag that says they are there.
        w[at].store(blk_tag(put), Ordering::Release);
        rp.done_put.store(put + 1, Ordering::Relaxed);
    }

    /// The disk request for the next page of `a`: its first sector and its bytes in the segment.
    fn chunk(&self, a: &Active) -> (usize, &mut [u8]) {
        let off = a.offset + a.done;
        let in_page = off % PAGE_SIZE;
        let n = (a.len - a.done).min(PAGE_SIZE - in_page);
        // `blk_check` bounded `a.offset + a.len` by the pinned pages.
        let va = phys_to_virt(self.pages[(off / PAGE_SIZE) as usize] + in_page);
        // SAFETY: `n` bytes inside one pinned page of the segment, which stays allocated and in
        // place while `self` lives. The program may access the same bytes meanwhile; the slice is
        // only handed to the driver, which passes its address to the disk.
        let buf = unsafe { core::slice::from_raw_parts_mut(va as *mut u8, n as usize) };
        ((a.sector + a.done / BLK_SECTOR) as usize, buf)
    }

    /// Place the next page of ring `r`'s request in the virtqueue. False if the queue is full
    /// (tried again next round).
    fn place(&self, drv: &mut Virtio, inflight: &mut u32, io: &mut RingIo, r: usize) -> bool {
        let RingIo { active, token, req, resp } = io;
        let Some(a) = active else { return false };
        let (first, buf) = self.chunk(a);
        // SAFETY: `req`, `resp` (in `rio`, never moved while the device holds them) and `buf`
        // (a pinned page) stay valid until the completion is taken in `poll`, or the device is
        // reset (`shutdown`) before they go.
        let placed = unsafe {
            if a.write {
                drv.write_blocks_nb(first, req, buf, resp)
            } else {
                drv.read_blocks_nb(first, req, buf, resp)
            }
        };
        match placed {
            Ok(t) => {
                *token = Some(t);
                *inflight += 1;
                true
            }
            Err(virtio_drivers::Error::QueueFull) => false,
            Err(e) => {
                let a = *a;
                *active = None;
                self.rings[r].counts.errors.fetch_add(1, Ordering::Relaxed);
                self.finish(r, a.seq, Some(a.write), Err(io_error(e)));
                true
            }
        }
    }

    /// Read ring `r`'s next submit entry if it has arrived: (its words 1..=3).
    fn peek_submit(&self, r: usize) -> Option<[u64; 3]> {
        let w = self.page(blk_submit_page(r as u64));
        let seq = self.rings[r].sub_taken.load(Ordering::Relaxed);
        let at = blk_slot_word(seq);
        if w[at].load(Ordering::Acquire) != blk_tag(seq) {
            return None;
        }
        Some([w[at + 1].load(Ordering::Relaxed), w[at + 2].load(Ordering::Relaxed), w[at + 3].load(Ordering::Relaxed)])
    }

    /// Count ring `r`'s head entry taken, where the program reads it (its own line).
    fn advance_submit(&self, r: usize) -> u64 {
        let rp = &self.rings[r];
        let seq = rp.sub_taken.load(Ordering::Relaxed);
        rp.sub_taken.store(seq + 1, Ordering::Relaxed);
        self.page(blk_submit_page(r as u64))[(BLK_RING_CONSUMER / 8) as usize].store(seq + 1, Ordering::Release);
        seq
    }

    /// Check a submit entry's words: the request it asks for, or its error.
    fn check_entry(&self, op: u64, sector: u64, offset: u64, len: u64, n: u64) -> Result<Active, Error> {
        let write = match op {
            BUF_BLK_READ => false,
            BUF_BLK_WRITE => true,
            _ => return Err(Error::Unsupported),
        };
        blk_check(sector, offset, len, self.capacity, self.seg_bytes())?;
        if offset < blk_data_offset(n) {
            return Err(Error::OutOfRange);
        }
        if write && self.readonly {
            return Err(Error::NotPermitted);
        }
        Ok(Active { seq: 0, write, sector, offset, len, done: 0 })
    }

    /// One round of the kernel core: completions, then each ring's next request. Returns true
    /// if anything moved.
    pub fn poll(&self) -> bool {
        if self.dead.load(Ordering::Acquire) || !self.dedicated() {
            return false;
        }
        let Some(mut g) = self.driver.try_lock() else { return false };
        let Some(DriverState { drv, inflight, rio }) = g.first_mut() else { return false };
        let n = (self.nrings.load(Ordering::Relaxed) as usize).min(rio.len());
        let mut did = false;
        // Completions, in the used ring's order.
        while let Some(t) = drv.peek_used() {
            // Not one of ours (cannot happen: Polling requests are not in flight in this mode):
            // leave it rather than loop.
            let Some(r) = (0..n).find(|&r| rio[r].token == Some(t)) else { break };
            did = true;
            let RingIo { active, token, req, resp } = &mut rio[r];
            *token = None;
            *inflight -= 1;
            let Some(a) = active else { continue };
            let (_, buf) = self.chunk(a);
            let len = buf.len() as u64;
            // SAFETY: the same buffers `place` gave the device with this token.
            let r2 = unsafe {
                if a.write {
                    drv.complete_write_blocks(t, req, buf, resp)
                } else {
                    drv.complete_read_blocks(t, req, buf, resp)
                }
            };
            let a2 = *a;
            match r2 {
                Ok(()) => {
                    a.done += len;
                    if a.done == a.len {
                        *active = None;
                        self.finish(r, a2.seq, Some(a2.write), Ok(a2.len));
                    }
                }
                Err(e) => {
                    *active = None;
                    self.rings[r].counts.errors.fetch_add(1, Ordering::Relaxed);
                    self.finish(r, a2.seq, Some(a2.write), Err(io_error(e)));
                }
            }
        }
        // Each ring: the next page of its request, or its next entries.
        for r in 0..n {
            if self.rings[r].broken.load(Ordering::Relaxed) || rio[r].token.is_some() {
                continue;
            }
            if rio[r].active.is_some() {
                did |= self.place(drv, inflight, &mut rio[r], r);
                continue;
            }
            // A few entries per round (refused ones answer at once), then the next ring.
            for _ in 0..8 {
                if !self.done_room(r) {
                    break;
                }
                let Some(words) = self.peek_submit(r) else { break };
                let (op, sector, offset, len) = blk_submit_parse(words);
                if op == BUF_BLK_FLUSH && sector == 0 && offset == 0 && len == 0 {
                    // The crate's flush is synchronous and takes the next completion: only with
                    // nothing else in the device (the entry waits at the head meanwhile).
                    if *inflight != 0 {
                        break;
                    }
                    let seq = self.advance_submit(r);
                    did = true;
                    let rp = &self.rings[r];
                    rp.counts.flushes.fetch_add(1, Ordering::Relaxed);
                    let res = drv.flush().map(|()| 0).map_err(|e| {
                        rp.counts.errors.fetch_add(1, Ordering::Relaxed);
                        io_error(e)
                    });
                    self.finish(r, seq, None, res);
                    continue;
                }
                let seq = self.advance_submit(r);
                did = true;
                let checked = if op == BUF_BLK_FLUSH { Err(Error::InvalidArgument) } else { self.check_entry(op, sector, offset, len, n as u64) };
                match checked {
                    Ok(a) => {
                        rio[r].active = Some(Active { seq, ..a });
                        self.place(drv, inflight, &mut rio[r], r);
                        break;
                    }
                    Err(e) => {
                        self.rings[r].refused.fetch_add(1, Ordering::Relaxed);
                        self.finish(r, seq, None, Err(e));
                    }
                }
            }
        }
        did
    }

    /// Give the disk back, now: reset it (dropping the driver drops its transport, which resets
    /// the device, so no DMA reaches the segment after this), unpin the segment, and let the
    /// next block device object have the disk. Called when the device object goes; a kernel
    /// core may still hold this `BlkDev` for the rest of one poll, and then finds no driver.
    pub fn shutdown(&self) {
        self.dead.store(true, Ordering::Release);
        // Waits for a kernel core's round in progress (it holds the lock through it).
        let driver = core::mem::take(&mut *self.driver.lock());
        drop(driver);
        if self.owns.swap(false, Ordering::AcqRel) {
            self.seg.unpin();
            release(self.hwid);
        }
    }

    /// Write the attached core (or `BLK_DETACHED`) in the ring header (Dedicated).
    fn publish_attached(&self, core: u64) {
        if self.dedicated() {
            self.page(0)[2].store(core, Ordering::Release);
        }
    }
}

impl Drop for BlkDev {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Driver for BlkDev {
    fn poll(&self) -> bool {
        BlkDev::poll(self)
    }

    fn sleep_after_us(&self) -> Option<u64> {
        Some(KC_IDLE_US)
    }

    fn sleep_bound_us(&self, _armed: bool) -> u64 {
        KC_SLEEP_US
    }

    /// Before the kernel core halts: acknowledge the disk's interrupt (which lowers its line),
    /// look once more at the used ring, and if nothing completed route the line to this core,
    /// unmasked. A completion after the look raises the line again, and the level-triggered
    /// input delivers it as soon as the core enables interrupts, so none is lost. A submit
    /// entry waiting on a ring is work too (its request is placed by the next poll).
    fn arm(&self, apic_id: u32) -> Armed {
        if !self.line.exists() || self.dead.load(Ordering::Acquire) || !self.dedicated() {
            return Armed::NoLine;
        }
        let Some(mut g) = self.driver.try_lock() else { return Armed::Work };
        let Some(st) = g.first_mut() else { return Armed::NoLine };
        let _ = st.drv.ack_interrupt();
        if st.drv.peek_used().is_some() {
            return Armed::Work;
        }
        let n = (self.nrings.load(Ordering::Relaxed) as usize).min(st.rio.len());
        // A page waiting to be placed, or a submit entry that came after the last poll.
        let waiting = |r: usize| st.rio[r].active.is_some() || self.peek_submit(r).is_some();
        if (0..n).any(|r| st.rio[r].token.is_none() && !self.rings[r].broken.load(Ordering::Relaxed) && waiting(r)) {
            return Armed::Work;
        }
        if self.line.arm(apic_id) {
            Armed::Yes
        } else {
            Armed::NoLine
        }
    }

    fn disarm(&self) {
        self.line.disarm();
    }

    fn attached(&self) -> &AtomicU32 {
        &self.attached
    }

    /// Only in Dedicated mode (Polling needs no kernel core), and not once the object is gone.
    fn can_attach(&self) -> Result<(), Error> {
        if !self.dedicated() || self.dead.load(Ordering::Acquire) {
            return Err(Error::NotPermitted);
        }
        Ok(())
    }

    /// The ring header names the core while its kernel-core loop runs, and says `BLK_DETACHED`
    /// otherwise, which a waiting program reads as "no kernel core" (`NoSuchCore`) rather than
    /// spinning. Requests on the rings stay there when it is detached (and those in the device
    /// complete into the segment); attaching again resumes.
    fn serving(&self, core: Option<usize>) {
        if !self.dead.load(Ordering::Acquire) {
            self.publish_attached(core.map_or(BLK_DETACHED, |c| c as u64));
        }
    }

    fn shutdown(&self) {
        BlkDev::shutdown(self)
    }

    fn stat(&self) -> DeviceStat {
        BlkDev::stat(self)
    }

    fn conf(&self, key: u64, value: u64) -> Result<(), Error> {
        BlkDev::conf(self, key, value)
    }

    /// The first sector in `seg.share` (`seg.object` reserved), the bytes of the request segment
    /// in `offset` and `len`.
    fn buf(&self, b: &abi::DeviceBuf) -> Result<u64, Error> {
        BlkDev::buf(self, b.buf_type, b.seg.share, b.seg.object, b.offset, b.len)
    }
}
