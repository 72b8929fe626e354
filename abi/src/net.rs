//! The network device (docs/net.md): a virtio-net NIC as a Corey device object, and the layout of
//! the *channel segment* through which service cores exchange packet buffers with the kernel.
//!
//! `device_alloc(share, hwid, memid, seg_share, seg, nchannels)` with the NIC's hwid (from
//! `device_list`, kind `DEVICE_NET`) makes a *virtual NIC* over the physical one: `nchannels`
//! channels (one per service core, each with its own TCP/IP stack) whose rings and packet
//! buffers live in the segment `seg`, which the program maps. One virtual NIC at a time owns
//! the physical NIC (`Busy` otherwise); freeing it resets the device, so no DMA outlives it.
//!
//! Layout of the segment (all offsets from its start):
//!
//! - page 0: `NetHeader`, written by the kernel at `device_alloc`;
//! - for channel `c`, four ring pages from `net_ring_page(c, ring)`: `NET_RING_TX` and
//!   `NET_RING_RXFREE` are produced by the service core and consumed by the kernel;
//!   `NET_RING_RX` and `NET_RING_TXDONE` are produced by the kernel and consumed by the service
//!   core. A ring page holds `NET_RING_ENTRIES` u64 slots from byte `NET_RING_ENTRIES_AT` and
//!   the consumer's count (u64 at byte `NET_RING_CONSUMER`, on a 128-byte pair of lines of its
//!   own). Entry number `seq` (counting from 0) goes in slot `seq % NET_RING_ENTRIES`, tagged
//!   with its sequence number (`net_entry(seq, buffer, len)`): the consumer knows entry `seq`
//!   has arrived when the slot's tag says `seq`, so there is no producer count to bounce
//!   between the cores, and a line of slots carries eight entries. The consumer stores its
//!   count after each entry it takes (its own line); the producer reads it only when its last
//!   reading says the ring may be full. A producer never writes more than `NET_RING_ENTRIES`
//!   entries ahead of the consumer's count. Counts only grow; a consumer count that is
//!   impossible (behind an earlier reading, or ahead of the producer) stops the channel and
//!   counts an error (`DeviceStat::errors`), and a slot whose tag is not the expected one is
//!   simply not there yet: a program can stall or break only its own rings;
//! - from `net_bufs_offset(nchannels)`: packet buffers of `NET_BUF_BYTES` each, two to a page.
//!   A frame sits at byte `NET_FRAME_OFFSET` of its buffer (the kernel writes the device's
//!   header in the bytes before it).
//!
//! **Ownership.** Every buffer has one owner at a time, and handing over a buffer index hands
//! over the buffer: nothing is copied. At `device_alloc` each channel owns an equal share of
//! the buffers (channel `c` owns `net_first_buffer(c, ..)` up to the next channel's first). A
//! buffer put on a ring belongs to the ring's consumer from then on; a buffer given to the
//! kernel by `device_buf` belongs to the kernel until it comes back on the channel's `RX` or
//! `TXDONE` ring. A received frame is steered to the channel its flow hashes to, so a buffer
//! one channel gave for receiving may come back on another channel's `RX` ring: buffers
//! migrate between channels, which is why all channels share one segment.
//!
//! **Modes** (Corey §8.2), set with `device_conf(.., CONF_NET_MODE, mode)` before traffic:
//!
//! - `NET_MODE_DEDICATED`: a kernel core the virtual NIC is attached to (`pcore_add_device`)
//!   does all device work: it takes frames from every channel's `TX` ring and empty buffers
//!   from its `RXFREE` ring into the device's queues, and puts received frames on the `RX`
//!   ring of the channel their flow hashes to and sent buffers on their channel's `TXDONE`.
//!   Service cores make no system call on the data path.
//! - `NET_MODE_POLLING`: service cores place their own frames and receive buffers in the
//!   device's queues with `device_buf` (`BUF_NET_TX`, `BUF_NET_RX`), under the driver's MCS
//!   lock; the kernel core only polls for completions and puts them on the channels' `RX` and
//!   `TXDONE` rings (the same lock, taken on the kernel core).
//! - `NET_MODE_INLINE`: no kernel core: a service core polls the device itself with
//!   `device_conf(.., CONF_NET_POLL, 0)` (for one-core machines and the shell); otherwise as
//!   Polling.
//!
//! **Steering.** IPv4 TCP and UDP frames go to channel `net_flow_hash(..) % nchannels` of their
//! 4-tuple (software receive-side scaling: every stack sees only its own flows). Everything
//! else (ARP, ICMP, other protocols, fragments) goes to channel 0, which answers for the
//! machine. Frames shorter than an Ethernet header or longer than the buffer are dropped and
//! counted.

