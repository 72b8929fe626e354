//! Backend 1: Linux, through std and libc. Runs as `/init` of the Linux guest (and natively
//! on a Linux host for quick checks, where the region markers are off).

use std::format;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::vec::Vec;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::harness::{self, PAGE};
use crate::{Error, Handle, MapKind, Platform, Scope};

pub struct Linux {
    cores: usize,
    tsc_hz: u64,
    markers: bool,
    /// Whether this program is the guest's /init (then the file tree is the disk image,
    /// mounted at /mnt; otherwise it is built in a temporary directory).
    as_init: bool,
    /// Where the benchmark file tree is, once `fs_prepare` made it reachable.
    fs_root: std::sync::OnceLock<Result<FsRoot, Error>>,
}

/// The root of the benchmark file tree, as bytes to put in front of a tree path.
struct FsRoot {
    prefix: std::string::String,
    /// A tree this program built (native runs): removed when the backend is dropped.
    owned: bool,
}

impl Drop for Linux {
    fn drop(&mut self) {
        if let Some(Ok(r)) = self.fs_root.get() {
            if r.owned {
                let _ = std::fs::remove_dir_all(&r.prefix);
            }
        }
    }
}

/// A NUL-terminated path (the tree's root, then `path`) on the stack: no allocation in the
/// measured loops.
struct CPath {
    buf: [u8; 256],
}

impl CPath {
    fn new(root: &str, path: &str) -> Result<CPath, Error> {
        let (r, p) = (root.as_bytes(), path.as_bytes());
        if r.len() + p.len() >= 256 || p.contains(&0) {
            return Err(Error::Param("file path too long"));
        }
        let mut buf = [0u8; 256];
        buf[..r.len()].copy_from_slice(r);
        buf[r.len()..r.len() + p.len()].copy_from_slice(p);
        Ok(CPath { buf })
    }
    fn ptr(&self) -> *const libc::c_char {
        self.buf.as_ptr() as *const libc::c_char
    }
}

/// Load every module listed in /lib/modules/order (the initramfs xtask builds for the file
/// rows: virtio-pci, virtio-blk, ext4 and their dependencies), dependencies first. EEXIST
/// (built in or loaded) is fine.
fn load_modules() -> Result<(), Error> {
    use std::os::fd::AsRawFd;
    let order = std::fs::read_to_string("/lib/modules/order").map_err(|_| Error::Unsupported("files (an initramfs without /lib/modules/order: built without the disk modules)"))?;
    for name in order.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let f = std::fs::File::open(format!("/lib/modules/{name}")).map_err(|_| sys("open of a module file"))?;
        // SAFETY: finit_module with an open module file and an empty parameter string.
        let r = unsafe { libc::syscall(libc::SYS_finit_module, f.as_raw_fd(), c"".as_ptr(), 0) };
        if r != 0 && errno() != libc::EEXIST as i64 {
            return Err(sys("finit_module"));
        }
    }
    Ok(())
}

