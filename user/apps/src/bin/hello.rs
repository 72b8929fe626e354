//! Prints its arguments: the smallest program, for checking start-up and the console.
#![no_std]
#![no_main]
#![deny(unsafe_code)]

libos::main!(main);

fn main(args: &'static str) -> u64 {
    libos::println!("hello from user mode: {} argument(s)", args.split_whitespace().count());
    for (i, a) in args.split_whitespace().enumerate() {
        libos::println!("  arg {i}: {a}");
    }
    0
}