use crate::PAGE_SIZE;

/// `DeviceInfo::kind` of a network card.
pub const DEVICE_NET: u32 = 3;
/// `DeviceInfo::kind` of a block device (`abi::blk`).
pub const DEVICE_BLOCK: u32 = 4;
/// hwids of PCI functions: `HWID_PCI_BASE + (bus << 8 | device << 3 | function)`.
pub const HWID_PCI_BASE: u64 = 0x1_0000;

/// Most channels of one virtual NIC.
pub const NET_MAX_CHANNELS: u64 = 16;
/// Bytes of one packet buffer.
pub const NET_BUF_BYTES: u64 = 2048;
/// Where a frame starts inside its buffer.
pub const NET_FRAME_OFFSET: u64 = 64;
/// Longest frame a buffer holds (an Ethernet frame without its CRC is at most 1514 bytes).
pub const NET_MAX_FRAME: u64 = NET_BUF_BYTES - NET_FRAME_OFFSET;
/// Most buffers of one virtual NIC (an entry names a buffer in 48 bits; the kernel keeps one
/// record per buffer).
pub const NET_MAX_BUFFERS: u64 = 8192;
/// Fewest buffers per channel.
pub const NET_MIN_BUFFERS_PER_CHANNEL: u64 = 8;

/// Entries of one ring (a power of two).
pub const NET_RING_ENTRIES: u64 = 256;
/// Byte offsets inside a ring page.
pub const NET_RING_CONSUMER: u64 = 128;
pub const NET_RING_ENTRIES_AT: u64 = 256;

/// The four rings of a channel (index into its ring pages).
pub const NET_RING_TX: u64 = 0;
pub const NET_RING_TXDONE: u64 = 1;
pub const NET_RING_RX: u64 = 2;
pub const NET_RING_RXFREE: u64 = 3;
pub const NET_RINGS_PER_CHANNEL: u64 = 4;

