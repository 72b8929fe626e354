//! The network card: `virtio-net-pci` through the `virtio-drivers` crate's raw driver, as a
//! Corey device object. `abi::net` has the contract (channel segment layout, buffer
//! ownership, the Dedicated / Polling / Inline modes, steering); docs/net.md the paths.
//!
//! A *virtual NIC* (`NetDev`) owns the card while it lives. Its channel segment is pinned
//! (`Segment::pin`): the device reads and writes packet buffers in place, at the physical
//! addresses recorded here, and the kernel reads and writes the channels' rings through the
//! physical window. Nothing a program writes there is trusted: ring counts are checked, buffer
//! indexes and lengths are checked, and a channel whose rings say something impossible is
//! stopped and counted, never followed.
//!
//! Who touches what: the driver state (the virtqueues and which buffer each descriptor holds)
//! sits under one MCS lock. In Dedicated mode only the kernel core the virtual NIC is attached
//! to takes it; in Polling mode service cores take it too (`device_buf`), as Corey's Polling
//! configuration does. Each channel's kernel-side cursors and counters are on their own cache
//! lines, written by the core that polls (and, for a channel's own `device_buf` calls, by that
//! channel's core, in separate lines).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use abi::{
    net_bufs_offset, net_buffers, net_entry, net_entry_buffer, net_entry_is, net_entry_len, net_ring_page, DeviceStat,
    Error, NetHeader, DEVICE_NET, NET_BUF_BYTES, NET_FRAME_OFFSET, NET_MAGIC, NET_MAX_CHANNELS, NET_MAX_FRAME, NET_MIN_BUFFERS_PER_CHANNEL,
    NET_MODE_DEDICATED, NET_MODE_INLINE, NET_MODE_POLLING, NET_RING_CONSUMER, NET_RING_ENTRIES, NET_RING_ENTRIES_AT,
    NET_RING_RX, NET_RING_RXFREE, NET_RING_TX, NET_RING_TXDONE, PAGE_SIZE,
};
use percore::mcs::McsLock;
use percore::pad::CachePadded;
use virtio_drivers::device::net::VirtIONetRaw;
use virtio_drivers::transport::pci::PciTransport;
use virtio_drivers::transport::DeviceType;

use super::pci;
use super::virtio::KernelHal;
use super::{Armed, Driver, Line, SharedMemory};
use crate::mm::phys_to_virt;

/// Descriptors per virtqueue.
const QUEUE_SIZE: usize = 256;
type Virtio = VirtIONetRaw<KernelHal, PciTransport, QUEUE_SIZE>;

/// No buffer in a descriptor slot.
const NONE: u32 = u32::MAX;

/// Set while a virtual NIC owns the card.
static CARD_TAKEN: AtomicBool = AtomicBool::new(false);

/// The card's hwid, if the PCI walk found one.
pub fn card() -> Option<pci::Function> {
    pci::find_virtio(DeviceType::Network)
}

/// The virtio driver and which buffer each in-flight descriptor holds.
struct DriverState {
    drv: Virtio,
    /// Transmit descriptor token -> `channel << 16 | buffer`, and the frame's length.
    tx_owner: [u32; QUEUE_SIZE],
    tx_len: [u16; QUEUE_SIZE],
    /// Receive descriptor token -> buffer.
    rx_owner: [u32; QUEUE_SIZE],
    rx_posted: usize,
    hdr_len: usize,
}

/// Kernel-side state of one channel written by the polling core.
#[derive(Default)]
struct ChanPoll {
    /// Our cursors: entries taken from TX and RXFREE, entries put on RX and TXDONE.
    tx_taken: AtomicU64,
    rxfree_taken: AtomicU64,
    rx_put: AtomicU64,
    txdone_put: AtomicU64,
    /// The program's consumer counts of RX and TXDONE as last read.
    rx_seen: AtomicU64,
    txdone_seen: AtomicU64,
    /// Transmissions of this channel in the device (each needs a TXDONE entry later).
    tx_inflight: AtomicU64,
    packets_in: AtomicU64,
    bytes_in: AtomicU64,
    packets_out: AtomicU64,
    bytes_out: AtomicU64,
    drops: AtomicU64,
    errors: AtomicU64,
    /// The channel's rings said something impossible: nothing more is taken from or put on them.
    broken: AtomicBool,
}

