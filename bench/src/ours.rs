//! Backend 2: this system's library OS (user/libos), for the `x86_64-unknown-none` user
//! program `bench-ours` (user/apps/src/bin/bench-ours.rs). On any other target (the host)
//! [`Ours`] is a stub that refuses every operation, so `cargo test -p bench` stays host-only.
//!
//! | method | library OS / kernel call |
//! | --- | --- |
//! | `run_threads` | worker 0 on the calling context; worker `w` a `libos::thread` on core `(me + w) % cores` (one context per pcore), joined |
//! | `run_processes` | worker 0 on the calling context; worker `w` a `libos::cfork` child (copy-on-write copy of the root range, private heap), joined |
//! | `thread_create_join` | a `libos::thread` on the calling core, which the worker first makes a time-sharing core (TC; `pcore_set_role` through a pcore it allocates for its own core); `join` yields to the thread |
//! | `map(Private)` | `segment_alloc` (pages from the calling core) + `ar_set_seg` into a 512 GiB range linked into every thread's root range (one address space); a cfork child gets a copy of that range |
//! | `map(Shared)` | the same into a second range that cfork children link as it is (shared page tables) |
//! | `unmap` | `ar_unmap` + `share_delobj` of the segment |
//! | `object_create` / `object_map` | a segment, touched once through a temporary mapping (resident), then mapped into a fresh place of the private range |
//! | `stat` | `obj_stat` on the object (the kernel's stat; the library OS has no file system) |
//! | `desc_scope` / `desc_*` | `libos::fd`: `Scope::Process` (process-wide table) vs `Scope::Private` (the context's `SHARE_PRIVATE` table); open = console, dup/close |
//! | `share_open(Process/Worker)` / `share_add` / `share_del` | one shared share for the process vs a `SHARE_PRIVATE` share per core; `share_addobj` / `share_delobj` |
//! | `null_syscall` | `null` |
//! | `null_syscall_batch` | `syscall_batch` of `null` entries (at most 64), every entry's result checked |
//! | `forward_begin` / `forward_end` | the highest other core made a kernel core and the caller's core an application core (`pcore_set_role` through pcore objects made for them); afterwards both get their old roles back and the KC's `core_stats().syscalls_served` difference is returned |
//! | `ticks` / `ticks_per_sec` | `rdtsc` / `SysInfo::tsc_per_ms` |
//! | `marker` | the marker `out` from ring 3 (the kernel's TSS I/O bitmap opens port 0x501) |
//! | `fs_*` | `libos::fs` (our ext2 on the first virtio-blk disk): `mount`, `stat`, `open`, `read`, `pread`, `fstat`, `close`, `unlink` |
//! | `with_metis_env` | `metis_ours::OursEnv` in the per-core layout (each worker's intermediate data in its own address range) |

#[cfg(not(target_os = "none"))]
use crate::{Error, Handle, MapKind, Platform, Scope};

/// Whether this build has the real backend (only the user-program build does).
pub const AVAILABLE: bool = cfg!(target_os = "none");
pub const WHY_NOT: &str = "the library-OS backend exists only in the x86_64-unknown-none user program";

#[cfg(target_os = "none")]
pub use imp::Ours;

/// Host stand-in: refuses everything.
#[cfg(not(target_os = "none"))]
pub struct Ours;

#[cfg(not(target_os = "none"))]
const NO: Error = Error::Unsupported("the library OS (only in the bench-ours user program)");

