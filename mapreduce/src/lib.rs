//! Metis-style MapReduce (Corey, seeds/000 section 6.1 and 8.4, figure 10), written once for
//! both systems.
//!
//! The algorithm ([`run`]):
//!
//! 1. **map**: worker `w` of `n` scans its split of the input ([`words::split`]: contiguous,
//!    moved to word starts, so a word across a boundary is read whole by the split it starts
//!    in) and inserts every word into its own hash table for the word's reduce partition
//!    (`partitions` tables per worker, in the worker's own arena, values grouped per key:
//!    a count for `wc`, the ascending offsets for `wri`; see [`table`]).
//! 2. **reduce**: worker `w` takes partitions `p` with `p % n == w`; for each it gathers that
//!    partition's table of *every* worker (reading the other workers' arenas: on this system
//!    through their address ranges, the part the memory layout changes), sorts the entries by
//!    key and folds equal keys (counts summed; offset lists concatenated in worker order,
//!    which is ascending since the splits are in input order). The sorted result goes into the
//!    reducer's arena.
//! 3. **merge**: the sorted partitions are merged into one key-ordered list in parallel, as
//!    Metis does: in rounds of pairwise merges (partition lists `i` and `i + stride` into `i`,
//!    the pairs dealt round-robin to the workers, a barrier after each round) until one list
//!    is left. The lists are arrays of pointers to the reducers' result entries, in the
//!    merging worker's arena.
//!
//! Then the output is written through a [`Sink`] in the exact format of [`output`].
//!
//! The platform (threads, the memory each worker's intermediate data lives in, time, soft page
//! faults) comes through [`Env`]. Implementations live with bench's backends, whose threads
//! they use: `bench::metis_linux::LinuxEnv` (pthreads in one address space) and
//! `bench::metis_ours::OursEnv` (the library OS, with the memory layouts of Corey's
//! experiment); for the host tests, `host::HostEnv`.

#![no_std]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod cli;
pub mod gen;
#[cfg(test)]
mod host;
pub mod output;
pub mod table;
pub mod words;

use alloc::vec::Vec;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

pub use output::{Digest, Sink};
use table::{Arena, Entry, Full, Table};

/// Which application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum App {
    /// Word count: `word<TAB>count`.
    Wc,
    /// Reverse index: `word<TAB>off1,off2,...`.
    Wri,
}

impl App {
    pub fn parse(s: &str) -> Option<App> {
        match s {
            "wc" => Some(App::Wc),
            "wri" | "wrmem" => Some(App::Wri),
            _ => None,
        }
    }
}

