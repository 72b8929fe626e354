//! sh: the shell on the serial console.
//!
//! Commands (one per line): `run [-c CORES] PROG [ARGS...]` runs a program from the boot
//! image on each listed core (`-c 2,3`; default: the next core after the shell's) and waits
//! for all of them; `cores` lists online cores with their roles and locality; `objs` lists
//! the objects in this context's shares; `stat` shows per-core counters (`halts` and
//! `halted_ms`: how often and how long each core halted waiting for an interrupt); `sleep MS`
//! halts the shell's core for a while; `grant N [xc|tc|ac]`
//! and `release CORE|all` ask the core scheduler on core 0 for cores and give them back
//! (`sched=core0`); `help`; `halt` exits the shell (the kernel then checks for leaks and
//! powers off).
//!
//! A program listed on the shell's own core runs inside the shell's context
//! (`libos::exec::run_here`: one context per core, so there is no other way to run code
//! there); programs on other cores run in contexts of their own (`libos::exec::spawn`).
//! Bad input gets a one-line message and the shell keeps reading.
//!
//! Files: `ls`, `cat`, `df`, `mkdir`, `rmdir`, `rm`, `mv`, `ln`, `write`, `append`, `sync`,
//! `umount` use `libos::fs` on the first disk
//! (`cargo xtask run --disk IMG`), mounted on first use. One process holds a disk at a time, so
//! the shell syncs and lets go of it before `run` starts a program, and at `halt`.
#![no_std]
#![no_main]

extern crate alloc;

use abi::{CoreStats, LocalityEntry, ObjName, ObjType};
use alloc::string::String;
use alloc::vec::Vec;
use libos::{print, println, sys};

libos::main!(main);

const PROMPT: &str = "sh> ";
/// How long `run` waits for a program (10 minutes).
const RUN_TIMEOUT_MS: u64 = 600_000;

fn main(_args: &'static str) -> u64 {
    println!("sh: libos shell on core {}; `help` lists commands", libos::core_id());
    let mut line = String::new();
    print!("{PROMPT}");
    loop {
        let mut buf = [0u8; 64];
        // The core halts until a key arrives (the serial receive interrupt), no polling.
        let n = libos::console::read_blocking(&mut buf, 0);
        for &b in &buf[..n] {
            match b {
                b'\r' | b'\n' => {
                    println!();
                    let cmd = core::mem::take(&mut line);
                    if !run_line(cmd.trim()) {
                        println!("sh: halt");
                        return 0;
                    }
                    print!("{PROMPT}");
                }
                0x08 | 0x7f => {
                    if line.pop().is_some() {
                        print!("\x08 \x08");
                    }
                }
                0x20..=0x7e => {
                    if line.len() < 512 {
                        line.push(b as char);
                        // Echo, for a terminal (the serial line cannot tell us it is one).
                        print!("{}", b as char);
                    }
                }
                _ => {}
            }
        }
    }
}

/// Run one command line; false means `halt`.
fn run_line(line: &str) -> bool {
    let mut words = line.split_whitespace();
    let Some(cmd) = words.next() else { return true };
    let rest: Vec<&str> = words.collect();
    match cmd {
        "help" => help(),
        "halt" | "exit" => {
            fs_umount();
            return false;
        }
        "cores" => cores(),
        "objs" => objs(),
        "stat" => stat(),
        "sleep" => match rest.as_slice() {
            [ms] => match ms.parse::<u64>() {
                Ok(ms) if (1..=60_000).contains(&ms) => libos::time::sleep_ms(ms),
                _ => println!("sh: sleep MS: 1..=60000 milliseconds"),
            },
            _ => println!("sh: sleep MS"),
        },
        "run" => run(&rest),
        "grant" => grant(&rest),
        "release" => release(&rest),
        "ls" => fs_ls(&rest),
        "cat" => fs_cat(&rest),
        "df" => fs_df(),
        "mkdir" => fs_each("mkdir", &rest, libos::fs::mkdir),
        "rmdir" => fs_each("rmdir", &rest, libos::fs::rmdir),
        "rm" => fs_each("rm", &rest, libos::fs::unlink),
        "write" => fs_write(&rest, false),
        "ln" => match rest.as_slice() {
            ["-s", target, name] => {
                if fs_ready() {
                    if let Err(e) = libos::fs::symlink(target, name) {
                        println!("sh: ln -s {target} {name}: {}", e.as_str());
                    }
                }
            }
            [old, new] => {
                if fs_ready() {
                    if let Err(e) = libos::fs::link(old, new) {
                        println!("sh: ln {old} {new}: {}", e.as_str());
                    }
                }
            }
            _ => println!("sh: ln [-s] TARGET NAME"),
        },
        "mv" => match rest.as_slice() {
            [a, b] => {
                if fs_ready() {
                    if let Err(e) = libos::fs::rename(a, b) {
                        println!("sh: mv {a} {b}: {}", e.as_str());
                    }
                }
            }
            _ => println!("sh: mv OLD NEW"),
        },
        "append" => fs_write(&rest, true),
        "sync" => fs_sync(),
        "umount" => fs_umount(),
        other => println!("sh: unknown command `{other}`; try `help`"),
    }
    true
}

