//! A private TCP/IP stack per service core: one smoltcp `Interface` and socket set over the
//! core's `Channel`, touched by that core only (Corey ran one lwIP per core).
//!
//! smoltcp runs on the IP layer (`Medium::Ip`); Ethernet framing and ARP are done here, because
//! with one IP address for the whole machine and flows steered to cores by their 4-tuple, an
//! ARP reply would reach only the channel its frame is steered to (channel 0). So: every core
//! learns its peers' MAC addresses from the frames it receives (a flow's first frame comes
//! from its peer), and channel 0 answers ARP requests for the machine's address. A core that
//! must send to an IP it has not heard from uses the last MAC it learned (on QEMU's user
//! network every peer is behind the one gateway MAC), or broadcasts.

use super::Channel;
use core::cell::RefCell;
use smoltcp::iface::{Config, Interface, SocketSet};
use smoltcp::phy::{self, DeviceCapabilities, Medium};
use smoltcp::time::Instant;
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr, Ipv4Address};

/// The machine's address on QEMU's user network, and its gateway.
pub const GUEST_IP: [u8; 4] = [10, 0, 2, 15];
pub const GATEWAY_IP: [u8; 4] = [10, 0, 2, 2];
const PREFIX: u8 = 24;

const ETH_HDR: usize = 14;
const BROADCAST: [u8; 6] = [0xFF; 6];

/// Peers this core has heard from: IPv4 address -> MAC (a small direct-mapped table).
struct Neighbors {
    ips: [u32; 16],
    macs: [[u8; 6]; 16],
    last: Option<[u8; 6]>,
}

impl Neighbors {
    fn learn(&mut self, ip: u32, mac: [u8; 6]) {
        let i = (ip as usize ^ (ip >> 8) as usize) % 16;
        self.ips[i] = ip;
        self.macs[i] = mac;
        self.last = Some(mac);
    }

    fn lookup(&self, ip: u32) -> [u8; 6] {
        let i = (ip as usize ^ (ip >> 8) as usize) % 16;
        if self.ips[i] == ip && ip != 0 {
            return self.macs[i];
        }
        self.last.unwrap_or(BROADCAST)
    }
}

/// What the Ethernet layer of one core counted.
#[derive(Clone, Copy, Debug, Default)]
pub struct EthStats {
    pub arp_replies: u64,
    pub non_ip_dropped: u64,
}

/// The smoltcp device of one core: its channel plus the Ethernet layer.
pub struct EthDevice {
    pub chan: RefCell<Channel>,
    neighbors: RefCell<Neighbors>,
    ip: u32,
    pub eth: RefCell<EthStats>,
}

impl EthDevice {
    pub fn new(chan: Channel) -> EthDevice {
        EthDevice {
            chan: RefCell::new(chan),
            neighbors: RefCell::new(Neighbors { ips: [0; 16], macs: [[0; 6]; 16], last: None }),
            ip: u32::from_be_bytes(GUEST_IP),
            eth: RefCell::new(EthStats::default()),
        }
    }

    fn mac(&self) -> [u8; 6] {
        self.chan.borrow().nic.mac
    }

    /// Answer an ARP request for our address (channel 0 gets every ARP frame).
    fn arp(&self, frame: &[u8]) {
        // Ethernet/IPv4 ARP: htype 1, ptype 0x0800, hlen 6, plen 4.
        if frame.len() < ETH_HDR + 28 || frame[ETH_HDR..ETH_HDR + 6] != [0, 1, 8, 0, 6, 4] {
            return;
        }
        let a = &frame[ETH_HDR..];
        let op = u16::from_be_bytes([a[6], a[7]]);
        let sha: [u8; 6] = [a[8], a[9], a[10], a[11], a[12], a[13]];
        let spa = u32::from_be_bytes([a[14], a[15], a[16], a[17]]);
        let tpa = u32::from_be_bytes([a[24], a[25], a[26], a[27]]);
        if spa != 0 {
            self.neighbors.borrow_mut().learn(spa, sha);
        }
        if op != 1 || tpa != self.ip {
            return;
        }
        if self.send_arp(2, sha, sha, spa.to_be_bytes()) {
            self.eth.borrow_mut().arp_replies += 1;
        }
    }

