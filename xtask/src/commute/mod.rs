//! `cargo xtask commute`: the commutativity checker (docs/commute.md), after sv6/Commuter
//! (SOSP'13). Two models of calls share one pipeline:
//!
//! - `pipeline`: the steps for any model ([`pipeline::Model`]): enumerate and decide the
//!   cases, run them in QEMU under the sharing audit, read back results and shared lines,
//!   merge boots, check the baseline, report, table and draw.
//! - `model` + `kernel`: the kernel's own calls (`cases.rs`) on this kernel.
//! - `posix_model` + `posix`: the POSIX calls (`posix_cases.rs`) on the library OS and on Linux.
//! - `baseline`: the CI samples' checked-in baselines and accepted regressions;
//!   `heatmap_png`: the heat map as PNG; `options`: the command line.

pub mod baseline;
pub mod heatmap_png;
pub mod kernel;
pub mod model;
pub mod options;
pub mod pipeline;
pub mod posix;
pub mod posix_model;

/// `cargo xtask commute` (options.rs declares the options): `--system` runs the POSIX calls
/// (posix.rs), else the kernel's own calls (kernel.rs).
pub fn main(args: &options::CommuteArgs) -> Result<(), String> {
    if args.jobs > 1 && (args.ci || args.planted) {
        // The CI sample is one short boot; its suites run it as one.
        return Err("commute: --jobs is for a full run (not with --ci or --planted)".into());
    }
    match args.system.as_deref() {
        Some(system) => posix::main(system, args),
        None => kernel::main(args),
    }
}