/// The guest's tree: the disk's modules loaded, devtmpfs on /dev, the first virtio disk
/// mounted at /mnt as ext2 (Debian's ext4 driver serves ext2, CONFIG_EXT4_USE_FOR_EXT2), with
/// `noatime`: this system's ext2 never writes access times, so neither side does.
fn mount_guest_tree() -> Result<FsRoot, Error> {
    load_modules()?;
    // SAFETY (all the mount calls below): mount(2) with NUL-terminated strings.
    unsafe { libc::mount(c"devtmpfs".as_ptr(), c"/dev".as_ptr(), c"devtmpfs".as_ptr(), 0, std::ptr::null()) };
    // The disk appears once virtio-blk's probe has run, which may finish after finit_module
    // returns: wait for it (bounded: 30 s).
    let t0 = std::time::Instant::now();
    while !std::path::Path::new("/dev/vda").exists() {
        if t0.elapsed() > std::time::Duration::from_secs(30) {
            return Err(Error::Unsupported("files (no /dev/vda 30 s after loading virtio-blk: no disk attached?)"));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = std::fs::create_dir_all("/mnt");
    // SAFETY: every pointer is a NUL-terminated C string literal (or null for the data
    // argument, which ext2 accepts); mount(2) only reads them.
    let r = unsafe { libc::mount(c"/dev/vda".as_ptr(), c"/mnt".as_ptr(), c"ext2".as_ptr(), libc::MS_NOATIME, std::ptr::null()) };
    if r != 0 {
        return Err(sys("mount /dev/vda on /mnt (ext2)"));
    }
    Ok(FsRoot { prefix: "/mnt".into(), owned: false })
}

/// A native run's tree: the same layout, written into a fresh temporary directory.
fn build_host_tree() -> Result<FsRoot, Error> {
    use crate::catalog::{fs_file_byte, FS_FILE_BYTES, FS_MAX_WORKERS, FS_PRIVATE_DIR, FS_SHARED_FILE};
    let root = std::env::temp_dir().join(format!("bench-fs-{}", std::process::id()));
    let prefix = root.to_string_lossy().into_owned();
    let data: Vec<u8> = (0..FS_FILE_BYTES).map(fs_file_byte).collect();
    let write = |rel: &str| -> std::io::Result<()> {
        let p = format!("{prefix}{rel}");
        std::fs::create_dir_all(std::path::Path::new(&p).parent().unwrap_or(&root))?;
        std::fs::write(&p, &data)
    };
    let r = (|| {
        write(FS_SHARED_FILE)?;
        for w in 0..FS_MAX_WORKERS {
            write(&format!("{FS_PRIVATE_DIR}{w}/f"))?;
        }
        Ok::<(), std::io::Error>(())
    })();
    match r {
        Ok(()) => Ok(FsRoot { prefix, owned: true }),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&root);
            Err(Error::Sys { what: "building the file tree", code: e.raw_os_error().unwrap_or(0) as i64 })
        }
    }
}

fn errno() -> i64 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0) as i64
}

fn sys(what: &'static str) -> Error {
    Error::Sys { what, code: errno() }
}

/// Distinct names for the backing files of objects created concurrently by many workers.
static NEXT_OBJECT: AtomicU64 = AtomicU64::new(0);

impl Linux {
    /// `markers`: execute the plugin's region markers. Needs `ioperm`, so root: true in the
    /// guest (we are /init), and tried but not required elsewhere.
    pub fn new(markers: bool) -> Linux {
        // SAFETY: sysconf has no memory effects.
        let cores = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
        let markers = markers && enable_port();
        let as_init = std::process::id() == 1;
        Linux { cores, tsc_hz: calibrate_tsc(), markers, as_init, fs_root: std::sync::OnceLock::new() }
    }

    fn path(&self, path: &str) -> Result<CPath, Error> {
        match self.fs_root.get() {
            Some(Ok(r)) => CPath::new(&r.prefix, path),
            _ => Err(Error::Param("file call before fs_prepare")),
        }
    }

    pub fn markers(&self) -> bool {
        self.markers
    }

    /// Pin the calling thread to worker `w`'s core and give it the marker port.
    fn enter_worker(&self, w: usize) {
        // SAFETY: cpu_set_t is plain data; CPU_SET stays in bounds (w % cores < 1024).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(w % self.cores, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
        if self.markers {
            // The I/O bitmap is per thread; the main thread's is copied at clone, but asking
            // again costs nothing and does not depend on that.
            enable_port();
        }
    }
}

fn enable_port() -> bool {
    // SAFETY: ioperm only changes this thread's I/O permission bitmap.
    unsafe { libc::ioperm(0x501, 1, 1) == 0 }
}

/// TSC ticks per second against CLOCK_MONOTONIC over 50 ms (the guest kernel has already
/// calibrated its clock; this makes our ticks convertible without trusting CPUID leaves that
/// TCG may not fill).
fn calibrate_tsc() -> u64 {
    let now = || {
        let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `t` is a valid timespec to write.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
        t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
    };
    let (n0, t0) = (now(), harness::rdtsc());
    while now() - n0 < 50_000_000 {
        std::hint::spin_loop();
    }
    let (n1, t1) = (now(), harness::rdtsc());
    ((t1 - t0) as u128 * 1_000_000_000 / (n1 - n0).max(1) as u128) as u64
}

