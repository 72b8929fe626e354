//! The sub-tools' command lines (`plugin`, `cachesim`, `audit`, `linux`, `net`, `webd`, `fs`,
//! `metis`), declared with clap like the rest of `cargo xtask` (cli.rs): their help, their
//! completions and their errors (one line, exit status 2, before anything runs) come from
//! here. Values are checked while parsing; the checks between options (which need several of
//! them, or a file) are made by each tool's own `*_options`/`spec` function, whose error is a
//! usage error too (main.rs).

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::{at_least_one, hostfwd, mem_size, number, tcp_port, OnOff};

// ---------------------------------------------------------------------------------------
// plugin, cachesim, audit

#[derive(Args, Debug, Clone, PartialEq)]
pub struct PluginArgs {
    #[command(subcommand)]
    pub command: PluginCommand,
}

#[derive(Subcommand, Debug, Clone, PartialEq)]
pub enum PluginCommand {
    /// Build the plugins (target/qemu-plugins/*.so), the guest /init and the simulator tests
    Build,
    /// Simulator tests on synthetic traces, then short guest runs (as `cargo xtask test`)
    Test,
    /// Guest instructions per vCPU, kernel/user, inside the marked region
    Insncount(PluginOpts),
    /// CachEMU: OS/app misses, competition, cooperation, memory CPI per placement
    Cachesim(PluginOpts),
    /// Lines written by one vCPU and touched by another, with kernel symbols
    #[command(visible_alias = "audit")]
    Sharing(PluginOpts),
    /// Run time with each plugin over plain TCG on one workload
    Overhead(PluginOpts),
    /// Fetch (once) the Linux guest's kernel symbols (/proc/kallsyms, cached)
    Symbols(PluginOpts),
}

/// The measurement runs' options. insncount, cachesim and sharing run in the exact mode
/// (docs/plugins.md): their counts repeat whatever the host's load.
#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct PluginOpts {
    /// Guest system
    #[arg(long, value_name = "SYSTEM", default_value = "linux", value_parser = ["linux", "ours"])]
    pub system: String,
    /// The workload (linux: stream null dupclose ... tcpserv or a suite benchmark; ours: a suite
    /// benchmark or a microbenchmark: null fault share_private share_global stat segment ppc)
    #[arg(long, visible_alias = "bench", value_name = "NAME")]
    pub workload: Option<String>,
    /// vCPUs, 1..=64 (default 1; sharing: 2)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub smp: Option<u32>,
    /// Workload parameters (iters=, threads=, size=, passes=, files=)
    #[arg(long, value_name = "\"k=v ...\"", default_value = "", allow_hyphen_values = true)]
    pub params: String,
    /// cachesim: nehalem, sweep, nehalem-mc, amd16, comma-separated (default nehalem)
    #[arg(long, value_name = "LIST", value_parser = preset_list)]
    pub preset: Option<Presets>,
    /// Multi-core presets: vCPU i drives core Ci (e.g. 0,4,8,12: one per amd16 chip)
    #[arg(long, value_name = "C0,C1,..", value_parser = core_map)]
    pub core_map: Option<CoreMap>,
    /// Multi-core presets: simulate only inside the region, or every access after the first marker
    #[arg(long, value_name = "SCOPE", default_value = "region", value_parser = ["region", "all"])]
    pub scope: String,
    /// cachesim: custom unified hierarchy, G = SIZE:ASSOC[:LINE], e.g. 32K:8/8M:16
    #[arg(long, value_name = "G1/G2/..")]
    pub levels: Option<String>,
    /// cachesim with --levels: back-invalidate on eviction
    #[arg(long, value_enum, default_value = "on")]
    pub inclusive: OnOff,
    /// sharing: ignore user-mode accesses
    #[arg(long)]
    pub kernel_only: bool,
    /// sharing: lines to list
    #[arg(long, value_name = "N", default_value_t = 25)]
    pub top: usize,
    /// (--system ours) boot this command line instead of a workload ("init=PROG -- ARGS")
    #[arg(long, value_name = "\"init=PROG -- ARGS\"", allow_hyphen_values = true)]
    pub cmdline: Option<String>,
    /// With --cmdline: attach IMG as a virtio-blk disk
    #[arg(long, value_name = "IMG")]
    pub disk: Option<PathBuf>,
    /// With --cmdline: a NIC on QEMU's restricted user-mode network (as `cargo xtask run --net`)
    #[arg(long)]
    pub net: bool,
    /// With --cmdline: forward 127.0.0.1:H to guest port G (repeatable; implies --net)
    #[arg(long, value_name = "H:G", value_parser = hostfwd, action = clap::ArgAction::Append)]
    pub hostfwd: Vec<crate::net::Forward>,
    /// With --cmdline: once a serial line contains TEXT, run --load-cmd
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    pub ready: Option<String>,
    /// With --ready: `sh -c CMD` with the forwarded port in $PORT and {port}; then QEMU is stopped
    #[arg(long, value_name = "CMD", allow_hyphen_values = true)]
    pub load_cmd: Option<String>,
    /// With --cmdline: print the serial output
    #[arg(long)]
    pub echo: bool,
    /// Where JSON and plots go (default target/plugin-results)
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Kill the guest after SECS
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub timeout: u64,
}

