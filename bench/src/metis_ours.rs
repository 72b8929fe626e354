//! Metis (mapreduce/) on this system: workers are `libos::thread`s, one per core, through
//! bench's backend ([`crate::ours::Ours::run_threads`]), and each worker's intermediate data
//! lives where the
//! [`Layout`] says (Corey section 6.1, figure 10):
//!
//! | layout | where worker `w`'s arena is | map | reduce |
//! | --- | --- | --- | --- |
//! | `per-core` | a segment (pages from `w`'s core) in an address range of `w`'s own (`Span1G`), linked into every worker's root | `w`'s faults fill its own range's page tables: no other core takes or waits for them | the others link `w`'s range: its page tables are already filled, no soft fault |
//! | `shared` | a segment in one `Span512G` range all workers link | every worker's faults go into the one range (its page-table pages and lock are shared) | no soft fault |
//! | `private` | a segment mapped directly in `w`'s own root range | private page tables | every worker maps every other's segment into its own root and takes a soft fault per page it reads (Linux processes' separate page tables) |
//!
//! Every arena is at `ARENA_BASE + w GiB` in all three layouts, so pointers inside the
//! intermediate data mean the same in every worker. The input is a segment (a file of the boot
//! image, copy-on-write, or the generated text) in a `Span512G` range at `INPUT_BASE` that
//! every worker links read-only.
//!
//! Soft faults are `core_stats(c).soft_faults` summed over all cores.

use abi::{ArKind, ObjName, ObjectId, SegMapping, MAP_READ, MAP_WRITE, MEMID_SELF};
use core::sync::atomic::{AtomicU64, Ordering};
use libos::sys;
use mapreduce::{Env, Error, MAX_WORKERS};

use crate::metis::from_bench;
use crate::ours::Ours;
use crate::Platform;

const GIB: u64 = 1 << 30;
/// Worker `w`'s arena is at `ARENA_BASE + w * GIB` (64 workers: 64 GiB).
pub const ARENA_BASE: u64 = libos::layout::SCRATCH_BASE;
/// Where the input range is linked (512 GiB aligned, below the loader's scratch window).
pub const INPUT_BASE: u64 = libos::layout::SCRATCH_BASE + (512 << 30);
const SPAN512: u64 = 512 << 30;
/// The page `Env::tlb_grow` maps and unmaps in each worker's root (1 TiB above the arenas).
const TLB_GROW_VA: u64 = libos::layout::SCRATCH_BASE + (1024 << 30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    PerCore,
    Shared,
    Private,
}

impl Layout {
    pub fn parse(s: &str) -> Option<Layout> {
        match s {
            "per-core" | "percore" => Some(Layout::PerCore),
            "shared" => Some(Layout::Shared),
            "private" => Some(Layout::Private),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Layout::PerCore => "per-core",
            Layout::Shared => "shared",
            Layout::Private => "private",
        }
    }
}

fn e(what: &'static str) -> impl Fn(abi::Error) -> Error {
    move |x| Error::Sys { what, code: x as i64 }
}

pub struct OursEnv<'a> {
    pub p: &'a Ours,
    pub layout: Layout,
    proc: ObjectId,
    /// The input range, and the segment in it.
    input_ar: ObjectId,
    input_seg: AtomicU64,
    input_len: AtomicU64,
    /// `shared` layout: the one range for all arenas.
    shared_ar: ObjectId,
    segs: [AtomicU64; MAX_WORKERS],
    ranges: [AtomicU64; MAX_WORKERS],
    /// Arena bytes of each worker (for `private`, to map the others' segments).
    lens: [AtomicU64; MAX_WORKERS],
}

fn root() -> ObjName {
    libos::ctx::ctx().root_ar
}