/// A virtual NIC: the card, one channel segment, `nchannels` channels.
pub struct NetDev {
    pub hwid: u64,
    /// The segment the device shares with its program (pinned while `owns` the device).
    seg: Box<dyn SharedMemory>,
    /// Physical address of every page of the pinned segment.
    pages: Vec<u64>,
    nchannels: u64,
    nbuffers: u64,
    pub mode: AtomicU64,
    /// The driver state, on the heap: with its descriptor tables it is several KiB, too big
    /// to move around on a 64 KiB kernel stack (a Vec of at most one, for a fallible
    /// allocation on stable Rust). Empty once the device is reset.
    driver: McsLock<Vec<DriverState>>,
    chans: Vec<CachePadded<ChanPoll>>,
    /// Frames dropped before a channel was known (malformed, or no room anywhere).
    unsteered_drops: CachePadded<AtomicU64>,
    /// Per channel: the APIC id + 1 of the service core asleep in `wait` (0: none). The one
    /// line a channel shares on purpose: the service core sets it, the core that fills the
    /// channel's ring reads it and, if set, clears it and sends the wake-up IPI.
    waiters: Vec<CachePadded<AtomicU32>>,
    /// `CONF_NET_KC_IDLE`: microseconds of empty polls before the kernel core sleeps (0:
    /// never).
    kc_idle_us: AtomicU64,
    /// The core polling it (`pcore_add_device`), or `u32::MAX`.
    pub attached: AtomicU32,
    /// The device object is gone: poll nothing more.
    pub dead: AtomicBool,
    /// This virtual NIC holds the card and a pin on the segment (`shutdown` gives both back).
    owns_card: AtomicBool,
    /// The card's interrupt line (armed only while a core sleeps waiting for frames).
    line: Line,
}