fn help() {
    println!("commands:");
    println!("  run [-c CORES] PROG [ARGS...]  run PROG from the boot image on each core in CORES (e.g. -c 0,1)");
    println!("  cores                          online cores, their roles and locality");
    println!("  objs                           objects in this context's shares");
    println!("  stat                           per-core counters");
    println!("  sleep MS                       halt this core for MS milliseconds (1..=60000)");
    println!("  grant N [xc|tc|ac]             ask the core scheduler (sched=core0) for N cores");
    println!("  release CORE|all               give granted cores back");
    println!("  ls [PATH]                      list a directory of the disk's ext2 file system (mounted on first use)");
    println!("  cat PATH                       print a file of the disk");
    println!("  df                             blocks and inodes used and free on the disk");
    println!("  mkdir DIR... / rmdir DIR...    make / remove (empty) directories");
    println!("  rm FILE...                     remove files");
    println!("  mv OLD NEW                     rename");
    println!("  ln [-s] TARGET NAME            hard (or symbolic) link");
    println!("  write FILE WORDS...            make FILE hold WORDS and a newline");
    println!("  append FILE WORDS...           add WORDS and a newline to the end of FILE");
    println!("  sync                           write the buffer cache back to the disk");
    println!("  umount                         sync and let go of the disk (`run` and `halt` do this first)");
    println!("  help                           this list");
    println!("  halt                           exit the shell (the kernel checks for leaks and powers off)");
}

fn ncores() -> u64 {
    sys::sys_info().map(|s| s.cores).unwrap_or(1)
}

fn cores() {
    let n = ncores();
    let mut loc = alloc::vec![LocalityEntry::default(); (n * n) as usize];
    let have_loc = sys::locality_get(&mut loc).is_ok();
    let me = libos::core_id();
    for c in 0..n {
        let role = sys::core_stats(c).map(|s| abi::role_name(s.role)).unwrap_or("?");
        let mut s = String::new();
        if have_loc {
            for o in 0..n {
                let e = loc[(c * n + o) as usize];
                use core::fmt::Write;
                let _ = write!(s, " {}:{}/{}", o, e.level, e.distance);
            }
        }
        let granted = match sys::core_stats(c).map(|s| s.granted_to) {
            Ok(0) | Err(_) => String::new(),
            Ok(owner) => alloc::format!(" granted to {owner:#x}"),
        };
        println!("core {c}: {role}{}{granted}  locality(core:level/distance){s}", if c == me { " (sh)" } else { "" });
    }
}

fn grant(args: &[&str]) {
    let role = match args.get(1).copied() {
        None => abi::GRANT_ROLE_ANY,
        Some("xc") => abi::ROLE_XC,
        Some("tc") => abi::ROLE_TC,
        Some("ac") => abi::ROLE_AC,
        Some(r) => return println!("sh: grant: unknown role `{r}` (xc, tc, ac)"),
    };
    let Some(n) = args.first().and_then(|n| n.parse::<usize>().ok()).filter(|&n| n > 0 && n < 256) else {
        return println!("sh: grant N [xc|tc|ac]: N is a number of cores");
    };
    let mut cores = alloc::vec![0u64; n];
    match sys::core_request(&mut cores, role, abi::NEAR_CALLER) {
        Ok(_) => println!("sh: granted cores {cores:?}"),
        Err(e) => println!("sh: grant: {}", e.as_str()),
    }
}

fn release(args: &[&str]) {
    let core = match args.first().copied() {
        Some("all") => abi::CORE_ALL,
        Some(c) => match c.parse::<u64>() {
            Ok(c) => c,
            Err(_) => return println!("sh: release CORE|all: `{c}` is not a core"),
        },
        None => return println!("sh: release CORE|all"),
    };
    match sys::core_release(core) {
        Ok(n) => println!("sh: released {n} core(s)"),
        Err(e) => println!("sh: release: {}", e.as_str()),
    }
}

fn type_name(t: u32) -> &'static str {
    match ObjType::from_u32(t) {
        Some(ObjType::Share) => "share",
        Some(ObjType::Segment) => "segment",
        Some(ObjType::AddressRange) => "range",
        Some(ObjType::Pcore) => "pcore",
        Some(ObjType::Device) => "device",
        Some(ObjType::Gate) => "gate",
        None => "?",
    }
}

