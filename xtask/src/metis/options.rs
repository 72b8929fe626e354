//! The command line of `cargo xtask metis` (cli.rs dispatches it).

use std::path::PathBuf;
use crate::host::args::{mem_size, OnOff};

#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct MetisArgs {
    #[command(subcommand)]
    pub command: MetisCommand,
}

#[derive(clap::Subcommand, Debug, Clone, PartialEq)]
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

#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct MetisSweepArgs {
    /// The application, or all three
    #[arg(value_enum)]
    pub app: SweepApp,
    /// vCPU counts (default 1,2)
    #[arg(long, value_name = "1,2", value_parser = crate::host::args::core_list)]
    pub smp: Option<crate::host::args::CoreList>,
    /// Systems, comma-separated (default ours,linux)
    #[arg(long, value_name = "ours,linux", value_delimiter = ',', value_parser = ["ours", "linux"])]
    pub systems: Vec<String>,
    /// Where the table and plots go (default target/metis-results)
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    #[command(flatten)]
    pub run: MetisRunArgs,
}

#[derive(clap::Args, Debug, Clone, PartialEq)]
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
#[derive(clap::Args, Debug, Clone, PartialEq)]
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
    /// QEMU grows its software TLB (both systems; docs/metis.md, "Where the time goes")
    #[arg(long)]
    pub tlb_grow: bool,
}

fn metis_size(v: &str) -> Result<u64, String> {
    mapreduce::cli::parse_size(v).ok_or_else(|| format!("`{v}` is not a size (bytes, k/m/g suffixes)"))
}
