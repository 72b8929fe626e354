//! The Linux baseline of webd (docs/webd.md, Corey §6.2/§8.4): the same server logic as ours
//! (webcore: the HTTP/1.1 parser with its limits, the router, response heads, filesum,
//! `/stats`) as one process with one thread per online CPU, each pinned to its CPU with
//! `sched_setaffinity` (the only placement Linux offers: it has no way to keep a file's data in
//! one core's cache, so this is random mode only, every thread summing whatever file its
//! request names), each with its own `SO_REUSEPORT` listener on the port (the kernel spreads
//! connections over them by a hash of the 4-tuple) and its own edge-triggered epoll loop over
//! its non-blocking connections: keep-alive, pipelining, responses written as the socket takes
//! them.
//!
//! In the baseline guest it is `/init` (pid 1): it loads the NIC's modules listed in
//! `/lib/modules/order` (xtask packs them, `crate::net::linux_guest`), configures 10.0.2.15/24
//! via 10.0.2.2 with ioctls, loads every file of `/files` (packed into the initramfs by
//! `cargo xtask webd run --system linux` and the `webd_filesum` bench) into memory, serves,
//! and after `--requests N` (answered 200, all threads, the `--warmup W` first not counted) or
//! `--seconds S` runs the share-nothing calibration on every CPU, prints `webd: done ...` and
//! powers the machine off. Its arguments are the kernel command line's words after `--`.
//! On a host it is a development server bound to 127.0.0.1 only:
//! `cargo run -p bench --release --bin webd-linux -- --root DIR --listen 8080`.
//!
//! Lines: `webd: ready mode=random port=P frontends=0,1 apps=0,1 kc=-1 files=N bytes=B
//! system=linux threads=T`, `webd: done requests=N errors=E mode=random frontends=0,1
//! apps=0,1 ms=T calib_ops=X calib_ns=Y calib_cores=C warmup=W answered=A system=linux coreK=...`, and on a
//! failure `webd-error: ...` (and `workload-error: ...` for the harness).

#[cfg(target_os = "linux")]
fn main() {
    server::main();
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("webd-linux runs on Linux only");
    std::process::exit(2);
}

#[cfg(target_os = "linux")]
mod server {
    use std::collections::VecDeque;
    use std::fmt::Write as _;
    use std::io::Write as _;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    use bench::Platform;
    use webcore::http::{self, Parsed, Status};
    use webcore::Route;

    const MAX_THREADS: usize = 256;
    /// Stop parsing a connection's pipelined requests while this much output waits.
    const OUT_LIMIT: usize = 1 << 20;

    struct Options {
        mode: String,
        threads: usize,
        port: u16,
        root: String,
        requests: u64,
        seconds: u64,
        warmup: u64,
        stats: u64,
        pin: bool,
    }

