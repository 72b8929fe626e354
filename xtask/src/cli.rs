//! The command line of `cargo xtask`: every command and option declared once, here, with clap
//! (derive). `cargo xtask help`, `cargo xtask --help`, `cargo xtask COMMAND --help` and the
//! shell completions (`cargo xtask completions bash|zsh|fish`) are generated from these
//! declarations. Values are checked while parsing (a bad `--smp` names the option and the
//! range), so every bad value or unknown command is one line on stderr and exit status 2,
//! before anything is built, run or written (main.rs).
//!
//! The sub-tools with commands of their own (`plugin`, `linux`, `net`, `webd`, `fs`, `metis`)
//! are declared in [`tools`]. Only `bench percore` takes the rest of its line as it is
//! ([`ToolArgs`]): it hands it to the percore crate's example, which parses it.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub mod tools;

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
    Plugin(tools::PluginArgs),
    /// Short for `plugin cachesim`
    Cachesim(tools::PluginOpts),
    /// Short for `plugin audit` (the sharing audit)
    Audit(tools::PluginOpts),
    /// Linux baseline: `linux fetch|modules|initramfs|run` (`cargo xtask linux help`)
    Linux(tools::LinuxArgs),
    /// Network host side: `net load`, the TCP load generator, `net fuzz` (`cargo xtask net help`)
    Net(tools::NetArgs),
    /// webd's host side: `webd load`, `webd check`, `webd run`, `webd cachesim` (`cargo xtask webd help`)
    Webd(tools::WebdArgs),
    /// ext2 images: `fs mkimage`, `fs check`, `fs ls|cat|get`, `fs test`, `fs crash` (`cargo xtask fs help`)
    Fs(tools::FsArgs),
    /// Metis MapReduce: `metis wc|wri|wrmem ...`, `metis sweep`, `metis ci` (`cargo xtask metis --help`)
    Metis(tools::MetisArgs),
    /// Host CPU an idle guest uses: QEMU's CPU time over a window with no input or traffic (docs/roles.md, Sleeping)
    Idle(IdleArgs),
    /// Print a shell completion script for `cargo xtask ...` (bash: `source <(cargo xtask completions bash)`)
    Completions(CompletionsArgs),
    /// The instruction-count gate: exact instructions per operation of the measured paths against
    /// xtask/insngate-baseline.txt (docs/insngate.md); --update rewrites lines, with a reason
    Insngate(InsngateArgs),
}

#[derive(Args, Debug, Clone, PartialEq)]
pub struct InsngateArgs {
    /// Rewrite these baseline lines with the measured counts (comma-separated path names, or `all`)
    #[arg(long, value_name = "NAME,...|all")]
    pub update: Option<String>,
    /// Why the baseline changes (required with --update; written on each line)
    #[arg(long, value_name = "TEXT", requires = "update")]
    pub reason: Option<String>,
}