/// Why a run failed. Never a panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// A platform call failed: `what` names it, `code` is the system's error number.
    Sys { what: &'static str, code: i64 },
    /// The platform cannot do this.
    Unsupported(&'static str),
    /// Intermediate data did not fit: worker `worker`'s arena of `arena` bytes (all workers
    /// together `arena * n`) was full in `phase`; about `fits` bytes of input of this kind
    /// would fit.
    NoMemory { phase: &'static str, worker: usize, arena: usize, fits: usize },
    /// The input (or generated text) of `size` bytes is larger than the `fits` bytes this
    /// machine can hold next to the intermediate data.
    InputTooLarge { size: usize, fits: usize },
    /// Bad parameters.
    Param(&'static str),
    /// The input file could not be read (the file system's words: no disk, no such file...).
    Input(&'static str),
    /// The output file could not be written (the file system's words: no space...).
    Output(&'static str),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Sys { what, code } => write!(f, "{what} failed (error {code})"),
            Error::Unsupported(what) => write!(f, "{what} is not provided by this system"),
            Error::NoMemory { phase, worker, arena, fits } => write!(
                f,
                "NoMemory: in {phase}, worker {worker}'s intermediate data outgrew its {arena} bytes; about {fits} bytes of input like this fit"
            ),
            Error::InputTooLarge { size, fits } => {
                write!(f, "NoMemory: the input of {size} bytes does not fit; at most {fits} bytes fit in this machine's memory")
            }
            Error::Param(w) => write!(f, "bad parameter: {w}"),
            Error::Input(w) => write!(f, "cannot read the input: {w}"),
            Error::Output(w) => write!(f, "cannot write the output: {w}"),
        }
    }
}

/// What the algorithm needs from a system. Every method may be called from any worker.
pub trait Env: Sync {
    /// "linux", "ours", "host".
    fn name(&self) -> &'static str;
    /// Cores workers may use (worker `w` runs on core `w % cores()`).
    fn cores(&self) -> usize;
    /// Run `body(w)` for `w` in `0..n` in parallel, threads of one address space; return when
    /// all returned.
    fn run(&self, n: usize, body: &(dyn Fn(usize) + Sync)) -> Result<(), Error>;
    /// Bytes of memory the intermediate data of `n` workers may take together (split evenly).
    fn memory_budget(&self, n: usize) -> usize;
    /// Called by worker `w` on its own core before map: `bytes` of demand-zero memory for its
    /// intermediate data, writable by it (the layout decides where it is mapped).
    fn arena(&self, w: usize, bytes: usize) -> Result<*mut u8, Error>;
    /// Called by worker `w` once every worker has finished map: make the arenas of all `n`
    /// workers readable by `w` at the addresses `arena` returned (a no-op in one address
    /// space; on this system's `private` layout, mapping the others' segments).
    fn share_arenas(&self, w: usize, n: usize) -> Result<(), Error>;
    /// After the run (called by the caller of [`run`], once): give every arena back.
    fn release(&self, n: usize);
    /// Time stamp counter and its rate.
    fn ticks(&self) -> u64 {
        rdtsc()
    }
    fn ticks_per_sec(&self) -> u64;
    /// Soft (minor) page faults taken so far by the workers' cores (ours: summed over cores
    /// `0..n` from `core_stats`; Linux: the process's `ru_minflt`). Read while the other
    /// workers wait at a barrier.
    fn faults(&self, n: usize) -> u64;
    /// Execute the instruction-count plugin's region marker `v` (docs/plugins.md), if this
    /// system may; a no-op by default.
    fn marker(&self, _v: u8) {}
    /// What a worker does while it waits at a barrier: spin (one worker per core), or yield
    /// where workers may outnumber cores (the host tests).
    fn relax(&self) {
        core::hint::spin_loop()
    }
    /// [`Tuning::tlb_grow`]: called by every mapper every [`TLB_GROW_WORDS`] words. It should
    /// make the calling core's TLB be flushed whole (a local CR3 reload on ours, a ranged
    /// unmap above Linux's single-page flush ceiling there). This is for the emulator only:
    /// QEMU's TCG grows a vCPU's software TLB only when the guest flushes it whole (and the
    /// table was over 70 % used), so a guest that never flushes keeps a small software TLB
    /// and pays a software page walk per miss. On hardware it only costs.
    fn tlb_grow(&self, _w: usize) {}
    /// bench's share-nothing calibration loop (`calib`) on `n` workers in this boot, fastest
    /// of three: (steps, ticks). `None` where there is no bench platform (host tests).
    fn calibration(&self, _n: usize) -> Option<(u64, u64)> {
        None
    }
    /// `size` bytes of `wrmem`'s generated text (seed `seed`, [`gen::fill`]) in memory every
    /// worker can read, living as long as the environment (or until the next call).
    fn text(&self, size: usize, seed: u64) -> Result<&[u8], Error>;
}

/// The time stamp counter.
pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no memory effects and exists on every x86-64 CPU.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Region marker values of the insncount plugin (docs/plugins.md; the same numbers as
/// `bench::harness::MARK_START_ALL`/`MARK_STOP_ALL`): start and stop counting on every vCPU.
pub const MARK_START_ALL: u8 = 3;
pub const MARK_STOP_ALL: u8 = 4;

/// Which phase the instruction-count region markers enclose (one phase per boot: the plugin
/// sums every marked region of a boot), or `All` three (the benchmark rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marked {
    None,
    Map,
    Reduce,
    Merge,
    All,
}

impl Marked {
    pub fn parse(s: &str) -> Option<Marked> {
        match s {
            "none" => Some(Marked::None),
            "map" => Some(Marked::Map),
            "reduce" => Some(Marked::Reduce),
            "merge" => Some(Marked::Merge),
            _ => None,
        }
    }
}

/// One phase's wall time (first worker in to last out, TSC ticks) and soft faults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Phase {
    pub ticks: u64,
    pub faults: u64,
}

/// What a run measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct Report {
    pub workers: usize,
    pub partitions: usize,
    pub input_bytes: usize,
    /// Map, up to the moment every reducer's output space is in place: it includes `prep`.
    pub map: Phase,
    /// The end of the map phase after the last worker finished mapping: every worker links
    /// the others' arenas (`Env::share_arenas`) and pre-populates the arena pages its reduce
    /// will write (`reduce_prep_pages`), so that the reduce phase takes no soft fault. Its
    /// time and faults are part of `map`'s.
    pub prep: Phase,
    pub reduce: Phase,
    pub merge: Phase,
    /// Writing the output through the sink (not one of Metis's phases).
    pub output: Phase,
    /// Distinct words, and words in all.
    pub keys: usize,
    pub words: u64,
    /// Arena pages the reducers newly allocated (summed over workers): an upper bound on the
    /// reduce phase's demand-zero faults on its own output. Reduce faults beyond this number
    /// are faults on reading the other workers' data (the layouts differ there).
    pub reduce_arena_pages: u64,
    /// Arena pages the workers wrote a zero into before reduce (`prep`), summed: the reduce
    /// phase's own output space, sized from the tables' key and value counts.
    pub reduce_prep_pages: u64,
    /// Bytes the reducers allocated beyond the space `prep` prepared, summed: 0 unless the
    /// bound ([`table::reduce_bound`]) is wrong; the host tests assert it is 0.
    pub reduce_beyond_prep: u64,
    /// The same for the merge phase (the merge rounds' pointer lists).
    pub merge_arena_pages: u64,
    /// Largest arena use of one worker (bytes), and each arena's size.
    pub arena_used_max: usize,
    pub arena_bytes: usize,
    pub tsc_hz: u64,
}

impl Report {
    pub fn ms(&self, p: Phase) -> u64 {
        (p.ticks as u128 * 1000 / self.tsc_hz.max(1) as u128) as u64
    }
    pub fn us(&self, p: Phase) -> u64 {
        (p.ticks as u128 * 1_000_000 / self.tsc_hz.max(1) as u128) as u64
    }
}

/// The one result line both systems print and the host parses.
impl core::fmt::Display for Report {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "metis-phases workers={} partitions={} input_bytes={} keys={} words={} map_us={} prep_us={} reduce_us={} merge_us={} output_us={} map_faults={} prep_faults={} reduce_faults={} reduce_arena_pages={} reduce_prep_pages={} reduce_beyond_prep={} merge_faults={} merge_arena_pages={} arena_bytes={} arena_used_max={} tsc_hz={}",
            self.workers,
            self.partitions,
            self.input_bytes,
            self.keys,
            self.words,
            self.us(self.map),
            self.us(self.prep),
            self.us(self.reduce),
            self.us(self.merge),
            self.us(self.output),
            self.map.faults,
            self.prep.faults,
            self.reduce.faults,
            self.reduce_arena_pages,
            self.reduce_prep_pages,
            self.reduce_beyond_prep,
            self.merge.faults,
            self.merge_arena_pages,
            self.arena_bytes,
            self.arena_used_max,
            self.tsc_hz
        )
    }
}

