//! The Linux programs the conformance suite runs: each `linux/progs/NAME.c` is built with
//! `musl-gcc -static -O2` into `target/linux-progs/NAME` (rebuilt when the source is newer),
//! and Debian's `busybox-static`, unmodified, is taken from its `.deb` (downloaded with
//! `apt-get download` into `target/linux-cache/`, unpacked with `dpkg-deb -x`; nothing is
//! installed on the host). busybox 1.35 is also built from Debian's source package with
//! `musl-gcc -static` (`busybox_musl`: `apt-get source` with a `deb-src` list of the tool's own,
//! a `.config` the tool writes), so that both C libraries run. Debian's `musl-tools` provides
//! `musl-gcc`, `dpkg-dev` `dpkg-source`; each is installed with apt if missing (said so). The
//! Linux guest's init (linux/init/exec-init.c) is built the same way.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::host::env::workspace_root;

/// Where the C sources are.
pub fn source_dir() -> PathBuf {
    workspace_root().join("linux").join("progs")
}

/// Where the built programs go.
pub fn out_dir() -> PathBuf {
    workspace_root().join("target").join("linux-progs")
}

/// `musl-gcc`, installing Debian's `musl-tools` first if it is not there.
pub fn musl_gcc() -> Result<PathBuf, String> {
    let found = |p: &str| Path::new(p).exists().then(|| PathBuf::from(p));
    if let Some(p) = found("/usr/bin/musl-gcc") {
        return Ok(p);
    }
    eprintln!("xtask: musl-gcc is missing; installing Debian's musl-tools (apt-get install -y musl-tools)");
    let ok = Command::new("apt-get").args(["install", "-y", "-q", "musl-tools"]).status().map(|s| s.success()).unwrap_or(false);
    if !ok {
        // The package lists may be missing on a fresh machine.
        let _ = Command::new("apt-get").args(["update", "-q"]).status();
        let again = Command::new("apt-get").args(["install", "-y", "-q", "musl-tools"]).status().map_err(|e| format!("apt-get: {e}"))?;
        if !again.success() {
            return Err("could not install musl-tools (apt-get install musl-tools failed)".into());
        }
    }
    found("/usr/bin/musl-gcc").ok_or_else(|| "musl-tools installed but /usr/bin/musl-gcc is missing".into())
}

fn newer(src: &Path, out: &Path) -> bool {
    let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (m(src), m(out)) {
        (Some(s), Some(o)) => s > o,
        _ => true,
    }
}

/// The C programs of linux/progs/ and the extra link arguments each needs.
pub const C_PROGRAMS: &[(&str, &[&str])] = &[
    ("hello", &[]),
    ("pthreads", &["-lpthread"]),
    ("signals", &[]),
    ("sigself", &[]),
    ("forkstorm", &[]),
    ("mmapfile", &[]),
    ("pipe2proc", &[]),
    ("fscalls", &[]),
    ("procs", &[]),
    ("fpswitch", &[]),
    ("linuxfuzz", &[]),
    ("badexec", &[]),
    // The same-binary cost comparison's programs (`cargo xtask exec --insncount`).
    ("abi_getpid", &[]),
    ("abi_read", &[]),
    ("abi_fork", &[]),
    ("pipecost", &[]),
    ("threads", &["-lpthread"]),
    ("threads_bench", &["-lpthread"]),
    ("procrobust", &["-lpthread"]),
    ("sigthreads", &["-lpthread"]),
    ("sockcalls", &[]),
    ("unixcost", &[]),
];

/// The Linux guest's `/init` for `exec --system linux`, built into `target/linux-exec/`.
pub fn build_init() -> Result<PathBuf, String> {
    let src = workspace_root().join("linux").join("init").join("exec-init.c");
    let out = workspace_root().join("target").join("linux-exec").join("exec-init");
    compile(&src, &out, &[])
}

/// Build `linux/progs/NAME.c` (plus `-lpthread` etc. from `extra`) and return the binary.
pub fn build(name: &str, extra: &[&str]) -> Result<PathBuf, String> {
    let src = source_dir().join(format!("{name}.c"));
    if !src.exists() {
        return Err(format!("no such test program: {}", src.display()));
    }
    compile(&src, &out_dir().join(name), extra)
}

