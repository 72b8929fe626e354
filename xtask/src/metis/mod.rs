//! `cargo xtask metis wc|wri|wrmem`: Metis MapReduce (docs/metis.md, mapreduce/) on either system.
//!
//! - **ours**: the kernel with a boot image holding the `metis` program and the input file
//!   (as `metis-input`); command line `init=metis -- APP input=metis-input layout=L ...`.
//! - **linux**: Debian's kernel (the bench baseline's) with an initramfs whose `/init` is the
//!   static `metis-linux` and `/metis-input` the input; the words go on the kernel command
//!   line as `metis=APP:input=/metis-input:...`.
//!
//! Both print the output between `metis-begin` and `metis-end`, its digest, and the phases
//! line; the host cuts the output out, checks it against the digest (a byte lost or added on
//! the serial line is caught), writes `--out`, and prints phase times and soft faults.
//! `wrmem` generates its text in the guest (`--size`, `--seed`); `--input` is then not used.
//!
//! The host references ([`reference_wc`], [`reference_wri`]) are a second, independent
//! implementation of the output format, used by `--check` and by the test in `cargo xtask
//! test` ([`ci_check`]).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::host::vm::{BootMedium, VmConfig};

pub mod options;
mod sweep;

use crate::metis::options::MetisAppArgs;
use crate::metis::options::MetisCommand;
use crate::metis::options::MetisRunArgs;
use crate::metis::options::SweepApp;

#[derive(Debug, Clone)]
pub struct MetisRun {
    pub app: String,
    pub input: Option<PathBuf>,
    pub system: String,
    pub smp: u32,
    pub mem_mib: u64,
    pub layout: String,
    pub size: u64,
    pub seed: u64,
    pub parts: Option<u64>,
    pub print: bool,
    pub timeout: Duration,
    /// `map`, `reduce` or `merge`: the phase the guest marks for the insncount plugin, whose
    /// `.so` is `plugin` (one boot per phase).
    pub insns: Option<&'static str>,
    pub plugin: Option<PathBuf>,
    /// Linux: transparent huge pages in the arenas as the kernel's default (true) or off.
    pub linux_thp: bool,
    /// Ours: the input goes on an ext2 disk image (made with `fs mkimage`, attached as the
    /// virtio-blk disk) and the guest reads it through the file system, not the boot image.
    pub from_disk: bool,
    /// Ours: the guest writes the output to `/metis-output` of the disk image (`out=`), not
    /// over the serial line; the host reads it back from the image after `e2fsck -fn`.
    pub to_disk: bool,
    /// Keep the disk image here after the run (default: removed).
    pub keep_disk: Option<PathBuf>,
    /// The end of map prepares the reducers' output pages (default); false: `prep=0`, reduce
    /// faults in fresh pages as Corey's Metis did (`mapreduce::run_with`).
    pub prep: bool,
    /// `tlbgrow=1`: the emulator knob `mapreduce::Tuning::tlb_grow`.
    pub tlb_grow: bool,
}

impl Default for MetisRun {
    fn default() -> Self {
        MetisRun {
            app: "wc".into(),
            input: None,
            system: "ours".into(),
            smp: 2,
            mem_mib: 1024,
            layout: "per-core".into(),
            size: 1 << 20,
            seed: 1,
            parts: None,
            print: true,
            timeout: Duration::from_secs(600),
            insns: None,
            plugin: None,
            linux_thp: true,
            from_disk: false,
            to_disk: false,
            keep_disk: None,
            prep: true,
            tlb_grow: false,
        }
    }
}

/// What a guest said.
#[derive(Debug, Clone, Default)]
pub struct MetisResult {
    /// The output (empty with `--digest-only`).
    pub output: Vec<u8>,
    /// `fnv`, `lines`, `bytes` of the output as the guest computed them.
    pub digest: (u64, u64, u64),
    /// The `metis-phases` line's fields.
    pub phases: BTreeMap<String, u64>,
    pub wall_s: f64,
    /// With `MetisRun::insns`: (kernel, user) instructions of the marked phase, all vCPUs.
    pub insns: Option<(u64, u64)>,
    /// The `metis-calib` line: (steps, ns, workers) of the calibration loop in this boot.
    pub calib: Option<(u64, u64, u64)>,
    /// Ours: the `metis-kstats` line's words (the kernel's per-core counters summed, over the
    /// run).
    pub kstats: Option<String>,
}

fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// Words of text, host side: maximal runs of ASCII letters, lower-cased, with the offset of
/// their first letter. Written independently of mapreduce/.
fn host_words(text: &[u8]) -> BTreeMap<Vec<u8>, Vec<usize>> {
    let mut m: BTreeMap<Vec<u8>, Vec<usize>> = BTreeMap::new();
    let mut start = None;
    for (i, &b) in text.iter().chain(std::iter::once(&b' ')).enumerate() {
        match (b.is_ascii_alphabetic(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                m.entry(text[s..i].to_ascii_lowercase()).or_default().push(s);
                start = None;
            }
            _ => {}
        }
    }
    m
}

/// `wc` as `tr -cs 'A-Za-z' '\n' | tr 'A-Z' 'a-z' | grep -v '^$' | LC_ALL=C sort | uniq -c`
/// would give it, rearranged as `word<TAB>count`.
pub fn reference_wc(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for (w, offs) in host_words(text) {
        out.extend_from_slice(&w);
        out.extend_from_slice(format!("\t{}\n", offs.len()).as_bytes());
    }
    out
}

/// `wri`: `word<TAB>off1,off2,...`.
pub fn reference_wri(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for (w, offs) in host_words(text) {
        out.extend_from_slice(&w);
        out.push(b'\t');
        out.extend_from_slice(offs.iter().map(|o| o.to_string()).collect::<Vec<_>>().join(",").as_bytes());
        out.push(b'\n');
    }
    out
}

