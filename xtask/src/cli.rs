//! The command line of `cargo xtask`: the list of commands, parsed with clap (derive) and
//! dispatched. Each command declares its own options where it lives (`RunArgs` in run.rs,
//! `NetArgs` in net/options.rs, ...; the value parsers several share are in host/args.rs);
//! this file assembles them into one command line, and is the only module that names them
//! all. `cargo xtask help`, `cargo xtask --help`, `cargo xtask COMMAND --help` and the shell
//! completions (`cargo xtask completions bash|zsh|fish`) are generated from the declarations.
//! Values are checked while parsing (a bad `--smp` names the option and the range), so every
//! bad value or unknown command is one line on stderr and exit status 2, before anything is
//! built, run or written (main.rs).
//!
//! Only `bench percore` takes the rest of its line as it is ([`ToolArgs`]): it hands it to the
//! percore crate's example, which parses it.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::host::outcome::{usage, work, Failure};
use crate::bench::options::MatrixArgs;
use crate::bench::report_check::ReportCheckArgs;
use crate::boot_bench::BootBenchArgs;
use crate::commute::options::CommuteArgs;
use crate::fs::options::{FsArgs, FsCommand};
use crate::fuzz::{FuzzArgs, SoakArgs};
use crate::idle::{IdleArgs, IdleSystem, IdleWhat};
use crate::insngate::InsngateArgs;
use crate::linux::LinuxArgs;
use crate::metis::options::MetisArgs;
use crate::mutants::MutantsArgs;
use crate::net::options::NetArgs;
use crate::plugins::{PluginArgs, PluginCommand, PluginOpts};
use crate::run::RunArgs;
use crate::test::TestArgs;
use crate::webd::options::WebdArgs;
#[cfg(test)]
use crate::host::args::one_line;



#[derive(Parser, Debug)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "The host tool: builds the kernel, boots it under QEMU (always TCG), runs the tests, benchmarks and measurements.",
    arg_required_else_help = true,
    disable_version_flag = true,
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Build the kernel and boot it under QEMU (TCG) into the shell; returns when the kernel halts
    Run(RunArgs),
    /// Host tests, loom model checks, plugin tests, then every test boot (docs/testing.md)
    #[command(long_about = "Host `cargo test`, loom model checks, plugin tests, then every test boot: the in-kernel tests at \
1, 2, 4, 8 vCPUs and over 2 NUMA nodes, the user-program suites (each booted with the roles and options its tests need), \
the shell, fuzz, network, files, Metis, large and broken boots, the ISO. Ends with `N passed, N failed, N skipped` and the \
names of the suites that failed (docs/testing.md).")]
    Test(TestArgs),
    /// Build a GRUB Multiboot2 ISO (BIOS and UEFI), by default at target/os.iso
    Iso(IsoArgs),
    /// Build the kernel only (--all: and the program archive); prints the paths
    Build(BuildArgs),
    /// The benchmark matrix on this system and on Linux (docs/bench.md); also `bench boot`, `bench percore`, `bench report-check`
    Bench(BenchArgs),
    /// The commutativity checker: every modelled system-call pair on two cores under the sharing audit (docs/commute.md)
    Commute(CommuteArgs),
    /// System-call fuzzer on every core (docs/fuzz.md)
    Fuzz(FuzzArgs),
    /// Fuzz (with and without injection) and the benchmark programs in turns for a while
    Soak(SoakArgs),
    /// Mutation testing (not part of `test`; takes a while): applies each mutation of the catalog and runs the suites that should catch it
    #[command(long_about = "Mutation testing (not part of `test`; takes a while): applies each named mutation of the catalog \
(xtask/src/mutants/catalog.rs) to a scratch copy of the tree (target/mutants/tree), builds it and runs the checks that should \
catch it; reports each `killed`, `survived` or `unviable` (does not build), and fails if any survived (docs/testing.md). \
Logs: target/mutants/logs/NAME.log; the table: target/mutants/report.txt.")]
    Mutants(MutantsArgs),
    /// QEMU measurement plugins: insncount, cachesim, sharing (audit), overhead (`cargo xtask plugin help`)
    Plugin(PluginArgs),
    /// Short for `plugin cachesim`
    Cachesim(PluginOpts),
    /// Short for `plugin audit` (the sharing audit)
    Audit(PluginOpts),
    /// Linux baseline: `linux fetch|modules|initramfs|run` (`cargo xtask linux help`)
    Linux(LinuxArgs),
    /// Network host side: `net load`, the TCP load generator, `net fuzz` (`cargo xtask net help`)
    Net(NetArgs),
    /// webd's host side: `webd load`, `webd check`, `webd run`, `webd cachesim` (`cargo xtask webd help`)
    Webd(WebdArgs),
    /// ext2 images: `fs mkimage`, `fs check`, `fs ls|cat|get`, `fs test`, `fs crash` (`cargo xtask fs help`)
    Fs(FsArgs),
    /// Metis MapReduce: `metis wc|wri|wrmem ...`, `metis sweep`, `metis ci` (`cargo xtask metis --help`)
    Metis(MetisArgs),
    /// Host CPU an idle guest uses: QEMU's CPU time over a window with no input or traffic (docs/roles.md, Sleeping)
    Idle(IdleArgs),
    /// Print a shell completion script for `cargo xtask ...` (bash: `source <(cargo xtask completions bash)`)
    Completions(CompletionsArgs),
    /// The instruction-count gate: exact instructions per operation of the measured paths against
    /// xtask/insngate-baseline.txt (docs/insngate.md); --update rewrites lines, with a reason
    Insngate(InsngateArgs),
    /// Each crate's file-level import graph: files, import circles (Tarjan), floors; --dot/--svg draw it (docs/architecture.md)
    Layers(crate::layers::LayersArgs),
    /// Run a static Linux program on this system or the Linux guest, like qemu-x86_64; --conformance: the suite beside Linux (docs/linux-exec.md)
    Exec(crate::exec::command::ExecArgs),
    /// Build the Linux test programs (linux/progs/*.c with musl-gcc, Debian's busybox-static, memcached and libevent from Debian's sources) into target/linux-progs/; prints their paths
    LinuxProgs,
    /// busybox's own testsuite inside each system, ours compared with Linux (docs/linux-exec.md)
    BusyboxTests(crate::exec::bbsuite::BusyboxTestsArgs),
    /// Corey's figures 7, 8, 10, 11 in model time at 1-16 cores (exact counts + the amd16 cache model; docs/model.md)
    Model(crate::model::ModelArgs),
    // A new command is one variant here (its options declared in its own module, as the ones
    // above) and one arm in `dispatch`.
}