fn compile(src: &Path, out: &Path, extra: &[&str]) -> Result<PathBuf, String> {
    if !newer(src, out) {
        return Ok(out.to_path_buf());
    }
    let dir = out.parent().expect("an output path has a parent");
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let cc = musl_gcc()?;
    let st = Command::new(&cc)
        .args(["-static", "-O2", "-Wall", "-o"])
        .arg(out)
        .arg(src)
        .args(extra)
        .status()
        .map_err(|e| format!("{}: {e}", cc.display()))?;
    if !st.success() {
        return Err(format!("musl-gcc failed on {}", src.display()));
    }
    Ok(out.to_path_buf())
}

/// Debian's `busybox-static` binary, unmodified: the `.deb` the archive serves is downloaded
/// once (`apt-get download busybox-static`) into `target/linux-cache/`, unpacked there with
/// `dpkg-deb -x`, and its `/bin/busybox` copied to `target/linux-progs/busybox`.
pub fn busybox_static() -> Result<PathBuf, String> {
    let out = out_dir().join("busybox");
    if out.exists() {
        return Ok(out);
    }
    let cache = crate::guest::linux::cache_dir();
    std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    let find_deb = || -> Option<PathBuf> {
        std::fs::read_dir(&cache).ok()?.flatten().map(|e| e.path()).find(|p| {
            let n = p.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
            n.starts_with("busybox-static_") && n.ends_with(".deb")
        })
    };
    let deb = match find_deb() {
        Some(d) => d,
        None => {
            eprintln!("xtask: downloading Debian's busybox-static into {} (apt-get download)", cache.display());
            let ok = |st: std::io::Result<std::process::ExitStatus>| st.map(|s| s.success()).unwrap_or(false);
            if !ok(Command::new("apt-get").current_dir(&cache).args(["download", "-q", "busybox-static"]).status()) {
                let _ = Command::new("apt-get").args(["update", "-q"]).status();
                if !ok(Command::new("apt-get").current_dir(&cache).args(["download", "-q", "busybox-static"]).status()) {
                    return Err("apt-get download busybox-static failed (no Debian archive reachable?)".into());
                }
            }
            find_deb().ok_or("apt-get download busybox-static left no .deb")?
        }
    };
    let unpacked = cache.join("busybox-static");
    let st = Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked).status().map_err(|e| format!("dpkg-deb: {e}"))?;
    if !st.success() {
        return Err(format!("dpkg-deb -x {} failed", deb.display()));
    }
    let bin = unpacked.join("bin").join("busybox");
    let data = std::fs::read(&bin).map_err(|e| format!("{} holds no bin/busybox: {e}", deb.display()))?;
    super::inspect_elf(&data).map_err(|e| format!("{}: {e}", bin.display()))?;
    std::fs::create_dir_all(out_dir()).map_err(|e| format!("{}: {e}", out_dir().display()))?;
    std::fs::copy(&bin, &out).map_err(|e| format!("cannot copy {} to {}: {e}", bin.display(), out.display()))?;
    Ok(out)
}

/// Every program: both busyboxes and the C programs (`cargo xtask linux-progs`), as (name, path).
pub fn build_all() -> Result<Vec<(String, PathBuf)>, String> {
    let mut v = vec![("busybox".to_string(), busybox_static()?), ("busybox-musl".to_string(), busybox_musl()?)];
    for &(name, extra) in C_PROGRAMS {
        v.push((name.to_string(), build(name, extra)?));
    }
    Ok(v)
}

/// Run `cmd` to its end, killed after `limit` (an error then): every tool step that could hang
/// (a download, `make`) is bounded.
fn run_bounded(mut cmd: Command, what: &str, limit: std::time::Duration) -> Result<(), String> {
    let mut child = cmd.spawn().map_err(|e| format!("{what}: {e}"))?;
    let start = std::time::Instant::now();
    loop {
        match child.try_wait().map_err(|e| format!("{what}: {e}"))? {
            Some(st) if st.success() => return Ok(()),
            Some(st) => return Err(format!("{what} failed ({st})")),
            None if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what} did not finish in {} s (killed)", limit.as_secs()));
            }
            None => std::thread::sleep(std::time::Duration::from_millis(200)),
        }
    }
}

/// The busybox version both binaries are: Debian bookworm's source package.
pub const BUSYBOX_SOURCE_VERSION: &str = "1:1.35.0-4+deb12u1";

/// Where the tool keeps busybox's source package: its own apt source list, package lists and
/// the unpacked tree (`busybox-1.35.0/`).
pub fn busybox_source_cache() -> PathBuf {
    crate::guest::linux::cache_dir().join("busybox-source")
}