impl<'a> OursEnv<'a> {
    /// Make the ranges and link them into the calling (first) context's root. Give them back
    /// with [`finish`](Self::finish).
    pub fn new(p: &'a Ours, layout: Layout) -> Result<OursEnv<'a>, Error> {
        let proc = libos::process::proc_share();
        let mk = |name| sys::ar_alloc(proc, name, MEMID_SELF, ArKind::Span512G).map_err(e("ar_alloc"));
        let input_ar = mk("metis-input")?;
        let shared_ar = if layout == Layout::Shared { mk("metis-shared")? } else { 0 };
        let env = OursEnv {
            p,
            layout,
            proc,
            input_ar,
            input_seg: AtomicU64::new(0),
            input_len: AtomicU64::new(0),
            shared_ar,
            segs: [const { AtomicU64::new(0) }; MAX_WORKERS],
            ranges: [const { AtomicU64::new(0) }; MAX_WORKERS],
            lens: [const { AtomicU64::new(0) }; MAX_WORKERS],
        };
        env.link_common()?;
        Ok(env)
    }

    /// Link the input range (and the `shared` layout's range) into the calling context.
    fn link_common(&self) -> Result<(), Error> {
        sys::ar_set_ar(root(), INPUT_BASE, ObjName::new(self.proc, self.input_ar)).map_err(e("ar_set_ar input"))?;
        if self.layout == Layout::Shared {
            sys::ar_set_ar(root(), ARENA_BASE, ObjName::new(self.proc, self.shared_ar)).map_err(e("ar_set_ar shared"))?;
        }
        Ok(())
    }

    fn map_input(&self, seg: ObjectId, len: u64, flags: u64) -> Result<&'static [u8], Error> {
        if len > SPAN512 {
            let _ = sys::share_delobj(ObjName::new(self.proc, seg));
            return Err(Error::InputTooLarge { size: len as usize, fits: SPAN512 as usize });
        }
        self.input_seg.store(seg, Ordering::Relaxed);
        self.input_len.store(len, Ordering::Relaxed);
        if len == 0 {
            return Ok(&[]);
        }
        let m = SegMapping { voff: 0, seg: ObjName::new(self.proc, seg), soff: 0, len: len.next_multiple_of(4096), flags };
        sys::ar_set_seg(ObjName::new(self.proc, self.input_ar), &m).map_err(e("ar_set_seg input"))?;
        // SAFETY: `len` bytes are mapped at INPUT_BASE until `finish`, and nothing writes them
        // once the run starts.
        Ok(unsafe { core::slice::from_raw_parts(INPUT_BASE as *const u8, len as usize) })
    }

    /// The boot-image file `name` as the input (a copy-on-write segment, read-only here). Its
    /// pages are touched once here, before any phase, as Linux's `metis-linux` has read its
    /// file into memory before the run: map's faults are then the intermediate data's alone.
    pub fn input_from_image(&self, name: &str) -> Result<&'static [u8], Error> {
        let seg = sys::initrd_get(self.proc, name).map_err(e("initrd_get (no such file in the boot image?)"))?;
        let len = sys::segment_get_nbytes(ObjName::new(self.proc, seg)).map_err(e("segment_get_nbytes"))?;
        let input = self.map_input(seg, len, MAP_READ)?;
        for page in input.chunks(4096) {
            // SAFETY: `page` is a live, readable slice of the input; a volatile read keeps the
            // touch from being optimised away.
            unsafe { core::ptr::read_volatile(page.as_ptr()) };
        }
        Ok(input)
    }

    /// The file at `path` of the attached disk (ext2, `libos::fs`) as the input: mounted,
    /// read into a segment mapped where the other inputs go, before any phase (as the other
    /// inputs are). Errors name the file-system error (`Error::Param` carries its words).
    pub fn input_from_disk(&self, path: &str) -> Result<&'static [u8], Error> {
        use libos::fs;
        let fs_err = |x: fs::FsError| Error::Input(x.as_str());
        if !fs::mounted() {
            fs::mount().map_err(fs_err)?;
        }
        let fd = fs::open(path, fs::O_RDONLY).map_err(fs_err)?;
        let read = (|| -> Result<&'static [u8], Error> {
            let len = fs::fstat(fd).map_err(fs_err)?.size;
            let fits = free_bytes() / 4;
            if len > fits {
                return Err(Error::InputTooLarge { size: len as usize, fits: fits as usize });
            }
            let seg = sys::segment_alloc(self.proc, "metis-file", MEMID_SELF, len.max(1)).map_err(e("segment_alloc input"))?;
            self.map_input(seg, len, MAP_READ | MAP_WRITE)?;
            // SAFETY: just mapped read-write, `len` bytes at INPUT_BASE, used by no one else yet.
            let buf = unsafe { core::slice::from_raw_parts_mut(INPUT_BASE as *mut u8, len as usize) };
            let mut done = 0;
            while done < buf.len() {
                let n = fs::pread(fd, &mut buf[done..], done as u64).map_err(fs_err)?;
                if n == 0 {
                    return Err(Error::Input("the file ended before its size"));
                }
                done += n;
            }
            // SAFETY: as in `map_input`.
            Ok(unsafe { core::slice::from_raw_parts(INPUT_BASE as *const u8, len as usize) })
        })();
        let _ = fs::close(fd);
        read
    }

    /// `size` bytes of generated text (seed `seed`) as the input. Refuses, naming what fits,
    /// when the text would take more than a quarter of the free memory (the rest is for the
    /// intermediate data).
    pub fn input_generated(&self, size: u64, seed: u64) -> Result<&'static [u8], Error> {
        let fits = free_bytes() / 4;
        if size > fits {
            return Err(Error::InputTooLarge { size: size as usize, fits: fits as usize });
        }
        let seg = sys::segment_alloc(self.proc, "metis-text", MEMID_SELF, size.max(1)).map_err(e("segment_alloc text"))?;
        self.map_input(seg, size, MAP_READ | MAP_WRITE)?;
        // SAFETY: just mapped read-write, `size` bytes, used by no one else yet.
        let buf = unsafe { core::slice::from_raw_parts_mut(INPUT_BASE as *mut u8, size as usize) };
        mapreduce::gen::fill(seed, buf);
        // SAFETY: as in `map_input`.
        Ok(unsafe { core::slice::from_raw_parts(INPUT_BASE as *const u8, size as usize) })
    }

    /// Give back everything this environment made (call once, after the last run; the
    /// backend's own `Ours::finish` is the caller's).
    pub fn finish(&self) {
        let _ = sys::ar_unmap(root(), INPUT_BASE, SPAN512);
        if self.layout == Layout::Shared {
            let _ = sys::ar_unmap(root(), ARENA_BASE, SPAN512);
            let _ = sys::share_delobj(ObjName::new(self.proc, self.shared_ar));
        }
        let seg = self.input_seg.swap(0, Ordering::Relaxed);
        if seg != 0 {
            let _ = sys::share_delobj(ObjName::new(self.proc, seg));
        }
        let _ = sys::share_delobj(ObjName::new(self.proc, self.input_ar));
    }
}

