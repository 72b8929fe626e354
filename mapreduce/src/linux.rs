//! Linux: pthreads in one address space (Corey's comparison), pinned one per core through
//! bench's Linux backend; each worker's arena an anonymous private mapping
//! (`MAP_NORESERVE`, pages on first touch, by the touching thread); faults from
//! `getrusage(RUSAGE_SELF).ru_minflt` (the whole process). Transparent huge pages stay as the
//! kernel's default unless the words say `layout=nothp` (then `MADV_NOHUGEPAGE` on the arenas).

use std::sync::Mutex;
use std::vec::Vec;

use bench::Platform;

use crate::{Env, Error};

pub struct LinuxEnv {
    pub p: bench::linux::Linux,
    arenas: Mutex<Vec<(usize, usize)>>,
    /// Bytes for intermediate data; 0 = from free memory.
    budget: usize,
    /// Leave transparent huge pages to the kernel's default (`true`), or turn them off for
    /// the arenas (`MADV_NOHUGEPAGE`: 4 KiB pages, one fault each, as on ours and on Corey's
    /// Linux 2.6.25).
    pub thp: bool,
}

impl LinuxEnv {
    /// `budget`: bytes all arenas may take together, or 0 for 3/4 of the free memory.
    pub fn new(markers: bool, budget: usize) -> LinuxEnv {
        LinuxEnv { p: bench::linux::Linux::new(markers), arenas: Mutex::new(Vec::new()), budget, thp: true }
    }
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

impl Env for LinuxEnv {
    fn name(&self) -> &'static str {
        "linux"
    }
    fn cores(&self) -> usize {
        self.p.cores()
    }
    fn run(&self, n: usize, body: &(dyn Fn(usize) + Sync)) -> Result<(), Error> {
        self.p.run_threads(n, body).map_err(Error::Platform)
    }
    fn memory_budget(&self, _n: usize) -> usize {
        if self.budget != 0 {
            self.budget
        } else {
            free_memory() / 4 * 3
        }
    }
    fn arena(&self, _w: usize, bytes: usize) -> Result<*mut u8, Error> {
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(core::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0)
        };
        if p == libc::MAP_FAILED {
            let code = std::io::Error::last_os_error().raw_os_error().unwrap_or(0) as i64;
            return Err(Error::Platform(bench::Error::Sys { what: "mmap arena", code }));
        }
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
    }
    fn ticks_per_sec(&self) -> u64 {
        self.p.ticks_per_sec()
    }
    fn marker(&self, v: u8) {
        self.p.marker(v)
    }
    fn calibration(&self, n: usize) -> Option<(u64, u64)> {
        crate::calibrate(&self.p, n)
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
