//! Device objects. The machine model has one real device: the COM1 console (hwid 0).
//! `device_buf` transmits bytes from a segment, which is how Corey feeds buffers to devices.
//!
//! And one pseudo-device, Corey's syscall device (section 4.4): a ring of system-call
//! requests and completions in a segment the program maps (`abi::RingSlot` has the
//! protocol). A kernel core it is attached to (`pcore_add_device`, roles.rs) takes requests
//! from it and runs them with the identity the ring was made with (`Ring::shares`,
//! `Ring::root_ar`), while the program that submitted them keeps running.

use alloc::alloc::Layout;
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use super::kref::{KRef, KWeak};
use crate::arch::x86_64::apic;
use crate::dev::{DriverRef, SharedMemory};
use crate::percpu;
use percore::{CachePadded, TicketLock, MAX_CORES};
use super::{KObject, ObjRef};
use abi::{
    DeviceInfo, DeviceStat, Error, CONF_CONSOLE_CRLF, DEVICE_CONSOLE, DEVICE_SYSCALL_RING, HWID_SYSCALL_RING, MAX_RING_SHARES,
    MAX_RING_SLOTS, PAGE_SIZE, RING_ATTACHED, RING_BROKEN, RING_DETACHED, RING_DONE, RING_FREE, RING_SLOT_BYTES, RING_STOPPED,
    RING_SUBMITTED, RING_TAKEN, ROLE_KC,
};

pub const CONSOLE_HWID: u64 = 0;

/// Core that allocated the console last (for `device_list`), or u32::MAX.
static CONSOLE_OWNER: AtomicU32 = AtomicU32::new(u32::MAX);
/// Console traffic (the device is shared by nature; its counters are the device's own).
static CONSOLE_OUT: AtomicU64 = AtomicU64::new(0);
static CONSOLE_BUFFERS: AtomicU64 = AtomicU64::new(0);

/// `Ring::attached` when no core has the ring.
pub const NOT_ATTACHED: u32 = u32::MAX;

pub struct Device {
    pub hwid: u64,
    pub kind: u32,
    crlf: AtomicBool,
    /// The ring of a syscall pseudo-device. Its own allocation, so the kernel core that
    /// polls it can hold it strongly without keeping the device object (and through it the
    /// shares that hold the device) alive: freeing the device detaches the ring.
    pub ring: Option<KRef<Ring>>,
    /// The driver of a hardware device (`dev::KINDS`: a virtual NIC over the network card,
    /// `abi::net`; a block device object over a disk, `abi::blk`). Its own allocation for the
    /// same reason as `ring`: the kernel core polling it holds it, not the device object.
    pub drv: Option<DriverRef>,
}

/// A taken request: its slot sequence number, call number and arguments (`nr == None`: the
/// slot's state was malformed).
#[derive(Clone, Copy, Default)]
pub struct Taken {
    pub nr: Option<u64>,
    pub args: [u64; 6],
}

/// Most requests a kernel core takes from one ring in one go (the most slots one page holds).
pub const TAKE_MAX: usize = (PAGE_SIZE / RING_SLOT_BYTES) as usize;

pub struct Ring {
    /// The segment whose first bytes are the ring (`RingHeader`, then the slots).
    pub seg: ObjRef,
    pub slots: u64,
    /// Identity the requests run with (weak: the ring must not keep the shares that hold its
    /// own device alive, which would be a cycle nothing frees).
    pub root_ar: KWeak<KObject>,
    pub shares: Vec<KWeak<KObject>>,
    /// The core that made the ring (for the record; requests do not run as that core).
    pub maker_core: u32,
    /// Sequence number of the next slot to take. Only the core serving the ring writes it.
    pub head: AtomicU64,
    pub completed: AtomicU64,
    /// The core the ring is attached to, or `NOT_ATTACHED`; changed under that core's ring
    /// list lock (`rings_of`).
    pub attached: AtomicU32,
    /// What the header says (`RING_*` status, and whether the kernel core polls).
    pub status: AtomicU32,
    pub polling: AtomicU32,
    /// The device was freed: take nothing more.
    pub dead: AtomicBool,
    /// Held by the core taking and completing a batch: a ring moved to another kernel core
    /// while its old one is between reading its list and taking is served by one at a time.
    pub serving: AtomicBool,
}