/// Read one byte of every page of the program image in the calling context's root range,
/// before the phases. Each thread's root has page-table entries of its own for the image
/// (`libos::thread`: the same segment, mapped per root), so the first time a core runs code
/// (or reads a constant) the phases have not run there before, it takes a soft fault: 1 to 6
/// of them fell in the reduce phase (reduce's and the sort's code), which are not the
/// intermediate data's faults the layouts are about (Linux's threads share one page table,
/// in which the code is mapped already). Here they are taken before the phases, like the
/// stack's (`mapreduce`'s `prefault_stack`), and counted in no phase.
fn prefault_image() -> Result<(), Error> {
    let img = libos::process::image();
    let mut maps = [abi::ArMapping::default(); 96];
    let n = sys::ar_get(root(), &mut maps).map_err(e("ar_get root"))? as usize;
    for m in maps[..n.min(maps.len())].iter().filter(|m| m.target == img.object && m.target_type == abi::ObjType::Segment as u32 && m.flags & MAP_READ != 0) {
        for off in (0..m.len).step_by(4096) {
            // SAFETY: `[voff, voff + len)` of the root range maps the program image, readable
            // (`MAP_READ`): the range's offsets are the virtual addresses. A volatile read of
            // one byte per page changes nothing.
            unsafe { core::ptr::read_volatile((m.voff + off) as *const u8) };
        }
    }
    Ok(())
}

/// Free memory now, bytes.
pub fn free_bytes() -> u64 {
    sys::sys_info().map(|s| s.free_pages * 4096).unwrap_or(0)
}

