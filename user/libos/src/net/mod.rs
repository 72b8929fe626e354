//! The network in the library OS (docs/net.md): a virtual NIC over the card
//! (`Nic`), one channel per service core (`Channel`), and a private smoltcp TCP/IP stack on
//! each service core (`stack::Stack`). The contract with the kernel (segment layout, who owns
//! a buffer when, the Dedicated / Polling / Inline modes) is `abi::net`.
//!
//! Private by default: a channel's rings and its stack are touched by its core only; the
//! kernel core (Dedicated) or the driver lock (Polling) is the one place cores meet. Buffers
//! move between cores by index (ownership), never by copy.

pub mod host;
pub mod stack;

/// The TCP/IP library the stacks use, for programs that make sockets.
pub use smoltcp;

use abi::{
    net_bufs_offset, net_entry, net_entry_buffer, net_entry_is, net_entry_len, net_first_buffer, net_ring_page, DeviceBuf, DeviceConf, DeviceInfo, Error,
    ObjName, ObjectId, SegMapping, BUF_NET_RX, BUF_NET_TX, CONF_NET_MODE, CONF_NET_POLL, DEVICE_NET, MAP_READ, MAP_WRITE, MEMID_SELF,
    NET_BUF_BYTES, NET_FRAME_OFFSET, NET_MAGIC, NET_MAX_CHANNELS, NET_MAX_FRAME, NET_MODE_DEDICATED, NET_MODE_INLINE, NET_MODE_POLLING,
    NET_RING_CONSUMER, NET_RING_ENTRIES, NET_RING_ENTRIES_AT, NET_RING_RX, NET_RING_RXFREE, NET_RING_TX, NET_RING_TXDONE,
    PAGE_SIZE,
};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

/// Where every context of a network program maps the channel segment (each in its own root
/// range: a core's mapping is its own, the pages are the same).
pub const NET_VA: u64 = 0x3800_0000_0000;

/// A run-time choice of how the card is driven (Corey §8.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Dedicated,
    Polling,
    Inline,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "dedicated" => Some(Mode::Dedicated),
            "polling" => Some(Mode::Polling),
            "inline" => Some(Mode::Inline),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Dedicated => "dedicated",
            Mode::Polling => "polling",
            Mode::Inline => "inline",
        }
    }

    fn abi(self) -> u64 {
        match self {
            Mode::Dedicated => NET_MODE_DEDICATED,
            Mode::Polling => NET_MODE_POLLING,
            Mode::Inline => NET_MODE_INLINE,
        }
    }
}

/// The first network card `device_list` shows.
pub fn find_card() -> Result<DeviceInfo, Error> {
    let mut l = [DeviceInfo::default(); 16];
    let n = crate::sys::device_list(&mut l)? as usize;
    l[..n].iter().find(|d| d.kind == DEVICE_NET).copied().ok_or(Error::NotFound)
}

/// A virtual NIC: the device object and its channel segment, both in `share` (the process
/// share, so every thread can name them).
#[derive(Clone, Copy, Debug)]
pub struct Nic {
    pub dev: ObjName,
    pub seg: ObjName,
    pub nchannels: u64,
    pub nbuffers: u64,
    pub mac: [u8; 6],
    pub mode: Mode,
    len: u64,
}

impl Nic {
    /// Make a virtual NIC with `nchannels` channels and `buffers_per_channel` buffers each,
    /// in `share`, mapped here (at `NET_VA`, in this context's root range).
    pub fn open(share: ObjectId, nchannels: u64, buffers_per_channel: u64, mode: Mode) -> Result<Nic, Error> {
        if nchannels == 0 || nchannels > NET_MAX_CHANNELS {
            return Err(Error::InvalidArgument);
        }
        let card = find_card()?;
        let len = (net_bufs_offset(nchannels) + nchannels * buffers_per_channel * NET_BUF_BYTES).next_multiple_of(PAGE_SIZE);
        let seg = ObjName::new(share, crate::sys::segment_alloc(share, "net-channels", MEMID_SELF, len)?);
        // SAFETY: no pointers: the kernel checks every argument.
        let dev = match unsafe { crate::sys::call(abi::nr::DEVICE_ALLOC, share, card.hwid, MEMID_SELF, seg.share, seg.object, nchannels) } {
            Ok(d) => ObjName::new(share, d),
            Err(e) => {
                let _ = crate::sys::share_delobj(seg);
                return Err(e);
            }
        };
        let mut nic = Nic { dev, seg, nchannels, nbuffers: 0, mac: [0; 6], mode, len };
        let undo = |e: Error| {
            let _ = crate::sys::share_delobj(dev);
            let _ = crate::sys::share_delobj(seg);
            e
        };
        crate::sys::device_conf(dev, &DeviceConf { key: CONF_NET_MODE, value: mode.abi() }).map_err(undo)?;
        nic.map_here().map_err(undo)?;
        let hdr = header();
        if hdr[0].load(Ordering::Acquire) != NET_MAGIC {
            let _ = nic.unmap_here();
            return Err(undo(Error::Busy));
        }
        nic.nbuffers = hdr[2].load(Ordering::Relaxed);
        let mac = hdr[3].load(Ordering::Relaxed).to_le_bytes();
        nic.mac.copy_from_slice(&mac[..6]);
        Ok(nic)
    }

