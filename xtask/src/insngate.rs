//! The instruction-count gate (docs/insngate.md): exact guest instructions per operation of
//! the paths in [`ROWS`], measured by the `insncount` plugin (one region per path, 1 vCPU,
//! the exact mode), compared with the committed baseline `xtask/insngate-baseline.txt`.
//! A path that costs more than [`THRESHOLD`] over its baseline fails, as does a path with no
//! baseline line or a baseline line with no measurement; a path below its baseline passes and
//! is reported, so the baseline can be lowered to lock the gain in.
//!
//! `cargo xtask insngate` measures and compares; `cargo xtask insngate --update NAME,... --reason
//! TEXT` (or `--update all`) measures and rewrites those lines with today's date and the reason.
//! `cargo xtask test` runs the comparison as the suite `insngate`.

use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use crate::host::env::{target_dir, workspace_root};
use crate::guest::plugin::{parse_records, Record};

/// A path may cost this much more than its baseline (3 %) before the gate fails.
pub const THRESHOLD: f64 = 0.03;

/// Which guest program measures a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guest {
    /// `microbench all`: the kernel-interface base costs, called directly through `libos::sys`.
    Micro,
    /// `insngate`: a benchmark of the suite (crate `bench`) through ours' `Platform`, as
    /// `cargo xtask bench` runs it, one worker.
    Suite,
    /// `linuxrt`: a static Linux program of linux/progs/ (built with `musl-gcc -static`, on an
    /// image of its own) under the library OS's personality; it marks its region and prints
    /// `workload name=NAME ops=N` (as for `cargo xtask exec --insncount`).
    Linux,
}

/// One measured path.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    /// The baseline's name for it.
    pub name: &'static str,
    guest: Guest,
    /// The guest's name: the microbench benchmark, or the suite row with its parameters
    /// (`NAME:k=v,...`).
    what: &'static str,
    /// Operations per reported unit (1, or 2^20 for "per input MiB").
    scale: u64,
    /// What one operation is, and which path it takes on this system (DESIGN.md, "Fair
    /// comparisons": "kernel path" enters the kernel, "library path" is done in the library OS).
    pub op: &'static str,
}

const fn micro(name: &'static str, what: &'static str, op: &'static str) -> Row {
    Row { name, guest: Guest::Micro, what, scale: 1, op }
}

const fn suite(name: &'static str, what: &'static str, op: &'static str) -> Row {
    Row { name, guest: Guest::Suite, what, scale: 1, op }
}

/// Iterations of each `microbench` benchmark.
const MICRO_ITERS: u64 = 2000;

/// The paths, in the order the guests run them (the microbench's order is its `all`).
pub const ROWS: &[Row] = &[
    micro("null", "null", "null system call, `sys::null` (kernel path)"),
    micro("obj_stat", "stat", "`obj_stat` of a segment in the root share (kernel path)"),
    micro("fault", "fault", "demand-zero fault on a private range (kernel path)"),
    micro("share_private", "share_private", "share add + delete, private share (kernel path)"),
    micro("share_global", "share_global", "share add + delete, shared share (kernel path)"),
    micro("segment", "segment", "segment alloc + free (kernel path)"),
    micro("ppc", "ppc", "protected procedure call round trip, bound gate (kernel path)"),
    suite("nullsyscall", "nullsyscall:iters=20000", "suite `nullsyscall`: null call with the harness loop (kernel path)"),
    suite("dupclose", "dupclose:iters=5000", "suite `dupclose`: dup + close, process-wide table (library path + kernel share calls)"),
    suite("dupclose_private", "dupclose_private:iters=5000", "suite `dupclose_private`: dup + close, per-worker table (library path + kernel share calls)"),
    suite("share_local", "share_local:iters=5000", "suite `share_local`: add + delete in a per-core share (kernel path)"),
    suite("stat_mt", "stat_mt:iters=5000", "suite `stat_mt`: `obj_stat` of the worker's own segment (kernel path)"),
    suite("segment_allocfree", "segment_allocfree:iters=2000", "suite `segment_allocfree`: segment alloc + free (kernel path)"),
    suite("pagefault_zero", "pagefault_zero:rounds=20", "suite `pagefault_zero`: demand-zero fault with its share of map/unmap (kernel path)"),
    suite("pagefault_mt", "pagefault_mt:rounds=20", "suite `pagefault_mt`: in-core fault on a fresh mapping (kernel path)"),
    suite("fs_stat_same", "fs_stat_same:iters=2000", "suite `fs_stat_same`: stat of a path (library path)"),
    suite("fstat_private", "fstat_private:iters=5000", "suite `fstat_private`: fstat of a descriptor (library path)"),
    suite("fs_open_private", "fs_open_private:iters=1000", "suite `fs_open_private`: open + read 1 byte + close, cached (library path)"),
    suite("fs_read_cached", "fs_read_cached:iters=20", "suite `fs_read_cached`: pread of 64 KiB from the buffer cache (library path)"),
    Row {
        name: "metis_wc_per_mib",
        guest: Guest::Suite,
        what: "metis_wc:size=1048576",
        scale: 1 << 20,
        op: "suite `metis_wc`, 1 MiB of input, instructions per input MiB (library path + kernel faults)",
    },
    Row {
        name: "linux_fork_exit_wait",
        guest: Guest::Linux,
        what: "abi_fork:20",
        scale: 1,
        op: "`fork` + `_exit` + `wait4` of a static musl program (`linux/progs/abi_fork.c`, 20 rounds), the child's instructions included (library path: cfork, kernel copies)",
    },
];

