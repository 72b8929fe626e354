//! The Linux personality's runtime: runs one unmodified static x86-64 Linux program from the
//! root file system inside this context (user/libos/src/linux, docs/linux-abi.md), then
//! checks that the kernel's free pages and objects are back to their counts from before it.
//!
//! `linuxrt [--framed] [--net] [--arm-inject] [--stdin FILE] [--env NAME=VALUE]... [--cwd DIR] [--runs N] PATH [ARGS...]`
//!
//! `--arm-inject` arms the allocation fault injection the kernel's command line configured
//! (`inject=... inject_from=program`) just before the program's first instruction (the Linux
//! fuzzer's injection runs, docs/fuzz.md).
//!
//! `--mark` executes the plugins' region markers (start on every vCPU, stop on every vCPU)
//! around the program's run, so a QEMU plugin measures exactly the Linux program with the
//! runtime's work for it (`cargo xtask exec --audit`, docs/linux-abi.md "Sharing audit").
//!
//! `--net` brings up the network card for the program's sockets (docs/linux-abi.md, "Sockets
//! and readiness").
//!
//! Without `--framed` and `--stdin`, the program's standard input is the serial console (what
//! is typed there; a read waits for it): the kernel runs a first program given by path
//! (`init=/bin/busybox -- sh`) as `linuxrt PATH ARGS`.
//!
//! `--runs N` runs the program N times (at most 10), each with its own leak check: from the
//! second on the check is exact (see `run_once`).
//!
//! Arguments are split at spaces; `%20` in one stands for a space and `%25` for `%`.
//! `--framed`: standard output and error go to the host as records (`linux::out`), and the
//! status as `\x1eS<status>\n` (what `cargo xtask exec` reads). The lines
//! `linuxrt: exit status N` and `linuxrt: leak check ...` are for people and tests.
//! Linked at `layout::SH_IMAGE_BASE` (user/link-sh.ld) so the program's image fits below.
#![no_std]
#![no_main]
#![deny(unsafe_code)]

extern crate alloc;

use alloc::string::String;
use alloc::vec::Vec;

libos::main!(main);

/// Pages a first run may leave with the runtime: page tables for the program's regions and
/// name-cache pages (see `run_once`).
const FIRST_RUN_SLACK: i64 = 64;

fn unescape(s: &str) -> String {
    s.replace("%20", " ").replace("%25", "%")
}

/// Run the program once and check the kernel's counts after it; returns its status.
fn run_once(opts: &libos::linux::Options, run: u64) -> u64 {
    let cache_pages = || libos::fs::cache_stats().map(|(c, _)| c.pages as i64).unwrap_or(0);
    let before = libos::sys::sys_info().ok();
    let cache_before = cache_pages();
    let status = match libos::linux::run(opts) {
        Ok(o) => {
            libos::println!("linuxrt: {} made {} system calls", opts.path, o.calls);
            let (sleeps, woken, card) = libos::linux::poll::wait_counts();
            libos::println!("linuxrt: readiness waits: {sleeps} sleeps, {woken} ended by a wake, {card} on the card");
            o.status
        }
        Err(msg) => {
            libos::println!("linuxrt: {msg}");
            127
        }
    };
    // Everything the program had is gone: the kernel's counts are what they were. Every
    // object it had (image, stack, brk and mmap segments, its share) is a kernel object:
    // that count is exact. Pages: the buffer cache's growth (the program's file, the
    // directories it read) is the runtime's and counted back. On a first run the runtime's
    // address range also gains page tables for the program's regions, and the file
    // system's name cache pages for the names it looked up, which stay for later runs:
    // `FIRST_RUN_SLACK` pages. A later run of the same program (`--runs 2`) reuses them all,
    // so it is checked exactly.
    let after = libos::sys::sys_info().ok();
    let cache_grew = cache_pages() - cache_before;
    let slack = if run == 1 { FIRST_RUN_SLACK } else { 0 };
    match (before, after) {
        (Some(b), Some(a)) => {
            let pages = |s: &abi::SysInfo| s.free_pages as i64 + s.slab_pages;
            let ok = a.live_kobjects == b.live_kobjects && pages(&a) + cache_grew + slack >= pages(&b);
            libos::println!(
                "linuxrt: leak check (run {run}{}): kernel objects {} -> {}, free pages {} -> {} (+{} in the buffer cache): {}",
                if run == 1 { ", first" } else { ", exact" },
                b.live_kobjects,
                a.live_kobjects,
                pages(&b),
                pages(&a),
                cache_grew,
                if ok { "ok" } else { "LEAK" }
            );
        }
        _ => libos::println!("linuxrt: leak check: sys_info failed"),
    }
    status
}

