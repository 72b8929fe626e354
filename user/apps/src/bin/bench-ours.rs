//! The benchmark suite (crate `bench`) on this system: `init=bench-ours -- bench=NAME
//! workers=N key=value ...` (a bare `NAME` as the first word works too). Runs the benchmark
//! `reps` times (the fastest is reported), prints the same `bench-result` / `bench-error`
//! line and `bench-done` as `bench-linux`, gives back what it took, and exits (the kernel then
//! checks for leaks and powers off).
#![no_std]
#![no_main]

use bench::catalog::DONE_LINE;
use bench::report::{run_best, ErrorLine};

libos::main!(main);

fn main(args: &'static str) -> u64 {
    // `NAME k=v ...` or `bench=NAME k=v ...`: the first form is rewritten into a line buffer.
    let mut buf = [0u8; 512];
    let line: &str = match args.split_ascii_whitespace().next() {
        Some(first) if !first.contains('=') && args.len() + 6 <= buf.len() => {
            let t = args.trim_start();
            buf[..6].copy_from_slice(b"bench=");
            buf[6..6 + t.len()].copy_from_slice(t.as_bytes());
            core::str::from_utf8(&buf[..6 + t.len()]).unwrap_or("")
        }
        _ => args,
    };
    // The POSIX commutativity checker (docs/commute.md) instead of a benchmark.
    if line.split_ascii_whitespace().any(|w| w == bench::commute_posix::COMMAND_WORD) {
        let ok = match bench::ours::Ours::new() {
            Err(e) => {
                libos::println!("commute-error backend start-up: {e:?}");
                false
            }
            Ok(p) => {
                let r = bench::commute_posix::run(&p, bench::commute_posix::pick_word(line), |l| libos::println!("{l}"));
                if let Err(e) = &r {
                    libos::println!("commute-error {e}");
                }
                p.finish();
                r.is_ok()
            }
        };
        return if ok { 0 } else { 1 };
    }
    let ok = match bench::params::Params::parse(line) {
        Err(e) => {
            libos::println!("{}", ErrorLine("?", &e));
            false
        }
        Ok(params) => match bench::ours::Ours::new() {
            Err(e) => {
                libos::println!("{}", ErrorLine(params.spec.name, &format_args!("backend start-up: {e}")));
                false
            }
            Ok(p) => {
                // The region marker is a literal `out` from ring 3, which the kernel's I/O
                // bitmap allows, so the plugin always sees it.
                let run = run_best(&p, &params, true);
                libos::println!("{run}");
                p.finish();
                run.is_ok()
            }
        },
    };
    libos::println!("{DONE_LINE}");
    if ok {
        0
    } else {
        1
    }
}
