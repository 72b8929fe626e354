//! The benchmark suite (crate `bench`) on this system: `init=bench-ours -- bench=NAME
//! workers=N key=value ...` (a bare `NAME` as the first word works too). Runs the benchmark
//! `reps` times (the fastest is reported), prints the same `bench-result` / `bench-error`
//! line and `bench-done` as `bench-linux`, gives back what it took, and exits (the kernel then
//! checks for leaks and powers off).
#![no_std]
#![no_main]

use bench::catalog::{DONE_LINE, ERROR_PREFIX, RESULT_PREFIX};
use bench::Platform;

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
    let mut ok = false;
    match bench::params::Params::parse(line) {
        Err(e) => libos::println!("{ERROR_PREFIX} name=? msg={e}"),
        Ok(params) => {
            let name = params.spec.name;
            match bench::ours::Ours::new() {
                Err(e) => libos::println!("{ERROR_PREFIX} name={name} msg=backend start-up: {e}"),
                Ok(p) => {
                    let reps = params.given("reps").unwrap_or(1).clamp(1, 100);
                    let mut best: Option<Result<bench::harness::Outcome, bench::Error>> = None;
                    for _ in 0..reps {
                        let r = bench::suite::run(&p, &params);
                        best = match (best, r) {
                            (Some(Ok(b)), Ok(o)) => Some(Ok(if o.ticks < b.ticks { o } else { b })),
                            (Some(Err(e)), _) | (_, Err(e)) => Some(Err(e)),
                            (None, r) => Some(r),
                        };
                        if matches!(best, Some(Err(_))) {
                            break;
                        }
                    }
                    match best {
                        Some(Ok(o)) => {
                            let hz = p.ticks_per_sec().max(1) as u128;
                            let ns = o.ticks as u128 * 1_000_000_000 / hz;
                            let busy_ns = o.busy_ticks as u128 * 1_000_000_000 / hz;
                            // The effective parameters, `k:v` joined by commas, without allocating.
                            let mut kv = [0u8; 256];
                            let mut n = 0;
                            for (k, v) in params.effective() {
                                let mut w = Writer { buf: &mut kv, n };
                                let _ = core::fmt::write(&mut w, format_args!("{}{k}:{v}", if n == 0 { "" } else { "," }));
                                n = w.n;
                            }
                            let kvs = if n == 0 { "-" } else { core::str::from_utf8(&kv[..n]).unwrap_or("-") };
                            libos::println!(
                                "{RESULT_PREFIX} name={name} system=ours cores={} workers={} ops={} ticks={} busy_ticks={} tsc_hz={} ns={ns} busy_ns={busy_ns} markers=true reps={reps} params={kvs} check=ok",
                                p.cores(),
                                o.workers,
                                o.ops,
                                o.ticks,
                                o.busy_ticks,
                                p.ticks_per_sec(),
                            );
                            ok = true;
                        }
                        Some(Err(e)) => libos::println!("{ERROR_PREFIX} name={name} msg={e}"),
                        None => libos::println!("{ERROR_PREFIX} name={name} msg=no run"),
                    }
                    p.finish();
                }
            }
        }
    }
    libos::println!("{DONE_LINE}");
    if ok {
        0
    } else {
        1
    }
}

struct Writer<'a> {
    buf: &'a mut [u8],
    n: usize,
}

impl core::fmt::Write for Writer<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let b = s.as_bytes();
        if self.n + b.len() > self.buf.len() {
            return Err(core::fmt::Error);
        }
        self.buf[self.n..self.n + b.len()].copy_from_slice(b);
        self.n += b.len();
        Ok(())
    }
}