/// The apt options that make `apt-get` use the tool's own `deb-src` list and package lists
/// under `dir` (the host's /etc/apt is neither read for sources nor changed).
fn own_apt(dir: &Path) -> Vec<String> {
    let s = |p: &Path| p.display().to_string();
    vec![
        "-o".into(),
        format!("Dir::Etc::SourceList={}", s(&dir.join("sources.list"))),
        "-o".into(),
        "Dir::Etc::SourceParts=/nonexistent".into(),
        "-o".into(),
        format!("Dir::State::Lists={}", s(&dir.join("lists"))),
        "-o".into(),
        format!("Dir::Cache={}", s(&dir.join("apt-cache"))),
        "-o".into(),
        "APT::Sandbox::User=root".into(),
        "-q".into(),
    ]
}

/// Install a Debian package the tool needs on the host if `probe` is missing (said so).
fn need_host_tool(probe: &str, package: &str) -> Result<(), String> {
    if Path::new(probe).exists() {
        return Ok(());
    }
    eprintln!("xtask: {probe} is missing; installing Debian's {package} (apt-get install -y {package})");
    let st = Command::new("apt-get").args(["install", "-y", "-q", package]).status().map_err(|e| format!("apt-get: {e}"))?;
    if !st.success() || !Path::new(probe).exists() {
        return Err(format!("could not install {package} (needed for {probe})"));
    }
    Ok(())
}

/// busybox's source tree, unpacked from Debian's source package with Debian's patches applied
/// (`apt-get source busybox=VERSION` with a `deb-src` list of the tool's own, in
/// `target/linux-cache/busybox-source/`; `dpkg-source` from dpkg-dev). Once.
pub fn busybox_source() -> Result<PathBuf, String> {
    let dir = busybox_source_cache();
    let tree = dir.join("busybox-1.35.0");
    if tree.join("testsuite").join("runtest").is_file() && tree.join(".xtask-unpacked").is_file() {
        return Ok(tree);
    }
    need_host_tool("/usr/bin/dpkg-source", "dpkg-dev")?;
    for sub in ["lists/partial", "apt-cache/archives/partial"] {
        std::fs::create_dir_all(dir.join(sub)).map_err(|e| format!("{}: {e}", dir.join(sub).display()))?;
    }
    std::fs::write(
        dir.join("sources.list"),
        "# The tool's own source list (cargo xtask linux-progs): only busybox's source package is fetched with it.\n\
         deb-src http://deb.debian.org/debian bookworm main\n\
         deb-src http://deb.debian.org/debian-security bookworm-security main\n\
         deb-src http://deb.debian.org/debian bookworm-updates main\n",
    )
    .map_err(|e| format!("{}: {e}", dir.display()))?;
    let limit = std::time::Duration::from_secs(300);
    eprintln!("xtask: fetching Debian's busybox source package {BUSYBOX_SOURCE_VERSION} into {} (apt-get source, the tool's own deb-src list)", dir.display());
    let mut update = Command::new("apt-get");
    update.args(own_apt(&dir)).arg("update");
    run_bounded(update, "apt-get update (the tool's deb-src list)", limit)?;
    let _ = std::fs::remove_dir_all(&tree);
    let mut source = Command::new("apt-get");
    source.current_dir(&dir).args(own_apt(&dir)).args(["source", &format!("busybox={BUSYBOX_SOURCE_VERSION}")]);
    run_bounded(source, "apt-get source busybox", limit)?;
    if !tree.join("testsuite").join("runtest").is_file() {
        return Err(format!("apt-get source left no {}", tree.join("testsuite/runtest").display()));
    }
    std::fs::write(tree.join(".xtask-unpacked"), BUSYBOX_SOURCE_VERSION).map_err(|e| format!("{}: {e}", tree.display()))?;
    Ok(tree)
}