/// Where the committed baseline lives.
pub fn baseline_path() -> PathBuf {
    workspace_root().join("xtask/insngate-baseline.txt")
}

/// One line of the baseline: `NAME INSNS DATE REASON...`.
#[derive(Debug, Clone, PartialEq)]
pub struct BaselineLine {
    pub name: String,
    pub insns: f64,
    pub date: String,
    pub reason: String,
}

/// Parse the baseline text: `#` comments and blank lines aside, one `NAME INSNS DATE REASON`
/// line per path (the reason may not be empty; no name twice).
pub fn parse_baseline(text: &str) -> Result<Vec<BaselineLine>, String> {
    let mut out: Vec<BaselineLine> = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let bad = |why: &str| format!("baseline line {}: {why}: `{l}` (NAME INSNS_PER_OP YYYY-MM-DD REASON)", i + 1);
        // Three words, then the reason (the rest of the line, spaces and all).
        let mut rest = l;
        let mut word = || {
            let t = rest.trim_start();
            let end = t.find(char::is_whitespace).unwrap_or(t.len());
            rest = &t[end..];
            Some(&t[..end]).filter(|w| !w.is_empty())
        };
        let name = word().ok_or_else(|| bad("empty"))?;
        let insns: f64 = word().and_then(|x| x.parse().ok()).filter(|x: &f64| x.is_finite() && *x > 0.0).ok_or_else(|| bad("no positive instruction count"))?;
        let date = word().filter(|d| is_date(d)).ok_or_else(|| bad("no date"))?;
        let reason = rest.trim();
        if reason.is_empty() {
            return Err(bad("no reason"));
        }
        if out.iter().any(|b| b.name == name) {
            return Err(bad("name given twice"));
        }
        out.push(BaselineLine { name: name.to_string(), insns, date: date.to_string(), reason: reason.to_string() });
    }
    Ok(out)
}

fn is_date(d: &str) -> bool {
    let b = d.as_bytes();
    b.len() == 10 && b[4] == b'-' && b[7] == b'-' && b.iter().enumerate().all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
}

/// The verdict on one path.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Within the threshold (at most 3 % above, at most 3 % below).
    Ok,
    /// More than 3 % below the baseline: passes; lower the baseline to keep the gain.
    Below,
    /// More than 3 % above the baseline: fails.
    Above,
    /// In the baseline, not measured: fails.
    NotMeasured,
    /// Measured, with no baseline line: fails.
    NoBaseline,
}

impl Verdict {
    pub fn fails(&self) -> bool {
        matches!(self, Verdict::Above | Verdict::NotMeasured | Verdict::NoBaseline)
    }
}

/// One line of the comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Compared {
    pub name: String,
    pub baseline: Option<f64>,
    pub measured: Option<f64>,
    pub verdict: Verdict,
}

