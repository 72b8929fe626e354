//! The files of `fstest`'s disk image (docs/fs.md), shared by the guest test (`fstest`, which
//! checks them byte for byte) and the host (`cargo xtask test`, which writes them into a
//! directory and makes the image with `cargo xtask fs mkimage`), both from this crate; `core`
//! only. Sizes are chosen for 4 KiB blocks: direct blocks only, single-indirect, and
//! double-indirect (past 12 + 1024 blocks), plus an empty file, a hole-free one-byte file and a
//! 255-byte name.

/// (path, length, seed); seed 0 means the bytes are `HELLO`.
pub const FILES: [(&str, usize, u8); 8] = [
    ("/hello.txt", HELLO.len(), 0),
    ("/empty", 0, 1),
    ("/one", 1, 2),
    ("/direct.bin", 40_000, 3),
    ("/indirect.bin", 300_000, 4),
    ("/double.bin", 4_300_123, 5),
    ("/sub/inner.txt", 6, 6),
    ("/sub/deeper/leaf", 5000, 7),
];

/// Files `fstest` writes (in `/guest`, which it makes), and the host then reads from the image
/// with its own reader after `e2fsck -fn` found it clean. `/guest/big.bin` is written in odd
/// pieces; `/guest/trunc.bin` is written at 300 000 bytes then truncated to its length here.
/// `/guest/far.bin` is larger than one block group of the image (`cargo xtask test` makes it
/// with groups of 4 MiB), so some of its blocks are in a group past 0 whatever the allocator
/// picks; the host checks that they are.
pub const GUEST_FILES: [(&str, usize, u8); 5] = [
    ("/guest/a.txt", 100, 21),
    ("/guest/big.bin", 300_000, 22),
    ("/guest/dir/deep.bin", 70_000, 23),
    ("/guest/trunc.bin", 50_001, 24),
    ("/guest/far.bin", FAR_LEN, 25),
];

/// `/guest/far.bin`'s length: more than a 4 MiB block group.
pub const FAR_LEN: usize = 4_500_000;

/// The size of `fstest`'s image in MiB, and its blocks per group (4 KiB blocks): six groups.
pub const IMAGE_MIB: u64 = 24;
pub const IMAGE_BLOCKS_PER_GROUP: u32 = 1024;

/// Names `fstest` makes and removes again: the host checks they are gone.
pub const GUEST_GONE: [&str; 2] = ["/guest/gone.txt", "/guest/gonedir"];

/// A file in `/sub` whose name is the longest ext2 allows.
pub const LONG_NAME_LEN: usize = 255;
pub const LONG_NAME_BYTE: u8 = b'n';

pub const HELLO: &[u8] = b"hello from the host\n";

/// Byte `i` of a file with `seed`.
pub fn byte(seed: u8, i: usize) -> u8 {
    if seed == 0 {
        return HELLO.get(i).copied().unwrap_or(0);
    }
    let x = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed as u32 * 0x9E37);
    (x >> 13) as u8 ^ (i >> 12) as u8
}
