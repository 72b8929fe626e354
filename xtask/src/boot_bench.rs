//! `cargo xtask bench boot`: wall-clock time from spawning QEMU to the first line the first
//! user program prints, for this system and for Linux, booted the same way.
//!
//! Both sides get the same QEMU machine (q35, `-cpu max`, the same memory and vCPU count,
//! `-nodefaults`, multi-threaded TCG), the same entry (PVH through `-kernel` with an
//! uncompressed ELF: this kernel's ELF, and Linux's vmlinux unpacked from Debian's bzImage by
//! [`crate::guest::linux::vmlinux`]), the same kind of initrd (a newc archive holding one static
//! program) and the same endpoint: the program's first line, `hello from user mode: 0
//! argument(s)`, printed by `hello` (user/apps/src/bin/hello.rs) on ours and by its C
//! counterpart (tools/boot-bench/hello.c) as Linux's /init. QEMU is stopped as soon as that
//! line arrives. Evidence kind: TCG wall clock on this host (a functional timing, not a
//! scalability claim); ours and Linux are booted back to back, boot k of each forming a pair,
//! and the ratio is taken per pair.

use crate::host::args::{core_list, CoreList};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::host::qemu::{Session, WaitEnd};
use crate::host::vm::{BootMedium, VmConfig};

/// How the line both programs print first begins (in full `hello from user mode: 0
/// argument(s)` on both: neither gets arguments); the endpoint.
pub const FIRST_LINE: &str = "hello from user mode:";
/// This kernel's summary line (recorded on the way, not an endpoint).
const OUR_SUMMARY: &str = "cores online";
/// Guest memory of every boot.
pub const MEM_MIB: u64 = 512;
/// Our command line: the one program of the initrd as the first program.
const OUR_CMDLINE: &str = "init=hello";
/// Linux's: the serial console, no boot messages (`quiet`, as a measured Linux would run), the
/// TSC trusted without the watchdog (as the other Linux guests here), and a guest panic ends
/// QEMU (`panic=-1` with `-no-reboot`) instead of hanging until the timeout. No `nokaslr`:
/// through PVH there is no randomisation to turn off (the bzImage's decompressor does it), and
/// the kernel would hand the unknown word to /init as an argument.
///
/// `no_timer_check`: Linux checks at boot that the timer interrupt arrives through the IO-APIC
/// within a few ticks and panics ("IO-APIC + timer doesn't work!") when it does not, which a
/// TCG vCPU on a busy host can miss (seen here at 4 vCPUs); virtual machines commonly skip the
/// check (ours makes no such check).
const LINUX_CMDLINE: &str = "console=ttyS0 quiet panic=-1 tsc=reliable no_timer_check";

/// What one side boots: a PVH kernel ELF, its one-program initrd and its command line.
#[derive(Debug, Clone)]
pub struct Guest {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub cmdline: String,
}

/// The whole QEMU argument list of one boot. Both systems go through here, so they differ
/// only in `-kernel`, `-initrd` and `-append` (a host test checks that).
pub fn qemu_args(g: &Guest, smp: u32) -> Vec<String> {
    let cfg = VmConfig {
        smp,
        mem_mib: MEM_MIB,
        medium: Some(BootMedium::Kernel(g.kernel.clone())),
        initrd: Some(g.initrd.clone()),
        cmdline: g.cmdline.clone(),
        // No VGA, no default NIC or drives on either side: neither uses them.
        extra: vec!["-nodefaults".into()],
        ..Default::default()
    };
    let mut a = cfg.qemu_args();
    a.extend(["-serial", "stdio", "-monitor", "none"].iter().map(|s| s.to_string()));
    a
}

/// QEMU arguments without `-kernel`, `-initrd` and `-append` and their values: the machine,
/// which must be the same for both systems.
pub fn machine_only(a: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < a.len() {
        if ["-kernel", "-initrd", "-append"].contains(&a[i].as_str()) {
            i += 2;
        } else {
            out.push(a[i].clone());
            i += 1;
        }
    }
    out
}

/// One boot's times from spawning QEMU.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// To the program's first line (the endpoint).
    pub first_line: Duration,
    /// To our kernel's summary line, when it has one (ours only).
    pub summary: Option<Duration>,
}