/// The applets of the musl build, as busybox's config symbols. Why each group:
/// - the shell and what busybox's `testsuite/runtest` and `testing.sh` run themselves (ash,
///   echo, printf, test, tr, grep, sed, xargs, ln, mkdir, rm, cat, cmp, diff, chmod, which,
///   ...), and the small tools its tests call (sleep, mktemp, yes, stat, env, kill, ...);
/// - what the conformance suite runs (ls, sort, wc, awk, find, tar, gzip, gunzip);
/// - every applet that busybox's testsuite tests and that needs neither root devices, mounts
///   nor a network (mdev, mount, mkfs.minix, makedevs, wget, rx, start-stop-daemon, taskset,
///   pidof, hostname and uptime are left out: they test the machine more than the system
///   calls, or need /proc).
///   Everything else busybox's `defconfig` has is off; the features of the chosen applets keep
///   defconfig's values, so the testsuite's FEATURE checks see busybox's defaults.
pub const MUSL_BUSYBOX_APPLETS: &[&str] = &[
    // shell and runtest's own tools
    // `busybox APPLET` itself (runtest calls "$bindir/busybox"; a symbol the scan counts as an
    // applet's)
    "BUSYBOX",
    "ASH", "ECHO", "PRINTF", "TEST", "TEST1", "TEST2", "TR", "GREP", "EGREP", "FGREP", "SED", "XARGS", "LN", "MKDIR", "RM", "RMDIR",
    "CAT", "CMP", "DIFF", "CHMOD", "WHICH", "TRUE", "FALSE", "PWD", "ENV", "SLEEP", "MKTEMP", "YES", "STAT", "KILL", "SYNC", "MKFIFO",
    "UNAME", "CHOWN", "CHGRP", "TRUNCATE", "TIMEOUT",
    // the conformance suite
    "LS", "SORT", "WC", "AWK", "FIND", "TAR", "GZIP", "GUNZIP", "ZCAT",
    // the applets busybox's testsuite tests
    "AR", "BC", "DC", "BUNZIP2", "BZCAT", "BZIP2", "CAL", "COMM", "CP", "CPIO", "CUT", "DATE", "DD", "DIRNAME", "BASENAME", "DU",
    "EXPAND", "UNEXPAND", "EXPR", "FACTOR", "FOLD", "HEAD", "TAIL", "HEXDUMP", "ID", "MD5SUM", "SHA1SUM", "SHA256SUM", "SHA512SUM",
    "SHA3SUM", "MV", "NL", "OD", "PASTE", "PATCH", "READLINK", "REALPATH", "REV", "SEQ", "STRINGS", "SUM", "TEE", "TOUCH", "UNIQ",
    "UNLZMA", "LZCAT", "UNCOMPRESS", "UNZIP", "UUENCODE", "UUDECODE", "XXD", "CRYPTPW",
];

/// Every applet config symbol of the tree: the `IF_NAME(` of each `//applet:IF_NAME(APPLET...)`
/// line in the sources (an applet's symbol, as opposed to a feature's).
pub fn applet_symbols(tree: &Path) -> Result<std::collections::BTreeSet<String>, String> {
    let mut syms = std::collections::BTreeSet::new();
    let mut stack = vec![tree.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))?.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "c") {
                let text = std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                for line in String::from_utf8_lossy(&text).lines() {
                    let Some(rest) = line.trim_start().strip_prefix("//applet:IF_") else { continue };
                    let Some(open) = rest.find('(') else { continue };
                    // `IF_X(APPLET(...))`, or nested: `IF_DEPMOD(IF_NOT_MODPROBE_SMALL(APPLET(...)))`.
                    if rest[open + 1..].contains("APPLET") {
                        syms.insert(rest[..open].to_string());
                    }
                }
            }
        }
    }
    Ok(syms)
}

