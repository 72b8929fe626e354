//! The command line of `cargo xtask commute` (cli.rs dispatches it).

use super::pipeline::MAX_JOBS;
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct CommuteArgs {
    /// Only pairs of these calls (default: every modelled call; see --list; with --system the
    /// POSIX calls)
    #[arg(long, value_name = "a,b,...", value_parser = calls_arg)]
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
    #[arg(long, allow_negative_numbers = true, value_name = "N", default_value_t = 1, value_parser = jobs_arg)]
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

/// `--calls`: kernel calls (`cases.rs`) or, with `--system`, POSIX calls (`posix_cases.rs`);
/// the command checks which set applies.
pub fn calls_arg(v: &str) -> Result<String, String> {
    use testdefs::{commute_cases as cases, posix_cases};
    let known = |n: &str| cases::CALLS.iter().any(|k| k.name == n) || posix_cases::CALLS.iter().any(|k| k.name == n);
    if let Some(bad) = v.split(',').find(|n| !known(n)) {
        let names: Vec<&str> = cases::CALLS.iter().map(|k| k.name).collect();
        let pnames: Vec<&str> = posix_cases::CALLS.iter().map(|k| k.name).collect();
        return Err(format!("unknown call `{bad}` (kernel: {}; POSIX, with --system: {})", names.join(", "), pnames.join(", ")));
    }
    Ok(v.to_string())
}

/// `--jobs N`: a whole number from 1 to [`MAX_JOBS`], or a clear error.
pub fn jobs_arg(v: &str) -> Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(0) => Err("0 jobs would run no case: give 1 or more (1 = one boot, as without --jobs)".into()),
        Ok(n) if n > MAX_JOBS => Err(format!("{n} jobs: at most {MAX_JOBS} (each job is one QEMU boot on one host core)")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{v}` is not a number of jobs (a whole number from 1 to {MAX_JOBS})")),
    }
}
