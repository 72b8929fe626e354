//! `cargo xtask idle`: how much host CPU an idle guest burns. Boots this system or the Linux
//! baseline, waits until it is idle (the shell's prompt, `tcpserv: ready`, `webd: ready`),
//! then reads QEMU's CPU time (user + system, /proc/PID/stat) at the start and end of a
//! window with no input and no traffic, and prints it as a percentage of one host CPU.
//! A guest whose cores halt when they have nothing to do uses almost none; one whose cores
//! poll uses a whole host CPU per polling vCPU (as far as the host gives it one).

use crate::host::args::{core_list, CoreList};
use std::time::{Duration, Instant};

use crate::host::qemu::{Session, WaitEnd};
use crate::host::vm::{BootMedium, VmConfig};

/// What sits idle in the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum What {
    Shell,
    Tcpserv,
    Webd,
}

impl What {
    pub fn name(self) -> &'static str {
        match self {
            What::Shell => "shell",
            What::Tcpserv => "tcpserv",
            What::Webd => "webd",
        }
    }
}

#[derive(Debug, Clone)]
pub struct IdleOptions {
    pub smp: Vec<u32>,
    pub systems: Vec<String>,
    pub what: Vec<What>,
    pub seconds: u64,
    /// Extra words for ours' program (e.g. `idle=poll` for tcpserv's old pure polling).
    pub guest: String,
    /// Boots per cell: the median and the range are printed.
    pub boots: u32,
}

/// Median and range of one cell's boots (`None` if none succeeded).
pub fn summary(v: &[f64]) -> Option<(f64, f64, f64)> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    let med = if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 };
    Some((med, s[0], s[n - 1]))
}

/// QEMU's CPU time so far (user + system), in clock ticks of `sysconf(_SC_CLK_TCK)`.
pub(crate) fn cpu_ticks(pid: u32) -> Result<u64, String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| format!("idle: /proc/{pid}/stat: {e}"))?;
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let rest = s.rsplit_once(')').map(|(_, r)| r).ok_or("idle: unreadable /proc/PID/stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, so utime (14) and stime (15) are at 11 and 12 here.
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).ok_or("idle: unreadable utime/stime");
    Ok(get(11)? + get(12)?)
}

pub(crate) fn clock_ticks_per_s() -> u64 {
    std::process::Command::new("getconf").arg("CLK_TCK").output().ok().and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok()).unwrap_or(100)
}

/// One boot: QEMU's arguments and the line that says the guest is up and idle.
struct Boot {
    args: Vec<String>,
    ready: &'static str,
    /// Keeps webd's file image alive while QEMU runs.
    _keep: Option<crate::webd::files::Made>,
}

fn prepare(system: &str, what: What, smp: u32, guest: &str) -> Result<Boot, String> {
    let ours = system == "ours";
    match what {
        What::Webd => {
            use crate::webd::run::{prepare, Artifacts, Sys, WebdBoot};
            let sys = if ours { Sys::Ours } else { Sys::Linux };
            let b = WebdBoot {
                system: sys,
                // The Linux baseline serves random mode only; ours at 1 vCPU has no application
                // core, and only random mode runs without one.
                mode: if ours && smp > 1 { "locality" } else { "random" }.into(),
                files: crate::webd::files::FileSpec { count: 16, size: 4096 },
                smp,
                mem_mib: 512,
                frontends: None,
                apps: None,
                kc: None,
                requests: None,
                warmup: 0,
                extra: Vec::new(),
                guest_extra: if ours { guest.split_whitespace().map(String::from).collect() } else { Vec::new() },
            };
            let p = prepare(&b, &Artifacts::build(sys)?)?;
            Ok(Boot { args: p.args, ready: "webd: ready", _keep: Some(p.made) })
        }
        What::Shell | What::Tcpserv if !ours => {
            let k = crate::guest::linux::fetch_kernel()?;
            let mut vm = crate::guest::linux::LinuxVm::new(&k, &crate::guest::linux_net::initramfs(&k)?);
            vm.smp = smp;
            if what == What::Tcpserv {
                vm.net = Some(crate::host::vm::NetConfig::service()?);
                vm.append = format!("wl=tcpserv threads={smp}");
                Ok(Boot { args: vm.qemu_args(), ready: "tcpserv: ready", _keep: None })
            } else {
                // The measurement guest's `wl=idle`: prints its ready line and blocks reading
                // the console, as a shell at its prompt does.
                vm.append = "wl=idle".into();
                Ok(Boot { args: vm.qemu_args(), ready: "idle: ready", _keep: None })
            }
        }
        What::Shell | What::Tcpserv => {
            let mut cfg = VmConfig {
                smp,
                medium: Some(BootMedium::Kernel(crate::host::env::build_kernel()?)),
                initrd: Some(crate::host::user::build_initrd()?),
                ..Default::default()
            };
            let ready = if what == What::Tcpserv {
                cfg.net = Some(crate::host::vm::NetConfig::service()?);
                // Dedicated with a kernel core from 2 vCPUs on, Inline at 1 (tcpserv's default).
                cfg.cmdline = format!("init=tcpserv -- {guest}").trim().to_string();
                "tcpserv: ready"
            } else {
                cfg.cmdline = "init=sh".into();
                "sh> "
            };
            let mut args = cfg.qemu_args();
            args.extend(["-serial", "stdio", "-monitor", "none"].map(String::from));
            Ok(Boot { args, ready, _keep: None })
        }
    }
}

