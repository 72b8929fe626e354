//! Metis MapReduce (mapreduce/, docs/metis.md) as benchmark rows, and the glue between the two
//! crates' error types. The systems' environments are [`crate::metis_ours`] and
//! [`crate::metis_linux`]; a backend hands one out through
//! [`Platform::with_metis_env`](crate::Platform::with_metis_env).
//!
//! The rows (`metis_wc`, `metis_wri`, `metis_wrmem`): one operation is one input byte; the
//! input is `size` bytes of text generated from `seed` (mapreduce/src/gen.rs), as the bench
//! guests have no file to read. `metis_wc` and `metis_wri` time map + reduce + merge over a
//! text generated beforehand (standing in for a file already in memory); `metis_wrmem` also
//! times the generation (the whole in-memory job, as MOSBENCH's wrmem). The output goes to a
//! digest only; the run fails its check if the digest's line count is not the number of keys.
//! Workers: one per core; memory layout: per-core address ranges on ours, one address space
//! (transparent huge pages as the kernel's default) on Linux. The result line carries each
//! phase's time and soft faults too (`phase_map_ns=... phase_map_faults=...`, bench/src/report.rs).
//! `prep=0` runs reduce without the prepared output pages (Corey's reduce, which faults in
//! fresh pages: `mapreduce::run_with`); `tlbgrow=1` turns on the emulator knob
//! `mapreduce::Tuning::tlb_grow` (`cargo xtask bench --param tlbgrow=1`).

use mapreduce::{App, Marked};

use crate::harness::{Outcome, PhaseTimes};
use crate::params::Params;
use crate::{Error, Platform};

/// A bench error as a MapReduce error.
pub fn from_bench(e: Error) -> mapreduce::Error {
    match e {
        Error::Sys { what, code } => mapreduce::Error::Sys { what, code },
        Error::Unsupported(w) => mapreduce::Error::Unsupported(w),
        Error::Check(w) | Error::Param(w) => mapreduce::Error::Param(w),
    }
}

/// A MapReduce error as a bench error (the result line carries static text only, so the sizes
/// of a `NoMemory` are lost here; `cargo xtask metis` prints them).
pub fn to_bench(e: mapreduce::Error) -> Error {
    match e {
        mapreduce::Error::Sys { what, code } => Error::Sys { what, code },
        mapreduce::Error::Unsupported(w) => Error::Unsupported(w),
        mapreduce::Error::Param(w) | mapreduce::Error::Input(w) | mapreduce::Error::Output(w) => Error::Param(w),
        mapreduce::Error::NoMemory { .. } => Error::Param("size: the intermediate data does not fit in memory (NoMemory)"),
        mapreduce::Error::InputTooLarge { .. } => Error::Param("size: the text does not fit in memory (NoMemory)"),
    }
}

/// The share-nothing calibration loop (`calib`, a tenth of its catalog size) on `n` workers,
/// unmarked, fastest of three: (steps, ticks).
pub fn calibrate<P: Platform>(p: &P, n: usize) -> Option<(u64, u64)> {
    let mut c = Params::parse("bench=calib iters=4000000").ok()?;
    c.workers = n;
    c.marked = false;
    (0..3)
        .filter_map(|_| crate::suite::run(p, &c).ok())
        .map(|o| (o.ops, o.ticks))
        .min_by_key(|&(ops, t)| (t as u128 * 1_000_000 / ops.max(1) as u128) as u64)
}

/// One run of a `metis_*` row on `n` workers.
pub fn row<P: Platform>(p: &P, params: &Params, n: usize) -> Result<Outcome, Error> {
    let size = params.count("size")?;
    let seed = params.get("seed")?;
    let app = if params.spec.name == "metis_wc" { App::Wc } else { App::Wri };
    let gen_timed = params.spec.name == "metis_wrmem";
    // `phase=1|2|3` (a harness option, not a catalog parameter) marks map, reduce or merge
    // alone, so a plugin counts one phase (`cargo xtask model fig10`); absent or 0, all three.
    let marked = match (params.marked, params.given("phase")) {
        (false, _) => Marked::None,
        (true, None | Some(0)) => Marked::All,
        (true, Some(1)) => Marked::Map,
        (true, Some(2)) => Marked::Reduce,
        (true, Some(3)) => Marked::Merge,
        (true, Some(_)) => return Err(Error::Param("phase: 0 (all), 1 (map), 2 (reduce) or 3 (merge)")),
    };
    // `prep=0`: reduce allocates its output fresh, as in Corey's measurement
    // (`mapreduce::run_with`); `tlbgrow=1`: the emulator knob `mapreduce::Tuning::tlb_grow`.
    let prep = params.get("prep")? != 0;
    let tlb_grow = params.get("tlbgrow")? != 0;
    let mut result = Err(Error::Unsupported("metis"));
    p.with_metis_env(&mut |env| {
        result = (|| {
            let t0 = env.ticks();
            let text = env.text(size, seed).map_err(to_bench)?;
            let gen = env.ticks() - t0;
            let mut digest = mapreduce::Digest::default();
            let r = mapreduce::run_with(env, app, text, n, n * 8, marked, mapreduce::Tuning { prep, tlb_grow }, &mut digest).map_err(to_bench)?;
            if r.words == 0 || digest.lines != r.keys as u64 {
                return Err(Error::Check("metis: no words, or output lines differ from keys"));
            }
            let ticks = r.map.ticks + r.reduce.ticks + r.merge.ticks + if gen_timed { gen } else { 0 };
            // The phases (wrmem's generation is in `ticks` only).
            let phases = PhaseTimes { names: ["map", "reduce", "merge"], ticks: [r.map.ticks, r.reduce.ticks, r.merge.ticks], faults: [r.map.faults, r.reduce.faults, r.merge.faults] };
            Ok(Outcome { workers: n, ops: size as u64, ticks, busy_ticks: ticks * n as u64, phases: Some(phases) })
        })();
    })?;
    result
}
