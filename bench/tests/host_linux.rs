//! Every benchmark of the suite, natively on the host through the Linux backend, with tiny
//! parameters: checks the suite and the backend do what the guest will do (counts, relay
//! order, process placement, counter checks) in well under a second, without QEMU.

#![cfg(target_os = "linux")]

use bench::params::Params;
use bench::{suite, Platform, BENCHES};

#[test]
fn every_benchmark_runs_natively_with_two_workers() {
    let p = bench::linux::Linux::new(false);
    // Host-driven benchmarks (tcp_accept) are a guest service measured from outside.
    for spec in BENCHES.iter().filter(|b| !b.hidden && !b.kernel_core && !b.host_driven) {
        let line = format!("bench={} workers=2 iters=40 pages=4 rounds=3 batch=4 size=65536", spec.name);
        let params = Params::parse(&line).unwrap();
        let out = suite::run(&p, &params).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
        assert_eq!(out.workers, 2, "{}", spec.name);
        let per_worker = match spec.name {
            n if n.starts_with("memclone") || n.starts_with("mempass") => 4,
            n if n.starts_with("pagefault") => 4 * 3,
            // One operation is one input byte; both workers together read the text once.
            n if n.starts_with("metis") => 65536 / 2,
            _ => 40,
        };
        assert_eq!(out.ops, 2 * per_worker, "{}", spec.name);
        assert!(out.ticks > 0 && out.busy_ticks > 0, "{}: no time measured", spec.name);
    }
    assert!(p.ticks_per_sec() > 1_000_000, "TSC calibration");
}

/// Linux has no kernel cores: the benchmarks that need one refuse (the harness records them
/// as unavailable without booting), with one worker and before anything is timed.
#[test]
fn kernel_core_benchmarks_are_refused_on_linux() {
    let p = bench::linux::Linux::new(false);
    for spec in BENCHES.iter().filter(|b| b.kernel_core) {
        assert_eq!(spec.workers(4), 1, "{}", spec.name);
        let line = format!("bench={} workers=2 iters=128", spec.name);
        let params = Params::parse(&line).unwrap();
        let r = suite::run(&p, &params);
        assert_eq!(r, Err(bench::Error::Unsupported(bench::linux::NO_KERNEL_CORES)), "{}", spec.name);
    }
    assert!(BENCHES.iter().filter(|b| b.kernel_core).count() >= 2);
}

#[test]
fn bad_parameters_are_errors_not_panics() {
    let p = bench::linux::Linux::new(false);
    let params = Params::parse("bench=stat_mt workers=2 iters=0").unwrap();
    assert!(suite::run(&p, &params).is_err());
}

/// The result line both guest programs print: best of `reps`, the fields the host parses, the
/// effective parameters; a failing run gives the error line instead.
#[test]
fn result_line_carries_what_the_host_parses() {
    let p = bench::linux::Linux::new(false);
    let params = Params::parse("bench=counter_sloppy workers=2 iters=40 batch=4 reps=3").unwrap();
    let run = bench::report::run_best(&p, &params, false);
    assert!(run.is_ok());
    let line = run.to_string();
    assert!(line.starts_with("bench-result name=counter_sloppy system=linux "), "{line}");
    for word in ["workers=2", "ops=80", "reps=3", "markers=false", "params=iters:40,batch:4", "check=ok"] {
        assert!(line.split_whitespace().any(|w| w == word), "{word} missing from {line}");
    }
    assert!(line.contains(" ns=") && line.contains(" busy_ns=") && !line.contains('\n'), "{line}");
    // The in-boot calibration: the register loop with the same two workers, 4M steps each.
    assert!(line.split_whitespace().any(|w| w == "calib_ops=8000000"), "{line}");
    let calib = run.calibration.expect("calibration ran");
    assert_eq!((calib.workers, calib.ops), (2, 8_000_000));
    assert!(calib.ticks > 0);
    let bad = Params::parse("bench=stat_mt workers=2 iters=0 reps=2").unwrap();
    let run = bench::report::run_best(&p, &bad, false);
    assert!(!run.is_ok());
    assert!(run.calibration.is_none(), "no calibration after a failed benchmark");
    assert_eq!(run.to_string(), "bench-error name=stat_mt msg=bad parameter: a count parameter is 0");
}
