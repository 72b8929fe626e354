//! mempass (Corey, seeds/000 section 8.1): one shared buffer is touched by each core in turn
//! (core 0 first, then 1, ...) until every core has touched every page; we report the total
//! time and the cost per page, and each core's soft faults.
//!
//! `shared` (default): the buffer is mapped once, in a shared address range (`ar_alloc` of a
//! 1 GiB or 512 GiB span) that is linked with `ar_set_ar` into every core's root range. The
//! first core's faults fill the range's page tables for all: one soft fault per page in total.
//! `private`: for contrast, the same segment mapped directly in each core's private root
//! range, so every core takes its own soft fault on every page (Linux's separate address
//! spaces, in Corey's figure 7b).
//!
//! Usage: `mempass [SIZE] [CORES] [shared|private]` (default 8m, all cores, shared).
#![no_std]
#![no_main]
#![deny(unsafe_code)]

#[path = "../common/mod.rs"]
mod common;

use abi::{ArKind, Error, ObjName, SegMapping, MAP_READ, MAP_WRITE, MEMID_SELF, PAGE_SIZE};
use common::{measure_touch, per_page, CoreResult};
use core::sync::atomic::{AtomicU64, Ordering};
use libos::cores::{Core, CoreCtx, CoreOpts};
use libos::layout::SHARED_BASE;
use libos::println;

libos::main!(main);

static PAGES: AtomicU64 = AtomicU64::new(0);

fn worker(ctx: &CoreCtx) -> u64 {
    measure_touch(ctx.core, SHARED_BASE, PAGES.load(Ordering::Acquire), ctx.core << 32).encode()
}

/// Map the buffer into root range `root_ar`: link the shared range, or map the segment.
fn attach(root_ar: ObjName, shared: Option<ObjName>, seg: ObjName, bytes: u64) -> Result<(), Error> {
    match shared {
        Some(sar) => libos::sys::ar_set_ar(root_ar, SHARED_BASE, sar).map(|_| ()),
        None => libos::sys::ar_set_seg(root_ar, &SegMapping { voff: SHARED_BASE, seg, soff: 0, len: bytes, flags: MAP_READ | MAP_WRITE })
            .map(|_| ()),
    }
}

fn main(args: &'static str) -> u64 {
    let (bytes, ncores, mut rest) = match common::parse_args(args, 8 << 20) {
        Ok(v) => v,
        Err(e) => {
            println!("mempass: {e}; usage: mempass [SIZE] [CORES] [shared|private]");
            return 2;
        }
    };
    let shared_mode = match rest.next() {
        None | Some("shared") => true,
        Some("private") => false,
        Some(w) => {
            println!("mempass: unknown mode {w:?}; usage: mempass [SIZE] [CORES] [shared|private]");
            return 2;
        }
    };
    let ncores = ncores.min(64);
    let kind = if bytes <= ArKind::Span1G.span() { ArKind::Span1G } else { ArKind::Span512G };
    if bytes > ArKind::Span512G.span() {
        println!("mempass: SIZE must be at most 512 GiB");
        return 2;
    }
    let pages = bytes / PAGE_SIZE;
    let mode = if shared_mode { "shared range" } else { "private ranges" };
    println!("mempass: {ncores} cores, {pages} pages ({} KiB), {mode}", bytes >> 10);
    PAGES.store(pages, Ordering::Release);
    let root = libos::root_share();
    let my_ar = ObjName::new(root, libos::start_info().root_ar);
    let free0 = libos::sys::sys_info().map(|s| s.free_pages).unwrap_or(0);

    let run = || -> Result<([CoreResult; 64], u64), Error> {
        let seg = ObjName::new(root, libos::sys::segment_alloc(root, "mempass", MEMID_SELF, bytes)?);
        let _seg_del = Del(seg);
        let sar = if shared_mode {
            let sar = ObjName::new(root, libos::sys::ar_alloc(root, "mempass-range", MEMID_SELF, kind)?);
            libos::sys::ar_set_seg(sar, &SegMapping { voff: 0, seg, soff: 0, len: bytes, flags: MAP_READ | MAP_WRITE })?;
            Some(sar)
        } else {
            None
        };
        let _sar_del = sar.map(Del);
        attach(my_ar, sar, seg, bytes)?;
        let _unmap = Unmap(my_ar, SHARED_BASE, if shared_mode { kind.span() } else { bytes });
        let mut others: [Option<Core>; 64] = [const { None }; 64];
        for c in 1..ncores {
            let core = Core::prepare(c, &CoreOpts::default())?;
            attach(core.root_ar, sar, seg, bytes)?;
            others[c as usize] = Some(core);
        }
        let mut results = [CoreResult::default(); 64];
        let t0 = libos::time::ticks();
        results[0] = measure_touch(0, SHARED_BASE, pages, 0);
        for c in 1..ncores as usize {
            let core = others[c].as_mut().expect("prepared above");
            core.start(worker, 0)?;
            let code = core.join(600_000)?;
            results[c] = CoreResult::decode(code).ok_or_else(|| {
                println!("mempass: core {c} failed: exit code {code:#x}");
                Error::InvalidArgument
            })?;
        }
        let total = libos::time::ticks() - t0;
        Ok((results, total))
    };
    let (results, total) = match run() {
        Ok(r) => r,
        Err(e) => {
            println!("mempass: failed: {e:?}");
            return 1;
        }
    };
    let mut faults = 0;
    for (c, r) in results[..ncores as usize].iter().enumerate() {
        let (cyc, ns100) = per_page(r.ticks, pages);
        println!("mempass: core {c}: {cyc} cycles/page, {}.{:02} ns/page, {} soft faults", ns100 / 100, ns100 % 100, r.soft_faults);
        faults += r.soft_faults;
    }
    let (cyc, ns100) = per_page(total, pages);
    let free1 = libos::sys::sys_info().map(|s| s.free_pages).unwrap_or(0);
    println!(
        "mempass: result mode={} cores={ncores} pages={pages} total_cycles_per_page={cyc} total_ns_per_page={}.{:02} soft_faults={faults} soft_faults_per_page={}.{:02} free_pages_delta={}",
        if shared_mode { "shared" } else { "private" },
        ns100 / 100,
        ns100 % 100,
        faults / pages,
        faults * 100 / pages % 100,
        free1 as i64 - free0 as i64
    );
    0
}

/// Deletes `<share, obj>` when dropped.
struct Del(ObjName);
impl Drop for Del {
    fn drop(&mut self) {
        let _ = libos::sys::share_delobj(self.0);
    }
}

/// Unmaps a range of the root when dropped.
struct Unmap(ObjName, u64, u64);
impl Drop for Unmap {
    fn drop(&mut self) {
        let _ = libos::sys::ar_unmap(self.0, self.1, self.2);
    }
}