/// A sub-tool's own command line, handed to it unparsed (it has its own `help`).
#[derive(Args, Debug, Clone, PartialEq)]
#[command(disable_help_flag = true)]
pub struct ToolArgs {
    /// The sub-tool's command and options (see its own help)
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0.., value_name = "ARGS")]
    pub args: Vec<String>,
}

// ---------------------------------------------------------------------------------------
// Value parsers: each error names what is wrong and what is allowed; clap adds the option.

// ---------------------------------------------------------------------------------------
// run

// ---------------------------------------------------------------------------------------
// test, iso, build

#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct IsoArgs {
    /// Where the ISO goes (default target/os.iso)
    #[arg(long, value_name = "PATH")]
    pub out: Option<PathBuf>,
    /// Kernel command line baked into the GRUB menu entry
    #[arg(long, value_name = "\"...\"", allow_hyphen_values = true)]
    pub cmdline: Option<String>,
}

#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct BuildArgs {
    /// The program archive (initrd) too
    #[arg(long)]
    pub all: bool,
}

// ---------------------------------------------------------------------------------------
// bench

#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_conflicts_with_subcommands = true, args_override_self = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub sub: Option<BenchCommand>,
    #[command(flatten)]
    pub matrix: MatrixArgs,
}

#[derive(Subcommand, Debug, Clone, PartialEq)]
pub enum BenchCommand {
    /// Boot time, ours beside Linux booted the same way (PVH, uncompressed kernel, a one-program
    /// initrd): QEMU start to that program's first line (docs/boot.md)
    Boot(BootBenchArgs),
    /// The percore crate's benchmark example, host-native (its options are passed through: --ms N, --json PATH)
    Percore(ToolArgs),
    /// Check a report.html: well-formed, names every benchmark of its results.json; with
    /// --browser also renders it in headless Chromium (installed on demand) to PDF and PNG
    ReportCheck(ReportCheckArgs),
}

// ---------------------------------------------------------------------------------------
// commute, fuzz, soak, mutants

#[derive(Args, Debug, Clone, PartialEq)]
pub struct CompletionsArgs {
    /// The shell
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

// ---------------------------------------------------------------------------------------
// Parsing and errors

/// Commands whose own parsers used to take a bare `help` word (`cargo xtask commute help`);
/// it still works, as `--help`.
const HELP_WORD: &[&str] = &["run", "test", "iso", "build", "commute", "fuzz", "soak", "mutants", "completions", "cachesim", "audit"];

/// Parse `cargo xtask`'s arguments (without the program name).
/// The usage of the subcommand at `path` (`["cachesim"]`, `["plugin", "sharing"]`), as clap
/// prints it, plus a pointer to its help.
pub fn usage_of(path: &[&str]) -> String {
    use clap::CommandFactory;
    let mut c = Cli::command();
    c.build();
    let mut cur = &mut c;
    for p in path {
        if cur.find_subcommand(p).is_none() {
            break;
        }
        cur = cur.find_subcommand_mut(p).expect("looked up just now");
    }
    format!("{}\nFor more information, try 'cargo xtask {} --help'.", cur.render_usage(), path.join(" "))
}

pub fn parse<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let mut argv: Vec<OsString> = std::iter::once(OsString::from("cargo xtask")).chain(args.into_iter().map(Into::into)).collect();
    if argv.len() == 3 && argv[2] == "help" && argv[1].to_str().is_some_and(|c| HELP_WORD.contains(&c)) {
        argv[2] = "--help".into();
    }
    Cli::try_parse_from(argv)
}

/// The command named on a command line, if it is one of ours (for the error's help pointer).
pub fn command_name<T: AsRef<str>>(args: &[T]) -> Option<String> {
    let first = args.first()?.as_ref();
    use clap::CommandFactory;
    Cli::command().get_subcommands().any(|s| s.get_name() == first).then(|| first.to_string())
}

/// Parse as `cargo xtask COMMAND ARGS...` and give the one-line error (for the modules' own
/// tests).
#[cfg(test)]
pub fn parse_command(command: &str, args: &[String]) -> Result<Command, String> {
    parse(std::iter::once(command.to_string()).chain(args.iter().cloned())).map(|c| c.command).map_err(|e| one_line(&e, Some(command)))
}

