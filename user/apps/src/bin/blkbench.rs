//! blkbench: disk requests from two cores at once, in the block device's two modes
//! (`abi::blk`): `polling` (each core calls `device_buf`; the queue under the kernel's MCS
//! lock) and `dedicated` (a kernel core owns the queue; each core posts on its own ring).
//! Cores 0 and 1 each read 4 KiB blocks of their own half of the first MiB of the disk,
//! checking nothing but the result; core 0 marks the region on every vCPU (marker 3/4) around
//! the requests, so `cargo xtask plugin audit` counts the kernel core's lines too.
//!
//! `init=blkbench -- mode=polling|dedicated [iters=N] [kc=CORE]` on a disk (e.g. `cargo xtask
//! fs fstest-image IMG`), at 3 vCPUs (2 requesting cores + the kernel core, core 2 by
//! default). Prints `bench name=blk_read_MODE ops=N ns_per_op=T` (T: a TCG timing, a hint only).
//!
//! `work=fs` instead: the file system mounted in MODE (`fs::mount_with`; Dedicated through
//! kernel core `kc`, default 1: boot at 2 vCPUs), then `iters` passes (default 3) each
//! dropping the buffer cache's clean pages and reading every file of the image in full (a
//! directory walk from `/`: every block a cache miss, a disk request through the mode), the
//! region marked on every vCPU around the passes. Prints the disk requests and bytes made in
//! the region, for per-request figures.
#![no_std]
#![no_main]

extern crate alloc;

use abi::{ObjName, ROLE_KC, ROLE_XC};
use alloc::vec;
use core::sync::atomic::{AtomicU64, Ordering};
use libos::fs::disk::BlockDevice;
use libos::println;
use libos::thread::Barrier;

libos::main!(main);

#[path = "../common/marker.rs"]
mod marker;


static DEV: AtomicU64 = AtomicU64::new(0);
static ITERS: AtomicU64 = AtomicU64::new(200);
static START: Barrier = Barrier::new(2);
static STOP: Barrier = Barrier::new(2);

/// One core's reads (each core its own data area in the request segment, in either mode).
fn reads(core: u64) -> u64 {
    // SAFETY: DEV points at the BlockDevice `main` keeps alive (not touched mutably) until the
    // other thread is joined.
    let dev = unsafe { &*(DEV.load(Ordering::Acquire) as *const BlockDevice) };
    let n = ITERS.load(Ordering::Relaxed);
    let mut buf = vec![0u8; 4096];
    // Warm up: map the segment, fault in the buffer.
    if dev.read_here(core * 1024, &mut buf).is_err() {
        return 1;
    }
    START.wait();
    if core == 0 {
        marker::region_all(true);
    }
    let mut bad = 0;
    for k in 0..n {
        // Sectors of this core's half of the first MiB, 4 KiB apart.
        if dev.read_here(core * 1024 + (k % 128) * 8, &mut buf).is_err() {
            bad += 1;
        }
    }
    STOP.wait();
    if core == 0 {
        marker::region_all(false);
    }
    bad
}

/// Read every file under `dir` in full; (files, bytes).
fn read_tree(dir: &str, buf: &mut [u8]) -> Result<(u64, u64), libos::fs::FsError> {
    use libos::fs;
    let (mut files, mut bytes) = (0, 0);
    for e in fs::readdir(dir)? {
        if e.name == b"." || e.name == b".." || e.name == b"lost+found" {
            continue;
        }
        let Ok(name) = core::str::from_utf8(&e.name) else { continue };
        let path = if dir == "/" { alloc::format!("/{name}") } else { alloc::format!("{dir}/{name}") };
        match e.file_type {
            fs::FT_DIR => {
                let (f, b) = read_tree(&path, buf)?;
                files += f;
                bytes += b;
            }
            fs::FT_REG => {
                let fd = fs::open(&path, fs::O_RDONLY)?;
                loop {
                    let n = fs::read(fd, buf)?;
                    if n == 0 {
                        break;
                    }
                    bytes += n as u64;
                }
                fs::close(fd)?;
                files += 1;
            }
            _ => {}
        }
    }
    Ok((files, bytes))
}

/// Make core `kc` a kernel core of ours (Dedicated mode), or say why not.
fn kernel_core(root: u64, kc: u64) -> Option<ObjName> {
    let p = match libos::sys::pcore_alloc(root, "blk-kc", kc).map(|p| ObjName::new(root, p)) {
        Ok(p) => p,
        Err(e) => {
            println!("blkbench: no core {kc}: {e:?}");
            return None;
        }
    };
    if let Err(e) = libos::sys::pcore_set_role(p, ROLE_KC) {
        println!("blkbench: core {kc} cannot be a kernel core: {e:?}");
        return None;
    }
    Some(p)
}

