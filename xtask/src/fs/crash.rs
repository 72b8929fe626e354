//! The crash test (`cargo xtask fs crash`): kill QEMU while the guest writes and fsyncs, repair
//! with `e2fsck -fy`, and check that every file the guest reported fsync'd is intact.

use std::path::Path;
use std::process::Command;

use super::{fstest_files, read_file};
use crate::host::ext2img::{ensure_e2fsprogs, mkimage, tool};

/// e2fsck with `flag` (`-fy` repairs, `-fn` only looks); its exit status and output.
fn e2fsck(img: &Path, flag: &str) -> Result<(i32, String), String> {
    let out = Command::new(tool("e2fsck")).arg(flag).arg(img).output().map_err(|e| format!("cannot run e2fsck: {e}"))?;
    Ok((out.status.code().unwrap_or(-1), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))))
}

/// The crash test: `kills` rounds on one image. Round `k` boots `fscrash -- round=k`, waits
/// for a seeded number of `synced` lines (and a seeded pause), kills QEMU, repairs the image
/// with `e2fsck -fy` (exit 0: nothing to fix; exit 1 only for the repairs
/// [`repairs_not_allowed`] allows, which a kill between two syncs leaves; more is a failure), checks
/// that `e2fsck -fn` then finds it clean, and reads every file any round reported synced.
pub fn crash_test(kernel: &Path, initrd: &Path, kills: u32, seed: u64) -> Result<crate::host::outcome::TestTally, String> {
    use crate::host::qemu::Session;
    use crate::host::vm::{BootMedium, VmConfig};
    use std::time::{Duration, Instant};
    ensure_e2fsprogs()?;
    println!("== fs crash test: {kills} kills (seed {seed})");
    let dir = crate::host::env::target_dir().join("fs-crash");
    let root = dir.join("root");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).map_err(|e| e.to_string())?;
    std::fs::write(root.join("README"), b"crash test image\n").map_err(|e| e.to_string())?;
    let img = dir.join("crash.img");
    mkimage(&root, &img, Some(48))?;
    let mut synced: Vec<(String, usize, u8)> = Vec::new();
    let mut t = crate::host::outcome::TestTally::default();
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
        let mut args = uncached_disk(cfg.qemu_args())?;
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
        let repairs = repairs_not_allowed(&out);
        match fix {
            0 => {}
            1 if repairs.is_empty() => {}
            1 => bad.push(format!("e2fsck -fy repaired what a crash between syncs cannot explain: {}\n{out}", repairs.join("; "))),
            _ => bad.push(format!("e2fsck -fy exit {fix}:\n{out}")),
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

/// QEMU's arguments with the disk opened `cache=none` (O_DIRECT): the guest sees a volatile
/// write cache and must flush it, and what QEMU has written is on the disk, not in the host's
/// page cache. Under the default (`cache=writeback`) every write the guest made before the
/// kill sits in the host's page cache and survives it, so an fsync that skipped its flush or
/// its ordering could pass unnoticed.
fn uncached_disk(mut args: Vec<String>) -> Result<Vec<String>, String> {
    let i = args.iter().position(|a| a.starts_with("file=") && a.contains("id=d0")).ok_or("crash test: QEMU's arguments have no disk")?;
    args[i].push_str(",cache=none");
    Ok(args)
}

/// The repairs in `e2fsck -fy`'s output that a kill between two syncs of this ext2 (no
/// journal) cannot explain: an empty list allows exit 1. A kill can leave: the free counts
/// of the superblock and the group descriptors behind the bitmaps (they are written at sync,
/// `Free blocks count wrong`, `Free inodes count wrong`, `Directories count wrong`), blocks
/// or inodes marked used whose file never reached a directory on the disk (`Block bitmap
/// differences`, `Inode bitmap differences`, `Unattached inode`, `Unattached zero-length
/// inode`, `Inode N ref count is`, and `Deleted inode N has zero dtime` of an orphan freed
/// by the next mount that never came), and e2fsck's own follow-ups (`Connect to
/// /lost+found`, `Fix`/`Clear` answers, the `*****` banner, the pass headers and the
/// summary). Anything else (a directory entry to a bad inode, a block claimed twice, a bad
/// block pointer, a corrupt directory) means a write reached the disk in an order a sync
/// does not allow, and fails the round.
pub fn repairs_not_allowed(out: &str) -> Vec<String> {
    const ALLOWED: &[&str] = &[
        "Free blocks count wrong",
        "Free inodes count wrong",
        "Directories count wrong",
        "Block bitmap differences",
        "Inode bitmap differences",
        "Unattached inode",
        "Unattached zero-length inode",
        "ref count is",
        "has zero dtime",
        "Connect to /lost+found",
        "Padding at end of",
    ];
    const NOISE: &[&str] = &["Pass ", "*****", "e2fsck ", "Fix? yes", "Clear? yes", "Connect to /lost+found? yes", "Fix<y>? yes", "Clear<y>? yes"];
    let mut bad = Vec::new();
    for l in out.lines().map(str::trim).filter(|l| !l.is_empty()) {
        // The summary: `IMG: 12/2048 files (0.0% non-contiguous), 345/12288 blocks`.
        if l.contains(" files (") && l.contains(" blocks") {
            continue;
        }
        // Bitmap difference lists (`-(1234--1240) +5678`) continue the line before.
        if l.starts_with('-') || l.starts_with('+') || l.starts_with('(') {
            continue;
        }
        if NOISE.iter().any(|n| l.starts_with(n)) || l.contains("***** FILE SYSTEM WAS MODIFIED *****") {
            continue;
        }
        // (`Inode N, i_size is …` or `Inode N has illegal block(s)` are not crash residue.)
        if !ALLOWED.iter().any(|a| l.contains(a)) {
            bad.push(l.to_string());
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches: a repair that a crash between syncs cannot explain (a bad block pointer, a
    /// directory entry to a free inode) accepted because e2fsck's exit status was 1.
    #[test]
    fn only_crash_residue_is_an_allowed_repair() {
        let residue = "Pass 1: Checking inodes, blocks, and sizes\nPass 2: Checking directory structure\nPass 3: Checking directory connectivity\nPass 4: Checking reference counts\nUnattached inode 19\nConnect to /lost+found? yes\n\nInode 19 ref count is 2, should be 1.  Fix? yes\n\nPass 5: Checking group summary information\nBlock bitmap differences:  -(2061--2070) +2100\nFix? yes\n\nFree blocks count wrong for group #0 (11000, counted=11010).\nFix? yes\n\nFree inodes count wrong (2030, counted=2031).\nFix? yes\n\n\ncrash.img: ***** FILE SYSTEM WAS MODIFIED *****\ncrash.img: 19/2048 files (0.0% non-contiguous), 1300/12288 blocks\n";
        assert_eq!(repairs_not_allowed(residue), Vec::<String>::new());
        let bad = "Pass 1: Checking inodes, blocks, and sizes\nInode 14 has illegal block(s).  Clear? yes\n\nPass 2: Checking directory structure\nEntry 'f3' in / (2) has deleted/unused inode 17.  Clear? yes\n\n";
        let r = repairs_not_allowed(bad);
        assert_eq!(r.len(), 2, "{r:?}");
        assert!(r[0].contains("illegal block") && r[1].contains("deleted/unused inode"));
        assert!(!repairs_not_allowed("Multiply-claimed block(s) in inode 12: 2055\n").is_empty());
    }

    #[test]
    fn the_crash_disk_is_uncached() {
        let args: Vec<String> = ["-drive", "file=/x/crash.img,format=raw,if=none,id=d0", "-device", "virtio-blk-pci,drive=d0"].map(String::from).to_vec();
        assert_eq!(uncached_disk(args).unwrap()[1], "file=/x/crash.img,format=raw,if=none,id=d0,cache=none");
        assert!(uncached_disk(vec!["-m".into(), "512".into()]).is_err());
    }
}
