//! A plain-std environment: scoped threads, arenas from the global allocator, no fault count.
//! For the host tests and quick native runs; the Linux baseline uses [`crate::linux`].

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::Mutex;
use std::vec;
use std::vec::Vec;

use crate::{Env, Error};

pub struct HostEnv {
    pub cores: usize,
    /// Bytes of intermediate data allowed in all (split evenly over the workers).
    pub budget: usize,
    arenas: Mutex<Vec<(usize, Layout)>>,
    texts: Mutex<Vec<Vec<u8>>>,
    /// `Env::tlb_grow` calls (the host has no TLB to flush; the tests count them).
    pub tlb_grows: core::sync::atomic::AtomicU64,
}

impl HostEnv {
    pub fn new(cores: usize, budget: usize) -> HostEnv {
        HostEnv { cores, budget, arenas: Mutex::new(Vec::new()), texts: Mutex::new(Vec::new()), tlb_grows: Default::default() }
    }
}

impl Env for HostEnv {
    fn name(&self) -> &'static str {
        "host"
    }
    fn cores(&self) -> usize {
        self.cores
    }
    fn run(&self, n: usize, body: &(dyn Fn(usize) + Sync)) -> Result<(), Error> {
        std::thread::scope(|s| {
            for w in 1..n {
                s.spawn(move || body(w));
            }
            body(0);
        });
        Ok(())
    }
    fn memory_budget(&self, _n: usize) -> usize {
        self.budget
    }
    fn arena(&self, _w: usize, bytes: usize) -> Result<*mut u8, Error> {
        // Alignment 8 (all the arena needs): the system allocator then uses calloc, which maps
        // fresh zero pages instead of writing zeros over every page.
        let layout = Layout::from_size_align(bytes, 8).map_err(|_| Error::Param("arena size"))?;
        // SAFETY: `bytes` is non-zero (the caller asks for at least 1 MiB).
        let p = unsafe { alloc_zeroed(layout) };
        if p.is_null() {
            return Err(Error::Sys { what: "alloc_zeroed", code: 12 });
        }
        self.arenas.lock().unwrap_or_else(|e| e.into_inner()).push((p as usize, layout));
        Ok(p)
    }
    fn share_arenas(&self, _w: usize, _n: usize) -> Result<(), Error> {
        Ok(())
    }
    fn release(&self, _n: usize) {
        for (p, layout) in self.arenas.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            // SAFETY: allocated in `arena` with this layout; the run is over.
            unsafe { dealloc(p as *mut u8, layout) };
        }
    }
    fn ticks_per_sec(&self) -> u64 {
        1_000_000_000
    }
    fn faults(&self, _n: usize) -> u64 {
        0
    }
    fn relax(&self) {
        // The tests run up to 8 workers on whatever cores the host has free.
        std::thread::yield_now()
    }
    fn tlb_grow(&self, _w: usize) {
        self.tlb_grows.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    }
    fn text(&self, size: usize, seed: u64) -> Result<&[u8], Error> {
        let mut t = vec![0u8; size];
        crate::gen::fill(seed, &mut t);
        let mut texts = self.texts.lock().unwrap_or_else(|e| e.into_inner());
        texts.push(t);
        let last = texts.last().map(|t| (t.as_ptr(), t.len())).unwrap_or((core::ptr::null(), 0));
        // SAFETY: the Vec's heap buffer does not move when `texts` grows and is kept until
        // the environment is dropped; nothing writes it.
        Ok(unsafe { core::slice::from_raw_parts(last.0, last.1) })
    }
}