/// `--preset`'s list of cache-simulator presets.
#[derive(Debug, Clone, PartialEq)]
pub struct Presets(pub Vec<String>);

/// `--core-map`: vCPU i drives simulated core `0[i]`.
#[derive(Debug, Clone, PartialEq)]
pub struct CoreMap(pub Vec<u32>);

fn preset_list(v: &str) -> Result<Presets, String> {
    v.split(',')
        .map(|p| {
            if matches!(p, "nehalem" | "sweep" | "nehalem-mc" | "amd16") {
                Ok(p.to_string())
            } else {
                Err(format!("unknown preset `{p}` (nehalem, sweep, nehalem-mc, amd16)"))
            }
        })
        .collect::<Result<_, _>>()
        .map(Presets)
}

fn core_map(v: &str) -> Result<CoreMap, String> {
    let cores = v.split(',').map(|c| c.trim().parse::<u32>().ok().filter(|&c| c < 64)).collect::<Option<Vec<u32>>>();
    let cores = cores.filter(|c| !c.is_empty()).ok_or_else(|| format!("`{v}` is not a list of core numbers 0..63 (e.g. 0,4,8,12)"))?;
    if let Some(d) = cores.iter().enumerate().find(|(i, c)| cores[..*i].contains(c)) {
        return Err(format!("core {} is given to two vCPUs", d.1));
    }
    Ok(CoreMap(cores))
}

// ---------------------------------------------------------------------------------------
// linux

#[derive(Args, Debug, Clone, PartialEq)]
pub struct LinuxArgs {
    #[command(subcommand)]
    pub command: LinuxCommand,
}

#[derive(Subcommand, Debug, Clone, PartialEq)]
pub enum LinuxCommand {
    /// Download Debian's kernel package (the one linux-image-amd64 depends on) into
    /// target/linux-cache and unpack its /boot (never installs into /boot); prints the version
    /// and bzImage path
    Fetch,
    /// The NIC's modules (virtio-net, virtio-pci and their depends=) in load order, each checked
    /// to carry the bzImage's release in its vermagic
    Modules,
    /// Pack BIN as /init (plus /dev/console, /proc, /tmp) into a newc cpio
    Initramfs {
        /// The static program to run as /init
        #[arg(long, value_name = "BIN")]
        init: PathBuf,
        /// Where the archive goes (default target/qemu-plugins/initramfs.cpio)
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Boot the measurement guest (tools/qemu-plugins/guest) running a workload; print its serial output
    #[command(long_about = "Boot the measurement guest (tools/qemu-plugins/guest) running workload NAME (default null) \
and print its serial output. --net adds the virtio-net NIC (its modules unpacked from the kernel package into the \
initramfs) on QEMU's restricted user-mode network, forwarding a free port on 127.0.0.1 to guest port 80 (or --hostfwd); \
for `--wl tcpserv` (Corey's TCP accept service), --load N waits for `tcpserv: ready`, opens N connections with the load \
generator (C at a time, default 2), and waits for the guest's `tcpserv: done`.")]
    Run(LinuxRunArgs),
}

