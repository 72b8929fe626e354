//! The measurement plugins as other code uses them: built from tools/qemu-plugins with the
//! system compiler (`build`, and the measurement guest program `build_guest`), the exact mode's
//! QEMU options and plugin arguments, and the plugins' `kind key=value ...` report records
//! (docs/plugins.md).

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where built plugins, the guest program and raw plugin outputs go.
pub fn artifact_dir() -> PathBuf {
    crate::host::env::workspace_root().join("target").join("qemu-plugins")
}

pub(crate) fn src_dir() -> PathBuf {
    crate::host::env::workspace_root().join("tools").join("qemu-plugins")
}

pub(crate) fn cc(args: &[String], what: &str) -> Result<(), String> {
    let out = Command::new("cc").args(args).output().map_err(|e| format!("cannot run cc: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("building {what} failed:\n{err}"));
    }
    Ok(())
}

pub(crate) fn ensure_compiler() -> Result<(), String> {
    crate::host::env::ensure_tool("cc", &["gcc"])?;
    // static glibc for the guest's /init
    crate::host::env::ensure_packages(&["libc6-dev"])
}

pub(crate) fn s(p: &Path) -> String {
    p.display().to_string()
}

/// Build the static guest program (/init of the Linux measurement guest).
pub fn build_guest() -> Result<PathBuf, String> {
    ensure_compiler()?;
    let dir = artifact_dir();
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let out = dir.join("guest-init");
    let src = src_dir().join("guest").join("workload.c");
    // tcpserv.c: the TCP accept service (wl=tcpserv), the Linux side of Corey's TCP service.
    let net = src_dir().join("guest").join("tcpserv.c");
    let args: Vec<String> = ["-static", "-O2", "-Wall", "-pthread", "-o"].iter().map(|x| x.to_string()).chain([s(&out), s(&src), s(&net)]).collect();
    cc(&args, "guest/workload.c guest/tcpserv.c")?;
    Ok(out)
}

/// Paths of the built plugins and the native simulator test program.
pub struct Built {
    pub insncount: PathBuf,
    pub cachesim: PathBuf,
    pub sharing: PathBuf,
    pub test_bin: PathBuf,
}

impl Built {
    pub(crate) fn plugin(&self, name: &str) -> &Path {
        match name {
            "insncount" => &self.insncount,
            "cachesim" => &self.cachesim,
            _ => &self.sharing,
        }
    }
}

/// Build the three plugins and the native test program of the simulator core. The simulator
/// is one C file compiled into both, so the tests check the code that produces the numbers.
pub fn build() -> Result<Built, String> {
    ensure_compiler()?;
    let dir = artifact_dir();
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let src = src_dir();
    // -flto: lets the simulator core inline into the plugin callbacks (two files, one hot path).
    let common = ["-std=gnu11", "-O2", "-flto", "-Wall", "-Wextra", "-Werror"];
    let build_one = |out: &str, srcs: &[&str], shared: bool| -> Result<PathBuf, String> {
        let o = dir.join(out);
        let mut args: Vec<String> = common.iter().map(|x| x.to_string()).collect();
        if shared {
            args.extend(["-fPIC", "-shared", "-fvisibility=hidden"].iter().map(|x| x.to_string()));
        }
        args.push("-o".into());
        args.push(s(&o));
        args.extend(srcs.iter().map(|f| s(&src.join(f))));
        cc(&args, out)?;
        Ok(o)
    };
    let built = Built {
        insncount: build_one("insncount.so", &["insncount.c"], true)?,
        cachesim: build_one("cachesim.so", &["cachesim.c", "cachesim_core.c", "cachesim_mc.c"], true)?,
        sharing: build_one("sharing.so", &["sharing.c"], true)?,
        test_bin: build_one("test_cachesim", &["test_cachesim.c", "cachesim_core.c", "cachesim_mc.c"], false)?,
    };
    build_guest()?;
    Ok(built)
}

// ---------------------------------------------------------------------------------------------
// Plugin reports: one record per line, `kind key=value key=value ...`, closed by `end`.

#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub kind: String,
    pub fields: Vec<(String, String)>,
}

impl Record {
    pub fn get(&self, k: &str) -> Option<&str> {
        self.fields.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str())
    }
    pub fn u(&self, k: &str) -> u64 {
        self.get(k).and_then(|v| if let Some(h) = v.strip_prefix("0x") { u64::from_str_radix(h, 16).ok() } else { v.parse().ok() }).unwrap_or(0)
    }
    pub fn f(&self, k: &str) -> f64 {
        self.get(k).and_then(|v| v.parse().ok()).unwrap_or(0.0)
    }
}

pub fn parse_records(text: &str) -> Vec<Record> {
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let kind = words.next()?.to_string();
            let fields = words.filter_map(|w| w.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect();
            Some(Record { kind, fields })
        })
        .collect()
}

/// The exact mode's guest time: `-icount shift=3` (one instruction = 8 ns of guest time, as the
/// 1-vCPU cachesim runs have always used), so timer interrupts land at the same
/// instruction from run to run.
pub const EXACT_ICOUNT_SHIFT: u32 = 3;
/// Instructions a vCPU runs before single-threaded TCG switches to the next one inside the
/// measured region (the plugins' `quantum=`, tools/qemu-plugins/quantum.h).
pub const EXACT_QUANTUM: u64 = 250;
/// ... and outside it, where the switch only has to keep every vCPU running (Linux's SMP boot
/// livelocks under icount without it) and a finer one would only cost time.
pub const EXACT_QUANTUM_OUTSIDE: u64 = 20_000;

/// The QEMU options of the exact mode (docs/plugins.md, "Exact mode"): every input the guest
/// sees is a function of its instruction count. `-icount ...,sleep=off`: guest time is
/// instructions, and an idle guest jumps to its next timer instead of waiting host time;
/// `align=off`: never slowed to host time. `-seed`: RDRAND and QEMU's other guest-visible
/// randomness from a fixed seed (Linux seeds its RNG, stack canaries and mmap layout from it).
/// `-rtc base=...,clock=vm`: the CMOS clock starts at a fixed date and follows guest time
/// (Linux reads it at boot). Two Linux boots without the last two differed in lines touched
/// (788 and 805 with the seed alone; 900 and 803 with neither). The vCPU interleaving comes
/// from the plugin's quantum ([`quantum_plugin_args`]), not from these options.
pub fn exact_qemu_args() -> Vec<String> {
    ["-icount", &format!("shift={EXACT_ICOUNT_SHIFT},align=off,sleep=off"), "-seed", "1", "-rtc", "base=2024-01-01T00:00:00,clock=vm"]
        .iter()
        .map(|x| x.to_string())
        .collect()
}

/// The plugin arguments that make single-threaded TCG switch vCPUs every
/// [`EXACT_QUANTUM`] instructions (none for one vCPU: there is nothing to interleave).
pub fn quantum_plugin_args(smp: u32) -> Vec<String> {
    if smp > 1 {
        vec![format!("quantum={EXACT_QUANTUM}"), format!("quantum_outside={EXACT_QUANTUM_OUTSIDE}")]
    } else {
        Vec::new()
    }
}

/// A JSON string literal for `v` (also the commutativity checker's writer).
pub(crate) fn jstr(v: &str) -> String {
    let mut o = String::from("\"");
    for c in v.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_parse() {
        let r = parse_records("place model=x party=os l1_data_miss=12\nline pa=0x40 mode=k\nend\n");
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].kind, "place");
        assert_eq!(r[0].u("l1_data_miss"), 12);
        assert_eq!(r[1].u("pa"), 0x40);
        assert_eq!(r[1].u("missing"), 0);
    }

}