/// Why the kernel-core benchmarks do not run on Linux.
pub const NO_KERNEL_CORES: &str = "forwarding system calls to a kernel core (Linux has no kernel cores)";

impl Platform for Linux {
    fn name(&self) -> &'static str {
        "linux"
    }

    fn cores(&self) -> usize {
        self.cores
    }

    fn run_threads(&self, n: usize, body: &(dyn Fn(usize) + Sync)) -> Result<(), Error> {
        std::thread::scope(|s| {
            let mut handles = Vec::with_capacity(n);
            for w in 0..n {
                let h = std::thread::Builder::new()
                    .spawn_scoped(s, move || {
                        self.enter_worker(w);
                        body(w)
                    })
                    .map_err(|_| sys("starting a worker thread"))?;
                handles.push(h);
            }
            let mut r = Ok(());
            for h in handles {
                if h.join().is_err() {
                    r = Err(Error::Check("a worker thread panicked"));
                }
            }
            r
        })
    }

    fn run_processes(&self, n: usize, body: &(dyn Fn(usize) + Sync)) -> Result<(), Error> {
        let mut pids = Vec::with_capacity(n);
        let mut r = Ok(());
        for w in 0..n {
            // SAFETY: the caller is single-threaded here (no worker threads are alive), so the
            // child may run arbitrary code; it leaves with _exit and never returns to ours.
            match unsafe { libc::fork() } {
                0 => {
                    self.enter_worker(w);
                    let ok = catch_unwind(AssertUnwindSafe(|| body(w))).is_ok();
                    // SAFETY: ends the child without running the parent's exit handlers.
                    unsafe { libc::_exit(if ok { 0 } else { 1 }) }
                }
                -1 => {
                    r = Err(sys("fork"));
                    break;
                }
                pid => pids.push(pid),
            }
        }
        for pid in pids {
            let mut status = 0;
            // SAFETY: waits for our own child.
            if unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
                r = Err(sys("waitpid"));
            } else if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) && r.is_ok() {
                r = Err(Error::Check("a worker process failed"));
            }
        }
        r
    }

    fn thread_create_join(&self) -> Result<(), Error> {
        // A small stack keeps the measured cost the thread's, not a 2 MiB mapping's.
        let h = std::thread::Builder::new().stack_size(64 * 1024).spawn(|| {}).map_err(|_| sys("thread create"))?;
        h.join().map_err(|_| Error::Check("empty thread panicked"))
    }

    fn map(&self, bytes: usize, kind: MapKind) -> Result<*mut u8, Error> {
        let flags = libc::MAP_ANONYMOUS | if kind == MapKind::Shared { libc::MAP_SHARED } else { libc::MAP_PRIVATE };
        // SAFETY: a fresh anonymous mapping; no existing memory is affected.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
        if p == libc::MAP_FAILED {
            return Err(sys("mmap"));
        }
        Ok(p as *mut u8)
    }

    fn unmap(&self, ptr: *mut u8, bytes: usize) -> Result<(), Error> {
        // SAFETY: callers pass back a mapping this backend created and no longer use it.
        if unsafe { libc::munmap(ptr as *mut libc::c_void, bytes) } != 0 {
            return Err(sys("munmap"));
        }
        Ok(())
    }

    fn object_create(&self, bytes: usize) -> Result<Handle, Error> {
        let seq = NEXT_OBJECT.fetch_add(1, Ordering::Relaxed);
        let path = format!("/tmp/bench-obj-{}-{seq}\0", std::process::id());
        // SAFETY: `path` is NUL-terminated.
        let fd = unsafe { libc::open(path.as_ptr() as *const libc::c_char, libc::O_CREAT | libc::O_EXCL | libc::O_RDWR, 0o600) };
        if fd < 0 {
            return Err(sys("open (object file)"));
        }
        // The name is not needed again; the descriptor keeps the file.
        // SAFETY: as above.
        unsafe { libc::unlink(path.as_ptr() as *const libc::c_char) };
        // Write every page so it is resident (in the page cache) before anyone maps it.
        let page = [0x5au8; PAGE];
        let mut off = 0;
        while off < bytes {
            let len = PAGE.min(bytes - off);
            // SAFETY: writes from a live buffer of at least `len` bytes.
            if unsafe { libc::pwrite(fd, page.as_ptr() as *const libc::c_void, len, off as i64) } != len as isize {
                let e = sys("pwrite (object file)");
                // SAFETY: closes the descriptor just opened.
                unsafe { libc::close(fd) };
                return Err(e);
            }
            off += len;
        }
        Ok(Handle(fd as u64))
    }

    fn object_map(&self, obj: Handle, bytes: usize) -> Result<*mut u8, Error> {
        // Writable and shared: a write fault maps the resident page without Linux's read
        // fault-around (which would map 16 pages per fault and hide the per-page cost).
        // SAFETY: maps a file we own into fresh address space.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, obj.0 as i32, 0) };
        if p == libc::MAP_FAILED {
            return Err(sys("mmap (object)"));
        }
        Ok(p as *mut u8)
    }

    fn object_destroy(&self, obj: Handle) -> Result<(), Error> {
        self.desc_close(obj)
    }

    fn segment_alloc(&self, bytes: usize) -> Result<Handle, Error> {
        // SAFETY: the name is NUL-terminated; memfd_create only reads it.
        let fd = unsafe { libc::memfd_create(b"bench-seg\0".as_ptr() as *const libc::c_char, libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(sys("memfd_create"));
        }
        // SAFETY: `fd` is the descriptor just made.
        if bytes > 0 && unsafe { libc::ftruncate(fd, bytes as libc::off_t) } != 0 {
            let err = sys("ftruncate");
            // SAFETY: as above; it is closed once.
            unsafe { libc::close(fd) };
            return Err(err);
        }
        Ok(Handle(fd as u64))
    }

    fn segment_free(&self, seg: Handle) -> Result<(), Error> {
        // SAFETY: closing a descriptor `segment_alloc` returned, once.
        if unsafe { libc::close(seg.0 as i32) } != 0 {
            return Err(sys("close"));
        }
        Ok(())
    }

    fn stat(&self, obj: Handle) -> Result<(), Error> {
        // SAFETY: `st` is a valid stat buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(obj.0 as i32, &mut st) } != 0 {
            return Err(sys("fstat"));
        }
        Ok(())
    }

    fn desc_scope(&self, scope: Scope) -> Result<(), Error> {
        match scope {
            Scope::Process => Ok(()),
            // The closest Linux has to a private descriptor table for one thread.
            // SAFETY: unshare(CLONE_FILES) copies this thread's descriptor table.
            Scope::Worker => match unsafe { libc::unshare(libc::CLONE_FILES) } {
                0 => Ok(()),
                _ => Err(sys("unshare(CLONE_FILES)")),
            },
        }
    }

    fn desc_open(&self) -> Result<Handle, Error> {
        self.object_create(0)
    }

    fn desc_dup(&self, d: Handle) -> Result<Handle, Error> {
        // SAFETY: dup of a descriptor we own.
        match unsafe { libc::dup(d.0 as i32) } {
            -1 => Err(sys("dup")),
            fd => Ok(Handle(fd as u64)),
        }
    }

    fn desc_close(&self, d: Handle) -> Result<(), Error> {
        // SAFETY: closes a descriptor we own and no longer use.
        match unsafe { libc::close(d.0 as i32) } {
            0 => Ok(()),
            _ => Err(sys("close")),
        }
    }

    /// Linux has no shares: Corey compares them with dup/close in the process's descriptor
    /// table (global) and, here, in a table unshared for the worker (local).
    fn share_open(&self, scope: Scope) -> Result<Handle, Error> {
        self.desc_scope(scope)?;
        Ok(Handle(0))
    }

    fn share_add(&self, _share: Handle, obj: Handle) -> Result<Handle, Error> {
        self.desc_dup(obj)
    }

    fn share_del(&self, _share: Handle, id: Handle) -> Result<(), Error> {
        self.desc_close(id)
    }

    fn null_syscall(&self) -> u64 {
        // The raw system call: libc wrappers may cache getpid.
        // SAFETY: getpid has no arguments and no effects.
        unsafe { libc::syscall(libc::SYS_getpid) as u64 }
    }

    fn null_expected(&self) -> u64 {
        // The calling worker's process (a thread's or a forked worker's own).
        std::process::id() as u64
    }

    /// Linux has no kernel cores: no core runs another core's system calls, so there is
    /// nothing to batch them to either (the harness does not boot these benchmarks on Linux).
    fn null_syscall_batch(&self, _n: usize) -> Result<(), Error> {
        Err(Error::Unsupported(NO_KERNEL_CORES))
    }

    fn forward_begin(&self) -> Result<(), Error> {
        Err(Error::Unsupported(NO_KERNEL_CORES))
    }

    fn forward_end(&self) -> Result<u64, Error> {
        Err(Error::Unsupported(NO_KERNEL_CORES))
    }

    fn ticks_per_sec(&self) -> u64 {
        self.tsc_hz
    }

    fn fs_prepare(&self) -> Result<(), Error> {
        let r = self.fs_root.get_or_init(|| if self.as_init { mount_guest_tree() } else { build_host_tree() });
        r.as_ref().map(|_| ()).map_err(|e| *e)
    }

    fn fs_stat(&self, path: &str) -> Result<u64, Error> {
        let p = self.path(path)?;
        // SAFETY: `p` is NUL-terminated; `st` is a valid stat buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::stat(p.ptr(), &mut st) } != 0 {
            return Err(sys("stat"));
        }
        Ok(st.st_size as u64)
    }

    fn fs_open(&self, path: &str) -> Result<Handle, Error> {
        let p = self.path(path)?;
        // SAFETY: `p` is NUL-terminated.
        match unsafe { libc::open(p.ptr(), libc::O_RDONLY) } {
            -1 => Err(sys("open")),
            fd => Ok(Handle(fd as u64)),
        }
    }

    fn fs_create(&self, path: &str) -> Result<Handle, Error> {
        let p = self.path(path)?;
        // SAFETY: `p` is NUL-terminated.
        match unsafe { libc::open(p.ptr(), libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644) } {
            -1 => Err(sys("open (create)")),
            fd => Ok(Handle(fd as u64)),
        }
    }

    fn fs_read(&self, fd: Handle, buf: &mut [u8]) -> Result<usize, Error> {
        // SAFETY: reads into a live buffer of `buf.len()` bytes.
        match unsafe { libc::read(fd.0 as i32, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) } {
            -1 => Err(sys("read")),
            n => Ok(n as usize),
        }
    }

    fn fs_pread(&self, fd: Handle, buf: &mut [u8], off: u64) -> Result<usize, Error> {
        // SAFETY: reads into a live buffer of `buf.len()` bytes.
        match unsafe { libc::pread(fd.0 as i32, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), off as i64) } {
            -1 => Err(sys("pread")),
            n => Ok(n as usize),
        }
    }

    fn fs_fstat(&self, fd: Handle) -> Result<u64, Error> {
        // SAFETY: `st` is a valid stat buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd.0 as i32, &mut st) } != 0 {
            return Err(sys("fstat"));
        }
        Ok(st.st_size as u64)
    }

    fn fs_close(&self, fd: Handle) -> Result<(), Error> {
        self.desc_close(fd)
    }

    fn fs_unlink(&self, path: &str) -> Result<(), Error> {
        let p = self.path(path)?;
        // SAFETY: `p` is NUL-terminated.
        if unsafe { libc::unlink(p.ptr()) } != 0 {
            return Err(sys("unlink"));
        }
        Ok(())
    }

    fn with_metis_env(&self, f: &mut dyn FnMut(&dyn mapreduce::Env)) -> Result<(), Error> {
        let env = crate::metis_linux::LinuxEnv::new(self, 0);
        f(&env);
        Ok(())
    }
    fn marker(&self, v: u8) {
        if self.markers {
            // SAFETY: `markers` is set only after ioperm granted port 0x501 (and each worker
            // asks again in `enter_worker`).
            unsafe { harness::marker_out(v) }
        }
    }
}
