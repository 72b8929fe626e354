//! The `linux-abi` test suite: the project's Linux test programs (linux/progs/hello.c and
//! abi_*.c, built with musl-gcc -static) run on this system through the Linux personality
//! (`ours::run_with`), each checked for its standard output, exit status and what the
//! runtime said on the console (the leak check; an unimplemented call reported once). Each
//! program runs twice in its boot: the second run's leak check is exact (`linuxrt --runs`).

use std::path::Path;
use std::time::Duration;

use super::{ours, progs, ExecRequest};
use crate::host::outcome::TestTally;

struct Case {
    prog: &'static str,
    args: &'static [&'static str],
    /// Extra files: (guest path, contents).
    files: &'static [(&'static str, &'static [u8])],
    stdin: &'static [u8],
    status: i32,
    /// Lines standard output must hold, in order (each a whole line).
    stdout: &'static [&'static str],
    /// Substrings the console must hold, each with how many times (exactly).
    console: &'static [(&'static str, usize)],
    /// Run only the file's first this many bytes (0: all of it): a refused load.
    truncate: usize,
}

const INPUT: &[u8] = b"hello world from the image\n";

const CASES: &[Case] = &[
    Case {
        prog: "hello",
        args: &["one", "two words"],
        files: &[],
        stdin: b"",
        status: 3,
        stdout: &["hello from a static Linux program", "argv[0]=/bin/hello", "argv[1]=one", "argv[2]=two words"],
        console: &[],
        truncate: 0,
    },
    Case {
        prog: "abi_args",
        args: &["x"],
        files: &[],
        stdin: b"",
        status: 0,
        stdout: &["argc=2", "argv[0]=/bin/abi_args", "argv[1]=x", "ABI_TEST=(unset)", "envc=0", "hwcap has fpu: 1", "auxv ok"],
        console: &[],
        truncate: 0,
    },
    Case { prog: "abi_tls", args: &[], files: &[], stdin: b"", status: 0, stdout: &["counter=42 zeroed[0]=0 zeroed[99]=7", "arch_prctl=0 self-pointer=yes below-tp=yes"], console: &[], truncate: 0 },
    Case { prog: "abi_malloc", args: &[], files: &[], stdin: b"", status: 0, stdout: &["malloc ok: 2000 small blocks, one of 16 MiB"], console: &[], truncate: 0 },
    // 64 rounds of fork + _exit + wait4, each checking the child's status: the second run's
    // exact leak check says every child's context, memory and table slot came back.
    Case { prog: "abi_fork", args: &["64"], files: &[], stdin: b"", status: 0, stdout: &["workload name=fork_exit_wait ops=64"], console: &[], truncate: 0 },
    // The same from a process with a second thread, which reads a word the parent writes
    // after each fork (a copy-on-write break): it must see the parent's value each time,
    // never the old page (the child's after the break) or the child's write.
    Case {
        prog: "abi_fork",
        args: &["16", "threads"],
        files: &[],
        stdin: b"",
        status: 0,
        stdout: &["reads of the parent's word through the second thread: 0 stale", "workload name=fork_exit_wait ops=16"],
        console: &[],
        truncate: 0,
    },
    Case {
        prog: "abi_file",
        args: &[],
        files: &[("/data/input.txt", INPUT)],
        stdin: b"",
        status: 0,
        stdout: &[
            "size=27 regular=1",
            "read 27: hello world from the image",
            "pread=5 'world' lseek=27",
            "missing: No such file or directory",
            "cwd=/data",
            "relative open ok",
            "getdents64: 3 names, input.txt found",
        ],
        console: &[],
        truncate: 0,
    },
    Case {
        prog: "abi_enosys",
        args: &[],
        files: &[],
        stdin: b"",
        status: 0,
        stdout: &["syscall(999) = -1, errno ENOSYS", "syscall(999) = -1, errno ENOSYS", "still running"],
        // Once per program: two runs, so twice in the boot.
        console: &[("unimplemented system call (no such call) (999): -ENOSYS", 2), ("unimplemented system call acct (163): -ENOSYS", 2)],
        truncate: 0,
    },
    // A file cut inside its program headers: refused with the reason, status 127, nothing left.
    Case {
        prog: "hello",
        args: &[],
        files: &[],
        stdin: b"",
        status: 127,
        stdout: &[],
        console: &[("/bin/hello: truncated ELF file (headers or segments run past its end)", 2)],
        truncate: 200,
    },
    Case {
        prog: "abi_efault",
        args: &[],
        files: &[],
        stdin: b"",
        status: 0,
        stdout: &[
            "write(bad) EFAULT",
            "write(kernel half) EFAULT",
            "read(bad) EFAULT",
            "stat(bad path) EFAULT",
            "stat(bad buf) EFAULT",
            "openat(bad path) EFAULT",
            "uname(bad) EFAULT",
            "efault done",
        ],
        console: &[],
        truncate: 0,
    },
];

