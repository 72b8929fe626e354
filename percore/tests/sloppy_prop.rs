//! Property test: the sloppy counter invariant `sum(spares) + in_use == central` after every
//! step of random acquire/release sequences on random cores, with random thresholds and
//! batches; spares never exceed the threshold after a release; reclaiming all spares leaves
//! exactly the references in use.
#![cfg(not(loom))]

use percore::counter::{SloppyConfigError, SloppyCounter};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Acquire { core: usize, v: usize },
    Release { core: usize, v: usize },
    Reclaim,
}

fn op(cores: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (0..cores, 1usize..6).prop_map(|(core, v)| Op::Acquire { core, v }),
        10 => (0..cores, 1usize..6).prop_map(|(core, v)| Op::Release { core, v }),
        1 => Just(Op::Reclaim),
    ]
}

fn case() -> impl Strategy<Value = (usize, usize, usize, Vec<Op>)> {
    (1usize..5, 1usize..12).prop_flat_map(|(cores, threshold)| {
        (Just(cores), Just(threshold), 1..=threshold, proptest::collection::vec(op(cores), 0..200))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn invariant_holds_after_every_step((cores, threshold, batch, ops) in case()) {
        let c = SloppyCounter::with_config(cores, threshold, batch).unwrap();
        let mut in_use = 0usize;
        for op in ops {
            match op {
                Op::Acquire { core, v } => {
                    c.acquire_on(core, v);
                    in_use += v;
                }
                // References are fungible: release only what is held, on any core.
                Op::Release { core, v } => {
                    if v > in_use {
                        continue;
                    }
                    c.release_on(core, v);
                    in_use -= v;
                    prop_assert!(c.spares(core).unwrap() <= threshold, "spares past threshold after release");
                }
                Op::Reclaim => {
                    prop_assert_eq!(c.reclaim_all(), in_use);
                    prop_assert_eq!(c.total_spares(), 0);
                }
            }
            prop_assert_eq!(c.total_spares() + in_use, c.central());
            prop_assert_eq!(c.in_use(), in_use);
        }
        prop_assert_eq!(c.reclaim_all(), in_use);
    }

    #[test]
    fn bad_batches_are_errors(threshold in 0usize..10, extra in 1usize..10) {
        prop_assert_eq!(
            SloppyCounter::with_config(2, threshold, threshold + extra).err(),
            Some(SloppyConfigError::BadBatch { batch: threshold + extra, threshold })
        );
        prop_assert!(SloppyCounter::with_config(2, threshold, 0).is_err());
    }
}