/// Compare measured counts (name, instructions per op) with the baseline, in baseline order,
/// then the measured paths the baseline lacks.
pub fn compare(baseline: &[BaselineLine], measured: &[(String, f64)]) -> Vec<Compared> {
    let mut out = Vec::new();
    for b in baseline {
        let m = measured.iter().find(|(n, _)| *n == b.name).map(|(_, v)| *v);
        let verdict = match m {
            None => Verdict::NotMeasured,
            Some(v) if v > b.insns * (1.0 + THRESHOLD) => Verdict::Above,
            Some(v) if v < b.insns * (1.0 - THRESHOLD) => Verdict::Below,
            Some(_) => Verdict::Ok,
        };
        out.push(Compared { name: b.name.clone(), baseline: Some(b.insns), measured: m, verdict });
    }
    for (n, v) in measured {
        if !baseline.iter().any(|b| b.name == *n) {
            out.push(Compared { name: n.clone(), baseline: None, measured: Some(*v), verdict: Verdict::NoBaseline });
        }
    }
    out
}

/// The comparison as a table, one line per path.
pub fn render(rows: &[Compared]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{:<20} {:>12} {:>12} {:>8}  verdict", "path", "baseline", "measured", "change");
    for r in rows {
        let f = |v: Option<f64>| v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into());
        let change = match (r.baseline, r.measured) {
            (Some(b), Some(m)) => format!("{:+.1}%", (m / b - 1.0) * 100.0),
            _ => "-".into(),
        };
        let verdict = match r.verdict {
            Verdict::Ok => "ok".to_string(),
            Verdict::Below => "below baseline (passes; lower the line to keep the gain: --update NAME --reason ...)".to_string(),
            Verdict::Above => format!("FAILED: more than {:.0} % above the baseline", THRESHOLD * 100.0),
            Verdict::NotMeasured => "FAILED: in the baseline but not measured".to_string(),
            Verdict::NoBaseline => "FAILED: measured but has no baseline line (add one: --update NAME --reason ...)".to_string(),
        };
        let _ = writeln!(s, "{:<20} {:>12} {:>12} {:>8}  {verdict}", r.name, f(r.baseline), f(r.measured), change);
    }
    s
}

/// The baseline text with the lines named in `updates` (name, instructions) replaced (or
/// appended, in `ROWS` order at the end) with `date` and `reason`; other lines and comments
/// stay as they are.
pub fn updated_baseline(text: &str, updates: &[(String, f64)], date: &str, reason: &str) -> Result<String, String> {
    let reason = reason.trim();
    if reason.is_empty() || reason.contains('\n') {
        return Err("--reason must be one non-empty line".into());
    }
    if !is_date(date) {
        return Err(format!("`{date}` is not a date YYYY-MM-DD"));
    }
    parse_baseline(text)?;
    let line = |n: &str, v: f64| format!("{n:<20} {v:>10.1}  {date}  {reason}");
    let mut done = vec![false; updates.len()];
    let mut out = String::new();
    for l in text.lines() {
        let t = l.trim();
        let name = (!t.is_empty() && !t.starts_with('#')).then(|| t.split_whitespace().next()).flatten();
        match name.and_then(|n| updates.iter().position(|(u, _)| u == n)) {
            Some(i) => {
                out.push_str(&line(&updates[i].0, updates[i].1));
                done[i] = true;
            }
            None => out.push_str(l),
        }
        out.push('\n');
    }
    for (i, (n, v)) in updates.iter().enumerate() {
        if !done[i] {
            out.push_str(&line(n, *v));
            out.push('\n');
        }
    }
    Ok(out)
}

/// Pair the plugin's `region` records (in order) with the guest's row lines (in order) and
/// give instructions per operation (times the row's scale) for each row.
fn per_op(rows: &[Row], regions: &[&Record], ops: &[u64]) -> Result<Vec<(String, f64)>, String> {
    if regions.len() != rows.len() || ops.len() != rows.len() {
        return Err(format!("{} paths, but {} regions and {} operation counts", rows.len(), regions.len(), ops.len()));
    }
    let mut out = Vec::new();
    for ((row, r), &n) in rows.iter().zip(regions).zip(ops) {
        if n == 0 {
            return Err(format!("{}: the guest reported 0 operations", row.name));
        }
        let insns = r.u("kernel") + r.u("user");
        out.push((row.name.to_string(), insns as f64 * row.scale as f64 / n as f64));
    }
    Ok(out)
}

