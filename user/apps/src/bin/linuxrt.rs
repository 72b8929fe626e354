//! The Linux personality's runtime: runs one unmodified static x86-64 Linux program from the
//! root file system inside this context (user/libos/src/linux, docs/linux-abi.md), then
//! checks that the kernel's free pages and objects are back to their counts from before it.
//!
//! `linuxrt [--framed] [--stdin FILE] [--env NAME=VALUE]... PATH [ARGS...]`
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

fn unescape(s: &str) -> String {
    s.replace("%20", " ").replace("%25", "%")
}

fn main(args: &'static str) -> u64 {
    let mut words = args.split_whitespace();
    let mut framed = false;
    let mut stdin_path = None;
    let mut envp = Vec::new();
    let mut path = None;
    while let Some(w) = words.next() {
        match w {
            "--framed" => framed = true,
            "--stdin" => stdin_path = words.next(),
            "--env" => envp.extend(words.next().map(unescape)),
            _ => {
                path = Some(unescape(w));
                break;
            }
        }
    }
    let Some(path) = path else {
        libos::println!("linuxrt: usage: linuxrt [--framed] [--stdin FILE] [--env NAME=VALUE]... PATH [ARGS...]");
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
    let before = libos::sys::sys_info().ok();
    let opts = libos::linux::Options { path: &path, argv, envp, stdin, framed };
    let status = match libos::linux::run(&opts) {
        Ok(o) => {
            libos::println!("linuxrt: {} made {} system calls", path, o.calls);
            o.status
        }
        Err(msg) => {
            libos::println!("linuxrt: {msg}");
            127
        }
    };
    drop(opts);
    // Everything the program had is gone: the kernel's counts are what they were.
    let after = libos::sys::sys_info().ok();
    match (before, after) {
        (Some(b), Some(a)) => {
            let pages = |s: &abi::SysInfo| s.free_pages as i64 + s.slab_pages;
            let ok = a.live_kobjects == b.live_kobjects && pages(&a) >= pages(&b);
            libos::println!(
                "linuxrt: leak check: kernel objects {} -> {}, free pages {} -> {}: {}",
                b.live_kobjects,
                a.live_kobjects,
                pages(&b),
                pages(&a),
                if ok { "ok" } else { "LEAK" }
            );
        }
        _ => libos::println!("linuxrt: leak check: sys_info failed"),
    }
    libos::println!("linuxrt: exit status {status}");
    if framed {
        libos::console::write_all(alloc::format!("\x1eS{status}\n").as_bytes());
    }
    let _ = libos::fs::unmount();
    status
}
