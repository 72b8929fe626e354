//! What a word is, and where each worker's piece of the input starts and ends.
//!
//! A word is a maximal run of ASCII letters `A-Za-z`, lower-cased. Every other byte (digits,
//! punctuation, UTF-8 continuation bytes, NUL, ...) separates words, so binary input is just
//! input with few words.

/// Whether `b` can be part of a word.
#[inline]
pub fn is_letter(b: u8) -> bool {
    b.is_ascii_alphabetic()
}

/// `b` lower-cased (only called on letters).
#[inline]
pub fn lower(b: u8) -> u8 {
    b | 0x20
}

/// FNV-1a over the lower-cased bytes of a word: the key's hash (partition and table slot).
#[inline]
pub fn hash_step(h: u64, b: u8) -> u64 {
    (h ^ lower(b) as u64).wrapping_mul(0x100_0000_01b3)
}
pub const HASH_INIT: u64 = 0xcbf2_9ce4_8422_2325;

/// The byte range of worker `w`'s split (of `n`): `[len*w/n, len*(w+1)/n)` moved forward so
/// that it starts at the beginning of a word: a word that begins in one split belongs to it
/// entirely, even when it runs into the next split (or through several).
pub fn split(input: &[u8], w: usize, n: usize) -> (usize, usize) {
    let len = input.len();
    let raw = |i: usize| ((len as u128 * i as u128) / n as u128) as usize;
    let adjust = |mut s: usize| {
        // A split that starts inside a word (the byte before it is a letter) skips the rest
        // of that word: the previous split reads it.
        if s > 0 && s < len && is_letter(input[s - 1]) {
            while s < len && is_letter(input[s]) {
                s += 1;
            }
        }
        s.min(len)
    };
    let (a, b) = (adjust(raw(w)), adjust(raw(w + 1)));
    // A huge word can cover a whole split: then this split is empty.
    (a, b.max(a))
}

/// Call `f(start, end, hash)` for every word that starts in `[from, to)` (it may end beyond
/// `to`). `hash` is [`hash_step`] folded over the word from [`HASH_INIT`].
#[inline]
pub fn for_each_word<E>(input: &[u8], from: usize, to: usize, mut f: impl FnMut(usize, usize, u64) -> Result<(), E>) -> Result<(), E> {
    let mut i = from;
    while i < to {
        if !is_letter(input[i]) {
            i += 1;
            continue;
        }
        let start = i;
        let mut h = HASH_INIT;
        while i < input.len() && is_letter(input[i]) {
            h = hash_step(h, input[i]);
            i += 1;
        }
        f(start, i, h)?;
    }
    Ok(())
}
