//! Programs built from Debian's source packages, statically with `musl-gcc`: libevent 2.1.12
//! and memcached 1.6.18 (linked against that libevent), for the socket and readiness work
//! (docs/linux-abi.md, "Sockets and readiness").
//!
//! The sources come from `apt-get source --download-only` with an apt configuration of the
//! tool's own under `target/linux-cache/apt/`: its own `sources.list` holding only `deb-src`
//! lines for the release the host runs, its own package lists and cache, so the host's
//! `/etc/apt` is neither read for sources nor written. `dpkg-source -x` unpacks them with
//! Debian's patches applied; the build happens under `target/linux-cache/src/` and the
//! binaries are copied to `target/linux-progs/` (nothing is rebuilt once they are there).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::progs::{musl_gcc, out_dir};

/// The upstream versions asked for; Debian's packaging of them (any Debian revision) is used.
pub const LIBEVENT: (&str, &str) = ("libevent", "2.1.12-stable");
pub const MEMCACHED: (&str, &str) = ("memcached", "1.6.18");

fn cache() -> PathBuf {
    crate::guest::linux::cache_dir()
}

/// The release the host's apt knows (`VERSION_CODENAME` of /etc/os-release), for the
/// `deb-src` lines.
fn codename() -> Result<String, String> {
    let os = std::fs::read_to_string("/etc/os-release").map_err(|e| format!("/etc/os-release: {e} (not a Debian host?)"))?;
    os.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|s| s.trim_matches('"').to_string())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| "/etc/os-release names no VERSION_CODENAME".into())
}

/// The `sources.list` of the tool's own apt: the release and its security updates, sources only.
pub fn sources_list(codename: &str) -> String {
    format!(
        "deb-src http://deb.debian.org/debian {codename} main\n\
         deb-src http://deb.debian.org/debian-security {codename}-security main\n"
    )
}

/// The `-o` options that point apt at the tool's own configuration in `dir`.
pub fn apt_options(dir: &Path) -> Vec<String> {
    vec![
        "-o".into(),
        format!("Dir::Etc::SourceList={}", dir.join("sources.list").display()),
        "-o".into(),
        "Dir::Etc::SourceParts=/nonexistent".into(),
        "-o".into(),
        format!("Dir::State::Lists={}", dir.join("lists").display()),
        "-o".into(),
        format!("Dir::Cache={}", dir.join("cache").display()),
        "-q".into(),
    ]
}

fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    let st = cmd.status().map_err(|e| format!("{what}: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({st})"))
    }
}

/// The tool's apt configuration, its source lists fetched once.
fn apt_dir() -> Result<PathBuf, String> {
    let dir = cache().join("apt");
    for d in ["lists/partial", "cache/archives/partial"] {
        std::fs::create_dir_all(dir.join(d)).map_err(|e| format!("{}: {e}", dir.join(d).display()))?;
    }
    let list = sources_list(&codename()?);
    let path = dir.join("sources.list");
    let fresh = std::fs::read_to_string(&path).ok().as_deref() != Some(list.as_str());
    if fresh {
        std::fs::write(&path, &list).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let has_lists = std::fs::read_dir(dir.join("lists")).map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().ends_with("_Sources"))).unwrap_or(false);
    if fresh || !has_lists {
        eprintln!("xtask: fetching Debian's source lists into {} (apt-get update, the tool's own deb-src configuration)", dir.display());
        run(Command::new("apt-get").args(apt_options(&dir)).arg("update"), "apt-get update (deb-src)")?;
    }
    Ok(dir)
}

/// The unpacked source tree of Debian's package `name` whose upstream version is `upstream`,
/// under `target/linux-cache/src/` (downloaded and unpacked once).
pub fn source_tree(name: &str, upstream: &str) -> Result<PathBuf, String> {
    let src = cache().join("src");
    let tree = src.join(format!("{name}-{upstream}"));
    if tree.join("debian").is_dir() {
        return Ok(tree);
    }
    std::fs::create_dir_all(&src).map_err(|e| format!("{}: {e}", src.display()))?;
    let find_dsc = || -> Option<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&src)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().map(|n| n.to_string_lossy().to_string()).is_some_and(|n| n.starts_with(&format!("{name}_{upstream}-")) && n.ends_with(".dsc")))
            .collect();
        v.sort();
        v.pop()
    };
    let dsc = match find_dsc() {
        Some(d) => d,
        None => {
            let apt = apt_dir()?;
            eprintln!("xtask: downloading Debian's source of {name} into {} (apt-get source --download-only)", src.display());
            run(Command::new("apt-get").current_dir(&src).args(apt_options(&apt)).args(["source", "--download-only", name]), &format!("apt-get source {name}"))?;
            find_dsc().ok_or_else(|| format!("apt-get source {name} gave no {name}_{upstream}-*.dsc (Debian serves another version?)"))?
        }
    };
    let _ = std::fs::remove_dir_all(&tree);
    run(Command::new("dpkg-source").current_dir(&src).args(["--no-check", "-x"]).arg(&dsc).arg(&tree), &format!("dpkg-source -x {}", dsc.display()))?;
    Ok(tree)
}

