//! The Linux baseline's network: Debian's kernel has virtio-net (and virtio-pci, and their
//! dependencies) as modules, and the baseline boots an initramfs without a root file system.
//! So the modules are taken from the kernel package already downloaded by
//! [`crate::guest::linux::fetch_kernel`], checked against the bzImage (vermagic), ordered by their
//! `depends=` (dependencies first) and packed as `/lib/modules/*.ko` with a load order in
//! `/lib/modules/order`; the guest's `/init` (tools/qemu-plugins/guest/tcpserv.c) loads them
//! with `finit_module` and configures the interface itself.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::host::cpio::CpioEntry;
use crate::guest::linux::LinuxKernel;

/// The modules the NIC needs: the PCI transport and the network driver. Their dependencies
/// (virtio, virtio_ring, the virtio-pci device helpers, failover, net_failover) are found
/// from each module's `depends=`.
pub const ROOTS: [&str; 2] = ["virtio_pci", "virtio_net"];

/// The fields of a module's `.modinfo` section that matter here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModInfo {
    pub name: String,
    pub vermagic: String,
    pub depends: Vec<String>,
}

fn le(b: &[u8], at: usize, n: usize) -> Option<u64> {
    let s = b.get(at..at + n)?;
    Some(s.iter().rev().fold(0u64, |acc, &x| (acc << 8) | x as u64))
}

/// Read `.modinfo` (NUL-separated `key=value` strings) from an ELF64 relocatable module.
pub fn modinfo(elf: &[u8]) -> Result<ModInfo, String> {
    if elf.get(..6) != Some(b"\x7fELF\x02\x01") {
        return Err("not an ELF64 little-endian file".into());
    }
    let bad = || "malformed ELF section table".to_string();
    let shoff = le(elf, 0x28, 8).ok_or_else(bad)? as usize;
    let shentsize = le(elf, 0x3a, 2).ok_or_else(bad)? as usize;
    let shnum = le(elf, 0x3c, 2).ok_or_else(bad)? as usize;
    let shstrndx = le(elf, 0x3e, 2).ok_or_else(bad)? as usize;
    let section = |i: usize| -> Option<(usize, usize, usize)> {
        let h = shoff.checked_add(i.checked_mul(shentsize)?)?;
        Some((le(elf, h, 4)? as usize, le(elf, h + 0x18, 8)? as usize, le(elf, h + 0x20, 8)? as usize))
    };
    let (_, stroff, strsize) = section(shstrndx).ok_or_else(bad)?;
    let names = elf.get(stroff..stroff.checked_add(strsize).ok_or_else(bad)?).ok_or_else(bad)?;
    let mut info = None;
    for i in 0..shnum {
        let (name, off, size) = section(i).ok_or_else(bad)?;
        let n = names.get(name..).and_then(|s| s.split(|&c| c == 0).next()).unwrap_or(&[]);
        if n == b".modinfo" {
            info = Some(elf.get(off..off.checked_add(size).ok_or_else(bad)?).ok_or_else(bad)?);
        }
    }
    let info = info.ok_or("no .modinfo section")?;
    let (mut name, mut vermagic, mut depends) = (None, None, Vec::new());
    for kv in info.split(|&c| c == 0).filter(|s| !s.is_empty()) {
        let kv = String::from_utf8_lossy(kv);
        match kv.split_once('=') {
            Some(("name", v)) => name = Some(v.to_string()),
            Some(("vermagic", v)) => vermagic = Some(v.to_string()),
            Some(("depends", v)) => depends = v.split(',').filter(|d| !d.is_empty()).map(String::from).collect(),
            _ => {}
        }
    }
    Ok(ModInfo { name: name.ok_or(".modinfo has no name=")?, vermagic: vermagic.ok_or(".modinfo has no vermagic=")?, depends })
}

/// The version string a bzImage carries (setup header `kernel_version` at 0x20e, an offset
/// from 0x200), e.g. `6.1.0-56-amd64 (debian-kernel@lists.debian.org) #1 SMP ...`.
pub fn bzimage_version(image: &[u8]) -> Option<String> {
    if image.get(0x202..0x206) != Some(b"HdrS") {
        return None;
    }
    let at = le(image, 0x20e, 2)? as usize + 0x200;
    let s = image.get(at..)?.split(|&c| c == 0).next()?;
    Some(String::from_utf8_lossy(s).to_string())
}