#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct LinuxRunArgs {
    /// The guest workload (tools/qemu-plugins/guest)
    #[arg(long, value_name = "NAME", default_value = "null")]
    pub wl: String,
    /// vCPUs, 1..=64
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub smp: Option<u32>,
    /// Guest memory in MiB
    #[arg(long, value_name = "MIB", value_parser = at_least_one)]
    pub mem: Option<u64>,
    /// Added to the kernel command line
    #[arg(long, value_name = "\"...\"", allow_hyphen_values = true)]
    pub append: Option<String>,
    /// Kill the guest after SECS
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// A NIC on QEMU's restricted user-mode network (forwards a free port to guest port 80)
    #[arg(long)]
    pub net: bool,
    /// Forward 127.0.0.1:H to guest port G (repeatable; implies --net)
    #[arg(long, value_name = "H:G", value_parser = hostfwd, action = clap::ArgAction::Append)]
    pub hostfwd: Vec<crate::net::Forward>,
    /// With --wl tcpserv --net: drive the guest with N connections (the accept benchmark)
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub load: Option<u64>,
    /// With --load: connections at once
    #[arg(long, value_name = "C", value_parser = clap::value_parser!(u64).range(1..))]
    pub concurrency: Option<u64>,
}

// ---------------------------------------------------------------------------------------
// net

#[derive(Args, Debug, Clone, PartialEq)]
#[command(after_help = "The guest side: `cargo xtask run --net` (our system) or `cargo xtask linux run --wl tcpserv --net` (Debian's kernel) print the forwarded port.")]
pub struct NetArgs {
    #[command(subcommand)]
    pub command: NetCommand,
}

#[derive(Subcommand, Debug, Clone, PartialEq)]
pub enum NetCommand {
    /// The TCP load generator: connections to 127.0.0.1:PORT, each reply exactly the service's 128 bytes
    #[command(long_about = "Open up to N connections (default 1000) to 127.0.0.1:P, C at a time (default 2: QEMU's \
user-mode network listens with a backlog of 1, and more than 2 connects in flight wait out 1 s SYN retransmissions, \
counted as slow_connects), for at most T seconds (default 30), each within --timeout (default 5 s); each reply must be \
exactly the service's 128 bytes. Prints connections/s, failures by kind and latency percentiles; exit 1 on a failure.")]
    Load(NetLoadArgs),
    /// The frame fuzzer: seeded random and mutated Ethernet frames into the guest's NIC
    #[command(long_about = "The frame fuzzer: boot the guest's TCP service with its NIC on a QEMU socket netdev connected \
to this process (127.0.0.1), write N (default 10000) seeded random and mutated Ethernet frames into it (replayable: frame \
i depends on S and i only), then check a connection to port 80 still gets the 128 bytes and the kernel printed no panic/oops.")]
    Fuzz(NetFuzzArgs),
    /// The network's QEMU tests of `cargo xtask test` on their own (~12 s)
    Selftest,
}

#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct NetLoadArgs {
    /// The host port forwarded to the guest's port 80
    #[arg(long, value_name = "P", value_parser = tcp_port)]
    pub port: u16,
    /// Connections in all, at most (default 1000)
    #[arg(long, value_name = "N", value_parser = number)]
    pub conns: Option<u64>,
    /// Connections at once (default 2)
    #[arg(long, value_name = "C", value_parser = number)]
    pub concurrency: Option<u64>,
    /// No new connection after T seconds (default 30)
    #[arg(long, value_name = "T", value_parser = number)]
    pub seconds: Option<u64>,
    /// Per connection: connect and the whole reply within SECS (default 5)
    #[arg(long, value_name = "SECS", value_parser = number)]
    pub timeout: Option<u64>,
    /// Every K-th connection is reset by the client right after connect (counted as aborted)
    #[arg(long, value_name = "K", value_parser = number)]
    pub abort_every: Option<u64>,
}

