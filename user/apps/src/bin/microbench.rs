//! Base costs of the kernel interface: the null system call, a
//! demand-zero fault in a private range, share add+delete on a private and on a shared
//! share, and segment alloc+free. Each is measured on its own between the measurement
//! plugins' region markers, so `insncount` gives guest instructions per operation, and
//! timed with the TSC.
//!
//! `init=microbench -- NAME [iters=N]`, NAME one of: null, fault, share_private,
//! share_global, segment, stat, ppc (a protected procedure call round trip), all; and grant (a core-scheduler request + release, with
//! `sched=core0` and at least 2 cores; not in `all`); pipe (an 8-byte write and read of one
//! pipe by one context: nobody waits) and pipe_pingpong (an 8-byte round trip over two
//! pipes between this core and the next: each side's read waits for the other; at least 2
//! cores; neither in `all`). Prints `bench name=NAME ops=N ticks=T ns_per_op=X` per run.
#![no_std]
#![no_main]

extern crate alloc;

use abi::{ObjName, SegMapping, MAP_READ, MAP_WRITE, MEMID_SELF, PAGE_SIZE, SHARE_PRIVATE};
use libos::sys;

libos::main!(main);

#[path = "../common/marker.rs"]
mod marker;


/// Where the fault benchmark maps its segment (private root range, below the heap).
const FAULT_BASE: u64 = 0x2000_0000_0000;

fn report(name: &str, ops: u64, t0: u64, t1: u64) {
    let tpm = libos::start_info().tsc_per_ms.max(1);
    let ticks = t1 - t0;
    let ns_x100 = ticks * 100_000_000 / tpm / ops.max(1);
    libos::println!("bench name={name} ops={ops} ticks={ticks} ns_per_op={}.{:02}", ns_x100 / 100, ns_x100 % 100);
}