#[cfg(not(target_os = "none"))]
impl Platform for Ours {
    fn name(&self) -> &'static str {
        "ours"
    }
    fn cores(&self) -> usize {
        1
    }
    fn run_threads(&self, _n: usize, _body: &(dyn Fn(usize) + Sync)) -> Result<(), Error> {
        Err(NO)
    }
    fn run_processes(&self, _n: usize, _body: &(dyn Fn(usize) + Sync)) -> Result<(), Error> {
        Err(NO)
    }
    fn thread_create_join(&self) -> Result<(), Error> {
        Err(NO)
    }
    fn map(&self, _bytes: usize, _kind: MapKind) -> Result<*mut u8, Error> {
        Err(NO)
    }
    fn unmap(&self, _ptr: *mut u8, _bytes: usize) -> Result<(), Error> {
        Err(NO)
    }
    fn object_create(&self, _bytes: usize) -> Result<Handle, Error> {
        Err(NO)
    }
    fn object_map(&self, _obj: Handle, _bytes: usize) -> Result<*mut u8, Error> {
        Err(NO)
    }
    fn object_destroy(&self, _obj: Handle) -> Result<(), Error> {
        Err(NO)
    }
    fn segment_alloc(&self, _bytes: usize) -> Result<Handle, Error> {
        Err(NO)
    }
    fn segment_free(&self, _seg: Handle) -> Result<(), Error> {
        Err(NO)
    }
    fn stat(&self, _obj: Handle) -> Result<(), Error> {
        Err(NO)
    }
    fn desc_scope(&self, _scope: Scope) -> Result<(), Error> {
        Err(NO)
    }
    fn desc_open(&self) -> Result<Handle, Error> {
        Err(NO)
    }
    fn desc_dup(&self, _d: Handle) -> Result<Handle, Error> {
        Err(NO)
    }
    fn desc_close(&self, _d: Handle) -> Result<(), Error> {
        Err(NO)
    }
    fn share_open(&self, _scope: Scope) -> Result<Handle, Error> {
        Err(NO)
    }
    fn share_add(&self, _share: Handle, _obj: Handle) -> Result<Handle, Error> {
        Err(NO)
    }
    fn share_del(&self, _share: Handle, _id: Handle) -> Result<(), Error> {
        Err(NO)
    }
    fn null_syscall(&self) -> u64 {
        u64::MAX
    }
    fn null_expected(&self) -> u64 {
        0
    }
    fn null_syscall_batch(&self, _n: usize) -> Result<(), Error> {
        Err(NO)
    }
    fn forward_begin(&self) -> Result<(), Error> {
        Err(NO)
    }
    fn forward_end(&self) -> Result<u64, Error> {
        Err(NO)
    }
    fn ticks_per_sec(&self) -> u64 {
        0
    }
    fn marker(&self, _v: u8) {}
}

#[cfg(target_os = "none")]
mod imp {
    use crate::{Error, Handle, MapKind, Platform, Scope};
    use abi::{nr, ArKind, ArMapping, BatchEntry, ObjName, ObjType, ObjectId, SegMapping, MAP_READ, MAP_WRITE, MEMID_SELF, ROLE_AC, ROLE_KC, SHARE_PRIVATE};
    use core::cell::UnsafeCell;
    use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use libos::sys;

    /// Where the two benchmark ranges are linked in every root range (512 GiB aligned).
    const SHARED_BASE: u64 = libos::layout::SHARED_BASE;
    const PRIVATE_BASE: u64 = libos::layout::PRIVATE_BASE;
    const SPAN: u64 = 512 << 30;
    const MAX_WORKERS: usize = 64;
    const MAX_CORES: usize = 256;

    fn e(what: &'static str) -> impl Fn(abi::Error) -> Error {
        move |x| Error::Sys { what, code: x as i64 }
    }

    /// A file-system error as a bench error: no disk is `Unsupported` (the cell is then
    /// `unavailable`), anything else names the call and the error's index.
    fn fs_err(what: &'static str) -> impl Fn(libos::fs::FsError) -> Error {
        move |x| match x {
            libos::fs::FsError::NoDevice => Error::Unsupported("files (no disk attached, or another process holds it)"),
            x => Error::Sys { what, code: fs_code(x) },
        }
    }

    fn fs_code(x: libos::fs::FsError) -> i64 {
        use libos::fs::FsError::*;
        match x {
            Io => 1,
            Corrupt(_) => 2,
            Unsupported(_) => 3,
            NotFound => 4,
            NotDir => 5,
            IsDir => 6,
            NameTooLong => 7,
            InvalidArgument => 8,
            NoSpace => 9,
            Exists => 10,
            NotEmpty => 11,
            BadDescriptor => 12,
            ReadOnly => 13,
            NoMemory => 14,
            NoDevice => 15,
            TooManyLinks => 16,
            // Internal to `fs` (retried there); never returned by it.
            Contended => 17,
        }
    }

    /// Cores this process has made time-sharing (for `thread_create_join`).
    static TIME_SHARED: [AtomicBool; MAX_CORES] = [const { AtomicBool::new(false) }; MAX_CORES];
    const EMPTY_THREAD_CODE: u64 = 42;

    fn empty_thread(arg: u64) -> u64 {
        arg
    }

    static SHARED_AR: AtomicU64 = AtomicU64::new(0);
    static SHARED_AR_SHARE: AtomicU64 = AtomicU64::new(0);
    static PRIVATE_AR: AtomicU64 = AtomicU64::new(0);
    static PRIVATE_AR_SHARE: AtomicU64 = AtomicU64::new(0);
    static GLOBAL_SHARE: AtomicU64 = AtomicU64::new(0);
    /// Set in a cfork child (its statics are its own copy).
    static IN_CHILD: AtomicBool = AtomicBool::new(false);
    static LOCAL_SHARES: [AtomicU64; MAX_CORES] = [const { AtomicU64::new(0) }; MAX_CORES];
    /// The root share each `LOCAL_SHARES` entry was made in (a later context on the core
    /// makes its own).
    static LOCAL_ROOTS: [AtomicU64; MAX_CORES] = [const { AtomicU64::new(0) }; MAX_CORES];
    static DESC_PRIVATE: [AtomicBool; MAX_CORES] = [const { AtomicBool::new(false) }; MAX_CORES];
    static DESC_TABLE: [AtomicU64; MAX_CORES] = [const { AtomicU64::new(0) }; MAX_CORES];