    fn usage() -> &'static str {
        "usage: webd-linux [--mode random] [--threads N] [--port P] [--root DIR] [--requests N] [--seconds S] [--warmup W] [--stats S] [--no-pin] [--listen P]"
    }

    fn parse(args: &[String], ncpu: usize, as_init: bool) -> Result<Options, String> {
        // On a host the development default is 8080 (80 needs root).
        let port = if as_init { 80 } else { 8080 };
        let mut o = Options { mode: "random".into(), threads: ncpu, port, root: "/files".into(), requests: 0, seconds: 0, warmup: 0, stats: 0, pin: true };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut val = || it.next().cloned().ok_or_else(|| format!("{a} needs a value"));
            let num = |v: String| v.parse::<u64>().map_err(|_| format!("{a}: `{v}` is not a whole number"));
            match a.as_str() {
                "--mode" => o.mode = val()?,
                "--threads" => o.threads = num(val()?)? as usize,
                "--port" | "--listen" => o.port = num(val()?)?.try_into().ok().filter(|&p: &u16| p > 0).ok_or(format!("{a}: not a port"))?,
                "--root" => o.root = val()?,
                "--requests" => o.requests = num(val()?)?,
                "--seconds" => o.seconds = num(val()?)?,
                "--warmup" => o.warmup = num(val()?)?,
                "--stats" => o.stats = num(val()?)?,
                "--no-pin" => o.pin = false,
                // Ours' placement options have no meaning here: every thread is a front-end and
                // sums its own requests' files.
                "--frontends" | "--apps" | "--kc" => return Err(format!("{a}: the Linux baseline runs one thread per CPU, each serving and summing (use --threads)")),
                other => return Err(format!("unknown option `{other}`")),
            }
        }
        if o.threads == 0 || o.threads > MAX_THREADS.min(ncpu.max(1) * 4) {
            return Err(format!("--threads: {} is not in 1..={}", o.threads, MAX_THREADS.min(ncpu.max(1) * 4)));
        }
        Ok(o)
    }

    /// One thread's counters, on its own 128-byte line (nothing is written by two threads).
    #[repr(align(128))]
    #[derive(Default)]
    struct Counters {
        conns: AtomicU64,
        /// Answered 200.
        requests: AtomicU64,
        /// Answered 4xx (refused).
        bad: AtomicU64,
        /// Write errors, resets.
        errors: AtomicU64,
        /// Response bytes queued.
        bytes: AtomicU64,
        /// File bytes summed.
        summed: AtomicU64,
    }

    impl Counters {
        /// What `--requests` counts: requests answered 200, as ours' webd counts them.
        fn answered(&self) -> u64 {
            self.requests.load(Ordering::Relaxed)
        }
    }

    struct Shared {
        files: Vec<(String, &'static [u8])>,
        counters: Vec<Counters>,
        cpus: Vec<usize>,
        stop: AtomicBool,
        listening: AtomicU64,
        mode: String,
    }

    impl Shared {
        fn file(&self, name: &str) -> Option<&'static [u8]> {
            self.files.binary_search_by(|(n, _)| n.as_str().cmp(name)).ok().map(|i| self.files[i].1)
        }

        fn stats(&self) -> String {
            let cores: Vec<webcore::CoreStats> = self
                .counters
                .iter()
                .zip(&self.cpus)
                .map(|(c, &cpu)| webcore::CoreStats {
                    core: cpu as u32,
                    role: "frontend",
                    conns: c.conns.load(Ordering::Relaxed),
                    requests: c.requests.load(Ordering::Relaxed),
                    bad: c.bad.load(Ordering::Relaxed),
                    errors: c.errors.load(Ordering::Relaxed),
                    bytes: c.bytes.load(Ordering::Relaxed),
                })
                .collect();
            webcore::stats_json(&self.mode, &cores)
        }

        fn answered(&self) -> u64 {
            self.counters.iter().map(Counters::answered).sum()
        }
    }

    fn errno() -> std::io::Error {
        std::io::Error::last_os_error()
    }

    fn die(what: &str, why: impl std::fmt::Display, as_init: bool) -> ! {
        println!("webd-error: {what}: {why}");
        println!("workload-error: webd: {what}: {why}");
        off(as_init, 1)
    }

    fn off(as_init: bool, code: i32) -> ! {
        let _ = std::io::stdout().flush();
        if as_init {
            // SAFETY: pid 1 powering the machine off after its output is flushed.
            unsafe {
                libc::sync();
                libc::reboot(libc::RB_POWER_OFF);
            }
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        std::process::exit(code)
    }

    // ---- bringing the NIC up (as /init) ----

    /// Load every module in /lib/modules/order with finit_module (EEXIST is fine).
    fn load_modules() -> Result<usize, String> {
        let order = std::fs::read_to_string("/lib/modules/order").map_err(|e| format!("/lib/modules/order (an initramfs without the NIC's modules?): {e}"))?;
        let mut n = 0;
        for name in order.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let path = format!("/lib/modules/{name}");
            let f = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
            use std::os::fd::AsRawFd;
            // SAFETY: finit_module with an open module file and an empty parameter string.
            let r = unsafe { libc::syscall(libc::SYS_finit_module, f.as_raw_fd(), c"".as_ptr(), 0) };
            if r != 0 && errno().raw_os_error() != Some(libc::EEXIST) {
                return Err(format!("finit_module {name}: {}", errno()));
            }
            n += 1;
        }
        Ok(n)
    }

    /// The first interface in /proc/net/dev that is not loopback; the driver's probe may
    /// finish after finit_module returns, so wait (bounded: 30 s).
    fn find_interface() -> Result<String, String> {
        for _ in 0..3000 {
            if let Ok(t) = std::fs::read_to_string("/proc/net/dev") {
                if let Some(n) = t.lines().filter_map(|l| l.split_once(':').map(|(n, _)| n.trim().to_string())).find(|n| n != "lo" && !n.contains('|') && !n.is_empty()) {
                    return Ok(n);
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err("no network interface appeared after loading the modules".into())
    }

    #[repr(C)]
    struct IfReq {
        name: [u8; 16],
        /// The union: a sockaddr, or the flags in its first two bytes.
        data: [u8; 24],
    }

    #[repr(C)]
    struct RtEntry {
        pad1: libc::c_ulong,
        dst: libc::sockaddr_in,
        gateway: libc::sockaddr_in,
        genmask: libc::sockaddr_in,
        flags: libc::c_ushort,
        pad2: libc::c_short,
        pad3: libc::c_ulong,
        pad4: *mut libc::c_void,
        metric: libc::c_short,
        dev: *mut libc::c_char,
        mtu: libc::c_ulong,
        window: libc::c_ulong,
        irtt: libc::c_ushort,
    }

    // <linux/sockios.h>, <net/if.h>, <net/route.h>.
    const SIOCGIFFLAGS: libc::c_ulong = 0x8913;
    const SIOCSIFFLAGS: libc::c_ulong = 0x8914;
    const SIOCSIFADDR: libc::c_ulong = 0x8916;
    const SIOCSIFNETMASK: libc::c_ulong = 0x891c;
    const SIOCADDRT: libc::c_ulong = 0x890b;
    const IFF_UP: u16 = 0x1;
    const IFF_RUNNING: u16 = 0x40;
    const RTF_UP: u16 = 0x1;
    const RTF_GATEWAY: u16 = 0x2;

    fn sin(a: [u8; 4]) -> libc::sockaddr_in {
        libc::sockaddr_in { sin_family: libc::AF_INET as libc::sa_family_t, sin_port: 0, sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a) }, sin_zero: [0; 8] }
    }

    fn ifreq(name: &str) -> IfReq {
        let mut r = IfReq { name: [0; 16], data: [0; 24] };
        let n = name.len().min(15);
        r.name[..n].copy_from_slice(&name.as_bytes()[..n]);
        r
    }

    fn ioctl(s: i32, req: libc::c_ulong, arg: *mut libc::c_void, what: &str) -> Result<(), String> {
        // SAFETY: `arg` points to a live structure of the type `req` reads or writes.
        if unsafe { libc::ioctl(s, req as _, arg) } != 0 {
            return Err(format!("{what}: {}", errno()));
        }
        Ok(())
    }

    fn set_addr(s: i32, ifname: &str, req: libc::c_ulong, a: [u8; 4], what: &str) -> Result<(), String> {
        let mut r = ifreq(ifname);
        let sa = sin(a);
        // SAFETY: a sockaddr_in is 16 plain bytes; the union has room for 24.
        let bytes = unsafe { std::slice::from_raw_parts(&sa as *const _ as *const u8, std::mem::size_of::<libc::sockaddr_in>()) };
        r.data[..bytes.len()].copy_from_slice(bytes);
        ioctl(s, req, &mut r as *mut _ as *mut _, what)
    }

    fn bring_up(s: i32, ifname: &str) -> Result<(), String> {
        let mut r = ifreq(ifname);
        ioctl(s, SIOCGIFFLAGS, &mut r as *mut _ as *mut _, "SIOCGIFFLAGS")?;
        let flags = u16::from_ne_bytes([r.data[0], r.data[1]]) | IFF_UP | IFF_RUNNING;
        r.data[..2].copy_from_slice(&flags.to_ne_bytes());
        ioctl(s, SIOCSIFFLAGS, &mut r as *mut _ as *mut _, "SIOCSIFFLAGS")
    }

    /// 10.0.2.15/24 up, loopback up, default route via QEMU's gateway 10.0.2.2.
    fn configure(ifname: &str) -> Result<(), String> {
        // SAFETY: a plain socket for the ioctls, closed below.
        let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if s < 0 {
            return Err(format!("socket for ioctl: {}", errno()));
        }
        let r = (|| {
            bring_up(s, "lo")?;
            set_addr(s, ifname, SIOCSIFADDR, [10, 0, 2, 15], "SIOCSIFADDR 10.0.2.15")?;
            set_addr(s, ifname, SIOCSIFNETMASK, [255, 255, 255, 0], "SIOCSIFNETMASK /24")?;
            bring_up(s, ifname)?;
            let mut dev: Vec<u8> = ifname.bytes().chain([0]).collect();
            let mut rt = RtEntry {
                pad1: 0,
                dst: sin([0; 4]),
                gateway: sin([10, 0, 2, 2]),
                genmask: sin([0; 4]),
                flags: RTF_UP | RTF_GATEWAY,
                pad2: 0,
                pad3: 0,
                pad4: std::ptr::null_mut(),
                metric: 0,
                dev: dev.as_mut_ptr() as *mut libc::c_char,
                mtu: 0,
                window: 0,
                irtt: 0,
            };
            ioctl(s, SIOCADDRT, &mut rt as *mut _ as *mut _, "SIOCADDRT default via 10.0.2.2")
        })();
        // SAFETY: our socket.
        unsafe { libc::close(s) };
        r
    }

    // ---- the files ----

    /// Every regular file directly in `root`, read into memory for the life of the program
    /// (it is /init and powers off when done): `/NAME` → bytes, sorted by name.
    fn load_files(root: &str) -> Result<Vec<(String, &'static [u8])>, String> {
        let mut v = Vec::new();
        for e in std::fs::read_dir(root).map_err(|e| format!("{root}: {e}"))? {
            let e = e.map_err(|e| format!("{root}: {e}"))?;
            if !e.file_type().map(|t| t.is_file()).unwrap_or(false) {
                continue;
            }
            let data = std::fs::read(e.path()).map_err(|err| format!("{}: {err}", e.path().display()))?;
            v.push((format!("/{}", e.file_name().to_string_lossy()), &*Vec::leak(data)));
        }
        v.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(v)
    }

    // ---- one connection ----

    enum Chunk {
        Owned(Vec<u8>),
        File(&'static [u8]),
    }

    impl Chunk {
        fn bytes(&self) -> &[u8] {
            match self {
                Chunk::Owned(v) => v,
                Chunk::File(s) => s,
            }
        }
    }

    struct Conn {
        fd: i32,
        inbuf: Vec<u8>,
        out: VecDeque<Chunk>,
        /// Bytes of the front chunk already written.
        out_at: usize,
        out_bytes: usize,
        /// Answer what is queued, then close (a refused request, `Connection: close`).
        closing: bool,
        /// The peer sent EOF.
        peer_done: bool,
    }

    enum After {
        Keep,
        Close,
    }

    impl Conn {
        /// Read until the socket has nothing more (edge-triggered).
        fn read_all(&mut self, c: &Counters) -> After {
            let mut buf = [0u8; 16 << 10];
            loop {
                // SAFETY: reading into a live stack buffer of its length.
                let n = unsafe { libc::read(self.fd, buf.as_mut_ptr() as *mut _, buf.len()) };
                if n > 0 {
                    // Bytes after a refused request are not read as requests.
                    if !self.closing {
                        self.inbuf.extend_from_slice(&buf[..n as usize]);
                    }
                    continue;
                }
                if n == 0 {
                    self.peer_done = true;
                    return After::Keep;
                }
                match errno().raw_os_error() {
                    Some(libc::EAGAIN) => return After::Keep,
                    Some(libc::EINTR) => continue,
                    _ => {
                        c.errors.fetch_add(1, Ordering::Relaxed);
                        return After::Close;
                    }
                }
            }
        }

        /// Answer the complete requests in the buffer (while the output is under its limit).
        fn process(&mut self, sh: &Shared, c: &Counters) {
            let mut at = 0;
            while !self.closing && self.out_bytes < OUT_LIMIT {
                match http::parse(&self.inbuf[at..]) {
                    Parsed::Partial => break,
                    Parsed::Reject(status) => {
                        let mut v = Vec::new();
                        http::error_response(&mut v, status);
                        self.queue(Chunk::Owned(v), c);
                        c.bad.fetch_add(1, Ordering::Relaxed);
                        self.closing = true;
                    }
                    Parsed::Request(req) => {
                        at += req.consumed;
                        let head_only = req.method == http::Method::Head;
                        let mut v = Vec::new();
                        let (status, body): (Status, Option<Chunk>) = match webcore::route(&req.path) {
                            Route::Stats => {
                                let s = sh.stats();
                                http::response_head(&mut v, Status::Ok, s.len(), "application/json", req.keep_alive);
                                (Status::Ok, Some(Chunk::Owned(s.into_bytes())))
                            }
                            Route::FileSum(name) => match sh.file(name) {
                                Some(data) => {
                                    let sum = webcore::filesum(data);
                                    c.summed.fetch_add(data.len() as u64, Ordering::Relaxed);
                                    let mut s = String::new();
                                    let _ = write!(s, "{sum}");
                                    http::response_head(&mut v, Status::Ok, s.len(), "text/plain", req.keep_alive);
                                    (Status::Ok, Some(Chunk::Owned(s.into_bytes())))
                                }
                                None => (Status::NotFound, None),
                            },
                            Route::File(name) => match sh.file(name) {
                                Some(data) => {
                                    http::response_head(&mut v, Status::Ok, data.len(), "application/octet-stream", req.keep_alive);
                                    (Status::Ok, Some(Chunk::File(data)))
                                }
                                None => (Status::NotFound, None),
                            },
                        };
                        if status == Status::Ok {
                            c.requests.fetch_add(1, Ordering::Relaxed);
                            if head_only {
                                self.queue(Chunk::Owned(v), c);
                            } else {
                                match body {
                                    // A small body goes out with its head in one write.
                                    Some(Chunk::Owned(b)) => {
                                        v.extend_from_slice(&b);
                                        self.queue(Chunk::Owned(v), c);
                                    }
                                    Some(f) => {
                                        self.queue(Chunk::Owned(v), c);
                                        self.queue(f, c);
                                    }
                                    None => self.queue(Chunk::Owned(v), c),
                                }
                            }
                            if !req.keep_alive {
                                self.closing = true;
                            }
                        } else {
                            // error_response says `Connection: close`, so close after it.
                            let mut e = Vec::new();
                            http::error_response(&mut e, status);
                            self.queue(Chunk::Owned(e), c);
                            c.bad.fetch_add(1, Ordering::Relaxed);
                            self.closing = true;
                        }
                    }
                }
            }
            self.inbuf.drain(..at);
            if self.closing {
                self.inbuf.clear();
            }
        }

        fn queue(&mut self, ch: Chunk, c: &Counters) {
            let n = ch.bytes().len();
            c.bytes.fetch_add(n as u64, Ordering::Relaxed);
            self.out_bytes += n;
            self.out.push_back(ch);
        }

        /// Write what the socket takes.
        fn flush(&mut self, c: &Counters) -> After {
            while let Some(front) = self.out.front() {
                let b = &front.bytes()[self.out_at..];
                if b.is_empty() {
                    self.out.pop_front();
                    self.out_at = 0;
                    continue;
                }
                // SAFETY: writing from a live slice of its length; MSG_NOSIGNAL: a dead peer
                // is an error return, not a signal.
                let n = unsafe { libc::send(self.fd, b.as_ptr() as *const _, b.len(), libc::MSG_NOSIGNAL) };
                if n >= 0 {
                    self.out_at += n as usize;
                    self.out_bytes -= n as usize;
                    continue;
                }
                match errno().raw_os_error() {
                    Some(libc::EAGAIN) => return After::Keep,
                    Some(libc::EINTR) => {}
                    _ => {
                        c.errors.fetch_add(1, Ordering::Relaxed);
                        return After::Close;
                    }
                }
            }
            After::Keep
        }

        /// Everything to do after an event: read, answer, write, and say whether to close.
        fn pump(&mut self, sh: &Shared, c: &Counters, readable: bool) -> After {
            if readable {
                if let After::Close = self.read_all(c) {
                    return After::Close;
                }
            }
            loop {
                self.process(sh, c);
                if let After::Close = self.flush(c) {
                    return After::Close;
                }
                // Output drained below the limit with requests still buffered: answer more.
                let more = !self.closing && self.out_bytes < OUT_LIMIT && !self.inbuf.is_empty() && matches!(http::parse(&self.inbuf), Parsed::Request(_) | Parsed::Reject(_));
                if !more || !self.out.is_empty() {
                    break;
                }
            }
            let done = self.out.is_empty() && (self.closing || self.peer_done);
            if done {
                After::Close
            } else {
                After::Keep
            }
        }
    }

    // ---- one thread ----

    const LISTENER: u64 = u64::MAX;

    fn listener(port: u16, loopback_only: bool) -> Result<i32, String> {
        // SAFETY: plain socket calls on a descriptor this function owns (closed on failure).
        unsafe {
            let l = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0);
            if l < 0 {
                return Err(format!("socket: {}", errno()));
            }
            let one: libc::c_int = 1;
            let sz = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            if libc::setsockopt(l, libc::SOL_SOCKET, libc::SO_REUSEADDR, &one as *const _ as *const _, sz) != 0 || libc::setsockopt(l, libc::SOL_SOCKET, libc::SO_REUSEPORT, &one as *const _ as *const _, sz) != 0 {
                let e = errno();
                libc::close(l);
                return Err(format!("SO_REUSEADDR/SO_REUSEPORT: {e}"));
            }
            let addr = if loopback_only { [127, 0, 0, 1] } else { [0, 0, 0, 0] };
            let mut a = sin(addr);
            a.sin_port = port.to_be();
            if libc::bind(l, &a as *const _ as *const libc::sockaddr, std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t) != 0 {
                let e = errno();
                libc::close(l);
                return Err(format!("bind port {port}: {e}"));
            }
            if libc::listen(l, 256) != 0 {
                let e = errno();
                libc::close(l);
                return Err(format!("listen: {e}"));
            }
            Ok(l)
        }
    }

    fn epoll_add(ep: i32, fd: i32, events: u32, token: u64) -> Result<(), String> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: a live event structure for our epoll and descriptor.
        if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
            return Err(format!("epoll_ctl: {}", errno()));
        }
        Ok(())
    }

    fn close_conn(ep: i32, conns: &mut [Option<Conn>], free: &mut Vec<usize>, i: usize) {
        if let Some(c) = conns[i].take() {
            // SAFETY: our descriptor; removing it from epoll first, then closing it.
            unsafe {
                libc::epoll_ctl(ep, libc::EPOLL_CTL_DEL, c.fd, std::ptr::null_mut());
                libc::close(c.fd);
            }
            free.push(i);
        }
    }

    fn serve(idx: usize, sh: &Shared, port: u16, loopback_only: bool, pin: bool) -> Result<(), String> {
        let cpu = sh.cpus[idx];
        if pin {
            // SAFETY: cpu_set_t is plain data; CPU_SET stays in bounds (cpu < 1024).
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(format!("sched_setaffinity to CPU {cpu}: {}", errno()));
                }
            }
        }
        let c = &sh.counters[idx];
        let l = listener(port, loopback_only)?;
        // SAFETY: a new epoll descriptor, closed at the end.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(format!("epoll_create1: {}", errno()));
        }
        epoll_add(ep, l, libc::EPOLLIN as u32, LISTENER)?;
        sh.listening.fetch_add(1, Ordering::SeqCst);
        let mut conns: Vec<Option<Conn>> = Vec::new();
        let mut free: Vec<usize> = Vec::new();
        // SAFETY: epoll_event is plain data.
        let mut events: Vec<libc::epoll_event> = vec![unsafe { std::mem::zeroed() }; 64];
        let mut stop_at: Option<Instant> = None;
        loop {
            if sh.stop.load(Ordering::Relaxed) {
                // Let queued answers go out for a moment (bounded), then close everything.
                let t = *stop_at.get_or_insert_with(Instant::now);
                let pending = conns.iter().flatten().any(|k| !k.out.is_empty());
                if !pending || t.elapsed() > Duration::from_secs(1) {
                    break;
                }
            }
            // SAFETY: `events` has room for the count passed.
            let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, 50) };
            if n < 0 {
                if errno().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(format!("epoll_wait: {}", errno()));
            }
            for ev in &events[..n as usize] {
                let (token, bits) = (ev.u64, ev.events);
                if token == LISTENER {
                    if stop_at.is_some() {
                        continue;
                    }
                    loop {
                        // SAFETY: accept on our listener; the new descriptor is ours.
                        let fd = unsafe { libc::accept4(l, std::ptr::null_mut(), std::ptr::null_mut(), libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) };
                        if fd < 0 {
                            match errno().raw_os_error() {
                                Some(libc::EAGAIN) => break,
                                Some(libc::EINTR) | Some(libc::ECONNABORTED) => continue,
                                _ => {
                                    c.errors.fetch_add(1, Ordering::Relaxed);
                                    break;
                                }
                            }
                        }
                        let one: libc::c_int = 1;
                        // SAFETY: setting TCP_NODELAY on our socket.
                        unsafe { libc::setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, &one as *const _ as *const _, std::mem::size_of::<libc::c_int>() as libc::socklen_t) };
                        let i = free.pop().unwrap_or_else(|| {
                            conns.push(None);
                            conns.len() - 1
                        });
                        conns[i] = Some(Conn { fd, inbuf: Vec::new(), out: VecDeque::new(), out_at: 0, out_bytes: 0, closing: false, peer_done: false });
                        c.conns.fetch_add(1, Ordering::Relaxed);
                        let ev = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
                        if let Err(e) = epoll_add(ep, fd, ev, i as u64) {
                            eprintln!("webd: {e}");
                            close_conn(ep, &mut conns, &mut free, i);
                        }
                    }
                    continue;
                }
                let i = token as usize;
                let Some(k) = conns.get_mut(i).and_then(Option::as_mut) else { continue };
                let readable = bits & (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0;
                if let After::Close = k.pump(sh, c, readable && stop_at.is_none()) {
                    close_conn(ep, &mut conns, &mut free, i);
                }
            }
        }
        for i in 0..conns.len() {
            close_conn(ep, &mut conns, &mut free, i);
        }
        // SAFETY: our descriptors.
        unsafe {
            libc::close(l);
            libc::close(ep);
        }
        Ok(())
    }

    pub fn main() {
        let as_init = std::process::id() == 1;
        if as_init {
            // SAFETY: plain mount(2) calls with NUL-terminated strings.
            unsafe {
                libc::mount(c"proc".as_ptr(), c"/proc".as_ptr(), c"proc".as_ptr(), 0, std::ptr::null());
                libc::mount(c"sysfs".as_ptr(), c"/sys".as_ptr(), c"sysfs".as_ptr(), 0, std::ptr::null());
            }
        }
        // SAFETY: sysconf has no memory effects.
        let ncpu = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
        // As /init the arguments are the command line's words after `--` (read from
        // /proc/cmdline: the kernel also hands init the boot options it does not know, such
        // as `nokaslr` under PVH).
        let args: Vec<String> = if as_init {
            let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
            cmdline.split_once(" -- ").map(|(_, a)| a.split_whitespace().map(String::from).collect()).unwrap_or_default()
        } else {
            std::env::args().skip(1).collect()
        };
        let o = match parse(&args, ncpu, as_init) {
            Ok(o) => o,
            Err(e) => {
                println!("webd: {e}\n{}", usage());
                die("options", e, as_init);
            }
        };
        if o.mode != "random" {
            // Linux has no way to home a file's data on one core beyond thread affinity, and
            // no protected procedure call: locality and same-core are ours only.
            println!("webd: unavailable mode={}: the Linux baseline runs random mode only (every thread sums the files its requests name)", o.mode);
            off(as_init, 0);
        }
        // Markers and the calibration through the benchmark library's Linux platform.
        let p = bench::linux::Linux::new(as_init);
        let mut modules = 0;
        let mut ifname = String::from("lo");
        if as_init {
            modules = load_modules().unwrap_or_else(|e| die("modules", e, true));
            ifname = find_interface().unwrap_or_else(|e| die("interface", e, true));
            configure(&ifname).unwrap_or_else(|e| die("configure", e, true));
        }
        let files = load_files(&o.root).unwrap_or_else(|e| die("files", e, as_init));
        let bytes: u64 = files.iter().map(|(_, d)| d.len() as u64).sum();
        let cpus: Vec<usize> = (0..o.threads).map(|i| i % ncpu).collect();
        let sh: &'static Shared = Box::leak(Box::new(Shared {
            files,
            counters: (0..o.threads).map(|_| Counters::default()).collect(),
            cpus: cpus.clone(),
            stop: AtomicBool::new(false),
            listening: AtomicU64::new(0),
            mode: o.mode.clone(),
        }));
        if o.warmup == 0 {
            p.marker(3);
        }
        let port = o.port;
        let pin = o.pin;
        let threads: Vec<_> = (0..o.threads)
            .map(|i| {
                std::thread::spawn(move || {
                    if let Err(e) = serve(i, sh, port, !as_init, pin) {
                        die(&format!("thread {i}"), e, as_init);
                    }
                })
            })
            .collect();
        let t0 = Instant::now();
        while sh.listening.load(Ordering::SeqCst) < o.threads as u64 {
            if t0.elapsed() > Duration::from_secs(30) {
                die("threads", "not every thread listens after 30 s", as_init);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let list = cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",");
        println!(
            "webd: ready mode={} port={} frontends={list} apps={list} kc=-1 files={} bytes={bytes} system=linux threads={} if={ifname} modules={modules}",
            o.mode,
            o.port,
            sh.files.len(),
            o.threads
        );
        let _ = std::io::stdout().flush();
        // Wait for the work (every wait bounded by the host, which stops the machine).
        let start = Instant::now();
        let mut warm_marked = o.warmup == 0;
        let mut measured_from = if warm_marked { Some(Instant::now()) } else { None };
        let mut next_stats = Instant::now() + Duration::from_secs(o.stats.max(1));
        loop {
            let answered = sh.answered();
            if !warm_marked && answered >= o.warmup {
                p.marker(3);
                warm_marked = true;
                measured_from = Some(Instant::now());
            }
            if o.requests > 0 && answered >= o.warmup + o.requests {
                break;
            }
            if o.seconds > 0 && start.elapsed() >= Duration::from_secs(o.seconds) {
                break;
            }
            if o.stats > 0 && Instant::now() >= next_stats {
                println!("webd: stats {}", sh.stats().trim_end());
                next_stats += Duration::from_secs(o.stats);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        p.marker(4);
        let ms = measured_from.map(|t| t.elapsed().as_millis()).unwrap_or(0);
        sh.stop.store(true, Ordering::SeqCst);
        for t in threads {
            let _ = t.join();
        }
        // The calibration with the CPUs to ourselves (every server thread has returned).
        let (calib_ops, calib_ns) = match bench::metis::calibrate(&p, ncpu) {
            Some((ops, ticks)) => (ops, (ticks as u128 * 1_000_000_000 / p.ticks_per_sec().max(1) as u128) as u64),
            None => (0, 0),
        };
        let answered = sh.answered();
        let errors: u64 = sh.counters.iter().map(|c| c.bad.load(Ordering::Relaxed) + c.errors.load(Ordering::Relaxed)).sum();
        let mut line = format!(
            "webd: done requests={} errors={errors} mode={} frontends={list} apps={list} ms={ms} calib_ops={calib_ops} calib_ns={calib_ns} calib_cores={ncpu} warmup={} answered={answered} system=linux threads={}",
            answered.saturating_sub(o.warmup),
            o.mode,
            o.warmup,
            o.threads
        );
        for (c, cpu) in sh.counters.iter().zip(&cpus) {
            let _ = write!(
                line,
                " core{cpu}={}/{}/{}/{}/{}",
                c.requests.load(Ordering::Relaxed),
                c.bad.load(Ordering::Relaxed),
                c.errors.load(Ordering::Relaxed),
                c.conns.load(Ordering::Relaxed),
                c.summed.load(Ordering::Relaxed)
            );
        }
        println!("{line}");
        println!("webd: per core: ok/refused/errors/connections/bytes summed");
        off(as_init, 0);
    }
}
