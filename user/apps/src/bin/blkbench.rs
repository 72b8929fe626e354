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

core::arch::global_asm!(
    r#"
    .section .text.blkbench_marker, "ax"
    .balign 16
blkbench_marker_start_all:
    movw $0x501, %dx
    movb $3, %al
    outb %al, %dx
    ret
    .balign 16
blkbench_marker_stop_all:
    movw $0x501, %dx
    movb $4, %al
    outb %al, %dx
    ret
"#,
    options(att_syntax)
);

extern "C" {
    fn blkbench_marker_start_all();
    fn blkbench_marker_stop_all();
}

fn marker(start: bool) {
    // SAFETY: the routines write the marker port, which the kernel's TSS I/O bitmap opens to
    // user mode for the plugins; they touch nothing else.
    unsafe {
        if start {
            blkbench_marker_start_all()
        } else {
            blkbench_marker_stop_all()
        }
    }
}

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
        marker(true);
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
        marker(false);
    }
    bad
}

fn main(args: &'static str) -> u64 {
    let mut dedicated = false;
    let mut kc = 2u64;
    for a in args.split_whitespace() {
        match a.split_once('=') {
            Some(("mode", "dedicated")) => dedicated = true,
            Some(("mode", "polling")) => dedicated = false,
            Some(("iters", v)) => ITERS.store(v.parse().unwrap_or(200), Ordering::Relaxed),
            Some(("kc", v)) => kc = v.parse().unwrap_or(2),
            _ => {
                println!("usage: blkbench mode=polling|dedicated [iters=N] [kc=CORE]");
                return 2;
            }
        }
    }
    let share = libos::process::proc_share();
    let root = libos::root_share();
    let mut pcore: Option<ObjName> = None;
    let dev = if dedicated {
        let p = match libos::sys::pcore_alloc(root, "blk-kc", kc).map(|p| ObjName::new(root, p)) {
            Ok(p) => p,
            Err(e) => {
                println!("blkbench: no core {kc}: {e:?}");
                return 1;
            }
        };
        pcore = Some(p);
        if let Err(e) = libos::sys::pcore_set_role(p, ROLE_KC) {
            println!("blkbench: core {kc} cannot be a kernel core: {e:?}");
            return 1;
        }
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
