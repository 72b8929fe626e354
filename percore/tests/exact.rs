//! Exact, single-threaded checks of what the counters and the reclamation domain report:
//! their accessors, the sloppy counter's give-back hysteresis, the token's visits. Each test
//! names the `cargo mutants` survivors it kills (docs/testing.md, "cargo mutants"): the
//! threaded tests check invariants, which hold for several wrong answers too.
#![cfg(not(loom))]

use percore::counter::{DistributedCounter, SloppyCounter};
use percore::reclaim::Domain;

/// Catches: `DistributedCounter::cores` or `slot` answering a constant, and `with_cores`
/// ignoring its argument (cargo mutants: `cores -> 0`, `cores -> 1`, `slot -> Some(1)`).
#[test]
fn distributed_counter_reports_each_slot() {
    let c = DistributedCounter::with_cores(3);
    assert_eq!(c.cores(), 3);
    c.add_on(0, 5);
    c.add_on(2, -2);
    assert_eq!([c.slot(0), c.slot(1), c.slot(2), c.slot(3)], [Some(5), Some(0), Some(-2), None]);
    assert_eq!(c.sum(), 3);
}

/// Catches: the sloppy counter giving spares back at the threshold instead of past it, or
/// keeping the wrong number (its documented rule: past `threshold`, keep `threshold - batch`),
/// and its accessors answering constants (cargo mutants: `>` -> `>=` and `-` -> `/` in
/// `release_on`; `spares -> Some(0|1)`, `batch -> 0|1`, `cores -> 0|1`).
#[test]
fn sloppy_release_gives_back_past_the_threshold_only() {
    let c = SloppyCounter::with_config(3, 8, 3).unwrap();
    assert_eq!((c.cores(), c.threshold(), c.batch()), (3, 8, 3));
    // No spares: the central count takes the 10 and a batch of 3 spares for core 1.
    c.acquire_on(1, 10);
    assert_eq!((c.central(), c.spares(1), c.spares(0), c.spares(3)), (13, Some(3), Some(0), None));
    // 3 + 5 = 8 spares: at the threshold, not past it, so all are kept.
    c.release_on(1, 5);
    assert_eq!((c.central(), c.spares(1)), (13, Some(8)));
    // 9 spares: past it; keep 8 - 3 = 5, give 4 back to the central count.
    c.release_on(1, 1);
    assert_eq!((c.central(), c.spares(1), c.total_spares()), (9, Some(5), 5));
    assert_eq!(c.in_use(), 4);
    assert_eq!(c.reclaim_all(), 4);
    assert_eq!(c.spares(1), Some(0));
}

/// Catches: `Domain::cores` or `visits` answering a constant, and an operation whose end is
/// lost (cargo mutants: `cores -> 0|1`, `visits -> 1`, `Operation::drop -> ()`): the token
/// must stop at a core while an operation there runs, and pass once it has ended.
#[test]
fn the_token_waits_for_an_operation_and_counts_its_visits() {
    let d = Domain::with_cores(3);
    assert_eq!((d.cores(), d.visits()), (3, 0));
    assert!(d.advance(), "no operation anywhere: the visit to core 0 completes");
    assert_eq!(d.visits(), 1);
    let op = d.enter_on(1);
    assert!(!d.advance(), "the token passed core 1 while an operation ran there");
    assert_eq!(d.visits(), 1);
    drop(op);
    assert!(d.advance(), "the token stayed at core 1 after its operation ended");
    assert!(d.advance());
    assert_eq!(d.visits(), 3, "one full round of three cores");
}
