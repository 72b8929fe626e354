//! `filesum`: the sum of a file's bytes (Corey's filesum application, section 6.2).

/// The sum of `data`'s bytes. Eight bytes at a time in 16-bit lanes (SWAR: the user target
/// has no SIMD), folded into the total before a lane can overflow; the memory traffic is the
/// point of the benchmark, so the arithmetic should not be the bottleneck.
pub fn filesum(data: &[u8]) -> u64 {
    const LANES: u64 = 0x00FF_00FF_00FF_00FF;
    // 255 * 2 per lane per word; 128 words keep a lane under 65 536.
    const WORDS_PER_FOLD: usize = 128;
    let mut total = 0u64;
    let mut chunks = data.chunks_exact(8);
    let mut acc = 0u64;
    let mut n = 0usize;
    for c in chunks.by_ref() {
        // One 8-byte load; `try_from` of an exact chunk cannot fail.
        let w = u64::from_le_bytes(<[u8; 8]>::try_from(c).unwrap_or([0; 8]));
        acc += (w & LANES) + ((w >> 8) & LANES);
        n += 1;
        if n == WORDS_PER_FOLD {
            total += fold(acc);
            acc = 0;
            n = 0;
        }
    }
    total += fold(acc);
    total + chunks.remainder().iter().map(|&b| b as u64).sum::<u64>()
}

/// The four 16-bit lanes added up.
fn fold(acc: u64) -> u64 {
    (acc & 0xFFFF) + ((acc >> 16) & 0xFFFF) + ((acc >> 32) & 0xFFFF) + (acc >> 48)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    fn naive(d: &[u8]) -> u64 {
        d.iter().map(|&b| b as u64).sum()
    }

    #[test]
    fn all_ones_at_every_length_around_the_fold() {
        // 0xFF everywhere is the worst case for lane overflow.
        for len in [0, 1, 7, 8, 9, 1023, 1024, 1025, 2048, 4096 + 3, 1 << 20] {
            let d: Vec<u8> = core::iter::repeat(0xFF).take(len).collect();
            assert_eq!(filesum(&d), 255 * len as u64, "len {len}");
        }
    }

    proptest! {
        #[test]
        fn matches_the_naive_sum(d in proptest::collection::vec(any::<u8>(), 0..5000)) {
            prop_assert_eq!(filesum(&d), naive(&d));
        }
    }
}
