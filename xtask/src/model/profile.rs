//! `cargo xtask model profile`: where a marked region's instructions go, by function, on both
//! systems. One insncount run per system (exact mode) with the plugin's flat profile
//! (`profile=PATH`: instructions per translation-block start address), mapped to functions:
//! ours' kernel ELF and user program (`bench-ours`, linked at fixed addresses); Linux's
//! `System.map` and `bench-linux`. Linux's `bench-linux` is a stripped static PIE: its
//! functions come from its unwind table (`.eh_frame`, one FDE per function, named by offset and
//! size, to be identified by disassembly; a rebuild that keeps the symbols lays the functions
//! out differently, so its symbols do not apply), and the load base from the profile itself:
//! the one page-aligned base at which the most profiled block starts are function entries.
//!
//! This is how the model's figure-10 question (why ours' Metis reduce runs more user
//! instructions than Linux's, on the same library code) is answered by exact counts.

use std::collections::HashMap;
use std::fmt::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::host::ksyms::function_symbols;

/// A symbol table: (address, name), sorted by address.
pub type Symbols = Vec<(u64, String)>;

/// The profile file: `0xADDR COUNT` lines, then `other N` (instructions the table had no room for).
pub fn parse_profile(text: &str) -> Result<(Vec<(u64, u64)>, u64), String> {
    let mut out = Vec::new();
    let mut other = 0;
    for l in text.lines() {
        let mut w = l.split_whitespace();
        match (w.next(), w.next()) {
            (Some("other"), Some(n)) => other = n.parse().map_err(|_| format!("profile: bad line `{l}`"))?,
            (Some(a), Some(n)) => {
                let a = a.strip_prefix("0x").and_then(|h| u64::from_str_radix(h, 16).ok()).ok_or_else(|| format!("profile: bad address in `{l}`"))?;
                out.push((a, n.parse().map_err(|_| format!("profile: bad count in `{l}`"))?));
            }
            (None, _) => {}
            _ => return Err(format!("profile: bad line `{l}`")),
        }
    }
    Ok((out, other))
}

/// The function containing `addr`: the last symbol at or below it.
pub fn lookup(syms: &Symbols, addr: u64) -> Option<&str> {
    let i = syms.partition_point(|(a, _)| *a <= addr);
    (i > 0).then(|| syms[i - 1].1.as_str())
}

/// The load base of a position-independent program: the page-aligned `base` at which the most
/// profiled addresses are exactly `base + entry` of a function, and how many are. Blocks start
/// at function entries often (every call), so the true base collects many such hits and a wrong
/// one few.
pub fn pie_base(addrs: &[u64], syms: &Symbols) -> Option<(u64, usize)> {
    let mut votes: HashMap<u64, usize> = HashMap::new();
    for &a in addrs {
        for (s, _) in syms {
            if *s <= a && (a - s) & 0xfff == 0 {
                *votes.entry(a - s).or_default() += 1;
            }
        }
    }
    votes.into_iter().max_by_key(|&(b, v)| (v, std::cmp::Reverse(b)))
}

/// A stripped program's functions from its unwind table (`.eh_frame`, which stripping keeps):
/// one FDE per function, named by its offset and size (`fn@0x1a2b0+312`), to be identified by
/// disassembly (`objdump -d --start-address=...`).
fn fde_functions(path: &Path) -> Result<Symbols, String> {
    let out = Command::new("readelf").args(["--debug-dump=frames"]).arg(path).output().map_err(|e| format!("cannot run readelf: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v = parse_fdes(&text);
    if v.is_empty() {
        return Err(format!("{}: no FDE in its .eh_frame", path.display()));
    }
    Ok(v)
}

/// `readelf --debug-dump=frames` FDE lines (`... FDE cie=... pc=START..END`).
pub fn parse_fdes(text: &str) -> Symbols {
    let mut v: Symbols = text
        .lines()
        .filter_map(|l| {
            let (a, b) = l.split_once("pc=")?.1.split_once("..")?;
            let (a, b) = (u64::from_str_radix(a.trim(), 16).ok()?, u64::from_str_radix(b.split_whitespace().next()?, 16).ok()?);
            (b > a).then(|| (a, format!("fn@{a:#x}+{}", b - a)))
        })
        .collect();
    v.sort();
    v.dedup_by_key(|e| e.0);
    v
}

fn read_syms(path: &Path) -> Result<Symbols, String> {
    let elf = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    function_symbols(&elf).map_err(|e| format!("{}: {e}", path.display()))
}

/// `System.map`: `ADDR TYPE NAME`, text symbols only.
pub fn parse_system_map(text: &str) -> Symbols {
    let mut v: Symbols = text
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (a, t, n) = (w.next()?, w.next()?, w.next()?);
            matches!(t, "t" | "T" | "w" | "W").then(|| Some((u64::from_str_radix(a, 16).ok()?, n.to_string())))?
        })
        .collect();
    v.sort();
    v.dedup_by_key(|e| e.0);
    v
}