/// `cargo xtask idle`.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct IdleArgs {
    /// vCPU counts to boot, e.g. 1,2,4
    #[arg(long, value_parser = core_list, default_value = "1,2,4", value_name = "LIST")]
    pub smp: CoreList,
    /// Which system: ours, linux or both
    #[arg(long, value_enum, default_value = "ours")]
    pub system: IdleSystem,
    /// What sits idle: shell (the prompt), tcpserv or webd (booted, no traffic), or all
    #[arg(long, value_enum, default_value = "shell")]
    pub what: IdleWhat,
    /// Length of the measured window
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=600), value_name = "SECS")]
    pub seconds: u64,
    /// More words for our tcpserv or webd (e.g. "idle=poll" for pure polling)
    #[arg(long, default_value = "", value_name = "\"...\"")]
    pub guest: String,
    /// Boots per cell (interleaved); more than 1 prints medians and ranges
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20), value_name = "N")]
    pub boots: u32,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleSystem {
    Ours,
    Linux,
    Both,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleWhat {
    Shell,
    Tcpserv,
    Webd,
    All,
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

/// A comma-separated list of vCPU counts, each 1..=255 (`1,2,4`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreList(pub Vec<u32>);

pub fn core_list(v: &str) -> Result<CoreList, String> {
    let mut out = Vec::new();
    for s in v.split(',').map(str::trim) {
        let n: u32 = s.parse().map_err(|_| format!("`{s}` is not a number (want a list of vCPU counts such as 1,2,4)"))?;
        if n == 0 || n > 255 {
            return Err(format!("{n} vCPUs is not in 1..=255"));
        }
        out.push(n);
    }
    Ok(CoreList(out))
}

/// A guest memory size: `512M`, `2G`, `64` (MiB).
pub fn mem_size(v: &str) -> Result<u64, String> {
    crate::qemu::parse_size_mib(v)
}

/// A number, decimal (`1_000` allowed) or `0x` hexadecimal.
pub fn number(v: &str) -> Result<u64, String> {
    let t = v.trim();
    let r = if let Some(h) = t.strip_prefix("0x") { u64::from_str_radix(h, 16) } else { t.replace('_', "").parse::<u64>() };
    r.map_err(|_| format!("`{v}` is not a number"))
}

/// `--gdb`'s port: 1..=65535.
fn tcp_port(v: &str) -> Result<u16, String> {
    v.parse::<u16>().ok().filter(|&p| p > 0).ok_or_else(|| format!("`{v}` is not a TCP port in 1..=65535"))
}

fn hostfwd(v: &str) -> Result<crate::net::Forward, String> {
    crate::net::parse_hostfwd(v).map_err(|e| e.trim_start_matches("--hostfwd: ").to_string())
}

fn inject_spec(v: &str) -> Result<String, String> {
    crate::fuzz::check_inject(v).map(|()| v.to_string()).map_err(|e| e.trim_start_matches("--inject: ").to_string())
}

/// `mutants --only`: a mutant of the catalog (empty names between commas are ignored).
fn mutant_name(v: &str) -> Result<String, String> {
    let v = v.trim();
    if !v.is_empty() && !crate::mutants::CATALOG.iter().any(|m| m.name == v) {
        return Err(format!("no mutant `{v}` in the catalog (see --list)"));
    }
    Ok(v.to_string())
}

fn at_least_one(v: &str) -> Result<u64, String> {
    match number(v)? {
        0 => Err("need at least 1".into()),
        n => Ok(n),
    }
}

/// `on` or `off`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnOff {
    On,
    Off,
}

impl OnOff {
    pub fn is_on(self) -> bool {
        self == OnOff::On
    }
}

// ---------------------------------------------------------------------------------------
// run

/// The virtual machine's options (`run`).
#[derive(Args, Debug, Clone, PartialEq)]
pub struct VmArgs {
    /// Virtual CPUs, 1..=255
    #[arg(long, allow_negative_numbers = true, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=255))]
    pub smp: u32,
    /// Guest memory, e.g. 512M, 2G
    #[arg(long, value_name = "SIZE", default_value = "512M", value_parser = mem_size)]
    pub mem: u64,
    /// Split cores and memory evenly over NODES NUMA nodes (at most one node per core)
    #[arg(long, allow_negative_numbers = true, value_name = "NODES", value_parser = clap::value_parser!(u32).range(1..=255))]
    pub numa: Option<u32>,
    /// Kernel command line (e.g. "topology"); `init=sh` is added unless it names a first program
    #[arg(long, value_name = "\"...\"", allow_hyphen_values = true)]
    pub cmdline: Option<String>,
    /// QEMU -cpu model
    #[arg(long, value_name = "MODEL", default_value = "max")]
    pub cpu: String,
    /// Boot the GRUB ISO instead of -kernel
    #[arg(long)]
    pub iso: bool,
    /// With --iso: boot under OVMF (UEFI) instead of SeaBIOS
    #[arg(long, requires = "iso")]
    pub uefi: bool,
    /// Kill QEMU after SECS seconds (default: none)
    #[arg(long, allow_negative_numbers = true, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Add a virtio-net NIC on QEMU's restricted user-mode network (guest 10.0.2.15/24); forwards
    /// a free port on 127.0.0.1 to guest port 80 unless --hostfwd is given, and prints
    /// `net: 127.0.0.1:PORT -> guest:80`
    #[arg(long)]
    pub net: bool,
    /// Attach the raw image IMG as a virtio-blk disk (make one with `cargo xtask fs mkimage DIR IMG`)
    #[arg(long, value_name = "IMG")]
    pub disk: Option<PathBuf>,
    /// Forward 127.0.0.1:H on the host to guest port G (repeatable; implies --net)
    #[arg(long, value_name = "H:G", value_parser = hostfwd, action = clap::ArgAction::Append)]
    pub hostfwd: Vec<crate::net::Forward>,
}

impl VmArgs {
    /// The machine these options describe; the checks between options (NUMA nodes against
    /// cores and memory, the disk image) are made here.
    pub fn into_config(self) -> Result<crate::qemu::VmConfig, String> {
        use crate::qemu::{BootMedium, VmConfig};
        let d = VmConfig::default();
        let cfg = VmConfig {
            smp: self.smp,
            mem_mib: self.mem,
            numa_nodes: self.numa.unwrap_or(0),
            cmdline: self.cmdline.unwrap_or_default(),
            cpu: self.cpu,
            timeout: self.timeout.map(std::time::Duration::from_secs),
            net: if self.net || !self.hostfwd.is_empty() { Some(crate::net::from_options(self.hostfwd)?) } else { None },
            disk: self.disk,
            medium: self.iso.then(|| BootMedium::Iso { path: crate::iso::default_iso_path(), uefi: self.uefi }),
            ..d
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct RunArgs {
    #[command(flatten)]
    pub vm: VmArgs,
    /// QEMU's gdb stub on 127.0.0.1:PORT (default 1234), stopped before the first instruction;
    /// prints the gdb command line that loads the kernel's symbols and runs to kernel_entry
    /// (docs/boot.md, Debugging)
    #[arg(long, allow_negative_numbers = true, value_name = "PORT", num_args = 0..=1, default_missing_value = "1234", value_parser = tcp_port)]
    pub gdb: Option<u16>,
}

// ---------------------------------------------------------------------------------------
// test, iso, build

#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct TestArgs {
    /// vCPU counts for the in-kernel test boots, each 1..=255
    #[arg(long, value_name = "LIST", default_value = "1,2,4,8", value_parser = core_list)]
    pub smp: CoreList,
    /// Skip the QEMU boots
    #[arg(long)]
    pub host_only: bool,
    /// Run only the suites whose name contains PATTERN (repeatable), e.g. --only roletest --only "kernel smp=4"
    #[arg(long, value_name = "PATTERN", action = clap::ArgAction::Append, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub only: Vec<String>,
    /// Print the suites' names and what each declares, run nothing
    #[arg(long)]
    pub list: bool,
}

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

/// The benchmark matrix's options (`cargo xtask bench`).
#[derive(Args, Debug, Clone, PartialEq)]
pub struct MatrixArgs {
    /// Systems to run: ours, linux (Debian's kernel as shipped), linux-tuned (the same with
    /// mitigations=off and the rest of docs/bench.md's tuning); a claim holds only against
    /// the faster Linux, so both baselines are the default
    #[arg(long, value_name = "LIST", default_value = "ours,linux,linux-tuned")]
    pub systems: String,
    /// vCPU counts, each 1..=255; above 2 timings are functional only
    #[arg(long, value_name = "LIST", default_value = "1,2", value_parser = core_list)]
    pub smp: CoreList,
    /// Benchmarks to run (default all; see --list); `calib` always runs as well
    #[arg(long, value_name = "LIST")]
    pub only: Option<String>,
    /// Where results.json, results.csv, table.txt, report.html and the plots go (default target/bench-results)
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Kill one guest boot after SECS (reported as timed out)
    #[arg(long, allow_negative_numbers = true, value_name = "SECS", default_value = "180", value_parser = at_least_one)]
    pub timeout: u64,
    /// Override a parameter (e.g. iters=1000) in every benchmark that has it (repeatable)
    #[arg(long, value_name = "KEY=VALUE", action = clap::ArgAction::Append)]
    pub param: Vec<String>,
    /// Guest memory
    #[arg(long, value_name = "SIZE", default_value = "512M", value_parser = mem_size)]
    pub mem: u64,
    /// Count guest instructions with the insncount plugin
    #[arg(long, value_name = "on|off", default_value = "on")]
    pub insns: OnOff,
    /// Runs per boot, 1..=100; the fastest is reported
    #[arg(long, allow_negative_numbers = true, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub reps: u64,
    /// Boot every cell (system x benchmark x vCPUs) N times, 1..=100; medians and ranges per
    /// cell, ours/linux paired boot by boot; recorded timing claims use 5 or more
    #[arg(long, allow_negative_numbers = true, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=crate::bench::MAX_BOOTS as i64))]
    pub boots: u32,
    /// Seed of the shuffled cell order (printed, to replay a run)
    #[arg(long, allow_negative_numbers = true, value_name = "S", default_value_t = 1)]
    pub seed: u64,
    /// tcp_accept: also a sharing audit per cell from 2 vCPUs (a boot of its own, single-threaded
    /// TCG): cross-core line transfers per connection, split into driver, stack, IPC, alloc,
    /// other (kernel) and user
    #[arg(long, value_name = "on|off", default_value = "off")]
    pub audit: OnOff,
    /// Redraw the table, plots, results.csv and report.html from DIR/results.json without running
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
    /// List the benchmarks
    #[arg(long)]
    pub list: bool,
}

#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct BootBenchArgs {
    /// vCPU counts, each 1..=255 (Linux's boot under TCG grows fast with them: 16 or more take
    /// minutes per boot)
    #[arg(long, value_name = "LIST", default_value = "1,2,4", value_parser = core_list)]
    pub smp: CoreList,
    /// Boots per system and count, 1..=100 (ours and Linux back to back); medians and ranges
    #[arg(long, allow_negative_numbers = true, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub runs: u32,
    /// Where boot.json goes (default target/bench)
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Do not boot Linux for the comparison
    #[arg(long)]
    pub no_linux: bool,
}

#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct ReportCheckArgs {
    /// The results directory holding report.html and results.json (default target/bench-results)
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Also render the page in headless Chromium (Debian package `chromium`, installed on
    /// demand): printed to PDF (must have pages) and drawn to PNG (must not be blank)
    #[arg(long)]
    pub browser: bool,
}

// ---------------------------------------------------------------------------------------
// commute, fuzz, soak, mutants

#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct CommuteArgs {
    /// Only pairs of these calls (default: every modelled call; see --list; with --system the
    /// POSIX calls)
    #[arg(long, value_name = "a,b,...", value_parser = crate::commute::calls_arg)]
    pub calls: Option<String>,
    /// Check the POSIX calls (open, read, link, ...) on this system's library OS, on Linux, or
    /// both, the same cases under the same audit (without it: the kernel's own calls)
    #[arg(long, value_name = "ours|linux|both", value_parser = ["ours", "linux", "both"])]
    pub system: Option<String>,
    /// vCPUs, at least 2 (the two calls run on cores 0 and 1)
    #[arg(long, allow_negative_numbers = true, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(2..=255))]
    pub smp: u32,
    /// Split the cases into N parts run by N QEMU boots at once, merged into one report (the
    /// same per-case results as one boot; on the library OS a few cases' shared lines can
    /// differ, docs/commute.md). Default 1: each boot takes a host core for its whole run and
    /// the machine may be shared; 2 on an idle 2-core host
    #[arg(long, allow_negative_numbers = true, value_name = "N", default_value_t = 1, value_parser = crate::commute::jobs_arg)]
    pub jobs: usize,
    /// The guest run's limit
    #[arg(long, allow_negative_numbers = true, value_name = "SECS", default_value_t = 900)]
    pub timeout: u64,
    /// Where results go (default target/commute)
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// The seeded CI sample, checked against xtask/src/commute/baseline.txt
    #[arg(long)]
    pub ci: bool,
    /// With --ci: rewrite the baseline from this run (a case recorded conflict-free that now
    /// conflicts is refused unless named with --accept)
    #[arg(long, requires = "ci")]
    pub update_baseline: bool,
    /// With --update-baseline: write these cases (indices, comma-separated, repeatable), recorded
    /// conflict-free and conflicting now, as accepted regressions; each needs a line `SET CASE
    /// REASON` in xtask/src/commute/accepted-regressions.txt
    #[arg(long, value_name = "CASE,...", value_delimiter = ',', requires = "update_baseline")]
    pub accept: Vec<usize>,
    /// Print the model's decisions without booting
    #[arg(long)]
    pub model_only: bool,
    /// List the modelled calls and the case count
    #[arg(long)]
    pub list: bool,
    /// The CI sample on a kernel with a planted conflict (feature planted-conflict): succeeds
    /// only if the baseline check catches it
    #[arg(long)]
    pub planted: bool,
}

#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct FuzzArgs {
    /// Calls in all, shared out over the cores (at least 1)
    #[arg(long, allow_negative_numbers = true, value_name = "N", default_value = "100000", value_parser = at_least_one)]
    pub calls: u64,
    /// The seed (decimal or 0x hex); a failure prints it and the replay command
    #[arg(long, allow_negative_numbers = true, value_name = "S", default_value = "1", value_parser = number)]
    pub seed: u64,
    /// vCPUs, 1..=32 (the fuzzer's core limit)
    #[arg(long, allow_negative_numbers = true, value_name = "K", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=32))]
    pub smp: u32,
    /// Allocation fault injection: alloc:1/N (every Nth) or alloc:seed:S:P (P percent, seeded)
    #[arg(long, value_name = "SPEC", value_parser = inject_spec)]
    pub inject: Option<String>,
    /// When injection starts: `program` (once the fuzzer's set-up is done, so every injected failure meets a fuzzed call) or `boot` (before the program starts: tests its start-up, which then fuzzes nothing and fails)
    #[arg(long, value_name = "WHEN", default_value = "program", value_parser = ["program", "boot"])]
    pub inject_from: String,
    /// Boot the kernel with the planted bug (a name length left unchecked): the fuzzer must find it
    #[arg(long)]
    pub planted_bug: bool,
    /// Boot with the network card: virtual NICs are made and misused too
    #[arg(long)]
    pub net: bool,
    /// Attach a blank scratch disk: block device objects and disk requests too
    #[arg(long)]
    pub scratch_disk: bool,
    /// Print every call before it is issued (to see the one that crashed the kernel)
    #[arg(long)]
    pub trace: bool,
    /// Kill the run after SECS (default: from the call count)
    #[arg(long, allow_negative_numbers = true, value_name = "SECS", value_parser = number)]
    pub timeout: Option<u64>,
}