/// Where slot `i` lives: (page index, word index of its first word).
fn slot_pos(i: u64) -> (u64, usize) {
    let byte = RING_SLOT_BYTES * (i + 1);
    (byte / PAGE_SIZE, ((byte % PAGE_SIZE) / 8) as usize)
}

impl Ring {
    /// Rewrite the header from the kernel's view (every writer rewrites all of it under the
    /// segment lock, so the last one leaves the latest values). Returns false if the ring
    /// page cannot be written (the ring is broken).
    pub fn publish(&self) -> bool {
        let Ok(seg) = self.seg.as_segment() else { return false };
        seg.with_shared_page(0, |w| {
            let word0 = self.status.load(Ordering::Acquire) as u64 | (self.attached.load(Ordering::Acquire) as u64) << 32;
            w[0].store(word0, Ordering::Release);
            w[1].store(self.polling.load(Ordering::Acquire) as u64, Ordering::Release);
        })
        .is_ok()
    }

    /// Whether the slot at the head holds something to take (a request, or a malformed
    /// state), or the ring cannot be read (`take` then says so). False for a dead or broken
    /// ring. Only loads: this is a kernel core's poll.
    #[inline(never)]
    pub fn has_request(&self) -> bool {
        if self.dead.load(Ordering::Acquire) || self.status.load(Ordering::Acquire) == abi::RING_BROKEN {
            return false;
        }
        let Ok(seg) = self.seg.as_segment() else { return true };
        let (page, at) = slot_pos(self.head.load(Ordering::Relaxed) % self.slots);
        seg.with_shared_page(page, |w| !matches!(w[at].load(Ordering::Acquire) as u32, RING_FREE | RING_TAKEN | RING_DONE)).unwrap_or(true)
    }

    /// How many slots one `take` can reach from sequence number `seq`: to the end of its
    /// page or of the ring, whichever comes first.
    pub fn run_length(&self, seq: u64) -> usize {
        let i = seq % self.slots;
        let (page, _) = slot_pos(i);
        let page_end = (PAGE_SIZE * (page + 1)) / RING_SLOT_BYTES - 1; // first slot index past the page
        (page_end.min(self.slots) - i) as usize
    }

    /// Take up to `out.len()` submitted requests in order, from one page. Returns how many
    /// (0: nothing submitted at the head), or an error if the ring cannot be used.
    #[inline(never)]
    pub fn take(&self, out: &mut [Taken]) -> Result<usize, Error> {
        let seg = self.seg.as_segment()?;
        let head = self.head.load(Ordering::Relaxed);
        let first = head % self.slots;
        let (page, _) = slot_pos(first);
        let n = seg.with_shared_page(page, |w| {
            let mut n = 0;
            // A program rewriting a slot as we take it could keep the CAS failing: give up
            // after a few tries (the next poll looks again).
            let mut races = 0;
            while n < out.len() && races < 4 {
                // No wrap inside one take: it stops at the ring's end.
                let i = first + n as u64;
                if i >= self.slots {
                    break;
                }
                let (p, at) = slot_pos(i);
                if p != page {
                    break;
                }
                let word0 = w[at].load(Ordering::Acquire);
                let state = word0 as u32;
                if matches!(state, RING_FREE | RING_TAKEN | RING_DONE) {
                    break;
                }
                // Submitted (or malformed): take it, unless the program cancels it first.
                let taken = (word0 & !0xFFFF_FFFF) | RING_TAKEN as u64;
                if w[at].compare_exchange(word0, taken, Ordering::AcqRel, Ordering::Acquire).is_err() {
                    races += 1;
                    continue; // changed under us: look again
                }
                out[n] = Taken {
                    nr: (state == RING_SUBMITTED).then_some(word0 >> 32),
                    args: core::array::from_fn(|k| w[at + 1 + k].load(Ordering::Relaxed)),
                };
                n += 1;
            }
            n
        })?;
        if n > 0 {
            self.head.store(head + n as u64, Ordering::Relaxed);
        }
        Ok(n)
    }

