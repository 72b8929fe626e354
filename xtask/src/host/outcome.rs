//! How a command ends: its failure (a usage error or the work's) and the test counts that
//! the test suites add up.

/// Pass, fail and skip counts accumulated across the parts of `cargo xtask test`. A skip is
/// a test that reported it could not run under its boot and whose suite declared it may skip
/// there; an undeclared skip is counted as a failure (test.rs, docs/testing.md).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TestTally {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

impl TestTally {
    /// One passed check.
    pub const PASS: TestTally = TestTally { passed: 1, failed: 0, skipped: 0 };
    /// One failed check.
    pub const FAIL: TestTally = TestTally { passed: 0, failed: 1, skipped: 0 };

    pub fn add(&mut self, other: TestTally) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.skipped += other.skipped;
    }
}

/// Why a command failed: a bad command line (exit status 2, nothing was done) or the work
/// itself (exit status 1).
pub enum Failure {
    Usage(String),
    Work(String),
}

/// A check of the parsed options that failed is a usage error.
pub fn usage<T>(r: Result<T, String>) -> Result<T, Failure> {
    r.map_err(Failure::Usage)
}

pub fn work(r: Result<(), String>) -> Result<(), Failure> {
    r.map_err(Failure::Work)
}
