//! Metis on Linux, the same library as on this system (mapreduce/src/lib.rs) with pthreads in
//! one address space (bench/src/metis_linux.rs).
//!
//! In the baseline guest it is `/init` (pid 1): it mounts /proc, takes its words from the
//! kernel command line word `metis=APP:key=value:...` (`:` for spaces; the words of
//! mapreduce/src/cli.rs), reads `input=PATH` from the initramfs, runs, prints the same lines
//! as `metis` on ours, and powers the machine off. On a host it takes the words as
//! arguments: `cargo run -p bench --release --bin metis-linux -- wc input=FILE`.

#[cfg(target_os = "linux")]
fn main() {
    use mapreduce::cli::{self, Input};
    use std::io::Write;

    let as_init = std::process::id() == 1;
    let words = if as_init {
        // SAFETY: plain mount(2) with NUL-terminated strings.
        unsafe { libc::mount(c"proc".as_ptr(), c"/proc".as_ptr(), c"proc".as_ptr(), 0, std::ptr::null()) };
        let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
        cmdline.split_whitespace().find_map(|w| w.strip_prefix("metis=")).unwrap_or("").replace(':', " ")
    } else {
        std::env::args().skip(1).collect::<Vec<_>>().join(" ")
    };
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    let mut out = |b: &[u8]| {
        let _ = lock.write_all(b);
    };
    let ok = match cli::parse(&words) {
        Err(e) => {
            cli::print_error(&mut out, &e);
            false
        }
        Ok(mut o) => {
            // One address space, every arena a private mapping: `threads` (transparent huge
            // pages as the kernel's default) or `nothp` (4 KiB pages).
            let p = bench::linux::Linux::new(as_init);
            let mut env = bench::metis_linux::LinuxEnv::new(&p, 0);
            env.thp = o.layout != "nothp";
            o.layout = if env.thp { "threads" } else { "threads-nothp" };
            let input: Result<&[u8], String> = match o.input {
                Input::File(path) => match std::fs::read(path) {
                    // Kept for the rest of the program (it is /init and exits after one run).
                    Ok(v) => Ok(Vec::leak(v)),
                    Err(e) => Err(format!("cannot read {path}: {e}")),
                },
                Input::Generated { size, seed } => mapreduce::Env::text(&env, size as usize, seed).map_err(|e| format!("{e}")),
            };
            match input {
                Ok(input) => cli::run_and_print(&env, &o, input, &mut out, None),
                Err(e) => {
                    cli::print_error(&mut out, &e);
                    false
                }
            }
        }
    };
    let _ = std::io::stdout().flush();
    if as_init {
        // SAFETY: pid 1 powering the machine off after its output is flushed.
        unsafe {
            libc::sync();
            libc::reboot(libc::RB_POWER_OFF);
        }
    }
    std::process::exit(if ok { 0 } else { 1 });
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("metis-linux runs on Linux only");
    std::process::exit(2);
}