impl Env for OursEnv<'_> {
    fn name(&self) -> &'static str {
        "ours"
    }
    fn cores(&self) -> usize {
        self.p.cores()
    }
    fn run(&self, n: usize, body: &(dyn Fn(usize) + Sync)) -> Result<(), Error> {
        self.p.run_threads(n, body).map_err(from_bench)
    }
    fn memory_budget(&self, n: usize) -> usize {
        // Three quarters of the free memory (page tables, kernel objects and the heap need
        // the rest), at most 1 GiB per worker (one `Span1G` range each).
        ((free_bytes() / 4 * 3) as usize).min(n * GIB as usize)
    }
    fn arena(&self, w: usize, bytes: usize) -> Result<*mut u8, Error> {
        if w >= MAX_WORKERS || bytes as u64 > GIB {
            return Err(Error::Param("arena beyond 1 GiB or worker beyond 64"));
        }
        // Worker 0 is the first context, which linked these in `new`.
        if w != 0 {
            self.link_common()?;
        }
        prefault_image()?;
        let bytes = bytes as u64;
        let seg = sys::segment_alloc(self.proc, "metis-arena", MEMID_SELF, bytes).map_err(e("segment_alloc arena"))?;
        self.segs[w].store(seg, Ordering::Relaxed);
        self.lens[w].store(bytes, Ordering::Relaxed);
        let segn = ObjName::new(self.proc, seg);
        let va = ARENA_BASE + w as u64 * GIB;
        let m = |voff| SegMapping { voff, seg: segn, soff: 0, len: bytes, flags: MAP_READ | MAP_WRITE };
        match self.layout {
            Layout::PerCore => {
                let ar = sys::ar_alloc(self.proc, "metis-core", MEMID_SELF, ArKind::Span1G).map_err(e("ar_alloc arena range"))?;
                self.ranges[w].store(ar, Ordering::Relaxed);
                let arn = ObjName::new(self.proc, ar);
                sys::ar_set_seg(arn, &m(0)).map_err(e("ar_set_seg arena"))?;
                sys::ar_set_ar(root(), va, arn).map_err(e("ar_set_ar arena"))?;
            }
            Layout::Shared => {
                sys::ar_set_seg(ObjName::new(self.proc, self.shared_ar), &m(va - ARENA_BASE)).map_err(e("ar_set_seg shared"))?;
            }
            Layout::Private => {
                sys::ar_set_seg(root(), &m(va)).map_err(e("ar_set_seg private"))?;
            }
        }
        Ok(va as *mut u8)
    }
    fn share_arenas(&self, w: usize, n: usize) -> Result<(), Error> {
        for v in (0..n).filter(|&v| v != w) {
            let va = ARENA_BASE + v as u64 * GIB;
            match self.layout {
                Layout::PerCore => {
                    let ar = ObjName::new(self.proc, self.ranges[v].load(Ordering::Relaxed));
                    sys::ar_set_ar(root(), va, ar).map_err(e("ar_set_ar other arena"))?;
                }
                Layout::Shared => {}
                Layout::Private => {
                    let seg = ObjName::new(self.proc, self.segs[v].load(Ordering::Relaxed));
                    let len = self.lens[v].load(Ordering::Relaxed);
                    sys::ar_set_seg(root(), &SegMapping { voff: va, seg, soff: 0, len, flags: MAP_READ }).map_err(e("ar_set_seg other arena"))?;
                }
            }
        }
        Ok(())
    }
    fn release(&self, n: usize) {
        // The worker threads have ended (their roots went with them); unmap from ours.
        if self.layout != Layout::Shared {
            let _ = sys::ar_unmap(root(), ARENA_BASE, n as u64 * GIB);
        }
        for w in 0..n {
            let va = ARENA_BASE + w as u64 * GIB;
            if self.layout == Layout::Shared && self.lens[w].load(Ordering::Relaxed) != 0 {
                let _ = sys::ar_unmap(ObjName::new(self.proc, self.shared_ar), va - ARENA_BASE, self.lens[w].load(Ordering::Relaxed));
            }
            for id in [self.segs[w].swap(0, Ordering::Relaxed), self.ranges[w].swap(0, Ordering::Relaxed)] {
                if id != 0 {
                    let _ = sys::share_delobj(ObjName::new(self.proc, id));
                }
            }
            self.lens[w].store(0, Ordering::Relaxed);
        }
    }
    fn ticks_per_sec(&self) -> u64 {
        self.p.ticks_per_sec()
    }
    fn marker(&self, v: u8) {
        self.p.marker(v)
    }
    fn calibration(&self, n: usize) -> Option<(u64, u64)> {
        crate::metis::calibrate(self.p, n)
    }
    fn text(&self, size: usize, seed: u64) -> Result<&[u8], Error> {
        // A previous text goes first (one input at a time).
        let old = self.input_seg.swap(0, Ordering::Relaxed);
        if old != 0 {
            let _ = sys::ar_unmap(ObjName::new(self.proc, self.input_ar), 0, self.input_len.load(Ordering::Relaxed).next_multiple_of(4096));
            let _ = sys::share_delobj(ObjName::new(self.proc, old));
        }
        self.input_generated(size as u64, seed)
    }
    fn tlb_grow(&self, _w: usize) {
        // A local CR3 reload: map one fresh page into this worker's own root range, read it
        // (a soft fault fills the entry) and unmap it (the kernel then flushes the cores that
        // run this root: only this one). Each worker's root is its own; `TLB_GROW_VA` is
        // below the loader's scratch window and above every range this environment links.
        let Ok(seg) = sys::segment_alloc(self.proc, "metis-tlb", MEMID_SELF, 4096) else { return };
        let segn = ObjName::new(self.proc, seg);
        if sys::ar_set_seg(root(), &SegMapping { voff: TLB_GROW_VA, seg: segn, soff: 0, len: 4096, flags: MAP_READ }).is_ok() {
            // SAFETY: `TLB_GROW_VA` was just mapped readable in this context's root; a volatile
            // read of one byte changes nothing.
            unsafe { core::ptr::read_volatile(TLB_GROW_VA as *const u8) };
            let _ = sys::ar_unmap(root(), TLB_GROW_VA, 4096);
        }
        let _ = sys::share_delobj(segn);
    }
    fn faults(&self, _n: usize) -> u64 {
        let cores = libos::start_info().cores;
        (0..cores).filter_map(|c| sys::core_stats(c).ok()).map(|s| s.soft_faults).sum()
    }
}