    /// Map the channel segment at `NET_VA` in this context's root range (each service thread
    /// does this once on its own core).
    pub fn map_here(&self) -> Result<(), Error> {
        let ar = crate::ctx::ctx().root_ar;
        crate::sys::ar_set_seg(ar, &SegMapping { voff: NET_VA, seg: self.seg, soff: 0, len: self.len, flags: MAP_READ | MAP_WRITE }).map(|_| ())
    }

    pub fn unmap_here(&self) -> Result<(), Error> {
        crate::sys::ar_unmap(crate::ctx::ctx().root_ar, NET_VA, self.len).map(|_| ())
    }

    /// `pcore_add_device`: the pcore's core (a kernel core) polls the card for us.
    pub fn attach(&self, pcore: ObjName) -> Result<(), Error> {
        // SAFETY: no pointers.
        unsafe { crate::sys::call(abi::nr::PCORE_ADD_DEVICE, pcore.share, pcore.object, self.dev.share, self.dev.object, 0, 0).map(|_| ()) }
    }

    pub fn detach(&self, pcore: ObjName) -> Result<(), Error> {
        // SAFETY: no pointers.
        unsafe { crate::sys::call(abi::nr::PCORE_DEL_DEVICE, pcore.share, pcore.object, self.dev.share, self.dev.object, 0, 0).map(|_| ()) }
    }

    /// How the kernel core polling this NIC idles (`CONF_NET_KC_IDLE`): `us` microseconds of
    /// empty polls before it sleeps; 0 keeps it polling without pause (Corey's kernel cores).
    pub fn set_kc_idle(&self, us: u64) -> Result<(), Error> {
        crate::sys::device_conf(self.dev, &DeviceConf { key: abi::CONF_NET_KC_IDLE, value: us }).map(|_| ())
    }

    /// Free the virtual NIC (the card resets) and its segment. Unmap it everywhere first.
    pub fn close(self) -> Result<(), Error> {
        crate::sys::share_delobj(self.dev)?;
        crate::sys::share_delobj(self.seg).map(|_| ())
    }

    /// The channel `c` of this virtual NIC, for the core that will use it (which must have
    /// mapped the segment with `map_here`).
    pub fn channel(&self, c: u64) -> Channel {
        let first = net_first_buffer(c, self.nchannels, self.nbuffers);
        let end = if c + 1 == self.nchannels { self.nbuffers } else { net_first_buffer(c + 1, self.nchannels, self.nbuffers) };
        // Half of the channel's buffers receive, half transmit.
        let split = first + (end - first) / 2;
        Channel {
            nic: *self,
            c,
            tx_free: (split..end).map(|b| b as u32).collect(),
            rx_spare: (first..split).map(|b| b as u32).collect(),
            rx_seen: 0,
            txdone_seen: 0,
            tx_sent: 0,
            rxfree_sent: 0,
            tx_cons: 0,
            rxfree_cons: 0,
            stats: ChannelStats::default(),
        }
    }
}

fn header() -> &'static [AtomicU64; 512] {
    // SAFETY: page 0 of the channel segment, mapped at NET_VA by `map_here` while the virtual
    // NIC lives; the kernel wrote it before `device_alloc` returned.
    unsafe { &*(NET_VA as *const [AtomicU64; 512]) }
}

/// What one channel counted (its core's own numbers).
#[derive(Clone, Copy, Debug, Default)]
pub struct ChannelStats {
    pub rx_frames: u64,
    pub tx_frames: u64,
    /// Frames that could not go out for want of a buffer or ring room (retried by the stack).
    pub tx_stalls: u64,
    pub rx_dropped: u64,
}