/// `device_conf` keys of a virtual NIC.
pub const CONF_NET_MODE: u64 = 0x100;
/// Poll the device once on the calling core (`NET_MODE_INLINE`); the value is ignored.
pub const CONF_NET_POLL: u64 = 0x101;
/// Sleep until the kernel puts something on channel `value & 0xFF`'s `RX` or `TXDONE` ring, or
/// `value >> 8` microseconds pass (at most `NET_MAX_WAIT_US`), or an interrupt other than the
/// core's periodic timer tick comes (a tick alone does not end it): for a service core with
/// nothing to do, instead of polling. Returns at once on a time-shared core with other
/// contexts queued (as `nr::WAIT`). Returns at once if an entry is
/// already there. A `wake` (`nr::WAKE`) for the calling core ends it as it ends `nr::WAIT`
/// (and one pending makes it return at once); either way the wake is consumed. The kernel core sends a wake-up IPI when it fills a waiting channel's ring
/// (Dedicated and Polling modes). In Inline mode nothing else brings frames in, so the call
/// is a sleep bounded by its timeout, after which the caller polls the card again.
pub const CONF_NET_WAIT: u64 = 0x102;
pub const NET_MAX_WAIT_US: u64 = 1_000_000;
/// How the kernel core polling this virtual NIC idles (Dedicated and Polling modes): `value`
/// is how long, in microseconds, it keeps polling with nothing arriving before it sleeps
/// (at most `NET_MAX_WAIT_US`). Asleep, it halts until the card's interrupt (INTx through
/// the I/O APIC, armed only while it sleeps), a wake IPI, or a timer (`NET_KC_ARMED_SLEEP_US`,
/// or `NET_KC_SLEEP_US` without an interrupt line), and polls without pause again from the
/// first frame on. 0: never sleep (Corey's pure polling, the papers' configuration). Default
/// `NET_KC_IDLE_POLL_US`. With several NICs on one kernel core, the shortest stretch counts
/// and any NIC set to 0 keeps the core polling.
pub const CONF_NET_KC_IDLE: u64 = 0x103;
/// The doorbell of a sleeping kernel core (Dedicated mode): wake the kernel core polling this
/// virtual NIC if it sleeps (`NET_HEADER_KC_ASLEEP`); the value is ignored.
pub const CONF_NET_KICK: u64 = 0x104;
/// Byte offset in page 0 of the channel segment (the header page) of a word the kernel sets to
/// 1 while the kernel core polling this virtual NIC sleeps, and to 0 while it polls. In
/// Dedicated mode a program that puts entries on `TX` or `RXFREE` fences, reads it, and if it
/// is 1 rings `CONF_NET_KICK`: the kernel core sets the word, fences and looks at the rings
/// once more before it halts, so either it sees the entry or the program sees the word.
pub const NET_HEADER_KC_ASLEEP: u64 = 64;
/// The default of `CONF_NET_KC_IDLE`.
pub const NET_KC_IDLE_POLL_US: u64 = 2_000;
/// How often a sleeping kernel core looks at its NICs when it cannot use the card's
/// interrupt (no INTx line known on this machine).
pub const NET_KC_SLEEP_US: u64 = 1_000;
/// With the card's interrupt armed, a sleeping kernel core still looks every this often (a
/// safety net: a frame whose interrupt went astray waits at most this long).
pub const NET_KC_ARMED_SLEEP_US: u64 = 100_000;
pub const NET_MODE_DEDICATED: u64 = 0;
pub const NET_MODE_POLLING: u64 = 1;
pub const NET_MODE_INLINE: u64 = 2;

/// `DeviceBuf::buf_type` for a virtual NIC. `seg.share` is the channel, `offset` the buffer
/// index, `len` the frame length (`BUF_NET_TX`; 0 for `BUF_NET_RX`); `seg.object` is unused.
/// `BUF_NET_TX`: transmit the frame in that buffer (its completion comes back on the
/// channel's `TXDONE` ring). `BUF_NET_RX`: give the buffer to the device for receiving.
/// Both: `Busy` when the device's queue is full (the buffer stays the caller's), `NotPermitted`
/// in Dedicated mode (the kernel core owns the queues).
pub const BUF_NET_TX: u64 = 0x10;
pub const BUF_NET_RX: u64 = 0x11;

/// Page 0 of the channel segment, written by the kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NetHeader {
    /// `NET_MAGIC` once the kernel has set the segment up.
    pub magic: u64,
    pub nchannels: u64,
    pub nbuffers: u64,
    pub mac: [u8; 6],
    pub _pad: [u8; 2],
    pub mtu: u64,
}

pub const NET_MAGIC: u64 = 0x4E45_5443_4841_4E31; // "NETCHAN1"

/// First page of channel `c`'s ring `ring`.
pub const fn net_ring_page(channel: u64, ring: u64) -> u64 {
    1 + channel * NET_RINGS_PER_CHANNEL + ring
}

/// Byte offset of the first buffer for a virtual NIC with `nchannels` channels.
pub const fn net_bufs_offset(nchannels: u64) -> u64 {
    net_ring_page(nchannels, 0) * PAGE_SIZE
}

/// How many buffers a segment of `nbytes` holds with `nchannels` channels (capped at
/// `NET_MAX_BUFFERS`).
pub const fn net_buffers(nbytes: u64, nchannels: u64) -> u64 {
    let off = net_bufs_offset(nchannels);
    if nbytes <= off {
        return 0;
    }
    let n = (nbytes - off) / NET_BUF_BYTES;
    if n > NET_MAX_BUFFERS {
        NET_MAX_BUFFERS
    } else {
        n
    }
}