fn objs() {
    let mut shares = [0u64; 1 + abi::MAX_CONTEXT_SHARES];
    let n = match sys::self_shares(&mut shares) {
        Ok(n) => n as usize,
        Err(e) => return println!("sh: self_shares: {}", e.as_str()),
    };
    for &s in &shares[..n] {
        let mut ids = alloc::vec![0u64; 1024];
        let k = match sys::share_list(s, &mut ids) {
            Ok(k) => k as usize,
            Err(e) => {
                println!("share {s:#x}: {}", e.as_str());
                continue;
            }
        };
        println!("share {s:#x}: {k} object(s)");
        for &o in &ids[..k] {
            let name = ObjName::new(s, o);
            let mut nb = [0u8; abi::MAX_NAME];
            let nl = sys::obj_get_name(name, &mut nb).unwrap_or(0) as usize;
            let nm = core::str::from_utf8(&nb[..nl.min(nb.len())]).unwrap_or("?");
            match sys::obj_stat(name) {
                Ok(st) => println!("  {o:#x} {:<8} {:<16} refs={} home=core {}", type_name(st.obj_type), nm, st.refs, st.home_core),
                Err(e) => println!("  {o:#x} {nm}: {}", e.as_str()),
            }
        }
    }
}

fn stat() {
    println!("core  role  syscalls  soft_faults  cow_faults  flushes  ipis_sent  ipis_recv  contexts  switches  lock_waits  lock_spin_us  sched_msgs  halts  halted_ms");
    let tpm = libos::time::tsc_per_ms().max(1);
    for c in 0..ncores() {
        let s: CoreStats = match sys::core_stats(c) {
            Ok(s) => s,
            Err(e) => {
                println!("{c:>4}  {}", e.as_str());
                continue;
            }
        };
        println!(
            "{c:>4}  {:<4}  {:>8}  {:>11}  {:>10}  {:>7}  {:>9}  {:>9}  {:>8}  {:>8}  {:>10}  {:>12}  {:>10}  {:>5}  {:>9}",
            abi::role_name(s.role),
            s.syscalls,
            s.soft_faults,
            s.cow_faults,
            s.tlb_flushes_local,
            s.shootdown_ipis_sent,
            s.shootdown_ipis_received,
            s.contexts_started,
            s.context_switches,
            s.lock_spin_waits,
            s.lock_spin_cycles * 1000 / tpm,
            s.sched_messages,
            s.halts,
            s.halted_cycles / tpm
        );
    }
}

/// Parse `2,3` into core numbers (each online, no repeats).
fn parse_cores(s: &str) -> Result<Vec<u64>, ()> {
    let n = ncores();
    let mut out = Vec::new();
    for w in s.split(',') {
        let c: u64 = w.trim().parse().map_err(|_| ())?;
        if c >= n || out.contains(&c) {
            return Err(());
        }
        out.push(c);
    }
    if out.is_empty() {
        return Err(());
    }
    Ok(out)
}

fn describe(code: u64) -> &'static str {
    match code {
        0 => "",
        libos::PANIC_EXIT_CODE => " (panic)",
        c if c == abi::EXIT_FAULT_BASE + 14 => " (page fault: out of memory or a bad address)",
        c if c >= abi::EXIT_FAULT_BASE => " (killed by a fault)",
        _ => "",
    }
}

