//! Running a static Linux program on the Linux guest (Debian's kernel, same QEMU machine).
//!
//! NOT FINISHED: being built; until then this refuses with a reason.

use super::{ExecOutput, ExecRequest};

pub fn run(req: &ExecRequest) -> Result<ExecOutput, String> {
    Err(format!("{}: running Linux programs on the Linux guest is not built yet", req.program.display()))
}