/// One boot's measurement: QEMU's CPU time as a percentage of one host CPU, and the host's
/// 1-minute load average at the start and the end of the window (the host is shared, so
/// every figure says how busy it was).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    pub pct: f64,
    pub load: (f64, f64),
}

/// Boot, wait for the ready line, wait 2 s more for the boot's stragglers, then measure
/// QEMU's CPU time over `seconds`.
pub fn measure(system: &str, what: What, smp: u32, seconds: u64, guest: &str) -> Result<Measured, String> {
    let boot = prepare(system, what, smp, guest)?;
    let mut s = Session::start(&boot.args, false)?;
    let ready = boot.ready;
    // The shell's prompt has no newline after it: it arrives with the next line, or not at
    // all, so for the shell wait for the line before it and give the prompt a moment.
    let pred = move |l: &str| if ready == "sh> " { l.starts_with("sh: libos shell") } else { l.starts_with(ready) };
    match s.wait_for(&pred, Instant::now() + Duration::from_secs(180)) {
        Ok(_) => {}
        Err(WaitEnd::Exited(c)) => {
            let last: Vec<&str> = s.serial.lines().rev().take(6).collect();
            return Err(format!("idle: {system} {} at {smp} vCPUs stopped (QEMU status {c:?}) before `{ready}`; last lines: {:?}", what.name(), last));
        }
        Err(WaitEnd::TimedOut) => return Err(format!("idle: {system} {} at {smp} vCPUs: no `{ready}` within 180 s", what.name())),
    }
    // Let the boot's last work (the Linux guest's module loading, our init's messages) end.
    let _ = s.wait_for(&|_| false, Instant::now() + Duration::from_secs(2));
    let pid = s.pid();
    let load0 = crate::bench::load1().unwrap_or(f64::NAN);
    let t0 = (Instant::now(), cpu_ticks(pid)?);
    // Reading its output meanwhile keeps QEMU from blocking on a full pipe.
    match s.wait_for(&|_| false, Instant::now() + Duration::from_secs(seconds)) {
        Err(WaitEnd::Exited(c)) => return Err(format!("idle: {system} {} at {smp} vCPUs stopped during the window (QEMU status {c:?})", what.name())),
        _ => {}
    }
    let t1 = (Instant::now(), cpu_ticks(pid)?);
    let load1 = crate::bench::load1().unwrap_or(f64::NAN);
    drop(s);
    let cpu_s = (t1.1 - t0.1) as f64 / clock_ticks_per_s() as f64;
    Ok(Measured { pct: 100.0 * cpu_s / (t1.0 - t0.0).as_secs_f64(), load: (load0, load1) })
}