/// The musl build's `.config`: busybox's `defconfig` (`defconfig`, the text) with every applet
/// symbol not in [`MUSL_BUSYBOX_APPLETS`] turned off, and a static link.
pub fn musl_busybox_config(defconfig: &str, applets: &std::collections::BTreeSet<String>) -> String {
    let mut out = String::new();
    for line in defconfig.lines() {
        let on = line.strip_prefix("CONFIG_").and_then(|r| r.strip_suffix("=y"));
        let off = |sym: &str| format!("# CONFIG_{sym} is not set");
        let l = match on {
            Some(sym) if applets.contains(sym) && !MUSL_BUSYBOX_APPLETS.contains(&sym) => off(sym),
            _ if line == "# CONFIG_STATIC is not set" => "CONFIG_STATIC=y".to_string(),
            _ => line.to_string(),
        };
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// busybox 1.35 built from Debian's source package with `musl-gcc -static`
/// (`target/linux-progs/busybox-musl/busybox`, its `.config` beside it). The build runs in the
/// unpacked tree (make bounded to 20 minutes) and is redone when the written `.config` changes.
pub fn busybox_musl() -> Result<PathBuf, String> {
    let out_dir = out_dir().join("busybox-musl");
    let out = out_dir.join("busybox");
    let tree = busybox_source()?;
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    // make's output (compiler warnings included) goes to a log, quoted when a step fails.
    let log_path = out_dir.join("build.log");
    let log = std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    let make = |args: &[&str], what: &str, limit: u64| -> Result<(), String> {
        let mut c = Command::new("nice");
        let (o, e) = (log.try_clone().map_err(|e| e.to_string())?, log.try_clone().map_err(|e| e.to_string())?);
        c.current_dir(&tree).arg("make").args(args).stdout(o).stderr(e);
        run_bounded(c, what, std::time::Duration::from_secs(limit)).map_err(|err| {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(12).collect();
            format!("{err}; the end of {}:\n{}", log_path.display(), tail.into_iter().rev().collect::<Vec<_>>().join("\n"))
        })
    };
    need_host_tool("/usr/bin/make", "make")?;
    let cc = musl_gcc()?;
    let stamp = out_dir.join("config-written");
    // The config the tool writes, from busybox's own defconfig of this tree.
    let defconfig_file = out_dir.join("defconfig");
    if !defconfig_file.is_file() {
        make(&["HOSTCC=gcc", "defconfig"], "make defconfig (busybox)", 300)?;
        std::fs::copy(tree.join(".config"), &defconfig_file).map_err(|e| format!("{}: {e}", defconfig_file.display()))?;
    }
    let defconfig = std::fs::read_to_string(&defconfig_file).map_err(|e| format!("{}: {e}", defconfig_file.display()))?;
    let wanted = musl_busybox_config(&defconfig, &applet_symbols(&tree)?);
    if out.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return Ok(out);
    }
    std::fs::write(tree.join(".config"), &wanted).map_err(|e| format!("{}: {e}", tree.display()))?;
    // oldconfig settles what the switched-off applets implied (no new questions: only
    // symbols were turned off; `yes ""` answers any with its default).
    let mut oldconfig = Command::new("sh");
    oldconfig.current_dir(&tree).args(["-c", "yes '' | make HOSTCC=gcc oldconfig"]).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    run_bounded(oldconfig, "make oldconfig (busybox)", std::time::Duration::from_secs(300))?;
    eprintln!("xtask: building busybox with musl-gcc -static in {} (a minute or two)", tree.display());
    make(&["HOSTCC=gcc", "clean"], "make clean (busybox)", 300)?;
    make(&["-j2", &format!("CC={}", cc.display()), "HOSTCC=gcc", "busybox"], "make busybox (musl-gcc)", 1200)?;
    let data = std::fs::read(tree.join("busybox")).map_err(|e| format!("the build left no busybox: {e}"))?;
    match super::inspect_elf(&data) {
        Ok(_) => {}
        Err(e) => return Err(format!("the musl busybox is not a static program: {e}")),
    }
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    std::fs::copy(tree.join(".config"), out_dir.join(".config")).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    std::fs::copy(tree.join("busybox"), &out).map_err(|e| format!("{}: {e}", out.display()))?;
    std::fs::write(&stamp, &wanted).map_err(|e| format!("{}: {e}", stamp.display()))?;
    Ok(out)
}

/// The `.config` Debian's busybox-static was built with: the source package's
/// `debian/config/pkg/static` (busybox's testsuite reads `$bindir/.config` to skip what a
/// binary lacks).
pub fn busybox_static_config() -> Result<PathBuf, String> {
    let p = busybox_source()?.join("debian").join("config").join("pkg").join("static");
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!("{}: the source package has no static config", p.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_musl_config_keeps_only_the_chosen_applets() {
        let dir = std::env::temp_dir().join(format!("xtask-bb-applets-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("coreutils")).unwrap();
        std::fs::write(
            dir.join("coreutils").join("x.c"),
            "//applet:IF_CAT(APPLET(cat, BB_DIR_BIN, BB_SUID_DROP))\n\
             //applet:IF_DEPMOD(IF_NOT_MODPROBE_SMALL(APPLET(depmod, BB_DIR_SBIN, BB_SUID_DROP)))\n\
             //applet:IF_KILL(    APPLET_NOFORK(kill, kill, BB_DIR_BIN, BB_SUID_DROP, kill))\n\
             //config:config FEATURE_CATV\n",
        )
        .unwrap();
        let syms = applet_symbols(&dir).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let want: std::collections::BTreeSet<String> = ["CAT", "DEPMOD", "KILL"].iter().map(|s| s.to_string()).collect();
        assert_eq!(syms, want);
        let defconfig = "CONFIG_CAT=y\nCONFIG_DEPMOD=y\nCONFIG_FEATURE_CATV=y\n# CONFIG_STATIC is not set\nCONFIG_KILL=y\n";
        let c = musl_busybox_config(defconfig, &syms);
        // cat and kill are chosen; depmod is not (off); a feature keeps defconfig's value.
        assert_eq!(c, "CONFIG_CAT=y\n# CONFIG_DEPMOD is not set\nCONFIG_FEATURE_CATV=y\nCONFIG_STATIC=y\nCONFIG_KILL=y\n");
    }
}