#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct NetFuzzArgs {
    /// Frames to send, 1..=1000000
    #[arg(long, value_name = "N", default_value = "10000", value_parser = number)]
    pub frames: u64,
    /// The seed
    #[arg(long, value_name = "S", default_value = "1", value_parser = number)]
    pub seed: u64,
    /// The guest system: ours (this system, the default) or linux (the baseline)
    #[arg(long, value_name = "SYSTEM", default_value = "ours", value_parser = ["linux", "ours"])]
    pub system: String,
    /// vCPUs, 1..=64
    #[arg(long, value_name = "K", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub smp: u32,
    /// The guest run's limit in seconds
    #[arg(long, value_name = "SECS", default_value = "300", value_parser = at_least_one)]
    pub timeout: u64,
    /// Send only frames of these kinds (e.g. truncated,bit_flips), numbered as in the full run
    #[arg(long, value_name = "LIST")]
    pub kinds: Option<String>,
    /// With --system ours: how the guest's service takes frames (tcpserv's mode=)
    #[arg(long, value_name = "MODE", default_value = "dedicated", value_parser = ["dedicated", "polling", "inline"])]
    pub mode: String,
}

// ---------------------------------------------------------------------------------------
// webd

#[derive(Args, Debug, Clone, PartialEq)]
pub struct WebdArgs {
    #[command(subcommand)]
    pub command: WebdCommand,
}

#[derive(Subcommand, Debug, Clone, PartialEq)]
pub enum WebdCommand {
    /// HTTP load on 127.0.0.1:PORT; prints a table and one JSON line; exit 1 if a request failed
    #[command(long_about = "HTTP load on 127.0.0.1:P: C connections at once (default 2), keep-alive unless --no-keepalive, \
at most N requests (default 1000) and none started after S seconds (default 30); each request within --timeout (default \
10 s). Paths are asked for in turn (default /). --expect-sums FILE (lines `NAME SIZE SUM`): /filesum/NAME must answer the \
sum, /NAME must have the size and sum. Prints a table and one JSON line (also written to --json FILE); exit 1 if any \
request failed.")]
    Load(WebdLoadArgs),
    /// The bad-input cases of issue 18, each followed by a good request; `N passed, N failed`
    Check(WebdCheckArgs),
    /// Make the files, boot webd (ours or Linux), then --check, --bad-input, --load
    #[command(long_about = "Make the files (default 4x64K; deterministic content, sums in target/webd/files-SPEC.sums) into \
an ext2 image (ours) or the initramfs (linux), boot, wait for `webd: ready`, print `webd: http://127.0.0.1:PORT/`. Then \
--check asks every front-end for /filesum/NAME of every file and compares with the host's sums and /stats's per-core \
counters; --bad-input runs `webd check`; --load runs the load generator with those options (port and sums filled in). \
With any of them the guest is told how many requests to expect and stops by itself; with none it serves until --timeout \
(default 600 s).")]
    Run(WebdRunArgs),
    /// Corey's filesum cache experiment under the cache simulator's multi-core model
    #[command(long_about = "Boot our webd (5 vCPUs: front-end 0, application cores 1-4) under single-threaded TCG with \
the cache simulator's multi-core model (tools/qemu-plugins/cachesim_mc.c), ask for every file's /filesum R times (the \
first round warms up and is not counted), and print per request the L2/L3 misses and memory cycles per instruction of the \
cores that sum. Defaults: amd16 with --map 1:0:4:8:12, 8x1M files. nehalem-mc (2 chips of 4): --map 3:0:1:4:5 --files 8x1536K.")]
    Cachesim(WebdCachesimArgs),
    /// The webd suite of `cargo xtask test` on its own (~40 s)
    Selftest,
}