fn check(c: &Case, out: &super::ExecOutput) -> Vec<String> {
    let mut bad = Vec::new();
    if out.status != c.status {
        bad.push(format!("status {} (expected {})", out.status, c.status));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    let mut at = 0;
    for want in c.stdout {
        match lines[at..].iter().position(|l| l == want) {
            Some(i) => at += i + 1,
            None => bad.push(format!("standard output lacks the line {want:?} (in order)")),
        }
    }
    for (s, n) in c.console {
        let k = out.console.matches(s).count();
        if k != *n {
            bad.push(format!("console has {s:?} {k} times (expected {n})"));
        }
    }
    // Two runs in the boot: the second run's leak check is exact.
    let checks: Vec<&str> = out.console.lines().filter(|l| l.starts_with("linuxrt: leak check")).collect();
    if checks.len() != 2 || !checks.iter().all(|l| l.ends_with(": ok")) || !checks[1].contains("exact") {
        bad.push(format!("leak checks: {checks:?} (expected two, both ok, the second exact)"));
    }
    if !bad.is_empty() {
        bad.push(format!("standard output:\n{text}\nstandard error:\n{}\nconsole:\n{}", String::from_utf8_lossy(&out.stderr), out.console));
    }
    bad
}

pub fn ci_tests(kernel: &Path, initrd: &Path) -> Result<TestTally, String> {
    let mut t = TestTally::default();
    let dir = crate::host::env::target_dir().join("linux-exec").join("abi-files");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for c in CASES {
        let mut program = progs::build(c.prog, &[])?;
        if c.truncate > 0 {
            let bytes = std::fs::read(&program).map_err(|e| format!("{}: {e}", program.display()))?;
            let cut = dir.join(c.prog);
            std::fs::write(&cut, &bytes[..c.truncate.min(bytes.len())]).map_err(|e| format!("{}: {e}", cut.display()))?;
            program = cut;
        }
        let mut files = Vec::new();
        for (i, (guest, bytes)) in c.files.iter().enumerate() {
            let host = dir.join(format!("{}-{i}", c.prog));
            std::fs::write(&host, bytes).map_err(|e| format!("{}: {e}", host.display()))?;
            files.push((guest.to_string(), host));
        }
        let req = ExecRequest { program, args: c.args.iter().map(|s| s.to_string()).collect(), files, stdin: c.stdin.to_vec(), smp: 1, disk: None, timeout: Duration::from_secs(60), net: None };
        match ours::run_times(kernel, initrd, &req, 2) {
            Ok(out) => {
                let bad = check(c, &out);
                if bad.is_empty() {
                    println!("   {}{}: ok", c.prog, if c.truncate > 0 { " (truncated)" } else { "" });
                    t.passed += 1;
                } else {
                    println!("   FAILED: {}: {}", c.prog, bad.join("; "));
                    t.failed += 1;
                }
            }
            Err(e) => {
                println!("   FAILED: {}: {e}", c.prog);
                t.failed += 1;
            }
        }
    }
    Ok(t)
}
