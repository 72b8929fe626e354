//! `cargo xtask net fuzz`: the frame fuzzer's host side (docs/net.md). The guest's NIC is
//! connected by QEMU's `-netdev socket,connect=127.0.0.1:PORT` to this process, which is the
//! whole network: it writes seeded random and mutated Ethernet frames into the guest (truncated,
//! bad IP and TCP checksums, bogus lengths and header sizes, huge and malformed TCP option lists,
//! fragments, SYNs to open and closed ports, random bytes, frames past the MTU), answers the
//! guest's ARP requests for
//! the gateway, and at the end checks that the guest's TCP service still serves a connection
//! (a handshake completed by hand, the 128 bytes received up to the FIN), and that the serial
//! line shows no kernel panic, oops or BUG.
//!
//! Frame `i` of seed `S` depends on (S, i) only, so a failure is replayed with the same seed
//! (and `--frames` up to that frame). The stream format QEMU uses on the socket: each frame
//! preceded by its length as a 4-byte big-endian number.
//!
//! The guest runs with `conns=1`: the probe is its one completed connection, after which it
//! must print `tcpserv: done` and stop by itself (ours then runs the kernel's leak check, whose
//! `init: LEAK` line fails the run). Not done: ours' guest side is not there yet.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::host::qemu::Session;

/// The guest NIC's MAC (set explicitly on the device) and addresses of QEMU's user network,
/// which the fuzzer impersonates (guest 10.0.2.15, gateway 10.0.2.2 with slirp's MAC).
pub const GUEST_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
pub const GATEWAY_MAC: [u8; 6] = [0x52, 0x55, 0x0a, 0x00, 0x02, 0x02];
pub const GUEST_IP: [u8; 4] = [10, 0, 2, 15];
pub const GATEWAY_IP: [u8; 4] = [10, 0, 2, 2];
const MAX_FRAMES: u64 = 100_000_000;

/// QEMU arguments: the same NIC as `--net`, its netdev a socket connecting to 127.0.0.1:port.
pub fn qemu_args(port: u16) -> Vec<String> {
    vec![
        "-netdev".into(),
        format!("socket,id=n0,connect=127.0.0.1:{port}"),
        "-device".into(),
        format!("virtio-net-pci,netdev=n0,mac={}", GUEST_MAC.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")),
    ]
}

/// The seeded generator of the bench's boot order (splitmix64): frame `i` of seed `S` is the
/// same on every machine.
use crate::host::rng::Rng;

/// The Internet checksum (RFC 1071) of `data`, starting from `sum`.
pub fn checksum(data: &[u8], mut sum: u32) -> u16 {
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

pub fn ethernet(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + payload.len());
    f.extend(dst);
    f.extend(src);
    f.extend(ethertype.to_be_bytes());
    f.extend(payload);
    f
}

/// An IPv4 header (20 bytes, no options) with a correct checksum, then `payload`.
pub fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, ident: u16, flags_frag: u16, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, proto, 0, 0];
    h[2..4].copy_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    h[4..6].copy_from_slice(&ident.to_be_bytes());
    h[6..8].copy_from_slice(&flags_frag.to_be_bytes());
    h.extend(src);
    h.extend(dst);
    let c = checksum(&h, 0);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend(payload);
    h
}

fn pseudo_sum(src: [u8; 4], dst: [u8; 4], proto: u8, len: usize) -> u32 {
    let mut p = Vec::with_capacity(12);
    p.extend(src);
    p.extend(dst);
    p.extend([0, proto]);
    p.extend((len as u16).to_be_bytes());
    p.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum()
}

pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const ACK: u8 = 0x10;

