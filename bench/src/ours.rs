//! Backend 2: this system's library OS. **NOT AVAILABLE YET** — it needs the library OS
//! (issue 5): user mode, threads on pcores, shares, address ranges and segments. Every
//! method returns [`Error::Unsupported`]; the host harness does not boot it and reports
//! "ours: not available yet (needs the library OS, issue 5)" instead of a number.
//!
//! What each method will become (see docs/bench.md):
//!
//! | method | library OS call |
//! | --- | --- |
//! | `run_threads` | one context per pcore (`pcore_run`) in one shared root address range |
//! | `run_processes` | `cfork` per worker: private root range, private share set; `Shared` memory as a shared address range |
//! | `thread_create_join` | libos thread create + join on the calling pcore |
//! | `map(Private)` / `map(Shared)` | segment allocated on the calling core + private / shared address range |
//! | `object_create` / `object_map` | a resident segment; mapped into a fresh address range |
//! | `stat` | the libos file-system `fstat` |
//! | `desc_scope` / `desc_*` | private-scope vs process-wide descriptors (descriptors on shares) |
//! | `share_open(Process/Worker)` / `share_add` / `share_del` | global share vs the core's local share; `share_addobj` / `share_delobj` |
//! | `null_syscall` | the cheapest system call |
//! | `marker` | `out` from ring 3 needs an I/O-permission bitmap in the TSS, or a system call that executes the marker in ring 0 |

use crate::{Error, Handle, MapKind, Platform, Scope};

/// False until the library OS exists; the host harness reads the same fact from
/// `xtask/src/bench/ours.rs`.
pub const AVAILABLE: bool = false;
pub const WHY_NOT: &str = "not available yet (needs the library OS, issue 5)";

pub struct Ours;

const NO: Error = Error::Unsupported("the library OS (issue 5)");

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
    fn null_syscall(&self) {}
    fn ticks_per_sec(&self) -> u64 {
        0
    }
    fn marker(&self, _v: u8) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Params;

    /// The stub must refuse, never produce a number.
    #[test]
    fn ours_refuses_instead_of_pretending() {
        let p = Params::parse("bench=dupclose").unwrap();
        assert!(matches!(crate::suite::run(&Ours, &p), Err(Error::Unsupported(_))));
        assert!(!AVAILABLE);
    }
}
