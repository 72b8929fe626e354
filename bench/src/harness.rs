//! Starting workers together, timing them, and marking the measured region.
//!
//! Every worker does its own setup, then calls [`Gate::start`]: a barrier (all workers of the
//! run have arrived), for relay benchmarks a wait for its turn, the region-start marker and a
//! TSC read. [`Gate::stop`] reads the TSC and executes the stop marker. So setup, teardown,
//! barriers and result collection are outside both the timing and the instruction count.
//!
//! The shared state (the barrier, the relay turn, one slot per worker) lives in memory mapped
//! [`MapKind::Shared`], so the same code works for threads and for processes.

use core::cell::{Cell, UnsafeCell};
use core::sync::atomic::{AtomicU64, Ordering};

use crate::catalog::{Placement, Shape, MAX_CORES};
use crate::{Error, MapKind, Platform};

pub const PAGE: usize = 4096;

/// Marker values (docs/plugins.md): start/stop measuring on the executing vCPU.
pub const MARK_START_CPU: u8 = 1;
pub const MARK_STOP_CPU: u8 = 2;
/// Start/stop measuring on every vCPU.
pub const MARK_START_ALL: u8 = 3;
pub const MARK_STOP_ALL: u8 = 4;

/// Which instructions a run's region markers count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marks {
    /// No markers (the in-boot calibration, whose instructions must not count as the
    /// benchmark's).
    Off,
    /// Each worker marks its own vCPU: setup and teardown on other vCPUs stay outside.
    PerWorker,
    /// The (single) worker marks every vCPU: what a kernel core does for it counts too.
    AllVcpus,
}

impl Marks {
    fn start(self) -> Option<u8> {
        match self {
            Marks::Off => None,
            Marks::PerWorker => Some(MARK_START_CPU),
            Marks::AllVcpus => Some(MARK_START_ALL),
        }
    }
    fn stop(self) -> Option<u8> {
        match self {
            Marks::Off => None,
            Marks::PerWorker => Some(MARK_STOP_CPU),
            Marks::AllVcpus => Some(MARK_STOP_ALL),
        }
    }
}

pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no memory effects and exists on every x86-64 CPU.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Execute the region marker `v` as the exact byte sequence the QEMU plugins recognise:
/// `66 ba 01 05` (mov $0x501,%dx), `b0 VV` (mov $VV,%al), `ee` (out %al,(%dx)). The plugins
/// read the value from the code bytes, so each value needs its own literal instruction; the
/// `.p2align 3` keeps the 7-byte sequence inside one page, as the protocol requires.
///
/// # Safety
/// The caller must be allowed to write I/O port 0x501 (ring 0, or Linux after `ioperm`).
pub unsafe fn marker_out(v: u8) {
    macro_rules! mark {
        ($v:literal) => {
            core::arch::asm!(
                ".p2align 3",
                "mov dx, 0x501",
                concat!("mov al, ", $v),
                "out dx, al",
                out("dx") _, out("al") _,
                options(nomem, nostack, preserves_flags)
            )
        };
    }
    match v {
        1 => mark!(1),
        2 => mark!(2),
        3 => mark!(3),
        4 => mark!(4),
        // The epoch (docs/plugins.md): the commutativity checker, bench/src/commute_posix.rs.
        5 => mark!(5),
        _ => {}
    }
}

/// One worker's results, alone on its 128-byte line pair so workers never share a line.
#[repr(C, align(128))]
struct Slot {
    start: AtomicU64,
    end: AtomicU64,
    ops: AtomicU64,
    /// 1 when `error` holds this worker's failure.
    failed: AtomicU64,
    error: UnsafeCell<Option<Error>>,
}

#[repr(C, align(128))]
struct Line(AtomicU64);

#[repr(C)]
struct Board {
    arrived: Line,
    turn: Line,
    slots: [Slot; MAX_CORES],
}

// SAFETY: `Slot::error` is written only by its own worker before `failed` is set (Release)
// and read by the coordinator only after all workers finished and `failed` reads 1 (Acquire).
unsafe impl Sync for Board {}

/// A worker's handle on the measured region.
pub struct Gate<'a, P: Platform + ?Sized> {
    p: &'a P,
    board: &'a Board,
    w: usize,
    n: usize,
    relay: bool,
    marks: Marks,
    started: Cell<bool>,
    stopped: Cell<bool>,
}

