//! Linux's initial process stack on x86-64 (the System V ABI's, as `execve` builds it): at
//! `rsp`, 16-byte aligned, `argc`, then `argv[0..argc]` and a null, `envp[..]` and a null,
//! then the auxiliary vector of `(type, value)` pairs ending with `AT_NULL`; above them the
//! strings and `AT_RANDOM`'s 16 bytes. Pure logic: [`build`] writes the block into a buffer
//! that stands for the top of the stack; host tests read it back.

use core::fmt;

pub const AT_NULL: u64 = 0;
pub const AT_PHDR: u64 = 3;
pub const AT_PHENT: u64 = 4;
pub const AT_PHNUM: u64 = 5;
pub const AT_PAGESZ: u64 = 6;
pub const AT_BASE: u64 = 7;
pub const AT_FLAGS: u64 = 8;
pub const AT_ENTRY: u64 = 9;
pub const AT_UID: u64 = 11;
pub const AT_EUID: u64 = 12;
pub const AT_GID: u64 = 13;
pub const AT_EGID: u64 = 14;
pub const AT_HWCAP: u64 = 16;
pub const AT_CLKTCK: u64 = 17;
pub const AT_SECURE: u64 = 23;
pub const AT_RANDOM: u64 = 25;
pub const AT_EXECFN: u64 = 31;

/// What the auxiliary vector says besides the strings.
#[derive(Debug, Clone, Copy, Default)]
pub struct AuxInfo {
    pub phdr: u64,
    pub phent: u64,
    pub phnum: u64,
    pub entry: u64,
    pub hwcap: u64,
    /// `AT_RANDOM`'s 16 bytes (the C library's stack-protector and pointer-guard seed).
    pub random: [u8; 16],
}

/// Entries of the auxiliary vector [`build`] writes, `AT_NULL` included.
pub const AUX_ENTRIES: usize = 17;

/// The block does not fit: Linux's `E2BIG`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooBig {
    pub needed: usize,
    pub room: usize,
}

impl fmt::Display for TooBig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "arguments and environment too large: {} bytes, the initial stack holds {}", self.needed, self.room)
    }
}

/// The bytes the initial block of these arguments needs (what `build` checks against its
/// room; `execve` checks it before it replaces anything, for `E2BIG`).
pub fn needed(argv: &[&[u8]], envp: &[&[u8]], execfn: &[u8]) -> usize {
    let strings: usize = argv.iter().chain(envp.iter()).map(|s| s.len() + 1).sum::<usize>() + execfn.len() + 1 + 16;
    let vectors = 8 * (1 + argv.len() + 1 + envp.len() + 1) + 16 * AUX_ENTRIES;
    strings.next_multiple_of(16) + vectors + 16
}

/// Write the initial stack into `out`, which stands for `[top - out.len(), top)`: `argv`
/// and `envp` strings (without their NULs), `execfn` (`AT_EXECFN`). Returns the initial
/// `rsp` (where `argc` is). `top` must be 16-byte aligned.
pub fn build(out: &mut [u8], top: u64, argv: &[&[u8]], envp: &[&[u8]], execfn: &[u8], aux: &AuxInfo) -> Result<u64, TooBig> {
    let vectors = 8 * (1 + argv.len() + 1 + envp.len() + 1) + 16 * AUX_ENTRIES;
    let needed = needed(argv, envp, execfn);
    if needed > out.len() || argv.len() + envp.len() > MAX_STRINGS {
        return Err(TooBig { needed, room: out.len() });
    }
    let base = top - out.len() as u64;
    let mut at = top; // next free byte below, growing down
    let mut put = |bytes: &[u8], nul: bool, out: &mut [u8]| -> u64 {
        let len = bytes.len() + usize::from(nul);
        at -= len as u64;
        let o = (at - base) as usize;
        out[o..o + bytes.len()].copy_from_slice(bytes);
        if nul {
            out[o + bytes.len()] = 0;
        }
        at
    };
    let random = put(&aux.random, false, out);
    let execfn_at = put(execfn, true, out);
    let mut ptrs = Fixed { v: [0; MAX_STRINGS], n: 0 };
    for s in argv.iter().chain(envp.iter()) {
        ptrs.push(put(s, true, out));
    }
    let strings_lo = at;
    let rsp = (strings_lo - vectors as u64) & !15;
    let mut w = rsp;
    let mut word = |v: u64, out: &mut [u8]| {
        let o = (w - base) as usize;
        out[o..o + 8].copy_from_slice(&v.to_le_bytes());
        w += 8;
    };
    word(argv.len() as u64, out);
    for i in 0..argv.len() {
        word(ptrs.get(i), out);
    }
    word(0, out);
    for i in 0..envp.len() {
        word(ptrs.get(argv.len() + i), out);
    }
    word(0, out);
    let auxv = [
        (AT_PHDR, aux.phdr),
        (AT_PHENT, aux.phent),
        (AT_PHNUM, aux.phnum),
        (AT_PAGESZ, 4096),
        (AT_BASE, 0),
        (AT_FLAGS, 0),
        (AT_ENTRY, aux.entry),
        (AT_UID, 0),
        (AT_EUID, 0),
        (AT_GID, 0),
        (AT_EGID, 0),
        (AT_HWCAP, aux.hwcap),
        (AT_CLKTCK, 100),
        (AT_SECURE, 0),
        (AT_RANDOM, random),
        (AT_EXECFN, execfn_at),
        (AT_NULL, 0),
    ];
    const _: () = assert!(AUX_ENTRIES == 17);
    for (t, v) in auxv {
        word(t, out);
        word(v, out);
    }
    debug_assert!(w <= strings_lo);
    Ok(rsp)
}

