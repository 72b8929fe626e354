//! Pcore objects: a handle on one physical core, through which an application starts,
//! times and halts the user context that runs there (Corey section 4).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use abi::{PcoreStat, PCORE_IDLE};

pub struct Pcore {
    pub core: u32,
    /// The core that allocated this object: only it may run or halt contexts through it
    /// (a context may always halt itself).
    pub allocator_core: u32,
    pub state: AtomicU32,
    pub exit_code: AtomicU64,
    pub runs: AtomicU64,
    pub interval_hz: AtomicU64,
}

impl Pcore {
    pub fn new(core: u32, allocator_core: u32) -> Pcore {
        Pcore { core, allocator_core, state: AtomicU32::new(PCORE_IDLE), exit_code: AtomicU64::new(0), runs: AtomicU64::new(0), interval_hz: AtomicU64::new(0) }
    }

    /// A consistent snapshot: `runs` is read first, and a run is counted only after its
    /// state became RUNNING, so whoever sees the new count sees RUNNING or later (HALTED with
    /// its exit code), never the previous run's state.
    pub fn stat(&self) -> PcoreStat {
        let runs = self.runs.load(Ordering::Acquire);
        let state = self.state.load(Ordering::Acquire);
        let exit_code = self.exit_code.load(Ordering::Acquire);
        PcoreStat { core: self.core, state, exit_code, runs, interval_hz: self.interval_hz.load(Ordering::Relaxed) }
    }
}
