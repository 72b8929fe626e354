//! The benchmark matrix's command line (`cargo xtask bench`; cli.rs dispatches it).

use std::path::PathBuf;
use crate::host::args::{at_least_one, core_list, CoreList, mem_size, OnOff};

/// The benchmark matrix's options (`cargo xtask bench`).
#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
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
    #[arg(long, allow_negative_numbers = true, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=MAX_BOOTS as i64))]
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

/// The most boots per cell `--boots` takes.
pub const MAX_BOOTS: u32 = 100;