/// Most workers (one per core).
pub const MAX_WORKERS: usize = 64;
/// Most reduce partitions.
pub const MAX_PARTITIONS: usize = 4096;

/// A worker's state other workers read (one 128-byte line pair each).
#[repr(align(128))]
struct Slot {
    tables: AtomicPtr<Table>,
    used: AtomicUsize,
    /// Arena bytes in use when map ended, and at the end (after merge).
    used_map: AtomicUsize,
    used_end: AtomicUsize,
    /// Where the space `prep` made present for reduce ends (arena offset), and its pages.
    prep_end: AtomicUsize,
    prep_pages: AtomicU64,
    words: AtomicU64,
    failed: AtomicBool,
    error: UnsafeCell<Option<Error>>,
}

/// A reduce partition's sorted result, and its list in the merge rounds.
#[repr(align(128))]
struct Part {
    outs: AtomicPtr<Entry>,
    len: AtomicUsize,
    list: AtomicPtr<*const Entry>,
    list_len: AtomicUsize,
}

struct Barrier {
    n: usize,
    count: AtomicUsize,
    gen: AtomicUsize,
}

impl Barrier {
    fn wait(&self, relax: &dyn Fn()) {
        let g = self.gen.load(Ordering::Acquire);
        if self.count.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            self.count.store(0, Ordering::Relaxed);
            self.gen.store(g + 1, Ordering::Release);
        } else {
            while self.gen.load(Ordering::Acquire) == g {
                relax();
            }
        }
    }
}

struct Shared {
    slots: Vec<Slot>,
    parts: Vec<Part>,
    failed: AtomicBool,
    barrier: Barrier,
    /// TSC (0..5) and fault count (5..10) at each phase boundary (map start, map's prep
    /// start, reduce start, merge start, merge end), written by worker 0.
    marks: [AtomicU64; 10],
}