impl<P: Platform + ?Sized> Gate<'_, P> {
    fn arrive(&self) {
        self.board.arrived.0.fetch_add(1, Ordering::AcqRel);
        while (self.board.arrived.0.load(Ordering::Acquire) as usize) < self.n {
            core::hint::spin_loop();
        }
        if self.relay {
            while self.board.turn.0.load(Ordering::Acquire) as usize != self.w {
                core::hint::spin_loop();
            }
        }
    }

    /// Wait for every worker (and, in a relay, for this worker's turn), then start the clock.
    pub fn start(&self) {
        if self.started.replace(true) {
            return;
        }
        self.arrive();
        if let Some(m) = self.marks.start() {
            self.p.marker(m);
        }
        self.board.slots[self.w].start.store(self.p.ticks(), Ordering::Relaxed);
    }

    /// Stop the clock (and, in a relay, hand the turn on).
    pub fn stop(&self) {
        if !self.started.get() || self.stopped.replace(true) {
            return;
        }
        let t = self.p.ticks();
        if let Some(m) = self.marks.stop() {
            self.p.marker(m);
        }
        self.board.slots[self.w].end.store(t, Ordering::Relaxed);
        if self.relay {
            self.board.turn.0.store(self.w as u64 + 1, Ordering::Release);
        }
    }
}

/// What one run measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub workers: usize,
    /// Operations done by all workers together.
    pub ops: u64,
    /// First start to last stop over all workers: the run's elapsed time.
    pub ticks: u64,
    /// Sum of each worker's own start-to-stop time.
    pub busy_ticks: u64,
    /// Benchmarks made of phases (the `metis_*` rows): each phase's time and soft faults.
    pub phases: Option<PhaseTimes>,
}

/// Time (TSC ticks, first worker in to last out) and soft page faults of each phase of a
/// phased benchmark, in order (`metis_*`: map, reduce, merge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhaseTimes {
    pub names: [&'static str; 3],
    pub ticks: [u64; 3],
    pub faults: [u64; 3],
}

/// Run `work(w, gate)` on `n` workers placed as `placement`; `work` returns its operation
/// count and must call `gate.start()` after its setup and `gate.stop()` before its teardown.
/// `marks`: which region markers to execute for the instruction-counting plugin.
pub fn run_workers<P: Platform>(
    p: &P,
    placement: Placement,
    shape: Shape,
    n: usize,
    marks: Marks,
    work: &(dyn Fn(usize, &Gate<'_, P>) -> Result<u64, Error> + Sync),
) -> Result<Outcome, Error> {
    if n == 0 || n > MAX_CORES {
        return Err(Error::Param("workers must be 1..=255"));
    }
    let bytes = core::mem::size_of::<Board>().div_ceil(PAGE) * PAGE;
    let mem = p.map(bytes, MapKind::Shared)?;
    // SAFETY: `mem` is a fresh zero-filled, page-aligned mapping of at least size_of::<Board>()
    // bytes, unmapped only at the end of this function. Zero bytes are valid atomics; the
    // `error` cells are not guaranteed valid as zeros, so they are written before any read.
    let board: &Board = unsafe { &*(mem as *const Board) };
    for s in board.slots.iter().take(n) {
        // SAFETY: no worker runs yet; this is the only access.
        unsafe { s.error.get().write(None) };
    }
    let relay = shape == Shape::Relay;
    let body = |w: usize| {
        let gate = Gate { p, board, w, n, relay, marks, started: Cell::new(false), stopped: Cell::new(false) };
        let r = work(w, &gate);
        // A worker that failed before starting still has to arrive, or the others would wait
        // forever; one that failed inside the region still has to pass the relay turn on.
        gate.start();
        gate.stop();
        let slot = &board.slots[w];
        match r {
            Ok(ops) => slot.ops.store(ops, Ordering::Relaxed),
            Err(e) => {
                // SAFETY: only worker `w` writes its slot's error, before publishing `failed`.
                unsafe { slot.error.get().write(Some(e)) };
                slot.failed.store(1, Ordering::Release);
            }
        }
    };
    let ran = match placement {
        Placement::Threads => p.run_threads(n, &body),
        Placement::Processes => p.run_processes(n, &body),
    };
    let mut out = Outcome { workers: n, ops: 0, ticks: 0, busy_ticks: 0, phases: None };
    let mut first = u64::MAX;
    let mut last = 0;
    let mut failure = None;
    for s in board.slots.iter().take(n) {
        if s.failed.load(Ordering::Acquire) == 1 && failure.is_none() {
            // SAFETY: `failed` is 1, so the worker finished writing `error` (see Sync above).
            failure = unsafe { *s.error.get() };
        }
        let (a, b) = (s.start.load(Ordering::Relaxed), s.end.load(Ordering::Relaxed));
        first = first.min(a);
        last = last.max(b);
        out.busy_ticks += b.saturating_sub(a);
        out.ops += s.ops.load(Ordering::Relaxed);
    }
    out.ticks = last.saturating_sub(first);
    p.unmap(mem, bytes)?;
    ran?;
    match failure {
        Some(e) => Err(e),
        None => Ok(out),
    }
}
