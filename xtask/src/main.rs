//! `cargo xtask`: the one host tool. Builds the kernel, boots it under QEMU (always TCG),
//! runs the test matrix, builds the ISO and runs benchmarks.

// The library OS's ext2 reader, compiled into `fs` unchanged, names `alloc::` paths.
extern crate alloc;

mod bench;
mod commute;
mod boot_bench;
mod env;
mod fs;
mod fuzz;
mod gdb;
mod iso;
mod ksyms;
mod linux;
mod net;
mod metis;
mod mutants;
mod percore_tasks;
mod plugins;
mod progress;
mod qemu;
mod test;
mod user;
mod webd;

use std::process::ExitCode;

/// Pass, fail and skip counts accumulated across the parts of `cargo xtask test`. A skip is
/// a test that reported it could not run under its boot and whose suite declared it may skip
/// there; an undeclared skip is counted as a failure (test.rs, docs/testing.md).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TestTally {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

impl TestTally {
    /// One passed check.
    pub const PASS: TestTally = TestTally { passed: 1, failed: 0, skipped: 0 };
    /// One failed check.
    pub const FAIL: TestTally = TestTally { passed: 0, failed: 1, skipped: 0 };

    pub fn add(&mut self, other: TestTally) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.skipped += other.skipped;
    }
}

const HELP: &str = "\
cargo xtask <command> [options]

Commands:
  run      Build the kernel and boot it under QEMU (TCG); returns when the kernel halts.
           --smp N          virtual CPUs, 1..=255 (default 2)
           --mem SIZE       guest memory, e.g. 512M, 2G (default 512M)
           --numa NODES     split cores and memory evenly over NODES NUMA nodes
           --cmdline \"...\"  kernel command line (e.g. \"topology\")
           --cpu MODEL      QEMU -cpu model (default max)
           --iso            boot the GRUB ISO instead of -kernel
           --uefi           with --iso: boot under OVMF instead of SeaBIOS
           --timeout SECS   kill QEMU after SECS seconds (default: none)
           --net            add a virtio-net NIC on QEMU's restricted user-mode network
                            (guest 10.0.2.15/24); forwards a free port on 127.0.0.1 to guest
                            port 80 unless --hostfwd is given, and prints
                            `net: 127.0.0.1:PORT -> guest:80`
           --disk IMG       attach the raw image IMG as a virtio-blk disk (default: none)
           --hostfwd H:G    forward 127.0.0.1:H on the host to guest port G (repeatable;
                            implies --net)
           --gdb [PORT]     QEMU's gdb stub on 127.0.0.1:PORT (default 1234), stopped before the
                            first instruction; prints the gdb command line that loads the
                            kernel's symbols and runs to kernel_entry (docs/boot.md, Debugging)
  test     Host `cargo test`, loom model checks, plugin tests, then every test boot: the in-kernel
           tests at 1, 2, 4, 8 vCPUs and over 2 NUMA nodes, the user-program suites (each booted
           with the roles and options its tests need), the shell, fuzz, network, files, Metis,
           large and broken boots, the ISO. Ends with `N passed, N failed, N skipped` and the
           names of the suites that failed (docs/testing.md).
           --smp LIST       vCPU counts for the in-kernel test boots (default 1,2,4,8)
           --host-only      skip the QEMU boots
           --only PATTERN   run only the suites whose name contains PATTERN (repeatable), e.g.
                            --only roletest --only \"kernel smp=4\"
           --list           print the suites' names and what each declares, run nothing
  iso      Build a GRUB Multiboot2 ISO (BIOS and UEFI) at target/os.iso (--out PATH)
  bench    Benchmarks: `bench boot [--smp 2,16,64]`, `bench percore`
  commute  The commutativity checker: every modelled system-call pair on two cores under the
           sharing audit (`cargo xtask commute help`, docs/commute.md)
  plugin   QEMU measurement plugins (see `cargo xtask plugin help`)
  cachesim, audit   short for `plugin cachesim`, `plugin audit`
  linux    Linux baseline (see `cargo xtask linux help`)
  net      Network host side: `net load` (the TCP load generator; `cargo xtask net help`)
  webd     webd's host side: `webd load` (HTTP load generator), `webd check` (bad input), `webd run
           --system ours|linux --mode M --files 8x1M [--check] [--load \"...\"]` (`cargo xtask webd help`)
  fs       ext2 images: `fs mkimage DIR IMG [--size S]`, `fs check IMG` (e2fsprogs), `fs ls|cat IMG
           PATH`, `fs get IMG PATH OUT` (our reader) (`cargo xtask fs help`)
  metis    Metis MapReduce: `metis wc|wri|wrmem --input FILE --out FILE [--smp N] [--system ours|linux]
           [--layout per-core|shared|private] [--check]` (`cargo xtask metis --help`)
  fuzz     System-call fuzzer on every core: --calls N --seed S --smp K --inject SPEC --planted-bug
           --scratch-disk (a blank disk: block device objects and disk requests too)
  soak     Fuzz (with and without injection) and the benchmark programs in turns: --minutes M --smp K
  mutants  Mutation testing (not part of `test`; takes a while): applies each named mutation of the
           catalog (xtask/src/mutants/catalog.rs) to a scratch copy of the tree, builds it, runs
           the suites that should catch it, prints `N killed, N survived, N unviable`; fails if
           any survived (docs/testing.md). --only NAME,...  --list  --keep  --no-baseline
  build    Build the kernel only (--all: and the program archive)
  help     This text
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprint!("{HELP}");
        return ExitCode::from(2);
    };
    let rest = &args[1..];
    let result = match cmd.as_str() {
        "run" => qemu::run_command(rest),
        "test" => test::run(rest),
        "iso" => iso::command(rest),
        "build" => match rest.first().map(String::as_str) {
            None => env::build_kernel().map(|p| println!("{}", p.display())),
            Some("--all") => env::build_kernel().and_then(|k| user::build_initrd().map(|i| println!("{}\n{}", k.display(), i.display()))),
            Some(other) => Err(format!("build: unknown option `{other}` (--all builds the program archive too)")),
        },
        "bench" => match rest.first().map(String::as_str) {
            Some("boot") => boot_bench::run(&rest[1..]),
            Some("percore") => percore_tasks::bench(&rest[1..]),
            Some(_) | None => bench::run(rest),
        },
        "fuzz" => fuzz::main(rest),
        "commute" => commute::main(rest),
        "soak" => fuzz::soak(rest),
        "mutants" => mutants::main(rest),
        "plugin" => plugins::main(rest),
        // The short names for the two measurement commands.
        "cachesim" | "audit" => {
            let mut v = vec![cmd.clone()];
            v.extend(rest.iter().cloned());
            plugins::main(&v)
        }
        "linux" => linux::main(rest),
        "net" => net::main(rest),
        "fs" => fs::main(rest),
        "metis" => metis::main(rest),
        "webd" => webd::main(rest),
        "help" | "-h" | "--help" => {
            print!("{HELP}");
            Ok(())
        }
        other => Err(format!("unknown command `{other}`; try `cargo xtask help`")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}
