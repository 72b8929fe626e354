//! This system's side of the matrix. **Not available yet**: benchmarks run in user mode on
//! the library OS (issue 5), which does not exist yet, so every run of `ours` becomes an
//! explicit `unavailable` record instead of a number.
//!
//! To plug in (docs/bench.md has the full list), `prepare` will:
//! 1. build the `bench` crate's suite for `x86_64-unknown-none`, linked with the library OS,
//!    whose start-up implements `bench::Platform` (the stub is `bench/src/ours.rs`);
//! 2. build the kernel (`crate::env::build_kernel`) with that program as its first user
//!    program, and pass `bench=NAME workers=N key=value ...` on the kernel command line;
//! 3. boot it with the same `VmConfig` as the Linux runs (see `linux_sys.rs`), and parse the
//!    same `bench-result` line from serial (`linux_sys::record_from_serial` is shared).

pub const WHY_NOT: &str = "ours: not available yet (needs the library OS, issue 5)";

/// Whether this system can run the suite. Returns the reason it cannot.
pub fn prepare() -> Result<(), String> {
    Err(WHY_NOT.into())
}