    /// Most null calls in one `null_syscall_batch` (the entries live on the stack).
    const MAX_NULL_BATCH: usize = 64;

    /// What `forward_begin` changed, for `forward_end` to undo (one forwarding worker at a
    /// time).
    struct Forwarding {
        /// The kernel core, its pcore object and its role before.
        kc: u64,
        kc_pcore: ObjName,
        kc_role: u64,
        /// The caller's core's pcore object and its role before.
        me_pcore: ObjName,
        me_role: u64,
        /// The kernel core's `syscalls_served` when it became one.
        served: u64,
    }
    struct ForwardState {
        lock: AtomicBool,
        inner: UnsafeCell<Option<Forwarding>>,
    }
    // SAFETY: `inner` is only touched by the caller that set `lock` (see `with_forwarding`).
    unsafe impl Sync for ForwardState {}
    static FORWARDING: ForwardState = ForwardState { lock: AtomicBool::new(false), inner: UnsafeCell::new(None) };

    fn with_forwarding<R>(f: impl FnOnce(&mut Option<Forwarding>) -> R) -> R {
        while FORWARDING.lock.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            core::hint::spin_loop();
        }
        // SAFETY: the lock is held.
        let r = f(unsafe { &mut *FORWARDING.inner.get() });
        FORWARDING.lock.store(false, Ordering::Release);
        r
    }

    fn role_of(core: u64) -> Result<u64, Error> {
        sys::core_stats(core).map(|s| s.role).map_err(e("core_stats"))
    }

    /// A pcore object for `core` in the process share, deleted again if `f` fails.
    fn with_pcore<R>(name: &str, core: u64, f: impl FnOnce(ObjName) -> Result<R, Error>) -> Result<(ObjName, R), Error> {
        let p = ObjName::new(seg_share(), sys::pcore_alloc(seg_share(), name, core).map_err(e("pcore_alloc"))?);
        match f(p) {
            Ok(r) => Ok((p, r)),
            Err(x) => {
                let _ = sys::share_delobj(p);
                Err(x)
            }
        }
    }

    fn shared_ar() -> ObjName {
        ObjName::new(SHARED_AR_SHARE.load(Ordering::Relaxed), SHARED_AR.load(Ordering::Relaxed))
    }
    fn private_ar() -> ObjName {
        ObjName::new(PRIVATE_AR_SHARE.load(Ordering::Relaxed), PRIVATE_AR.load(Ordering::Relaxed))
    }
    /// The share this process's segments go in (in a cfork child, the child's own share).
    fn seg_share() -> ObjectId {
        libos::process::proc_share()
    }
    /// Where a worker's own objects go: its context's root share, which is private to the
    /// core it runs on (Corey: a per-core segment lives in the core's private root share, so
    /// naming it takes no lock and no reference-count traffic on a shared line).
    fn worker_share() -> ObjectId {
        libos::ctx::ctx().root_share
    }
    fn core() -> usize {
        libos::core_id() as usize % MAX_CORES
    }

    /// One mapping the backend made: where, which segment, whether unmap deletes it.
    #[derive(Clone, Copy)]
    struct Ent {
        va: u64,
        len: u64,
        seg: ObjectId,
        /// 0 empty, 1 mapped, 2 free address space (reusable for the same length).
        state: u8,
        shared: bool,
        owned: bool,
    }
    const EMPTY: Ent = Ent { va: 0, len: 0, seg: 0, state: 0, shared: false, owned: false };
    const MAX_MAPS: usize = 1024;

    struct Table {
        lock: AtomicBool,
        inner: UnsafeCell<([Ent; MAX_MAPS], [u64; 2])>,
    }
    // SAFETY: `inner` is only touched with `lock` held.
    unsafe impl Sync for Table {}
    static TABLE: Table = Table { lock: AtomicBool::new(false), inner: UnsafeCell::new(([EMPTY; MAX_MAPS], [SPAN / 2, SPAN / 2])) };

    fn with_table<R>(f: impl FnOnce(&mut [Ent; MAX_MAPS], &mut [u64; 2]) -> R) -> R {
        while TABLE.lock.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            core::hint::spin_loop();
        }
        // SAFETY: the lock is held.
        let (t, next) = unsafe { &mut *TABLE.inner.get() };
        let r = f(t, next);
        TABLE.lock.store(false, Ordering::Release);
        r
    }

    /// Reserve `len` bytes of one range's address space (reusing a freed place of the same
    /// length first, as an OS reuses virtual addresses) and record the segment there.
    fn reserve(len: u64, seg: ObjectId, shared: bool, owned: bool) -> Result<u64, Error> {
        with_table(|t, next| {
            let base = if shared { SHARED_BASE } else { PRIVATE_BASE };
            let mk = |va| Ent { va, len, seg, state: 1, shared, owned };
            if let Some(x) = t.iter_mut().find(|x| x.state == 2 && x.len == len && x.shared == shared) {
                *x = mk(x.va);
                return Ok(x.va);
            }
            let slot = t.iter_mut().find(|x| x.state == 0).ok_or(Error::Unsupported("more than 1024 live mappings"))?;
            let n = &mut next[shared as usize];
            // A guard page between mappings.
            if *n + len + 4096 > SPAN {
                return Err(Error::Unsupported("benchmark address range exhausted"));
            }
            let va = base + *n;
            *n += len + 4096;
            *slot = mk(va);
            Ok(va)
        })
    }

    fn release(va: u64) {
        with_table(|t, _| {
            if let Some(x) = t.iter_mut().find(|x| x.state == 1 && x.va == va) {
                x.state = 2;
            }
        })
    }

    fn map_seg(seg: ObjName, bytes: u64, shared: bool, owned: bool) -> Result<*mut u8, Error> {
        if shared && IN_CHILD.load(Ordering::Relaxed) {
            return Err(Error::Unsupported("shared mappings made inside a process worker"));
        }
        let va = reserve(bytes, seg.object, shared, owned)?;
        let (ar, base) = if shared { (shared_ar(), SHARED_BASE) } else { (private_ar(), PRIVATE_BASE) };
        let m = SegMapping { voff: va - base, seg, soff: 0, len: bytes, flags: MAP_READ | MAP_WRITE };
        if let Err(x) = sys::ar_set_seg(ar, &m) {
            release(va);
            return Err(e("ar_set_seg")(x));
        }
        Ok(va as *mut u8)
    }

    /// Link the two benchmark ranges into the calling context's root range.
    fn link_ranges() -> Result<(), Error> {
        let root = libos::ctx::ctx().root_ar;
        sys::ar_set_ar(root, SHARED_BASE, shared_ar()).map_err(e("ar_set_ar shared"))?;
        sys::ar_set_ar(root, PRIVATE_BASE, private_ar()).map_err(e("ar_set_ar private"))?;
        Ok(())
    }

    struct Job<'a> {
        body: &'a (dyn Fn(usize) + Sync),
        w: usize,
    }

    fn thread_worker(arg: u64) -> u64 {
        // SAFETY: `arg` points at a `Job` on the spawner's stack, which every thread maps and
        // which lives until the spawner has joined this thread.
        let job = unsafe { &*(arg as *const Job) };
        if let Err(Error::Sys { code, .. }) = link_ranges() {
            return 1000 + code as u64;
        }
        (job.body)(job.w);
        0
    }

    fn process_worker(arg: u64) -> u64 {
        IN_CHILD.store(true, Ordering::Relaxed);
        // The private range here is cfork's copy: find it where the parent's was linked.
        let me = libos::ctx::ctx();
        let mut maps = [ArMapping::default(); 128];
        let n = match sys::ar_get(me.root_ar, &mut maps) {
            Ok(n) => n as usize,
            Err(x) => return 2000 + x as u64,
        };
        let Some(m) = maps[..n.min(maps.len())].iter().find(|m| m.voff == PRIVATE_BASE && m.target_type == ObjType::AddressRange as u32) else {
            return 2999;
        };
        PRIVATE_AR_SHARE.store(libos::process::proc_share(), Ordering::Relaxed);
        PRIVATE_AR.store(m.target, Ordering::Relaxed);
        // SAFETY: as in `thread_worker`; the child reads its copy-on-write copy of the stack.
        let job = unsafe { &*(arg as *const Job) };
        (job.body)(job.w);
        0
    }

    /// The library-OS platform. Make one with [`Ours::new`] in the first context, and call
    /// [`Ours::finish`] before exiting.
    pub struct Ours {
        cores: usize,
        tsc_hz: u64,
    }

    impl Ours {
        pub fn new() -> Result<Ours, Error> {
            let proc = libos::process::proc_share();
            let shared = sys::ar_alloc(proc, "bench-shared", MEMID_SELF, ArKind::Span512G).map_err(e("ar_alloc"))?;
            SHARED_AR_SHARE.store(proc, Ordering::Relaxed);
            SHARED_AR.store(shared, Ordering::Relaxed);
            let private = sys::ar_alloc(proc, "bench-private", MEMID_SELF, ArKind::Span512G).map_err(e("ar_alloc"))?;
            PRIVATE_AR_SHARE.store(proc, Ordering::Relaxed);
            PRIVATE_AR.store(private, Ordering::Relaxed);
            link_ranges()?;
            let g = libos::process::new_share("bench-global", MEMID_SELF).map_err(e("share_alloc"))?;
            GLOBAL_SHARE.store(g, Ordering::Relaxed);
            // The process-wide descriptor table, made here so the first context holds it in
            // its root share (a table a thread made first would be out of its reach).
            libos::fd::table(libos::fd::Scope::Process).map_err(e("descriptor table"))?;
            let cores = (libos::start_info().cores as usize).clamp(1, MAX_WORKERS);
            Ok(Ours { cores, tsc_hz: libos::time::tsc_per_ms() * 1000 })
        }

        /// Give back what the backend holds (the kernel checks for leaks after exit).
        pub fn finish(&self) {
            let root = libos::ctx::ctx().root_ar;
            let _ = sys::ar_unmap(root, SHARED_BASE, SPAN);
            let _ = sys::ar_unmap(root, PRIVATE_BASE, SPAN);
            let proc = libos::process::proc_share();
            with_table(|t, _| {
                for x in t.iter_mut().filter(|x| x.state == 1 && x.owned) {
                    let _ = sys::share_delobj(ObjName::new(proc, x.seg));
                    x.state = 0;
                }
            });
            let _ = sys::share_delobj(shared_ar());
            let _ = sys::share_delobj(private_ar());
            for s in LOCAL_SHARES.iter() {
                let id = s.swap(0, Ordering::Relaxed);
                if id != 0 {
                    libos::process::del_share(id);
                }
            }
            let g = GLOBAL_SHARE.swap(0, Ordering::Relaxed);
            if g != 0 {
                libos::process::del_share(g);
            }
        }

        fn run(&self, n: usize, body: &(dyn Fn(usize) + Sync), processes: bool) -> Result<(), Error> {
            if n == 0 || n > self.cores {
                return Err(Error::Unsupported("more workers than cores (one context per core)"));
            }
            let me = libos::core_id() as usize;
            let jobs: [Job; MAX_WORKERS] = core::array::from_fn(|w| Job { body, w });
            let mut threads: [Option<libos::thread::Thread>; MAX_WORKERS] = core::array::from_fn(|_| None);
            let mut children: [Option<libos::cfork::Child>; MAX_WORKERS] = core::array::from_fn(|_| None);
            let shared = [SHARED_AR.load(Ordering::Relaxed)];
            // The global share goes in every worker's share set (Corey: a share used by several
            // cores is in their share sets), so naming it is a direct hit, not a lookup
            // through the process share.
            let proc = [libos::process::proc_share(), GLOBAL_SHARE.load(Ordering::Relaxed)];
            for w in 1..n {
                let c = ((me + w) % self.cores) as u64;
                let arg = &jobs[w] as *const Job as u64;
                if processes {
                    let opts = libos::CforkOpts { shares: &proc, segments: &[], ranges: &shared };
                    // On failure the children made so far are halted and deleted when dropped.
                    children[w] = Some(libos::cfork(c, &opts, process_worker, arg).map_err(e("cfork"))?);
                } else {
                    threads[w] = Some(libos::thread::spawn_with(c, thread_worker, arg, &proc[1..]).map_err(e("thread spawn"))?);
                }
            }
            body(0);
            let mut bad = None;
            for w in 1..n {
                let code = if processes {
                    children[w].as_mut().map(|c| c.join_timeout(600_000))
                } else {
                    threads[w].as_mut().map(|t| t.join_timeout(600_000))
                };
                match code {
                    Some(Ok(0)) | None => {}
                    Some(Ok(c)) => bad = bad.or(Some(Error::Sys { what: "worker exit code", code: c as i64 })),
                    Some(Err(x)) => bad = bad.or(Some(e("join")(x))),
                }
            }
            drop(threads);
            drop(children);
            bad.map_or(Ok(()), Err)
        }

        fn desc_fd(&self, d: Handle) -> libos::fd::Fd {
            libos::fd::Fd { table: DESC_TABLE[core()].load(Ordering::Relaxed), obj: d.0 }
        }
        fn fd_scope(&self) -> libos::fd::Scope {
            if DESC_PRIVATE[core()].load(Ordering::Relaxed) {
                libos::fd::Scope::Private
            } else {
                libos::fd::Scope::Process
            }
        }
    }

    impl Platform for Ours {
        fn name(&self) -> &'static str {
            "ours"
        }
        fn cores(&self) -> usize {
            self.cores
        }
        fn run_threads(&self, n: usize, body: &(dyn Fn(usize) + Sync)) -> Result<(), Error> {
            self.run(n, body, false)
        }
        fn run_processes(&self, n: usize, body: &(dyn Fn(usize) + Sync)) -> Result<(), Error> {
            self.run(n, body, true)
        }
        fn thread_create_join(&self) -> Result<(), Error> {
            // Every core runs a worker, so the thread time-shares the worker's core: make it a
            // TC once (a context may change its own core's role through a pcore it allocated).
            let me = core();
            if !TIME_SHARED[me].load(Ordering::Relaxed) {
                let p = ObjName::new(seg_share(), sys::pcore_alloc(seg_share(), "bench-tc", libos::core_id()).map_err(e("pcore_alloc"))?);
                let set = sys::pcore_set_role(p, abi::ROLE_TC);
                let _ = sys::share_delobj(p);
                set.map_err(e("pcore_set_role TC"))?;
                TIME_SHARED[me].store(true, Ordering::Relaxed);
            }
            let t = libos::thread::spawn(libos::core_id(), empty_thread, EMPTY_THREAD_CODE).map_err(e("thread spawn"))?;
            // Joining yields the core to the thread, which runs at once.
            match t.join().map_err(e("thread join"))? {
                EMPTY_THREAD_CODE => Ok(()),
                _ => Err(Error::Param("the empty thread returned a wrong exit code")),
            }
        }
        fn map(&self, bytes: usize, kind: MapKind) -> Result<*mut u8, Error> {
            let bytes = bytes as u64;
            let seg = sys::segment_alloc(seg_share(), "bench-mem", MEMID_SELF, bytes).map_err(e("segment_alloc"))?;
            let seg = ObjName::new(seg_share(), seg);
            map_seg(seg, bytes, kind == MapKind::Shared, true).inspect_err(|_| {
                let _ = sys::share_delobj(seg);
            })
        }
        fn unmap(&self, ptr: *mut u8, bytes: usize) -> Result<(), Error> {
            let va = ptr as u64;
            let ent = with_table(|t, _| t.iter().find(|x| x.state == 1 && x.va == va).copied()).ok_or(Error::Param("unmap of an address map did not return"))?;
            let (ar, base) = if ent.shared { (shared_ar(), SHARED_BASE) } else { (private_ar(), PRIVATE_BASE) };
            sys::ar_unmap(ar, va - base, (bytes as u64).max(ent.len)).map_err(e("ar_unmap"))?;
            if ent.owned {
                sys::share_delobj(ObjName::new(seg_share(), ent.seg)).map_err(e("share_delobj"))?;
            }
            release(va);
            Ok(())
        }
        fn object_create(&self, bytes: usize) -> Result<Handle, Error> {
            let bytes = bytes as u64;
            let seg = ObjName::new(worker_share(), sys::segment_alloc(worker_share(), "bench-obj", MEMID_SELF, bytes).map_err(e("segment_alloc"))?);
            // Make every page resident: touch it once through a temporary mapping.
            let r = map_seg(seg, bytes, false, false).and_then(|p| {
                for off in (0..bytes).step_by(4096) {
                    // SAFETY: a live read-write mapping of `bytes` bytes.
                    unsafe { core::ptr::write_volatile(p.add(off as usize), 0) };
                }
                self.unmap(p, bytes as usize)
            });
            match r {
                Ok(()) => Ok(Handle(seg.object)),
                Err(x) => {
                    let _ = sys::share_delobj(seg);
                    Err(x)
                }
            }
        }
        fn object_map(&self, obj: Handle, bytes: usize) -> Result<*mut u8, Error> {
            map_seg(ObjName::new(worker_share(), obj.0), bytes as u64, false, false)
        }
        fn object_destroy(&self, obj: Handle) -> Result<(), Error> {
            sys::share_delobj(ObjName::new(worker_share(), obj.0)).map(|_| ()).map_err(e("share_delobj"))
        }
        fn segment_alloc(&self, bytes: usize) -> Result<Handle, Error> {
            sys::segment_alloc(worker_share(), "bench-seg", MEMID_SELF, bytes as u64).map(Handle).map_err(e("segment_alloc"))
        }
        fn segment_free(&self, seg: Handle) -> Result<(), Error> {
            sys::share_delobj(ObjName::new(worker_share(), seg.0)).map(|_| ()).map_err(e("share_delobj"))
        }
        fn stat(&self, obj: Handle) -> Result<(), Error> {
            sys::obj_stat(ObjName::new(worker_share(), obj.0)).map(|_| ()).map_err(e("obj_stat"))
        }
        fn desc_scope(&self, scope: Scope) -> Result<(), Error> {
            DESC_PRIVATE[core()].store(scope == Scope::Worker, Ordering::Relaxed);
            let t = libos::fd::table(self.fd_scope()).map_err(e("descriptor table"))?;
            DESC_TABLE[core()].store(t, Ordering::Relaxed);
            Ok(())
        }
        fn desc_open(&self) -> Result<Handle, Error> {
            libos::fd::open_console(self.fd_scope()).map(|fd| Handle(fd.obj)).map_err(e("open"))
        }
        fn desc_dup(&self, d: Handle) -> Result<Handle, Error> {
            libos::fd::dup(self.desc_fd(d), self.fd_scope()).map(|fd| Handle(fd.obj)).map_err(e("dup"))
        }
        fn desc_close(&self, d: Handle) -> Result<(), Error> {
            libos::fd::close(self.desc_fd(d)).map_err(e("close"))
        }
        fn share_open(&self, scope: Scope) -> Result<Handle, Error> {
            match scope {
                Scope::Process => Ok(Handle(GLOBAL_SHARE.load(Ordering::Relaxed))),
                Scope::Worker => {
                    // A private share in the worker's own root share (the lookups through it
                    // are the root share's, lock-free and uncounted), made once per context.
                    let root = worker_share();
                    let (slot, owner) = (&LOCAL_SHARES[core()], &LOCAL_ROOTS[core()]);
                    let s = slot.load(Ordering::Relaxed);
                    if s != 0 && owner.load(Ordering::Relaxed) == root {
                        return Ok(Handle(s));
                    }
                    let s = sys::share_alloc(root, "bench-local", MEMID_SELF, SHARE_PRIVATE).map_err(e("share_alloc"))?;
                    slot.store(s, Ordering::Relaxed);
                    owner.store(root, Ordering::Relaxed);
                    Ok(Handle(s))
                }
            }
        }
        fn share_add(&self, share: Handle, obj: Handle) -> Result<Handle, Error> {
            sys::share_addobj(share.0, ObjName::new(worker_share(), obj.0)).map_err(e("share_addobj"))?;
            Ok(obj)
        }
        fn share_del(&self, share: Handle, id: Handle) -> Result<(), Error> {
            sys::share_delobj(ObjName::new(share.0, id.0)).map(|_| ()).map_err(e("share_delobj"))
        }
        fn null_syscall(&self) -> u64 {
            // Ok(0) is 0; an error (or any other value) makes the loop's sum differ from 0.
            sys::null().unwrap_or(u64::MAX)
        }
        fn null_expected(&self) -> u64 {
            0
        }
        fn null_syscall_batch(&self, n: usize) -> Result<(), Error> {
            if n == 0 || n > MAX_NULL_BATCH {
                return Err(Error::Param("batch must be 1..=64"));
            }
            let mut entries = [BatchEntry { nr: nr::NULL, args: [0; 6], result: -1 }; MAX_NULL_BATCH];
            // SAFETY: `entries` is a live, writable array of at least `n` entries.
            let r = unsafe { sys::call(nr::SYSCALL_BATCH, entries.as_mut_ptr() as u64, n as u64, 0, 0, 0, 0) };
            match r {
                Ok(k) if k == n as u64 => {}
                Ok(_) => return Err(Error::Check("syscall_batch ran fewer calls than it was given")),
                Err(x) => return Err(e("syscall_batch")(x)),
            }
            if entries[..n].iter().any(|x| x.result != 0) {
                return Err(Error::Check("a batched null call failed"));
            }
            Ok(())
        }
        fn forward_begin(&self) -> Result<(), Error> {
            if self.cores < 2 {
                return Err(Error::Unsupported("a kernel core at 1 vCPU (no second core to make one)"));
            }
            with_forwarding(|state| {
                if state.is_some() {
                    return Err(Error::Unsupported("two forwarding workers at once"));
                }
                let me = libos::core_id();
                // The highest core the caller is not on: with one worker (on core 0) it runs
                // nothing, and only an idle core can become a kernel core.
                let kc = (0..self.cores as u64).rev().find(|&c| c != me).ok_or(Error::Param("no other core"))?;
                let (kc_role, me_role) = (role_of(kc)?, role_of(me)?);
                let (kc_pcore, served) = with_pcore("bench-kc", kc, |p| {
                    sys::pcore_set_role(p, ROLE_KC).map_err(e("pcore_set_role KC"))?;
                    let served = sys::core_stats(kc).map(|s| s.syscalls_served).map_err(e("core_stats"));
                    if served.is_err() {
                        let _ = sys::pcore_set_role(p, kc_role);
                    }
                    served
                })?;
                // The caller's own core becomes an AC (from its next system call on).
                let me_pcore = with_pcore("bench-ac", me, |p| sys::pcore_set_role(p, ROLE_AC).map(|_| ()).map_err(e("pcore_set_role AC")));
                let me_pcore = match me_pcore {
                    Ok((p, ())) => p,
                    Err(x) => {
                        let _ = sys::pcore_set_role(kc_pcore, kc_role);
                        let _ = sys::share_delobj(kc_pcore);
                        return Err(x);
                    }
                };
                *state = Some(Forwarding { kc, kc_pcore, kc_role, me_pcore, me_role, served });
                Ok(())
            })
        }
        fn forward_end(&self) -> Result<u64, Error> {
            let f = with_forwarding(|state| state.take()).ok_or(Error::Param("forward_end without forward_begin"))?;
            // The caller's core first: the last kernel core cannot stop while an AC runs.
            let me_back = sys::pcore_set_role(f.me_pcore, f.me_role).map_err(e("pcore_set_role back from AC"));
            let served = sys::core_stats(f.kc).map(|s| s.syscalls_served.wrapping_sub(f.served)).map_err(e("core_stats"));
            let kc_back = sys::pcore_set_role(f.kc_pcore, f.kc_role).map_err(e("pcore_set_role back from KC"));
            let _ = sys::share_delobj(f.me_pcore);
            let _ = sys::share_delobj(f.kc_pcore);
            me_back?;
            kc_back?;
            served
        }
        fn ticks_per_sec(&self) -> u64 {
            self.tsc_hz
        }
        fn fs_prepare(&self) -> Result<(), Error> {
            // The library OS mounts the first disk once per process (idempotent); a program
            // that returns from `main` is unmounted by it.
            libos::fs::mount().map_err(fs_err("mount"))
        }
        fn fs_stat(&self, path: &str) -> Result<u64, Error> {
            libos::fs::stat(path).map(|s| s.size).map_err(fs_err("stat"))
        }
        fn fs_open(&self, path: &str) -> Result<Handle, Error> {
            libos::fs::open(path, libos::fs::O_RDONLY).map(|fd| Handle(fd.0 as u64)).map_err(fs_err("open"))
        }
        fn fs_create(&self, path: &str) -> Result<Handle, Error> {
            let flags = libos::fs::O_CREAT | libos::fs::O_EXCL | libos::fs::O_WRONLY;
            libos::fs::open(path, flags).map(|fd| Handle(fd.0 as u64)).map_err(fs_err("open (create)"))
        }
        fn fs_read(&self, fd: Handle, buf: &mut [u8]) -> Result<usize, Error> {
            libos::fs::read(libos::fs::Fd(fd.0 as u32), buf).map_err(fs_err("read"))
        }
        fn fs_pread(&self, fd: Handle, buf: &mut [u8], off: u64) -> Result<usize, Error> {
            libos::fs::pread(libos::fs::Fd(fd.0 as u32), buf, off).map_err(fs_err("pread"))
        }
        fn fs_fstat(&self, fd: Handle) -> Result<u64, Error> {
            libos::fs::fstat(libos::fs::Fd(fd.0 as u32)).map(|s| s.size).map_err(fs_err("fstat"))
        }
        fn fs_close(&self, fd: Handle) -> Result<(), Error> {
            libos::fs::close(libos::fs::Fd(fd.0 as u32)).map_err(fs_err("close"))
        }
        fn fs_unlink(&self, path: &str) -> Result<(), Error> {
            libos::fs::unlink(path).map_err(fs_err("unlink"))
        }
        fn with_metis_env(&self, f: &mut dyn FnMut(&dyn mapreduce::Env)) -> Result<(), Error> {
            let env = crate::metis_ours::OursEnv::new(self, crate::metis_ours::Layout::PerCore).map_err(crate::metis::to_bench)?;
            f(&env);
            env.finish();
            Ok(())
        }
        fn marker(&self, v: u8) {
            // SAFETY: the kernel's TSS I/O-permission bitmap lets ring 3 write port 0x501.
            unsafe { crate::harness::marker_out(v) }
        }
    }
}

#[cfg(all(test, not(target_os = "none")))]
mod tests {
    use super::*;
    use crate::params::Params;

    /// The host stand-in must refuse, never produce a number.
    #[test]
    fn host_stub_refuses_instead_of_pretending() {
        let p = Params::parse("bench=dupclose").unwrap();
        assert!(matches!(crate::suite::run(&Ours, &p), Err(Error::Unsupported(_))));
        assert!(!AVAILABLE);
    }
}