fn run(args: &[&str]) {
    // The program may want the disk: one process holds it at a time.
    fs_umount();
    let me = libos::core_id();
    let (list, rest) = match args {
        ["-c", l, rest @ ..] => match parse_cores(l) {
            Ok(v) => (v, rest),
            Err(()) => return println!("sh: bad core list `{l}` (want numbers below {} separated by commas, no repeats)", ncores()),
        },
        ["-c"] => return println!("sh: -c needs a core list"),
        rest => (alloc::vec![(me + 1) % ncores()], rest),
    };
    let Some((&prog, pargs)) = rest.split_first() else { return println!("sh: run: which program?") };
    let pargs = pargs.join(" ");
    // Does the program exist? (one line for a typo instead of one per core)
    match sys::initrd_get(libos::ctx::ctx().root_share, prog) {
        Ok(seg) => {
            let _ = sys::share_delobj(ObjName::new(libos::ctx::ctx().root_share, seg));
        }
        Err(abi::Error::NotFound) => return println!("sh: no such program `{prog}`"),
        Err(e) => return println!("sh: {prog}: {}", e.as_str()),
    }
    // Start the other cores first, then run on our own core (if listed), then wait.
    let mut running = Vec::new();
    for &c in list.iter().filter(|&&c| c != me) {
        match libos::exec::spawn(c, prog, &pargs) {
            Ok(r) => running.push(r),
            Err(e) => println!("sh: {prog} on core {c}: cannot start: {}", e.as_str()),
        }
    }
    if list.contains(&me) {
        match libos::exec::run_here(prog, &pargs) {
            Ok(code) => println!("sh: {prog} on core {me} exited with code {code}{}", describe(code)),
            Err(e) => println!("sh: {prog} on core {me}: cannot run: {}", e.as_str()),
        }
    }
    for mut r in running {
        match r.wait(RUN_TIMEOUT_MS) {
            Ok(code) => println!("sh: {prog} on core {} exited with code {code}{}", r.core, describe(code)),
            Err(e) => println!("sh: {prog} on core {}: {}", r.core, e.as_str()),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Files

fn fs_ready() -> bool {
    match libos::fs::mount() {
        Ok(()) => true,
        Err(e) => {
            println!("sh: disk: {} ({})", e.as_str(), e.kind());
            false
        }
    }
}

fn fs_ls(rest: &[&str]) {
    if !fs_ready() {
        return;
    }
    let path = rest.first().copied().unwrap_or("/");
    let entries = match libos::fs::readdir(path) {
        Ok(v) => v,
        Err(e) => return println!("sh: ls {path}: {}", e.as_str()),
    };
    for e in entries {
        let name = core::str::from_utf8(&e.name).unwrap_or("?");
        let full = alloc::format!("{}/{}", path.trim_end_matches('/'), name);
        match libos::fs::stat(&full) {
            Ok(st) => {
                let kind = if st.mode & libos::fs::S_IFMT == libos::fs::S_IFDIR { 'd' } else { '-' };
                println!("{kind} {:>10} {name}", st.size);
            }
            Err(er) => println!("? {:>10} {name} ({})", "", er.as_str()),
        }
    }
}

fn fs_cat(rest: &[&str]) {
    if !fs_ready() {
        return;
    }
    let Some(path) = rest.first() else { return println!("sh: cat PATH") };
    let fd = match libos::fs::open(path, libos::fs::O_RDONLY) {
        Ok(fd) => fd,
        Err(e) => return println!("sh: cat {path}: {}", e.as_str()),
    };
    let mut buf = [0u8; 4096];
    loop {
        match libos::fs::read(fd, &mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let _ = sys::console_write(&buf[..n]);
            }
            Err(e) => {
                println!("sh: cat {path}: {}", e.as_str());
                break;
            }
        }
    }
    let _ = libos::fs::close(fd);
}

fn fs_df() {
    if !fs_ready() {
        return;
    }
    match libos::fs::df() {
        Ok(u) => {
            let kib = |b: u64| b * u.block_size / 1024;
            println!("blocks: {} KiB total, {} KiB used, {} KiB free; inodes: {} total, {} free", kib(u.blocks), kib(u.blocks - u.free_blocks), kib(u.free_blocks), u.inodes, u.free_inodes);
        }
        Err(e) => println!("sh: df: {}", e.as_str()),
    }
}

fn fs_sync() {
    if !libos::fs::mounted() {
        return println!("sh: sync: nothing mounted");
    }
    if let Err(e) = libos::fs::sync() {
        println!("sh: sync: {}", e.as_str());
    }
}

fn fs_umount() {
    if let Err(e) = libos::fs::unmount() {
        println!("sh: umount: {}", e.as_str());
    }
}

fn fs_each(what: &str, paths: &[&str], f: fn(&str) -> Result<(), libos::fs::FsError>) {
    if paths.is_empty() {
        return println!("sh: {what} PATH...");
    }
    if !fs_ready() {
        return;
    }
    for p in paths {
        if let Err(e) = f(p) {
            println!("sh: {what} {p}: {}", e.as_str());
        }
    }
}

fn fs_write(rest: &[&str], append: bool) {
    let Some((path, words)) = rest.split_first() else { return println!("sh: write|append FILE WORDS...") };
    if !fs_ready() {
        return;
    }
    use libos::fs::{O_APPEND, O_CREAT, O_TRUNC, O_WRONLY};
    let flags = O_WRONLY | O_CREAT | if append { O_APPEND } else { O_TRUNC };
    let fd = match libos::fs::open(path, flags) {
        Ok(fd) => fd,
        Err(e) => return println!("sh: write {path}: {}", e.as_str()),
    };
    let mut text = words.join(" ");
    text.push('\n');
    match libos::fs::write(fd, text.as_bytes()) {
        Ok(n) if n == text.len() => {}
        Ok(n) => println!("sh: write {path}: only {n} of {} bytes (disk full)", text.len()),
        Err(e) => println!("sh: write {path}: {}", e.as_str()),
    }
    let _ = libos::fs::close(fd);
}