/// Boot `cmdline` on 1 vCPU with insncount (`regions=on`) in the exact mode; the plugin's
/// records and the serial output.
fn boot(kernel: &std::path::Path, initrd: &std::path::Path, tag: &str, cmdline: String, disk: Option<&std::path::Path>) -> Result<(Vec<Record>, String), String> {
    let built = crate::guest::plugin::build()?;
    let dir = target_dir().join("insngate");
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let out = dir.join(format!("insncount-{tag}.txt"));
    let _ = fs::remove_file(&out);
    let cfg = crate::host::vm::VmConfig {
        smp: 1,
        medium: Some(crate::host::vm::BootMedium::Kernel(kernel.to_path_buf())),
        initrd: Some(initrd.to_path_buf()),
        cmdline,
        extra: vec!["-plugin".into(), format!("{},out={},regions=on", built.insncount.display(), out.display())],
        ..Default::default()
    };
    cfg.validate()?;
    let mut args: Vec<String> = cfg.qemu_args().into_iter().map(|a| if a == "tcg,thread=multi" { "tcg,thread=single".to_string() } else { a }).collect();
    args.extend(["-serial", "stdio", "-monitor", "none"].iter().map(|x| x.to_string()));
    if let Some(img) = disk {
        args.extend(crate::guest::fsimage::disk_args(img));
    }
    args.extend(crate::guest::plugin::exact_qemu_args());
    let run = crate::host::qemu::run_qemu(&args, Duration::from_secs(240))?;
    let tail = || run.serial.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
    if run.timed_out {
        return Err(format!("insngate {tag}: the guest timed out; serial ends:\n{}", tail()));
    }
    if run.exit_code != Some(crate::host::vm::QEMU_EXIT_SUCCESS) {
        return Err(format!("insngate {tag}: the guest failed (QEMU exit {:?}); serial ends:\n{}", run.exit_code, tail()));
    }
    let text = fs::read_to_string(&out).map_err(|e| format!("insngate {tag}: no plugin report {}: {e}", out.display()))?;
    let recs = parse_records(&text);
    if !text.lines().any(|l| l == "end") {
        return Err(format!("insngate {tag}: the plugin report is incomplete"));
    }
    if let Some(r) = recs.iter().find(|r| r.kind == "regions") {
        if r.u("lost") != 0 {
            return Err(format!("insngate {tag}: the plugin lost {} region records", r.u("lost")));
        }
    }
    Ok((recs, run.serial))
}