/// One system's profile, by function: (name, kernel?, instructions), most first; and totals.
pub struct ByFunction {
    pub rows: Vec<(String, bool, u64)>,
    pub kernel: u64,
    pub user: u64,
    pub unmapped: u64,
    pub note: String,
}

const KERNEL_HALF: u64 = 0xffff_8000_0000_0000;

fn by_function(profile: &[(u64, u64)], other: u64, ksyms: &Symbols, usyms: &Symbols, ubase: u64, note: String) -> ByFunction {
    let mut m: HashMap<(String, bool), u64> = HashMap::new();
    let (mut kernel, mut user, mut unmapped) = (0, 0, other);
    for &(a, n) in profile {
        let k = a >= KERNEL_HALF;
        if k {
            kernel += n;
        } else {
            user += n;
        }
        let name = if k { lookup(ksyms, a) } else { a.checked_sub(ubase).and_then(|o| lookup(usyms, o)) };
        match name {
            Some(s) => *m.entry((s.to_string(), k)).or_default() += n,
            None => unmapped += n,
        }
    }
    let mut rows: Vec<(String, bool, u64)> = m.into_iter().map(|((s, k), n)| (s, k, n)).collect();
    rows.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    ByFunction { rows, kernel, user, unmapped, note }
}

fn run_one(system: &'static str, workload: &'static str, smp: u32, params: &str, timeout: Duration, out: &Path) -> Result<(ByFunction, String), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let prof = out.join(format!("profile-{system}-{workload}-{smp}.txt"));
    let _ = std::fs::remove_file(&prof);
    println!("model: booting {system} {workload} at {smp} vCPU(s) under insncount with a profile ({params})");
    let (report, _) = crate::guest::measure::run_report(system, workload, smp, params, timeout, "insncount", &[format!("profile={}", prof.display())])?;
    let vcpus: String = report.iter().filter(|r| r.kind == "vcpu").map(|r| format!("  vcpu {} kernel {} user {} idle {}\n", r.u("index"), r.u("kernel"), r.u("user"), r.u("idle"))).collect();
    let text = std::fs::read_to_string(&prof).map_err(|e| format!("cannot read {}: {e}", prof.display()))?;
    let (p, other) = parse_profile(&text)?;
    let root = crate::host::env::workspace_root();
    let by = match system {
        "ours" => {
            let kernel = crate::host::env::build_kernel()?;
            let user = root.join("target/user/x86_64-unknown-none/release/bench-ours");
            by_function(&p, other, &read_syms(&kernel)?, &read_syms(&user)?, 0, format!("kernel {}, user {}", kernel.display(), user.display()))
        }
        _ => {
            let k = crate::guest::linux::fetch_kernel()?;
            let map = crate::guest::linux::cache_dir().join("root").join("boot").join(format!("System.map-{}", k.version));
            let ksyms = parse_system_map(&std::fs::read_to_string(&map).map_err(|e| format!("cannot read {}: {e}", map.display()))?);
            // The guest's copy is stripped (and a build that keeps its symbols lays the
            // functions out differently), so its functions come from its unwind table.
            let user = crate::guest::linux_sys::build_guest_program()?;
            let usyms = fde_functions(&user)?;
            let mut hot: Vec<&(u64, u64)> = p.iter().filter(|(a, _)| *a < KERNEL_HALF).collect();
            hot.sort_by(|a, b| b.1.cmp(&a.1));
            let addrs: Vec<u64> = hot.iter().take(3000).map(|(a, _)| *a).collect();
            let (base, hits) = pie_base(&addrs, &usyms).ok_or("no user addresses in the profile")?;
            by_function(&p, other, &ksyms, &usyms, base, format!("kernel {}, user {} (stripped: functions from .eh_frame) loaded at {base:#x} ({hits} of {} block starts are function entries there)", map.display(), user.display(), addrs.len()))
        }
    };
    Ok((by, vcpus))
}