/// The `out=PATH` file of the attached disk (`libos::fs`): created (or truncated) before the
/// run, written in blocks of [`DiskOut::BLOCK`] bytes, synced and closed by `finish`. A
/// failed write is kept and reported by `finish`, with what was written so far left in the
/// file (the file system stays consistent: `e2fsck -fn` finds it clean).
pub struct DiskOut {
    fd: Option<libos::fs::Fd>,
    buf: alloc::vec::Vec<u8>,
    written: u64,
    error: Option<&'static str>,
}

impl DiskOut {
    /// Bytes handed to `fs::write` at once (fewer, larger writes: each one takes the file
    /// system's lock and walks the block map once).
    pub const BLOCK: usize = 256 << 10;

    /// Mount the disk's file system if need be and create `path` (`O_CREAT | O_TRUNC`).
    /// Errors are the file system's words (no disk, no such directory, a directory...).
    pub fn create(path: &str) -> Result<DiskOut, &'static str> {
        use libos::fs;
        if !fs::mounted() {
            fs::mount().map_err(|e| e.as_str())?;
        }
        let fd = fs::open(path, fs::O_WRONLY | fs::O_CREAT | fs::O_TRUNC).map_err(|e| e.as_str())?;
        Ok(DiskOut { fd: Some(fd), buf: alloc::vec::Vec::with_capacity(Self::BLOCK), written: 0, error: None })
    }

    fn write_buf(&mut self) {
        let Some(fd) = self.fd else { return };
        let mut at = 0;
        while at < self.buf.len() && self.error.is_none() {
            match libos::fs::write(fd, &self.buf[at..]) {
                Ok(0) => self.error = Some("no space left on device"),
                Ok(n) => {
                    at += n;
                    self.written += n as u64;
                }
                Err(e) => self.error = Some(e.as_str()),
            }
        }
        self.buf.clear();
    }
}

impl mapreduce::cli::OutFile for DiskOut {
    fn write(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && self.error.is_none() {
            let take = (Self::BLOCK - self.buf.len()).min(bytes.len());
            self.buf.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.buf.len() == Self::BLOCK {
                self.write_buf();
            }
        }
    }

    fn finish(&mut self) -> Result<u64, &'static str> {
        let Some(fd) = self.fd else { return self.error.map_or(Ok(self.written), Err) };
        if self.error.is_none() {
            self.write_buf();
        }
        // Synced even after a failed write, so the disk holds a consistent file system.
        let synced = libos::fs::fsync(fd).map_err(|e| e.as_str());
        let closed = libos::fs::close(fd).map_err(|e| e.as_str());
        self.fd = None;
        if self.error.is_none() {
            self.error = synced.err().or(closed.err());
        }
        self.error.map_or(Ok(self.written), Err)
    }
}

impl Drop for DiskOut {
    /// A file never finished (the run ended before the output) is closed here.
    fn drop(&mut self) {
        if let Some(fd) = self.fd.take() {
            let _ = libos::fs::close(fd);
        }
    }
}
