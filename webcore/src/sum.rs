//! `filesum`: the sum of a file's bytes (Corey's filesum application, section 6.2).

/// The sum of `data`'s bytes. Eight bytes at a time in 16-bit lanes (SWAR: the user target
/// has no SIMD), folded into the total before a lane can overflow; the memory traffic is the
/// point of the benchmark, so the arithmetic should not be the bottleneck.
///
/// Whole blocks of `WORDS_PER_FOLD` words go through a loop of fixed length with two words a
/// step and the even and odd bytes in separate accumulators: no per-word count, no
/// per-word test, so a word costs its load, two masks, a shift and two adds (about 7
/// instructions, against 14 when each word also counted towards the fold). The tail (less
/// than a block) goes a word, then a byte, at a time.
pub fn filesum(data: &[u8]) -> u64 {
    const LANES: u64 = 0x00FF_00FF_00FF_00FF;
    // Each accumulator adds one byte (at most 255) per lane per word: 128 words keep a lane
    // at most 32 640, under 65 536.
    const WORDS_PER_FOLD: usize = 128;
    let word = |c: &[u8]| u64::from_le_bytes(<[u8; 8]>::try_from(c).unwrap_or([0; 8]));
    let mut total = 0u64;
    let mut blocks = data.chunks_exact(8 * WORDS_PER_FOLD);
    for b in blocks.by_ref() {
        let (mut even, mut odd) = (0u64, 0u64);
        for pair in b.chunks_exact(16) {
            let (w0, w1) = (word(&pair[..8]), word(&pair[8..]));
            even += (w0 & LANES) + (w1 & LANES);
            odd += ((w0 >> 8) & LANES) + ((w1 >> 8) & LANES);
        }
        total += fold(even) + fold(odd);
    }
    let mut tail = blocks.remainder().chunks_exact(8);
    let mut acc = 0u64;
    for c in tail.by_ref() {
        let w = word(c);
        acc += (w & LANES) + ((w >> 8) & LANES);
    }
    total += fold(acc);
    total + tail.remainder().iter().map(|&b| b as u64).sum::<u64>()
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
        for len in [0, 1, 7, 8, 9, 15, 16, 17, 1016, 1023, 1024, 1025, 1032, 2047, 2048, 4096 + 3, 65536, 1 << 20] {
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