/// A TCP segment (header with `options`, padded to 4 bytes) with a correct checksum.
#[allow(clippy::too_many_arguments)]
pub fn tcp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, seq: u32, ack: u32, flags: u8, options: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut opts = options.to_vec();
    opts.truncate(40);
    while !opts.len().is_multiple_of(4) {
        opts.push(0);
    }
    let mut t = Vec::new();
    t.extend(sport.to_be_bytes());
    t.extend(dport.to_be_bytes());
    t.extend(seq.to_be_bytes());
    t.extend(ack.to_be_bytes());
    t.push((((20 + opts.len()) / 4) as u8) << 4);
    t.push(flags);
    t.extend(64240u16.to_be_bytes());
    t.extend([0, 0, 0, 0]);
    t.extend(opts);
    t.extend(payload);
    let c = checksum(&t, pseudo_sum(src, dst, 6, t.len()));
    t[16..18].copy_from_slice(&c.to_be_bytes());
    t
}

/// A SYN from the gateway to the guest's `dport`, as a whole frame.
pub fn syn_frame(sport: u16, dport: u16, seq: u32, ident: u16) -> Vec<u8> {
    // MSS 1460, SACK permitted, window scale 7: what a real client sends.
    let opts = [2, 4, 0x05, 0xb4, 4, 2, 3, 3, 7, 1];
    let seg = tcp(GATEWAY_IP, GUEST_IP, sport, dport, seq, 0, SYN, &opts, &[]);
    ethernet(GUEST_MAC, GATEWAY_MAC, 0x0800, &ipv4(GATEWAY_IP, GUEST_IP, 6, ident, 0x4000, &seg))
}

/// The kinds of frame the fuzzer writes, one per frame, chosen by the frame's own random.
pub const KINDS: [&str; 15] = [
    "syn_open",
    "syn_closed",
    "truncated",
    "bad_ip_checksum",
    "bad_tcp_checksum",
    "bogus_ip_length",
    "bogus_ihl",
    "huge_tcp_options",
    "bogus_tcp_offset",
    "fragment",
    "udp_icmp",
    "arp_garbage",
    "bit_flips",
    "random_bytes",
    "oversized",
];

