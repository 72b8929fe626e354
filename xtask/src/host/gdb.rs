//! `cargo xtask run --gdb [PORT]`: QEMU's gdb stub on 127.0.0.1:PORT (never another
//! address), the CPUs stopped before the first instruction (`-S`), and the one `gdb` command
//! line that loads the kernel's symbols, connects, and runs to the kernel's Rust entry
//! (docs/boot.md, "Debugging"). The `gdb-stub` test suite boots with the same arguments and
//! speaks the gdb remote protocol itself (no gdb needed): it reads the reset vector, sets a
//! hardware breakpoint at `kernel_entry`, continues, and checks that the CPU stopped there.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The port `--gdb` without a value listens on (gdb's and QEMU's customary one); cli.rs
/// spells it as `default_missing_value` (clap takes a string there), a test checks they agree.
#[cfg(test)]
pub const DEFAULT_PORT: u16 = 1234;

/// The kernel's first Rust function (boot.rs calls it after the switch to long mode): where
/// the printed command stops.
pub const ENTRY_SYMBOL: &str = "kernel_entry";

/// QEMU's arguments for the stub: listen on 127.0.0.1:PORT only, start stopped.
pub fn qemu_args(port: u16) -> Vec<String> {
    vec!["-gdb".into(), format!("tcp:127.0.0.1:{port}"), "-S".into()]
}

/// Fail early, with a clear line, if PORT on 127.0.0.1 is taken (QEMU's own error is less so).
pub fn check_port_free(port: u16) -> Result<(), String> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).map(drop).map_err(|e| format!("--gdb: cannot listen on 127.0.0.1:{port}: {e} (pick another port: --gdb PORT)"))
}

/// `s` quoted for a POSIX shell where it needs to be.
fn shell_word(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_=.,/:@+".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The debugger to name: `rust-gdb` (gdb with Rust's pretty-printers) when it is on PATH.
pub fn debugger() -> &'static str {
    let on_path = |name: &str| std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()));
    if on_path("rust-gdb") {
        "rust-gdb"
    } else {
        "gdb"
    }
}

/// The command line that loads `kernel`'s symbols, connects to the stub and runs to the
/// kernel's Rust entry (a hardware breakpoint: the kernel's code is loaded, but a software
/// breakpoint written before the firmware runs is not guaranteed to survive it).
pub fn command_line(debugger: &str, kernel: &Path, port: u16) -> String {
    format!(
        "{debugger} -q {} -ex {} -ex {} -ex continue",
        shell_word(&kernel.display().to_string()),
        shell_word(&format!("target remote 127.0.0.1:{port}")),
        shell_word(&format!("hbreak {ENTRY_SYMBOL}"))
    )
}

/// A gdb remote serial protocol client, just enough for the check: `$body#ck` packets with
/// `+` acknowledgements, on 127.0.0.1 only.
struct Remote {
    s: TcpStream,
}

