//! hog [STEP]: allocates and touches STEP bytes (default 16m) at a time until memory runs
//! out, to show how running out of memory ends a program (a failed allocation panics with
//! exit code 101; a page the kernel cannot supply ends the context with a page fault).
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec::Vec;

libos::main!(main);

fn main(args: &'static str) -> u64 {
    let step = args.split_whitespace().next().and_then(libos::parse_u64).unwrap_or(16 << 20) as usize;
    let mut held: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut v: Vec<u8> = Vec::new();
        if v.try_reserve_exact(step).is_err() {
            libos::println!("hog: out of memory after {} MiB", held.len() * step >> 20);
            return 2;
        }
        // Touch every page: the kernel allocates pages on first touch.
        v.resize(step, 1);
        held.push(v);
    }
}