/// Boot once and stop QEMU at the first line containing `endpoint`. An error says why no
/// such line came (QEMU failed or exited, or `timeout` passed), with the serial output's tail.
pub fn boot_once(args: &[String], endpoint: &str, timeout: Duration) -> Result<Sample, String> {
    let mut s = Session::start(args, false)?;
    let mut summary = None;
    let outcome = s.watch(
        &mut |line, at| {
            if summary.is_none() && line.contains(OUR_SUMMARY) {
                summary = Some(at);
            }
            line.contains(endpoint)
        },
        s.start + timeout,
    );
    // Stop QEMU whatever happened (it may have exited already).
    let f = s.stop();
    let outcome = match outcome {
        Ok((_, at)) => return Ok(Sample { first_line: at, summary }),
        Err(WaitEnd::TimedOut) => format!("no `{endpoint}` line within {} s", timeout.as_secs()),
        Err(WaitEnd::Exited(_)) => format!("QEMU closed its output before a `{endpoint}` line"),
    };
    let tail: Vec<&str> = f.serial.lines().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect();
    // A guest panic's reason is above its backtrace: name it first.
    let why = match f.serial.lines().find(|l| l.contains("Kernel panic") || l.contains("panicked")) {
        Some(p) => format!("{outcome}: {}", p.trim()),
        None => outcome,
    };
    let err = f.stderr.lines().next().map(|l| format!("; QEMU said: {}", l.trim())).unwrap_or_default();
    Err(format!("{why} (QEMU status {:?}{err}); last serial lines:\n  {}", f.exit_code, tail.join("\n  ")))
}

/// Median and range of a sample, in the unit given.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// Median (the mean of the middle two for an even count), minimum and maximum; `None` for
/// an empty list.
pub fn summarize(values: &[f64]) -> Option<Summary> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    Some(Summary { median, min: v[0], max: v[n - 1] })
}

/// `x` with `digits` significant digits (at least; never in exponent form), so small ratios
/// keep their information: 0.0123, 0.451, 1.23, 12.3, 123.
pub fn sig(x: f64, digits: u32) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    if x == 0.0 {
        return "0".into();
    }
    let magnitude = x.abs().log10().floor() as i32;
    let decimals = (digits as i32 - 1 - magnitude).max(0) as usize;
    format!("{x:.decimals$}")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn fmt_ms(s: &Option<Summary>) -> String {
    match s {
        Some(s) => format!("{:.0} [{:.0}–{:.0}] ms", s.median, s.min, s.max),
        None => "-".into(),
    }
}

fn fmt_ratio(s: &Option<Summary>) -> String {
    match s {
        Some(s) => format!("{} [{}–{}]", sig(s.median, 3), sig(s.min, 3), sig(s.max, 3)),
        None => "-".into(),
    }
}

/// Our side: this kernel and an initrd holding only `hello`.
fn prepare_ours(dir: &Path) -> Result<Guest, String> {
    let kernel = crate::host::env::build_kernel()?;
    let bin = crate::host::user::build_programs()?.join("hello");
    let data = std::fs::read(&bin).map_err(|e| format!("cannot read {}: {e}", bin.display()))?;
    crate::host::user::check_program("hello", &data)?;
    let initrd = dir.join("boot-ours.cpio");
    crate::host::user::write_archive(&initrd, &[("hello".into(), crate::host::user::loadable_image(&data))])?;
    Ok(Guest { kernel, initrd, cmdline: OUR_CMDLINE.into() })
}

