//! memclone (Corey, seeds/000 section 8.1): every core allocates its own demand-zero segment,
//! maps it in its private root address range and writes every page; we report the cost per
//! page. Private memory in private ranges: no core touches another's page tables, so the
//! cost per page should not grow with the core count (beyond memory bandwidth).
//!
//! Usage: `memclone [SIZE_PER_CORE] [CORES]` (default 8m, all cores); prints one line per
//! core and a `memclone: result ...` line.
#![no_std]
#![no_main]
#![deny(unsafe_code)]

#[path = "../common/mod.rs"]
mod common;

use abi::{ObjName, SegMapping, MAP_READ, MAP_WRITE, MEMID_SELF, PAGE_SIZE};
use common::{measure_touch, per_page, CoreResult};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use libos::cores::{Core, CoreCtx, CoreOpts};
use libos::layout::PRIVATE_BASE;
use libos::println;

libos::main!(main);

static BYTES: AtomicU64 = AtomicU64::new(0);
static GO: AtomicBool = AtomicBool::new(false);

/// Allocate and map this core's array (in its root share and root range).
fn map_private(root_share: u64, root_ar: ObjName, bytes: u64) -> Result<ObjName, abi::Error> {
    let seg = ObjName::new(root_share, libos::sys::segment_alloc(root_share, "memclone", MEMID_SELF, bytes)?);
    let m = SegMapping { voff: PRIVATE_BASE, seg, soff: 0, len: bytes, flags: MAP_READ | MAP_WRITE };
    if let Err(e) = libos::sys::ar_set_seg(root_ar, &m) {
        let _ = libos::sys::share_delobj(seg);
        return Err(e);
    }
    Ok(seg)
}

fn worker(ctx: &CoreCtx) -> u64 {
    let bytes = BYTES.load(Ordering::Acquire);
    if let Err(e) = map_private(ctx.root_share, ctx.root_ar, bytes) {
        println!("memclone: core {}: cannot map its array: {e:?}", ctx.core);
        return 1;
    }
    // Wait for the parent's GO (a static we can read, not write: the image is read-only here).
    libos::time::wait_until(60_000, || GO.load(Ordering::Acquire));
    measure_touch(ctx.core, PRIVATE_BASE, bytes / PAGE_SIZE, ctx.core << 32).encode()
}

fn main(args: &'static str) -> u64 {
    let (bytes, ncores, _) = match common::parse_args(args, 8 << 20) {
        Ok(v) => v,
        Err(e) => {
            println!("memclone: {e}; usage: memclone [SIZE_PER_CORE] [CORES]");
            return 2;
        }
    };
    let pages = bytes / PAGE_SIZE;
    println!("memclone: {ncores} cores, {pages} pages ({} KiB) per core, private ranges", bytes >> 10);
    BYTES.store(bytes, Ordering::Release);
    GO.store(false, Ordering::Release);
    let free0 = libos::sys::sys_info().map(|s| s.free_pages).unwrap_or(0);

    // Start the other cores; each maps its own array and waits for GO.
    let mut others: [Option<Core>; 64] = [const { None }; 64];
    for c in 1..ncores.min(64) {
        match Core::prepare(c, &CoreOpts::default()).and_then(|mut core| core.start(worker, 0).map(|_| core)) {
            Ok(core) => others[c as usize] = Some(core),
            Err(e) => {
                println!("memclone: cannot start core {c}: {e:?}");
                return 1;
            }
        }
    }
    let me = libos::start_info();
    let seg = match map_private(libos::root_share(), ObjName::new(libos::root_share(), me.root_ar), bytes) {
        Ok(s) => s,
        Err(e) => {
            println!("memclone: core 0 cannot map its array: {e:?}");
            return 1;
        }
    };
    // Give the others a moment to map, then go together.
    libos::time::spin_ms(20);
    let t0 = libos::time::ticks();
    GO.store(true, Ordering::Release);
    let mut results = [CoreResult::default(); 64];
    results[0] = measure_touch(0, PRIVATE_BASE, pages, 0);
    let mut failed = false;
    for c in 1..ncores.min(64) as usize {
        let core = others[c].as_mut().expect("started above");
        match core.join(600_000) {
            Ok(code) => match CoreResult::decode(code) {
                Some(r) => results[c] = r,
                None => {
                    println!("memclone: core {c} failed: exit code {code:#x}");
                    failed = true;
                }
            },
            Err(e) => {
                println!("memclone: core {c} did not finish: {e:?}");
                failed = true;
            }
        }
    }
    let wall = libos::time::ticks() - t0;
    let _ = libos::sys::ar_unmap(ObjName::new(libos::root_share(), me.root_ar), PRIVATE_BASE, bytes);
    let _ = libos::sys::share_delobj(seg);
    drop(others);

    let (mut sum_ticks, mut sum_faults) = (0u64, 0u64);
    for (c, r) in results[..ncores.min(64) as usize].iter().enumerate() {
        let (cyc, ns100) = per_page(r.ticks, pages);
        println!("memclone: core {c}: {cyc} cycles/page, {}.{:02} ns/page, {} soft faults", ns100 / 100, ns100 % 100, r.soft_faults);
        sum_ticks += r.ticks;
        sum_faults += r.soft_faults;
    }
    let (cyc, ns100) = per_page(sum_ticks / ncores, pages);
    let free1 = libos::sys::sys_info().map(|s| s.free_pages).unwrap_or(0);
    println!(
        "memclone: result cores={ncores} pages_per_core={pages} cycles_per_page={cyc} ns_per_page={}.{:02} soft_faults={sum_faults} wall_ms={} free_pages_delta={}",
        ns100 / 100,
        ns100 % 100,
        libos::time::ticks_to_ns(wall) / 1_000_000,
        free1 as i64 - free0 as i64
    );
    u64::from(failed)
}