/// Measure every path of [`ROWS`]: two boots (the microbench, then the suite rows with the
/// benchmark disk attached).
pub fn measure(kernel: &std::path::Path, initrd: &std::path::Path) -> Result<Vec<(String, f64)>, String> {
    let mut all = Vec::new();
    // The kernel-interface base costs.
    let micro: Vec<Row> = ROWS.iter().copied().filter(|r| r.guest == Guest::Micro).collect();
    let names: Vec<&str> = micro.iter().map(|r| r.what).collect();
    // `microbench all` runs exactly these, in this order; the region count check below
    // catches a change on either side.
    let (recs, serial) = boot(kernel, initrd, "micro", format!("init=microbench -- all iters={MICRO_ITERS}"), None)?;
    let regions: Vec<&Record> = recs.iter().filter(|r| r.kind == "region").collect();
    let mut ops = Vec::new();
    for l in serial.lines().filter(|l| l.starts_with("bench name=")) {
        let r = &parse_records(l)[0];
        let name = r.get("name").unwrap_or("");
        if names.get(ops.len()) != Some(&name) {
            return Err(format!("microbench ran `{name}` where the gate expects `{}`", names.get(ops.len()).unwrap_or(&"nothing")));
        }
        ops.push(r.u("ops"));
    }
    all.extend(per_op(&micro, &regions, &ops)?);
    // The suite rows, one worker each, in one boot.
    let rows: Vec<Row> = ROWS.iter().copied().filter(|r| r.guest == Guest::Suite).collect();
    let words: Vec<&str> = rows.iter().map(|r| r.what).collect();
    let (recs, serial) = boot(kernel, initrd, "suite", format!("init=insngate -- {}", words.join(" ")), Some(&crate::guest::fsimage::image()?))?;
    if let Some(e) = serial.lines().find(|l| l.starts_with("insngate-error")) {
        return Err(format!("insngate guest: {e}"));
    }
    let regions: Vec<&Record> = recs.iter().filter(|r| r.kind == "region").collect();
    let mut ops = Vec::new();
    for l in serial.lines().filter(|l| l.starts_with("insngate-row ")) {
        let r = &parse_records(l)[0];
        let want = rows.get(ops.len()).map(|r| r.what.split(':').next().unwrap_or(""));
        if want != r.get("name") {
            return Err(format!("insngate guest ran `{}` where the gate expects `{}`", r.get("name").unwrap_or("?"), want.unwrap_or("nothing")));
        }
        ops.push(r.u("ops"));
    }
    all.extend(per_op(&rows, &regions, &ops)?);
    // The Linux programs, one boot each (`linuxrt` runs one program).
    for row in ROWS.iter().copied().filter(|r| r.guest == Guest::Linux) {
        all.extend(measure_linux(kernel, initrd, row)?);
    }
    Ok(all)
}