#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct SoakArgs {
    /// How long, in minutes (at least 1)
    #[arg(long, allow_negative_numbers = true, value_name = "M", value_parser = at_least_one)]
    pub minutes: u64,
    /// vCPUs, 1..=32
    #[arg(long, allow_negative_numbers = true, value_name = "K", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=32))]
    pub smp: u32,
}

#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct MutantsArgs {
    /// Only these mutants (comma-separated, repeatable; see --list)
    #[arg(long, value_name = "NAME,...", action = clap::ArgAction::Append, value_delimiter = ',', value_parser = mutant_name)]
    pub only: Vec<String>,
    /// Print the catalog, run nothing
    #[arg(long)]
    pub list: bool,
    /// Keep the scratch tree and its builds afterwards (a rerun then rebuilds only what changed)
    #[arg(long)]
    pub keep: bool,
    /// Skip running the checks on the unmutated tree first (only when it was just checked: a
    /// check that fails anyway would count every mutant killed)
    #[arg(long)]
    pub no_baseline: bool,
}

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

/// A clap error as one line: what is wrong (clap names the option and the value), its tip if
/// it has one, and where the help is.
pub fn one_line(e: &clap::Error, command: Option<&str>) -> String {
    let text = e.to_string();
    // The message, and the lines it continues on (`...not provided:` and the arguments),
    // up to the usage line; clap's tip if it gives one.
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let body: Vec<&str> = lines.iter().copied().take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information") && !l.starts_with("tip:")).collect();
    let joined = if body.is_empty() { "bad command line".to_string() } else { body.join(" ") };
    let first = joined.strip_prefix("error: ").unwrap_or(&joined);
    let tip = lines.iter().find_map(|l| l.strip_prefix("tip: ")).map(|t| format!(" ({t})")).unwrap_or_default();
    let help = match command {
        Some(c) => format!("cargo xtask {c} --help"),
        None => "cargo xtask help".into(),
    };
    format!("{first}{tip}; see `{help}`")
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

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Every command of main.rs's dispatch, in the order `help` lists them.
    const COMMANDS: &[&str] = &["run", "test", "iso", "build", "bench", "commute", "fuzz", "soak", "mutants", "plugin", "cachesim", "audit", "linux", "net", "webd", "fs", "metis", "idle", "completions", "insngate"];

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
        // `cargo xtask cachesim` typed bare: main.rs turns the missing workload into this
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
        assert!(matches!(r.vm.into_config().unwrap().medium, Some(crate::qemu::BootMedium::Iso { uefi: true, .. })));
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

    /// The sub-tools' lines (cli/tools.rs): good ones parse to the typed command.
    #[test]
    fn sub_tool_lines() {
        use tools::*;
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
        let root = crate::env::workspace_root();
        let mut files = vec![root.join("README.md")];
        for e in std::fs::read_dir(root.join("docs")).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "md") {
                files.push(p);
            }
        }
        let (mut checked, mut mentions, mut failures) = (0, 0, Vec::new());
        // Lines of the sub-tools (cli/tools.rs), checked option by option like the others.
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
