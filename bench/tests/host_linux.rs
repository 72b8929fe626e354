//! Every benchmark of the suite, natively on the host through the Linux backend, with tiny
//! parameters: checks the suite and the backend do what the guest will do (counts, relay
//! order, process placement, counter checks) in well under a second, without QEMU.

#![cfg(target_os = "linux")]

use bench::params::Params;
use bench::{suite, Platform, BENCHES};

#[test]
fn every_benchmark_runs_natively_with_two_workers() {
    let p = bench::linux::Linux::new(false);
    for spec in BENCHES.iter().filter(|b| !b.hidden) {
        let line = format!("bench={} workers=2 iters=40 pages=4 rounds=3 batch=4", spec.name);
        let params = Params::parse(&line).unwrap();
        let out = suite::run(&p, &params).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
        assert_eq!(out.workers, 2, "{}", spec.name);
        let per_worker = match spec.name {
            n if n.starts_with("memclone") || n.starts_with("mempass") => 4,
            n if n.starts_with("pagefault") => 4 * 3,
            _ => 40,
        };
        assert_eq!(out.ops, 2 * per_worker, "{}", spec.name);
        assert!(out.ticks > 0 && out.busy_ticks > 0, "{}: no time measured", spec.name);
    }
    assert!(p.ticks_per_sec() > 1_000_000, "TSC calibration");
}

#[test]
fn bad_parameters_are_errors_not_panics() {
    let p = bench::linux::Linux::new(false);
    let params = Params::parse("bench=stat_mt workers=2 iters=0").unwrap();
    assert!(suite::run(&p, &params).is_err());
}
