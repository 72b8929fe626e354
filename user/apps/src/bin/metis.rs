//! Metis MapReduce on this system (Corey section 6.1, figure 10; docs/metis.md):
//! `init=metis -- wc|wri|wrmem [input=NAME] [size=BYTES] [seed=S] [workers=N] [parts=P]
//! [layout=per-core|shared|private] [print=0|1] [out=/PATH]` (the words: mapreduce/src/cli.rs).
//!
//! The input is a file of the boot image (`cargo xtask metis` packs it), a file of the attached
//! disk when its name is a path (`input=/dir/file`; `cargo xtask metis --from-disk`) or, for `wrmem`,
//! text generated in memory. One worker thread per core (bench's backend); the layout says
//! where each worker's intermediate data lives (bench/src/metis_ours.rs). The output is printed
//! over the console between `metis-begin` and `metis-end` (unless `print=0`), then its digest,
//! the phase times and soft faults; with `out=/PATH` it is also written to that file of the
//! attached disk (ext2, `libos::fs`), created before the input is read (so an unwritable path
//! fails first), synced before `metis-done`; the file system is unmounted before exit.
//! Everything taken is given back before exit (the kernel checks for leaks after the program
//! ends).
#![no_std]
#![no_main]

extern crate alloc;

use bench::metis_ours::{DiskOut, Layout, OursEnv};
use mapreduce::cli::{self, Input};

libos::main!(main);

fn out(b: &[u8]) {
    libos::console::write_all(b);
}

const KSTATS: [&str; 9] = ["syscalls", "soft_faults", "tlb_flushes_local", "shootdown_ipis_sent", "ipis_received", "interrupts", "timer_ticks", "context_switches", "lock_spin_waits"];

/// [`KSTATS`] summed over every core.
fn kstats() -> [u64; 9] {
    let mut t = [0u64; 9];
    for c in 0..libos::start_info().cores {
        if let Ok(s) = libos::sys::core_stats(c) {
            let v = [s.syscalls, s.soft_faults, s.tlb_flushes_local, s.shootdown_ipis_sent, s.ipis_received, s.interrupts, s.timer_ticks, s.context_switches, s.lock_spin_waits];
            for (a, b) in t.iter_mut().zip(v) {
                *a += b;
            }
        }
    }
    t
}

/// Unmount the disk's file system if the input or the output used it (writes back what is
/// left and frees the device object; the kernel's leak check follows the exit).
fn unmount() {
    if libos::fs::mounted() {
        if let Err(e) = libos::fs::unmount() {
            out(alloc::format!("metis: unmount failed: {}\n", e.as_str()).as_bytes());
        }
    }
}

fn main(args: &'static str) -> u64 {
    let mut o = out;
    let opts = match cli::parse(args) {
        Ok(v) => v,
        Err(e) => {
            cli::print_error(&mut o, &e);
            return 2;
        }
    };
    let Some(layout) = Layout::parse(opts.layout) else {
        cli::print_error(&mut o, &"unknown layout (per-core, shared or private)");
        return 2;
    };
    // The output file first: a path that cannot be written ends the run before anything else.
    let mut file = match opts.out {
        None => None,
        Some(path) => match DiskOut::create(path) {
            Ok(f) => Some(f),
            Err(e) => {
                cli::print_error(&mut o, &alloc::format!("cannot write the output {path}: {e}"));
                unmount();
                return 1;
            }
        },
    };
    let p = match bench::ours::Ours::new() {
        Ok(p) => p,
        Err(e) => {
            cli::print_error(&mut o, &e);
            drop(file);
            unmount();
            return 1;
        }
    };
    let ok = match OursEnv::new(&p, layout) {
        Err(e) => {
            cli::print_error(&mut o, &e);
            false
        }
        Ok(env) => {
            let input = match opts.input {
                // A path (`/...`) is a file of the attached disk; a bare name, of the boot image.
                Input::File(name) if name.starts_with('/') => env.input_from_disk(name),
                Input::File(name) => env.input_from_image(name),
                Input::Generated { size, seed } => env.input_generated(size, seed),
            };
            let ok = match input {
                Ok(input) => {
                    let before = kstats();
                    let ok = cli::run_and_print(&env, &opts, input, &mut o, file.as_mut().map(|f| f as &mut dyn cli::OutFile));
                    let after = kstats();
                    // The kernel's own counters over the run (phases, output and the
                    // calibration loop), summed over cores: what the fault path and TLB
                    // maintenance cost besides the soft faults the phases report.
                    let mut line = alloc::string::String::from("metis-kstats");
                    for (i, name) in KSTATS.iter().enumerate() {
                        line += &alloc::format!(" {name}={}", after[i].wrapping_sub(before[i]));
                    }
                    line.push('\n');
                    out(line.as_bytes());
                    ok
                }
                Err(e) => {
                    cli::print_error(&mut o, &e);
                    false
                }
            };
            env.finish();
            ok
        }
    };
    p.finish();
    drop(file);
    unmount();
    if ok {
        0
    } else {
        1
    }
}
