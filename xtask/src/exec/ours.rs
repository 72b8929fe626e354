//! Running a static Linux program on this system: boots the kernel with the Linux
//! personality's runtime as the first program and the program in its root file system.
//!
//! NOT FINISHED: the personality is being built; until then this refuses with a reason.

use super::{ExecOutput, ExecRequest};

pub fn run(req: &ExecRequest) -> Result<ExecOutput, String> {
    Err(format!("{}: running Linux programs on this system is not built yet", req.program.display()))
}
