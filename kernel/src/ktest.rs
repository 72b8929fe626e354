//! In-kernel tests. `ktest!` puts an entry into the `.ktests` linker section; `cmdline test`
//! runs them all on the boot core (tests that need every core fan out through
//! `smp::run_on_all`) and reports over serial in the format the xtask runner parses:
//! `ktest NAME ... ok`, `ktest NAME ... FAILED: why`, then `ktest: done N passed, M failed`.

use alloc::string::String;

#[repr(C)]
pub struct KTest {
    pub name: &'static str,
    pub func: fn() -> Result<(), String>,
}

#[macro_export]
macro_rules! ktest {
    (fn $name:ident() $body:block) => {
        fn $name() -> Result<(), alloc::string::String> $body
        const _: () = {
            #[link_section = ".ktests"]
            #[used]
            static ENTRY: $crate::ktest::KTest =
                $crate::ktest::KTest { name: concat!(module_path!(), "::", stringify!($name)), func: $name };
        };
    };
}

/// Fail a test with a formatted message unless `cond` holds.
#[macro_export]
macro_rules! kassert {
    ($cond:expr, $($arg:tt)*) => {
        if !$cond {
            return Err(alloc::format!($($arg)*));
        }
    };
}

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

/// Run every test (or those whose name contains `filter`). Returns true if all passed.
pub fn run_all(filter: Option<&str>) -> bool {
    let (mut passed, mut failed) = (0, 0);
    for t in all().iter().filter(|t| filter.is_none_or(|f| t.name.contains(f))) {
        let start = crate::time::uptime_ns();
        match (t.func)() {
            Ok(()) => {
                passed += 1;
                crate::kprintln!("ktest {} ... ok ({} ms)", t.name, (crate::time::uptime_ns() - start) / 1_000_000);
            }
            Err(why) => {
                failed += 1;
                crate::kprintln!("ktest {} ... FAILED: {}", t.name, why);
            }
        }
    }
    crate::kprintln!("ktest: done {passed} passed, {failed} failed");
    failed == 0
}
