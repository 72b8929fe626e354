//! `wrmem`'s input: a deterministic English-like text made from a seed (MOSBENCH's Metis ran
//! its reverse index over text generated in memory, for runs without a disk).
//!
//! A vocabulary of 8192 pseudo-words (1 to 12 letters, each word made from its own index
//! and the seed) is drawn with a skew (a few words very often, most rarely, as in text);
//! every 7th word or so starts with a capital letter; words are separated by a space, or
//! now and then `, `, `. ` or a newline. The same seed and size give the same bytes on every
//! system (the host regenerates the text to check a run).

const VOCAB: u64 = 8192;

#[derive(Clone, Copy)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        // splitmix64 of the seed, never zero.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }
    /// xorshift64*.
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Write pseudo-word `i` of the vocabulary into `out` (at most 12 bytes); returns its length.
fn word(seed: u64, i: u64, out: &mut [u8; 12]) -> usize {
    let mut r = Rng::new(seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let len = 1 + (r.next() % 12) as usize;
    for b in out.iter_mut().take(len) {
        *b = b'a' + (r.next() % 26) as u8;
    }
    len
}

/// Fill `buf` with the text of `seed` (its first `buf.len()` bytes; the last word may be cut).
pub fn fill(seed: u64, buf: &mut [u8]) {
    let mut r = Rng::new(seed);
    let mut at = 0;
    let mut w = [0u8; 12];
    while at < buf.len() {
        // Skewed draw: small indices are much more likely.
        let a = r.next();
        let i = (a >> 16) % ((a & 0xffff) % VOCAB + 1);
        let len = word(seed, i, &mut w);
        if r.next().is_multiple_of(7) {
            w[0] = w[0].to_ascii_uppercase();
        }
        let sep: &[u8] = match r.next() % 32 {
            0 => b", ",
            1 => b". ",
            2 | 3 => b"\n",
            _ => b" ",
        };
        for &b in w[..len].iter().chain(sep) {
            if at == buf.len() {
                return;
            }
            buf[at] = b;
            at += 1;
        }
    }
}