/// One service core's end of a virtual NIC. Touched by that core only.
pub struct Channel {
    pub nic: Nic,
    pub c: u64,
    /// Buffers this channel owns for transmitting.
    tx_free: Vec<u32>,
    /// Buffers this channel owns for receiving that the device does not have yet.
    rx_spare: Vec<u32>,
    rx_seen: u64,
    txdone_seen: u64,
    tx_sent: u64,
    rxfree_sent: u64,
    /// The kernel's consumer counts of TX and RXFREE as last read (re-read only when the
    /// ring looks full: the line is the kernel's).
    tx_cons: u64,
    rxfree_cons: u64,
    pub stats: ChannelStats,
}

fn ring_page(c: u64, ring: u64) -> &'static [AtomicU64; 512] {
    // SAFETY: a ring page of the channel segment mapped at NET_VA (see `header`).
    unsafe { &*((NET_VA + net_ring_page(c, ring) * PAGE_SIZE) as *const [AtomicU64; 512]) }
}

const CONS: usize = (NET_RING_CONSUMER / 8) as usize;
const AT: usize = (NET_RING_ENTRIES_AT / 8) as usize;

/// Whether a ring this channel produces has a free slot for entry `sent`: from the kernel's
/// consumer count as last read (`cons`), read again only when that says full.
fn has_room(w: &[AtomicU64; 512], sent: u64, cons: &mut u64) -> bool {
    if sent - *cons < NET_RING_ENTRIES {
        return true;
    }
    let fresh = w[CONS].load(Ordering::Acquire);
    if fresh > *cons && fresh <= sent {
        *cons = fresh;
    }
    sent - *cons < NET_RING_ENTRIES
}

impl Channel {
    fn buf_ptr(&self, b: u32) -> *mut u8 {
        (NET_VA + net_bufs_offset(self.nic.nchannels) + b as u64 * NET_BUF_BYTES + NET_FRAME_OFFSET) as *mut u8
    }

    /// Give every spare receive buffer to the kernel (Dedicated: the `RXFREE` ring; Polling
    /// and Inline: `device_buf`), and collect transmit completions.
    pub fn refill(&mut self) {
        while let Some(&b) = self.rx_spare.last() {
            if !self.give_rx(b) {
                break;
            }
            self.rx_spare.pop();
        }
        let w = ring_page(self.c, NET_RING_TXDONE);
        let start = self.txdone_seen;
        loop {
            let e = w[AT + (self.txdone_seen % NET_RING_ENTRIES) as usize].load(Ordering::Acquire);
            if !net_entry_is(e, self.txdone_seen) {
                break;
            }
            self.tx_free.push(net_entry_buffer(e) as u32);
            self.txdone_seen += 1;
        }
        if self.txdone_seen != start {
            w[CONS].store(self.txdone_seen, Ordering::Release);
        }
    }

    fn give_rx(&mut self, b: u32) -> bool {
        match self.nic.mode {
            Mode::Dedicated => {
                let w = ring_page(self.c, NET_RING_RXFREE);
                if !has_room(w, self.rxfree_sent, &mut self.rxfree_cons) {
                    return false;
                }
                w[AT + (self.rxfree_sent % NET_RING_ENTRIES) as usize].store(net_entry(self.rxfree_sent, b as u64, 0), Ordering::Release);
                self.rxfree_sent += 1;
                self.kick_if_asleep();
                true
            }
            Mode::Polling | Mode::Inline => {
                let db = DeviceBuf { seg: ObjName::new(self.c, 0), offset: b as u64, len: 0, buf_type: BUF_NET_RX };
                crate::sys::device_buf(self.nic.dev, &db).is_ok()
            }
        }
    }

    /// Inline mode: poll the card on this core (a no-op in the other modes, where a kernel
    /// core polls).
    pub fn poll_device(&self) {
        if self.nic.mode == Mode::Inline {
            let _ = crate::sys::device_conf(self.nic.dev, &DeviceConf { key: CONF_NET_POLL, value: 0 });
        }
    }

    /// The next received frame: `(buffer, frame bytes)`. The buffer is this channel's until
    /// `recycle`.
    pub fn recv(&mut self) -> Option<(u32, &'static [u8])> {
        let w = ring_page(self.c, NET_RING_RX);
        let e = w[AT + (self.rx_seen % NET_RING_ENTRIES) as usize].load(Ordering::Acquire);
        if !net_entry_is(e, self.rx_seen) {
            return None;
        }
        self.rx_seen += 1;
        w[CONS].store(self.rx_seen, Ordering::Release);
        let (b, len) = (net_entry_buffer(e), net_entry_len(e));
        if b >= self.nic.nbuffers || len > NET_MAX_FRAME {
            self.stats.rx_dropped += 1;
            return None;
        }
        self.stats.rx_frames += 1;
        // SAFETY: the buffer is inside the mapped segment and ours until recycled (abi::net
        // "Ownership"); the kernel wrote `len <= NET_MAX_FRAME` bytes at the frame offset.
        Some((b as u32, unsafe { core::slice::from_raw_parts(self.buf_ptr(b as u32), len as usize) }))
    }