/// The first buffer channel `c` owns at `device_alloc`.
pub const fn net_first_buffer(channel: u64, nchannels: u64, nbuffers: u64) -> u64 {
    nbuffers / nchannels * channel
}

/// Ring entry number `seq`: its tag (`seq + 1`, so a zeroed slot is never an entry), the
/// buffer index and the frame length.
pub const fn net_entry(seq: u64, buffer: u64, len: u64) -> u64 {
    ((seq as u32).wrapping_add(1) as u64) << 32 | (buffer & 0xFFFF) << 16 | (len & 0xFFFF)
}

/// Whether slot value `e` is entry number `seq`.
pub const fn net_entry_is(e: u64, seq: u64) -> bool {
    (e >> 32) as u32 == (seq as u32).wrapping_add(1)
}

pub const fn net_entry_buffer(e: u64) -> u64 {
    (e >> 16) & 0xFFFF
}

pub const fn net_entry_len(e: u64) -> u64 {
    e & 0xFFFF
}

/// The steering hash of an IPv4 flow, the same whichever side computes it. `src`/`dst` are as
/// seen in a received frame (so a service core computes it with the peer as `src`).
pub const fn net_flow_hash(src_ip: u32, src_port: u16, dst_ip: u32, dst_port: u16) -> u32 {
    // A multiplicative mix: cheap, and ports that differ by one land on different channels.
    let mut h = (src_ip as u64) << 32 | (dst_ip as u64);
    h ^= (src_port as u64) << 16 | dst_port as u64;
    h = h.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    h ^= h >> 29;
    h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (h >> 32) as u32
}