// SAFETY: `Slot::error` is written only by its worker before it sets `failed` (Release) and
// read only after the run, when `failed` reads true (Acquire).
unsafe impl Sync for Shared {}

impl Shared {
    fn fail(&self, w: usize, e: Error) {
        let s = &self.slots[w];
        if !s.failed.load(Ordering::Relaxed) {
            // SAFETY: only worker `w` writes its slot's error, before publishing `failed`.
            unsafe { *s.error.get() = Some(e) };
            s.failed.store(true, Ordering::Release);
        }
        self.failed.store(true, Ordering::Release);
    }
}

/// Touch 64 KiB of the calling worker's stack before the phases start, so the stack growing in
/// map or reduce (the sort recurses) is not counted as those phases' faults. (Thread stacks
/// are 256 KiB on ours; the phases use far less.)
#[inline(never)]
fn prefault_stack() {
    let mut buf = [0u8; 64 << 10];
    for i in (0..buf.len()).step_by(4096) {
        buf[i] = 1;
    }
    core::hint::black_box(&mut buf);
}

/// Sort key of an entry reference: the key bytes, then the worker (so offset lists join in
/// worker order, which is input order).
#[derive(Clone, Copy)]
struct Ref {
    e: *const Entry,
    w: usize,
}

/// Words between two [`Env::tlb_grow`] calls of a mapper (with [`Tuning::tlb_grow`]).
pub const TLB_GROW_WORDS: u64 = 1 << 18;

/// How a run is set up beyond its parameters ([`run_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// The end of map prepares the reducers' output pages (default); `false` is Corey's
    /// reduce, which faults in fresh pages.
    pub prep: bool,
    /// Mappers call [`Env::tlb_grow`] every [`TLB_GROW_WORDS`] words (default off): an
    /// emulator-only knob that lets QEMU grow its software TLB
    /// (docs/metis.md, "Where the time goes").
    pub tlb_grow: bool,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning { prep: true, tlb_grow: false }
    }
}

fn map_phase(sh: &Shared, app: App, input: &[u8], w: usize, n: usize, arena: &mut Arena, tlb_grow: Option<&dyn Fn()>) -> Result<(), Error> {
    let parts = sh.parts.len();
    let full_at = |done: usize| move |f: Full| Error::NoMemory { phase: "map", worker: w, arena: f.cap, fits: done.saturating_mul(n) };
    let tables = arena.alloc::<Table>(parts).map_err(full_at(0))?;
    sh.slots[w].tables.store(tables, Ordering::Release);
    let (from, to) = words::split(input, w, n);
    let mut count = 0u64;
    words::for_each_word(input, from, to, |s, e, h| {
        // The partition: the hash's high half scaled onto 0..parts (the table slot uses the
        // low bits, so the two stay independent).
        let p = (((h >> 32) * parts as u64) >> 32) as usize;
        // SAFETY: `p < parts`; the tables are this worker's, in its own arena.
        let t = unsafe { &mut *tables.add(p) };
        count += 1;
        if let Some(f) = tlb_grow {
            if count.is_multiple_of(TLB_GROW_WORDS) {
                f();
            }
        }
        match app {
            App::Wc => t.add_count(arena, input, s, e, h),
            App::Wri => t.add_offset(arena, input, s, e, h),
        }
        .map_err(full_at(s - from))
    })?;
    sh.slots[w].words.store(count, Ordering::Relaxed);
    Ok(())
}

/// The end of map (`Report::prep`): worker `w` sums, over the partitions it will reduce, the
/// keys and values of every worker's table, and writes a zero into each arena page the
/// reduction of those partitions can allocate ([`table::reduce_bound`]), so the reduce phase
/// finds its output pages present. (The tables are read here for the first time by other
/// workers: with the `private` layout those reads fault here instead of in reduce.)
fn prep_reduce(sh: &Shared, app: App, w: usize, n: usize, arena: &mut Arena) {
    let mut bytes = 0usize;
    for p in (w..sh.parts.len()).step_by(n) {
        // SAFETY: as in `reduce_phase`: published before map's last barrier, no longer
        // written, readable here after `share_arenas`.
        let table = |v: usize| unsafe { &*sh.slots[v].tables.load(Ordering::Acquire).add(p) };
        let (keys, vals) = (0..n).fold((0usize, 0u64), |(k, x), v| (k + table(v).len, x + table(v).vals));
        if keys > 0 {
            bytes = bytes.saturating_add(table::reduce_bound(app, keys, vals, core::mem::size_of::<Ref>()));
        }
    }
    let pages = arena.prefault(bytes);
    sh.slots[w].prep_end.store(arena.used().saturating_add(bytes), Ordering::Relaxed);
    sh.slots[w].prep_pages.store(pages as u64, Ordering::Relaxed);
}