/// Frame `i` of `seed`: (kind index, bytes). Deterministic in (seed, i). Never empty: QEMU
/// 7.2's socket backend takes a 0-byte frame's send result (0) for "queued" and stops reading
/// the socket for good, which would hang QEMU, not test the guest.
pub fn frame(seed: u64, i: u64) -> (usize, Vec<u8>) {
    let mut r = Rng::new(seed ^ i.wrapping_mul(0xd6e8_feb8_6659_fd93));
    let kind = r.below(KINDS.len() as u64) as usize;
    let sport = 1024 + r.below(60000) as u16;
    let seq = r.next() as u32;
    let ident = r.next() as u16;
    let closed = [22u16, 23, 81, 443, 8080, 1][r.below(6) as usize];
    let base = |r: &mut Rng| syn_frame(sport, if r.below(2) == 0 { 80 } else { closed }, seq, ident);
    let f = match KINDS[kind] {
        "syn_open" => syn_frame(sport, 80, seq, ident),
        "syn_closed" => syn_frame(sport, closed, seq, ident),
        "truncated" => {
            let mut f = base(&mut r);
            f.truncate(1 + r.below(f.len() as u64 - 1) as usize);
            f
        }
        "bad_ip_checksum" => {
            let mut f = base(&mut r);
            f[14 + 10] ^= 1 + r.below(255) as u8;
            f
        }
        "bad_tcp_checksum" => {
            let mut f = base(&mut r);
            f[14 + 20 + 16] ^= 1 + r.below(255) as u8;
            f
        }
        "bogus_ip_length" => {
            let mut f = base(&mut r);
            let len = [0u16, 1, 19, 20, 21, 40, 1500, 65535, r.next() as u16][r.below(9) as usize];
            f[16..18].copy_from_slice(&len.to_be_bytes());
            // Keep the header checksum right so the length itself is what is checked.
            f[24..26].copy_from_slice(&[0, 0]);
            let c = checksum(&f[14..34], 0);
            f[24..26].copy_from_slice(&c.to_be_bytes());
            f
        }
        "bogus_ihl" => {
            let mut f = base(&mut r);
            f[14] = 0x40 | r.below(16) as u8;
            f
        }
        "huge_tcp_options" => {
            // 40 bytes of options (the most a header holds): random kinds with random, often
            // lying, lengths, or a run of one kind.
            let mut opts = Vec::new();
            while opts.len() < 40 {
                match r.below(4) {
                    0 => opts.extend([r.below(256) as u8, r.below(256) as u8]),
                    1 => opts.extend([2, 4, r.next() as u8, r.next() as u8]),
                    2 => opts.extend([8, 10 + r.below(3) as u8 * 20]),
                    _ => opts.push(1),
                }
            }
            let dport = if r.below(2) == 0 { 80 } else { closed };
            let seg = tcp(GATEWAY_IP, GUEST_IP, sport, dport, seq, 0, SYN, &opts, &[]);
            ethernet(GUEST_MAC, GATEWAY_MAC, 0x0800, &ipv4(GATEWAY_IP, GUEST_IP, 6, ident, 0x4000, &seg))
        }
        "bogus_tcp_offset" => {
            let mut f = base(&mut r);
            f[14 + 20 + 12] = (r.below(16) as u8) << 4;
            f
        }
        "fragment" => {
            let seg = tcp(GATEWAY_IP, GUEST_IP, sport, 80, seq, 0, SYN | ACK, &[], &{ let n = r.below(64) as usize; r.bytes(n) });
            let flags_frag = (r.below(2) as u16) << 13 | r.below(8192) as u16;
            let cut = r.below(seg.len() as u64 + 1) as usize;
            ethernet(GUEST_MAC, GATEWAY_MAC, 0x0800, &ipv4(GATEWAY_IP, GUEST_IP, 6, ident, flags_frag, &seg[..cut]))
        }
        "udp_icmp" => {
            let n = r.below(200) as usize;
            let body = r.bytes(n);
            let (proto, payload) = if r.below(2) == 0 {
                let mut u = Vec::new();
                u.extend((sport).to_be_bytes());
                u.extend((r.below(65536) as u16).to_be_bytes());
                u.extend(((8 + body.len()) as u16).to_be_bytes());
                u.extend([0, 0]);
                u.extend(&body);
                (17, u)
            } else {
                let mut icmp = vec![[8u8, 0, 3, 11, 5][r.below(5) as usize], 0, 0, 0, 0, 1, 0, 1];
                icmp.extend(&body);
                let c = checksum(&icmp, 0);
                icmp[2..4].copy_from_slice(&c.to_be_bytes());
                (1, icmp)
            };
            ethernet(GUEST_MAC, GATEWAY_MAC, 0x0800, &ipv4(GATEWAY_IP, GUEST_IP, proto, ident, 0, &payload))
        }
        "arp_garbage" => {
            let mut a = vec![0, 1, 8, 0, 6, 4, 0, r.below(4) as u8];
            a.extend(GATEWAY_MAC);
            a.extend(if r.below(2) == 0 { GATEWAY_IP } else { [r.next() as u8, 0, 2, r.next() as u8] });
            a.extend([0; 6]);
            a.extend(GUEST_IP);
            let cut = 8 + r.below(21) as usize;
            a.truncate(cut);
            let dst = if r.below(2) == 0 { [0xff; 6] } else { GUEST_MAC };
            ethernet(dst, GATEWAY_MAC, 0x0806, &a)
        }
        "bit_flips" => {
            let mut f = base(&mut r);
            for _ in 0..1 + r.below(8) {
                let at = 12 + r.below(f.len() as u64 - 12) as usize;
                f[at] ^= 1 << r.below(8);
            }
            f
        }
        "oversized" => {
            // Past the 1514-byte Ethernet MTU: a TCP segment with a payload of up to 9000
            // bytes, its IP length either true or the truncated 16-bit value of a lie.
            let n = 1500 + r.below(7500) as usize;
            let seg = tcp(GATEWAY_IP, GUEST_IP, sport, 80, seq, r.next() as u32, ACK, &[], &r.bytes(n));
            let mut f = ethernet(GUEST_MAC, GATEWAY_MAC, 0x0800, &ipv4(GATEWAY_IP, GUEST_IP, 6, ident, 0, &seg));
            if r.below(2) == 0 {
                f[16..18].copy_from_slice(&(r.next() as u16).to_be_bytes());
            }
            f
        }
        _ => {
            let n = 1 + r.below(1514) as usize;
            let mut f = r.bytes(n);
            if f.len() >= 6 && r.below(2) == 0 {
                f[..6].copy_from_slice(&GUEST_MAC);
            }
            f
        }
    };
    (kind, f)
}