/// One `Guest::Linux` row: the program built, an image holding it at `/bin/NAME`, a boot of
/// `init=linuxrt -- /bin/NAME ARGS` with it as the root.
fn measure_linux(kernel: &std::path::Path, initrd: &std::path::Path, row: Row) -> Result<Vec<(String, f64)>, String> {
    let (prog, args) = row.what.split_once(':').unwrap_or((row.what, ""));
    let bin = crate::exec::progs::build(prog, &[])?;
    let root = target_dir().join("insngate").join(format!("linux-{}", row.name));
    let _ = fs::remove_dir_all(&root);
    for d in ["bin", "tmp"] {
        fs::create_dir_all(root.join(d)).map_err(|e| format!("cannot create {}: {e}", root.join(d).display()))?;
    }
    fs::copy(&bin, root.join("bin").join(prog)).map_err(|e| format!("{} -> {}: {e}", bin.display(), root.display()))?;
    let img = target_dir().join("insngate").join(format!("linux-{}.img", row.name));
    crate::host::ext2img::mkimage(&root, &img, None)?;
    let (recs, serial) = boot(kernel, initrd, row.name, format!("init=linuxrt -- /bin/{prog} {}", args.replace(',', " ")), Some(&img))?;
    let regions: Vec<&Record> = recs.iter().filter(|r| r.kind == "region").collect();
    let (name, ops) = crate::exec::cost::workload_line(&serial);
    let want = row.name.strip_prefix("linux_").unwrap_or(row.name);
    if name.as_deref() != Some(want) {
        return Err(format!("insngate {}: the program printed no `workload name={want} ops=N` line (it failed?); serial ends:\n{}", row.name, serial.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")));
    }
    per_op(&[row], &regions, &[ops.unwrap_or(0)])
}

fn read_baseline() -> Result<(String, Vec<BaselineLine>), String> {
    let p = baseline_path();
    let text = fs::read_to_string(&p).map_err(|e| format!("cannot read the baseline {}: {e}", p.display()))?;
    let b = parse_baseline(&text)?;
    Ok((text, b))
}

/// The suite of `cargo xtask test`: measure, compare, one test per path.
pub fn ci_check(kernel: &std::path::Path, initrd: &std::path::Path) -> Result<crate::host::outcome::TestTally, String> {
    let (_, baseline) = read_baseline()?;
    let measured = measure(kernel, initrd)?;
    let rows = compare(&baseline, &measured);
    print!("{}", indent(&render(&rows)));
    let mut t = crate::host::outcome::TestTally::default();
    for r in &rows {
        if r.verdict.fails() {
            println!("   FAILED: insngate {}: {:?}", r.name, r.verdict);
            t.add(crate::host::outcome::TestTally::FAIL);
        } else {
            t.add(crate::host::outcome::TestTally::PASS);
        }
    }
    Ok(t)
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("   {l}\n")).collect()
}

/// `cargo xtask insngate [--update NAME,...|all --reason TEXT]`.
pub fn command(update: Option<&str>, reason: Option<&str>) -> Result<(), String> {
    let (text, baseline) = read_baseline()?;
    let targets: Vec<String> = match update {
        None => Vec::new(),
        Some("all") => ROWS.iter().map(|r| r.name.to_string()).collect(),
        Some(list) => {
            let v: Vec<String> = list.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect();
            if let Some(bad) = v.iter().find(|n| !ROWS.iter().any(|r| r.name == n.as_str())) {
                let known: Vec<&str> = ROWS.iter().map(|r| r.name).collect();
                return Err(format!("--update: no path `{bad}` (known: {}, or all)", known.join(", ")));
            }
            if v.is_empty() {
                return Err("--update: no path named".into());
            }
            v
        }
    };
    if !targets.is_empty() && reason.map(str::trim).unwrap_or("").is_empty() {
        return Err("--update needs --reason TEXT: why the baseline changes".into());
    }
    let kernel = crate::host::env::build_kernel()?;
    let initrd = crate::host::user::build_initrd()?;
    let measured = measure(&kernel, &initrd)?;
    let rows = compare(&baseline, &measured);
    print!("{}", render(&rows));
    println!("\nwhat each path measures:");
    for r in ROWS {
        println!("  {:<20} {}", r.name, r.op);
    }
    if !targets.is_empty() {
        let updates: Vec<(String, f64)> = targets.iter().filter_map(|n| measured.iter().find(|(m, _)| m == n).cloned()).collect();
        let new = updated_baseline(&text, &updates, &today()?, reason.unwrap_or(""))?;
        fs::write(baseline_path(), new).map_err(|e| format!("cannot write {}: {e}", baseline_path().display()))?;
        println!("updated {} line(s) of {}", updates.len(), baseline_path().display());
        return Ok(());
    }
    if rows.iter().any(|r| r.verdict.fails()) {
        return Err("the instruction-count gate failed (above)".into());
    }
    Ok(())
}

fn today() -> Result<String, String> {
    let out = std::process::Command::new("date").args(["-u", "+%Y-%m-%d"]).output().map_err(|e| format!("date: {e}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

// ---------------------------------------------------------------------------------------
// The command line of `insngate`

#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct InsngateArgs {
    /// Rewrite these baseline lines with the measured counts (comma-separated path names, or `all`)
    #[arg(long, value_name = "NAME,...|all")]
    pub update: Option<String>,
    /// Why the baseline changes (required with --update; written on each line)
    #[arg(long, value_name = "TEXT", requires = "update")]
    pub reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Vec<BaselineLine> {
        parse_baseline("# comment\nnull 100.0 2026-12-07 first\nstat   200   2026-12-07   the stat path\n").unwrap()
    }

    fn m(v: &[(&str, f64)]) -> Vec<(String, f64)> {
        v.iter().map(|(n, x)| (n.to_string(), *x)).collect()
    }

    /// Catches: a threshold other than 3 %, or `>=` where `>` is meant.
    #[test]
    fn three_percent_above_fails_and_up_to_three_passes() {
        let r = compare(&base(), &m(&[("null", 103.0), ("stat", 206.2)]));
        assert_eq!(r[0].verdict, Verdict::Ok, "exactly +3 % passes");
        assert_eq!(r[1].verdict, Verdict::Above, "+3.1 % fails");
        assert!(r[1].verdict.fails());
        let r = compare(&base(), &m(&[("null", 103.1), ("stat", 200.0)]));
        assert_eq!(r[0].verdict, Verdict::Above);
        assert_eq!(r[1].verdict, Verdict::Ok);
    }

    /// Catches: a path dropped from the measurement (or the baseline) passing silently.
    #[test]
    fn a_missing_path_fails_either_way() {
        let r = compare(&base(), &m(&[("null", 100.0)]));
        assert_eq!(r[1].verdict, Verdict::NotMeasured);
        assert!(r[1].verdict.fails());
        let r = compare(&base(), &m(&[("null", 100.0), ("stat", 200.0), ("fault", 1200.0)]));
        assert_eq!(r.len(), 3);
        assert_eq!(r[2].verdict, Verdict::NoBaseline);
        assert!(r[2].verdict.fails());
    }

    /// Catches: a drop treated as a failure, or not reported.
    #[test]
    fn a_drop_is_reported_and_passes() {
        let r = compare(&base(), &m(&[("null", 60.0), ("stat", 198.0)]));
        assert_eq!(r[0].verdict, Verdict::Below);
        assert!(!r[0].verdict.fails());
        assert_eq!(r[1].verdict, Verdict::Ok, "within 3 % below is plain ok");
        assert!(render(&r).contains("below baseline"));
    }

    /// Catches: a baseline line without a reason or date accepted, or a name given twice.
    #[test]
    fn baseline_lines_need_a_count_date_and_reason() {
        assert!(parse_baseline("null 100 2026-12-07\n").unwrap_err().contains("no reason"));
        assert!(parse_baseline("null 100 yesterday why\n").unwrap_err().contains("no date"));
        assert!(parse_baseline("null x 2026-12-07 why\n").unwrap_err().contains("instruction count"));
        assert!(parse_baseline("null -5 2026-12-07 why\n").is_err());
        assert!(parse_baseline("null 1 2026-12-07 a\nnull 2 2026-12-07 b\n").unwrap_err().contains("twice"));
        let b = base();
        assert_eq!(b[1], BaselineLine { name: "stat".into(), insns: 200.0, date: "2026-12-07".into(), reason: "the stat path".into() });
    }

    /// Catches: an update that loses other lines or comments, or takes an empty reason.
    #[test]
    fn update_rewrites_only_the_named_lines() {
        let text = "# comment\nnull 100.0 2026-12-07 first\nstat 200 2026-12-07 the stat path\n";
        let new = updated_baseline(text, &m(&[("null", 58.0), ("fault", 1200.0)]), "2026-12-08", "faster entry").unwrap();
        let b = parse_baseline(&new).unwrap();
        assert!(new.starts_with("# comment\n"));
        assert_eq!(b.len(), 3);
        assert_eq!((b[0].insns, b[0].date.as_str(), b[0].reason.as_str()), (58.0, "2026-12-08", "faster entry"));
        assert_eq!(b[1], base()[1]);
        assert_eq!(b[2].name, "fault");
        assert!(updated_baseline(text, &m(&[("null", 58.0)]), "2026-12-08", "  ").is_err());
        assert!(updated_baseline(text, &m(&[("null", 58.0)]), "2026-12-08", "a\nb").is_err());
    }

    /// Catches: regions paired with the wrong rows, or the scale ignored.
    #[test]
    fn per_op_pairs_regions_with_rows_in_order() {
        let recs = parse_records("region index=0 vcpu=0 kernel=700 user=300\nregion index=1 vcpu=0 kernel=2000000 user=0\n");
        let regions: Vec<&Record> = recs.iter().collect();
        let rows = [micro("a", "a", "x"), Row { name: "b", guest: Guest::Suite, what: "b", scale: 1 << 20, op: "y" }];
        let r = per_op(&rows, &regions, &[10, 1 << 20]).unwrap();
        assert_eq!(r, m(&[("a", 100.0), ("b", 2000000.0)]));
        assert!(per_op(&rows, &regions[..1], &[10, 1]).is_err());
        assert!(per_op(&rows, &regions, &[0, 1]).is_err());
    }

    /// Catches: the committed baseline unparseable or out of step with the paths measured.
    #[test]
    fn the_committed_baseline_names_every_path() {
        let (_, b) = read_baseline().unwrap();
        for r in ROWS {
            assert!(b.iter().any(|l| l.name == r.name), "no baseline line for {}", r.name);
        }
        for l in &b {
            assert!(ROWS.iter().any(|r| r.name == l.name), "baseline line {} names no path", l.name);
        }
        assert!(ROWS.len() >= 15);
    }
}
