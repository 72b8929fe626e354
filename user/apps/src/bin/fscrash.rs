//! fscrash: the guest half of the crash test (docs/fs.md; `cargo xtask fs crash`). Writes files
//! into `/c<round>` on the disk, `fsync`s each and then prints `fscrash: synced PATH LEN SEED`;
//! between them it writes and removes files it never syncs, so the cache always holds dirty
//! data and metadata when the host kills QEMU (at a moment it picks after some `synced`
//! lines). After `e2fsck -fy` the host checks every file reported synced, byte for byte.
//!
//! With two or more cores a thread on core 1 does the same at the same time (its files are
//! `t<i>`), so the crash also interrupts two cores' writes into one file system.
//!
//! Usage: `fscrash -- round=K files=N` (defaults 0 and 30).
#![no_std]
#![no_main]

extern crate alloc;

use alloc::format;
use alloc::vec::Vec;
use libos::fs::{self, FsError};
use libos::println;

use testdefs::fstest_files as files;

libos::main!(main);

fn arg(args: &str, key: &str, default: u64) -> u64 {
    args.split_whitespace().find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')).and_then(libos::parse_u64)).unwrap_or(default)
}

fn write_file(path: &str, len: usize, seed: u8, sync: bool) -> Result<(), FsError> {
    let fd = fs::open(path, fs::O_WRONLY | fs::O_CREAT | fs::O_TRUNC)?;
    let data: Vec<u8> = (0..len).map(|i| files::byte(seed, i)).collect();
    let mut r = Ok(());
    for piece in data.chunks(4000) {
        match fs::write(fd, piece) {
            Ok(n) if n == piece.len() => {}
            Ok(_) => {
                r = Err(FsError::NoSpace);
                break;
            }
            Err(e) => {
                r = Err(e);
                break;
            }
        }
    }
    if r.is_ok() && sync {
        r = fs::fsync(fd);
    }
    let _ = fs::close(fd);
    r
}

static ROUND: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
static NFILES: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// Write and fsync `NFILES` files named `<prefix><i>` in `/c<round>`, with unsynced noise.
fn writer(prefix: u64) -> u64 {
    use core::sync::atomic::Ordering;
    let round = ROUND.load(Ordering::Relaxed);
    let nfiles = NFILES.load(Ordering::Relaxed);
    let p = if prefix == 0 { "f" } else { "t" };
    let dir = format!("/c{round}");
    for i in 0..nfiles {
        let seed = 1 + ((round * 37 + i * 11 + prefix * 5) % 250) as u8;
        let len = 1 + ((round * 7919 + i * 104_729 + prefix * 31_337) % 60_000) as usize;
        let path = format!("{dir}/{p}{i}");
        if let Err(e) = write_file(&path, len, seed, true) {
            println!("fscrash: {path}: {e:?}");
            return 1;
        }
        println!("fscrash: synced {path} {len} {seed}");
        // Unsynced work the crash can interrupt: a new file, and removing an older one.
        let noise = format!("{dir}/u{p}{i}");
        let _ = write_file(&noise, 20_000 + (i as usize % 7) * 3000, 99, false);
        if i >= 2 {
            let _ = fs::unlink(&format!("{dir}/u{p}{}", i - 2));
        }
    }
    0
}

/// With `share=1`: a cfork'd child on core 1 given the buffer cache (`fs::cache_sharing`)
/// reads every file of the earlier rounds and this one, over and over, and drops the clean
/// pages now and then, so its misses refill pages through the shared request segment while
/// this process writes and fsyncs: the crash test then also checks that two processes'
/// disk use through one cache (the fill lock) loses no fsync'd file. The child only reads (a
/// child sharing the cache must not allocate); errors (a file half made) are expected and
/// ignored. Bounded: at most 50 passes.
fn shared_reader(round: u64) -> u64 {
    let mut buf = alloc::vec![0u8; 16384];
    for pass in 0..50u64 {
        for r in 0..=round {
            let Ok(list) = fs::readdir(&format!("/c{r}")) else { continue };
            for e in list.iter().filter(|e| e.file_type == fs::FT_REG) {
                let name = core::str::from_utf8(&e.name).unwrap_or("");
                if let Ok(fd) = fs::open(&format!("/c{r}/{name}"), fs::O_RDONLY) {
                    while let Ok(n) = fs::read(fd, &mut buf) {
                        if n == 0 {
                            break;
                        }
                    }
                    let _ = fs::close(fd);
                }
            }
        }
        if pass % 4 == 3 {
            let _ = fs::cache_drop_clean();
        }
    }
    0
}

fn main(args: &'static str) -> u64 {
    let round = arg(args, "round", 0);
    let nfiles = arg(args, "files", 30);
    ROUND.store(round, core::sync::atomic::Ordering::Relaxed);
    NFILES.store(nfiles, core::sync::atomic::Ordering::Relaxed);
    if let Err(e) = fs::mount() {
        println!("fscrash: mount: {e:?}");
        return 1;
    }
    let dir = format!("/c{round}");
    match fs::mkdir(&dir) {
        Ok(()) | Err(FsError::Exists) => {}
        Err(e) => {
            println!("fscrash: mkdir {dir}: {e:?}");
            return 1;
        }
    }
    let cores = libos::sys::sys_info().map(|s| s.cores).unwrap_or(1);
    println!("fscrash: round {round} writing {nfiles} files on {} core(s)", cores.min(2));
    let share = arg(args, "share", 0) != 0 && cores >= 2;
    let (here, there) = if share {
        // Core 1 runs the sharing reader instead of the second writer.
        let s = match fs::cache_sharing() {
            Ok(s) => s,
            Err(e) => {
                println!("fscrash: cache_sharing: {e:?}");
                return 1;
            }
        };
        let (shares, segs, ranges) = ([s.share], [s.request_seg], [s.range]);
        let opts = libos::cfork::CforkOpts { shares: &shares, segments: &segs, ranges: &ranges };
        let mut child = match libos::cfork::cfork(1, &opts, shared_reader, round) {
            Ok(c) => c,
            Err(e) => {
                println!("fscrash: cfork: {e:?}");
                return 1;
            }
        };
        println!("fscrash: a cfork'd child on core 1 shares the buffer cache and reads");
        let here = writer(0);
        // The reader is bounded; its result does not matter, only that the files survive.
        let _ = child.join_timeout(120_000);
        (here, 0)
    } else {
        let other = if cores >= 2 { libos::thread::spawn(1, writer, 1).ok() } else { None };
        let here = writer(0);
        (here, other.map(|t| t.join().unwrap_or(1)).unwrap_or(0))
    };
    if here != 0 || there != 0 {
        return 1;
    }
    if let Err(e) = fs::unmount() {
        println!("fscrash: unmount: {e:?}");
        return 1;
    }
    println!("fscrash: done");
    0
}