fn reduce_phase(sh: &Shared, app: App, input_len: usize, w: usize, n: usize, arena: &mut Arena) -> Result<(), Error> {
    let full = |arena_used: usize| move |f: Full| Error::NoMemory {
        phase: "reduce",
        worker: w,
        arena: f.cap,
        fits: (input_len as u128 * f.cap as u128 / (arena_used as u128 + f.want as u128).max(1)) as usize,
    };
    for p in (w..sh.parts.len()).step_by(n) {
        // SAFETY (whole loop): every worker published its tables before the barrier that
        // ended map, and no one writes them any more; `share_arenas` made them readable here.
        // (No heap allocation here: a first allocation on a core grows its heap, whose page
        // faults would be counted as the reduce phase's.)
        let table = |v: usize| unsafe { &*sh.slots[v].tables.load(Ordering::Acquire).add(p) };
        let total: usize = (0..n).map(|v| table(v).len).sum();
        if total == 0 {
            continue;
        }
        let refs = arena.alloc::<Ref>(total).map_err(full(arena.used()))?;
        let mut k = 0;
        for v in 0..n {
            // SAFETY: as for the whole loop: published, no longer written, readable here.
            for e in unsafe { table(v).entries() } {
                // SAFETY: `k < total` (`total` counts exactly these entries).
                unsafe { refs.add(k).write(Ref { e, w: v }) };
                k += 1;
            }
        }
        // SAFETY: `refs` holds `total` initialised `Ref`s in this worker's arena.
        let refs = unsafe { core::slice::from_raw_parts_mut(refs, total) };
        // SAFETY: the entries' keys are in live arenas (see above).
        refs.sort_unstable_by(|a, b| unsafe { table::key_cmp((*a.e).key(), (*b.e).key()).then(a.w.cmp(&b.w)) });
        let outs = arena.alloc::<Entry>(total).map_err(full(arena.used()))?;
        let mut nout = 0;
        let mut i = 0;
        while i < total {
            // SAFETY: every `Ref` points at a filled entry of a live arena (as for the loop).
            let first = unsafe { *refs[i].e };
            // SAFETY: as above.
            let key = unsafe { first.key() };
            let mut j = i + 1;
            // SAFETY: as above.
            while j < total && table::key_cmp(unsafe { (*refs[j].e).key() }, key).is_eq() {
                j += 1;
            }
            let group = &refs[i..j];
            // SAFETY: as above.
            let count: u64 = group.iter().map(|r| unsafe { (*r.e).count }).sum();
            let mut out = Entry { hash: first.hash, key: first.key, klen: first.klen, count, vals: first.vals, cap: first.cap };
            if app == App::Wri && group.len() > 1 {
                let vals = arena.alloc::<table::Off>(count as usize).map_err(full(arena.used()))?;
                let mut at = 0;
                for r in group {
                    // SAFETY: as above; a `wri` entry's offsets are initialised up to `count`.
                    let v = unsafe { (*r.e).vals() };
                    // SAFETY: `vals` has room for `count` offsets, the sum of the groups'.
                    unsafe { core::ptr::copy_nonoverlapping(v.as_ptr(), vals.add(at), v.len()) };
                    at += v.len();
                }
                out.vals = vals;
                out.cap = count;
            }
            // SAFETY: `nout < total`, in `outs`.
            unsafe { outs.add(nout).write(out) };
            nout += 1;
            i = j;
        }
        sh.parts[p].outs.store(outs, Ordering::Relaxed);
        sh.parts[p].len.store(nout, Ordering::Release);
    }
    Ok(())
}

/// Merge, first step: worker `w` makes the list of each partition it reduced (pointers to
/// its result entries, in order).
fn merge_full(input_len: usize, w: usize, used: usize) -> impl Fn(Full) -> Error {
    move |f: Full| Error::NoMemory {
        phase: "merge",
        worker: w,
        arena: f.cap,
        fits: (input_len as u128 * f.cap as u128 / (used as u128 + f.want as u128).max(1)) as usize,
    }
}

