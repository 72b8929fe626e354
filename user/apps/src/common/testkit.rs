//! Plumbing shared by the user-program test suites (utest, isolation, tctest, schedtest): one-line failure
//! messages formatted on the stack, the `ok!`/`err!`/`ensure!`/`fail!` macros, and small
//! helpers. Included with `#[path]` and `#[macro_use]`; not every suite uses every item.
#![allow(dead_code)]

use abi::{Error, ObjName, ObjectId};
use core::fmt::{self, Write};
use libos::sys;

/// A failure message, formatted on the stack (tests do not use the heap).
pub struct Msg {
    buf: [u8; 300],
    len: usize,
}

impl Write for Msg {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for &b in s.as_bytes() {
            if self.len < self.buf.len() {
                // One line per test: expressions quoted by `stringify!` may hold newlines.
                self.buf[self.len] = if b == b'\n' { b' ' } else { b };
                self.len += 1;
            }
        }
        Ok(())
    }
}

impl Msg {
    pub fn new(args: fmt::Arguments) -> Msg {
        let mut m = Msg { buf: [0; 300], len: 0 };
        let _ = m.write_fmt(args);
        m
    }
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("<bad utf-8>")
    }
}

/// A test that did not fail: it ran and passed, or it could not run under this boot (the
/// reason names what it needs, e.g. "needs a kernel core"). A skip is not a pass: it is
/// printed and counted as a skip, and `cargo xtask test` fails a skip that the boot's
/// configuration should have prevented (docs/testing.md).
pub enum Pass {
    Ok,
    Skipped(&'static str),
}

pub type TestResult = Result<Pass, Msg>;

/// Passed, failed and skipped tests, reported in the `utest NAME ... ok|FAILED: why|skipped
/// (why)` form that `cargo xtask test` parses, closed by `utest: done N passed, N failed, N
/// skipped`.
#[derive(Default)]
pub struct Tally {
    pub passed: u64,
    pub failed: u64,
    pub skipped: u64,
}

impl Tally {
    /// Print test `name`'s outcome and count it.
    pub fn record(&mut self, name: &str, r: TestResult) {
        match r {
            Ok(Pass::Ok) => self.pass(name, ""),
            Ok(Pass::Skipped(why)) => self.skip(name, why),
            Err(m) => self.fail(name, m.as_str()),
        }
    }

    /// A pass; `note` (if not empty) follows in parentheses and must not start with `skipped`.
    pub fn pass(&mut self, name: &str, note: &str) {
        self.passed += 1;
        if note.is_empty() {
            libos::println!("utest {name} ... ok");
        } else {
            libos::println!("utest {name} ... ok ({note})");
        }
    }

    pub fn skip(&mut self, name: &str, why: &str) {
        self.skipped += 1;
        libos::println!("utest {name} ... skipped ({why})");
    }

    pub fn fail(&mut self, name: &str, why: &str) {
        self.failed += 1;
        libos::println!("utest {name} ... FAILED: {why}");
    }

    /// Print the closing line; the program's exit code: 0 only if no test failed and at least
    /// one ran (a run in which everything was skipped checked nothing).
    pub fn finish(&self) -> u64 {
        libos::println!("utest: done {} passed, {} failed, {} skipped", self.passed, self.failed, self.skipped);
        u64::from(self.failed != 0 || self.passed == 0)
    }
}

/// Whether `name` is selected by the program's arguments (words not starting with `-`; none
/// selects every test).
pub fn selected(args: &str, name: &str) -> bool {
    args.split_whitespace().all(|w| w.starts_with('-')) || args.split_whitespace().any(|w| name.contains(w))
}

macro_rules! fail {
    ($($a:tt)*) => { return Err($crate::testkit::Msg::new(format_args!($($a)*))) };
}

/// Unwrap an `Ok`, failing the test with the expression and the error otherwise.
macro_rules! ok {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => fail!("{} -> Err({:?})", stringify!($e), e),
        }
    };
}

/// Expect one of the given errors.
macro_rules! err {
    ($e:expr, $p:pat) => {
        match $e {
            Err($p) => {}
            other => fail!("{} -> {:?}, want {}", stringify!($e), other, stringify!($p)),
        }
    };
}

macro_rules! ensure {
    ($c:expr, $($a:tt)*) => {
        if !$c {
            fail!($($a)*)
        }
    };
}

pub fn root() -> ObjectId {
    libos::root_share()
}

pub fn rar() -> ObjName {
    ObjName::new(root(), libos::start_info().root_ar)
}

pub fn cores() -> u64 {
    sys::sys_info().map(|s| s.cores).unwrap_or(1)
}

/// A raw system call, for arguments the typed wrappers cannot express (bad pointers, unknown
/// numbers, out-of-domain values).
pub fn raw(n: u64, a: [u64; 6]) -> Result<u64, Error> {
    // SAFETY: the pointers the suites pass are either valid buffers of their own or
    // deliberately bad ones (null, kernel half, non-canonical, unmapped, read-only) that the
    // kernel must refuse; a kernel that wrongly wrote through them could at worst corrupt
    // memory the suite then checks, which is what the cases look for.
    unsafe { sys::call(n, a[0], a[1], a[2], a[3], a[4], a[5]) }
}

/// Deletes `<share, obj>` when dropped.
#[derive(Debug)]
pub struct Del(pub ObjName);
impl Drop for Del {
    fn drop(&mut self) {
        let _ = sys::share_delobj(self.0);
    }
}

/// The words of the page every context of a test maps at `SCRATCH_BASE` (`SharedPage`).
pub fn shared() -> &'static [core::sync::atomic::AtomicU64; 512] {
    // SAFETY: every context of the test (and the test itself) maps the shared page
    // read-write at SCRATCH_BASE before it runs (`SharedPage`); AtomicU64 has the layout of
    // u64.
    unsafe { &*(libos::layout::SCRATCH_BASE as *const [core::sync::atomic::AtomicU64; 512]) }
}

/// A segment of one page for words shared with contexts on other cores, mapped here at
/// `SCRATCH_BASE` and in every context made with `core` (tctest, schedtest).
pub struct SharedPage {
    pub seg: ObjName,
}

impl SharedPage {
    /// Make the page (named `name`), map it here and clear its words.
    pub fn new(name: &str) -> Result<SharedPage, Msg> {
        let seg = ObjName::new(root(), ok!(sys::segment_alloc(root(), name, 0, abi::PAGE_SIZE)));
        let p = SharedPage { seg };
        ok!(p.map_into(rar()));
        for w in shared().iter() {
            w.store(0, core::sync::atomic::Ordering::Relaxed);
        }
        Ok(p)
    }

    pub fn map_into(&self, ar: ObjName) -> Result<u64, Error> {
        let m = abi::SegMapping {
            voff: libos::layout::SCRATCH_BASE,
            seg: self.seg,
            soff: 0,
            len: abi::PAGE_SIZE,
            flags: abi::MAP_READ | abi::MAP_WRITE,
        };
        sys::ar_set_seg(ar, &m)
    }

    /// A context prepared for `core` with this page mapped.
    pub fn core(&self, core: u64) -> Result<libos::cores::Core, Msg> {
        let c = ok!(libos::cores::Core::prepare(core, &libos::cores::CoreOpts::default()));
        ok!(self.map_into(c.root_ar));
        Ok(c)
    }
}

impl Drop for SharedPage {
    fn drop(&mut self) {
        let _ = sys::ar_unmap(rar(), libos::layout::SCRATCH_BASE, abi::PAGE_SIZE);
        let _ = sys::share_delobj(self.seg);
    }
}
