//! Metis MapReduce on this system (Corey section 6.1, figure 10; issue 17):
//! `init=metis -- wc|wri|wrmem [input=NAME] [size=BYTES] [seed=S] [workers=N] [parts=P]
//! [layout=per-core|shared|private] [print=0|1]` (the words: mapreduce/src/cli.rs).
//!
//! The input is a file of the boot image (`cargo xtask metis` packs it), a file of the attached
//! disk when its name is a path (`input=/dir/file`; `cargo xtask metis --from-disk`) or, for `wrmem`,
//! text generated in memory. One worker thread per core (bench's backend); the layout says
//! where each worker's intermediate data lives (bench/src/metis_ours.rs). The output is printed
//! over the console between `metis-begin` and `metis-end` (there is no file system yet), then
//! its digest, the phase times and soft faults. Everything taken is given back before exit
//! (the kernel checks for leaks after the program ends).
#![no_std]
#![no_main]

use bench::metis_ours::{Layout, OursEnv};
use mapreduce::cli::{self, Input};

libos::main!(main);

fn out(b: &[u8]) {
    libos::console::write_all(b);
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
    let p = match bench::ours::Ours::new() {
        Ok(p) => p,
        Err(e) => {
            cli::print_error(&mut o, &e);
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
                Ok(input) => cli::run_and_print(&env, &opts, input, &mut o),
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
    if ok {
        0
    } else {
        1
    }
}
