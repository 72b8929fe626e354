//! In-kernel tests. `ktest!` puts an entry into the `.ktests` linker section; `cmdline test`
//! runs them all on the boot core (tests that need every core fan out through
//! `smp::run_on_all`) and reports over serial in the format the xtask runner parses:
//! `ktest NAME ... ok`, `ktest NAME ... FAILED: why`, `ktest NAME ... skipped (why)`, then
//! `ktest: done N passed, N failed, N skipped`.
//!
//! A test that cannot apply to every boot (one that needs two NUMA nodes, say) is written
//! `ktest! { fn name() -> Outcome { ... } }` and returns `Ok(Outcome::Skipped(why))` when the
//! boot lacks what it needs. A skip is not a pass: `cargo xtask test` fails it unless the
//! suite that booted the kernel declared it may skip there (docs/testing.md).
//!
//! A test that needs hardware the kernel test boots do not have (a disk) is written
//! `ktest! { on_request fn name() { ... } }`: it runs only when `test=FILTER` names it, from
//! a boot made for it (the `fs` suite boots the dev tests with a disk), and fails there if
//! what it needs is missing.

use alloc::string::String;

/// What a test that may not apply to this boot returns when it did not fail.
pub enum Outcome {
    Ran,
    /// Not run: the boot lacks what the test needs (the reason says what).
    Skipped(String),
}

/// A test's function: one that always runs, one that may report a skip, or one that runs only
/// when the filter names it.
pub enum TestFn {
    Plain(fn() -> Result<(), String>),
    MaySkip(fn() -> Result<Outcome, String>),
    OnRequest(fn() -> Result<(), String>),
}

#[repr(C)]
pub struct KTest {
    pub name: &'static str,
    pub func: TestFn,
}

macro_rules! ktest {
    (fn $name:ident() -> Outcome $body:block) => {
        fn $name() -> Result<$crate::ktest::Outcome, alloc::string::String> $body
        $crate::ktest::ktest!(@entry $name, MaySkip);
    };
    (on_request fn $name:ident() $body:block) => {
        fn $name() -> Result<(), alloc::string::String> $body
        $crate::ktest::ktest!(@entry $name, OnRequest);
    };
    (fn $name:ident() $body:block) => {
        fn $name() -> Result<(), alloc::string::String> $body
        $crate::ktest::ktest!(@entry $name, Plain);
    };
    // The test's entry in the `.ktests` section.
    (@entry $name:ident, $kind:ident) => {
        const _: () = {
            #[link_section = ".ktests"]
            #[used]
            static ENTRY: $crate::ktest::KTest = $crate::ktest::KTest {
                name: concat!(module_path!(), "::", stringify!($name)),
                func: $crate::ktest::TestFn::$kind($name),
            };
        };
    };
}

/// Fail a test with a formatted message unless `cond` holds.
macro_rules! kassert {
    ($cond:expr, $($arg:tt)*) => {
        if !$cond {
            return Err(alloc::format!($($arg)*));
        }
    };
}

// Reached by path (`use crate::ktest::{kassert, ktest}`).
pub(crate) use {kassert, ktest};

extern "C" {
    static __ktests_start: u8;
    static __ktests_end: u8;
}

pub fn all() -> &'static [KTest] {
    // SAFETY: the linker script brackets the .ktests section, which holds only KTest values
    // (each 8-byte aligned and a multiple of 8 bytes long, so no padding between them).
    unsafe {
        let start = &__ktests_start as *const u8 as *const KTest;
        let end = &__ktests_end as *const u8 as *const KTest;
        core::slice::from_raw_parts(start, end.offset_from(start) as usize)
    }
}

/// Run every test (or those whose name contains `filter`). Returns true if none failed and at
/// least one ran and passed: a run that checked nothing (no test selected, or every one
/// skipped) is not a success.
pub fn run_all(filter: Option<&str>) -> bool {
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    let selected = |t: &&KTest| match (&t.func, filter) {
        (_, Some(f)) => t.name.contains(f),
        (TestFn::OnRequest(_), None) => false,
        (_, None) => true,
    };
    for t in all().iter().filter(selected) {
        let start = crate::time::uptime_ns();
        let r = match t.func {
            TestFn::Plain(f) | TestFn::OnRequest(f) => f().map(|()| Outcome::Ran),
            TestFn::MaySkip(f) => f(),
        };
        match r {
            Ok(Outcome::Ran) => {
                passed += 1;
                crate::log::kprintln!("ktest {} ... ok ({} ms)", t.name, (crate::time::uptime_ns() - start) / 1_000_000);
            }
            Ok(Outcome::Skipped(why)) => {
                skipped += 1;
                crate::log::kprintln!("ktest {} ... skipped ({})", t.name, why);
            }
            Err(why) => {
                failed += 1;
                crate::log::kprintln!("ktest {} ... FAILED: {}", t.name, why);
            }
        }
    }
    if passed + failed + skipped == 0 {
        crate::log::kprintln!("ktest: no test matches `{}`", filter.unwrap_or(""));
    }
    crate::log::kprintln!("ktest: done {passed} passed, {failed} failed, {skipped} skipped");
    failed == 0 && passed > 0
}
