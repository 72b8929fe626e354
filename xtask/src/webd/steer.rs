//! Reaching a chosen front-end from the host. Ours steers every received TCP frame to channel
//! `net_flow_hash(src, sport, dst, dport) % nchannels` (abi::net::net_steer), and front-end
//! `i` of `--frontends` serves channel `i`. A forwarded connection reaches the guest from
//! QEMU's user network as 10.0.2.2 with the host client's own source port (libslirp keeps the
//! port and replaces a loopback source by its host alias), to 10.0.2.15 on the guest port. So
//! the host picks a source port whose hash lands on the channel it wants, binds it, and
//! connects. `webd run --check` proves the mapping on every boot: it asks each front-end in
//! turn and reads the per-core counters in `/stats`.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::os::fd::FromRawFd;
use std::time::Duration;

/// The guest's address on QEMU's user network.
pub const GUEST_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 15);
/// The address host connections come from, as the guest sees them.
pub const HOST_ALIAS: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);

/// The channel a connection from host source port `sport` to guest port `gport` is steered to.
pub fn channel_of(sport: u16, gport: u16, nchannels: u64) -> u64 {
    if nchannels <= 1 {
        return 0;
    }
    abi::net::net_flow_hash(u32::from(HOST_ALIAS), sport, u32::from(GUEST_IP), gport) as u64 % nchannels
}

/// Source ports (from the ephemeral range's top down, away from the ports the host hands out
/// itself) that steer to `channel` of `nchannels`, in order.
pub fn ports_for(channel: u64, nchannels: u64, gport: u16) -> impl Iterator<Item = u16> {
    (40000u16..=60999).rev().filter(move |&p| channel_of(p, gport, nchannels) == channel)
}

/// A TCP connection to 127.0.0.1:`port` from 127.0.0.1:`sport`: std has no bind-before-
/// connect, so the socket calls std itself links against. The connect is blocking with
/// `timeout` as its send timeout (Linux bounds connect by SO_SNDTIMEO).
pub fn connect_from(sport: u16, port: u16, timeout: Duration) -> io::Result<TcpStream> {
    // SAFETY: socket(2) makes a new descriptor or fails; nothing else is touched.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh socket this function owns; the stream closes it on every path.
    let stream = unsafe { TcpStream::from_raw_fd(fd) };
    stream.set_write_timeout(Some(timeout))?;
    let sockaddr = |a: SocketAddrV4| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*a.ip()).to_be() },
        sin_zero: [0; 8],
    };
    let local = sockaddr(SocketAddrV4::new(Ipv4Addr::LOCALHOST, sport));
    let remote = sockaddr(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: pointers to live sockaddr_in values of the length passed, on our socket.
    if unsafe { libc::bind(fd, &local as *const _ as *const libc::sockaddr, len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    loop {
        // SAFETY: as for bind.
        if unsafe { libc::connect(fd, &remote as *const _ as *const libc::sockaddr, len) } == 0 {
            return Ok(stream);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            // A connect that ran out of SO_SNDTIMEO says EINPROGRESS: a timeout.
            return Err(if e.raw_os_error() == Some(libc::EINPROGRESS) { io::Error::new(io::ErrorKind::TimedOut, "connect timed out") } else { e });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn steering_is_the_guests_hash_and_spreads() {
        // The same function the guest's steering uses, on the frame the guest would see.
        let mut frame = vec![0u8; 14 + 20 + 20];
        frame[12..14].copy_from_slice(&[0x08, 0x00]);
        frame[14] = 0x45;
        frame[14 + 9] = 6;
        frame[14 + 12..14 + 16].copy_from_slice(&HOST_ALIAS.octets());
        frame[14 + 16..14 + 20].copy_from_slice(&GUEST_IP.octets());
        for sport in [40000u16, 40001, 51234, 60999] {
            frame[34..36].copy_from_slice(&sport.to_be_bytes());
            frame[36..38].copy_from_slice(&80u16.to_be_bytes());
            for n in 1..=4 {
                assert_eq!(channel_of(sport, 80, n), abi::net::net_steer(&frame, n), "port {sport}, {n} channels");
            }
        }
        // Every channel of 4 has ports, and the ones named steer there.
        for c in 0..4 {
            let p: Vec<u16> = ports_for(c, 4, 80).take(5).collect();
            assert_eq!(p.len(), 5);
            assert!(p.iter().all(|&p| channel_of(p, 80, 4) == c));
        }
        assert_eq!(channel_of(12345, 80, 1), 0);
    }

    #[test]
    fn connects_from_the_port_asked_for() {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let sport = ports_for(1, 2, 80).find(|&p| TcpListener::bind((Ipv4Addr::LOCALHOST, p)).is_ok()).unwrap();
        let c = connect_from(sport, port, Duration::from_secs(2)).unwrap();
        let (_, peer) = l.accept().unwrap();
        assert_eq!(peer.port(), sport);
        assert_eq!(c.local_addr().unwrap().port(), sport);
        // The port is now taken: a second bind fails with AddrInUse, not something else.
        let e = connect_from(sport, port, Duration::from_secs(2)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
        drop(c);
        // Nothing listening: refused.
        let free = crate::host::vm::free_port().unwrap();
        let sport2 = ports_for(0, 2, 80).find(|&p| p != sport && TcpListener::bind((Ipv4Addr::LOCALHOST, p)).is_ok()).unwrap();
        assert_eq!(connect_from(sport2, free, Duration::from_secs(2)).unwrap_err().kind(), io::ErrorKind::ConnectionRefused);
    }
}
