//! Property test of the seqlock's ranged write (`SeqLock::write_words`): random sequences of
//! ranged writes (some out of bounds, some storing nothing) against a plain `Vec<u64>` model;
//! after every write a whole read and a random partial read equal the model, and the
//! generation moved by exactly one. (The buffer cache's byte-ranged writes on top of it are
//! property-tested in `tests/bcache.rs`.)
#![cfg(not(loom))]

use percore::seqlock::SeqLock;
use proptest::prelude::*;

const N: usize = 16;

#[derive(Clone, Debug)]
enum Op {
    /// `set_words(first, words)`; `first + len` may run past the end (then refused whole).
    Words { first: usize, words: Vec<u64> },
    /// One `set` per (index, value); indexes past the end are refused one by one.
    Sets(Vec<(usize, u64)>),
    /// A write that stores nothing (a tag that did not match).
    Nothing,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..N + 2, proptest::collection::vec(any::<u64>(), 0..N + 1)).prop_map(|(first, words)| Op::Words { first, words }),
        3 => proptest::collection::vec((0..N + 2, any::<u64>()), 0..5).prop_map(Op::Sets),
        1 => Just(Op::Nothing),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Catches: a ranged write storing words it was not given (or at the wrong index), a
    /// refused `set_words` storing part of its words, a `get` not seeing the writer's own
    /// earlier stores, a generation not moved by a ranged write (a reader would accept a copy
    /// that overlapped it).
    #[test]
    fn ranged_writes_match_a_plain_model(init in any::<[u64; N]>(), ops in proptest::collection::vec(op(), 1..40), reads in proptest::collection::vec((0..N, 0..N + 1), 40)) {
        let s = SeqLock::new(init);
        let mut model = init.to_vec();
        for (op, &(first, len)) in ops.iter().zip(reads.iter().cycle()) {
            let g = s.generation();
            s.write_words(|w| match op {
                Op::Words { first, words } => {
                    let fits = first + words.len() <= N;
                    assert_eq!(w.set_words(*first, words), fits);
                    if fits {
                        model[*first..*first + words.len()].copy_from_slice(words);
                    }
                }
                Op::Sets(sets) => {
                    for &(i, v) in sets {
                        assert_eq!(w.set(i, v), i < N);
                        if i < N {
                            model[i] = v;
                        }
                        assert_eq!(w.get(i), model.get(i).copied(), "get after set");
                    }
                }
                Op::Nothing => {}
            });
            prop_assert_eq!(s.generation(), g + 1);
            prop_assert_eq!(s.try_read().map(|v| v.to_vec()), Some(model.clone()));
            let len = len.min(N - first);
            let mut part = vec![0u64; len];
            prop_assert!(s.try_read_ranges(&mut [(first, &mut part)]));
            prop_assert_eq!(&part[..], &model[first..first + len]);
        }
        prop_assert_eq!(s.read().to_vec(), model);
    }
}