/// The completion script for `shell`: for `cargo xtask ...` as typed, so for a command
/// `cargo` whose one subcommand is `xtask` (in bash it takes over `cargo`'s completion in the
/// shell that sources it; fish adds it to cargo's).
pub fn completions(shell: clap_complete::Shell) -> Vec<u8> {
    use clap::CommandFactory;
    let xtask = Cli::command().name("xtask").bin_name("cargo xtask");
    let mut cargo = clap::Command::new("cargo").bin_name("cargo").subcommand(xtask);
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cargo, "cargo", &mut out);
    out
}

/// `plugin insncount|cachesim|sharing` without `--workload`: what is missing, and the usage.
fn bare_workload(cmd: &str) -> Failure {
    Failure::Usage(format!("{cmd}: --workload NAME is required\n{}", usage_of(&["plugin", cmd])))
}

/// Run the command parsed (`args`: the command line as given, for the records that name it).
pub fn dispatch(command: Command, args: &[String]) -> Result<(), Failure> {
    match command {
        Command::Run(a) => {
            let cfg = usage(a.vm.into_config())?;
            work(crate::run::run_command(cfg, a.gdb))
        }
        Command::Test(a) => work(crate::test::run(&a)),
        Command::Insngate(a) => {
            if a.update.is_some() && a.reason.as_deref().map(str::trim).unwrap_or("").is_empty() {
                return Err(Failure::Usage("insngate --update needs --reason TEXT: why the baseline changes".into()));
            }
            work(crate::insngate::command(a.update.as_deref(), a.reason.as_deref()))
        }
        Command::Iso(a) => work(crate::host::iso::command(a.out, a.cmdline.unwrap_or_default())),
        Command::Build(a) => work(if a.all {
            crate::host::env::build_kernel().and_then(|k| crate::host::user::build_initrd().map(|i| println!("{}\n{}", k.display(), i.display())))
        } else {
            crate::host::env::build_kernel().map(|p| println!("{}", p.display()))
        }),
        Command::Bench(b) => match b.sub {
            Some(BenchCommand::Boot(a)) => work(crate::boot_bench::run(&a)),
            Some(BenchCommand::Percore(a)) => work(crate::percore_tasks::bench(&a.args)),
            Some(BenchCommand::ReportCheck(a)) => work(crate::bench::report_check::command(&a)),
            None => {
                let o = usage(crate::bench::Options::from_args(b.matrix))?;
                // What was run: results.json's `run` item and report.html's header.
                work(crate::bench::run(o, &args[1..]))
            }
        },
        Command::Commute(a) => work(crate::commute::main(&a)),
        Command::Fuzz(a) if a.linux => work(crate::exec::fuzz::main(crate::exec::fuzz::Run {
            seed: a.seed,
            calls: a.calls,
            secs: a.timeout.unwrap_or(30),
            smp: a.smp,
            min_injected: u64::from(a.inject.is_some()),
            inject: a.inject,
            trace: a.trace,
        })),
        Command::Fuzz(a) => work(crate::fuzz::main(crate::fuzz::FuzzOpts::from(a))),
        Command::Soak(a) => work(crate::fuzz::soak(a.minutes, a.smp)),
        Command::Mutants(a) => work(crate::mutants::main(&a)),
        // A measurement command without its workload: a usage error (status 2) with the usage.
        Command::Plugin(a) => match &a.command {
            PluginCommand::Insncount(o) if o.workload.is_none() => Err(bare_workload("insncount")),
            PluginCommand::Cachesim(o) if o.workload.is_none() => Err(bare_workload("cachesim")),
            PluginCommand::Sharing(o) if o.workload.is_none() => Err(bare_workload("sharing")),
            _ => crate::plugins::main(a.command),
        },
        // Short names for the two measurement commands.
        // Typed bare, they say what they need and how to call them (status 2, as for every
        // other command missing a required argument).
        Command::Cachesim(o) if o.workload.is_none() => Err(Failure::Usage(format!("cachesim: --workload NAME is required\n{}", usage_of(&["cachesim"])))),
        Command::Audit(o) if o.workload.is_none() => Err(Failure::Usage(format!("audit: --bench NAME is required\n{}", usage_of(&["audit"])))),
        Command::Cachesim(o) => crate::plugins::main(PluginCommand::Cachesim(o)),
        Command::Audit(o) => crate::plugins::main(PluginCommand::Sharing(o)),
        Command::Linux(a) => crate::linux::main(a.command),
        Command::Exec(a) => crate::exec::command::main(a),
        Command::LinuxProgs => work(crate::exec::command::linux_progs()),
        Command::BusyboxTests(a) => crate::exec::bbsuite::main(a),
        Command::Net(a) => crate::net::main(a.command),
        // `fs test` boots the guest through the test runner.
        Command::Fs(FsArgs { command: FsCommand::Test }) => work(crate::test::fs_command()),
        Command::Fs(a) => crate::fs::main(a.command),
        Command::Metis(a) => crate::metis::main(a.command),
        Command::Model(a) => crate::model::main(a),
        Command::Webd(a) => crate::webd::main(a.command),
        Command::Idle(a) => {
            
            let systems = match a.system {
                IdleSystem::Ours => vec!["ours".to_string()],
                IdleSystem::Linux => vec!["linux".to_string()],
                IdleSystem::Both => vec!["ours".to_string(), "linux".to_string()],
            };
            let what = match a.what {
                IdleWhat::Shell => vec![crate::idle::What::Shell],
                IdleWhat::Tcpserv => vec![crate::idle::What::Tcpserv],
                IdleWhat::Webd => vec![crate::idle::What::Webd],
                IdleWhat::All => vec![crate::idle::What::Shell, crate::idle::What::Tcpserv, crate::idle::What::Webd],
            };
            work(crate::idle::command(&crate::idle::IdleOptions { smp: a.smp.0, systems, what, seconds: a.seconds, guest: a.guest, boots: a.boots }))
        }
        Command::Layers(a) => work(crate::layers::command(&a.krate, a.folders, a.dot.as_deref(), a.svg.as_deref())),
        Command::Completions(a) => {
            use std::io::Write;
            work(std::io::stdout().write_all(&completions(a.shell)).map_err(|e| format!("completions: {e}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::LinuxCommand;
    use crate::metis::options::{MetisCommand, SweepApp};
    use crate::net::options::NetCommand;
    use crate::webd::options::WebdCommand;

    /// The machine `cargo xtask run ARGS` describes, checked as `run` checks it.
    fn vm(a: &[&str]) -> Result<crate::host::vm::VmConfig, String> {
        match parse_command("run", &a.iter().map(|s| s.to_string()).collect::<Vec<_>>())? {
            Command::Run(r) => r.vm.into_config(),
            _ => unreachable!("parse_command(\"run\") gives a run command"),
        }
    }

    #[test]
    fn bad_options_rejected() {
        assert!(vm(&["--smp", "0"]).is_err());
        assert!(vm(&["--smp", "256"]).is_err());
        assert!(vm(&["--smp", "x"]).is_err());
        assert!(vm(&["--smp", "2", "--numa", "3"]).is_err());
        assert!(vm(&["--mem", "lots"]).is_err());
        assert!(vm(&["--smp"]).is_err());
        assert!(vm(&["--uefi"]).is_err());
        assert!(vm(&["--foo"]).unwrap_err().contains("--foo"));
        let cfg = vm(&["--smp", "255", "--numa", "5"]).unwrap();
        assert_eq!((cfg.smp, cfg.numa_nodes), (255, 5));
    }
    #[test]
    fn net_options_add_the_nic_and_nothing_else_has_one() {
        let cfg = vm(&["--net"]).unwrap();
        let a = cfg.qemu_args();
        let port = cfg.net.as_ref().unwrap().host_port(80).expect("default forward to guest port 80");
        assert!(a.iter().any(|s| s == &format!("user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{port}-:80")));
        assert!(a.windows(2).any(|w| w[0] == "-device" && w[1] == "virtio-net-pci,netdev=n0"));
        let cfg = vm(&["--hostfwd", "8080:80", "--hostfwd", "8081:7"]).unwrap();
        assert_eq!(cfg.net.unwrap().forwards.len(), 2, "--hostfwd implies --net, no default forward added");
        assert!(vm(&["--hostfwd", "80"]).unwrap_err().contains("--hostfwd"));
        assert!(vm(&["--hostfwd"]).unwrap_err().contains("--hostfwd"));
        // Without --net: no NIC at all (QEMU's default one would be on an unrestricted network).
        let a = crate::host::vm::VmConfig::default().qemu_args();
        assert!(a.windows(2).any(|w| w[0] == "-nic" && w[1] == "none"));
        assert!(!a.iter().any(|s| s.contains("netdev")));
    }
    #[test]
    fn disk_option_attaches_a_virtio_blk_disk_and_nothing_else_has_one() {
        let dir = crate::host::env::target_dir().join("qemu-disk-test");
        std::fs::create_dir_all(&dir).unwrap();
        let img = dir.join("d.img");
        std::fs::write(&img, vec![0u8; 4096]).unwrap();
        let cfg = vm(&["--disk", img.to_str().unwrap()]).unwrap();
        let a = cfg.qemu_args();
        assert!(a.windows(2).any(|w| w[0] == "-drive" && w[1] == format!("file={},format=raw,if=none,id=d0", img.display())));
        assert!(a.windows(2).any(|w| w[0] == "-device" && w[1] == "virtio-blk-pci,drive=d0"));
        assert!(!crate::host::vm::VmConfig::default().qemu_args().iter().any(|s| s.contains("virtio-blk") || s.starts_with("-drive")));
        assert!(vm(&["--disk", "/nonexistent/x.img"]).unwrap_err().contains("--disk"));
        assert!(vm(&["--disk"]).unwrap_err().contains("--disk"));
        let comma = dir.join("a,b.img");
        std::fs::write(&comma, b"x").unwrap();
        assert!(vm(&["--disk", comma.to_str().unwrap()]).unwrap_err().contains("comma"));
    }

    fn p(line: &str) -> Result<Command, clap::Error> {
        parse(line.split_whitespace()).map(|c| c.command)
    }

    /// A bad line must be a usage error (exit status 2), on one line, naming `needle`.
    fn bad(line: &str, needle: &str) {
        let e = p(line).expect_err(line);
        assert_eq!(e.exit_code(), 2, "{line}: exit status");
        let msg = one_line(&e, command_name(&line.split_whitespace().collect::<Vec<_>>()).as_deref());
        assert!(!msg.contains('\n'), "{line}: one line: {msg}");
        assert!(msg.contains(needle), "{line}: `{msg}` should name `{needle}`");
    }

    /// Every command of the dispatch, in the order `help` lists them.
    const COMMANDS: &[&str] = &["run", "test", "iso", "build", "bench", "commute", "fuzz", "soak", "mutants", "plugin", "cachesim", "audit", "linux", "net", "webd", "fs", "metis", "idle", "completions", "insngate", "layers", "exec", "linux-progs", "busybox-tests", "model"];

    /// Catches: `--reason` accepted without `--update`, or the options not reaching the command.
    #[test]
    fn insngate_options() {
        match p("insngate --update null,stat_mt --reason why").unwrap() {
            Command::Insngate(a) => {
                assert_eq!(a.update.as_deref(), Some("null,stat_mt"));
                assert_eq!(a.reason.as_deref(), Some("why"));
            }
            other => panic!("{other:?}"),
        }
        assert!(p("insngate --reason why").is_err(), "--reason needs --update");
        assert!(p("insngate").is_ok());
    }

    #[test]
    fn bare_measurements_show_their_usage() {
        // `cargo xtask cachesim` typed bare: the dispatch turns the missing workload into this
        // usage (status 2).
        let u = usage_of(&["cachesim"]);
        assert!(u.contains("Usage: cargo xtask cachesim") && u.contains("cargo xtask cachesim --help"), "{u}");
        let u = usage_of(&["plugin", "sharing"]);
        assert!(u.contains("Usage: cargo xtask plugin sharing"), "{u}");
        // net fuzz's default system is this one.
        match p("net fuzz").unwrap() {
            Command::Net(n) => assert!(format!("{n:?}").contains("system: \"ours\""), "{n:?}"),
            c => panic!("{c:?}"),
        }
        let c = p("idle").unwrap();
        assert!(matches!(c, Command::Idle(ref a) if a.smp.0 == vec![1, 2, 4] && a.seconds == 30), "{c:?}");
    }

    #[test]
    fn help_lists_every_command() {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        let mut at = 0;
        for c in COMMANDS {
            let pos = help[at..].find(&format!("\n  {c} ")).unwrap_or_else(|| panic!("`{c}` not listed (in order) in:\n{help}"));
            at += pos + 1;
        }
        // And nothing unlisted: each command line of the list is one of ours (or help).
        let listed: Vec<&str> = help.split("Commands:").nth(1).unwrap().split("Options:").next().unwrap().lines().filter(|l| l.starts_with("  ") && !l.starts_with("   ")).map(|l| l.split_whitespace().next().unwrap()).collect();
        for l in &listed {
            assert!(COMMANDS.contains(l) || *l == "help", "unexpected command `{l}`");
        }
        // `cargo xtask help` and `cargo xtask --help` are the help (clap exits 0 for them).
        for line in ["help", "--help", "-h", "bench --help", "run --help", "commute help", "mutants help", "bench help"] {
            let e = p(line).expect_err(line);
            assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp, "{line}");
            assert_eq!(e.exit_code(), 0, "{line}");
        }
        // No command at all: the help, as an error (exit status 2).
        let e = parse(Vec::<String>::new()).unwrap_err();
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn run_lines() {
        let Command::Run(r) = p("run").unwrap() else { panic!() };
        assert_eq!((r.vm.smp, r.vm.mem, r.vm.cpu.as_str(), r.gdb), (2, 512, "max", None));
        let Command::Run(r) = p("run --smp 4 --mem 2G --numa 2 --timeout 30 --gdb").unwrap() else { panic!() };
        assert_eq!((r.vm.smp, r.vm.mem, r.vm.numa, r.vm.timeout, r.gdb), (4, 2048, Some(2), Some(30), Some(1234)));
        let Command::Run(r) = p("run --gdb 4444 --smp 3").unwrap() else { panic!() };
        assert_eq!((r.gdb, r.vm.smp), (Some(4444), 3));
        let Command::Run(r) = p("run --gdb=4445").unwrap() else { panic!() };
        assert_eq!(r.gdb, Some(4445));
        let Command::Run(r) = p("run --hostfwd 8080:80 --hostfwd 8081:7").unwrap() else { panic!() };
        assert_eq!(r.vm.hostfwd.len(), 2);
        let cfg = r.vm.into_config().unwrap();
        assert_eq!(cfg.net.unwrap().forwards.len(), 2, "--hostfwd implies --net");
        let Command::Run(r) = p("run --iso --uefi").unwrap() else { panic!() };
        assert!(matches!(r.vm.into_config().unwrap().medium, Some(crate::host::vm::BootMedium::Iso { uefi: true, .. })));
        bad("run --smp 0", "--smp");
        bad("run --smp 0", "1..=255");
        bad("run --smp 256", "1..=255");
        bad("run --smp x", "--smp");
        bad("run --smp -1", "--smp");
        bad("run --smp", "--smp");
        bad("run --mem lots", "--mem");
        bad("run --mem lots", "512M");
        bad("run --uefi", "--iso");
        bad("run --gdb 0", "--gdb");
        bad("run --gdb 70000", "1..=65535");
        bad("run --hostfwd 80", "--hostfwd");
        bad("run --foo", "--foo");
        // A repeated option: the last one counts, as before clap (repeatable ones add up).
        let Command::Run(r) = p("run --smp 2 --smp 3 --hostfwd 8080:80 --hostfwd 8081:7").unwrap() else { panic!() };
        assert_eq!((r.vm.smp, r.vm.hostfwd.len()), (3, 2));
        // Checks between options come from into_config.
        let Command::Run(r) = p("run --smp 2 --numa 3").unwrap() else { panic!() };
        assert!(r.vm.into_config().unwrap_err().contains("--numa"));
        let Command::Run(r) = p("run --disk /nonexistent/x.img").unwrap() else { panic!() };
        assert!(r.vm.into_config().unwrap_err().contains("--disk"));
    }

    #[test]
    fn test_lines() {
        let Command::Test(t) = p("test").unwrap() else { panic!() };
        assert_eq!((t.smp.0, t.host_only, t.only.len(), t.list), (vec![1, 2, 4, 8], false, 0, false));
        let t = parse(["test", "--only", "roletest", "--only", "kernel smp=4", "--smp", "1,2", "--host-only"]).unwrap().command;
        let Command::Test(t) = t else { panic!() };
        assert_eq!((t.only, t.smp.0, t.host_only), (vec!["roletest".to_string(), "kernel smp=4".to_string()], vec![1, 2], true));
        bad("test --smp 1,0", "1..=255");
        bad("test --smp 1,x", "--smp");
        bad("test --frob", "--frob");
        let e = parse(["test", "--only", ""]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn other_command_lines() {
        assert!(matches!(p("build --all").unwrap(), Command::Build(BuildArgs { all: true })));
        assert!(matches!(p("iso --out /tmp/x.iso").unwrap(), Command::Iso(IsoArgs { out: Some(_), cmdline: None })));
        bad("build --everything", "--everything");
        let Command::Bench(b) = p("bench --only dupclose --only calib --param iters=5 --param iters=6").unwrap() else { panic!() };
        assert_eq!((b.matrix.only.as_deref(), b.matrix.param.len()), (Some("calib"), 2));
        let Command::Bench(b) = p("bench boot --smp 2,16 --runs 1 --no-linux").unwrap() else { panic!() };
        assert!(matches!(b.sub, Some(BenchCommand::Boot(BootBenchArgs { runs: 1, no_linux: true, .. }))));
        let Command::Bench(b) = p("bench percore --ms 50").unwrap() else { panic!() };
        assert_eq!(b.sub, Some(BenchCommand::Percore(ToolArgs { args: vec!["--ms".into(), "50".into()] })));
        let Command::Bench(b) = p("bench report-check --browser").unwrap() else { panic!() };
        assert!(matches!(b.sub, Some(BenchCommand::ReportCheck(ReportCheckArgs { dir: None, browser: true }))));
        bad("bench boot --runs 0", "--runs");
        let Command::Fuzz(f) = p("fuzz --calls 5000 --seed 0x2a --smp 2 --inject alloc:1/7 --planted-bug").unwrap() else { panic!() };
        assert_eq!((f.calls, f.seed, f.smp, f.inject.as_deref(), f.planted_bug), (5000, 42, 2, Some("alloc:1/7"), true));
        bad("fuzz --smp 33", "1..=32");
        bad("fuzz --calls 0", "--calls");
        bad("fuzz --inject pages:1/5", "alloc:1/N");
        let Command::Soak(s) = p("soak --minutes 10 --smp 2").unwrap() else { panic!() };
        assert_eq!((s.minutes, s.smp), (10, 2));
        bad("soak", "--minutes");
        bad("soak --minutes 0", "--minutes");
        let names: Vec<&str> = crate::mutants::CATALOG.iter().map(|m| m.name).take(3).collect();
        let Command::Mutants(m) = p(&format!("mutants --only {},{} --only {} --keep", names[0], names[1], names[2])).unwrap() else { panic!() };
        assert_eq!((m.only.len(), m.keep, m.no_baseline), (3, true, false));
        let Command::Commute(c) = p("commute --ci --update-baseline --smp 3").unwrap() else { panic!() };
        assert!(c.ci && c.update_baseline && c.smp == 3);
        bad("commute --update-baseline", "--ci");
        let Command::Commute(c) = p("commute --ci --update-baseline --accept 35,47 --accept 109").unwrap() else { panic!() };
        assert_eq!(c.accept, vec![35, 47, 109]);
        bad("commute --ci --accept 35", "--update-baseline");
        bad("commute --ci --update-baseline --accept x", "--accept");
        bad("commute --calls null,nosuch", "unknown call `nosuch`");
        bad("mutants --only nosuch", "no mutant `nosuch`");
        bad("commute --smp 1", "--smp");
        bad("commute --system bsd", "--system");
        let Command::Commute(c) = p("commute --system ours --jobs 2 --calls open,close").unwrap() else { panic!() };
        assert_eq!((c.jobs, c.system.as_deref()), (2, Some("ours")));
        let Command::Commute(c) = p("commute").unwrap() else { panic!() };
        assert_eq!(c.jobs, 1, "one boot unless asked");
        bad("commute --jobs 0", "0 jobs would run no case");
        bad("commute --jobs two", "`two` is not a number of jobs");
        bad("commute --jobs -1", "`-1` is not a number of jobs");
        bad("commute --jobs 1000", "at most 32");
        bad("completions tcsh", "tcsh");
        bad("fuz", "fuzz");
        bad("frobnicate", "frobnicate");
    }

    /// The sub-tools' lines (declared in their own modules): good ones parse to the typed command.
    #[test]
    fn sub_tool_lines() {
        let Command::Fs(FsArgs { command: FsCommand::Mkimage { size, .. } }) = p("fs mkimage dir x.img --size 8M").unwrap() else { panic!() };
        assert_eq!(size, Some(8));
        assert!(matches!(p("fs ls x.img").unwrap(), Command::Fs(FsArgs { command: FsCommand::Ls { path, .. } }) if path == "/"));
        assert!(matches!(p("fs crash --kills 3").unwrap(), Command::Fs(FsArgs { command: FsCommand::Crash { kills: 3, seed: 1 } })));
        let Command::Net(NetArgs { command: NetCommand::Load(l) }) = p("net load --port 8080 --conns 10").unwrap() else { panic!() };
        assert_eq!((l.port, l.conns), (8080, Some(10)));
        let Command::Net(NetArgs { command: NetCommand::Fuzz(f) }) = p("net fuzz --frames 3000 --seed 0x10 --system ours").unwrap() else { panic!() };
        assert_eq!((f.frames, f.seed, f.system.as_str(), f.smp), (3000, 16, "ours", 2));
        let Command::Linux(LinuxArgs { command: LinuxCommand::Run(r) }) = p("linux run --wl tcpserv --net --hostfwd 8080:80 --load 200 --smp 2").unwrap() else { panic!() };
        assert_eq!((r.wl.as_str(), r.smp, r.load, r.hostfwd.len()), ("tcpserv", Some(2), Some(200), 1));
        let Command::Webd(WebdArgs { command: WebdCommand::Run(r) }) = parse(["webd", "run", "--system", "linux", "--load", "--conns 4 --requests 20", "--check"]).unwrap().command else { panic!() };
        assert_eq!((r.system.as_str(), r.check, r.load.map(|l| l.conns)), ("linux", true, Some(Some(4))));
        let Command::Metis(MetisArgs { command: MetisCommand::Sweep(s) }) = p("metis sweep wrmem --smp 1,2 --systems ours --size 4m").unwrap() else { panic!() };
        assert_eq!((s.app, s.smp.map(|l| l.0), s.systems, s.run.size), (SweepApp::Wrmem, Some(vec![1, 2]), vec!["ours".to_string()], Some(4 << 20)));
        let Command::Metis(MetisArgs { command: MetisCommand::Wc(w) }) = p("metis wc --input t.txt --smp 4 --check --digest-only").unwrap() else { panic!() };
        assert_eq!((w.smp, w.check, w.run.digest_only), (4, true, true));
        assert!(matches!(p("plugin sharing --smp 2").unwrap(), Command::Plugin(PluginArgs { command: PluginCommand::Sharing(PluginOpts { smp: Some(2), .. }) })));
        assert!(matches!(p("plugin audit --kernel-only").unwrap(), Command::Plugin(PluginArgs { command: PluginCommand::Sharing(PluginOpts { kernel_only: true, .. }) })));
        assert!(matches!(p("cachesim --preset amd16,nehalem --smp 2").unwrap(), Command::Cachesim(PluginOpts { smp: Some(2), preset: Some(_), .. })));
        assert!(matches!(p("audit --system ours --bench dupclose").unwrap(), Command::Audit(PluginOpts { workload: Some(_), .. })));
        // Their help is generated (exit status 0), as `help` word, `--help` and `help SUB`.
        for line in ["plugin help", "linux help", "net help", "webd help", "fs help", "metis --help", "metis help", "fs mkimage --help", "webd help run", "net load -h", "cachesim help", "audit --help"] {
            let e = p(line).expect_err(line);
            assert_eq!((e.kind(), e.exit_code()), (clap::error::ErrorKind::DisplayHelp, 0), "{line}");
        }
    }

    /// Bad input to a sub-tool: one line naming the problem, exit status 2 (at parse time,
    /// before anything is built or written).
    #[test]
    fn sub_tool_bad_lines() {
        // An unknown sub-command, or none.
        for (line, needle) in [("plugin frob", "frob"), ("linux boot", "boot"), ("net flood", "flood"), ("webd serve", "serve"), ("fs format", "format"), ("metis grep", "grep"), ("metis sweep grep", "grep")] {
            bad(line, needle);
        }
        for tool in ["plugin", "linux", "net", "webd", "fs", "metis"] {
            let e = p(tool).expect_err(tool);
            assert_eq!(e.exit_code(), 2, "{tool} alone");
        }
        // A bad number or value names the option.
        for (line, needle) in [
            ("plugin insncount --smp 0", "--smp"),
            ("plugin cachesim --top x", "--top"),
            ("plugin cachesim --core-map 0,4,4", "--core-map"),
            ("plugin sharing --preset skylake", "--preset"),
            ("cachesim --timeout soon", "--timeout"),
            ("audit --scope most", "--scope"),
            ("linux run --smp 65", "--smp"),
            ("linux run --mem x", "--mem"),
            ("linux run --load 0", "--load"),
            ("linux run --concurrency 0", "--concurrency"),
            ("linux run --hostfwd 80", "--hostfwd"),
            ("net load --port 0", "--port"),
            ("net load --port 80 --conns many", "--conns"),
            ("net fuzz --smp 0", "--smp"),
            ("net fuzz --seed x", "--seed"),
            ("net fuzz --system bsd", "--system"),
            ("webd load --port x", "--port"),
            ("webd load --port 80 --steer 65", "--steer"),
            ("webd check --port 80 --timeout 0", "--timeout"),
            ("webd run --smp 0", "--smp"),
            ("webd run --mode sideways", "--mode"),
            ("webd run --files 8", "--files"),
            ("webd cachesim --map 1:2", "--map"),
            ("webd cachesim --preset pentium", "--preset"),
            ("fs mkimage d x.img --size lots", "--size"),
            ("fs crash --kills x", "--kills"),
            ("metis wc --smp 0", "--smp"),
            ("metis wrmem --layout diagonal", "--layout"),
            ("metis wrmem --linux-thp maybe", "--linux-thp"),
            ("metis sweep wc --smp 1,x", "--smp"),
            ("metis sweep wc --systems bsd", "--systems"),
            ("net load --port 80 --bogus", "--bogus"),
        ] {
            bad(line, needle);
        }
        // A missing argument: the required option or file names itself.
        for (line, needle) in [
            ("net load", "--port"),
            ("webd check", "--port"),
            ("linux initramfs", "--init"),
            ("fs mkimage dir", "IMG"),
            ("fs check", "IMG"),
            ("fs cat x.img", "PATH"),
            ("fs get x.img /a", "OUT"),
            ("metis sweep", "APP"),
            ("net load --port", "--port"),
            ("metis wc --input", "--input"),
        ] {
            bad(line, needle);
        }
        // Extra words are refused too.
        bad("fs check a.img b.img", "b.img");
        bad("net selftest now", "now");
    }

    #[test]
    fn bash_completions_name_the_commands() {
        let s = String::from_utf8(completions(clap_complete::Shell::Bash)).unwrap();
        for c in COMMANDS {
            assert!(s.contains(c), "bash completions lack `{c}`");
        }
        assert!(s.contains("--smp") && s.contains("--host-only") && s.contains("report-check"));
        // The sub-tools' commands and options too.
        for w in ["mkimage", "fstest-image", "selftest", "insncount", "sharing", "initramfs", "sweep", "wrmem", "--expect-sums", "--abort-every", "--core-map", "--linux-thp", "--kills"] {
            assert!(s.contains(w), "bash completions lack `{w}`");
        }
        for sh in [clap_complete::Shell::Zsh, clap_complete::Shell::Fish] {
            assert!(String::from_utf8(completions(sh)).unwrap().contains("commute"));
        }
    }

    /// Every complete `cargo xtask ...` command line quoted in README.md and docs/ (in
    /// backticks, with no placeholder such as N, DIR, `...`, `[`, `|`) must parse: catches an
    /// option renamed here but not in the docs, or one the docs invent.
    #[test]
    fn documented_command_lines_parse() {
        let root = crate::host::env::workspace_root();
        let mut files = vec![root.join("README.md")];
        for e in std::fs::read_dir(root.join("docs")).unwrap().chain(std::fs::read_dir(root.join("docs/history")).unwrap()) {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "md") {
                files.push(p);
            }
        }
        let (mut checked, mut mentions, mut failures) = (0, 0, Vec::new());
        // Lines of the sub-tools (declared in their modules), checked option by option like the others.
        let mut sub_tool_lines = 0;
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap();
            for span in text.split('`').skip(1).step_by(2) {
                let Some(line) = span.trim().strip_prefix("cargo xtask ") else { continue };
                let Some(words) = shell_words(line) else { continue };
                let placeholder = |w: &String| {
                    w.contains("...") || w.contains('[') || w.contains('|') || w.contains('<') || w == "M" || (w.len() > 0 && w.chars().all(|c| c.is_ascii_uppercase() || c == '_' || c == ':' || c == ','))
                };
                if words.is_empty() || words.iter().any(placeholder) || span.contains('>') || line.contains("cargo xtask") {
                    continue;
                }
                checked += 1;
                if ["plugin", "cachesim", "audit", "linux", "net", "webd", "fs", "metis"].contains(&words[0].as_str()) && words.len() > 2 {
                    sub_tool_lines += 1;
                }
                if let Err(e) = parse(&words) {
                    // A command named in prose (`cargo xtask fs mkimage`, `cargo xtask metis`):
                    // only command names, the arguments it needs left out. It must name a
                    // command (an unknown one is a different error), nothing more.
                    use clap::error::ErrorKind;
                    let mention = matches!(e.kind(), ErrorKind::MissingRequiredArgument | ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand)
                        && words.iter().all(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '-') && !w.starts_with('-'));
                    if mention {
                        mentions += 1;
                    } else if e.exit_code() != 0 {
                        failures.push(format!("{}: `cargo xtask {line}`: {}", f.file_name().unwrap().to_string_lossy(), one_line(&e, None)));
                    }
                }
            }
        }
        assert!(checked > 50, "only {checked} documented command lines found");
        assert!(sub_tool_lines > 20, "only {sub_tool_lines} documented sub-tool lines with options found");
        assert!(mentions < checked / 4, "{mentions} of {checked} documented lines are bare command names");
        assert!(failures.is_empty(), "{} of {checked} documented command lines do not parse:\n{}", failures.len(), failures.join("\n"));
    }

    /// Words of a shell line with "..." and '...' quoting; None for what this does not handle.
    fn shell_words(line: &str) -> Option<Vec<String>> {
        let (mut words, mut cur, mut quote, mut any) = (Vec::new(), String::new(), None, false);
        for c in line.chars() {
            match (quote, c) {
                (None, c) if c.is_whitespace() => {
                    if any {
                        words.push(std::mem::take(&mut cur));
                    }
                    any = false;
                }
                (None, '"' | '\'') => {
                    quote = Some(c);
                    any = true;
                }
                (Some(q), c) if c == q => quote = None,
                (None, '$' | ';' | '&' | '\\') => return None,
                (_, c) => {
                    cur.push(c);
                    any = true;
                }
            }
        }
        if quote.is_some() {
            return None;
        }
        if any {
            words.push(cur);
        }
        Some(words)
    }
}
