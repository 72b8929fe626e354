//! The command line of `cargo xtask webd` (cli.rs dispatches it).

use std::path::PathBuf;
use crate::host::args::{at_least_one, mem_size, number, tcp_port};

#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct WebdArgs {
    #[command(subcommand)]
    pub command: WebdCommand,
}

#[derive(clap::Subcommand, Debug, Clone, PartialEq)]
pub enum WebdCommand {
    /// HTTP load on 127.0.0.1:PORT; prints a table and one JSON line; exit 1 if a request failed
    #[command(long_about = "HTTP load on 127.0.0.1:P: C connections at once (default 2), keep-alive unless --no-keepalive, \
at most N requests (default 1000) and none started after S seconds (default 30); each request within --timeout (default \
10 s). Paths are asked for in turn (default /). --expect-sums FILE (lines `NAME SIZE SUM`): /filesum/NAME must answer the \
sum, /NAME must have the size and sum. Prints a table and one JSON line (also written to --json FILE); exit 1 if any \
request failed.")]
    Load(WebdLoadArgs),
    /// The bad-input cases (docs/webd.md), each followed by a good request; `N passed, N failed`
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

#[derive(clap::Args, Debug, Clone, PartialEq)]
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

#[derive(clap::Args, Debug, Clone, PartialEq)]
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

#[derive(clap::Args, Debug, Clone, PartialEq)]
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
    Load::try_parse_from(v.split_whitespace()).map(|l| l.a).map_err(|e| crate::host::args::one_line(&e, Some("webd load")))
}

#[derive(clap::Args, Debug, Clone, PartialEq)]
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
