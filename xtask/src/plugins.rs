//! QEMU TCG measurement plugins (issue 7): `cargo xtask plugin ...`. Not built yet.

use crate::TestTally;

pub fn main(_args: &[String]) -> Result<(), String> {
    Err("plugin: not built yet (issue 7)".into())
}

/// Plugin tests run by `cargo xtask test`. Not built yet: reports nothing.
pub fn tests() -> Result<TestTally, String> {
    Ok(TestTally::default())
}