/// The reference shell pipeline (docs/metis.md, "Output format") itself, rearranged as
/// `word<TAB>count` (for the check that the Rust reference agrees with it). Run by bash with
/// `pipefail`: a stage that fails (a missing `tr`, `awk` or `sort`, or `grep` finding no word)
/// is an error, and so is empty output.
pub fn pipeline_wc(file: &Path) -> Result<Vec<u8>, String> {
    let script = "tr -cs 'A-Za-z' '\\n' < \"$1\" | tr 'A-Z' 'a-z' | grep -v '^$' | LC_ALL=C sort | uniq -c | awk '{print $2 \"\\t\" $1}'";
    let out = Command::new("bash").args(["-o", "pipefail", "-c", script, "bash"]).arg(file).env("LC_ALL", "C").output().map_err(|e| format!("cannot run bash: {e}"))?;
    if !out.status.success() {
        return Err(format!("the pipeline failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim()));
    }
    if out.stdout.is_empty() {
        return Err("the pipeline gave no output".into());
    }
    Ok(out.stdout)
}

/// A boot of APP with these options (options.rs), checked: the checks between options and
/// that the input file is there.
fn run_from(app: &str, smp: u32, a: MetisRunArgs) -> Result<MetisRun, String> {
    let d = MetisRun::default();
    let r = MetisRun {
        app: app.to_string(),
        input: a.input,
        system: a.system,
        smp,
        mem_mib: a.mem,
        layout: a.layout,
        size: a.size.unwrap_or(d.size),
        seed: a.seed.unwrap_or(d.seed),
        parts: a.parts,
        print: !a.digest_only,
        timeout: Duration::from_secs(a.timeout),
        insns: None,
        plugin: a.insns.then(PathBuf::new),
        linux_thp: a.linux_thp.is_on(),
        from_disk: a.from_disk,
        to_disk: a.to_disk,
        keep_disk: a.keep_disk,
        prep: !a.no_prep,
        tlb_grow: a.tlb_grow,
    };
    if (r.to_disk || r.from_disk) && r.system != "ours" {
        return Err("metis: --from-disk and --to-disk are for --system ours (Linux's guest has no disk)".into());
    }
    if r.keep_disk.is_some() && !(r.to_disk || (r.from_disk && r.app != "wrmem")) {
        return Err("metis: --keep-disk needs a disk (--to-disk, or --from-disk with wc/wri)".into());
    }
    match (r.app.as_str(), &r.input) {
        ("wrmem", Some(_)) => return Err("metis: wrmem generates its input (--size, --seed); --input is not used".into()),
        ("wrmem", None) => {}
        (_, None) => return Err(format!("metis: {} needs --input FILE", r.app)),
        (_, Some(f)) if !f.is_file() => return Err(format!("metis: --input: cannot read {}", f.display())),
        _ => {}
    }
    Ok(r)
}

/// `metis wc|wri|wrmem`'s options: the boot, where the output goes, whether to check it.
fn app_options(app: &str, a: MetisAppArgs) -> Result<(MetisRun, Option<PathBuf>, bool), String> {
    let r = run_from(app, a.smp, a.run)?;
    if let Some(o) = &a.out {
        // An output path that cannot be written fails now, not after the boot.
        fs::write(o, b"").map_err(|e| format!("metis: --out: cannot write {}: {e}", o.display()))?;
    }
    Ok((r, a.out, a.check))
}

/// The guest's words: `APP key=value ...` (ours takes them after `--`; Linux as `metis=`
/// with `:` for spaces).
fn guest_words(r: &MetisRun, input_name: &str) -> String {
    let mut w = r.app.clone();
    if r.app == "wrmem" {
        w += &format!(" size={} seed={}", r.size, r.seed);
    } else {
        w += &format!(" input={input_name}");
    }
    // With --to-disk the output goes to the file only (the serial line would carry it twice).
    w += &format!(" workers={} layout={} print={}", r.smp, r.layout, (r.print && !r.to_disk) as u8);
    if r.to_disk {
        w += &format!(" out={DISK_OUTPUT}");
    }
    if let Some(p) = r.parts {
        w += &format!(" parts={p}");
    }
    if let Some(i) = r.insns {
        w += &format!(" insns={i}");
    }
    if !r.prep {
        w += " prep=0";
    }
    if r.tlb_grow {
        w += " tlbgrow=1";
    }
    w
}

/// QEMU arguments for the plugin, writing its report to `out`.
fn plugin_args(r: &MetisRun, out: &Path) -> Vec<String> {
    match &r.plugin {
        Some(so) if r.insns.is_some() => vec!["-plugin".into(), format!("{},out={}", so.display(), out.display())],
        _ => Vec::new(),
    }
}

fn plugin_out(r: &MetisRun) -> PathBuf {
    work_dir().join(format!("{}-{}-{}-{}-{}.insncount.txt", r.system, r.app, r.smp, r.layout, r.insns.unwrap_or("none")))
}

fn work_dir() -> PathBuf {
    crate::host::env::target_dir().join("metis")
}

fn read_input(r: &MetisRun) -> Result<Vec<u8>, String> {
    match &r.input {
        Some(p) => fs::read(p).map_err(|e| format!("metis: cannot read {}: {e}", p.display())),
        None => Ok(Vec::new()),
    }
}

/// Where `--to-disk` has the guest write the output.
pub const DISK_OUTPUT: &str = "/metis-output";

/// The disk image a run attaches (`--from-disk`: holding `/metis-input`; `--to-disk`: with
/// room for the output), or none.
fn make_disk(r: &MetisRun, input: &[u8]) -> Result<Option<PathBuf>, String> {
    let input_on_disk = r.from_disk && r.app != "wrmem";
    if !input_on_disk && !r.to_disk {
        return Ok(None);
    }
    let dir = work_dir();
    let tree = dir.join(format!("disk-tree-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tree);
    fs::create_dir_all(&tree).map_err(|e| format!("metis: {}: {e}", tree.display()))?;
    if input_on_disk {
        fs::write(tree.join("metis-input"), input).map_err(|e| format!("metis: {}: {e}", tree.display()))?;
    }
    // Room for the output: a `wri` line costs at most about 6 output bytes per input byte (a
    // one-letter word and its separator, `a b ...`, gives up to 10 digits and a comma per 2
    // input bytes: 5.5); the image file is sparse, so the room costs little on the host.
    let text_len = if r.app == "wrmem" { r.size } else { input.len() as u64 };
    let mib = if r.to_disk { ((text_len * 6 + if input_on_disk { text_len } else { 0 }) >> 20) + 8 } else { ((text_len * 2) >> 20).max(4) + 1 };
    let img = dir.join(format!("metis-disk-{}.img", std::process::id()));
    let made = crate::host::ext2img::mkimage(&tree, &img, Some(mib));
    let _ = fs::remove_dir_all(&tree);
    made?;
    Ok(Some(img))
}

/// Boot ours with `metis` and the input in the boot image (or on the disk). Returns the run
/// and the disk image it had attached (the caller reads and removes it).
fn boot_ours(r: &MetisRun, kernel: &Path, metis_elf: &[u8]) -> Result<(crate::host::qemu::RunOutput, Option<PathBuf>), String> {
    let input = read_input(r)?;
    let dir = work_dir();
    fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let initrd = dir.join(format!("ours-{}.cpio", std::process::id()));
    // With --from-disk the input is the file /metis-input of an ext2 image, read by the guest
    // through its file system; otherwise a file of the boot image.
    let mut files = vec![("metis".to_string(), metis_elf.to_vec())];
    let disk = make_disk(r, &input)?;
    let input_name = if r.from_disk && r.app != "wrmem" {
        "/metis-input"
    } else {
        files.push(("metis-input".into(), input));
        "metis-input"
    };
    crate::host::user::write_archive(&initrd, &files)?;
    let cfg = VmConfig {
        smp: r.smp,
        mem_mib: r.mem_mib,
        cmdline: format!("init=metis -- {}", guest_words(r, input_name)),
        medium: Some(BootMedium::Kernel(kernel.to_path_buf())),
        initrd: Some(initrd.clone()),
        extra: plugin_args(r, &plugin_out(r)),
        disk: disk.clone(),
        ..Default::default()
    };
    let mut args = cfg.qemu_args();
    args.extend(["-serial", "stdio", "-monitor", "none"].map(String::from));
    let run = crate::host::qemu::run_qemu(&args, r.timeout);
    let _ = fs::remove_file(&initrd);
    match run {
        Ok(run) => Ok((run, disk)),
        Err(e) => {
            if let Some(img) = disk {
                let _ = fs::remove_file(img);
            }
            Err(e)
        }
    }
}

/// `e2fsck -fn` on the image, quietly: Ok if clean, else its report.
fn fsck_clean(img: &Path) -> Result<(), String> {
    crate::host::ext2img::ensure_e2fsprogs()?;
    let tool = ["/usr/sbin/e2fsck", "/sbin/e2fsck"].into_iter().find(|p| Path::new(p).exists()).unwrap_or("e2fsck");
    let out = Command::new(tool).arg("-fn").arg(img).output().map_err(|e| format!("cannot run e2fsck: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("e2fsck -fn finds the disk image not clean ({}):\n{}{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    }
}

/// After a `--to-disk` run: the image must be clean (`e2fsck -fn`) and `/metis-output` must be
/// the output the guest digested, as many bytes as its `metis-file` line says.
fn output_from_disk(img: &Path, serial: &str, res: &mut MetisResult) -> Result<(), String> {
    fsck_clean(img)?;
    let data = crate::fs::read_file(img, DISK_OUTPUT)?;
    let said = serial.lines().find_map(|l| l.trim_end().strip_prefix("metis-file ")).ok_or("no metis-file line (the guest did not finish the output file)")?;
    let bytes: Option<u64> = said.split_whitespace().find_map(|w| w.strip_prefix("bytes=")).and_then(|v| v.parse().ok());
    if bytes != Some(data.len() as u64) {
        return Err(format!("the guest wrote {bytes:?} bytes to {DISK_OUTPUT}; the image holds {}", data.len()));
    }
    let lines = data.iter().filter(|&&b| b == b'\n').count() as u64;
    if (fnv(&data), lines, data.len() as u64) != res.digest {
        return Err(format!("{DISK_OUTPUT} on the disk ({} bytes, {lines} lines) does not match the guest's digest ({} bytes, {} lines)", data.len(), res.digest.2, res.digest.1));
    }
    res.output = data;
    Ok(())
}

/// Build the kernel and the `metis` program (once per command).
pub fn prepare_ours() -> Result<(PathBuf, Vec<u8>), String> {
    let kernel = crate::host::env::build_kernel()?;
    let bin = crate::host::user::build_programs()?.join("metis");
    let elf = fs::read(&bin).map_err(|e| format!("metis: cannot read {}: {e}", bin.display()))?;
    crate::host::user::check_program("metis", &elf)?;
    Ok((kernel, elf))
}

/// Debian's kernel and the static `metis-linux` guest program.
pub fn prepare_linux() -> Result<(PathBuf, PathBuf), String> {
    let kernel = crate::guest::linux_sys::guest_kernel()?;
    let program = crate::guest::linux_sys::build_static("bench", "metis-linux")?;
    Ok((kernel, program))
}

fn boot_linux(r: &MetisRun, kernel: &Path, program: &Path) -> Result<crate::host::qemu::RunOutput, String> {
    use crate::host::cpio::CpioEntry;
    let init = fs::read(program).map_err(|e| format!("metis: cannot read {}: {e}", program.display()))?;
    let entries = vec![
        CpioEntry::Dir("dev".into()),
        CpioEntry::CharDev { path: "dev/console".into(), major: 5, minor: 1 },
        CpioEntry::Dir("proc".into()),
        CpioEntry::File { path: "init".into(), mode: 0o755, data: init },
        CpioEntry::File { path: "metis-input".into(), mode: 0o644, data: read_input(r)? },
    ];
    let dir = work_dir();
    fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let initrd = dir.join(format!("linux-{}.cpio", std::process::id()));
    fs::write(&initrd, crate::host::cpio::cpio_newc(&entries)).map_err(|e| format!("cannot write {}: {e}", initrd.display()))?;
    // Linux has one layout (threads in one address space); `--linux-thp off` asks it for 4 KiB
    // pages in the arenas.
    let lr = MetisRun { layout: if r.linux_thp { "threads".into() } else { "nothp".into() }, ..r.clone() };
    let words = guest_words(&lr, "/metis-input").replace(' ', ":");
    // `no_timer_check`: on a starved host (TCG, other QEMUs running) Linux's boot-time check
    // of the IO-APIC timer can miss ticks and panic ("IO-APIC + timer doesn't work!") before
    // the program starts; the check has no effect on a kernel that passed it.
    let cmdline = format!("console=ttyS0 quiet nokaslr panic=-1 tsc=reliable no_timer_check metis={words}");
    let cfg = VmConfig {
        smp: r.smp,
        mem_mib: r.mem_mib,
        extra: [vec!["-kernel".into(), kernel.display().to_string(), "-initrd".into(), initrd.display().to_string(), "-append".into(), cmdline], plugin_args(r, &plugin_out(r))].concat(),
        ..Default::default()
    };
    let mut args = cfg.qemu_args();
    args.extend(["-serial", "stdio", "-monitor", "none"].map(String::from));
    let run = crate::host::qemu::run_qemu(&args, r.timeout);
    let _ = fs::remove_file(&initrd);
    run
}

/// A result line's `key=number` fields (`fnv` in hex).
fn kv(line: &str) -> BTreeMap<String, u64> {
    line.split_whitespace().filter_map(|w| w.split_once('=')).filter_map(|(k, v)| Some((k.to_string(), u64::from_str_radix(v, if k == "fnv" { 16 } else { 10 }).ok()?))).collect()
}

/// Cut the output and the result lines out of a guest's serial text.
pub fn parse_serial(serial: &str, print: bool) -> Result<MetisResult, String> {
    let text = serial.replace("\r\n", "\n");
    if let Some(l) = text.lines().find(|l| l.starts_with("metis-error")) {
        return Err(format!("guest: {}", l.trim_start_matches("metis-error msg=")));
    }
    let begin = text.find("metis-begin").ok_or("no metis-begin line (did the program start?)")?;
    let body_start = begin + text[begin..].find('\n').ok_or("truncated metis-begin line")? + 1;
    let end_rel = if text[body_start..].starts_with("metis-end\n") { Some(0) } else { text[body_start..].find("\nmetis-end\n").map(|i| i + 1) };
    let end = body_start + end_rel.ok_or("no metis-end line (the guest stopped during the output?)")?;
    let mut res = MetisResult { output: if print { text.as_bytes()[body_start..end].to_vec() } else { Vec::new() }, ..Default::default() };
    let after = &text[end..];
    let d = after.lines().find(|l| l.starts_with("metis-digest")).ok_or("no metis-digest line")?;
    let d = kv(d);
    res.digest = (d.get("fnv").copied().unwrap_or(0), d.get("lines").copied().unwrap_or(0), d.get("bytes").copied().unwrap_or(0));
    res.phases = kv(after.lines().find(|l| l.starts_with("metis-phases")).ok_or("no metis-phases line")?);
    if let Some(c) = after.lines().find(|l| l.starts_with("metis-calib")) {
        let c = kv(c);
        res.calib = Some((c.get("ops").copied().unwrap_or(0), c.get("ns").copied().unwrap_or(0), c.get("workers").copied().unwrap_or(0)));
    }
    res.kstats = after.lines().find_map(|l| l.strip_prefix("metis-kstats ")).map(|l| l.trim().to_string());
    if print {
        let o = &res.output;
        let lines = o.iter().filter(|&&b| b == b'\n').count() as u64;
        if (fnv(o), lines, o.len() as u64) != res.digest {
            return Err(format!(
                "the output read from the serial line ({} bytes, {lines} lines) does not match the guest's digest ({} bytes, {} lines)",
                o.len(),
                res.digest.2,
                res.digest.1
            ));
        }
    }
    Ok(res)
}

/// One run on the system `r.system` says, prepared artifacts given.
pub fn run_once(r: &MetisRun, ours: Option<&(PathBuf, Vec<u8>)>, linux: Option<&(PathBuf, PathBuf)>) -> Result<MetisResult, String> {
    let (run, disk) = match r.system.as_str() {
        "ours" => {
            let (k, elf) = ours.ok_or("ours not prepared")?;
            boot_ours(r, k, elf)?
        }
        _ => {
            let (k, p) = linux.ok_or("linux not prepared")?;
            (boot_linux(r, k, p)?, None)
        }
    };
    let res = finish_run(r, &run, disk.as_deref());
    if let Some(img) = disk {
        match &r.keep_disk {
            Some(keep) => fs::rename(&img, keep).or_else(|_| fs::copy(&img, keep).map(|_| ())).map_err(|e| format!("metis: cannot keep the disk as {}: {e}", keep.display()))?,
            None => {}
        }
        let _ = fs::remove_file(img);
    }
    res
}

fn finish_run(r: &MetisRun, run: &crate::host::qemu::RunOutput, disk: Option<&Path>) -> Result<MetisResult, String> {
    // One log per boot (a failed boot's log must survive the next run).
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    let log = work_dir().join(format!("{}-{}-{}-{}-{}-{stamp}.serial.txt", r.system, r.app, r.smp, r.layout, r.insns.unwrap_or("none")));
    let _ = fs::write(&log, &run.serial);
    if run.timed_out {
        return Err(format!("timed out after {} s (serial in {})", r.timeout.as_secs(), log.display()));
    }
    if run.serial.contains("init: LEAK") {
        return Err(format!("the kernel reports a leak after metis (serial in {})", log.display()));
    }
    let mut res = parse_serial(&run.serial, r.print && !r.to_disk).map_err(|e| format!("{e} (serial in {})", log.display()))?;
    if r.to_disk {
        let img = disk.ok_or("--to-disk without a disk image")?;
        output_from_disk(img, &run.serial, &mut res).map_err(|e| format!("{e} (serial in {})", log.display()))?;
    }
    res.wall_s = run.elapsed.as_secs_f64();
    if r.insns.is_some() && r.plugin.is_some() {
        let out = plugin_out(r);
        let text = fs::read_to_string(&out).map_err(|e| format!("the insncount plugin wrote no report {}: {e}", out.display()))?;
        res.insns = Some(crate::guest::boot::parse_insncount(&text)?);
    }
    Ok(res)
}

/// The expected output of a run, by the host reference.
pub fn expected(r: &MetisRun) -> Result<Vec<u8>, String> {
    let text = if r.app == "wrmem" {
        let mut t = vec![0u8; r.size as usize];
        mapreduce::gen::fill(r.seed, &mut t);
        t
    } else {
        read_input(r)?
    };
    Ok(if r.app == "wc" { reference_wc(&text) } else { reference_wri(&text) })
}

fn ms(p: &BTreeMap<String, u64>, k: &str) -> String {
    p.get(k).map(|us| format!("{:.1}", *us as f64 / 1000.0)).unwrap_or("?".into())
}

/// `cargo xtask metis ...` (the command line: options.rs, [`MetisCommand`]).
pub fn main(cmd: MetisCommand) -> Result<(), crate::host::outcome::Failure> {
    let (app, a) = match cmd {
        // `cargo xtask metis ci`: the check `cargo xtask test` runs, alone.
        MetisCommand::Ci => {
            return crate::host::outcome::work((|| {
                let t = ci_check(&crate::host::env::build_kernel()?)?;
                println!("{} passed, {} failed", t.passed, t.failed);
                if t.failed == 0 {
                    Ok(())
                } else {
                    Err(format!("{} metis check(s) failed", t.failed))
                }
            })())
        }
        MetisCommand::Sweep(s) => {
            return match s.app {
                SweepApp::All => crate::host::outcome::work(sweep::all(&s)),
                app => {
                    let name = match app {
                        SweepApp::Wc => "wc",
                        SweepApp::Wri => "wri",
                        _ => "wrmem",
                    };
                    // The output is not needed here, only its digest (and the guests print less).
                    let base = crate::host::outcome::usage(run_from(name, 2, MetisRunArgs { digest_only: true, ..s.run.clone() }))?;
                    crate::host::outcome::work(sweep::main(&s, base))
                }
            };
        }
        MetisCommand::Wc(a) => ("wc", a),
        MetisCommand::Wri(a) => ("wri", a),
        MetisCommand::Wrmem(a) => ("wrmem", a),
    };
    let (r, out, check) = crate::host::outcome::usage(app_options(app, a))?;
    crate::host::outcome::work(run_app(r, out, check))
}

fn run_app(r: MetisRun, out: Option<PathBuf>, check: bool) -> Result<(), String> {
    let systems: Vec<&str> = if r.system == "both" { vec!["ours", "linux"] } else { vec![r.system.as_str()] };
    let ours = if systems.contains(&"ours") { Some(prepare_ours()?) } else { None };
    let linux = if systems.contains(&"linux") { Some(prepare_linux()?) } else { None };
    let mut done: Vec<(String, MetisResult)> = Vec::new();
    for sys in systems {
        let r = MetisRun { system: sys.into(), ..r.clone() };
        let res = run_once(&r, ours.as_ref(), linux.as_ref())?;
        report(&r, &res, ours.as_ref(), linux.as_ref())?;
        if check {
            check_output(&r, &res)?;
        }
        if let Some(o) = &out {
            if !r.print && !r.to_disk {
                return Err("metis: --out needs the output; drop --digest-only (or add --to-disk)".into());
            }
            if let Some((first, prev)) = done.first() {
                if prev.output != res.output {
                    return Err(format!("metis: the output on {sys} differs from the output on {first}"));
                }
                println!("{sys}: output identical to {first}'s");
            } else {
                fs::write(o, &res.output).map_err(|e| format!("metis: cannot write {}: {e}", o.display()))?;
            }
        }
        done.push((sys.into(), res));
    }
    if let [(_, a), (_, b)] = &done[..] {
        compare(a, b);
    }
    Ok(())
}

/// Calibration-loop steps per ns per core in that boot.
fn calib_rate(res: &MetisResult) -> Option<f64> {
    let (ops, ns, w) = res.calib?;
    (ns > 0 && w > 0).then(|| ops as f64 / ns as f64 / w as f64)
}

/// ours / Linux per phase, raw and divided by each boot's calibration loop (docs/bench.md).
fn compare(ours: &MetisResult, linux: &MetisResult) {
    let t = |r: &MetisResult, k: &str| r.phases.get(k).copied().unwrap_or(0) as f64;
    let (co, cl) = (calib_rate(ours), calib_rate(linux));
    println!("ours / linux      raw time   calibrated (time x the boot's calibration rate)");
    for (name, keys) in [("map", &["map_us"][..]), ("reduce", &["reduce_us"]), ("merge", &["merge_us"]), ("all three", &["map_us", "reduce_us", "merge_us"])] {
        let (o, l) = (keys.iter().map(|k| t(ours, k)).sum::<f64>(), keys.iter().map(|k| t(linux, k)).sum::<f64>());
        let raw = if l > 0.0 { format!("{:.2}", o / l) } else { "-".into() };
        let cal = match (co, cl) {
            (Some(a), Some(b)) if l > 0.0 => format!("{:.2}", o * a / (l * b)),
            _ => "- (no calibration line)".into(),
        };
        println!("{name:<15} {raw:>10}   {cal}");
    }
}

fn report(r: &MetisRun, res: &MetisResult, ours: Option<&(PathBuf, Vec<u8>)>, linux: Option<&(PathBuf, PathBuf)>) -> Result<(), String> {
    let p = &res.phases;
    let g = |k: &str| p.get(k).copied().unwrap_or(0);
    println!(
        "metis {} on {} ({} vCPUs, layout {}): {} input bytes, {} words, {} keys; output {} lines, {} bytes, fnv {:016x}",
        r.app,
        r.system,
        r.smp,
        if r.system == "ours" {
            r.layout.as_str()
        } else if r.linux_thp {
            "threads in one address space, THP default"
        } else {
            "threads in one address space, THP off"
        },
        g("input_bytes"),
        g("words"),
        g("keys"),
        res.digest.1,
        res.digest.2,
        res.digest.0
    );
    println!("phase     time (ms, TCG)   soft faults");
    println!("map       {:>14}   {:>11}", ms(p, "map_us"), g("map_faults"));
    println!(
        "  of which prep {:>9}   {:>11}   (after the last mapper: arenas linked, {} arena pages made present for reduce's output)",
        ms(p, "prep_us"),
        g("prep_faults"),
        g("reduce_prep_pages")
    );
    if r.prep {
        println!("reduce    {:>14}   {:>11}   (new arena pages the reducers wrote: {}, all made present in prep; faults are reads of other workers' data)", ms(p, "reduce_us"), g("reduce_faults"), g("reduce_arena_pages"));
    } else {
        println!("reduce    {:>14}   {:>11}   (prep=0: new arena pages the reducers wrote: {}, fresh, as Corey's Metis; faults beyond them are reads of other workers' data)", ms(p, "reduce_us"), g("reduce_faults"), g("reduce_arena_pages"));
    }
    println!("merge     {:>14}   {:>11}   (new arena pages the merge rounds wrote: {})", ms(p, "merge_us"), g("merge_faults"), g("merge_arena_pages"));
    let sink = if r.to_disk { format!("to {DISK_OUTPUT} on the disk, synced") } else if r.print { "over the serial line".into() } else { "to the digest only".into() };
    println!("(output   {:>14} ms {sink}; boot to power-off {:.1} s)", ms(p, "output_us"), res.wall_s);
    if let Some(k) = &res.kstats {
        println!("kernel counters over the run, all cores: {k}");
    }
    match calib_rate(res) {
        Some(c) => println!("calibration loop in this boot: {:.3} steps/ns per core ({} workers)", c, res.calib.map(|x| x.2).unwrap_or(0)),
        None => println!("calibration loop: none in this boot"),
    }
    if r.plugin.is_some() {
        let so = crate::guest::plugin::build().map_err(|e| format!("metis: --insns: the insncount plugin does not build: {e}"))?.insncount;
        let mib = (g("input_bytes") as f64 / (1 << 20) as f64).max(1.0 / 1024.0);
        println!("phase     kernel insns    user insns   kernel insns/input MiB   (insncount plugin, all vCPUs, one boot per phase)");
        for phase in ["map", "reduce", "merge"] {
            let rr = MetisRun { insns: Some(phase), plugin: Some(so.clone()), print: false, ..r.clone() };
            let (k, u) = run_once(&rr, ours, linux)?.insns.ok_or("no instruction count")?;
            println!("{phase:<9} {k:>12} {u:>13}   {:>22.0}", k as f64 / mib);
        }
    }
    Ok(())
}

fn check_output(r: &MetisRun, res: &MetisResult) -> Result<(), String> {
    let want = expected(r)?;
    if !r.print && !r.to_disk {
        let d = (fnv(&want), want.iter().filter(|&&b| b == b'\n').count() as u64, want.len() as u64);
        if d != res.digest {
            return Err(format!("metis: CHECK FAILED: digest {:?} differs from the host reference's {d:?}", res.digest));
        }
        println!("check: digest identical to the host reference's ({} bytes)", want.len());
        return Ok(());
    }
    if want != res.output {
        return Err(format!("metis: CHECK FAILED: the output differs from the host reference ({} vs {} bytes)", res.output.len(), want.len()));
    }
    let from = if r.to_disk { format!(" (read back from {DISK_OUTPUT} on the disk image, which e2fsck -fn finds clean)") } else { String::new() };
    println!("check: identical to the host reference ({} bytes){from}", want.len());
    if let (Some(f), "wc") = (&r.input, r.app.as_str()) {
        match pipeline_wc(f) {
            Ok(p) if p == res.output => println!("check: identical to `tr -cs 'A-Za-z' '\\n' | tr 'A-Z' 'a-z' | grep -v '^$' | LC_ALL=C sort | uniq -c`"),
            Ok(_) => return Err("metis: CHECK FAILED: the output differs from the tr|sort|uniq pipeline".into()),
            Err(e) => println!("check: pipeline not run: {e}"),
        }
    }
    Ok(())
}

/// The reduce phase's soft faults on ours (Corey's claim, and a target in docs/metis.md):
/// with per-core (or one shared) address ranges, 0: the reducers read every worker's arena
/// through page tables map filled, and their own output pages were made present before the
/// phase (`prep`); the reduce must still have written new pages (else the check proves
/// nothing), all of them prepared. With private ranges every reader takes faults on the
/// others' data.
pub fn reduce_faults_as_the_layout_says(layout: &str, p: &BTreeMap<String, u64>) -> Result<(), String> {
    let g = |k: &str| p.get(k).copied().ok_or(format!("no {k} on the metis-phases line"));
    let (faults, new_pages, prepared, beyond) = (g("reduce_faults")?, g("reduce_arena_pages")?, g("reduce_prep_pages")?, g("reduce_beyond_prep")?);
    if new_pages == 0 || new_pages > prepared || beyond != 0 {
        return Err(format!("reduce wrote {new_pages} new arena pages, {prepared} were prepared, {beyond} bytes beyond them"));
    }
    match layout {
        "per-core" | "shared" if faults != 0 => Err(format!("{faults} soft faults in reduce with {layout} ranges (want 0)")),
        "private" if faults == 0 => Err("no soft fault in reduce with private ranges: the other workers' arenas were read through page tables already filled".into()),
        _ => Ok(()),
    }
}

/// With `prep=0` (Corey's reduce) and a per-core or shared layout: nothing was prepared, and
/// reduce's soft faults are its own fresh output pages only, so there are some and at most
/// as many as the new arena pages it wrote (result arrays are sized for every key, so their
/// tails may stay untouched). A `prep=0` that still prepared gives 0 faults; a reduce that
/// faulted on the other workers' data gives more than its new pages.
pub fn unprepared_reduce_faults_on_its_own_pages(p: &BTreeMap<String, u64>) -> Result<(), String> {
    let g = |k: &str| p.get(k).copied().ok_or(format!("no {k} on the metis-phases line"));
    let (faults, new_pages, prepared) = (g("reduce_faults")?, g("reduce_arena_pages")?, g("reduce_prep_pages")?);
    if prepared != 0 {
        return Err(format!("prep=0 prepared {prepared} pages"));
    }
    if faults == 0 || faults > new_pages {
        return Err(format!("prep=0: {faults} soft faults in reduce for {new_pages} new arena pages (want 1..={new_pages})"));
    }
    Ok(())
}

/// For `cargo xtask test`: on ours at 2 vCPUs, `wc` (per-core layout) and `wri` (private)
/// on a generated text with capitals, punctuation, a word across the split point and binary
/// bytes must equal the host references byte for byte, and `wrmem` (shared layout) must
/// give the digest of the reference over the same generated text. Each boot is checked for
/// leaks, and its reduce-phase soft faults against the layout
/// ([`reduce_faults_as_the_layout_says`]: 0 for per-core and shared). Catches: a word split
/// at a boundary counted twice or lost, a partition reduced by no one, offsets out of order,
/// an arena of the private layout not mapped at reduce, reduce's output pages not made
/// present before it.
pub fn ci_check(kernel: &Path) -> Result<crate::host::outcome::TestTally, String> {
    println!("== metis (MapReduce) against the host reference");
    let mut t = crate::host::outcome::TestTally::default();
    let bin = crate::host::user::build_programs()?.join("metis");
    let elf = fs::read(&bin).map_err(|e| format!("metis: cannot read {}: {e}", bin.display()))?;
    let ours = (kernel.to_path_buf(), elf);
    let mut text = vec![0u8; 96 << 10];
    mapreduce::gen::fill(5, &mut text);
    text.extend_from_slice(b"\x00\xff\xfe Binary\x01BYTES caf\xc3\xa9 ");
    text.extend(std::iter::repeat_n(b'z', 5000));
    let dir = work_dir();
    fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let input = dir.join("ci-input.txt");
    fs::write(&input, &text).map_err(|e| e.to_string())?;
    // The last wc reads its input through the file system from an ext2 disk image and writes
    // its output to a file of the same image (checked by e2fsck -fn, read back on the host).
    // The fifth is Corey's reduce (`prep=0`): its fresh output pages fault in reduce, in the
    // worker's own per-core range.
    let runs = [("wc", "per-core", false, true), ("wri", "private", false, true), ("wrmem", "shared", false, true), ("wc", "shared", true, true), ("wri", "per-core", false, false)];
    for (app, layout, disk, prep) in runs {
        let r = MetisRun {
            prep,
            from_disk: disk,
            to_disk: disk,
            app: app.into(),
            input: (app != "wrmem").then(|| input.clone()),
            layout: layout.into(),
            size: 200 << 10,
            seed: 3,
            print: app != "wrmem",
            mem_mib: 512,
            timeout: Duration::from_secs(180),
            ..Default::default()
        };
        let got = run_once(&r, Some(&ours), None);
        let want = expected(&r)?;
        let verdict = match got {
            Err(e) => Err(e),
            Ok(res) if (r.print || r.to_disk) && res.output != want => Err(format!("output differs from the reference ({} vs {} bytes)", res.output.len(), want.len())),
            Ok(res) if !r.print && !r.to_disk && res.digest != (fnv(&want), want.iter().filter(|&&b| b == b'\n').count() as u64, want.len() as u64) => {
                Err(format!("digest {:?} differs from the reference's", res.digest))
            }
            Ok(res) if !prep => unprepared_reduce_faults_on_its_own_pages(&res.phases).map(|()| res),
            Ok(res) => reduce_faults_as_the_layout_says(layout, &res.phases).map(|()| res),
        };
        match verdict {
            Ok(res) => {
                let src = if disk { ", input from the disk, output to /metis-output on it (e2fsck -fn clean)" } else if !prep { ", prep=0" } else { "" };
                println!("   metis {app} ({layout}{src}): identical to the reference, {} lines; reduce faults {}", res.digest.1, res.phases.get("reduce_faults").copied().unwrap_or(0));
                t.passed += 1;
            }
            Err(e) => {
                println!("   FAILED: metis {app} ({layout}): {e}");
                t.failed += 1;
            }
        }
    }
    // `--tlb-grow` on ours: two 4 MiB `wrmem` boots (per-core), without and with the knob;
    // the knob must add one local TLB flush per call (each mapper calls once per
    // `TLB_GROW_WORDS` words of its split), as the kernel's counters count them.
    let grow = |on: bool| -> Result<(u64, u64, String), String> {
        let r = MetisRun { app: "wrmem".into(), layout: "per-core".into(), size: 4 << 20, seed: 3, print: false, mem_mib: 512, timeout: Duration::from_secs(180), tlb_grow: on, ..Default::default() };
        let res = run_once(&r, Some(&ours), None)?;
        let k = res.kstats.clone().ok_or("no metis-kstats line")?;
        let flushes = k.split_whitespace().find_map(|w| w.strip_prefix("tlb_flushes_local=")).and_then(|v| v.parse().ok()).ok_or("no tlb_flushes_local in metis-kstats")?;
        Ok((flushes, res.phases.get("words").copied().unwrap_or(0), fnv_hex(res.digest.0)))
    };
    let verdict = grow(false).and_then(|off| grow(true).map(|on| (off, on))).and_then(|((f0, w0, d0), (f1, w1, d1))| {
        let calls_max = w1 / mapreduce::TLB_GROW_WORDS;
        let calls_min = calls_max.saturating_sub(1);
        if d0 != d1 || w0 != w1 {
            Err(format!("--tlb-grow changed the output (digest {d0} vs {d1}, words {w0} vs {w1})"))
        } else if calls_max == 0 || f1 < f0 + calls_min || f1 > f0 + calls_max {
            Err(format!("--tlb-grow: {f0} local flushes without, {f1} with; {w1} words should add {calls_min}..={calls_max}"))
        } else {
            Ok(f1 - f0)
        }
    });
    match verdict {
        Ok(d) => {
            println!("   metis wrmem (per-core, --tlb-grow): same output, {d} more local TLB flushes, one per call");
            t.passed += 1;
        }
        Err(e) => {
            println!("   FAILED: metis wrmem (per-core, --tlb-grow): {e}");
            t.failed += 1;
        }
    }
    Ok(t)
}

/// For `cargo xtask test`: Linux's answers checked too. The same generated text as
/// [`ci_check`] (smaller) through `metis-linux` on Debian's kernel at 2 vCPUs: `wc` and `wri`
/// byte for byte against the host reference (and `wc` against the `tr | sort | uniq` pipeline
/// too), `wrmem` by the digest of the reference over the text it generates. Catches: the
/// Linux baseline giving a different answer from ours (a comparison of two programs that
/// do not do the same work), its output lost or cut on the serial line, its guest crashing.
pub fn ci_check_linux() -> Result<crate::host::outcome::TestTally, String> {
    println!("== metis on the Linux guest against the host reference");
    let mut t = crate::host::outcome::TestTally::default();
    let linux = prepare_linux()?;
    let mut text = vec![0u8; 48 << 10];
    mapreduce::gen::fill(6, &mut text);
    text.extend_from_slice(b"\x00\xff Binary\x01BYTES caf\xc3\xa9 ");
    text.extend(std::iter::repeat_n(b'z', 3000));
    let dir = work_dir();
    fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let input = dir.join("ci-input-linux.txt");
    fs::write(&input, &text).map_err(|e| e.to_string())?;
    for app in ["wc", "wri", "wrmem"] {
        let r = MetisRun {
            system: "linux".into(),
            app: app.into(),
            input: (app != "wrmem").then(|| input.clone()),
            size: 128 << 10,
            seed: 4,
            print: app != "wrmem",
            mem_mib: 512,
            timeout: Duration::from_secs(180),
            ..Default::default()
        };
        let verdict = run_once(&r, None, Some(&linux)).and_then(|res| check_output(&r, &res).map(|()| res));
        match verdict {
            Ok(res) => {
                println!("   metis {app} on Linux: identical to the reference, {} lines ({} bytes)", res.digest.1, res.digest.2);
                t.passed += 1;
            }
            Err(e) => {
                println!("   FAILED: metis {app} on Linux: {e}");
                t.failed += 1;
            }
        }
    }
    Ok(t)
}

fn fnv_hex(x: u64) -> String {
    format!("{x:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_agrees_with_the_shell_pipeline() {
        let mut text = b"The the THE cat's cat\n\x00\xffdog-Dog 1x2 zebra\xc3\xa9 ".to_vec();
        let mut g = vec![0u8; 20000];
        mapreduce::gen::fill(9, &mut g);
        text.extend(g);
        let f = std::env::temp_dir().join(format!("metis-pipe-{}.txt", std::process::id()));
        fs::write(&f, &text).unwrap();
        let pipe = pipeline_wc(&f);
        let _ = fs::remove_file(&f);
        // The pipeline's tools (coreutils, grep, gawk or mawk, bash) are on every machine the
        // project runs on: a failed or empty pipeline is a failure, not a skip.
        let p = pipe.unwrap_or_else(|e| panic!("the reference pipeline: {e}"));
        assert_eq!(String::from_utf8_lossy(&reference_wc(&text)), String::from_utf8_lossy(&p));
    }

    /// Catches: a pipeline whose stage failed, or that printed nothing, taken as an answer.
    #[test]
    fn a_failed_or_empty_pipeline_is_an_error() {
        let d = std::env::temp_dir().join(format!("metis-pipe-err-{}", std::process::id()));
        fs::create_dir_all(&d).unwrap();
        // No word at all: grep selects nothing and exits 1.
        let empty = d.join("nowords.txt");
        fs::write(&empty, b"123 456 !!\n").unwrap();
        assert!(pipeline_wc(&empty).is_err());
        // A file that is not there: the first stage fails.
        assert!(pipeline_wc(&d.join("missing.txt")).unwrap_err().contains("failed"));
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn reference_wri_offsets() {
        assert_eq!(reference_wri(b"b A b\n"), b"a\t2\nb\t0,4\n");
        assert_eq!(reference_wri(b""), b"");
        assert_eq!(reference_wc(b"xX x1x"), b"x\t2\nxx\t1\n");
    }

    #[test]
    fn serial_output_is_cut_out_and_checked() {
        let out = b"a\t2\nb\t1\n";
        let serial = format!(
            "[0] boot\r\nmetis-begin app=wc\r\na\t2\r\nb\t1\r\nmetis-end\r\nmetis-digest fnv={:016x} lines=2 bytes=8\r\nmetis-phases map_us=5 reduce_faults=0\r\nmetis-done\r\n",
            fnv(out)
        );
        let r = parse_serial(&serial, true).unwrap();
        assert_eq!(r.output, out);
        assert_eq!(r.phases["map_us"], 5);
        // A lost byte is caught by the digest.
        let bad = serial.replace("b\t1", "b\t");
        assert!(parse_serial(&bad, true).is_err());
        // Empty output.
        let empty = format!("metis-begin x\nmetis-end\nmetis-digest fnv={:016x} lines=0 bytes=0\nmetis-phases keys=0\n", fnv(b""));
        assert_eq!(parse_serial(&empty, true).unwrap().output, b"");
        assert!(parse_serial("metis-error msg=NoMemory: x\nmetis-done\n", true).unwrap_err().contains("NoMemory"));
    }

    #[test]
    fn reduce_faults_are_judged_by_layout() {
        let line = |faults: u64, new: u64, prep: u64, beyond: u64| {
            kv(&format!("metis-phases reduce_faults={faults} reduce_arena_pages={new} reduce_prep_pages={prep} reduce_beyond_prep={beyond}"))
        };
        assert!(reduce_faults_as_the_layout_says("per-core", &line(0, 10, 12, 0)).is_ok());
        assert!(reduce_faults_as_the_layout_says("shared", &line(0, 10, 10, 0)).is_ok());
        assert!(reduce_faults_as_the_layout_says("per-core", &line(1, 10, 12, 0)).is_err(), "one fault in reduce");
        assert!(reduce_faults_as_the_layout_says("per-core", &line(0, 0, 0, 0)).is_err(), "a reduce that wrote nothing proves nothing");
        assert!(reduce_faults_as_the_layout_says("per-core", &line(0, 10, 9, 0)).is_err(), "pages written beyond the prepared ones");
        assert!(reduce_faults_as_the_layout_says("per-core", &line(0, 10, 12, 8)).is_err());
        assert!(reduce_faults_as_the_layout_says("private", &line(300, 10, 12, 0)).is_ok());
        assert!(reduce_faults_as_the_layout_says("private", &line(0, 10, 12, 0)).is_err(), "private ranges must fault on reading");
        assert!(reduce_faults_as_the_layout_says("per-core", &kv("metis-phases map_us=1")).is_err(), "fields missing");
    }

    #[test]
    fn bad_arguments_are_refused() {
        // The whole path of `cargo xtask metis ...`: clap (options.rs), then the checks here.
        let a = |v: &[&str]| -> Result<(MetisRun, Option<PathBuf>, bool), String> {
            match crate::host::args::parse_args::<crate::metis::options::MetisArgs>("metis", &v.iter().map(|s| s.to_string()).collect::<Vec<_>>())? {
                crate::metis::options::MetisArgs { command: MetisCommand::Wc(x) } => app_options("wc", x),
                crate::metis::options::MetisArgs { command: MetisCommand::Wri(x) } => app_options("wri", x),
                crate::metis::options::MetisArgs { command: MetisCommand::Wrmem(x) } => app_options("wrmem", x),
                other => panic!("{other:?}"),
            }
        };
        assert!(a(&["wx"]).unwrap_err().contains("wx"));
        assert!(a(&["wc", "--input", "/nonexistent/text"]).unwrap_err().contains("--input"));
        assert!(a(&["wrmem", "--smp", "0"]).unwrap_err().contains("--smp"));
        assert!(a(&["wrmem", "--smp", "x"]).unwrap_err().contains("--smp"));
        assert!(a(&["wrmem", "--size", "lots"]).unwrap_err().contains("--size"));
        assert!(a(&["wrmem", "--linux-thp", "maybe"]).unwrap_err().contains("--linux-thp"));
        assert!(a(&["wrmem", "--system", "linux", "--to-disk"]).unwrap_err().contains("--to-disk"));
        assert!(a(&["wc"]).is_err(), "wc needs --input");
        assert!(a(&["wrmem", "--input", "x"]).is_err());
        assert!(a(&["wrmem", "--layout", "diagonal"]).unwrap_err().contains("--layout"));
        assert!(a(&["wrmem", "--out", "/nonexistent-dir/x"]).is_err(), "an unwritable --out fails before booting");
        assert!(a(&["wrmem", "--size", "4m", "--smp", "4"]).is_ok());
    }
}