pub fn command(systems: &[&'static str], workload: &str, smp: u32, params: &str, top: usize, timeout: Duration, out: &Path) -> Result<(), String> {
    let workload = testdefs::bench_catalog::find(workload).map(|s| s.name).ok_or_else(|| format!("`{workload}` is not a benchmark of the catalog (cargo xtask bench --list)"))?;
    let mut t = String::new();
    let _ = writeln!(t, "instructions by function in the marked region: {workload} at {smp} vCPU(s), params `{params}` (evidence: exact count, insncount exact mode, one boot each)");
    let mut got: Vec<(&str, ByFunction)> = Vec::new();
    for &s in systems {
        let (by, vcpus) = run_one(s, workload, smp, params, timeout, out)?;
        let _ = writeln!(t, "\n{s}: kernel {} user {} (profile; not mapped to a function: {})\n{vcpus}  symbols: {}", by.kernel, by.user, by.unmapped, by.note);
        for (name, k, n) in by.rows.iter().take(top) {
            let _ = writeln!(t, "  {:>12} {:>5.1}% {} {name}", n, *n as f64 * 100.0 / (by.kernel + by.user).max(1) as f64, if *k { "[k]" } else { "[u]" });
        }
        got.push((s, by));
    }
    if let [(a, x), (b, y)] = &got[..] {
        // Side by side: the user functions both run (the same library code), by name.
        let _ = writeln!(t, "\nuser functions, {a} / {b} (instructions):");
        let ym: HashMap<&str, u64> = y.rows.iter().filter(|r| !r.1).map(|r| (r.0.as_str(), r.2)).collect();
        let xm: HashMap<&str, u64> = x.rows.iter().filter(|r| !r.1).map(|r| (r.0.as_str(), r.2)).collect();
        let mut names: Vec<&str> = xm.keys().chain(ym.keys()).copied().collect();
        names.sort_by_key(|n| std::cmp::Reverse(xm.get(n).copied().unwrap_or(0).max(ym.get(n).copied().unwrap_or(0))));
        names.dedup();
        for n in names.into_iter().take(top) {
            let (p, q) = (xm.get(n).copied().unwrap_or(0), ym.get(n).copied().unwrap_or(0));
            let _ = writeln!(t, "  {p:>12} {q:>12} {:>7} {n}", if q > 0 { format!("{:.2}", p as f64 / q as f64) } else { "-".into() });
        }
    }
    print!("{t}");
    let p = out.join(format!("profile-{workload}-{smp}.txt"));
    std::fs::write(&p, &t).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    println!("wrote {}", p.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_lines_parse() {
        let (p, o) = parse_profile("0x0000000000401000 12\n0xffffffff80001000 3\nother 5\n").unwrap();
        assert_eq!(p, vec![(0x401000, 12), (0xffffffff80001000, 3)]);
        assert_eq!(o, 5);
        assert!(parse_profile("0xzz 1\n").is_err());
        assert!(parse_profile("0x10 x\n").is_err());
    }

    #[test]
    fn lookup_takes_the_enclosing_function() {
        let s: Symbols = vec![(0x100, "a".into()), (0x200, "b".into())];
        assert_eq!(lookup(&s, 0xff), None);
        assert_eq!(lookup(&s, 0x100), Some("a"));
        assert_eq!(lookup(&s, 0x1ff), Some("a"));
        assert_eq!(lookup(&s, 0x5000), Some("b"));
    }

    #[test]
    fn the_base_is_where_blocks_start_at_entries() {
        let s: Symbols = vec![(0x1000, "a".into()), (0x1040, "b".into()), (0x2010, "c".into()), (0x3000, "d".into())];
        let base = 0x5555_0000_0000u64;
        // Three entries and two blocks inside functions.
        let addrs = [base + 0x1000, base + 0x1040, base + 0x2010, base + 0x1013, base + 0x3007];
        assert_eq!(pie_base(&addrs, &s), Some((base, 3)));
    }

    #[test]
    fn fde_lines_give_functions() {
        let t = "00000018 0000000000000014 0000001c FDE cie=00000000 pc=000000000000a040..000000000000a0a0\n  DW_CFA_nop\n00000030 0000000000000014 0000001c FDE cie=00000000 pc=0000000000001000..0000000000001010\n";
        assert_eq!(parse_fdes(t), vec![(0x1000, "fn@0x1000+16".to_string()), (0xa040, "fn@0xa040+96".to_string())]);
    }

    #[test]
    fn system_map_keeps_text_symbols() {
        let m = parse_system_map("ffffffff81000000 T _text\nffffffff81000010 t helper\nffffffff82000000 D data\nffffffff81000008 W weak\n");
        assert_eq!(m.iter().map(|e| e.1.as_str()).collect::<Vec<_>>(), ["_text", "weak", "helper"]);
    }

    #[test]
    fn totals_split_kernel_and_user() {
        let k: Symbols = vec![(0xffff_ffff_8000_0000, "kf".into())];
        let u: Symbols = vec![(0x100, "uf".into())];
        let b = by_function(&[(0xffff_ffff_8000_0010, 7), (0x1100, 5), (0x10, 2)], 1, &k, &u, 0x1000, String::new());
        assert_eq!((b.kernel, b.user, b.unmapped), (7, 7, 3));
        assert_eq!(b.rows[0], ("kf".to_string(), true, 7));
        assert_eq!(b.rows[1], ("uf".to_string(), false, 5));
    }
}