/// Order `mods` so every module comes after the ones it depends on; an unknown dependency or
/// a cycle is an error.
pub fn load_order(mods: &BTreeMap<String, ModInfo>, roots: &[&str]) -> Result<Vec<String>, String> {
    fn visit(m: &str, mods: &BTreeMap<String, ModInfo>, done: &mut Vec<String>, on_path: &mut BTreeSet<String>) -> Result<(), String> {
        if done.iter().any(|d| d == m) {
            return Ok(());
        }
        if !on_path.insert(m.to_string()) {
            return Err(format!("modules depend on each other in a cycle through {m}"));
        }
        let info = mods.get(m).ok_or_else(|| format!("module {m} is needed but not in the kernel package"))?;
        for d in &info.depends {
            visit(d, mods, done, on_path)?;
        }
        on_path.remove(m);
        done.push(m.to_string());
        Ok(())
    }
    let mut done = Vec::new();
    for r in roots {
        visit(r, mods, &mut done, &mut BTreeSet::new())?;
    }
    Ok(done)
}

/// A module's name as the kernel spells it, from its file name.
fn mod_name(path: &str) -> Option<String> {
    let file = path.rsplit('/').next()?;
    let stem = file.strip_suffix(".ko").or_else(|| file.strip_suffix(".ko.xz"))?;
    Some(stem.replace('-', "_"))
}

/// A module file's ELF bytes: a `.ko.xz` is decompressed here with the host's xz (the guest
/// then loads plain ELF, whether or not its kernel could decompress modules itself).
fn module_bytes(p: &Path) -> Result<Vec<u8>, String> {
    if p.extension().is_some_and(|e| e == "xz") {
        let out = Command::new("xz").arg("-dc").arg(p).output().map_err(|e| format!("cannot run xz: {e}"))?;
        if !out.status.success() {
            return Err(format!("linux: xz -dc {} failed", p.display()));
        }
        return Ok(out.stdout);
    }
    fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
}

fn kernel_deb(k: &LinuxKernel) -> Result<PathBuf, String> {
    let prefix = format!("linux-image-{}_", k.version);
    let dir = crate::guest::linux::cache_dir();
    fs::read_dir(&dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&prefix) && n.to_string_lossy().ends_with(".deb")))
        .ok_or_else(|| format!("linux: the package {prefix}*.deb is not in {} (run `cargo xtask linux fetch`)", dir.display()))
}