/// The channel a received Ethernet frame is steered to (see "Steering" above): the flow hash
/// of an unfragmented IPv4 TCP or UDP frame, channel 0 for everything else. Reads only the
/// headers; any length is safe.
pub fn net_steer(frame: &[u8], nchannels: u64) -> u64 {
    if nchannels <= 1 || frame.len() < 14 + 20 || frame[12..14] != [0x08, 0x00] {
        return 0;
    }
    let ip = &frame[14..];
    let ihl = ((ip[0] & 0x0F) as usize) * 4;
    let proto = ip[9];
    let fragment = u16::from_be_bytes([ip[6], ip[7]]) & 0x3FFF != 0;
    if ip[0] >> 4 != 4 || ihl < 20 || fragment || !(proto == 6 || proto == 17) || ip.len() < ihl + 4 {
        return 0;
    }
    let src = u32::from_be_bytes([ip[12], ip[13], ip[14], ip[15]]);
    let dst = u32::from_be_bytes([ip[16], ip[17], ip[18], ip[19]]);
    let sport = u16::from_be_bytes([ip[ihl], ip[ihl + 1]]);
    let dport = u16::from_be_bytes([ip[ihl + 2], ip[ihl + 3]]);
    (net_flow_hash(src, sport, dst, dport) as u64) % nchannels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_fits_and_does_not_overlap() {
        for n in 1..=NET_MAX_CHANNELS {
            assert_eq!(net_bufs_offset(n), (1 + 4 * n) * PAGE_SIZE);
            assert!(net_ring_page(n - 1, NET_RING_RXFREE) * PAGE_SIZE < net_bufs_offset(n));
        }
        assert!(NET_RING_ENTRIES_AT + 8 * NET_RING_ENTRIES <= PAGE_SIZE);
        assert!(NET_MAX_FRAME >= 1514);
        assert_eq!(PAGE_SIZE % NET_BUF_BYTES, 0);
    }

    #[test]
    fn entries_round_trip() {
        for seq in [0u64, 1, 255, 256, u32::MAX as u64, u32::MAX as u64 + 1, u64::MAX - 1] {
            let e = net_entry(seq, 8191, 1514);
            assert_eq!(net_entry_buffer(e), 8191);
            assert_eq!(net_entry_len(e), 1514);
            assert!(net_entry_is(e, seq));
            assert!(!net_entry_is(e, seq.wrapping_add(1)));
            assert!(!net_entry_is(e, seq.wrapping_add(NET_RING_ENTRIES)), "last lap's entry is not this lap's");
        }
        assert!(!net_entry_is(0, 0), "a zeroed slot holds no entry");
        assert!(NET_MAX_BUFFERS <= 0x1_0000);
    }

    #[test]
    fn buffers_are_capped_and_partitioned() {
        assert_eq!(net_buffers(net_bufs_offset(2), 2), 0);
        assert_eq!(net_buffers(net_bufs_offset(2) + 10 * NET_BUF_BYTES + 5, 2), 10);
        assert_eq!(net_buffers(1 << 30, 1), NET_MAX_BUFFERS);
        assert_eq!(net_first_buffer(1, 2, 10), 5);
    }

    fn tcp_frame(sport: u16, ihl_words: u8, flags_frag: u16, proto: u8) -> [u8; 64] {
        let mut f = [0u8; 64];
        f[12] = 0x08;
        f[14] = 0x40 | ihl_words;
        f[14 + 6..14 + 8].copy_from_slice(&flags_frag.to_be_bytes());
        f[14 + 9] = proto;
        f[14 + 12..14 + 16].copy_from_slice(&[10, 0, 2, 2]);
        f[14 + 16..14 + 20].copy_from_slice(&[10, 0, 2, 15]);
        let l4 = 14 + 4 * ihl_words as usize;
        f[l4..l4 + 2].copy_from_slice(&sport.to_be_bytes());
        f[l4 + 2..l4 + 4].copy_from_slice(&80u16.to_be_bytes());
        f
    }

    #[test]
    fn steering_follows_the_flow_and_sends_the_rest_to_channel_0() {
        let mut seen = [false; 4];
        for p in 1000..1100u16 {
            let c = net_steer(&tcp_frame(p, 5, 0x4000, 6), 4);
            assert_eq!(c, (net_flow_hash(0x0A00_0202, p, 0x0A00_020F, 80) % 4) as u64);
            // The port is read after the IP options: a frame with options steers by its ports.
            assert_eq!(net_steer(&tcp_frame(p, 6, 0, 17), 4), (net_flow_hash(0x0A00_0202, p, 0x0A00_020F, 80) % 4) as u64);
            seen[c as usize] = true;
        }
        assert!(seen.iter().all(|&s| s), "100 flows reach every channel");
        // ICMP, fragments, bad header lengths, ARP, runts: channel 0.
        assert_eq!(net_steer(&tcp_frame(7, 5, 0, 1), 4), 0);
        for p in 1000..1100u16 {
            assert_eq!(net_steer(&tcp_frame(p, 5, 0x2000, 6), 4), 0);
            assert_eq!(net_steer(&tcp_frame(p, 5, 0x0001, 6), 4), 0);
            assert_eq!(net_steer(&tcp_frame(p, 4, 0, 6), 4), 0);
        }
        let mut arp = tcp_frame(5, 5, 0, 6);
        arp[13] = 0x06;
        assert_eq!(net_steer(&arp, 4), 0);
        for len in 0..40 {
            assert!(net_steer(&tcp_frame(9, 5, 0, 6)[..len], 4) < 4);
        }
        // IHL 15 (60 bytes of header) in a 64-byte frame: no room for ports.
        assert_eq!(net_steer(&tcp_frame(0, 5, 0, 6).map(|b| b)[..], 1), 0);
        let mut long = tcp_frame(3, 5, 0, 6);
        long[14] = 0x4F;
        assert_eq!(net_steer(&long, 4), 0);
    }

    #[test]
    fn flow_hash_spreads_adjacent_ports() {
        let mut seen = [0u32; 4];
        for p in 40000u16..40400 {
            seen[(net_flow_hash(0x0A00_0202, p, 0x0A00_020F, 80) % 4) as usize] += 1;
        }
        for s in seen {
            assert!(s > 60, "{seen:?}");
        }
    }
}