fn merge_init(sh: &Shared, input_len: usize, w: usize, n: usize, arena: &mut Arena) -> Result<(), Error> {
    for p in (w..sh.parts.len()).step_by(n) {
        let part = &sh.parts[p];
        let len = part.len.load(Ordering::Acquire);
        let list = arena.alloc::<*const Entry>(len).map_err(merge_full(input_len, w, arena.used()))?;
        let outs = part.outs.load(Ordering::Relaxed);
        for i in 0..len {
            // SAFETY: `i < len`: `list` has room for `len` pointers and `outs` holds `len`
            // entries this worker wrote in reduce.
            unsafe { list.add(i).write(outs.add(i)) };
        }
        part.list.store(list, Ordering::Relaxed);
        part.list_len.store(len, Ordering::Release);
    }
    Ok(())
}

/// One merge round: worker `w` merges the pairs of lists (`i`, `i + stride`), `i` a multiple
/// of `2 * stride`, dealt to it round-robin, into list `i`.
fn merge_round(sh: &Shared, input_len: usize, w: usize, n: usize, stride: usize, arena: &mut Arena) -> Result<(), Error> {
    let parts = sh.parts.len();
    for (k, i) in (0..parts).step_by(2 * stride).enumerate() {
        let j = i + stride;
        if k % n != w || j >= parts {
            continue;
        }
        let (a, b) = (&sh.parts[i], &sh.parts[j]);
        let (la, lb) = (a.list_len.load(Ordering::Acquire), b.list_len.load(Ordering::Acquire));
        if lb == 0 {
            continue;
        }
        // SAFETY: the lists were published before the last barrier and are written only by
        // their round's merger, which is this worker; every pointer is to a live entry.
        let (xa, xb) = unsafe { (core::slice::from_raw_parts(a.list.load(Ordering::Relaxed), la), core::slice::from_raw_parts(b.list.load(Ordering::Relaxed), lb)) };
        let out = arena.alloc::<*const Entry>(la + lb).map_err(merge_full(input_len, w, arena.used()))?;
        let (mut x, mut y, mut o) = (0, 0, 0);
        while x < la || y < lb {
            // SAFETY: as above (keys of live entries); keys never repeat across partitions.
            let take_a = y == lb || (x < la && unsafe { table::key_cmp((*xa[x]).key(), (*xb[y]).key()) }.is_lt());
            let e = if take_a {
                x += 1;
                xa[x - 1]
            } else {
                y += 1;
                xb[y - 1]
            };
            // SAFETY: `o < la + lb`, inside `out`.
            unsafe { out.add(o).write(e) };
            o += 1;
        }
        a.list.store(out, Ordering::Relaxed);
        a.list_len.store(la + lb, Ordering::Release);
    }
    Ok(())
}

/// Run `app` over `input` on `workers` workers with `partitions` reduce partitions and write
/// the sorted result to `sink`. The arenas are given back (`Env::release`) before returning,
/// on success and on failure.
pub fn run<E: Env + ?Sized>(env: &E, app: App, input: &[u8], workers: usize, partitions: usize, sink: &mut dyn Sink) -> Result<Report, Error> {
    run_marked(env, app, input, workers, partitions, Marked::None, sink)
}

/// [`run`], with the region markers (start and stop on every vCPU, executed by worker 0 at the
/// phase's bounding barriers) around the phase `marked`, for the insncount plugin.
pub fn run_marked<E: Env + ?Sized>(env: &E, app: App, input: &[u8], workers: usize, partitions: usize, marked: Marked, sink: &mut dyn Sink) -> Result<Report, Error> {
    run_with(env, app, input, workers, partitions, marked, Tuning::default(), sink)
}