impl NetDev {
    /// `device_alloc` of the card: a virtual NIC over `seg` with `nchannels` channels.
    pub fn open(hwid: u64, seg: Box<dyn SharedMemory>, nchannels: u64) -> Result<NetDev, Error> {
        let f = card().filter(|f| f.hwid() == hwid).ok_or(Error::NotFound)?;
        if nchannels == 0 || nchannels > NET_MAX_CHANNELS {
            return Err(Error::InvalidArgument);
        }
        let nbytes = seg.nbytes()?;
        let nbuffers = net_buffers(nbytes, nchannels);
        if nbuffers < NET_MIN_BUFFERS_PER_CHANNEL * nchannels {
            return Err(Error::OutOfRange);
        }
        if CARD_TAKEN.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return Err(Error::Busy);
        }
        // Only the pages the channels use: the header, the rings and `nbuffers` buffers.
        let used = (net_bufs_offset(nchannels) + nbuffers * NET_BUF_BYTES).div_ceil(PAGE_SIZE) as usize;
        let pages = match seg.pin(used) {
            Ok(p) => p,
            Err(e) => {
                CARD_TAKEN.store(false, Ordering::Release);
                return Err(e);
            }
        };
        // From here on, dropping `dev` unpins and frees the card.
        let mut chans = Vec::new();
        let mut dev = NetDev {
            hwid,
            seg,
            pages,
            nchannels,
            nbuffers,
            mode: AtomicU64::new(NET_MODE_DEDICATED),
            driver: McsLock::new(Vec::new()),
            chans: Vec::new(),
            unsteered_drops: CachePadded::new(AtomicU64::new(0)),
            waiters: Vec::new(),
            kc_idle_us: AtomicU64::new(abi::NET_KC_IDLE_POLL_US),
            attached: AtomicU32::new(u32::MAX),
            dead: AtomicBool::new(false),
            owns_card: AtomicBool::new(true),
            line: Line::of(f.df),
        };
        chans.try_reserve_exact(nchannels as usize).map_err(|_| Error::NoMemory)?;
        chans.extend((0..nchannels).map(|_| CachePadded::new(ChanPoll::default())));
        dev.chans = chans;
        let mut waiters = Vec::new();
        waiters.try_reserve_exact(nchannels as usize).map_err(|_| Error::NoMemory)?;
        waiters.extend((0..nchannels).map(|_| CachePadded::new(AtomicU32::new(0))));
        dev.waiters = waiters;
        let mut slot = Vec::new();
        slot.try_reserve_exact(1).map_err(|_| Error::NoMemory)?;
        let transport = pci::with_root(|root| PciTransport::new::<KernelHal, _>(root, f.df)).ok_or(Error::NotFound)?.map_err(|_| Error::Unsupported)?;
        let drv = Virtio::new(transport).map_err(|e| match e {
            virtio_drivers::Error::DmaError => Error::NoMemory,
            _ => Error::Unsupported,
        })?;
        let card_mac = drv.mac_address();
        // The header the device puts before each frame: 12 bytes (virtio 1.0), 10 (legacy).
        let mut probe = [0u8; 16];
        let hdr_len = drv.fill_buffer_header(&mut probe).map_err(|_| Error::Unsupported)?;
        slot.push(DriverState { drv, tx_owner: [NONE; QUEUE_SIZE], tx_len: [0; QUEUE_SIZE], rx_owner: [NONE; QUEUE_SIZE], rx_posted: 0, hdr_len });
        *dev.driver.lock() = slot;
        // Clear the rings (a recycled segment could hold anything) and write the header.
        for p in 0..net_ring_page(nchannels, 0) {
            dev.page(p).iter().for_each(|w| w.store(0, Ordering::Relaxed));
        }
        let hdr = NetHeader { magic: NET_MAGIC, nchannels, nbuffers, mac: card_mac, _pad: [0; 2], mtu: 1500 };
        let w = dev.page(0);
        w[0].store(hdr.magic, Ordering::Relaxed);
        w[1].store(hdr.nchannels, Ordering::Relaxed);
        w[2].store(hdr.nbuffers, Ordering::Relaxed);
        let mut mac = [0u8; 8];
        mac[..6].copy_from_slice(&hdr.mac);
        w[3].store(u64::from_le_bytes(mac), Ordering::Relaxed);
        w[4].store(hdr.mtu, Ordering::Release);
        Ok(dev)
    }

    /// Page `p` of the pinned segment as atomic words (a program writes it at the same time).
    fn page(&self, p: u64) -> &[AtomicU64; 512] {
        let pa = self.pages[p as usize];
        // SAFETY: the segment is pinned while `self` lives (its frames stay allocated and in
        // place), `pa` is a whole page in the physical window, and every access is atomic.
        unsafe { &*(phys_to_virt(pa) as *const [AtomicU64; 512]) }
    }

    fn ring(&self, channel: u64, ring: u64) -> &[AtomicU64; 512] {
        self.page(net_ring_page(channel, ring))
    }

    /// Kernel address of buffer `b`'s first byte.
    fn buffer_va(&self, b: u64) -> u64 {
        let off = net_bufs_offset(self.nchannels) + b * NET_BUF_BYTES;
        phys_to_virt(self.pages[(off / PAGE_SIZE) as usize] + off % PAGE_SIZE)
    }

    /// The bytes of buffer `b` the device uses: the header before the frame, then room for
    /// `len` frame bytes.
    ///
    /// # Safety
    /// The buffer is memory the device and the program also access: the slice may only be
    /// handed to the driver (which takes its address) or read with the program's writes
    /// tolerated (steering reads a copy of the headers).
    unsafe fn dma_slice(&self, b: u64, hdr_len: usize, len: usize) -> &'static mut [u8] {
        let start = self.buffer_va(b) + NET_FRAME_OFFSET - hdr_len as u64;
        // SAFETY: inside one pinned buffer (hdr_len <= NET_FRAME_OFFSET, len <= NET_MAX_FRAME);
        // see the function's contract for the aliasing.
        unsafe { core::slice::from_raw_parts_mut(start as *mut u8, hdr_len + len) }
    }

    fn stopped(&self, c: u64, why: &str) {
        let ch = &self.chans[c as usize];
        if !ch.broken.swap(true, Ordering::Relaxed) {
            ch.errors.fetch_add(1, Ordering::Relaxed);
            crate::log::kprintln!("net: channel {c} stopped: {why}");
        }
    }

    /// Next entry of a ring the program produces (`TX`, `RXFREE`), not yet taken: the slot
    /// holds it once its tag says so (abi::net: no producer count to read).
    fn peek_user(&self, c: u64, ring: u64, taken: &AtomicU64) -> Option<u64> {
        let w = self.ring(c, ring);
        let seq = taken.load(Ordering::Relaxed);
        let e = w[((NET_RING_ENTRIES_AT / 8) + seq % NET_RING_ENTRIES) as usize].load(Ordering::Acquire);
        net_entry_is(e, seq).then_some(e)
    }

    /// Count one entry taken, and store the count where the program reads it (our own line:
    /// the program looks at it only when it thinks the ring is full).
    fn advance_user(&self, c: u64, ring: u64, taken: &AtomicU64) {
        let v = taken.load(Ordering::Relaxed) + 1;
        taken.store(v, Ordering::Relaxed);
        self.ring(c, ring)[(NET_RING_CONSUMER / 8) as usize].store(v, Ordering::Release);
    }

    /// Free entries on a ring the kernel produces (`RX`, `TXDONE`), at least `need` if there
    /// are: the program's consumer count is read again only when the last reading (`seen`)
    /// leaves fewer. `None` if that count is impossible (the channel stops).
    fn room(&self, c: u64, ring: u64, put: &AtomicU64, seen: &AtomicU64, need: u64) -> Option<u64> {
        let p = put.load(Ordering::Relaxed);
        let cached = seen.load(Ordering::Relaxed);
        if NET_RING_ENTRIES - (p - cached) >= need {
            return Some(NET_RING_ENTRIES - (p - cached));
        }
        let fresh = self.ring(c, ring)[(NET_RING_CONSUMER / 8) as usize].load(Ordering::Acquire);
        if fresh < cached || fresh > p {
            self.stopped(c, "consumer count impossible");
            return None;
        }
        seen.store(fresh, Ordering::Relaxed);
        Some(NET_RING_ENTRIES - (p - fresh))
    }

    /// Put entry `(buffer, len)` on a ring the kernel produces; `room` said there is a slot.
    fn put(&self, c: u64, ring: u64, put: &AtomicU64, buffer: u64, len: u64) {
        let w = self.ring(c, ring);
        let seq = put.load(Ordering::Relaxed);
        w[((NET_RING_ENTRIES_AT / 8) + seq % NET_RING_ENTRIES) as usize].store(net_entry(seq, buffer, len), Ordering::Release);
        put.store(seq + 1, Ordering::Relaxed);
    }

    /// Put a transmit in the device for channel `c`. `Busy` when the device's queue is full or
    /// the channel's `TXDONE` ring could not take its completion.
    fn transmit(&self, st: &mut DriverState, c: u64, b: u64, len: u64) -> Result<(), Error> {
        if b >= self.nbuffers || !(14..=NET_MAX_FRAME).contains(&len) {
            return Err(Error::InvalidArgument);
        }
        let ch = &self.chans[c as usize];
        let inflight = ch.tx_inflight.load(Ordering::Relaxed);
        let room = self.room(c, NET_RING_TXDONE, &ch.txdone_put, &ch.txdone_seen, inflight + 1).ok_or(Error::Busy)?;
        if ch.tx_inflight.load(Ordering::Relaxed) >= room || !st.drv.can_send() {
            return Err(Error::Busy);
        }
        // SAFETY: a pinned buffer handed to the device until its completion.
        let buf = unsafe { self.dma_slice(b, st.hdr_len, len as usize) };
        st.drv.fill_buffer_header(buf).map_err(|_| Error::InvalidArgument)?;
        // SAFETY: the buffer stays pinned (and so valid) until `transmit_complete` or the
        // device's reset when the virtual NIC goes.
        let token = unsafe { st.drv.transmit_begin(buf) }.map_err(|_| Error::Busy)? as usize;
        if token >= QUEUE_SIZE {
            return Err(Error::Busy); // the crate never gives one; keep the table safe anyway
        }
        st.tx_owner[token] = (c as u32) << 16 | b as u32;
        st.tx_len[token] = len as u16;
        ch.tx_inflight.fetch_add(1, Ordering::Relaxed);
        ch.packets_out.fetch_add(1, Ordering::Relaxed);
        ch.bytes_out.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    /// Give buffer `b` to the device for receiving.
    fn post_rx(&self, st: &mut DriverState, b: u64) -> Result<(), Error> {
        if b >= self.nbuffers {
            return Err(Error::InvalidArgument);
        }
        if st.rx_posted >= QUEUE_SIZE {
            return Err(Error::Busy);
        }
        // SAFETY: as in `transmit`; the device writes the header and at most NET_MAX_FRAME bytes.
        let buf = unsafe { self.dma_slice(b, st.hdr_len, NET_MAX_FRAME as usize) };
        // SAFETY: the buffer stays pinned until `receive_complete` or the device's reset.
        let token = unsafe { st.drv.receive_begin(buf) }.map_err(|_| Error::Busy)? as usize;
        if token >= QUEUE_SIZE {
            return Err(Error::Busy);
        }
        st.rx_owner[token] = b as u32;
        st.rx_posted += 1;
        Ok(())
    }

    /// One poll of the device (and, in Dedicated mode, of every channel's TX and RXFREE
    /// rings). Returns true if anything moved.
    pub fn poll(&self) -> bool {
        if self.dead.load(Ordering::Acquire) {
            return false;
        }
        // Service cores (Polling, Inline) queue on the lock to place their buffers: the
        // poller never barges ahead of them, it tries again on its next round.
        let Some(mut g) = self.driver.try_lock() else { return false };
        let Some(st) = g.first_mut() else { return false };
        let mut did = false;
        if self.mode.load(Ordering::Relaxed) == NET_MODE_DEDICATED {
            for c in 0..self.nchannels {
                let ch = &self.chans[c as usize];
                if ch.broken.load(Ordering::Relaxed) {
                    continue;
                }
                while let Some(e) = self.peek_user(c, NET_RING_TX, &ch.tx_taken) {
                    match self.transmit(st, c, net_entry_buffer(e), net_entry_len(e)) {
                        Ok(()) => {}
                        Err(Error::Busy) => break,
                        Err(_) => {
                            // A bad entry: counted and skipped (its buffer, if it names one,
                            // stays the program's to reuse).
                            ch.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    self.advance_user(c, NET_RING_TX, &ch.tx_taken);
                    did = true;
                }
                while st.rx_posted < QUEUE_SIZE {
                    let Some(e) = self.peek_user(c, NET_RING_RXFREE, &ch.rxfree_taken) else { break };
                    match self.post_rx(st, net_entry_buffer(e)) {
                        Ok(()) => {}
                        Err(Error::Busy) => break,
                        Err(_) => {
                            ch.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    self.advance_user(c, NET_RING_RXFREE, &ch.rxfree_taken);
                    did = true;
                }
            }
        }
        did |= self.complete(st);
        did
    }

    /// Collect the device's completions: sent buffers back to their channel's `TXDONE`,
    /// received frames to the `RX` ring of the channel their flow belongs to.
    fn complete(&self, st: &mut DriverState) -> bool {
        let mut did = false;
        while let Some(token) = st.drv.poll_transmit() {
            did = true;
            let t = token as usize;
            let owner = if t < QUEUE_SIZE { core::mem::replace(&mut st.tx_owner[t], NONE) } else { NONE };
            if owner == NONE {
                // Not ours to finish: leave it (cannot happen with this driver; never loop).
                break;
            }
            let (c, b) = ((owner >> 16) as u64, (owner & 0xFFFF) as u64);
            let ch = &self.chans[c as usize];
            // SAFETY: the same buffer, with the same length, that `transmit_begin` was given.
            let buf = unsafe { self.dma_slice(b, st.hdr_len, st.tx_len[t] as usize) };
            // SAFETY: as above.
            if unsafe { st.drv.transmit_complete(token, buf) }.is_err() {
                ch.errors.fetch_add(1, Ordering::Relaxed);
            }
            ch.tx_inflight.fetch_sub(1, Ordering::Relaxed);
            if ch.broken.load(Ordering::Relaxed) {
                continue;
            }
            // Room was reserved when the frame went in (`transmit` checks tx_inflight < room).
            self.put(c, NET_RING_TXDONE, &ch.txdone_put, b, 0);
            self.wake(c);
        }
        while let Some(token) = st.drv.poll_receive() {
            did = true;
            let t = token as usize;
            let b = if t < QUEUE_SIZE { core::mem::replace(&mut st.rx_owner[t], NONE) } else { NONE };
            if b == NONE {
                break;
            }
            let b = b as u64;
            st.rx_posted -= 1;
            // SAFETY: the same buffer `receive_begin` was given.
            let buf = unsafe { self.dma_slice(b, st.hdr_len, NET_MAX_FRAME as usize) };
            // SAFETY: as above.
            let len = match unsafe { st.drv.receive_complete(token, buf) } {
                Ok((_, len)) => len as u64,
                Err(_) => {
                    self.unsteered_drops.fetch_add(1, Ordering::Relaxed);
                    let _ = self.post_rx(st, b);
                    continue;
                }
            };
            if len < 14 || len > NET_MAX_FRAME {
                self.unsteered_drops.fetch_add(1, Ordering::Relaxed);
                let _ = self.post_rx(st, b);
                continue;
            }
            // Read the headers into our own copy: the program may own the buffer next.
            let mut head = [0u8; 64];
            let n = (len as usize).min(head.len());
            // SAFETY: `n` bytes of the frame inside the pinned buffer; the device has finished
            // writing it (completion seen) and no program owns it yet.
            unsafe { core::ptr::copy_nonoverlapping((self.buffer_va(b) + NET_FRAME_OFFSET) as *const u8, head.as_mut_ptr(), n) };
            let c = abi::net_steer(&head[..n], self.nchannels);
            let ch = &self.chans[c as usize];
            let has_room = !ch.broken.load(Ordering::Relaxed) && self.room(c, NET_RING_RX, &ch.rx_put, &ch.rx_seen, 1).is_some_and(|r| r > 0);
            if !has_room {
                // The channel cannot take it: the frame is dropped and the buffer goes back to
                // the device (still the kernel's).
                ch.drops.fetch_add(1, Ordering::Relaxed);
                let _ = self.post_rx(st, b);
                continue;
            }
            ch.packets_in.fetch_add(1, Ordering::Relaxed);
            ch.bytes_in.fetch_add(len, Ordering::Relaxed);
            self.put(c, NET_RING_RX, &ch.rx_put, b, len);
            self.wake(c);
        }
        did
    }

    /// Before this core halts waiting for frames: acknowledge the card's interrupt (which
    /// lowers its line), look once more for completions, and if there are none route the line
    /// to this core, unmasked. A completion after the look raises the line again, and the
    /// level-triggered input delivers it as soon as the core enables interrupts, so none is
    /// lost. Interrupts are off.
    pub fn arm(&self, apic_id: u32) -> Armed {
        if !self.line.exists() || self.dead.load(Ordering::Acquire) {
            return Armed::NoLine;
        }
        let Some(mut g) = self.driver.try_lock() else { return Armed::Work };
        let Some(st) = g.first_mut() else { return Armed::NoLine };
        let _ = st.drv.ack_interrupt();
        if st.drv.poll_receive().is_some() || st.drv.poll_transmit().is_some() {
            return Armed::Work;
        }
        if self.line.arm(apic_id) {
            Armed::Yes
        } else {
            Armed::NoLine
        }
    }

    /// Publish whether the kernel core polling this NIC sleeps (`NET_HEADER_KC_ASLEEP`).
    fn set_kc_asleep(&self, asleep: bool) {
        if self.pages.is_empty() {
            return;
        }
        self.page(0)[(abi::NET_HEADER_KC_ASLEEP / 8) as usize].store(asleep as u64, Ordering::Release);
    }

    /// After filling channel `c`'s ring: wake its service core if it sleeps in `wait`.
    fn wake(&self, c: u64) {
        let w = &self.waiters[c as usize];
        // Pairs with the fence in `wait`: either the sleeper sees our entry, or we see it.
        core::sync::atomic::fence(Ordering::SeqCst);
        if w.load(Ordering::Relaxed) != 0 {
            let apic = w.swap(0, Ordering::AcqRel);
            if apic != 0 {
                crate::arch::x86_64::apic::send_ipi(apic - 1, crate::arch::x86_64::apic::VECTOR_WAKE);
            }
        }
    }

    /// `CONF_NET_WAIT`: sleep on this core until channel `c` has something, `timeout_us`
    /// passes, a wake (`nr::WAKE`) comes, or something else needs the core.
    ///
    /// What ends the sleep: an entry on the channel's `RX` or `TXDONE` ring (the kernel
    /// core's IPI), the card's interrupt (Inline mode: the sleeper arms it), a wake, the
    /// timeout, any other IPI (a context handed to this core, a role change, a message), an
    /// exit request. A periodic timer tick alone does not: a time-shared core ticks at 100 Hz,
    /// and returning to the program at each tick would make an idle socket waiter look at its
    /// stack a hundred times a second for nothing; the halt goes on after the tick instead
    /// (the tick's handler still runs). With contexts queued behind the caller on a
    /// time-shared core it returns at once, as `nr::WAIT` does: sleeping would hold them up.
    fn wait(&self, c: u64, timeout_us: u64) -> Result<(), Error> {
        use crate::arch::x86_64::cpu;
        if c >= self.nchannels || timeout_us > abi::NET_MAX_WAIT_US {
            return Err(Error::InvalidArgument);
        }
        if timeout_us == 0 || self.dead.load(Ordering::Acquire) {
            return Ok(());
        }
        let me = crate::percpu::this();
        if crate::sched::queued() > 0 {
            me.wake_pending.swap(false, Ordering::AcqRel);
            return Ok(());
        }
        let ch = &self.chans[c as usize];
        cpu::disable_interrupts();
        self.waiters[c as usize].store(me.apic_id + 1, Ordering::Relaxed);
        core::sync::atomic::fence(Ordering::SeqCst);
        let cons = |ring: u64| self.ring(c, ring)[(NET_RING_CONSUMER / 8) as usize].load(Ordering::Acquire);
        let pending = || ch.rx_put.load(Ordering::Relaxed) > cons(NET_RING_RX) || ch.txdone_put.load(Ordering::Relaxed) > cons(NET_RING_TXDONE);
        // Inline: only this core polls the card, so the card's interrupt must wake it; without
        // one the sleep is short (the caller polls again after it).
        let inline = self.mode.load(Ordering::Relaxed) == NET_MODE_INLINE;
        let lines_before = super::line_interrupts();
        let armed = if inline && !pending() { self.arm(me.apic_id) } else { Armed::NoLine };
        let timeout_us = if inline && armed == Armed::NoLine { timeout_us.min(abi::NET_KC_SLEEP_US) } else { timeout_us };
        // A `wake` (`nr::WAKE`) for this core ends this sleep as it ends `nr::WAIT`'s: one
        // that came before this look (its IPI taken while interrupts were still on) is
        // consumed here instead of halting; one after it ends the halt with its IPI and is
        // consumed below. A program whose cores hand work through memory (webd's application
        // core replying to a front-end that sleeps here) relies on it.
        let woken = me.wake_pending.swap(false, Ordering::AcqRel);
        if !pending() && !woken && armed != Armed::Work && !ch.broken.load(Ordering::Relaxed) && me.exit_requested.load(Ordering::Relaxed) == 0 {
            let per_us = crate::time::tsc_per_ms() / 1000;
            let end = crate::time::now_ticks().saturating_add(timeout_us.saturating_mul(per_us));
            loop {
                let ipis = me.stats.ipis_received.load(Ordering::Relaxed);
                let left_us = end.saturating_sub(crate::time::now_ticks()) / per_us.max(1);
                // Any interrupt ends the halt: the wake-up IPI, the timer, a shootdown.
                crate::smp::halt_at_most(me, left_us.max(1));
                if me.wake_pending.swap(false, Ordering::AcqRel) {
                    break;
                }
                let only_a_tick = me.stats.ipis_received.load(Ordering::Relaxed) == ipis && super::line_interrupts() == lines_before;
                if !only_a_tick
                    || pending()
                    || ch.broken.load(Ordering::Relaxed)
                    || crate::sched::queued() > 0
                    || me.exit_requested.load(Ordering::Relaxed) != 0
                    || self.dead.load(Ordering::Acquire)
                    || crate::time::now_ticks() >= end
                {
                    break;
                }
            }
        }
        if armed == Armed::Yes {
            self.line.disarm();
        }
        self.waiters[c as usize].store(0, Ordering::Relaxed);
        cpu::enable_interrupts();
        Ok(())
    }

    /// `device_buf` on a virtual NIC (Polling and Inline modes).
    pub fn buf(&self, buf_type: u64, channel: u64, b: u64, len: u64) -> Result<u64, Error> {
        if channel >= self.nchannels {
            return Err(Error::InvalidArgument);
        }
        if self.mode.load(Ordering::Relaxed) == NET_MODE_DEDICATED {
            return Err(Error::NotPermitted);
        }
        if self.chans[channel as usize].broken.load(Ordering::Relaxed) {
            return Err(Error::Busy);
        }
        let mut g = self.driver.lock_irqsave();
        let st = g.first_mut().ok_or(Error::Busy)?;
        match buf_type {
            abi::BUF_NET_TX => self.transmit(st, channel, b, len).map(|()| len),
            abi::BUF_NET_RX => self.post_rx(st, b).map(|()| 0),
            _ => Err(Error::Unsupported),
        }
    }

    pub fn conf(&self, key: u64, value: u64) -> Result<(), Error> {
        match key {
            abi::CONF_NET_MODE => match value {
                NET_MODE_DEDICATED | NET_MODE_POLLING | NET_MODE_INLINE => {
                    self.mode.store(value, Ordering::Relaxed);
                    Ok(())
                }
                _ => Err(Error::InvalidArgument),
            },
            abi::CONF_NET_WAIT => self.wait(value & 0xFF, value >> 8),
            abi::CONF_NET_KICK => {
                let core = self.attached.load(Ordering::Acquire);
                if let Some(kc) = crate::percpu::get(core as usize) {
                    if kc.role.load(Ordering::Acquire) == abi::ROLE_KC && !kc.polling.load(Ordering::Acquire) {
                        crate::arch::x86_64::apic::send_ipi(kc.apic_id, crate::arch::x86_64::apic::VECTOR_WAKE);
                    }
                }
                Ok(())
            }
            abi::CONF_NET_KC_IDLE => {
                if value > abi::NET_MAX_WAIT_US {
                    return Err(Error::InvalidArgument);
                }
                self.kc_idle_us.store(value, Ordering::Relaxed);
                Ok(())
            }
            abi::CONF_NET_POLL => {
                if self.mode.load(Ordering::Relaxed) != NET_MODE_INLINE {
                    return Err(Error::NotPermitted);
                }
                self.poll();
                Ok(())
            }
            _ => Err(Error::Unsupported),
        }
    }

    pub fn stat(&self) -> DeviceStat {
        let mut s = DeviceStat { hwid: self.hwid, kind: DEVICE_NET, ..Default::default() };
        for ch in &self.chans {
            s.packets_in += ch.packets_in.load(Ordering::Relaxed);
            s.packets_out += ch.packets_out.load(Ordering::Relaxed);
            s.bytes_in += ch.bytes_in.load(Ordering::Relaxed);
            s.bytes_out += ch.bytes_out.load(Ordering::Relaxed);
            s.drops += ch.drops.load(Ordering::Relaxed);
            s.errors += ch.errors.load(Ordering::Relaxed);
        }
        s.drops += self.unsteered_drops.load(Ordering::Relaxed);
        s.buffers = self.nbuffers;
        s
    }
}

impl NetDev {
    /// Give the card back, now: reset it (dropping the driver drops its transport, which
    /// resets the device, so no DMA reaches the buffers after this), unpin the segment, and
    /// let the next virtual NIC have the card. Called when the device object goes; a kernel
    /// core may still hold this `NetDev` for the rest of one poll, and finds no driver.
    pub fn shutdown(&self) {
        self.dead.store(true, Ordering::Release);
        let driver = core::mem::take(&mut *self.driver.lock());
        drop(driver);
        // Once only (the device object's drop, then this struct's own), and also for a
        // virtual NIC whose `open` failed after it took the card.
        if self.owns_card.swap(false, Ordering::AcqRel) {
            self.seg.unpin();
            CARD_TAKEN.store(false, Ordering::Release);
        }
    }
}

impl Drop for NetDev {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Driver for NetDev {
    fn poll(&self) -> bool {
        NetDev::poll(self)
    }

    /// `CONF_NET_KC_IDLE` (0: never sleep).
    fn sleep_after_us(&self) -> Option<u64> {
        match self.kc_idle_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(us),
        }
    }

    fn sleep_bound_us(&self, armed: bool) -> u64 {
        if armed {
            abi::NET_KC_ARMED_SLEEP_US
        } else {
            abi::NET_KC_SLEEP_US
        }
    }

    fn set_asleep(&self, asleep: bool) {
        self.set_kc_asleep(asleep);
    }

    fn arm(&self, apic_id: u32) -> Armed {
        NetDev::arm(self, apic_id)
    }

    fn disarm(&self) {
        self.line.disarm();
    }

    fn attached(&self) -> &AtomicU32 {
        &self.attached
    }

    fn shutdown(&self) {
        NetDev::shutdown(self)
    }

    fn stat(&self) -> DeviceStat {
        NetDev::stat(self)
    }

    fn conf(&self, key: u64, value: u64) -> Result<(), Error> {
        NetDev::conf(self, key, value)
    }

    /// The channel in `seg.share`, the buffer index in `offset`.
    fn buf(&self, b: &abi::DeviceBuf) -> Result<u64, Error> {
        NetDev::buf(self, b.buf_type, b.seg.share, b.offset, b.len)
    }
}