impl Remote {
    /// Connect, retrying while QEMU starts, until `within` has passed.
    fn connect(port: u16, within: Duration) -> Result<Remote, String> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let start = Instant::now();
        loop {
            match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
                Ok(s) => return Ok(Remote { s }),
                Err(e) if start.elapsed() > within => return Err(format!("gdb stub: no listener on {addr} after {} s: {e}", within.as_secs())),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    fn checksum(body: &str) -> u8 {
        body.bytes().fold(0u8, |a, b| a.wrapping_add(b))
    }

    /// Send one packet and return the reply's body (waiting up to `timeout`).
    fn ask(&mut self, body: &str, timeout: Duration) -> Result<String, String> {
        let pkt = format!("${body}#{:02x}", Self::checksum(body));
        self.s.write_all(pkt.as_bytes()).map_err(|e| format!("gdb stub: send `{body}`: {e}"))?;
        self.s.set_read_timeout(Some(Duration::from_millis(200))).map_err(|e| e.to_string())?;
        let start = Instant::now();
        let mut buf = Vec::new();
        let mut byte = [0u8; 1];
        loop {
            if start.elapsed() > timeout {
                return Err(format!("gdb stub: no reply to `{body}` in {} s (got {:?})", timeout.as_secs(), String::from_utf8_lossy(&buf)));
            }
            match self.s.read(&mut byte) {
                Ok(0) => return Err(format!("gdb stub: connection closed waiting for the reply to `{body}`")),
                Ok(_) => buf.push(byte[0]),
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
                Err(e) => return Err(format!("gdb stub: read: {e}")),
            }
            // A complete reply: `$...#xx` after any `+` acknowledgements.
            let text = String::from_utf8_lossy(&buf).to_string();
            if let Some(start) = text.find('$') {
                if let Some(hash) = text[start..].find('#').map(|h| start + h) {
                    if text.len() >= hash + 3 {
                        let reply = &text[start + 1..hash];
                        let ck = u8::from_str_radix(&text[hash + 1..hash + 3], 16).map_err(|_| format!("gdb stub: bad checksum field in {text:?}"))?;
                        if ck != Self::checksum(reply) {
                            return Err(format!("gdb stub: checksum mismatch in {text:?}"));
                        }
                        self.s.write_all(b"+").map_err(|e| e.to_string())?;
                        return Ok(reply.to_string());
                    }
                }
            }
        }
    }

    /// RIP from a `g` reply: x86-64 layout, 16 general registers of 8 bytes, then RIP, all
    /// little-endian hex.
    fn rip(&mut self) -> Result<u64, String> {
        let regs = self.ask("g", Duration::from_secs(10))?;
        let hex = regs.get(16 * 16..17 * 16).ok_or_else(|| format!("gdb stub: `g` reply too short ({} hex digits)", regs.len()))?;
        let mut bytes = [0u8; 8];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| format!("gdb stub: `g` reply is not hex: {hex}"))?;
        }
        Ok(u64::from_le_bytes(bytes))
    }
}

/// Kills QEMU however the check ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `gdb-stub` suite: boot `kernel` with `--gdb`'s arguments on a free port and check,
/// over the remote protocol, that QEMU listens on 127.0.0.1, that the CPU waits at the reset
/// vector, and that a hardware breakpoint at `kernel_entry` (its address from the kernel's
/// symbol table) stops it there. Then, if `gdb` is installed, run the very command line
/// `run --gdb` prints (batch mode) and check that it stops in `kernel_entry`. Bounded: one
/// minute per boot, QEMU killed at the end.
pub fn ci_check(kernel: &Path) -> Result<crate::host::outcome::TestTally, String> {
    let mut t = crate::host::outcome::TestTally::default();
    let elf = std::fs::read(kernel).map_err(|e| format!("cannot read {}: {e}", kernel.display()))?;
    let entry = crate::host::ksyms::function_symbols(&elf)?.into_iter().find(|(_, n)| n == ENTRY_SYMBOL).map(|(a, _)| a).ok_or_else(|| format!("the kernel has no `{ENTRY_SYMBOL}` symbol"))?;
    let mut check = |name: &str, r: Result<String, String>| match r {
        Ok(what) => {
            println!("   {name} ... ok ({what})");
            t.passed += 1;
        }
        Err(e) => {
            println!("   {name} ... FAILED: {e}");
            t.failed += 1;
        }
    };
    // The protocol probe.
    let probe = (|| -> Result<(u64, u64), String> {
        let port = crate::host::vm::free_port()?;
        let qemu = boot_stopped(kernel, port)?;
        let mut r = Remote::connect(port, Duration::from_secs(30))?;
        let why = r.ask("?", Duration::from_secs(10))?;
        if !why.starts_with('S') && !why.starts_with('T') {
            return Err(format!("`?` answered {why:?}, not a stop reply"));
        }
        let reset = r.rip()?;
        let ok = r.ask(&format!("Z1,{entry:x},1"), Duration::from_secs(10))?;
        if ok != "OK" {
            return Err(format!("hardware breakpoint at {entry:#x} refused: {ok:?}"));
        }
        let stop = r.ask("c", Duration::from_secs(60))?;
        if !stop.starts_with('T') && !stop.starts_with('S') {
            return Err(format!("continue ended with {stop:?}, not a stop"));
        }
        let at = r.rip()?;
        drop(qemu);
        Ok((reset, at))
    })();
    match probe {
        Ok((reset, at)) => {
            check("gdb stub waits at the reset vector", if reset == 0xfff0 { Ok(format!("rip {reset:#x}")) } else { Err(format!("rip {reset:#x}, expected 0xfff0 (started running before gdb?)")) });
            check("hbreak kernel_entry stops there", if at == entry { Ok(format!("rip {at:#x}")) } else { Err(format!("stopped at {at:#x}, `{ENTRY_SYMBOL}` is {entry:#x}")) });
        }
        Err(e) => check("gdb stub answers on 127.0.0.1", Err(e)),
    }
    // The printed command itself, when a gdb is installed (CI's machine may have none).
    if Command::new("gdb").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success()) {
        let r = (|| -> Result<String, String> {
            let port = crate::host::vm::free_port()?;
            let _qemu = boot_stopped(kernel, port)?;
            // Wait for the listener so gdb's single connect does not race QEMU's start.
            drop(Remote::connect(port, Duration::from_secs(30))?);
            std::thread::sleep(Duration::from_millis(200));
            let printed = command_line("gdb", kernel, port);
            let out = Command::new("timeout")
                .args(["90", "sh", "-c", &format!("{} -batch -ex 'info symbol $pc' </dev/null", printed.replacen("gdb -q", "gdb -q -nx", 1))])
                .output()
                .map_err(|e| format!("cannot run gdb: {e}"))?;
            let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
            let line = text.lines().find(|l| l.starts_with(ENTRY_SYMBOL) && l.contains("in section .text")).map(str::to_string);
            line.map(|l| format!("`{printed}` -> {l}")).ok_or_else(|| format!("`{printed}` did not stop in {ENTRY_SYMBOL}:\n{text}"))
        })();
        check("the printed gdb command stops in kernel_entry", r);
    } else {
        // Not run is not passed: a counted skip, so a run on a machine without gdb says so in
        // its closing line (the protocol checks above still ran).
        println!("   the printed gdb command stops in kernel_entry ... skipped (no gdb installed)");
        t.skipped += 1;
    }
    Ok(t)
}

