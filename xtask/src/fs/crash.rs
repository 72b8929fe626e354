//! The crash test (`cargo xtask fs crash`): kill QEMU while the guest writes and fsyncs, repair
//! with `e2fsck -fy`, and check that every file the guest reported fsync'd is intact.

use std::path::Path;
use std::process::Command;

use super::{ensure_e2fsprogs, fstest_files, mkimage, read_file, tool};

/// e2fsck with `flag` (`-fy` repairs, `-fn` only looks); its exit status and output.
fn e2fsck(img: &Path, flag: &str) -> Result<(i32, String), String> {
    let out = Command::new(tool("e2fsck")).arg(flag).arg(img).output().map_err(|e| format!("cannot run e2fsck: {e}"))?;
    Ok((out.status.code().unwrap_or(-1), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))))
}

/// The crash test: `kills` rounds on one image. Round `k` boots `fscrash -- round=k`, waits
/// for a seeded number of `synced` lines (and a seeded pause), kills QEMU, repairs the image
/// with `e2fsck -fy` (exit 0 or 1: nothing or something fixed; more is a failure), checks
/// that `e2fsck -fn` then finds it clean, and reads every file any round reported synced.
pub fn crash_test(kernel: &Path, initrd: &Path, kills: u32, seed: u64) -> Result<crate::TestTally, String> {
    use crate::net::session::Session;
    use crate::qemu::{BootMedium, VmConfig};
    use std::time::{Duration, Instant};
    ensure_e2fsprogs()?;
    println!("== fs crash test: {kills} kills (seed {seed})");
    let dir = crate::env::target_dir().join("fs-crash");
    let root = dir.join("root");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).map_err(|e| e.to_string())?;
    std::fs::write(root.join("README"), b"crash test image\n").map_err(|e| e.to_string())?;
    let img = dir.join("crash.img");
    mkimage(&root, &img, Some(48))?;
    let mut synced: Vec<(String, usize, u8)> = Vec::new();
    let mut t = crate::TestTally::default();
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let files = 30u64;
    for k in 0..kills {
        let target = 1 + next() % (files - 1);
        let pause_ms = next() % 400;
        let cfg = VmConfig {
            smp: 2,
            // Odd rounds: a cfork'd child shares the buffer cache and reads while the writer writes
            // (both modes of the cache in every run, CI's two kills included).
            cmdline: format!("init=fscrash -- round={k} files={files} share={}", k % 2),
            medium: Some(BootMedium::Kernel(kernel.to_path_buf())),
            initrd: Some(initrd.to_path_buf()),
            disk: Some(img.clone()),
            ..Default::default()
        };
        let mut args = cfg.qemu_args();
        args.extend(["-serial", "stdio", "-monitor", "none"].iter().map(|s| s.to_string()));
        let mut session = Session::start(&args, false)?;
        let deadline = Instant::now() + Duration::from_secs(180);
        let mut seen = 0u64;
        let mut problem = None;
        while seen < target {
            match session.wait_for(&|l: &str| l.contains("fscrash: synced ") || l.contains("fscrash: done") || l.contains("fscrash: ") && l.contains("Err"), deadline) {
                Ok(line) if line.contains("synced ") => {
                    let w: Vec<&str> = line.split_whitespace().collect();
                    let n = w.len();
                    match (w.get(n.wrapping_sub(3)), w.get(n.wrapping_sub(2)).and_then(|v| v.parse().ok()), w.get(n.wrapping_sub(1)).and_then(|v| v.parse().ok())) {
                        (Some(p), Some(len), Some(sd)) => synced.push((p.to_string(), len, sd)),
                        _ => problem = Some(format!("malformed line `{line}`")),
                    }
                    seen += 1;
                }
                Ok(line) => {
                    problem = Some(format!("the guest stopped early: `{line}`"));
                    break;
                }
                Err(e) => {
                    problem = Some(format!("no `synced` line ({e:?}); serial:\n{}", session.serial));
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(pause_ms));
        drop(session); // kills QEMU
        if let Some(p) = problem {
            println!("   FAILED: round {k}: {p}");
            t.failed += 1;
            continue;
        }
        let (fix, out) = e2fsck(&img, "-fy")?;
        let (clean, out2) = e2fsck(&img, "-fn")?;
        let mut bad = Vec::new();
        if fix > 1 {
            bad.push(format!("e2fsck -fy exit {fix}:\n{out}"));
        }
        if clean != 0 {
            bad.push(format!("e2fsck -fn after repair exit {clean}:\n{out2}"));
        }
        for (path, len, sd) in &synced {
            match read_file(&img, path) {
                Ok(d) if d.len() == *len && d.iter().enumerate().all(|(i, &b)| b == fstest_files::byte(*sd, i)) => {}
                Ok(d) => bad.push(format!("{path}: {} bytes, want {len}, or contents differ", d.len())),
                Err(e) => bad.push(format!("{path}: {e}")),
            }
        }
        if bad.is_empty() {
            println!("   round {k}: killed after {seen} fsync'd files (+{pause_ms} ms); e2fsck -fy exit {fix}, then clean; {} fsync'd files intact", synced.len());
            t.passed += 1;
        } else {
            println!("   FAILED: round {k} (killed after {seen} files): {}", bad.join("; "));
            t.failed += 1;
        }
    }
    Ok(t)
}