/// [`run_marked`] with a [`Tuning`]: whether the end of map prepares the reducers' output
/// pages (`prep`, the default everywhere else), and the emulator knob `tlb_grow`. With
/// `prep == false` the reducers allocate their
/// output in fresh demand-zero arena pages during reduce, as Metis did in Corey's
/// measurement (seeds/000 section 8.4: "each core copies all the indices for each word it is
/// responsible for ... to a freshly allocated buffer"), so each system's reduce takes a soft
/// fault per new page: on Linux all of them in the one address space the threads share, on
/// ours in each worker's own range. `reduce_prep_pages` is then 0 and `reduce_beyond_prep`
/// is every byte reduce allocated.
#[allow(clippy::too_many_arguments)]
pub fn run_with<E: Env + ?Sized>(env: &E, app: App, input: &[u8], workers: usize, partitions: usize, marked: Marked, tuning: Tuning, sink: &mut dyn Sink) -> Result<Report, Error> {
    let prep = tuning.prep;
    // `All` starts with map and stops after merge.
    let start = |m: Marked| {
        if marked == m || (marked == Marked::All && m == Marked::Map) {
            env.marker(MARK_START_ALL);
        }
    };
    let stop = |m: Marked| {
        if marked == m || (marked == Marked::All && m == Marked::Merge) {
            env.marker(MARK_STOP_ALL);
        }
    };
    if workers == 0 || workers > MAX_WORKERS || workers > env.cores() {
        return Err(Error::Param("workers must be 1..=cores (at most 64)"));
    }
    if partitions == 0 || partitions > MAX_PARTITIONS {
        return Err(Error::Param("partitions must be 1..=4096"));
    }
    if app == App::Wri && input.len() > table::MAX_WRI_INPUT {
        return Err(Error::Param("wri indexes inputs of at most 4 GiB (its offsets are 32-bit)"));
    }
    let n = workers;
    let arena_bytes = (env.memory_budget(n) / n) & !4095;
    if arena_bytes < 1 << 20 {
        return Err(Error::InputTooLarge { size: input.len(), fits: 0 });
    }
    let sh = Shared {
        slots: (0..n)
            .map(|_| Slot {
                tables: AtomicPtr::new(core::ptr::null_mut()),
                used: AtomicUsize::new(0),
                used_map: AtomicUsize::new(0),
                used_end: AtomicUsize::new(0),
                prep_end: AtomicUsize::new(0),
                prep_pages: AtomicU64::new(0),
                words: AtomicU64::new(0),
                failed: AtomicBool::new(false),
                error: UnsafeCell::new(None),
            })
            .collect(),
        parts: (0..partitions).map(|_| Part { outs: AtomicPtr::new(core::ptr::null_mut()), len: AtomicUsize::new(0), list: AtomicPtr::new(core::ptr::null_mut()), list_len: AtomicUsize::new(0) }).collect(),
        failed: AtomicBool::new(false),
        barrier: Barrier { n, count: AtomicUsize::new(0), gen: AtomicUsize::new(0) },
        marks: Default::default(),
    };
    let mark = |i: usize| {
        sh.marks[i].store(env.ticks(), Ordering::Relaxed);
        sh.marks[i + 5].store(env.faults(n), Ordering::Relaxed);
    };
    let body = |w: usize| {
        prefault_stack();
        let mut arena = match env.arena(w, arena_bytes) {
            // SAFETY: `arena` returned `arena_bytes` of fresh demand-zero memory for worker
            // `w` alone to write (the Env contract).
            Ok(p) => Some(unsafe { Arena::new(p, arena_bytes) }),
            Err(e) => {
                sh.fail(w, e);
                None
            }
        };
        sh.barrier.wait(&|| env.relax());
        if w == 0 {
            mark(0);
            start(Marked::Map);
        }
        // Every phase starts only after worker 0 has read the clocks and fault counters at its
        // boundary: else a worker let through the last barrier early takes the next phase's
        // first faults before the mark and they are counted as the previous phase's.
        sh.barrier.wait(&|| env.relax());
        if let Some(a) = arena.as_mut() {
            if !sh.failed.load(Ordering::Acquire) {
                let grow = || env.tlb_grow(w);
                if let Err(e) = map_phase(&sh, app, input, w, n, a, tuning.tlb_grow.then_some(&grow as &dyn Fn())) {
                    sh.fail(w, e);
                }
            }
        }
        if let Some(a) = arena.as_ref() {
            sh.slots[w].used_map.store(a.used(), Ordering::Relaxed);
        }
        sh.barrier.wait(&|| env.relax());
        if w == 0 {
            mark(1);
        }
        sh.barrier.wait(&|| env.relax());
        // Still the map phase: the arenas become readable by every worker and each reducer's
        // output space present (`prep_reduce`).
        if !sh.failed.load(Ordering::Acquire) {
            if let Err(e) = env.share_arenas(w, n) {
                sh.fail(w, e);
            }
        }
        if let Some(a) = arena.as_mut() {
            if prep && !sh.failed.load(Ordering::Acquire) {
                prep_reduce(&sh, app, w, n, a);
            } else {
                // Nothing prepared: reduce's allocations all count as beyond the prepared end.
                sh.slots[w].prep_end.store(a.used(), Ordering::Relaxed);
            }
        }
        sh.barrier.wait(&|| env.relax());
        if w == 0 {
            stop(Marked::Map);
            mark(2);
            start(Marked::Reduce);
        }
        sh.barrier.wait(&|| env.relax());
        if let Some(a) = arena.as_mut() {
            if !sh.failed.load(Ordering::Acquire) {
                if let Err(e) = reduce_phase(&sh, app, input.len(), w, n, a) {
                    sh.fail(w, e);
                }
            }
            sh.slots[w].used.store(a.used(), Ordering::Relaxed);
        }
        sh.barrier.wait(&|| env.relax());
        if w == 0 {
            stop(Marked::Reduce);
            mark(3);
            start(Marked::Merge);
        }
        sh.barrier.wait(&|| env.relax());
        // Merge: every worker runs the same rounds (and barriers), failed or not.
        let merge_step = |a: &mut Option<Arena>, f: &dyn Fn(&mut Arena) -> Result<(), Error>| {
            if let Some(a) = a.as_mut() {
                if !sh.failed.load(Ordering::Acquire) {
                    if let Err(e) = f(a) {
                        sh.fail(w, e);
                    }
                }
            }
            sh.barrier.wait(&|| env.relax());
        };
        merge_step(&mut arena, &|a| merge_init(&sh, input.len(), w, n, a));
        let mut stride = 1;
        while stride < partitions {
            merge_step(&mut arena, &|a| merge_round(&sh, input.len(), w, n, stride, a));
            stride *= 2;
        }
        if let Some(a) = arena.as_ref() {
            sh.slots[w].used_end.store(a.used(), Ordering::Relaxed);
        }
        if w == 0 {
            stop(Marked::Merge);
            mark(4);
        }
    };
    let ran = env.run(n, &body);
    let result = ran.and_then(|()| {
        if let Some(s) = sh.slots.iter().find(|s| s.failed.load(Ordering::Acquire)) {
            // SAFETY: `failed` is set, so its worker finished writing `error`.
            return Err(unsafe { *s.error.get() }.unwrap_or(Error::Param("a worker failed")));
        }
        let m = |i: usize| (sh.marks[i].load(Ordering::Relaxed), sh.marks[i + 5].load(Ordering::Relaxed));
        let ((t0, f0), (tp, fp), (t2, f2), (t3, f3), (t4, f4)) = (m(0), m(1), m(2), m(3), m(4));
        let pages = |a: usize, b: usize| (b.div_ceil(4096) - a.div_ceil(4096)) as u64;
        let load = |x: &AtomicUsize| x.load(Ordering::Relaxed);
        let mut r = Report {
            workers: n,
            partitions,
            input_bytes: input.len(),
            map: Phase { ticks: t2 - t0, faults: f2 - f0 },
            prep: Phase { ticks: t2 - tp, faults: f2 - fp },
            reduce: Phase { ticks: t3 - t2, faults: f3 - f2 },
            merge: Phase { ticks: t4 - t3, faults: f4 - f3 },
            words: sh.slots.iter().map(|s| s.words.load(Ordering::Relaxed)).sum(),
            reduce_arena_pages: sh.slots.iter().map(|s| pages(load(&s.used_map), load(&s.used))).sum(),
            merge_arena_pages: sh.slots.iter().map(|s| pages(load(&s.used), load(&s.used_end))).sum(),
            reduce_prep_pages: sh.slots.iter().map(|s| s.prep_pages.load(Ordering::Relaxed)).sum(),
            reduce_beyond_prep: sh.slots.iter().map(|s| load(&s.used).saturating_sub(load(&s.prep_end)) as u64).sum(),
            arena_used_max: sh.slots.iter().map(|s| load(&s.used_end)).max().unwrap_or(0),
            arena_bytes,
            tsc_hz: env.ticks_per_sec(),
            ..Report::default()
        };
        // The merged list is partition 0's.
        let len = sh.parts[0].list_len.load(Ordering::Acquire);
        let merged: &[*const Entry] = if len == 0 {
            &[]
        } else {
            // SAFETY: published by the last merge round before the final barrier; the arenas
            // stay mapped until `release` below.
            unsafe { core::slice::from_raw_parts(sh.parts[0].list.load(Ordering::Relaxed), len) }
        };
        let t5 = env.ticks();
        let f5 = env.faults(n);
        r.keys = merged.len();
        for &e in merged {
            // SAFETY: every pointer is to a live result entry (as above).
            unsafe { output::write_entry(sink, app, &*e) };
        }
        r.output = Phase { ticks: env.ticks() - t5, faults: env.faults(n) - f5 };
        Ok(r)
    });
    env.release(n);
    result
}

#[cfg(test)]
mod tests;
