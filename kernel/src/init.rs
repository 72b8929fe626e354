//! Starting the first program (`init=NAME` on the command line) on the boot core, with a
//! root share, a root address range, its image, a stack and the boot arguments; and the
//! leak check after it ends.

use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use crate::context::{run_context, Context};
use crate::kobj::{ar, pcore::Pcore, segment::Segment, share::Share, KObject, Kind};
use crate::log::kprintln;
use crate::percpu;
use abi::{ArKind, StartInfo, INIT_STACK_SIZE, INIT_STACK_TOP, INIT_START_INFO, MAP_READ, MAP_WRITE, PAGE_SIZE};

/// Build init's context. Errors are one-line reasons.
fn build(name: &str, args: &str) -> Result<Context, &'static str> {
    let elf = crate::initrd::find(name.as_bytes()).ok_or("no such program in the boot image")?;
    let me = percore::cpu_id() as u32;
    let oom = |_| "out of memory";
    let root_share = KObject::create(b"root", me, Kind::Share(Share::new_private_with(me as usize, Vec::new()).map_err(oom)?)).map_err(oom)?;
    let root_ar = KObject::create(b"root", me, Kind::Ar(ar::AddressRange::new(ArKind::Root, me).map_err(oom)?)).map_err(oom)?;
    let image = crate::elf::load(elf, &root_ar, me)?;
    // Stack, with the start information and arguments in its top page.
    let stack = KObject::create(b"stack", me, Kind::Segment(Segment::new(INIT_STACK_SIZE, me).map_err(oom)?)).map_err(oom)?;
    let stack_base = INIT_STACK_TOP - INIT_STACK_SIZE;
    ar::set_seg(&root_ar, stack_base, &stack, 0, INIT_STACK_SIZE, MAP_READ | MAP_WRITE).map_err(|e| e.as_str())?;
    let pcore = KObject::create(b"pcore0", me, Kind::Pcore(Pcore::new(me, me))).map_err(oom)?;
    let info_size = core::mem::size_of::<StartInfo>() as u64;
    let args = &args.as_bytes()[..args.len().min((PAGE_SIZE - info_size) as usize)];
    let info = StartInfo {
        args_ptr: INIT_START_INFO + info_size,
        args_len: args.len() as u64,
        tsc_per_ms: crate::time::tsc_per_ms(),
        cores: percpu::online_count() as u64,
        root_ar: root_ar.id,
        image_seg: image.segment.id,
        stack_seg: stack.id,
        root_share: root_share.id,
        pcore: pcore.id,
    };
    let seg = stack.as_segment().map_err(|e| e.as_str())?;
    let info_off = INIT_START_INFO - stack_base;
    // SAFETY: StartInfo is a repr(C) plain-data struct; we copy its bytes.
    let info_bytes = unsafe { core::slice::from_raw_parts(&info as *const StartInfo as *const u8, info_size as usize) };
    seg.write_bytes(info_off, info_bytes).map_err(|e| e.as_str())?;
    seg.write_bytes(info_off + info_size, args).map_err(|e| e.as_str())?;
    let share = root_share.as_share().map_err(|e| e.as_str())?;
    for o in [&root_ar, &image.segment, &stack, &pcore] {
        share.insert(o.clone()).map_err(|e| e.as_str())?;
    }
    let args3 = [INIT_START_INFO, root_share.id, pcore.id];
    Ok(Context::new(root_share, Vec::new(), root_ar, pcore, image.entry, INIT_START_INFO, args3))
}

/// Quiesce and measure: free pages and kernel objects with every core's caches trimmed.
fn counts() -> (u64, i64, u64) {
    crate::kobj::share::reclaim_all();
    crate::smp::run_on_all(&|_| crate::mm::heap::trim_local());
    (crate::mm::frame::free_pages(), crate::mm::heap::live_objects(), crate::kobj::live_objects())
}

/// Run init to completion; returns true if it exited with 0 and nothing leaked. `inject` is
/// the command line's `inject=` spec (`mm::inject`); `inject_from` its `inject_from=`: `boot`
/// (or absent) arms it before init starts, `program` when init calls `inject_ctl(INJECT_ARM)`.
pub fn run(name: &str, args: &str, inject: Option<&str>, inject_from: Option<&str>) -> bool {
    let (pages0, slab0, kobj0) = counts();
    let area = percpu::this();
    let ctx = match build(name, args) {
        Ok(c) => c,
        Err(why) => {
            kprintln!("init: cannot start `{name}`: {why}");
            return false;
        }
    };
    area.busy.store(true, Ordering::Release);
    kprintln!("init: starting `{name}` on core {}", area.index);
    let armed = match inject_from {
        None | Some("boot") => true,
        Some("program") => false,
        Some(other) => {
            crate::bootinfo::boot_option_error(&alloc::format!("inject_from={other}: expected boot or program; injecting from boot"));
            true
        }
    };
    if let Some(spec) = inject {
        match crate::mm::inject::configure(spec, armed) {
            Ok(()) if armed => kprintln!("init: allocation fault injection on ({spec})"),
            Ok(()) => kprintln!("init: allocation fault injection configured ({spec}), armed when the program calls inject_ctl"),
            Err(why) => crate::bootinfo::boot_option_error(&alloc::format!("inject={spec} not applied: {why}; injection stays off")),
        }
    }
    let code = run_context(area, ctx);
    let injected = crate::mm::inject::failures();
    crate::mm::inject::suspend();
    // Stop whatever init left running on other cores.
    for c in percpu::all().take(percpu::online_count()) {
        if c.index != area.index && c.busy.load(Ordering::Acquire) {
            crate::smp::run_on(
                &|_| {
                    crate::sched::stop_all(abi::EXIT_FAULT_BASE);
                },
                core::iter::once(c.index),
                false,
            );
        }
    }
    let deadline = crate::time::Deadline::after_ms(10_000);
    while percpu::all().take(percpu::online_count()).any(|c| c.busy.load(Ordering::Acquire)) && !deadline.expired() {
        core::hint::spin_loop();
    }
    // Every core must still answer an active message.
    let answered = core::sync::atomic::AtomicUsize::new(0);
    crate::smp::run_on_all_or_stop(
        &|_| {
            answered.fetch_add(1, Ordering::Relaxed);
        },
        10_000,
    );
    let answered = answered.load(Ordering::Relaxed);
    let (pages1, slab1, kobj1) = counts();
    kprintln!("init: `{name}` exited with code {code}");
    if injected > 0 {
        kprintln!("init: {injected} allocations failed by injection");
    }
    if inject.is_some() {
        // Which calls met them (numbers as in abi::nr), for the host's report.
        let mut line = alloc::string::String::new();
        for nr in 0..abi::INJECT_CALLS as usize {
            let n = crate::mm::inject::failures_in_call(nr);
            if n > 0 {
                line += &alloc::format!(" {nr}:{n}");
            }
        }
        kprintln!("init: injected failures by call number:{}", if line.is_empty() { " none" } else { &line });
    }
    kprintln!("init: {answered}/{} cores answered an active message", percpu::online_count());
    kprintln!("init: free pages {pages0} -> {pages1}, kernel heap objects {slab0} -> {slab1}, kernel objects {kobj0} -> {kobj1}");
    let leak = pages1 != pages0 || slab1 != slab0 || kobj1 != kobj0;
    if leak {
        kprintln!("init: LEAK: memory or objects were not returned after every program exited");
    }
    code == 0 && !leak && answered == percpu::online_count()
}