/// Build tools/boot-bench/hello.c as a static program.
fn build_linux_init(dir: &Path) -> Result<PathBuf, String> {
    crate::host::env::ensure_tool("cc", &["gcc"])?;
    crate::host::env::ensure_packages(&["libc6-dev"])?;
    let src = crate::host::env::workspace_root().join("tools/boot-bench/hello.c");
    let out = dir.join("boot-linux-init");
    let o = Command::new("cc")
        .args(["-static", "-O2", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&out)
        .arg(&src)
        .output()
        .map_err(|e| format!("cannot run cc: {e}"))?;
    if !o.status.success() {
        return Err(format!("building {} failed:\n{}", src.display(), String::from_utf8_lossy(&o.stderr)));
    }
    Ok(out)
}

/// Linux's side: Debian's kernel unpacked to its vmlinux, and an initrd holding only /init.
fn prepare_linux(dir: &Path) -> Result<Guest, String> {
    let k = crate::guest::linux::fetch_kernel()?;
    let unpacked = crate::guest::linux::cache_dir().join(format!("vmlinux-{}", k.version));
    if !unpacked.is_file() {
        println!("bench boot: unpacking vmlinux from {} (once; cached in {})", k.bzimage.display(), unpacked.display());
    }
    let kernel = crate::guest::linux::vmlinux(&k)?;
    let init = build_linux_init(dir)?;
    let data = std::fs::read(&init).map_err(|e| format!("cannot read {}: {e}", init.display()))?;
    let initrd = dir.join("boot-linux.cpio");
    std::fs::write(&initrd, crate::host::cpio::cpio_newc(&[crate::host::cpio::CpioEntry::File { path: "init".into(), mode: 0o755, data }]))
        .map_err(|e| format!("cannot write {}: {e}", initrd.display()))?;
    Ok(Guest { kernel, initrd, cmdline: LINUX_CMDLINE.into() })
}

/// Per-boot timeout: generous, since Linux's SMP bring-up under TCG grows with the vCPUs.
fn timeout_for(smp: u32) -> Duration {
    Duration::from_secs(120 + 5 * smp as u64)
}

/// One vCPU count's results: boot k of ours and boot k of Linux (back to back) are a pair.
/// A boot that never reached its first line is `Err(why)`: counted and shown, not timed.
struct Row {
    smp: u32,
    ours: Vec<Result<Sample, String>>,
    /// Empty with `--no-linux`.
    linux: Vec<Result<Duration, String>>,
}

impl Row {
    fn ours_ms(&self) -> Vec<f64> {
        self.ours.iter().flatten().map(|s| ms(s.first_line)).collect()
    }
    fn summary_ms(&self) -> Vec<f64> {
        self.ours.iter().flatten().filter_map(|s| s.summary.map(ms)).collect()
    }
    fn linux_ms(&self) -> Vec<f64> {
        self.linux.iter().flatten().map(|d| ms(*d)).collect()
    }
    /// ours / Linux for each pair in which both boots reached their first line.
    fn ratios(&self) -> Vec<f64> {
        self.ours
            .iter()
            .zip(&self.linux)
            .filter_map(|(o, l)| match (o, l) {
                (Ok(o), Ok(l)) => Some(o.first_line.as_secs_f64() / l.as_secs_f64()),
                _ => None,
            })
            .collect()
    }
    fn failures(&self) -> usize {
        self.ours.iter().filter(|r| r.is_err()).count() + self.linux.iter().filter(|r| r.is_err()).count()
    }
}

/// `median [min–max] ms`, followed by `, N failed` when boots failed.
fn cell_ms<T>(values: &[f64], results: &[Result<T, String>]) -> String {
    let failed = results.iter().filter(|r| r.is_err()).count();
    let mut c = fmt_ms(&summarize(values));
    if failed > 0 {
        c.push_str(&format!(", {failed} failed"));
    }
    c
}

fn table(rows: &[Row], with_linux: bool) -> String {
    let mut t = String::new();
    t.push_str(&format!(
        "{:>5}  {:>26}  {:>24}  {:>26}  {:>26}\n",
        "vCPUs", "ours: to first line", "ours: to summary", "Linux: to first line", "ours/Linux (<1: ours first)"
    ));
    for r in rows {
        let (linux, ratio) =
            if with_linux { (cell_ms(&r.linux_ms(), &r.linux), fmt_ratio(&summarize(&r.ratios()))) } else { ("-".to_string(), "-".to_string()) };
        t.push_str(&format!(
            "{:>5}  {:>26}  {:>24}  {:>26}  {:>26}\n",
            r.smp,
            cell_ms(&r.ours_ms(), &r.ours),
            fmt_ms(&summarize(&r.summary_ms())),
            linux,
            ratio
        ));
    }
    t
}

fn json(rows: &[Row]) -> String {
    let num = |x: Option<f64>| x.map(|v| format!("{v:.1}")).unwrap_or_else(|| "null".into());
    let list = |v: &[f64], digits: usize| format!("[{}]", v.iter().map(|x| format!("{x:.digits$}")).collect::<Vec<_>>().join(","));
    let sum = |v: &[f64]| {
        summarize(v)
            .map(|s| format!("{{\"median\":{:.4},\"min\":{:.4},\"max\":{:.4}}}", s.median, s.min, s.max))
            .unwrap_or_else(|| "null".into())
    };
    let errors = |r: &Row| {
        let e: Vec<String> = r
            .ours
            .iter()
            .filter_map(|x| x.as_ref().err().map(|e| ("ours", e)))
            .chain(r.linux.iter().filter_map(|x| x.as_ref().err().map(|e| ("linux", e))))
            .map(|(who, e)| format!("{{\"system\":\"{who}\",\"error\":{}}}", serde_json::Value::from(e.lines().next().unwrap_or(""))))
            .collect();
        format!("[{}]", e.join(","))
    };
    let recs: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{{\"benchmark\":\"boot\",\"endpoint\":\"{FIRST_LINE}\",\"cores\":{},\"mem_mib\":{MEM_MIB},\"ours_ms\":{},\"ours_summary_ms\":{},\"linux_ms\":{},\"ratio_ours_over_linux\":{},\"ours_median_ms\":{},\"linux_median_ms\":{},\"ratio\":{},\"failures\":{}}}",
                r.smp,
                list(&r.ours_ms(), 1),
                list(&r.summary_ms(), 1),
                list(&r.linux_ms(), 1),
                list(&r.ratios(), 5),
                num(summarize(&r.ours_ms()).map(|s| s.median)),
                num(summarize(&r.linux_ms()).map(|s| s.median)),
                sum(&r.ratios()),
                errors(r)
            )
        })
        .collect();
    format!("[\n{}\n]\n", recs.join(",\n"))
}

