//! `cargo xtask bench percore` and the loom model-checking runs of the percore crate.
//! Owned by the percore work (issue 3).

use crate::TestTally;

/// `cargo xtask bench percore [...]`.
pub fn bench(_args: &[String]) -> Result<(), String> {
    Err("bench percore: not built yet (issue 3)".into())
}

/// Loom model checks, run by `cargo xtask test`. Not built yet: reports nothing.
pub fn loom_tests() -> Result<TestTally, String> {
    Ok(TestTally::default())
}