    /// Send an ARP packet of operation `op` (1 request, 2 reply) from this core's MAC and
    /// the machine's IP to `dst` (Ethernet), naming `target_mac`/`target_ip`; whether it
    /// went out.
    fn send_arp(&self, op: u16, dst: [u8; 6], target_mac: [u8; 6], target_ip: [u8; 4]) -> bool {
        let mac = self.mac();
        let mut ch = self.chan.borrow_mut();
        let Some((b, buf)) = ch.tx_buffer() else { return false };
        buf[0..6].copy_from_slice(&dst);
        buf[6..12].copy_from_slice(&mac);
        buf[12..14].copy_from_slice(&[0x08, 0x06]);
        let r = &mut buf[ETH_HDR..ETH_HDR + 28];
        r[0..6].copy_from_slice(&[0, 1, 8, 0, 6, 4]);
        r[6..8].copy_from_slice(&op.to_be_bytes());
        r[8..14].copy_from_slice(&mac);
        r[14..18].copy_from_slice(&self.ip.to_be_bytes());
        r[18..24].copy_from_slice(&target_mac);
        r[24..28].copy_from_slice(&target_ip);
        // Pad to the 60-byte Ethernet minimum.
        buf[ETH_HDR + 28..60].fill(0);
        ch.send(b, 60)
    }

    /// Tell the network we are here (a gratuitous ARP request for the gateway), so the first
    /// incoming connection does not wait for an ARP round trip.
    pub fn announce(&self) {
        self.send_arp(1, BROADCAST, [0; 6], GATEWAY_IP);
    }
}

pub struct RxToken<'a> {
    dev: &'a EthDevice,
    buffer: u32,
    frame: &'static [u8],
}

pub struct TxToken<'a> {
    dev: &'a EthDevice,
}

impl phy::RxToken for RxToken<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        let r = f(&self.frame[ETH_HDR..]);
        self.dev.chan.borrow_mut().recycle(self.buffer);
        r
    }
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mac = self.dev.mac();
        let mut ch = self.dev.chan.borrow_mut();
        let Some((b, buf)) = ch.tx_buffer() else {
            // `transmit` checked for a buffer; if none is left, the packet is built and lost
            // (TCP retransmits it), never a panic.
            drop(ch);
            let mut scratch = [0u8; 1536];
            let n = len.min(scratch.len());
            return f(&mut scratch[..n]);
        };
        let len = len.min(buf.len() - ETH_HDR);
        let r = f(&mut buf[ETH_HDR..ETH_HDR + len]);
        let dst_ip = if len >= 20 { u32::from_be_bytes([buf[ETH_HDR + 16], buf[ETH_HDR + 17], buf[ETH_HDR + 18], buf[ETH_HDR + 19]]) } else { 0 };
        let dst = self.dev.neighbors.borrow().lookup(dst_ip);
        buf[0..6].copy_from_slice(&dst);
        buf[6..12].copy_from_slice(&mac);
        buf[12..14].copy_from_slice(&[0x08, 0x00]);
        let mut n = ETH_HDR + len;
        if n < 60 {
            buf[n..60].fill(0);
            n = 60;
        }
        ch.send(b, n);
        r
    }
}