/// What the guest sent back, by kind.
#[derive(Debug, Default)]
struct FromGuest {
    frames: AtomicU64,
    arp_requests: AtomicU64,
    syn_acks: AtomicU64,
    rsts: AtomicU64,
    /// The liveness probe's SYN-ACK arrived.
    probe_answered: AtomicBool,
    /// The probe connection as the guest sent it.
    probe: Mutex<Probe>,
}

/// The probe connection's state, filled in by the reader.
#[derive(Debug, Default)]
struct Probe {
    /// (the guest's sequence number, what it acknowledged) from its SYN-ACK.
    syn_ack: Option<(u32, u32)>,
    /// The reply bytes received in order.
    data: Vec<u8>,
    fin: bool,
}

const PROBE_PORT: u16 = 61000;

/// One frame, length first, written whole under the lock: the fuzzer and the ARP responder
/// share the stream, and interleaved halves would desynchronise QEMU's framing.
fn write_frame(s: &Mutex<TcpStream>, f: &[u8]) -> std::io::Result<()> {
    let mut b = Vec::with_capacity(4 + f.len());
    b.extend((f.len() as u32).to_be_bytes());
    b.extend(f);
    s.lock().map_err(|_| std::io::Error::other("writer lock poisoned"))?.write_all(&b)
}