/// QEMU as `run --gdb PORT` starts it (one vCPU, no console input), killed when dropped.
fn boot_stopped(kernel: &Path, port: u16) -> Result<Child, String> {
    crate::host::env::ensure_qemu()?;
    let cfg = crate::host::vm::VmConfig { smp: 1, medium: Some(crate::host::vm::BootMedium::Kernel(kernel.to_path_buf())), ..Default::default() };
    let mut args = cfg.qemu_args();
    args.extend(qemu_args(port));
    args.extend(["-serial", "null", "-monitor", "none"].map(String::from));
    let child = Command::new("qemu-system-x86_64").args(&args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().map_err(|e| format!("cannot start qemu-system-x86_64: {e}"))?;
    Ok(Child(child))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches a stub listening beyond loopback or a guest that starts before gdb attaches.
    #[test]
    fn stub_listens_on_loopback_only_and_starts_stopped() {
        assert_eq!(qemu_args(4321), ["-gdb", "tcp:127.0.0.1:4321", "-S"]);
    }

    #[test]
    fn printed_command_loads_symbols_connects_and_quotes_paths() {
        let c = command_line("gdb", Path::new("/t/kernel"), 1234);
        assert_eq!(c, "gdb -q /t/kernel -ex 'target remote 127.0.0.1:1234' -ex 'hbreak kernel_entry' -ex continue");
        let c = command_line("rust-gdb", Path::new("/my dir/it's"), 9);
        assert!(c.starts_with("rust-gdb -q '/my dir/it'\\''s' -ex 'target remote 127.0.0.1:9'"), "{c}");
    }

    #[test]
    fn port_in_use_is_one_clear_line() {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let e = check_port_free(port).unwrap_err();
        assert!(e.contains(&format!("127.0.0.1:{port}")) && !e.contains('\n'), "{e}");
    }
}
