//! The instruction-count gate's guest (docs/insngate.md): benchmarks of the suite (crate
//! `bench`), one after another in one boot, one worker each, each run once between the region
//! markers, so the `insncount` plugin (with `regions=on`) gives one region per row, in order.
//!
//! `init=insngate -- ROW ROW ...`, each ROW `NAME` or `NAME:k=v,k=v` (the benchmark's
//! parameters; the rest are the catalog's defaults). Prints `insngate-row index=I name=NAME
//! ops=N` per row, or `insngate-error index=I name=NAME msg=...` and stops at the first
//! failure; then `insngate-done rows=N`. The host pairs the I-th row line with the I-th
//! region record.
#![no_std]
#![no_main]

use bench::params::Params;

libos::main!(main);

/// Longest `bench=NAME workers=1 k=v ...` line a row may expand to.
const LINE_MAX: usize = 256;

/// Expand `NAME:k=v,k=v` into `bench=NAME workers=1 k=v k=v` in `buf`.
fn expand<'a>(row: &str, buf: &'a mut [u8; LINE_MAX]) -> Result<&'a str, &'static str> {
    let (name, kv) = row.split_once(':').unwrap_or((row, ""));
    if name.is_empty() {
        return Err("empty benchmark name");
    }
    let mut n = 0;
    let mut put = |s: &str| -> Result<(), &'static str> {
        let b = s.as_bytes();
        if n + b.len() > LINE_MAX {
            return Err("row too long");
        }
        buf[n..n + b.len()].copy_from_slice(b);
        n += b.len();
        Ok(())
    };
    put("bench=")?;
    put(name)?;
    put(" workers=1")?;
    for p in kv.split(',').filter(|p| !p.is_empty()) {
        if !p.contains('=') {
            return Err("a parameter is not k=v");
        }
        put(" ")?;
        put(p)?;
    }
    core::str::from_utf8(&buf[..n]).map_err(|_| "not UTF-8")
}

fn main(args: &'static str) -> u64 {
    if args.split_ascii_whitespace().next().is_none() {
        libos::println!("insngate-error index=0 name=- msg=no rows given (init=insngate -- NAME[:k=v,...] ...)");
        return 2;
    }
    let p = match bench::ours::Ours::new() {
        Ok(p) => p,
        Err(e) => {
            libos::println!("insngate-error index=0 name=- msg=backend start-up: {e}");
            return 1;
        }
    };
    let mut done = 0;
    let mut ok = true;
    for (i, row) in args.split_ascii_whitespace().enumerate() {
        let mut buf = [0u8; LINE_MAX];
        let line = match expand(row, &mut buf) {
            Ok(l) => l,
            Err(why) => {
                libos::println!("insngate-error index={i} name={row} msg={why}");
                ok = false;
                break;
            }
        };
        let params = match Params::parse(line) {
            Ok(p) => p,
            Err(e) => {
                libos::println!("insngate-error index={i} name={row} msg={e}");
                ok = false;
                break;
            }
        };
        match bench::suite::run(&p, &params) {
            Ok(o) => {
                libos::println!("insngate-row index={i} name={} ops={}", params.spec.name, o.ops);
                done += 1;
            }
            Err(e) => {
                libos::println!("insngate-error index={i} name={} msg={e}", params.spec.name);
                ok = false;
                break;
            }
        }
    }
    p.finish();
    libos::println!("insngate-done rows={done}");
    if ok {
        0
    } else {
        1
    }
}
