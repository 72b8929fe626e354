//! Which way ours does a row's operation: through its kernel, or in the library OS without
//! entering the kernel (descriptor tables in user memory, file rows served from the library
//! OS's cache), or in user code that is the same on both systems (counters, the calibration
//! loop, MapReduce's map and reduce). A "library path" row compares a library call of ours
//! with a Linux system call: it is not a faster system call, and the table says so on every
//! row (DESIGN.md, "Fair comparisons").
//!
//! The label is computed from the exact instruction counts of the run itself, not typed by
//! hand, so it cannot go stale when a path moves into or out of the kernel: ours' kernel
//! instructions per operation at or above [`KERNEL_PER_OP`] is a kernel path; below it, a
//! library path when Linux's kernel instructions per operation for the same row are at or
//! above it, and user code on both otherwise. The host-driven rows count more than the
//! serving cores (ours' kernel core polls the card inside the region), so they carry a fixed
//! label that says what each core does.

use crate::guest::record::Record;

/// Kernel instructions per operation from which an operation is taken to enter the kernel:
/// well below ours' cheapest system call (`nullsyscall`, 49 kernel instructions since its
/// path was trimmed: a threshold of 50 once called it a library path) and far above what
/// timer interrupts add to a user loop (a fraction of one per operation: the library rows
/// count 0.0).
pub const KERNEL_PER_OP: f64 = 20.0;

/// The label of one row (benchmark at `cores` vCPUs): "kernel path", "library path",
/// "user code (both)", a host-driven row's fixed label, or "-" when the counts are missing.
pub fn label(records: &[Record], bench: &str, cores: u32) -> String {
    if let Some(fixed) = host_driven_label(bench) {
        return fixed.into();
    }
    let kernel_per_op = |sys: &str| {
        records.iter().filter(|r| r.system == sys && r.benchmark == bench && r.cores == cores).find_map(|r| Some(r.instructions_kernel? as f64 / r.ops.filter(|&o| o > 0)? as f64))
    };
    let Some(ours) = kernel_per_op("ours") else { return "-".into() };
    if ours >= KERNEL_PER_OP {
        return "kernel path".into();
    }
    match crate::guest::record::LINUX_NAMES.iter().find_map(|l| kernel_per_op(l)) {
        Some(l) if l >= KERNEL_PER_OP => "library path".into(),
        Some(_) => "user code (both)".into(),
        None => "library path?".into(),
    }
}

/// The host-driven rows: what ours' cores do per connection or request.
pub fn host_driven_label(bench: &str) -> Option<&'static str> {
    match bench {
        "tcp_accept" => Some("library path (TCP stack in user space; card on a kernel core)"),
        "tcp_accept_polling" => Some("kernel path (driver calls per packet; stack in user space)"),
        b if b.starts_with("webd_filesum_") => Some("library path (TCP stack and files in the library OS)"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use testdefs::bench_catalog as catalog;
    use crate::guest::record::Status;
    use super::*;

    fn counted(sys: &str, bench: &str, kernel: u64, user: u64, ops: u64) -> Record {
        let mut r = Record::without_result(sys, catalog::find(bench).unwrap(), vec![], 1, Status::Ok, "");
        (r.reason, r.ops, r.instructions_kernel, r.instructions_user) = (None, Some(ops), Some(kernel), Some(user));
        r
    }

    /// Catches: a row whose ours side never enters the kernel labelled a kernel path (or the
    /// reverse), a user loop on both systems called a library path, a missing count guessed.
    #[test]
    fn labels_follow_the_counts() {
        let recs = vec![
            counted("ours", "dupclose", 0, 275_000, 1000),
            counted("linux", "dupclose", 1_900_000, 10_000, 1000),
            counted("ours", "nullsyscall", 49_000, 10_000, 1000),
            counted("linux-tuned", "nullsyscall", 300_000, 9_000, 1000),
            counted("ours", "counter_padded", 10, 1300, 1000),
            counted("linux", "counter_padded", 12, 1300, 1000),
        ];
        assert_eq!(label(&recs, "dupclose", 1), "library path");
        assert_eq!(label(&recs, "nullsyscall", 1), "kernel path");
        assert_eq!(label(&recs, "counter_padded", 1), "user code (both)");
        assert_eq!(label(&recs, "stat_mt", 1), "-");
        assert!(label(&recs, "tcp_accept", 2).starts_with("library path"));
        assert!(label(&recs, "webd_filesum_random_64k", 2).starts_with("library path"));
    }
}