/// Read the guest's frames: answer ARP requests for the gateway, count SYN-ACKs and resets,
/// note the probe's answer. Ends when the socket closes.
fn read_guest(mut s: TcpStream, tx: Arc<Mutex<TcpStream>>, seen: Arc<FromGuest>) {
    let mut len = [0u8; 4];
    loop {
        if s.read_exact(&mut len).is_err() {
            return;
        }
        let n = u32::from_be_bytes(len) as usize;
        if n > 65536 {
            return;
        }
        let mut f = vec![0u8; n];
        if s.read_exact(&mut f).is_err() {
            return;
        }
        seen.frames.fetch_add(1, Ordering::Relaxed);
        if f.len() >= 42 && f[12..14] == [8, 6] && f[20..22] == [0, 1] && f[38..42] == GATEWAY_IP {
            seen.arp_requests.fetch_add(1, Ordering::Relaxed);
            let mut a = vec![0, 1, 8, 0, 6, 4, 0, 2];
            a.extend(GATEWAY_MAC);
            a.extend(GATEWAY_IP);
            a.extend(&f[22..28]);
            a.extend(&f[28..32]);
            let _ = write_frame(&tx, &ethernet(f[22..28].try_into().unwrap_or([0xff; 6]), GATEWAY_MAC, 0x0806, &a));
        } else if f.len() >= 54 && f[12..14] == [8, 0] && f[23] == 6 {
            let ihl = usize::from(f[14] & 0xf) * 4;
            let t = 14 + ihl;
            if f.len() >= t + 20 {
                let flags = f[t + 13];
                let dport = u16::from_be_bytes([f[t + 2], f[t + 3]]);
                let be32 = |at: usize| u32::from_be_bytes([f[at], f[at + 1], f[at + 2], f[at + 3]]);
                if flags & (SYN | ACK) == SYN | ACK {
                    seen.syn_acks.fetch_add(1, Ordering::Relaxed);
                }
                if dport == PROBE_PORT {
                    // The payload ends where the IP datagram does (not at the frame's end).
                    let ip_end = (14 + usize::from(u16::from_be_bytes([f[16], f[17]]))).min(f.len());
                    let data_at = t + usize::from(f[t + 12] >> 4) * 4;
                    let payload = f.get(data_at..ip_end).unwrap_or(&[]);
                    if let Ok(mut p) = seen.probe.lock() {
                        if flags & (SYN | ACK) == SYN | ACK {
                            p.syn_ack.get_or_insert((be32(t + 4), be32(t + 8)));
                            seen.probe_answered.store(true, Ordering::SeqCst);
                        } else if let Some((isn, _)) = p.syn_ack {
                            if be32(t + 4).wrapping_sub(isn.wrapping_add(1)) as usize == p.data.len() {
                                p.data.extend_from_slice(payload);
                                p.fin |= flags & FIN != 0;
                            }
                        }
                    }
                }
                if flags & RST != 0 {
                    seen.rsts.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// Options of `cargo xtask net fuzz`.
#[derive(Debug, Clone)]
pub struct FuzzOptions {
    pub frames: u64,
    pub seed: u64,
    pub system: String,
    pub smp: u32,
    pub timeout: Duration,
    /// Only frames of these kinds are sent (the others are skipped, not replaced, so frame i
    /// stays frame i of the seed); all kinds when empty.
    pub kinds: Vec<usize>,
    /// Ours: `tcpserv`'s mode, which decides who parses the frames: `dedicated` (a kernel core
    /// steers every frame to the service core's ring), `polling` (service cores poll the
    /// card's queues themselves) or `inline` (one core polls the card and serves).
    pub mode: String,
}

/// `cargo xtask net fuzz`'s options, checked.
pub fn options(a: crate::net::options::NetFuzzArgs) -> Result<FuzzOptions, String> {
    let mut o = FuzzOptions { frames: a.frames, seed: a.seed, system: a.system, smp: a.smp, timeout: Duration::from_secs(a.timeout), kinds: Vec::new(), mode: a.mode };
    if o.system != "ours" && o.mode != "dedicated" {
        return Err(format!("net fuzz: --mode {} is for --system ours (Linux's service has one mode)", o.mode));
    }
    for k in a.kinds.as_deref().unwrap_or("").split(',').filter(|k| !k.is_empty()) {
        let i = KINDS.iter().position(|x| *x == k).ok_or_else(|| format!("net fuzz: --kinds: unknown kind `{k}` (known: {})", KINDS.join(", ")))?;
        o.kinds.push(i);
    }
    if o.frames == 0 || o.frames > MAX_FRAMES {
        return Err(format!("net fuzz: --frames: {} is not in 1..={MAX_FRAMES}", o.frames));
    }
    Ok(o)
}

/// Lines on a guest's serial output that mean its kernel broke.
pub fn kernel_trouble(serial: &str) -> Option<&str> {
    serial.lines().find(|l| ["Kernel panic", "KERNEL PANIC", "Oops", "BUG:", "general protection fault", "init: LEAK", "WARNING:"].iter().any(|p| l.contains(p)))
}

/// `cargo xtask net fuzz`.
pub fn command(o: FuzzOptions) -> Result<(), String> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| format!("net fuzz: cannot listen on 127.0.0.1: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let mut qemu: Vec<String>;
    if o.system == "linux" {
        let k = crate::guest::linux::fetch_kernel()?;
        let initrd = crate::guest::linux_net::initramfs(&k)?;
        let mut vm = crate::guest::linux::LinuxVm::new(&k, &initrd);
        vm.smp = o.smp;
        // conns=1: the probe is the one connection completed; then the guest stops by itself.
        vm.append = format!("wl=tcpserv threads={} conns=1", o.smp);
        qemu = vm.qemu_args();
    } else {
        let cfg = crate::host::vm::VmConfig {
            smp: o.smp,
            cmdline: format!("init=tcpserv -- mode={} conns=1", o.mode),
            medium: Some(crate::host::vm::BootMedium::Kernel(crate::host::env::build_kernel()?)),
            initrd: Some(crate::host::user::build_initrd()?),
            ..Default::default()
        };
        qemu = cfg.qemu_args();
        // Drop VmConfig's "no NIC": the socket NIC below is the only one.
        if let Some(i) = qemu.windows(2).position(|w| w[0] == "-nic" && w[1] == "none") {
            qemu.drain(i..i + 2);
        }
        qemu.extend(["-serial", "stdio", "-monitor", "none"].map(String::from));
    }
    qemu.extend(qemu_args(port));
    let mode = if o.system == "ours" { format!(" mode={}", o.mode) } else { String::new() };
    println!("net fuzz: seed={} frames={} system={}{mode} smp={} (QEMU's NIC connects to 127.0.0.1:{port})", o.seed, o.frames, o.system, o.smp);
    let mut session = Session::start(&qemu, false)?;
    let deadline = session.start + o.timeout;
    // QEMU connects at start-up; bounded wait for it.
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let sock = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::WouldBlock && session.start.elapsed() < Duration::from_secs(30) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("net fuzz: QEMU never connected its NIC to 127.0.0.1:{port}: {e}")),
        }
    };
    sock.set_nonblocking(false).map_err(|e| e.to_string())?;
    let ready = session.wait_for(&|l| l.starts_with(crate::guest::tcp_accept::READY) || l.starts_with("tcpserv-error") || l.starts_with("workload-error"), deadline);
    match ready {
        Ok(l) if l.starts_with(crate::guest::tcp_accept::READY) => {}
        other => {
            let f = session.finish(Instant::now());
            let last = f.serial.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("(no output)");
            return Err(format!("net fuzz: the guest's service never became ready ({other:?}); last line: {last}"));
        }
    }
    let seen = Arc::new(FromGuest::default());
    // A guest that stops taking frames blocks our writes: that is a hang, reported as one.
    sock.set_write_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
    let tx = Arc::new(Mutex::new(sock.try_clone().map_err(|e| e.to_string())?));
    {
        let (rx, tx2, seen) = (sock, tx.clone(), seen.clone());
        std::thread::spawn(move || read_guest(rx, tx2, seen));
    }
    let mut by_kind = [0u64; KINDS.len()];
    let start = Instant::now();
    let mut sent = 0;
    let mut stop_why = None;
    for i in 0..o.frames {
        if Instant::now() > deadline {
            stop_why = Some(format!("the --timeout of {} s passed after {i} frames", o.timeout.as_secs()));
            break;
        }
        let (kind, f) = frame(o.seed, i);
        if !o.kinds.is_empty() && !o.kinds.contains(&kind) {
            continue;
        }
        if let Err(e) = write_frame(&tx, &f) {
            stop_why = Some(format!("the guest stopped taking frames at frame {i} (seed {}): {e}", o.seed));
            break;
        }
        by_kind[kind] += 1;
        sent += 1;
    }
    let took = start.elapsed();
    // Liveness: a well-formed connection to the service must still get its 128 bytes. The
    // SYN is retried (the guest may first have to ARP for the gateway, and its backlog may be
    // full of the fuzzer's half-open connections); then the handshake is completed by hand
    // and the reply collected up to the guest's FIN, then reset.
    let probe_deadline = Instant::now() + Duration::from_secs(20).min(deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(5));
    let mut n = 0u32;
    while !seen.probe_answered.load(Ordering::SeqCst) && Instant::now() < probe_deadline {
        let _ = write_frame(&tx, &syn_frame(PROBE_PORT, 80, 0x1000_0000 + n, 0x7000 + n as u16));
        n += 1;
        std::thread::sleep(Duration::from_millis(500));
    }
    let alive = seen.probe_answered.load(Ordering::SeqCst);
    let segment = |seq: u32, ack: u32, flags: u8| {
        let t = tcp(GATEWAY_IP, GUEST_IP, PROBE_PORT, 80, seq, ack, flags, &[], &[]);
        ethernet(GUEST_MAC, GATEWAY_MAC, 0x0800, &ipv4(GATEWAY_IP, GUEST_IP, 6, 0x7fff, 0x4000, &t))
    };
    let mut reply = Vec::new();
    let synack = seen.probe.lock().ok().and_then(|p| p.syn_ack);
    if let Some((isn, our_next)) = synack {
        let _ = write_frame(&tx, &segment(our_next, isn.wrapping_add(1), ACK));
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            let (len, fin) = seen.probe.lock().map(|p| (p.data.len(), p.fin)).unwrap_or((0, false));
            if fin || len > crate::host::tcpload::REPLY_LEN {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        reply = seen.probe.lock().map(|p| p.data.clone()).unwrap_or_default();
        let _ = write_frame(&tx, &segment(our_next, 0, RST));
    }
    let served = reply == crate::host::tcpload::expected_reply();
    // The probe was the guest's one connection (conns=1): it must now say `tcpserv: done` and
    // stop by itself (ours then runs the kernel's leak check, which must find nothing).
    let done = served && session.wait_for(&|l| l.starts_with(crate::guest::tcp_accept::DONE), Instant::now() + Duration::from_secs(60)).is_ok();
    let f = session.finish(Instant::now() + Duration::from_secs(if done { 30 } else { 0 }));
    // Ours also ends with the kernel's leak check (free pages, heap objects, kernel objects
    // before and after the program); its verdict is QEMU's exit status.
    let stopped = done && !f.killed && (o.system != "ours" || f.exit_code == Some(crate::host::vm::QEMU_EXIT_SUCCESS));
    let kinds: Vec<String> = KINDS.iter().zip(by_kind).map(|(k, n)| format!("{k}={n}")).collect();
    println!("net fuzz: wrote {sent} frames in {:.1}s (the probe queued behind them proves the guest took them all): {}", took.as_secs_f64(), kinds.join(" "));
    println!(
        "net fuzz: from the guest: frames={} arp_requests={} syn_acks={} rsts={}; probe connection to port 80: {}",
        seen.frames.load(Ordering::Relaxed),
        seen.arp_requests.load(Ordering::Relaxed),
        seen.syn_acks.load(Ordering::Relaxed),
        seen.rsts.load(Ordering::Relaxed),
        match (alive, served) {
            (true, true) => "answered, the 128 bytes received".to_string(),
            (true, false) if reply.len() == crate::host::tcpload::REPLY_LEN => "SYN answered, but the 128 reply bytes are not the expected ones".to_string(),
            (true, false) => format!("SYN answered, but {} reply bytes, not the 128 expected", reply.len()),
            _ => "SYN NOT answered".to_string(),
        }
    );
    let trouble = kernel_trouble(&f.serial).map(str::to_string);
    let log = crate::host::env::target_dir().join("net-fuzz.serial.txt");
    let _ = std::fs::write(&log, &f.serial);
    match (stop_why, trouble, alive && served && stopped) {
        (None, None, true) => {
            println!("net fuzz: ok (serial log: {})", log.display());
            Ok(())
        }
        (why, trouble, _) => Err(format!(
            "net fuzz: seed {} failed: {}{}{} (serial log: {})",
            o.seed,
            why.unwrap_or_default(),
            trouble.map(|t| format!(" the kernel said: {t}")).unwrap_or_default(),
            if !alive {
                " the service no longer answers a SYN"
            } else if !served {
                " the service answers a SYN but no longer sends its 128 bytes"
            } else if !done {
                " no `tcpserv: done` after the probe, its one connection"
            } else if !stopped {
                " the guest did not stop by itself after `tcpserv: done`, or (ours) its leak check failed"
            } else {
                ""
            },
            log.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_replay_by_seed_and_index() {
        for i in 0..200 {
            assert_eq!(frame(7, i), frame(7, i));
        }
        let a: Vec<_> = (0..50).map(|i| frame(7, i).1).collect();
        let b: Vec<_> = (0..50).map(|i| frame(8, i).1).collect();
        assert_ne!(a, b, "another seed, other frames");
        assert!((0..5000).all(|i| !frame(5, i).1.is_empty()), "no empty frame (it stalls QEMU's socket netdev)");
        // Every kind comes up in a short run.
        let mut seen = [false; KINDS.len()];
        for i in 0..2000 {
            seen[frame(3, i).0] = true;
        }
        assert!(seen.iter().all(|&s| s), "{seen:?}");
    }

    #[test]
    fn a_well_formed_syn_checks_out() {
        let f = syn_frame(40000, 80, 12345, 1);
        assert_eq!(&f[..6], &GUEST_MAC);
        assert_eq!(f[12..14], [8, 0]);
        let ip = &f[14..34];
        assert_eq!(checksum(ip, 0), 0, "IP header checksum verifies");
        let seg = &f[34..];
        assert_eq!(checksum(seg, pseudo_sum(GATEWAY_IP, GUEST_IP, 6, seg.len())), 0, "TCP checksum verifies");
        assert_eq!(u16::from_be_bytes([seg[2], seg[3]]), 80);
        assert_eq!(seg[13], SYN);
        // The checksum-breaking kinds really break them.
        for i in 0..500 {
            let (k, f) = frame(11, i);
            match KINDS[k] {
                "bad_ip_checksum" => assert_ne!(checksum(&f[14..34], 0), 0),
                "bad_tcp_checksum" => assert_ne!(checksum(&f[34..], pseudo_sum(GATEWAY_IP, GUEST_IP, 6, f.len() - 34)), 0),
                "huge_tcp_options" => assert_eq!(f[34 + 12] >> 4, 15, "a 60-byte TCP header"),
                _ => {}
            }
        }
    }

    #[test]
    fn options_and_trouble() {
        let a = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        // The whole path of `cargo xtask net fuzz ...`: clap's parse, then the checks here.
        let parse_options = |args: &[String]| -> Result<FuzzOptions, String> {
            match crate::host::args::parse_args::<crate::net::options::NetArgs>("net", &[&["fuzz".to_string()], args].concat())? {
                crate::net::options::NetArgs { command: crate::net::options::NetCommand::Fuzz(f) } => options(f),
                other => panic!("{other:?}"),
            }
        };
        let o = parse_options(&a("--frames 100 --seed 9 --system linux --smp 1")).unwrap();
        assert_eq!((o.frames, o.seed, o.smp, o.mode.as_str()), (100, 9, 1, "dedicated"));
        assert_eq!(parse_options(&a("--system ours --mode polling --smp 3")).unwrap().mode, "polling");
        assert!(parse_options(&a("--system linux --mode inline")).unwrap_err().contains("--mode"));
        for (args, needle) in [("--frames 0", "--frames"), ("--seed x", "--seed"), ("--system bsd", "--system"), ("--smp 0", "--smp"), ("--bogus", "--bogus"), ("--kinds truncated,nosuch", "--kinds"), ("--frames 200000000", "--frames"), ("--timeout 0", "--timeout"), ("--system ours --mode ring", "--mode")] {
            assert!(parse_options(&a(args)).unwrap_err().contains(needle), "{args}");
        }
        assert!(kernel_trouble("ok\n[  3.1] BUG: unable to handle page fault\n").is_some());
        assert!(kernel_trouble("tcpserv: ready\n").is_none());
        let q = qemu_args(4444);
        assert_eq!(q[1], "socket,id=n0,connect=127.0.0.1:4444");
        assert!(q[3].ends_with("mac=52:54:00:12:34:56"));
    }
}