/// `dpkg-deb --fsys-tarfile DEB | tar ARGS` in `dir`.
fn tar_from_deb(deb: &Path, dir: &Path, args: &[String]) -> Result<String, String> {
    let mut dpkg = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(deb)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run dpkg-deb: {e}"))?;
    let out = Command::new("tar")
        .current_dir(dir)
        .args(args)
        .stdin(dpkg.stdout.take().ok_or("dpkg-deb: no stdout")?)
        .output()
        .map_err(|e| format!("cannot run tar: {e}"))?;
    let _ = dpkg.wait();
    if !out.status.success() {
        return Err(format!("linux: tar {} from {} failed: {}", args.join(" "), deb.display(), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).to_string())
}

/// The NIC's modules for kernel `k`, in load order, as (file name, contents): unpacked once
/// from the kernel package into `target/linux-cache/net-modules-VERSION`, each checked to be
/// built for this bzImage (vermagic's release = the bzImage's), `.ko.xz` decompressed with
/// the host's xz.
pub fn net_modules(k: &LinuxKernel) -> Result<Vec<(String, Vec<u8>)>, String> {
    modules_for(k, &ROOTS)
}

/// [`net_modules`] for any modules `roots` (and their dependencies), in load order: e.g. the
/// disk's (virtio-pci, virtio-blk, ext4) for the file-system benchmarks.
pub fn modules_for(k: &LinuxKernel, roots: &[&str]) -> Result<Vec<(String, Vec<u8>)>, String> {
    let image = fs::read(&k.bzimage).map_err(|e| format!("cannot read {}: {e}", k.bzimage.display()))?;
    let release = bzimage_version(&image).and_then(|v| v.split_whitespace().next().map(String::from)).ok_or_else(|| format!("{} has no setup header version string", k.bzimage.display()))?;
    if release != k.version {
        return Err(format!("linux: {} says it is {release}, its file name says {}", k.bzimage.display(), k.version));
    }
    let dir = crate::guest::linux::cache_dir().join(format!("net-modules-{}", k.version));
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let deb = kernel_deb(k)?;
    // Every module file in the package by name (listing once, cached).
    let listing = dir.join("listing.txt");
    let list = match fs::read_to_string(&listing) {
        Ok(l) => l,
        Err(_) => {
            let l = tar_from_deb(&deb, &dir, &["-t".into()])?;
            let mods: String = l.lines().filter(|p| mod_name(p).is_some()).map(|p| format!("{p}\n")).collect();
            fs::write(&listing, &mods).map_err(|e| format!("cannot write {}: {e}", listing.display()))?;
            mods
        }
    };
    let paths: BTreeMap<String, String> = list.lines().filter_map(|p| Some((mod_name(p)?, p.to_string()))).collect();
    // Unpack the closure of the roots under `depends=`, one tar pass per level.
    let mut infos: BTreeMap<String, ModInfo> = BTreeMap::new();
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut want: BTreeSet<String> = roots.iter().map(|s| s.to_string()).collect();
    for _round in 0..16 {
        want.retain(|m| !infos.contains_key(m));
        if want.is_empty() {
            break;
        }
        let mut missing = Vec::new();
        for m in &want {
            let p = paths.get(m).ok_or_else(|| format!("linux: module {m} is not in {} (built in? then drop it from ROOTS)", deb.display()))?;
            if !dir.join(p).exists() {
                missing.push(p.clone());
            }
        }
        if !missing.is_empty() {
            let mut args = vec!["-x".to_string()];
            args.extend(missing);
            tar_from_deb(&deb, &dir, &args)?;
        }
        let mut next = BTreeSet::new();
        for m in &want {
            let p = dir.join(&paths[m]);
            let data = module_bytes(&p)?;
            let info = modinfo(&data).map_err(|e| format!("linux: {}: {e}", p.display()))?;
            let magic_release = info.vermagic.split_whitespace().next().unwrap_or("");
            if magic_release != release {
                return Err(format!("linux: module {m} has vermagic `{}`, the bzImage is {release}", info.vermagic));
            }
            next.extend(info.depends.iter().cloned());
            infos.insert(m.clone(), info);
            files.insert(m.clone(), data);
        }
        want = next;
    }
    let order = load_order(&infos, roots)?;
    Ok(order.into_iter().map(|m| (format!("{m}.ko"), files.remove(&m).unwrap_or_default())).collect())
}

/// `cargo xtask linux modules`: the NIC's modules in load order with what was checked.
pub fn print_modules() -> Result<(), String> {
    let k = crate::guest::linux::fetch_kernel()?;
    let image = fs::read(&k.bzimage).map_err(|e| format!("cannot read {}: {e}", k.bzimage.display()))?;
    println!("bzImage {}: {}", k.bzimage.display(), bzimage_version(&image).unwrap_or_default());
    for (name, data) in net_modules(&k)? {
        let i = modinfo(&data)?;
        println!("{name:<28} {:>7} bytes  depends={:<34} vermagic={}", data.len(), i.depends.join(","), i.vermagic.trim());
    }
    Ok(())
}

/// The initramfs entries: `/lib/modules/NAME.ko` and the load order `/lib/modules/order`.
pub fn module_entries(mods: Vec<(String, Vec<u8>)>) -> Vec<CpioEntry> {
    let order: String = mods.iter().map(|(n, _)| format!("{n}\n")).collect();
    let mut e = vec![CpioEntry::Dir("lib".into()), CpioEntry::Dir("lib/modules".into())];
    for (n, data) in mods {
        e.push(CpioEntry::File { path: format!("lib/modules/{n}"), mode: 0o644, data });
    }
    e.push(CpioEntry::File { path: "lib/modules/order".into(), mode: 0o644, data: order.into_bytes() });
    e
}

/// The measurement guest's initramfs (workload.c + tcpserv.c as /init) with the NIC's modules.
pub fn initramfs(k: &LinuxKernel) -> Result<PathBuf, String> {
    let init = crate::guest::plugin::build_guest()?;
    let out = crate::guest::plugin::artifact_dir().join("guest-initramfs-net.cpio");
    crate::guest::linux::build_initramfs_with(&init, module_entries(net_modules(k)?), &out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ELF64 with a section-name table and one `.modinfo` section holding `info`.
    fn module(info: &[u8]) -> Vec<u8> {
        let names = b"\0.shstrtab\0.modinfo\0";
        let mut e = vec![0u8; 0x40];
        e[..6].copy_from_slice(b"\x7fELF\x02\x01");
        let names_at = e.len();
        e.extend(names);
        let info_at = e.len();
        e.extend(info);
        let shoff = e.len();
        e[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        e[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        e[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        e[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes());
        for (name, off, size) in [(0u32, 0usize, 0usize), (1, names_at, names.len()), (11, info_at, info.len())] {
            let mut h = [0u8; 64];
            h[..4].copy_from_slice(&name.to_le_bytes());
            h[0x18..0x20].copy_from_slice(&(off as u64).to_le_bytes());
            h[0x20..0x28].copy_from_slice(&(size as u64).to_le_bytes());
            e.extend(h);
        }
        e
    }

    #[test]
    fn reads_modinfo() {
        let m = module(b"license=GPL\0depends=virtio,virtio_ring\0name=virtio_net\0vermagic=6.1.0-56-amd64 SMP preempt mod_unload modversions \0");
        let i = modinfo(&m).unwrap();
        assert_eq!(i.name, "virtio_net");
        assert_eq!(i.depends, ["virtio", "virtio_ring"]);
        assert!(i.vermagic.starts_with("6.1.0-56-amd64 "));
        assert_eq!(modinfo(&module(b"depends=\0name=virtio\0vermagic=x\0")).unwrap().depends, Vec::<String>::new());
        assert!(modinfo(&module(b"name=x\0")).unwrap_err().contains("vermagic"));
        assert!(modinfo(b"\x7fELF\x02\x01short").is_err());
        let mut cut = m.clone();
        cut.truncate(m.len() - 150); // into the section headers
        assert!(modinfo(&cut).is_err(), "a truncated module is not read past its end");
    }

    #[test]
    fn xz_modules_are_decompressed_on_the_host() {
        let dir = std::env::temp_dir().join(format!("xtask-modtest-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let m = module(b"name=virtio\0vermagic=6.1.0-56-amd64 SMP\0depends=\0");
        let plain = dir.join("virtio.ko");
        fs::write(&plain, &m).unwrap();
        let st = Command::new("xz").args(["-kf"]).arg(&plain).status().expect("xz runs");
        assert!(st.success());
        let packed = dir.join("virtio.ko.xz");
        assert_ne!(fs::read(&packed).unwrap(), m, "really compressed");
        assert_eq!(module_bytes(&packed).unwrap(), m);
        assert_eq!(module_bytes(&plain).unwrap(), m);
        assert_eq!(modinfo(&module_bytes(&packed).unwrap()).unwrap().name, "virtio");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn dependencies_load_first() {
        let m = |name: &str, deps: &[&str]| (name.to_string(), ModInfo { name: name.into(), vermagic: "v".into(), depends: deps.iter().map(|s| s.to_string()).collect() });
        let mods: BTreeMap<_, _> = [
            m("virtio_net", &["net_failover", "virtio", "virtio_ring"]),
            m("net_failover", &["failover"]),
            m("failover", &[]),
            m("virtio", &[]),
            m("virtio_ring", &["virtio"]),
            m("virtio_pci", &["virtio", "virtio_ring"]),
        ]
        .into_iter()
        .collect();
        let o = load_order(&mods, &ROOTS).unwrap();
        assert_eq!(o.len(), 6);
        let at = |n: &str| o.iter().position(|x| x == n).unwrap();
        for (name, info) in &mods {
            for d in &info.depends {
                assert!(at(d) < at(name), "{d} before {name}: {o:?}");
            }
        }
        let mut broken = mods.clone();
        broken.remove("failover");
        assert!(load_order(&broken, &ROOTS).unwrap_err().contains("failover"));
        let mut cyc = mods.clone();
        cyc.insert("virtio".into(), m("virtio", &["virtio_net"]).1);
        assert!(load_order(&cyc, &ROOTS).unwrap_err().contains("cycle"));
    }

    #[test]
    fn names_and_bzimage_version() {
        assert_eq!(mod_name("./lib/modules/6.1/kernel/drivers/net/virtio_net.ko").as_deref(), Some("virtio_net"));
        assert_eq!(mod_name("./x/virtio-rng.ko.xz").as_deref(), Some("virtio_rng"));
        assert_eq!(mod_name("./x/modules.builtin"), None);
        let mut img = vec![0u8; 0x400];
        img[0x202..0x206].copy_from_slice(b"HdrS");
        img[0x20e..0x210].copy_from_slice(&0x100u16.to_le_bytes());
        img[0x300..0x310].copy_from_slice(b"6.1.0-56-amd64 (");
        assert!(bzimage_version(&img).unwrap().starts_with("6.1.0-56-amd64 ("));
        assert_eq!(bzimage_version(&[0u8; 16]), None);
    }
}