/// `cargo xtask bench boot [--smp LIST] [--runs N] [--out DIR] [--no-linux]` (cli.rs).
pub fn run(args: &crate::boot_bench::BootBenchArgs) -> Result<(), String> {
    let (smps, runs, with_linux) = (args.smp.0.clone(), args.runs as usize, !args.no_linux);
    let out_dir = args.out.clone().unwrap_or_else(|| crate::host::env::target_dir().join("bench"));
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    println!("bench boot: building this kernel, `hello` and its one-program initrd");
    let ours = prepare_ours(&out_dir)?;
    let linux = if with_linux {
        println!("bench boot: preparing Linux (Debian's kernel as vmlinux, /init from tools/boot-bench/hello.c)");
        Some(prepare_linux(&out_dir)?)
    } else {
        None
    };
    println!(
        "bench boot: QEMU spawn to the first line of the initrd's one program (`{FIRST_LINE} ...`), {runs} boot(s) per system and vCPU count, ours and Linux back to back; TCG wall clock on this host (noisy when the host is busy)"
    );
    println!("bench boot: machine (both, at {} vCPUs): {}", smps[0], machine_only(&qemu_args(&ours, smps[0])).join(" "));
    println!("bench boot: ours:  -kernel {} -initrd {} -append {OUR_CMDLINE:?}", ours.kernel.display(), ours.initrd.display());
    if let Some(l) = &linux {
        println!("bench boot: Linux: -kernel {} -initrd {} -append {LINUX_CMDLINE:?}", l.kernel.display(), l.initrd.display());
    }
    let total = smps.len() * runs;
    // A line when each pair starts and when it ends (on a terminal, a status line redrawn
    // every second; otherwise one more line a minute while a slow boot runs).
    let progress = crate::host::progress::Progress::new("bench boot", total);
    let mut rows = Vec::new();
    let mut done = 0;
    for &smp in &smps {
        let mut row = Row { smp, ours: Vec::new(), linux: Vec::new() };
        for k in 1..=runs {
            progress.start(done + 1, &format!("{smp} vCPUs, boot {k}/{runs}{}", if linux.is_some() { " (ours, then Linux)" } else { "" }));
            let o = boot_once(&qemu_args(&ours, smp), FIRST_LINE, timeout_for(smp));
            let mut what = format!("{smp} vCPUs, boot {k}/{runs}: ours ");
            match &o {
                Ok(s) => what.push_str(&format!("{:.0} ms", ms(s.first_line))),
                Err(e) => {
                    eprintln!("bench boot: ours at {smp} vCPUs, boot {k}: {e}");
                    what.push_str("failed");
                }
            }
            if let Some(l) = &linux {
                let r = boot_once(&qemu_args(l, smp), FIRST_LINE, timeout_for(smp)).map(|s| s.first_line);
                match (&o, &r) {
                    (Ok(o), Ok(l)) => what.push_str(&format!(", Linux {:.0} ms, ours/Linux {}", ms(*l), sig(o.first_line.as_secs_f64() / l.as_secs_f64(), 3))),
                    (Err(_), Ok(l)) => what.push_str(&format!(", Linux {:.0} ms", ms(*l))),
                    (_, Err(e)) => {
                        eprintln!("bench boot: Linux at {smp} vCPUs, boot {k}: {e}");
                        what.push_str(", Linux failed");
                    }
                }
                row.linux.push(r);
            }
            row.ours.push(o);
            done += 1;
            progress.finish(&format!("bench boot: [{done}/{total}] {what}"));
        }
        let linux_part = if with_linux { format!(", Linux {}, ours/Linux {}", cell_ms(&row.linux_ms(), &row.linux), fmt_ratio(&summarize(&row.ratios()))) } else { String::new() };
        println!("bench boot: {smp} vCPUs: ours {}{linux_part}", cell_ms(&row.ours_ms(), &row.ours));
        rows.push(row);
    }
    drop(progress);
    println!("\nmedian [min–max] over {runs} boot(s); ratio per pair (boot k of ours over boot k of Linux), below 1 = ours reaches its first line sooner");
    print!("{}", table(&rows, with_linux));
    let path = out_dir.join("boot.json");
    std::fs::write(&path, json(&rows)).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    let failed: usize = rows.iter().map(Row::failures).sum();
    if failed > 0 {
        return Err(format!("{failed} boot(s) did not reach their first line (the reasons are above)"));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The command line of `bench boot`

#[derive(clap::Args, Debug, Clone, PartialEq)]
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

#[cfg(test)]
mod tests {
    use super::*;

    fn guest(kernel: &str, initrd: &str, cmdline: &str) -> Guest {
        Guest { kernel: kernel.into(), initrd: initrd.into(), cmdline: cmdline.into() }
    }

    #[test]
    fn both_systems_get_the_same_machine() {
        let o = qemu_args(&guest("/k/kernel.elf", "/b/ours.cpio", OUR_CMDLINE), 4);
        let l = qemu_args(&guest("/c/vmlinux", "/b/linux.cpio", LINUX_CMDLINE), 4);
        assert_eq!(machine_only(&o), machine_only(&l));
        for (a, k, i, c) in [(&o, "/k/kernel.elf", "/b/ours.cpio", OUR_CMDLINE), (&l, "/c/vmlinux", "/b/linux.cpio", LINUX_CMDLINE)] {
            assert!(a.windows(2).any(|w| w[0] == "-kernel" && w[1] == k));
            assert!(a.windows(2).any(|w| w[0] == "-initrd" && w[1] == i));
            assert!(a.windows(2).any(|w| w[0] == "-append" && w[1] == c));
            assert!(a.windows(2).any(|w| w[0] == "-smp" && w[1] == "4"));
            assert!(a.windows(2).any(|w| w[0] == "-m" && w[1] == format!("{MEM_MIB}M")));
            assert!(a.windows(2).any(|w| w[0] == "-cpu" && w[1] == "max"));
            assert!(a.windows(2).any(|w| w[0] == "-machine" && w[1] == "q35"));
            assert!(a.windows(2).any(|w| w[0] == "-accel" && w[1].starts_with("tcg")));
            assert!(a.iter().any(|s| s == "-nodefaults"));
        }
    }

    #[test]
    fn medians_and_ranges() {
        assert_eq!(summarize(&[3.0, 1.0, 2.0]), Some(Summary { median: 2.0, min: 1.0, max: 3.0 }));
        assert_eq!(summarize(&[4.0, 1.0, 2.0, 3.0]), Some(Summary { median: 2.5, min: 1.0, max: 4.0 }));
        assert_eq!(summarize(&[]), None);
    }

    #[test]
    fn ratios_keep_three_significant_digits() {
        assert_eq!(sig(0.0123456, 3), "0.0123");
        assert_eq!(sig(0.4519, 3), "0.452");
        assert_eq!(sig(1.23456, 3), "1.23");
        assert_eq!(sig(123.4, 3), "123");
        assert_eq!(sig(0.0004, 3), "0.000400");
        assert_eq!(sig(0.0, 3), "0");
    }

    #[test]
    fn pairs_give_ratios_boot_by_boot() {
        let s = |ms| Ok(Sample { first_line: Duration::from_millis(ms), summary: None });
        let d = Duration::from_millis;
        // The third pair lost its Linux boot, the fourth its own: neither gives a ratio.
        let r = Row {
            smp: 2,
            ours: vec![s(100), s(300), s(200), Err("x".into())],
            linux: vec![Ok(d(1000)), Ok(d(1500)), Err("panic".into()), Ok(d(900))],
        };
        let q = r.ratios();
        assert!(q.len() == 2 && (q[0] - 0.1).abs() < 1e-12 && (q[1] - 0.2).abs() < 1e-12, "{q:?}");
        assert_eq!(r.failures(), 2);
        let t = table(&[r], true);
        assert!(t.contains("0.150 [0.100–0.200]"), "{t}");
        assert!(t.contains("200 [100–300] ms, 1 failed"), "{t}");
        assert!(t.contains("1000 [900–1500] ms, 1 failed"), "{t}");
        // boot.json stays JSON whatever a failure's text holds (quotes, control characters).
        let r = Row { smp: 1, ours: vec![Err("say \"no\"\u{1b}[0m".into())], linux: vec![Ok(d(5))] };
        let v: serde_json::Value = serde_json::from_str(&json(&[r])).expect("boot.json parses");
        assert_eq!(v[0]["failures"][0]["error"], "say \"no\"\u{1b}[0m");
        assert_eq!(v[0]["linux_ms"][0], 5.0);
    }
}
