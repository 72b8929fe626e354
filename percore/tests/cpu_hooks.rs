//! The environment hooks in `percore::cpu`: the core count and the core-identity provider.
//! In a test binary of their own, because they are process-wide settings that the other
//! tests (run as threads of one process) must not see change under them. Each test names
//! the `cargo mutants` survivors it kills (docs/testing.md, "cargo mutants").
#![cfg(not(loom))]

use percore::MAX_CORES;

/// Catches: `set_core_count` ignoring its argument, `core_count` answering a constant, and
/// `set_cpu_id_provider` not installing the provider (cargo mutants: `set_core_count` -> `()`,
/// `core_count -> 0`, `core_count -> 1`, `set_cpu_id_provider` -> `()`). One test, because
/// both settings are global.
#[test]
fn the_environment_sets_the_core_count_and_the_core_identity() {
    assert_eq!(percore::core_count(), 1, "one core until the environment says otherwise");
    percore::cpu::set_core_count(5);
    assert_eq!(percore::core_count(), 5);
    // PerCore views follow the count.
    let v = percore::PerCore::new(|i| i);
    assert_eq!(v.len(), 5);
    percore::cpu::set_core_count(MAX_CORES);
    assert_eq!(percore::core_count(), MAX_CORES);
    percore::cpu::set_core_count(2);

    percore::cpu::register_thread(1);
    assert_eq!(percore::cpu_id(), 1, "without a provider, the registered thread index");
    fn core_three() -> usize {
        3
    }
    percore::cpu::set_cpu_id_provider(core_three);
    assert_eq!(percore::cpu_id(), 3, "the installed provider answers cpu_id");
}

/// Catches: accepting a core count the per-core arrays cannot hold, or zero.
#[test]
fn an_impossible_core_count_is_refused() {
    for bad in [0, MAX_CORES + 1] {
        let r = std::panic::catch_unwind(|| percore::cpu::set_core_count(bad));
        assert!(r.is_err(), "set_core_count({bad}) must be refused");
    }
}
