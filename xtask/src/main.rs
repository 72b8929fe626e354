//! `cargo xtask`: the one host tool. Builds the kernel, boots it under QEMU (always TCG),
//! runs the test matrix, builds the ISO and runs benchmarks. The command line is declared in
//! cli.rs (clap); `cargo xtask help` lists it.

// The library OS's ext2 reader, compiled into `fs` unchanged, names `alloc::` paths.
extern crate alloc;

mod bench;
mod cli;
mod commute;
mod boot_bench;
mod env;
mod fs;
mod fuzz;
mod gdb;
mod idle;
mod insngate;
mod iso;
mod ksyms;
mod linux;
mod net;
mod metis;
mod mutants;
mod percore_tasks;
mod plugins;
mod progress;
mod qemu;
mod test;
mod user;
mod webd;

use std::process::ExitCode;

use cli::{BenchCommand, Command};

/// Pass, fail and skip counts accumulated across the parts of `cargo xtask test`. A skip is
/// a test that reported it could not run under its boot and whose suite declared it may skip
/// there; an undeclared skip is counted as a failure (test.rs, docs/testing.md).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TestTally {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

impl TestTally {
    /// One passed check.
    pub const PASS: TestTally = TestTally { passed: 1, failed: 0, skipped: 0 };
    /// One failed check.
    pub const FAIL: TestTally = TestTally { passed: 0, failed: 1, skipped: 0 };

    pub fn add(&mut self, other: TestTally) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.skipped += other.skipped;
    }
}

/// Why a command failed: a bad command line (exit status 2, nothing was done) or the work
/// itself (exit status 1).
pub(crate) enum Failure {
    Usage(String),
    Work(String),
}

/// A check of the parsed options that failed is a usage error.
pub(crate) fn usage<T>(r: Result<T, String>) -> Result<T, Failure> {
    r.map_err(Failure::Usage)
}

pub(crate) fn work(r: Result<(), String>) -> Result<(), Failure> {
    r.map_err(Failure::Work)
}

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
                    eprintln!("xtask: {}", cli::one_line(&e, cli::command_name(&args).as_deref()));
                    ExitCode::from(2)
                }
            };
        }
    };
    match dispatch(cli.command, &args) {
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

fn dispatch(command: Command, args: &[String]) -> Result<(), Failure> {
    match command {
        Command::Run(a) => {
            let cfg = usage(a.vm.into_config())?;
            work(qemu::run_command(cfg, a.gdb))
        }
        Command::Test(a) => work(test::run(&a)),
        Command::Insngate(a) => {
            if a.update.is_some() && a.reason.as_deref().map(str::trim).unwrap_or("").is_empty() {
                return Err(Failure::Usage("insngate --update needs --reason TEXT: why the baseline changes".into()));
            }
            work(insngate::command(a.update.as_deref(), a.reason.as_deref()))
        }
        Command::Iso(a) => work(iso::command(a.out, a.cmdline.unwrap_or_default())),
        Command::Build(a) => work(if a.all {
            env::build_kernel().and_then(|k| user::build_initrd().map(|i| println!("{}\n{}", k.display(), i.display())))
        } else {
            env::build_kernel().map(|p| println!("{}", p.display()))
        }),
        Command::Bench(b) => match b.sub {
            Some(BenchCommand::Boot(a)) => work(boot_bench::run(&a)),
            Some(BenchCommand::Percore(a)) => work(percore_tasks::bench(&a.args)),
            Some(BenchCommand::ReportCheck(a)) => work(bench::report_check::command(&a)),
            None => {
                let o = usage(bench::Options::from_args(b.matrix))?;
                // What was run: results.json's `run` item and report.html's header.
                work(bench::run(o, &args[1..]))
            }
        },
        Command::Commute(a) => work(commute::main(&a)),
        Command::Fuzz(a) => work(fuzz::main(fuzz::FuzzOpts::from(a))),
        Command::Soak(a) => work(fuzz::soak(a.minutes, a.smp)),
        Command::Mutants(a) => work(mutants::main(&a)),
        Command::Plugin(a) => plugins::main(a.command),
        // The short names for the two measurement commands.
        // Typed bare, they say what they need and how to call them (status 2, as for every
        // other command missing a required argument).
        Command::Cachesim(o) if o.workload.is_none() => Err(Failure::Usage(format!("cachesim: --workload NAME is required\n{}", cli::usage_of(&["cachesim"])))),
        Command::Audit(o) if o.workload.is_none() => Err(Failure::Usage(format!("audit: --bench NAME is required\n{}", cli::usage_of(&["audit"])))),
        Command::Cachesim(o) => plugins::main(cli::tools::PluginCommand::Cachesim(o)),
        Command::Audit(o) => plugins::main(cli::tools::PluginCommand::Sharing(o)),
        Command::Linux(a) => linux::main(a.command),
        Command::Net(a) => net::main(a.command),
        Command::Fs(a) => fs::main(a.command),
        Command::Metis(a) => metis::main(a.command),
        Command::Webd(a) => webd::main(a.command),
        Command::Idle(a) => {
            use cli::{IdleSystem, IdleWhat};
            let systems = match a.system {
                IdleSystem::Ours => vec!["ours".to_string()],
                IdleSystem::Linux => vec!["linux".to_string()],
                IdleSystem::Both => vec!["ours".to_string(), "linux".to_string()],
            };
            let what = match a.what {
                IdleWhat::Shell => vec![idle::What::Shell],
                IdleWhat::Tcpserv => vec![idle::What::Tcpserv],
                IdleWhat::Webd => vec![idle::What::Webd],
                IdleWhat::All => vec![idle::What::Shell, idle::What::Tcpserv, idle::What::Webd],
            };
            work(idle::command(&idle::IdleOptions { smp: a.smp.0, systems, what, seconds: a.seconds, guest: a.guest, boots: a.boots }))
        }
        Command::Completions(a) => {
            use std::io::Write;
            work(std::io::stdout().write_all(&cli::completions(a.shell)).map_err(|e| format!("completions: {e}")))
        }
    }
}