    /// Store the results of the `results.len()` requests taken last, which start at
    /// sequence `first`, and mark them done.
    #[inline(never)]
    pub fn complete(&self, first: u64, results: &[i64]) -> Result<(), Error> {
        let seg = self.seg.as_segment()?;
        // `take` took them from one page, without wrapping.
        let start = first % self.slots;
        let (page, _) = slot_pos(start);
        seg.with_shared_page(page, |w| {
            for (k, &r) in results.iter().enumerate() {
                let (_, at) = slot_pos(start + k as u64);
                w[at + 7].store(r as u64, Ordering::Relaxed);
                let word0 = w[at].load(Ordering::Relaxed);
                w[at].store((word0 & !0xFFFF_FFFF) | RING_DONE as u64, Ordering::Release);
            }
        })?;
        self.completed.fetch_add(results.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// A segment as a driver sees it (`dev::SharedMemory`): what a driver is handed instead of the
/// object, so drivers know nothing of kernel objects.
struct SegmentMemory(ObjRef);

impl SegmentMemory {
    /// On the heap, for the driver to keep; `NoMemory` (never a panic) if there is no room.
    fn boxed(seg: ObjRef) -> Result<Box<dyn SharedMemory>, Error> {
        let layout = Layout::new::<SegmentMemory>();
        const { assert!(core::mem::size_of::<SegmentMemory>() > 0) };
        // SAFETY: the layout is not zero-sized (checked above).
        let p = unsafe { alloc::alloc::alloc(layout) } as *mut SegmentMemory;
        if p.is_null() {
            return Err(Error::NoMemory);
        }
        // SAFETY: `p` is a fresh allocation with `SegmentMemory`'s layout, written whole here
        // before the Box owns it (and frees it with the same layout).
        unsafe {
            p.write(SegmentMemory(seg));
            Ok(Box::from_raw(p))
        }
    }
}

impl SharedMemory for SegmentMemory {
    fn nbytes(&self) -> Result<u64, Error> {
        Ok(self.0.as_segment()?.nbytes())
    }

    fn pin(&self, npages: usize) -> Result<Vec<u64>, Error> {
        self.0.as_segment()?.pin(npages)
    }

    fn unpin(&self) {
        if let Ok(s) = self.0.as_segment() {
            s.unpin();
        }
    }
}

pub fn list() -> Result<Vec<DeviceInfo>, Error> {
    let mut name = [0u8; 16];
    name[..4].copy_from_slice(b"com1");
    let mut l = crate::dev::list()?;
    l.try_reserve(1).map_err(|_| Error::NoMemory)?;
    l.insert(0, DeviceInfo { hwid: CONSOLE_HWID, kind: DEVICE_CONSOLE, owner_core: CONSOLE_OWNER.load(Ordering::Relaxed), name });
    Ok(l)
}

impl Device {
    pub fn open(hwid: u64) -> Result<Device, Error> {
        if hwid != CONSOLE_HWID {
            return Err(Error::NotFound);
        }
        CONSOLE_OWNER.store(percore::cpu_id() as u32, Ordering::Relaxed);
        Ok(Device { hwid, kind: DEVICE_CONSOLE, crlf: AtomicBool::new(true), ring: None, drv: None })
    }

    /// A device object over the hardware device with hwid `hwid`, of kind `kind` (`dev::KINDS`),
    /// sharing `seg` with its program; `arg` is `device_alloc`'s last argument.
    pub fn open_hw(hwid: u64, kind: &crate::dev::Kind, seg: ObjRef, arg: u64) -> Result<Device, Error> {
        let d = (kind.open)(hwid, SegmentMemory::boxed(seg)?, arg)?;
        Ok(Device { hwid, kind: kind.kind, crlf: AtomicBool::new(false), ring: None, drv: Some(d) })
    }

    /// A syscall ring over the first bytes of `seg`, acting with `root_ar` and `shares`.
    pub fn open_ring(seg: ObjRef, slots: u64, root_ar: &ObjRef, shares: &[ObjRef], maker_core: u32) -> Result<Device, Error> {
        if slots == 0 || slots > MAX_RING_SLOTS || shares.len() > MAX_RING_SHARES {
            return Err(Error::InvalidArgument);
        }
        if seg.as_segment()?.nbytes() < RING_SLOT_BYTES * (slots + 1) {
            return Err(Error::OutOfRange);
        }
        let mut weak = Vec::new();
        weak.try_reserve_exact(shares.len()).map_err(|_| Error::NoMemory)?;
        weak.extend(shares.iter().map(KRef::downgrade));
        let ring = Ring {
            seg,
            slots,
            root_ar: KRef::downgrade(root_ar),
            shares: weak,
            maker_core,
            head: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            attached: AtomicU32::new(NOT_ATTACHED),
            status: AtomicU32::new(abi::RING_DETACHED),
            polling: AtomicU32::new(0),
            dead: AtomicBool::new(false),
            serving: AtomicBool::new(false),
        };
        let ring = KRef::try_new(ring).map_err(|_| Error::NoMemory)?;
        // The header says "detached" from the start (a recycled page could say otherwise).
        if !ring.publish() {
            return Err(Error::Busy);
        }
        Ok(Device { hwid: HWID_SYSCALL_RING, kind: DEVICE_SYSCALL_RING, crlf: AtomicBool::new(false), ring: Some(ring), drv: None })
    }

    pub fn stat(&self) -> DeviceStat {
        if let Some(d) = &self.drv {
            return d.get().stat();
        }
        if let Some(r) = &self.ring {
            return DeviceStat { hwid: self.hwid, kind: self.kind, buffers: r.completed.load(Ordering::Relaxed), ..Default::default() };
        }
        DeviceStat {
            hwid: self.hwid,
            kind: self.kind,
            bytes_out: CONSOLE_OUT.load(Ordering::Relaxed),
            buffers: CONSOLE_BUFFERS.load(Ordering::Relaxed),
            ..Default::default()
        }
    }

    pub fn conf(&self, key: u64, value: u64) -> Result<(), Error> {
        if let Some(d) = &self.drv {
            return d.get().conf(key, value);
        }
        if let Some(r) = &self.ring {
            return match key {
                abi::CONF_RING_KICK => {
                    kick_ring(r);
                    Ok(())
                }
                _ => Err(Error::Unsupported),
            };
        }
        match key {
            CONF_CONSOLE_CRLF => match value {
                0 | 1 => {
                    self.crlf.store(value == 1, Ordering::Relaxed);
                    Ok(())
                }
                _ => Err(Error::InvalidArgument),
            },
            _ => Err(Error::Unsupported),
        }
    }

    /// Transmit bytes.
    pub fn transmit(&self, bytes: &[u8]) {
        if self.crlf.load(Ordering::Relaxed) {
            crate::arch::x86_64::serial::write_bytes_locked(bytes);
        } else {
            crate::arch::x86_64::serial::write_raw_locked(bytes);
        }
        CONSOLE_OUT.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    }

    pub fn count_buffer(&self) {
        CONSOLE_BUFFERS.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if let Some(d) = &self.drv {
            // The kernel core polling it lets go, and the device is reset now (a kernel core
            // in the middle of a round finishes it and finds no device).
            let _ = crate::dev::detach(d, None);
            d.get().shutdown();
        }
        if let Some(r) = &self.ring {
            // A kernel core running requests from it holds the ring and finishes them; it
            // takes no more.
            r.dead.store(true, Ordering::Release);
            let _ = detach_ring(r, None);
        }
    }
}

// ---- Which kernel core serves each ring (`pcore_add_device`; the serving loop is in roles.rs)

/// The rings attached to each core (`pcore_add_device`). Only that core polls its list; other
/// cores take the lock to attach and detach, and every header status change happens under
/// it, so the statuses a core publishes are ordered.
static RINGS: [CachePadded<TicketLock<Vec<KRef<Ring>>>>; MAX_CORES] = [const { CachePadded::new(TicketLock::new(Vec::new())) }; MAX_CORES];

/// The list of rings attached to `core` (its kernel core's poll takes the lock).
pub fn rings_of(core: usize) -> &'static TicketLock<Vec<KRef<Ring>>> {
    &RINGS[core]
}

/// Set the status (if given) and the polling flag of every ring attached to `core`, and
/// publish them in the rings' headers.
pub fn set_rings_state(core: usize, status: Option<u32>, polling: u32) {
    let list = RINGS[core].lock();
    for r in list.iter() {
        if let Some(st) = status {
            if r.status.load(Ordering::Relaxed) != RING_BROKEN {
                r.status.store(st, Ordering::Release);
            }
        }
        r.polling.store(polling, Ordering::Release);
        if !r.publish() {
            r.status.store(RING_BROKEN, Ordering::Release);
        }
    }
}

/// `pcore_add_device` of a ring: attach it to `core`, which polls it while it is a kernel
/// core. `Busy` if it is attached somewhere already.
pub fn attach_ring(core: usize, ring: &KRef<Ring>) -> Result<(), Error> {
    let target = percpu::get(core).filter(|c| c.online.load(Ordering::Acquire)).ok_or(Error::NoSuchCore)?;
    let mut list = RINGS[core].lock();
    if ring.attached.compare_exchange(NOT_ATTACHED, core as u32, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return Err(Error::Busy);
    }
    if list.try_reserve(1).is_err() {
        ring.attached.store(NOT_ATTACHED, Ordering::Release);
        return Err(Error::NoMemory);
    }
    list.push(ring.clone());
    let kc = target.role.load(Ordering::Acquire) == ROLE_KC;
    if ring.status.load(Ordering::Relaxed) != RING_BROKEN {
        ring.status.store(if kc { RING_ATTACHED } else { RING_STOPPED }, Ordering::Release);
    }
    ring.polling.store((kc && target.polling.load(Ordering::Acquire)) as u32, Ordering::Release);
    if !ring.publish() {
        ring.status.store(RING_BROKEN, Ordering::Release);
    }
    Ok(())
}

/// Take a ring from the core it is attached to (`only`: provided it is that core).
/// `NotFound` if it is not attached (there). Requests not taken stay in the ring.
pub fn detach_ring(ring: &KRef<Ring>, only: Option<usize>) -> Result<(), Error> {
    loop {
        let core = ring.attached.load(Ordering::Acquire);
        if core == NOT_ATTACHED || only.is_some_and(|c| c != core as usize) {
            return Err(Error::NotFound);
        }
        let mut list = RINGS[core as usize].lock();
        if ring.attached.load(Ordering::Acquire) != core {
            continue; // moved meanwhile: look again
        }
        let removed = list.iter().position(|r| KRef::ptr_eq(r, ring)).map(|i| list.swap_remove(i));
        // An empty list gives its buffer back (a core with no rings holds no memory).
        let buffer = if list.is_empty() { core::mem::take(&mut *list) } else { Vec::new() };
        ring.attached.store(NOT_ATTACHED, Ordering::Release);
        if ring.status.load(Ordering::Relaxed) != RING_BROKEN {
            ring.status.store(RING_DETACHED, Ordering::Release);
        }
        ring.polling.store(0, Ordering::Release);
        let _ = ring.publish();
        drop(list);
        // Our reference goes outside the lock (the ring's last one frees its segment).
        drop(removed);
        drop(buffer);
        return Ok(());
    }
}

/// The doorbell: wake the kernel core a ring is attached to if it is asleep.
pub fn kick_ring(ring: &Ring) {
    let core = ring.attached.load(Ordering::Acquire);
    if let Some(kc) = percpu::get(core as usize) {
        if kc.role.load(Ordering::Acquire) == ROLE_KC && !kc.polling.load(Ordering::Acquire) {
            apic::send_ipi(kc.apic_id, apic::VECTOR_WAKE);
        }
    }
}