/// The strings' addresses, without an allocator.
struct Fixed {
    v: [u64; MAX_STRINGS],
    n: usize,
}

/// Most `argv` + `envp` strings one initial stack takes (more is `TooBig`).
pub const MAX_STRINGS: usize = 1024;

impl Fixed {
    fn push(&mut self, x: u64) {
        self.v[self.n] = x;
        self.n += 1;
    }
    fn get(&self, i: usize) -> u64 {
        self.v[i]
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    const TOP: u64 = 0x7000_0000;

    fn word(b: &[u8], top: u64, at: u64) -> u64 {
        let o = (at - (top - b.len() as u64)) as usize;
        u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
    }

    fn string(b: &[u8], top: u64, at: u64) -> Vec<u8> {
        let o = (at - (top - b.len() as u64)) as usize;
        b[o..].iter().take_while(|&&c| c != 0).copied().collect()
    }

    #[test]
    fn the_block_reads_back_as_linux_lays_it_out() {
        let mut b = std::vec![0u8; 8192];
        let aux = AuxInfo { phdr: 0x400040, phent: 56, phnum: 5, entry: 0x401000, hwcap: 0x178bfbff, random: [7; 16] };
        let rsp = build(&mut b, TOP, &[b"/bin/prog", b"a b"], &[b"HOME=/"], b"/bin/prog", &aux).unwrap();
        assert_eq!(rsp % 16, 0);
        assert_eq!(word(&b, TOP, rsp), 2);
        assert_eq!(string(&b, TOP, word(&b, TOP, rsp + 8)), b"/bin/prog");
        assert_eq!(string(&b, TOP, word(&b, TOP, rsp + 16)), b"a b");
        assert_eq!(word(&b, TOP, rsp + 24), 0);
        assert_eq!(string(&b, TOP, word(&b, TOP, rsp + 32)), b"HOME=/");
        assert_eq!(word(&b, TOP, rsp + 40), 0);
        let mut aux_seen = std::collections::BTreeMap::new();
        let mut at = rsp + 48;
        loop {
            let (t, v) = (word(&b, TOP, at), word(&b, TOP, at + 8));
            at += 16;
            if t == AT_NULL {
                break;
            }
            aux_seen.insert(t, v);
        }
        assert_eq!(aux_seen.len(), AUX_ENTRIES - 1);
        assert_eq!(aux_seen[&AT_PHDR], 0x400040);
        assert_eq!(aux_seen[&AT_PHENT], 56);
        assert_eq!(aux_seen[&AT_PHNUM], 5);
        assert_eq!(aux_seen[&AT_PAGESZ], 4096);
        assert_eq!(aux_seen[&AT_ENTRY], 0x401000);
        assert_eq!(aux_seen[&AT_HWCAP], 0x178bfbff);
        assert_eq!(aux_seen[&AT_SECURE], 0);
        assert_eq!(string(&b, TOP, aux_seen[&AT_EXECFN]), b"/bin/prog");
        let r = aux_seen[&AT_RANDOM];
        let o = (r - (TOP - b.len() as u64)) as usize;
        assert_eq!(&b[o..o + 16], &[7; 16]);
        // Everything lies inside the block, above rsp.
        assert!(at <= TOP && r + 16 <= TOP);
    }

    #[test]
    fn too_much_is_refused() {
        let mut b = std::vec![0u8; 512];
        let long = std::vec![b'x'; 600];
        let e = build(&mut b, TOP, &[&long], &[], b"/p", &AuxInfo::default()).unwrap_err();
        assert!(e.needed > 512 && e.room == 512);
        let many: Vec<&[u8]> = (0..MAX_STRINGS + 1).map(|_| &b"a"[..]).collect();
        let mut big = std::vec![0u8; 1 << 20];
        assert!(build(&mut big, TOP, &many, &[], b"/p", &AuxInfo::default()).is_err());
    }
}