/// One printed row: median [min-max] over the boots that measured, how many did, and the
/// lowest and highest host load average seen at the start or end of their windows.
fn row(sys: &str, what: What, smp: u32, got: &[Measured], boots: u32) -> String {
    let pcts: Vec<f64> = got.iter().map(|m| m.pct).collect();
    let each = pcts.iter().map(|p| format!("{p:.1}")).collect::<Vec<_>>().join(" ");
    let loads: Vec<f64> = got.iter().flat_map(|m| [m.load.0, m.load.1]).filter(|l| l.is_finite()).collect();
    let load = match summary(&loads) {
        Some((_, lo, hi)) => format!(", host load {lo:.1}-{hi:.1}"),
        None => String::new(),
    };
    match summary(&pcts) {
        Some((med, lo, hi)) if boots > 1 => format!("{:<6} {:<8} {:>5} {:>7.1}% [{lo:.1}-{hi:.1}] {}/{} boots: {each}{load}", sys, what.name(), smp, med, got.len(), boots),
        Some((med, _, _)) => format!("{:<6} {:<8} {:>5} {:>7.1}%{load}", sys, what.name(), smp, med),
        None => format!("{:<6} {:<8} {:>5}   no boot measured", sys, what.name(), smp),
    }
}

pub fn command(o: &IdleOptions) -> Result<(), String> {
    let boots = o.boots.max(1);
    println!("idle: QEMU's CPU time (user+system, /proc/PID/stat) over {} s with no input or traffic, % of one host CPU", o.seconds);
    if boots > 1 {
        println!("idle: {boots} boots per cell, the cells' boots interleaved (round after round); median [min-max]");
    }
    println!("{:<6} {:<8} {:>5} {:>8}", "system", "what", "vCPUs", "host CPU");
    let mut cells: Vec<(&str, What, u32, Vec<Measured>)> = Vec::new();
    for sys in &o.systems {
        for &w in &o.what {
            for &n in &o.smp {
                cells.push((sys.as_str(), w, n, Vec::new()));
            }
        }
    }
    // Round after round over every cell, so a stretch of heavier host load spreads over the
    // cells instead of landing on one.
    for round in 0..boots {
        for (sys, w, n, got) in cells.iter_mut() {
            match measure(sys, *w, *n, o.seconds, &o.guest) {
                Ok(m) => {
                    got.push(m);
                    if boots > 1 {
                        println!("idle: boot {}/{boots}: {sys} {} {n} vCPUs: {:.1}% (host load {:.1} -> {:.1})", round + 1, w.name(), m.pct, m.load.0, m.load.1);
                    }
                }
                Err(e) => println!("{:<6} {:<8} {:>5}   error (boot {}): {e}", sys, w.name(), n, round + 1),
            }
        }
    }
    if boots > 1 {
        println!("idle: medians");
    }
    for (sys, w, n, got) in &cells {
        println!("{}", row(sys, *w, *n, got, boots));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The command line of `idle`

/// `cargo xtask idle`.
#[derive(clap::Args, Debug, Clone, PartialEq)]
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

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleSystem {
    Ours,
    Linux,
    Both,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleWhat {
    Shell,
    Tcpserv,
    Webd,
    All,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_ranges() {
        assert_eq!(summary(&[]), None);
        assert_eq!(summary(&[3.0]), Some((3.0, 3.0, 3.0)));
        assert_eq!(summary(&[5.0, 1.0, 2.0]), Some((2.0, 1.0, 5.0)));
        assert_eq!(summary(&[4.0, 1.0, 2.0, 8.0]), Some((3.0, 1.0, 8.0)));
        let m = |pct, a, b| Measured { pct, load: (a, b) };
        let r = row("ours", What::Shell, 2, &[m(0.3, 4.0, 5.5), m(0.1, 3.2, 3.0), m(0.2, f64::NAN, 7.25)], 3);
        assert!(r.contains("0.2% [0.1-0.3] 3/3 boots"), "{r}");
        // The host's load over every boot of the cell, an unreadable one left out.
        assert!(r.ends_with("host load 3.0-7.2"), "{r}");
        // A cell where one boot failed says so.
        assert!(row("linux", What::Webd, 4, &[m(1.0, 1.0, 1.0), m(2.0, 1.0, 1.0)], 3).contains("2/3 boots"));
        assert!(row("linux", What::Webd, 4, &[], 3).contains("no boot measured"));
    }

    #[test]
    fn cpu_ticks_reads_our_own_stat() {
        // This process has run for a while: its CPU time is readable (and a missing process
        // is an error, not 0).
        assert!(cpu_ticks(std::process::id()).is_ok());
        assert!(cpu_ticks(u32::MAX).is_err());
    }
}