    /// Whether the kernel has put anything on this channel's `RX` or `TXDONE` ring that is not
    /// collected yet, or buffers wait to be given back (a peek: nothing changes). In Inline mode
    /// only this core's own poll of the card brings anything in, so it polls the card first.
    pub fn has_work(&self) -> bool {
        if !self.rx_spare.is_empty() {
            return true;
        }
        self.poll_device();
        let rx = ring_page(self.c, NET_RING_RX)[AT + (self.rx_seen % NET_RING_ENTRIES) as usize].load(Ordering::Acquire);
        let done = ring_page(self.c, NET_RING_TXDONE)[AT + (self.txdone_seen % NET_RING_ENTRIES) as usize].load(Ordering::Acquire);
        net_entry_is(rx, self.rx_seen) || net_entry_is(done, self.txdone_seen)
    }

    /// Sleep until the kernel fills one of this channel's rings, or `timeout_us` passes
    /// (`CONF_NET_WAIT`): for a service core with nothing to do. In Inline mode nothing wakes
    /// it but the timeout (this core polls the card itself): keep `timeout_us` short there.
    pub fn wait(&self, timeout_us: u64) {
        if timeout_us == 0 {
            return;
        }
        let (dev, conf) = self.wait_request(timeout_us);
        let _ = crate::sys::device_conf(dev, &conf);
    }

    /// The `device_conf` call `wait(timeout_us)` makes (for a caller that makes it later).
    pub fn wait_request(&self, timeout_us: u64) -> (ObjName, DeviceConf) {
        let t = timeout_us.min(abi::NET_MAX_WAIT_US);
        (self.nic.dev, DeviceConf { key: abi::CONF_NET_WAIT, value: self.c | t << 8 })
    }

    /// Give a received buffer back for receiving.
    pub fn recycle(&mut self, b: u32) {
        if !self.give_rx(b) {
            self.rx_spare.push(b);
        }
    }

    /// Dedicated: after putting an entry on `TX` or `RXFREE`, wake the kernel core if it
    /// sleeps (`NET_HEADER_KC_ASLEEP`; the fence pairs with the kernel core's before its last
    /// look). While it polls this is a fence and one load of a line it rarely writes.
    fn kick_if_asleep(&self) {
        core::sync::atomic::fence(Ordering::SeqCst);
        if header()[(abi::NET_HEADER_KC_ASLEEP / 8) as usize].load(Ordering::Relaxed) != 0 {
            let _ = crate::sys::device_conf(self.nic.dev, &DeviceConf { key: abi::CONF_NET_KICK, value: 0 });
        }
    }

    /// A transmit buffer to fill (up to `NET_MAX_FRAME` bytes), if one is free.
    pub fn tx_buffer(&mut self) -> Option<(u32, &'static mut [u8])> {
        let b = self.tx_free.pop()?;
        // SAFETY: a buffer this channel owns (from its initial share or a TXDONE entry).
        Some((b, unsafe { core::slice::from_raw_parts_mut(self.buf_ptr(b), NET_MAX_FRAME as usize) }))
    }

    /// Hand a filled transmit buffer to the kernel; `false` (buffer kept) if it cannot take it now.
    pub fn send(&mut self, b: u32, len: usize) -> bool {
        let ok = match self.nic.mode {
            Mode::Dedicated => {
                let w = ring_page(self.c, NET_RING_TX);
                if !has_room(w, self.tx_sent, &mut self.tx_cons) {
                    false
                } else {
                    w[AT + (self.tx_sent % NET_RING_ENTRIES) as usize].store(net_entry(self.tx_sent, b as u64, len as u64), Ordering::Release);
                    self.tx_sent += 1;
                    self.kick_if_asleep();
                    true
                }
            }
            Mode::Polling | Mode::Inline => {
                let db = DeviceBuf { seg: ObjName::new(self.c, 0), offset: b as u64, len: len as u64, buf_type: BUF_NET_TX };
                crate::sys::device_buf(self.nic.dev, &db).is_ok()
            }
        };
        if ok {
            self.stats.tx_frames += 1;
        } else {
            self.stats.tx_stalls += 1;
            self.tx_free.push(b);
        }
        ok
    }

    /// Whether a transmit buffer is free.
    pub fn has_tx_buffer(&self) -> bool {
        !self.tx_free.is_empty()
    }
}