/// `work=fs`: cold reads of every file through the file system in either mode.
fn fs_reads(dedicated: bool, kc: u64, passes: u64) -> u64 {
    use libos::fs::{self, disk::DiskMode};
    let root = libos::root_share();
    let mut pcore = None;
    let mode = if dedicated {
        let Some(p) = kernel_core(root, kc) else { return 1 };
        pcore = Some(p);
        DiskMode::Dedicated { kernel_core: p, rings: 1 }
    } else {
        DiskMode::Polling
    };
    let mut buf = vec![0u8; 16384];
    let r = (|| -> Result<(u64, u64, u64, u64), fs::FsError> {
        fs::mount_with(mode)?;
        // Warm-up pass: the segment mapped, the names cached; then cold data.
        read_tree("/", &mut buf)?;
        fs::cache_drop_clean()?;
        let (_, st0) = fs::cache_stats()?;
        let t0 = libos::time::now_ns();
        marker::region_all(true);
        let (mut files, mut bytes) = (0, 0);
        for _ in 0..passes {
            fs::cache_drop_clean()?;
            let (f, b) = read_tree("/", &mut buf)?;
            files += f;
            bytes += b;
        }
        marker::region_all(false);
        let ns = libos::time::now_ns() - t0;
        let (_, st1) = fs::cache_stats()?;
        println!("blkbench: fs {} passes: {files} files, {bytes} bytes read; {} disk requests, {} bytes from the disk", passes, st1.packets_in - st0.packets_in, st1.bytes_in - st0.bytes_in);
        Ok((files, st1.packets_in - st0.packets_in, ns, bytes))
    })();
    let _ = fs::unmount();
    if let Some(p) = pcore {
        let _ = libos::sys::pcore_set_role(p, ROLE_XC);
        let _ = libos::sys::share_delobj(p);
    }
    match r {
        Ok((_, reqs, ns, _)) => {
            println!("bench name=fs_cold_read_{} ops={reqs} ns_per_op={}", if dedicated { "dedicated" } else { "polling" }, ns / reqs.max(1));
            0
        }
        Err(e) => {
            println!("blkbench: fs: {e:?}");
            1
        }
    }
}

fn main(args: &'static str) -> u64 {
    let mut dedicated = false;
    let mut kc = 2u64;
    let mut fs_work = false;
    let mut kc_given = false;
    let mut iters_given = false;
    for a in args.split_whitespace() {
        match a.split_once('=') {
            Some(("mode", "dedicated")) => dedicated = true,
            Some(("mode", "polling")) => dedicated = false,
            Some(("iters", v)) => {
                ITERS.store(v.parse().unwrap_or(200), Ordering::Relaxed);
                iters_given = true;
            }
            Some(("kc", v)) => {
                kc = v.parse().unwrap_or(2);
                kc_given = true;
            }
            Some(("work", "fs")) => fs_work = true,
            Some(("work", "raw")) => fs_work = false,
            _ => {
                println!("usage: blkbench mode=polling|dedicated [work=raw|fs] [iters=N] [kc=CORE]");
                return 2;
            }
        }
    }
    if fs_work {
        let passes = if iters_given { ITERS.load(Ordering::Relaxed) } else { 3 };
        return fs_reads(dedicated, if kc_given { kc } else { 1 }, passes);
    }
    let share = libos::process::proc_share();
    let root = libos::root_share();
    let mut pcore: Option<ObjName> = None;
    let dev = if dedicated {
        let Some(p) = kernel_core(root, kc) else { return 1 };
        pcore = Some(p);
        BlockDevice::open_dedicated(share, 2, p)
    } else {
        BlockDevice::open_polling_per_core(share, 2)
    };
    let dev = match dev {
        Ok(d) => d,
        Err(e) => {
            println!("blkbench: cannot open the disk: {e:?} (boot with --disk IMG)");
            return 1;
        }
    };
    DEV.store(&dev as *const BlockDevice as u64, Ordering::Release);
    let t0 = libos::time::now_ns();
    let t = match libos::thread::spawn(1, reads, 1) {
        Ok(t) => t,
        Err(e) => {
            println!("blkbench: no thread on core 1: {e:?}");
            return 1;
        }
    };
    let here = reads(0);
    let there = t.join().unwrap_or(1);
    let ns = libos::time::now_ns() - t0;
    let st = libos::sys::device_stat(dev.dev).unwrap_or_default();
    drop(dev);
    if let Some(p) = pcore {
        let _ = libos::sys::pcore_set_role(p, ROLE_XC);
        let _ = libos::sys::share_delobj(p);
    }
    let ops = 2 * ITERS.load(Ordering::Relaxed);
    println!("blkbench: {} reads, {} errors on the device, {here}+{there} failed requests", st.packets_in, st.errors);
    println!("bench name=blk_read_{} ops={ops} ns_per_op={}", if dedicated { "dedicated" } else { "polling" }, ns / ops.max(1));
    if here + there != 0 {
        return 1;
    }
    0
}
