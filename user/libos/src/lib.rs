//! The library OS (seeds/000 section 5; DESIGN.md "Layers"): program start-up, one typed
//! wrapper per system call, console output, time, the per-core heap, cfork, descriptors on
//! shares, threads, and loading programs from the boot image. Every user program links it.
//!
//! A program is a `#![no_std] #![no_main]` binary that names its entry with [`main!`]:
//!
//! ```ignore
//! #![no_std]
//! #![no_main]
//! libos::main!(main);
//! fn main(args: &'static str) -> u64 {
//!     libos::println!("hello {args}");
//!     0
//! }
//! ```
//!
//! The returned value is the exit code passed to `pcore_halt`. See docs/user.md and
//! docs/libos.md.
#![no_std]

extern crate alloc;

pub use abi;

/// For the `global_asm!` stubs that leave a Rust frame for another stack and come back to it
/// later (`exec`'s embedded programs, the Linux personality's entries): push the System V
/// callee-saved registers, in the order `return_to_saved_frame!` pops them. The stub then
/// stores rsp where its way back finds it.
#[allow(unused_macros)]
macro_rules! push_callee_saved {
    () => {
        "push rbp\npush rbx\npush r12\npush r13\npush r14\npush r15"
    };
}

/// The way back into a frame `push_callee_saved!` saved, as a function `(saved_rsp, value)`:
/// switch to `saved_rsp` (rdi), pop the callee-saved registers and return `value` (rsi) from
/// the call that saved them.
#[allow(unused_macros)]
macro_rules! return_to_saved_frame {
    () => {
        "mov rsp, rdi\nmov rax, rsi\npop r15\npop r14\npop r13\npop r12\npop rbx\npop rbp\nret"
    };
}

pub mod cfork;
pub mod console;
pub mod cores;
pub mod ctx;
pub mod exec;
pub mod fd;
pub mod fs;
pub mod heap;
pub mod launch;
pub mod layout;
pub mod linux;
pub mod mman;
pub mod net;
pub mod ppc;
pub mod process;
pub mod ring;
mod start;
pub mod sys;
pub mod thread;
pub mod time;

pub use cfork::{cfork, CforkOpts, Child};
pub use launch::{args, image_end, pcore, root_share, self_halt, start_info, started_by_kernel, LaunchExt, LAUNCH_MAGIC};
pub use start::{exit, PANIC_EXIT_CODE};

/// Declare the program's entry: `fn(args: &'static str) -> u64` (the exit code).
#[macro_export]
macro_rules! main {
    ($f:path) => {
        #[doc(hidden)]
        #[allow(unsafe_code)]
        #[no_mangle]
        pub fn __rt_user_main(args: &'static str) -> u64 {
            $f(args)
        }
    };
}

/// The calling core's index (from the context page).
pub fn core_id() -> u64 {
    ctx::ctx().core
}

/// Parse a decimal or `0x` hexadecimal number, with an optional `k`/`m`/`g` suffix
/// (binary multiples), as program arguments use them ("64m", "8").
pub fn parse_u64(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, mult) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let v = if let Some(hex) = digits.strip_prefix("0x") {
        u64::from_str_radix(hex, 16).ok()?
    } else {
        digits.parse::<u64>().ok()?
    };
    v.checked_mul(mult)
}