/// `make` with automake's regeneration turned off: unpacking leaves `Makefile.am` newer than
/// `Makefile.in`, and the released `configure` and `Makefile.in` are what is built.
fn make(dir: &Path, args: &[&str]) -> Result<(), String> {
    run(
        Command::new("nice").arg("make").current_dir(dir).args(["-s", "-j2", "ACLOCAL=true", "AUTOMAKE=true", "AUTOCONF=true", "AUTOHEADER=true"]).args(args),
        &format!("make {} in {}", args.join(" "), dir.display()),
    )
}

/// libevent, static, installed under `target/linux-cache/libevent-musl/`; returns that prefix.
pub fn libevent() -> Result<PathBuf, String> {
    let prefix = cache().join("libevent-musl");
    if prefix.join("lib").join("libevent.a").exists() {
        return Ok(prefix);
    }
    let cc = musl_gcc()?;
    let tree = source_tree(LIBEVENT.0, LIBEVENT.1)?;
    eprintln!("xtask: building libevent {} with musl-gcc (static) in {}", LIBEVENT.1, tree.display());
    run(
        Command::new("./configure")
            .current_dir(&tree)
            .arg(format!("CC={}", cc.display()))
            .arg(format!("--prefix={}", prefix.display()))
            .args(["-q", "--disable-shared", "--enable-static", "--disable-openssl", "--disable-samples", "--disable-libevent-regress", "--disable-debug-mode"]),
        "libevent's configure",
    )?;
    make(&tree, &[])?;
    make(&tree, &["install"])?;
    Ok(prefix)
}

/// memcached, static with musl and the libevent above, at `target/linux-progs/memcached`.
pub fn memcached() -> Result<PathBuf, String> {
    let out = out_dir().join("memcached");
    if out.exists() {
        return Ok(out);
    }
    let ev = libevent()?;
    let cc = musl_gcc()?;
    let tree = source_tree(MEMCACHED.0, MEMCACHED.1)?;
    eprintln!("xtask: building memcached {} with musl-gcc (static) in {}", MEMCACHED.1, tree.display());
    run(
        Command::new("./configure")
            .current_dir(&tree)
            .arg(format!("CC={}", cc.display()))
            .arg("LDFLAGS=-static")
            .arg(format!("--with-libevent={}", ev.display()))
            .args(["-q", "--disable-sasl", "--disable-extstore", "--disable-tls", "--disable-docs"]),
        "memcached's configure",
    )?;
    make(&tree, &["memcached"])?;
    let bin = tree.join("memcached");
    let data = std::fs::read(&bin).map_err(|e| format!("{}: {e}", bin.display()))?;
    super::inspect_elf(&data).map_err(|e| format!("{}: {e}", bin.display()))?;
    std::fs::create_dir_all(out_dir()).map_err(|e| format!("{}: {e}", out_dir().display()))?;
    std::fs::copy(&bin, &out).map_err(|e| format!("cannot copy {} to {}: {e}", bin.display(), out.display()))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tools_apt_reads_its_own_sources_only() {
        let l = sources_list("bookworm");
        assert!(l.lines().all(|x| x.starts_with("deb-src http://deb.debian.org/")), "{l}");
        assert!(l.contains("bookworm main") && l.contains("bookworm-security main"));
        let o = apt_options(Path::new("/t/apt"));
        // The host's own source parts are not read, and lists and cache stay under the tool's directory.
        assert!(o.contains(&"Dir::Etc::SourceParts=/nonexistent".to_string()));
        assert!(o.contains(&"Dir::State::Lists=/t/apt/lists".to_string()));
        assert!(o.contains(&"Dir::Cache=/t/apt/cache".to_string()));
        assert!(o.contains(&"Dir::Etc::SourceList=/t/apt/sources.list".to_string()));
    }
}