#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct WebdLoadArgs {
    /// The host port forwarded to webd's port (filled in by `webd run --load`)
    #[arg(long, value_name = "P", value_parser = tcp_port)]
    pub port: Option<u16>,
    /// Connections at once (default 2)
    #[arg(long, value_name = "C", value_parser = number)]
    pub conns: Option<u64>,
    /// Requests in all, at most (default 1000)
    #[arg(long, value_name = "N", value_parser = number)]
    pub requests: Option<u64>,
    /// No request started after S seconds (default 30)
    #[arg(long, value_name = "S", value_parser = number)]
    pub seconds: Option<u64>,
    /// Per request, in seconds (default 10)
    #[arg(long, value_name = "SECS", value_parser = number)]
    pub timeout: Option<u64>,
    /// Paths asked for in turn, comma-separated (default /)
    #[arg(long, value_name = "P1,P2,...", conflicts_with = "paths_file")]
    pub path: Option<String>,
    /// Paths asked for in turn, one a line (# comments)
    #[arg(long, value_name = "FILE")]
    pub paths_file: Option<PathBuf>,
    /// One request per connection
    #[arg(long)]
    pub no_keepalive: bool,
    /// Lines `NAME SIZE SUM`: bodies are checked against them
    #[arg(long, value_name = "FILE")]
    pub expect_sums: Option<PathBuf>,
    /// Also write the JSON line to FILE
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Ours with N front-ends (1..=64): connection k is steered to front-end k mod N
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=64))]
    pub steer: Option<u64>,
}

#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct WebdCheckArgs {
    /// The host port forwarded to webd's port
    #[arg(long, value_name = "P", value_parser = tcp_port)]
    pub port: u16,
    /// Lines `NAME SIZE SUM` of the files served
    #[arg(long, value_name = "FILE")]
    pub expect_sums: Option<PathBuf>,
    /// Per case, in seconds (at least 1)
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = at_least_one)]
    pub timeout: u64,
    /// Only the cases whose names contain WORD (repeatable)
    #[arg(long, value_name = "WORD", action = clap::ArgAction::Append)]
    pub only: Vec<String>,
}

#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct WebdRunArgs {
    /// The guest system
    #[arg(long, value_name = "SYSTEM", default_value = "ours", value_parser = ["ours", "linux"])]
    pub system: String,
    /// Where each file's requests go
    #[arg(long, value_name = "MODE", default_value = "random", value_parser = ["random", "locality", "same-core"])]
    pub mode: String,
    /// The files: COUNTxSIZE
    #[arg(long, value_name = "COUNTxSIZE", default_value = "4x64K", value_parser = file_spec)]
    pub files: crate::webd::files::FileSpec,
    /// vCPUs, 1..=255
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=255))]
    pub smp: u32,
    /// Guest memory, e.g. 512M
    #[arg(long, value_name = "SIZE", default_value = "512M", value_parser = mem_size)]
    pub mem: u64,
    /// Front-end cores (list such as 0,1 or 0-1)
    #[arg(long, value_name = "LIST")]
    pub frontends: Option<String>,
    /// Application cores (list)
    #[arg(long, value_name = "LIST")]
    pub apps: Option<String>,
    /// The kernel core
    #[arg(long, value_name = "CORE")]
    pub kc: Option<u32>,
    /// Serve at most SECS (at least 1)
    #[arg(long, value_name = "SECS", default_value = "600", value_parser = at_least_one)]
    pub timeout: u64,
    /// Requests the guest is told to expect
    #[arg(long, value_name = "N", value_parser = number)]
    pub requests: Option<u64>,
    /// Every file's sum from every front-end, against the host's sums and /stats
    #[arg(long)]
    pub check: bool,
    /// Run `webd check` against the guest
    #[arg(long)]
    pub bad_input: bool,
    /// Run `webd load` with these options (port and sums filled in)
    #[arg(long, value_name = "\"LOAD OPTIONS\"", allow_hyphen_values = true, value_parser = load_words)]
    pub load: Option<WebdLoadArgs>,
}