/// Execute the plugins' region marker `m` (3: start on every vCPU, 4: stop on every vCPU).
#[allow(unsafe_code)]
fn marker(m: u8) {
    // SAFETY: the kernel's I/O bitmap lets user mode write the marker port; the write has no
    // effect outside a plugin run.
    unsafe { bench::harness::marker_out(m) };
}

fn main(args: &'static str) -> u64 {
    let mut words = args.split_whitespace();
    let mut framed = false;
    let mut net = false;
    let mut stdin_path = None;
    let mut envp = Vec::new();
    let mut path = None;
    let mut runs = 1;
    let mut cwd = String::from("/");
    let mut arm_injection = false;
    let mut mark = false;
    while let Some(w) = words.next() {
        match w {
            "--framed" => framed = true,
            "--net" => net = true,
            "--arm-inject" => arm_injection = true,
            "--mark" => mark = true,
            "--stdin" => stdin_path = words.next(),
            "--env" => envp.extend(words.next().map(unescape)),
            "--cwd" => cwd = words.next().map(unescape).unwrap_or_default(),
            "--runs" => runs = words.next().and_then(libos::parse_u64).unwrap_or(0).clamp(1, 10),
            _ => {
                path = Some(unescape(w));
                break;
            }
        }
    }
    let Some(path) = path else {
        libos::println!("linuxrt: usage: linuxrt [--framed] [--net] [--arm-inject] [--stdin FILE] [--env NAME=VALUE]... [--cwd DIR] [--runs N] PATH [ARGS...]");
        return 2;
    };
    let mut argv = alloc::vec![path.clone()];
    argv.extend(words.map(unescape));
    if let Err(e) = libos::fs::mount() {
        libos::println!("linuxrt: cannot mount the root file system: {e:?}");
        return 1;
    }
    let stdin = match stdin_path {
        Some(p) => match libos::fs::read_all(p, 64 << 20) {
            Ok(b) => b,
            Err(e) => {
                libos::println!("linuxrt: cannot read standard input {p}: {e:?}");
                return 1;
            }
        },
        None => Vec::new(),
    };
    // The program's descriptors live in this context's private descriptor table, whose share
    // is made on first use and kept for the context: made here, before the first run's leak
    // check counts the kernel objects.
    if let Err(e) = libos::fd::table(libos::fd::Scope::Private) {
        libos::println!("linuxrt: cannot make the private descriptor table: {e:?}");
        return 1;
    }
    if !cwd.starts_with('/') {
        libos::println!("linuxrt: --cwd {cwd}: not an absolute path");
        return 2;
    }
    // Unframed with no --stdin (the first program of a boot, `init=/PATH`): standard input is
    // the console, as a terminal is.
    let console_in = !framed && stdin_path.is_none();
    let opts = libos::linux::Options { path: &path, argv, envp, stdin, console_in, framed, cwd, net, arm_injection };
    // The descriptor tables the program's descriptors go in: the private one, and the
    // process-wide one (a threaded program's, from its first `clone`: its threads are
    // contexts of their own). Each is a share (and memory) the runtime makes on first use and
    // keeps: made here, before the leak check's first count, they are the runtime's and not
    // counted as the program's.
    for scope in [libos::fd::Scope::Private, libos::fd::Scope::Process] {
        if let Err(e) = libos::fd::table(scope) {
            libos::println!("linuxrt: cannot make the descriptor table ({scope:?}): {e:?}");
            return 1;
        }
    }
    let mut status = 0;
    for run in 1..=runs {
        if mark {
            marker(3);
        }
        status = run_once(&opts, run);
        if mark {
            marker(4);
        }
    }
    drop(opts);
    libos::println!("linuxrt: exit status {status}");
    if framed {
        libos::console::write_all(alloc::format!("\x1eS{status}\n").as_bytes());
    }
    let _ = libos::fs::unmount();
    status
}
