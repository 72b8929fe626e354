//! Metis (mapreduce/) on Linux: pthreads in one address space (Corey's comparison), pinned one per core through
//! bench's Linux backend; each worker's arena an anonymous private mapping
//! (`MAP_NORESERVE`, pages on first touch, by the touching thread); faults from
//! `getrusage(RUSAGE_SELF).ru_minflt` (the whole process). Transparent huge pages stay as the
//! kernel's default unless the words say `layout=nothp` (then `MADV_NOHUGEPAGE` on the arenas).

use std::sync::Mutex;
use std::vec::Vec;

use mapreduce::{Env, Error};

use crate::linux::Linux;
use crate::metis::from_bench;
use crate::Platform;

pub struct LinuxEnv<'a> {
    pub p: &'a Linux,
    arenas: Mutex<Vec<(usize, usize)>>,
    /// Generated texts (`Env::text`), unmapped when the environment is dropped.
    texts: Mutex<Vec<(usize, usize)>>,
    /// Bytes for intermediate data; 0 = from free memory.
    budget: usize,
    /// Leave transparent huge pages to the kernel's default (`true`), or turn them off for
    /// the arenas (`MADV_NOHUGEPAGE`: 4 KiB pages, one fault each, as on ours and on Corey's
    /// Linux 2.6.25).
    pub thp: bool,
    /// `Env::tlb_grow`'s region of each worker that has called it: (worker, address).
    tlb_regions: Mutex<Vec<(usize, usize)>>,
}

/// `Env::tlb_grow`'s region: 64 pages, more than Linux's single-page flush ceiling
/// (`tlb_single_page_flush_ceiling`, 33), so a protection change over it flushes whole.
const TLB_REGION: usize = 64 * 4096;

impl<'a> LinuxEnv<'a> {
    /// `budget`: bytes all arenas may take together, or 0 for 3/4 of the free memory.
    pub fn new(p: &'a Linux, budget: usize) -> LinuxEnv<'a> {
        LinuxEnv { p, arenas: Mutex::new(Vec::new()), texts: Mutex::new(Vec::new()), budget, thp: true, tlb_regions: Mutex::new(Vec::new()) }
    }
}

impl Drop for LinuxEnv<'_> {
    fn drop(&mut self) {
        for (p, len) in self.texts.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            // SAFETY: mapped in `text` with this length; no slice of it outlives `self`.
            unsafe { libc::munmap(p as *mut libc::c_void, len) };
        }
    }
}

fn mmap_anon(bytes: usize, what: &'static str) -> Result<*mut u8, Error> {
    // SAFETY: a fresh anonymous mapping; no existing memory is touched.
    let p = unsafe {
        libc::mmap(core::ptr::null_mut(), bytes.max(1), libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0)
    };
    if p == libc::MAP_FAILED {
        let code = std::io::Error::last_os_error().raw_os_error().unwrap_or(0) as i64;
        return Err(Error::Sys { what, code });
    }
    Ok(p as *mut u8)
}

/// Free memory (sysinfo), bytes.
pub fn free_memory() -> usize {
    // SAFETY: `info` is plain data for sysinfo to fill.
    unsafe {
        let mut info: libc::sysinfo = std::mem::zeroed();
        if libc::sysinfo(&mut info) != 0 {
            return 0;
        }
        (info.freeram as u128 * info.mem_unit.max(1) as u128).min(usize::MAX as u128) as usize
    }
}

impl Env for LinuxEnv<'_> {
    fn name(&self) -> &'static str {
        "linux"
    }
    fn cores(&self) -> usize {
        self.p.cores()
    }
    fn run(&self, n: usize, body: &(dyn Fn(usize) + Sync)) -> Result<(), Error> {
        self.p.run_threads(n, body).map_err(from_bench)
    }
    fn memory_budget(&self, _n: usize) -> usize {
        if self.budget != 0 {
            self.budget
        } else {
            free_memory() / 4 * 3
        }
    }
    fn arena(&self, _w: usize, bytes: usize) -> Result<*mut u8, Error> {
        let p = mmap_anon(bytes, "mmap arena")? as *mut libc::c_void;
        if !self.thp {
            // SAFETY: advice on our own fresh mapping.
            unsafe { libc::madvise(p, bytes, libc::MADV_NOHUGEPAGE) };
        }
        self.arenas.lock().unwrap_or_else(|e| e.into_inner()).push((p as usize, bytes));
        Ok(p as *mut u8)
    }
    fn share_arenas(&self, _w: usize, _n: usize) -> Result<(), Error> {
        Ok(())
    }
    fn release(&self, _n: usize) {
        for (p, len) in self.arenas.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            // SAFETY: mapped in `arena` with this length; the run is over.
            unsafe { libc::munmap(p as *mut libc::c_void, len) };
        }
        for (_, p) in self.tlb_regions.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            // SAFETY: mapped in `tlb_grow` with this length; the run is over.
            unsafe { libc::munmap(p as *mut libc::c_void, TLB_REGION) };
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
        // Refuse what cannot fit (a quarter of the free memory; the rest is for the
        // intermediate data) instead of dying in a page fault.
        let fits = free_memory() / 4;
        if size > fits {
            return Err(Error::InputTooLarge { size, fits });
        }
        let p = mmap_anon(size, "mmap text")?;
        self.texts.lock().unwrap_or_else(|e| e.into_inner()).push((p as usize, size.max(1)));
        // SAFETY: a fresh private mapping of `size` bytes, ours alone until we return it.
        let buf = unsafe { core::slice::from_raw_parts_mut(p, size) };
        mapreduce::gen::fill(seed, buf);
        Ok(buf)
    }
    fn tlb_grow(&self, w: usize) {
        // The worker's 64 populated pages (made at its first call: 64 faults once) made
        // read-only and writable again: the first change covers more pages than the
        // single-page flush ceiling, so the mm's CPUs flush their TLBs whole, with no page
        // allocated or zeroed per call.
        let mut regions = self.tlb_regions.lock().unwrap_or_else(|e| e.into_inner());
        let p = match regions.iter().find(|r| r.0 == w) {
            Some(&(_, p)) => p,
            None => {
                // SAFETY: a fresh anonymous mapping, unmapped in `release`.
                let p = unsafe { libc::mmap(core::ptr::null_mut(), TLB_REGION, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE, -1, 0) };
                if p == libc::MAP_FAILED {
                    return;
                }
                regions.push((w, p as usize));
                p as usize
            }
        };
        drop(regions);
        // SAFETY: protection changes on our own mapping, which nothing reads or writes.
        unsafe {
            libc::mprotect(p as *mut libc::c_void, TLB_REGION, libc::PROT_READ);
            libc::mprotect(p as *mut libc::c_void, TLB_REGION, libc::PROT_READ | libc::PROT_WRITE);
        }
    }
    fn faults(&self, _n: usize) -> u64 {
        // SAFETY: `ru` is plain data for getrusage to fill.
        unsafe {
            let mut ru: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_SELF, &mut ru);
            ru.ru_minflt as u64
        }
    }
}