fn file_spec(v: &str) -> Result<crate::webd::files::FileSpec, String> {
    crate::webd::files::FileSpec::parse(v)
}

/// `webd run --load "..."`: `webd load`'s options in one word, parsed as `webd load` would.
fn load_words(v: &str) -> Result<WebdLoadArgs, String> {
    #[derive(clap::Parser)]
    #[command(name = "webd load", no_binary_name = true)]
    struct Load {
        #[command(flatten)]
        a: WebdLoadArgs,
    }
    use clap::Parser;
    Load::try_parse_from(v.split_whitespace()).map(|l| l.a).map_err(|e| super::one_line(&e, Some("webd load")))
}

#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct WebdCachesimArgs {
    /// Modes, comma-separated (default all three)
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = ["random", "locality", "same-core"])]
    pub modes: Vec<String>,
    /// The simulated machine
    #[arg(long, value_name = "PRESET", default_value = "amd16", value_parser = ["amd16", "nehalem-mc"])]
    pub preset: String,
    /// The files: COUNTxSIZE
    #[arg(long, value_name = "COUNTxSIZE", default_value = "8x1M", value_parser = file_spec)]
    pub files: crate::webd::files::FileSpec,
    /// Rounds (clamped to 2..=100; the first warms up)
    #[arg(long, value_name = "R", default_value = "6", value_parser = number)]
    pub rounds: u64,
    /// vCPU i drives simulated core Ci: 5 core numbers separated by `:`
    #[arg(long, value_name = "C0:C1:C2:C3:C4", value_parser = five_cores)]
    pub map: Option<String>,
    /// Also write the results as JSON
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

fn five_cores(v: &str) -> Result<String, String> {
    if v.split(':').count() != 5 || v.split(':').any(|c| c.parse::<u32>().is_err()) {
        return Err(format!("`{v}`: 5 core numbers separated by `:` (one per vCPU)"));
    }
    Ok(v.to_string())
}

// ---------------------------------------------------------------------------------------
// fs

#[derive(Args, Debug, Clone, PartialEq)]
pub struct FsArgs {
    #[command(subcommand)]
    pub command: FsCommand,
}

#[derive(Subcommand, Debug, Clone, PartialEq)]
pub enum FsCommand {
    /// Make an ext2 image of DIR's files (mke2fs -t ext2 -d)
    Mkimage {
        dir: PathBuf,
        img: PathBuf,
        /// Image size, e.g. 8M (default: the files' size plus room, at least 4 MiB)
        #[arg(long, value_name = "S", value_parser = mem_size)]
        size: Option<u64>,
    },
    /// e2fsck -fn IMG (read-only; exit status says clean or not)
    Check { img: PathBuf },
    /// List a directory of the image (our reader)
    Ls {
        img: PathBuf,
        #[arg(default_value = "/")]
        path: String,
    },
    /// Print a file of the image (our reader)
    Cat { img: PathBuf, path: String },
    /// Copy a file of the image to OUT (our reader)
    Get { img: PathBuf, path: String, out: PathBuf },
    /// The file-system part of `cargo xtask test` alone
    Test,
    /// The crash test: boot `fscrash` N times, kill QEMU after a seeded number of fsyncs, check the image
    Crash {
        /// Boots
        #[arg(long, value_name = "N", default_value_t = 20)]
        kills: u32,
        /// The seed
        #[arg(long, value_name = "S", default_value = "1", value_parser = number)]
        seed: u64,
    },
    /// The image `fstest` checks (its files: crates/testdefs/src/fstest_files.rs)
    FstestImage { img: PathBuf },
}

// ---------------------------------------------------------------------------------------
// metis

#[derive(Args, Debug, Clone, PartialEq)]
pub struct MetisArgs {
    #[command(subcommand)]
    pub command: MetisCommand,
}