fn run(name: &str, iters: u64) -> Result<(), abi::Error> {
    let root = libos::root_share();
    let info = libos::start_info();
    let rar = ObjName::new(root, info.root_ar);
    match name {
        "null" => {
            for _ in 0..100 {
                sys::null()?;
            }
            marker::region(true);
            let t0 = sys::time_now()?;
            for _ in 0..iters {
                sys::null()?;
            }
            let t1 = sys::time_now()?;
            marker::region(false);
            report(name, iters, t0, t1);
        }
        "fault" => {
            let bytes = iters * PAGE_SIZE;
            let seg = ObjName::new(root, sys::segment_alloc(root, "mb-fault", MEMID_SELF, bytes)?);
            sys::ar_set_seg(rar, &SegMapping { voff: FAULT_BASE, seg, soff: 0, len: bytes, flags: MAP_READ | MAP_WRITE })?;
            marker::region(true);
            let t0 = sys::time_now()?;
            for i in 0..iters {
                // SAFETY: the page is mapped writable just above; the first write faults it in.
                unsafe { core::ptr::write_volatile((FAULT_BASE + i * PAGE_SIZE) as *mut u64, i) };
            }
            let t1 = sys::time_now()?;
            marker::region(false);
            report(name, iters, t0, t1);
            sys::ar_unmap(rar, FAULT_BASE, bytes)?;
            sys::share_delobj(seg)?;
        }
        "share_private" | "share_global" => {
            let flags = if name == "share_private" { SHARE_PRIVATE } else { 0 };
            let sh = sys::share_alloc(root, name, MEMID_SELF, flags)?;
            let seg = ObjName::new(root, sys::segment_alloc(root, "mb-obj", MEMID_SELF, PAGE_SIZE)?);
            for _ in 0..100 {
                sys::share_addobj(sh, seg)?;
                sys::share_delobj(ObjName::new(sh, seg.object))?;
            }
            marker::region(true);
            let t0 = sys::time_now()?;
            for _ in 0..iters {
                sys::share_addobj(sh, seg)?;
                sys::share_delobj(ObjName::new(sh, seg.object))?;
            }
            let t1 = sys::time_now()?;
            marker::region(false);
            report(name, iters, t0, t1);
            sys::share_delobj(seg)?;
            sys::share_delobj(ObjName::new(root, sh))?;
        }
        "stat" => {
            // One lookup through the root share plus a small copy-out: the naming path alone.
            let seg = ObjName::new(root, sys::segment_alloc(root, "mb-obj", MEMID_SELF, PAGE_SIZE)?);
            marker::region(true);
            let t0 = sys::time_now()?;
            for _ in 0..iters {
                sys::obj_stat(seg)?;
            }
            let t1 = sys::time_now()?;
            marker::region(false);
            report(name, iters, t0, t1);
            sys::share_delobj(seg)?;
        }
        "segment" => {
            marker::region(true);
            let t0 = sys::time_now()?;
            for _ in 0..iters {
                let s = sys::segment_alloc(root, "mb-seg", MEMID_SELF, PAGE_SIZE)?;
                sys::share_delobj(ObjName::new(root, s))?;
            }
            let t1 = sys::time_now()?;
            marker::region(false);
            report(name, iters, t0, t1);
        }
        "ppc" => {
            // A protected procedure call round trip (docs/ppc.md): the handler runs in an
            // address space of its own (a root range with the image and a stack, as
            // `cores::Core` prepares one, never started) on this core, and returns its
            // argument plus one. The client calls it through a bound slot (`ppc::Gate::bind`,
            // `ppc_bind`), as a client that calls a gate often does.
            let core = libos::core_id();
            let server = libos::cores::Core::prepare(core, &libos::cores::CoreOpts::default())?;
            let named = libos::ppc::register_in(root, "mb-ppc", core, ppc_plus_one, server.root_ar, libos::layout::CORE_STACK_TOP, &[server.share])?;
            let g = named.bind()?;
            for i in 0..100 {
                if g.call(i, 0, 0, 0)? != i + 1 {
                    return Err(abi::Error::InvalidArgument);
                }
            }
            marker::region(true);
            let t0 = sys::time_now()?;
            let mut bad = 0;
            for i in 0..iters {
                bad |= g.call(i, 0, 0, 0)? ^ (i + 1);
            }
            let t1 = sys::time_now()?;
            marker::region(false);
            report(name, iters, t0, t1);
            g.unbind()?;
            named.delete()?;
            drop(server);
            if bad != 0 {
                return Err(abi::Error::InvalidArgument);
            }
        }
        "grant" => {
            // The core scheduler (`sched=core0`, at least 2 cores): request one core and
            // release it, from core 0, so both messages run on core 0 itself (no IPI).
            let mut one = [0u64; 1];
            for _ in 0..100 {
                sys::core_request(&mut one, abi::GRANT_ROLE_ANY, abi::NEAR_CALLER)?;
                sys::core_release(one[0])?;
            }
            marker::region(true);
            let t0 = sys::time_now()?;
            for _ in 0..iters {
                sys::core_request(&mut one, abi::GRANT_ROLE_ANY, abi::NEAR_CALLER)?;
                sys::core_release(one[0])?;
            }
            let t1 = sys::time_now()?;
            marker::region(false);
            report(name, iters, t0, t1);
        }
        "pipe" => {
            // A pipe transfer that never waits: the library OS's ring, no system call.
            let (r, w) = libos::fd::pipe(libos::fd::Scope::Private)?;
            let mut b = [0u8; 8];
            for _ in 0..100 {
                libos::fd::write(w, &[1; 8])?;
                libos::fd::read(r, &mut b)?;
            }
            marker::region(true);
            let t0 = sys::time_now()?;
            for i in 0..iters {
                libos::fd::write(w, &i.to_ne_bytes())?;
                libos::fd::read(r, &mut b)?;
            }
            let t1 = sys::time_now()?;
            marker::region(false);
            report(name, iters, t0, t1);
            libos::fd::close(r)?;
            libos::fd::close(w)?;
        }
        "pipe_pingpong" => {
            // Each round trip: this core writes 8 bytes into `there`, the echo thread on the
            // next core reads them and writes them back into `back`; each read finds its pipe
            // empty first and waits (docs/fd.md, "Pipes"). The region is every vCPU's: the
            // waiting is both sides' work.
            let other = (libos::core_id() + 1) % libos::start_info().cores.max(1);
            if other == libos::core_id() {
                return Err(abi::Error::NoSuchCore);
            }
            let (there_r, there_w) = libos::fd::pipe(libos::fd::Scope::Process)?;
            let (back_r, back_w) = libos::fd::pipe(libos::fd::Scope::Process)?;
            let arg = alloc::boxed::Box::new((there_r, back_w, iters + 100));
            let t = libos::thread::spawn(other, pipe_echo, &*arg as *const (libos::fd::Fd, libos::fd::Fd, u64) as u64)?;
            let mut b = [0u8; 8];
            let mut round = |i: u64| -> Result<bool, abi::Error> {
                libos::fd::write(there_w, &i.to_ne_bytes())?;
                Ok(libos::fd::read(back_r, &mut b)? == 8 && b == i.to_ne_bytes())
            };
            let mut good = true;
            for i in 0..100 {
                good &= round(i)?;
            }
            marker::region_all(true);
            let t0 = sys::time_now()?;
            for i in 0..iters {
                good &= round(i)?;
            }
            let t1 = sys::time_now()?;
            marker::region_all(false);
            report(name, iters, t0, t1);
            let echoed = t.join()?;
            for f in [there_r, there_w, back_r, back_w] {
                libos::fd::close(f)?;
            }
            libos::fd::unmap_all();
            if !good || echoed != 0 {
                return Err(abi::Error::InvalidArgument);
            }
        }
        _ => return Err(abi::Error::InvalidArgument),
    }
    Ok(())
}

/// `pipe_pingpong`'s other side: `arg` points at (read end, write end, rounds); echo each
/// 8-byte message back. 0 if every round went through.
fn pipe_echo(arg: u64) -> u64 {
    // SAFETY: `arg` points at the benchmark's tuple, alive until this thread is joined.
    let (r, w, rounds) = unsafe { *(arg as *const (libos::fd::Fd, libos::fd::Fd, u64)) };
    let mut b = [0u8; 8];
    let mut bad = 0;
    for _ in 0..rounds {
        bad |= (libos::fd::read(r, &mut b) != Ok(8)) as u64;
        bad |= (libos::fd::write(w, &b) != Ok(8)) as u64;
    }
    libos::fd::unmap_all();
    bad
}

/// The `ppc` benchmark's handler.
fn ppc_plus_one(a0: u64, _: u64, _: u64, _: u64) -> Result<u64, abi::Error> {
    Ok(a0 + 1)
}

fn main(args: &'static str) -> u64 {
    let mut words = args.split_whitespace();
    let which = words.next().unwrap_or("all");
    let mut iters = 2000;
    for w in words {
        if let Some(v) = w.strip_prefix("iters=").and_then(|v| v.parse().ok()) {
            iters = v;
        } else {
            libos::println!("microbench: unknown argument `{w}` (iters=N)");
            return 2;
        }
    }
    let names: &[&str] = if which == "all" { &["null", "stat", "fault", "share_private", "share_global", "segment", "ppc"] } else { &[which] };
    for n in names {
        if let Err(e) = run(n, iters) {
            libos::println!("microbench: {n}: {e:?} (benchmarks: null fault share_private share_global segment ppc grant pipe pipe_pingpong all)");
            return 1;
        }
    }
    0
}
