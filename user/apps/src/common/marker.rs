//! The measurement plugins' region markers (tools/qemu-plugins/marker.h) for the benchmark
//! and test programs: `bench::harness::marker_out` writes the exact byte sequence the plugins
//! recognise. 1/2 start and stop the region on this vCPU, 3/4 on every vCPU, 5 is the sharing
//! plugin's epoch (docs/plugins.md).

use core::sync::atomic::{compiler_fence, Ordering};

fn out(v: u8) {
    // The marker is `nomem` to the compiler: keep the measured code on its side of it.
    compiler_fence(Ordering::SeqCst);
    // SAFETY: writes the marker port, which the kernel's TSS I/O bitmap opens to user mode
    // for the plugins; it clobbers only dx and al and touches no memory.
    unsafe { bench::harness::marker_out(v) };
    compiler_fence(Ordering::SeqCst);
}

/// Start (`true`) or stop the region on this vCPU.
#[allow(dead_code)]
pub fn region(start: bool) {
    out(if start { 1 } else { 2 });
}

/// Start (`true`) or stop the region on every vCPU (with `insncount`, a kernel core's
/// instructions count too).
#[allow(dead_code)]
pub fn region_all(start: bool) {
    out(if start { 3 } else { 4 });
}

/// The sharing plugin's epoch: report the lines shared since the last one.
#[allow(dead_code)]
pub fn epoch() {
    out(5);
}