impl phy::Device for EthDevice {
    type RxToken<'a> = RxToken<'a>;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _timestamp: Instant) -> Option<(RxToken<'_>, TxToken<'_>)> {
        loop {
            let (b, frame) = self.chan.borrow_mut().recv()?;
            let ethertype = if frame.len() >= ETH_HDR { [frame[12], frame[13]] } else { [0, 0] };
            match ethertype {
                [0x08, 0x00] if frame.len() >= ETH_HDR + 20 => {
                    let src_ip = u32::from_be_bytes([frame[26], frame[27], frame[28], frame[29]]);
                    let src_mac = [frame[6], frame[7], frame[8], frame[9], frame[10], frame[11]];
                    self.neighbors.borrow_mut().learn(src_ip, src_mac);
                    let this = &*self;
                    return Some((RxToken { dev: this, buffer: b, frame }, TxToken { dev: this }));
                }
                [0x08, 0x06] => {
                    self.arp(frame);
                    self.chan.borrow_mut().recycle(b);
                }
                _ => {
                    self.eth.borrow_mut().non_ip_dropped += 1;
                    self.chan.borrow_mut().recycle(b);
                }
            }
        }
    }

    fn transmit(&mut self, _timestamp: Instant) -> Option<TxToken<'_>> {
        let mut ch = self.chan.borrow_mut();
        // `Stack::poll` collected the completions already; look again only when out of buffers.
        if !ch.has_tx_buffer() {
            ch.refill();
        }
        ch.has_tx_buffer().then_some(TxToken { dev: &*self })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ip;
        caps.max_transmission_unit = 1500;
        caps
    }
}

/// smoltcp's clock from the time-stamp counter, read without a system call: the service
/// cores' data path makes none in Dedicated mode.
pub fn now() -> Instant {
    Instant::from_micros((crate::time::tsc_ns() / 1000) as i64)
}

/// One core's stack: its device, interface and sockets.
pub struct Stack {
    pub dev: EthDevice,
    pub iface: Interface,
    pub sockets: SocketSet<'static>,
}

impl Stack {
    pub fn new(chan: Channel, seed: u64) -> Stack {
        let mut dev = EthDevice::new(chan);
        let mut config = Config::new(HardwareAddress::Ip);
        config.random_seed = seed;
        let mut iface = Interface::new(config, &mut dev, now());
        iface.update_ip_addrs(|a| {
            let _ = a.push(IpCidr::new(IpAddress::v4(GUEST_IP[0], GUEST_IP[1], GUEST_IP[2], GUEST_IP[3]), PREFIX));
        });
        let _ = iface.routes_mut().add_default_ipv4_route(Ipv4Address::new(GATEWAY_IP[0], GATEWAY_IP[1], GATEWAY_IP[2], GATEWAY_IP[3]));
        Stack { dev, iface, sockets: SocketSet::new(alloc::vec::Vec::new()) }
    }

    /// Whether a poll now has anything to do: a frame or a completion from the kernel, or one
    /// of smoltcp's timers (retransmission, time-wait, timeouts) is due. A core may skip the
    /// poll otherwise (an empty poll costs a few thousand instructions).
    pub fn has_work(&mut self) -> bool {
        self.dev.chan.borrow().has_work() || self.iface.poll_delay(now(), &self.sockets).is_some_and(|d| d.total_micros() == 0)
    }

    /// Sleep until something arrives for this core, smoltcp's next timer is due, or
    /// `max_us` passes (Dedicated and Polling; the kernel core wakes us with an IPI).
    pub fn wait_idle(&mut self, max_us: u64) {
        let due = self.iface.poll_delay(now(), &self.sockets).map(|d| d.total_micros()).unwrap_or(max_us);
        self.dev.chan.borrow().wait(due.min(max_us));
    }

    /// What `wait_idle` would ask of the kernel (the device and its `CONF_NET_WAIT`; a
    /// timeout of 0 in it means do not sleep), for a caller that sleeps after letting go of
    /// the stack.
    pub fn idle_wait(&mut self, max_us: u64) -> (abi::ObjName, abi::DeviceConf) {
        let due = self.iface.poll_delay(now(), &self.sockets).map(|d| d.total_micros()).unwrap_or(max_us);
        self.dev.chan.borrow().wait_request(due.min(max_us))
    }

    /// Move packets: give the kernel our buffers, poll the card if we must (Inline), and run
    /// the stack once. Returns whether any socket may have changed.
    pub fn poll(&mut self) -> bool {
        {
            let mut ch = self.dev.chan.borrow_mut();
            ch.refill();
            ch.poll_device();
        }
        self.iface.poll(now(), &mut self.dev, &mut self.sockets) == smoltcp::iface::PollResult::SocketStateChanged
    }
}
