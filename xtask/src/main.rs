//! `cargo xtask`: the one host tool. Builds the kernel, boots it under QEMU (always TCG),
//! runs the test matrix, builds the ISO and runs benchmarks. The command line is declared in
//! cli.rs (clap); `cargo xtask help` lists it.

// The library OS's ext2 reader, compiled into `fs` unchanged, names `alloc::` paths.
extern crate alloc;

mod bench;
mod cli;
mod commute;
mod exec;
mod boot_bench;
mod fs;
mod fuzz;
mod guest;
mod host;
mod idle;
mod insngate;
mod layers;
mod linux;
mod net;
mod metis;
mod model;
mod mutants;
mod percore_tasks;
mod plugins;
mod run;
mod test;
mod webd;

use std::process::ExitCode;

use host::outcome::Failure;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cli = match cli::parse(&args) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            return match e.kind() {
                // `help`, `--help`, `COMMAND --help`: the generated help on stdout.
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                    print!("{e}");
                    ExitCode::SUCCESS
                }
                // No command at all: the help on stderr, status 2.
                ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    eprint!("{e}");
                    ExitCode::from(2)
                }
                _ => {
                    eprintln!("xtask: {}", host::args::one_line(&e, cli::command_name(&args).as_deref()));
                    ExitCode::from(2)
                }
            };
        }
    };
    match cli::dispatch(cli.command, &args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(e)) => {
            eprintln!("xtask: {e}");
            ExitCode::from(2)
        }
        Err(Failure::Work(e)) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}