#[derive(Subcommand, Debug, Clone, PartialEq)]
pub enum MetisCommand {
    /// The check `cargo xtask test` runs (ours, 2 vCPUs, 4 boots)
    Ci,
    /// One boot per system and vCPU count: table and plot of the phases' times
    Sweep(MetisSweepArgs),
    /// Word count
    Wc(MetisAppArgs),
    /// Word-position index
    Wri(MetisAppArgs),
    /// Word count of generated text in memory
    Wrmem(MetisAppArgs),
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepApp {
    Wc,
    Wri,
    Wrmem,
    /// The three sweeps
    All,
}

#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct MetisSweepArgs {
    /// The application, or all three
    #[arg(value_enum)]
    pub app: SweepApp,
    /// vCPU counts (default 1,2)
    #[arg(long, value_name = "1,2", value_parser = super::core_list)]
    pub smp: Option<super::CoreList>,
    /// Systems, comma-separated (default ours,linux)
    #[arg(long, value_name = "ours,linux", value_delimiter = ',', value_parser = ["ours", "linux"])]
    pub systems: Vec<String>,
    /// Where the table and plots go (default target/metis-results)
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    #[command(flatten)]
    pub run: MetisRunArgs,
}

#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct MetisAppArgs {
    /// vCPUs = workers, 1..=64
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub smp: u32,
    /// Where the output goes (default: not written)
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Compare the output with the host reference implementation
    #[arg(long)]
    pub check: bool,
    #[command(flatten)]
    pub run: MetisRunArgs,
}

/// A Metis boot's options (also `sweep`'s).
#[derive(Args, Debug, Clone, PartialEq)]
pub struct MetisRunArgs {
    /// The text (wc, wri); put into the boot image
    #[arg(long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// ours: put the input on an ext2 disk image and read it through the file system
    #[arg(long)]
    pub from_disk: bool,
    /// ours: the guest writes the output to /metis-output on an ext2 disk image
    #[arg(long)]
    pub to_disk: bool,
    /// With --from-disk/--to-disk: keep the disk image as IMG
    #[arg(long, value_name = "IMG")]
    pub keep_disk: Option<PathBuf>,
    /// The system (both: one boot each, then ours/linux per phase)
    #[arg(long, value_name = "SYSTEM", default_value = "ours", value_parser = ["ours", "linux", "both"])]
    pub system: String,
    /// Guest memory
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = mem_size)]
    pub mem: u64,
    /// Where intermediate data lives on ours
    #[arg(long, value_name = "LAYOUT", default_value = "per-core", value_parser = ["per-core", "shared", "private"])]
    pub layout: String,
    /// wrmem: bytes of generated text (k/m/g suffixes; default 1M)
    #[arg(long, value_name = "BYTES", value_parser = metis_size)]
    pub size: Option<u64>,
    /// wrmem: generator seed (default 1)
    #[arg(long, value_name = "S", value_parser = metis_size)]
    pub seed: Option<u64>,
    /// Reduce partitions (default 8 per worker)
    #[arg(long, value_name = "P", value_parser = metis_size)]
    pub parts: Option<u64>,
    /// Linux: transparent huge pages in the arenas as the kernel's default (on) or off
    #[arg(long, value_enum, default_value = "on")]
    pub linux_thp: OnOff,
    /// Do not send the output over the serial line, only its digest
    #[arg(long)]
    pub digest_only: bool,
    /// Kill QEMU after SECS
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub timeout: u64,
    /// Three more boots under the insncount plugin, one per phase
    #[arg(long)]
    pub insns: bool,
    /// Reduce allocates its output in fresh pages and faults on them (Corey's Metis), instead
    /// of the end of map preparing them (the default)
    #[arg(long)]
    pub no_prep: bool,
    /// Emulator knob: every 2^18 words each mapper makes its core flush its TLB whole, so that
    /// QEMU grows its software TLB (both systems; docs/metis.md, session 12)
    #[arg(long)]
    pub tlb_grow: bool,
}

fn metis_size(v: &str) -> Result<u64, String> {
    mapreduce::cli::parse_size(v).ok_or_else(|| format!("`{v}` is not a size (bytes, k/m/g suffixes)"))
}
