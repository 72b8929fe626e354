//! isolation: attacks a program might make on the kernel or on other cores; every one must be
//! refused.
//!
//! Prints `utest NAME ... ok|skipped (why)|FAILED: why` per case (the xtask runner counts
//! them like utest's), then `utest: done N passed, N failed, N skipped`; exits 0 only if none
//! failed.
//! Arguments: words select cases whose names contain one of them (default: all).
//!
//! Cases that need a victim on another core run one there (`libos::cores::Core`): it makes
//! objects in its private root share and in a private share of its own, publishes their ids in
//! a mailbox page we both map, and waits while we attack them. Cases that must kill the
//! attacker (user-mode reads of kernel memory, executing data pages) run the attacker on
//! another core and check it died of the right fault. With one core those cases are skipped.
#![no_std]
#![no_main]
#![allow(clippy::result_large_err)]

use abi::{
    nr, ArKind, BatchEntry, DeviceBuf, Error, ObjName, ObjType, ObjectId, PcoreContext, SegMapping, BUF_TX, COPY_EAGER, COPY_ON_WRITE,
    EXIT_FAULT_BASE, MAP_EXEC, MAP_READ, MAP_WRITE, MEMID_SELF, PAGE_SIZE, ROLE_AC, ROLE_KC, ROLE_XC, SHARE_PRIVATE, USER_END,
};
use core::sync::atomic::{AtomicU64, Ordering};
use libos::cores::{Core, CoreCtx, CoreOpts};
use libos::layout::{SCRATCH_BASE, SHARED_BASE};
use libos::{println, sys};

libos::main!(main);

#[path = "../common/testkit.rs"]
#[macro_use]
mod testkit;
use testkit::*;

// ---------------------------------------------------------------------------------------
// Plumbing (as in utest)

/// The call must be refused with one of the given errors.
macro_rules! refused {
    ($e:expr, $p:pat) => {
        err!($e, $p)
    };
}

fn new_seg(share: ObjectId, pages: u64) -> Result<Del, Error> {
    sys::segment_alloc(share, "iso-seg", MEMID_SELF, pages * PAGE_SIZE).map(|id| Del(ObjName::new(share, id)))
}

/// Kernel-half addresses: the direct map of physical memory (where page tables live), the
/// kernel image, the top page, and guesses at where page tables sit in the direct map.
const KERNEL_ADDRS: [u64; 7] =
    [0xffff_8000_0000_0000, 0xffff_8000_0010_0000, 0xffff_8000_0000_1000, 0xffff_ffff_8000_0000, 0xffff_ffff_8010_0000, 0xffff_ffff_ffff_f000, 0xffff_ff80_0000_0000];
const NONCANONICAL: [u64; 3] = [0x0000_8000_0000_0000, 0x1234_5678_9abc_def0, 0x8000_0000_0000_0000];
const ALIGNED_MAX: u64 = !(PAGE_SIZE - 1);

// ---------------------------------------------------------------------------------------
// A victim on core 1

/// Mailbox words (a page both contexts map at SHARED_BASE).
const MB_READY: usize = 0;
const MB_ROOT: usize = 1;
const MB_SECRET_SEG: usize = 2;
const MB_PRIVATE: usize = 3;
const MB_PRIVATE_SEG: usize = 4;
const MB_PCORE0: usize = 5;
const MB_RANGE: usize = 6;
const MB_STOP: usize = 7;
const MB_ROOT_AR: usize = 8;
const SECRET: u64 = 0x5ec2_e75e_c2e7_5ec2;

fn mb(i: usize) -> &'static AtomicU64 {
    // SAFETY: SHARED_BASE is mapped read-write to the mailbox segment in every context that
    // calls this (the parent maps it before starting the victim and keeps it until the victim
    // has ended); the page is zero-filled memory, valid as atomics.
    unsafe { &*((SHARED_BASE + 8 * i as u64) as *const AtomicU64) }
}

/// Given share (in the victim's share set, held by our root share): the victim's private
/// share and its pcore for core 0 go there, so we can name them and must still be refused.
static GIVEN: AtomicU64 = AtomicU64::new(0);

fn victim(ctx: &CoreCtx) -> u64 {
    let given = GIVEN.load(Ordering::Acquire);
    let r = ctx.root_share;
    let Ok(secret) = sys::segment_alloc(r, "secret", MEMID_SELF, PAGE_SIZE) else { return 1 };
    let m = SegMapping { voff: SCRATCH_BASE, seg: ObjName::new(r, secret), soff: 0, len: PAGE_SIZE, flags: MAP_READ | MAP_WRITE };
    if sys::ar_set_seg(ctx.root_ar, &m).is_err() {
        return 2;
    }
    // SAFETY: SCRATCH_BASE was mapped read-write just above.
    unsafe { core::ptr::write_volatile(SCRATCH_BASE as *mut u64, SECRET) };
    let Ok(private) = sys::share_alloc(given, "victim-private", MEMID_SELF, SHARE_PRIVATE) else { return 3 };
    let Ok(pseg) = sys::segment_alloc(private, "victim-pseg", MEMID_SELF, PAGE_SIZE) else { return 4 };
    let Ok(pcore0) = sys::pcore_alloc(given, "victim-p0", 0) else { return 5 };
    let Ok(range) = sys::ar_alloc(r, "victim-range", MEMID_SELF, ArKind::Span1G) else { return 6 };
    mb(MB_ROOT).store(r, Ordering::Relaxed);
    mb(MB_SECRET_SEG).store(secret, Ordering::Relaxed);
    mb(MB_PRIVATE).store(private, Ordering::Relaxed);
    mb(MB_PRIVATE_SEG).store(pseg, Ordering::Relaxed);
    mb(MB_PCORE0).store(pcore0, Ordering::Relaxed);
    mb(MB_RANGE).store(range, Ordering::Relaxed);
    mb(MB_READY).store(1, Ordering::Release);
    libos::time::wait_until(120_000, || mb(MB_STOP).load(Ordering::Acquire) != 0);
    // The secret is still ours and unchanged.
    // SAFETY: still mapped (nobody else can unmap our root range).
    let v = unsafe { core::ptr::read_volatile(SCRATCH_BASE as *const u64) };
    if v != SECRET {
        return 7;
    }
    0
}

struct Victim {
    core: Core,
    _mb: Del,
    given: Del,
}

impl Victim {
    fn root(&self) -> ObjectId {
        mb(MB_ROOT).load(Ordering::Acquire)
    }
    fn id(&self, i: usize) -> ObjectId {
        mb(i).load(Ordering::Acquire)
    }
}

fn start_victim() -> Result<Victim, Msg> {
    let given = Del(ObjName::new(root(), ok!(sys::share_alloc(root(), "iso-given", MEMID_SELF, 0))));
    GIVEN.store(given.0.object, Ordering::Release);
    let mbseg = ok!(new_seg(root(), 1));
    let m = SegMapping { voff: SHARED_BASE, seg: mbseg.0, soff: 0, len: PAGE_SIZE, flags: MAP_READ | MAP_WRITE };
    ok!(sys::ar_set_seg(rar(), &m));
    for i in 0..16 {
        mb(i).store(0, Ordering::Relaxed);
    }
    let mut core = ok!(Core::prepare(1, &CoreOpts { shares: &[given.0.object], ..CoreOpts::default() }));
    ok!(sys::ar_set_seg(core.root_ar, &m));
    mb(MB_ROOT_AR).store(core.root_ar.object, Ordering::Relaxed);
    ok!(core.start(victim, 0));
    if !libos::time::wait_until(10_000, || mb(MB_READY).load(Ordering::Acquire) != 0) {
        let code = core.join(100);
        fail!("the victim did not get ready ({code:?})");
    }
    Ok(Victim { core, _mb: mbseg, given })
}

fn stop_victim(mut v: Victim) -> Result<(), Msg> {
    mb(MB_STOP).store(1, Ordering::Release);
    let code = ok!(v.core.join(10_000));
    let _ = sys::ar_unmap(rar(), SHARED_BASE, PAGE_SIZE);
    drop(v.given);
    ensure!(code == 0, "victim check {code} failed (its secret changed, or set-up failed)");
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Attacks with system calls on kernel memory

fn t_syscall_reads_kernel_memory() -> TestResult {
    for &a in KERNEL_ADDRS.iter().chain(NONCANONICAL.iter()) {
        refused!(raw(nr::CONSOLE_WRITE, [a, 16, 0, 0, 0, 0]), Error::BadAddress);
        refused!(raw(nr::INITRD_GET, [root(), a, 4, 0, 0, 0]), Error::BadAddress);
    }
    Ok(Pass::Ok)
}

fn t_syscall_writes_kernel_memory() -> TestResult {
    for &a in KERNEL_ADDRS.iter().chain(NONCANONICAL.iter()) {
        refused!(raw(nr::SYS_INFO, [a, 0, 0, 0, 0, 0]), Error::BadAddress);
        refused!(raw(nr::CORE_STATS, [0, a, 0, 0, 0, 0]), Error::BadAddress);
        refused!(raw(nr::OBJ_STAT, [rar().share, rar().object, a, 0, 0, 0]), Error::BadAddress);
        refused!(raw(nr::PCORE_STAT, [libos::pcore().share, libos::pcore().object, a, 0, 0, 0]), Error::BadAddress);
    }
    Ok(Pass::Ok)
}

fn t_kernel_pointer_as_output_array() -> TestResult {
    for &a in &KERNEL_ADDRS {
        refused!(raw(nr::SELF_SHARES, [a, 8, 0, 0, 0, 0]), Error::BadAddress);
        refused!(raw(nr::SHARE_LIST, [root(), a, 64, 0, 0, 0]), Error::BadAddress);
        refused!(raw(nr::AR_GET, [rar().share, rar().object, a, 16, 0, 0]), Error::BadAddress);
        refused!(raw(nr::DEVICE_LIST, [a, 4, 0, 0, 0, 0]), Error::BadAddress);
        refused!(raw(nr::LOCALITY_GET, [a, 64, 0, 0, 0, 0]), Error::BadAddress);
        refused!(raw(nr::OBJ_GET_NAME, [rar().share, rar().object, a, 32, 0, 0]), Error::BadAddress);
        refused!(raw(nr::CONSOLE_READ, [a, 16, 0, 0, 0, 0]), Error::BadAddress);
    }
    Ok(Pass::Ok)
}

fn t_kernel_pointer_as_input_struct() -> TestResult {
    for &a in &KERNEL_ADDRS {
        refused!(raw(nr::AR_SET_SEG, [rar().share, rar().object, a, 0, 0, 0]), Error::BadAddress);
        refused!(raw(nr::PCORE_RUN, [libos::pcore().share, libos::pcore().object, a, 0, 0, 0]), Error::BadAddress);
        refused!(raw(nr::SYSCALL_BATCH, [a, 1, 0, 0, 0, 0]), Error::BadAddress);
        refused!(raw(nr::SEGMENT_ALLOC, [root(), a, 8, MEMID_SELF, PAGE_SIZE, 0]), Error::BadAddress);
    }
    Ok(Pass::Ok)
}

/// Page tables sit in physical memory, which the kernel sees through its direct map: neither
/// their direct-map addresses nor their physical addresses (read as user addresses) are
/// buffers a program may use.
fn t_page_table_addresses_as_buffers() -> TestResult {
    let si = ok!(sys::sys_info());
    let top = si.total_pages * PAGE_SIZE;
    let mut phys = 0x1000u64;
    while phys < top.min(64 << 20) {
        for base in [0xffff_8000_0000_0000u64, 0xffff_8880_0000_0000, 0] {
            let a = base + phys;
            if base == 0 && a >= libos::layout::IMAGE_BASE {
                continue; // our own program lives there: a physical address read as ours
            }
            refused!(raw(nr::SYS_INFO, [a, 0, 0, 0, 0, 0]), Error::BadAddress);
            refused!(raw(nr::CONSOLE_WRITE, [a, 8, 0, 0, 0, 0]), Error::BadAddress);
        }
        phys += 1 << 20;
    }
    Ok(Pass::Ok)
}

fn t_buffer_straddles_user_end() -> TestResult {
    for len in [16u64, PAGE_SIZE, 1 << 40] {
        refused!(raw(nr::CONSOLE_WRITE, [USER_END - 8, len, 0, 0, 0, 0]), Error::BadAddress | Error::OutOfRange);
        refused!(raw(nr::SHARE_LIST, [root(), USER_END - 8, len, 0, 0, 0]), Error::BadAddress);
    }
    refused!(raw(nr::SYS_INFO, [USER_END - 8, 0, 0, 0, 0, 0]), Error::BadAddress);
    // A wrap-around: a user pointer plus a length that overflows past the kernel half to 0.
    // The pointer is 8 bytes before the end of a page of dots followed by nothing, so a
    // kernel that sends what it can before noticing shows at most 8 dots.
    let seg = ok!(new_seg(root(), 1));
    ok!(sys::ar_set_seg(rar(), &SegMapping { voff: SCRATCH_BASE, seg: seg.0, soff: 0, len: PAGE_SIZE, flags: MAP_READ | MAP_WRITE }));
    for i in 0..PAGE_SIZE / 8 {
        // SAFETY: SCRATCH_BASE..+PAGE_SIZE is mapped read-write just above.
        unsafe { core::ptr::write_volatile((SCRATCH_BASE + 8 * i) as *mut u64, u64::from_le_bytes(*b"........")) };
    }
    let p = SCRATCH_BASE + PAGE_SIZE - 8;
    let r = raw(nr::CONSOLE_WRITE, [p, 0u64.wrapping_sub(p), 0, 0, 0, 0]);
    let _ = sys::console_write(b"\n");
    let _ = sys::ar_unmap(rar(), SCRATCH_BASE, PAGE_SIZE);
    refused!(r, Error::BadAddress | Error::OutOfRange);
    refused!(raw(nr::SHARE_LIST, [root(), 0x7fff_0000_0000, 1 << 61, 0, 0, 0]), Error::BadAddress);
    Ok(Pass::Ok)
}

fn t_kernel_writes_read_only_user_memory() -> TestResult {
    // Our own code: mapped, readable, not writable. The kernel must not write it for us.
    let code = main as *const () as u64 & !7;
    let before = code_word(code);
    refused!(raw(nr::SYS_INFO, [code, 0, 0, 0, 0, 0]), Error::BadAddress);
    refused!(raw(nr::SELF_SHARES, [code, 4, 0, 0, 0, 0]), Error::BadAddress);
    refused!(raw(nr::CONSOLE_READ, [code, 8, 0, 0, 0, 0]), Error::BadAddress);
    ensure!(code_word(code) == before, "our code changed");
    Ok(Pass::Ok)
}

fn code_word(a: u64) -> u64 {
    // SAFETY: `a` is inside our own mapped, readable program image.
    unsafe { core::ptr::read_volatile(a as *const u64) }
}

// ---------------------------------------------------------------------------------------
// Mapping over the kernel half

fn t_map_segment_over_kernel_half() -> TestResult {
    let seg = ok!(new_seg(root(), 2));
    let map = |voff: u64, len: u64| sys::ar_set_seg(rar(), &SegMapping { voff, seg: seg.0, soff: 0, len, flags: MAP_READ | MAP_WRITE });
    refused!(map(USER_END, PAGE_SIZE), Error::OutOfRange);
    refused!(map(USER_END - PAGE_SIZE, 2 * PAGE_SIZE), Error::OutOfRange);
    for &k in &KERNEL_ADDRS {
        refused!(map(k, PAGE_SIZE), Error::OutOfRange);
    }
    refused!(map(ALIGNED_MAX, 2 * PAGE_SIZE), Error::OutOfRange);
    refused!(map(0, PAGE_SIZE), Error::OutOfRange);
    ensure!(ok!(sys::null()) == 0, "kernel did not survive");
    Ok(Pass::Ok)
}

fn t_link_range_over_kernel_half() -> TestResult {
    for kind in [ArKind::Span512G, ArKind::Span1G, ArKind::Span2M] {
        let sub = Del(ObjName::new(root(), ok!(sys::ar_alloc(root(), "iso-sub", MEMID_SELF, kind))));
        refused!(sys::ar_set_ar(rar(), USER_END, sub.0), Error::OutOfRange | Error::Misaligned);
        refused!(sys::ar_set_ar(rar(), 0xffff_8000_0000_0000, sub.0), Error::OutOfRange | Error::Misaligned);
        refused!(sys::ar_set_ar(rar(), USER_END - kind.span(), sub.0), Error::Overlap | Error::OutOfRange);
        refused!(sys::ar_set_ar(rar(), (USER_END - kind.span()).wrapping_add(2 * kind.span()), sub.0), Error::OutOfRange | Error::Misaligned);
    }
    Ok(Pass::Ok)
}

fn t_unmap_kernel_half() -> TestResult {
    refused!(sys::ar_unmap(rar(), USER_END, PAGE_SIZE), Error::OutOfRange);
    refused!(sys::ar_unmap(rar(), 0xffff_8000_0000_0000, 1 << 30), Error::OutOfRange);
    refused!(sys::ar_unmap(rar(), 0xffff_ffff_8000_0000, 1 << 21), Error::OutOfRange);
    refused!(sys::ar_unmap(rar(), SCRATCH_BASE, ALIGNED_MAX), Error::OutOfRange);
    refused!(sys::ar_unmap(rar(), USER_END - PAGE_SIZE, 2 * PAGE_SIZE), Error::OutOfRange | Error::Overlap);
    ensure!(ok!(sys::null()) == 0, "kernel did not survive");
    Ok(Pass::Ok)
}

// ---------------------------------------------------------------------------------------
// Ids that are not in our shares

fn t_guessed_ids_refused() -> TestResult {
    let seg = ok!(new_seg(root(), 1));
    // Neighbouring ids, ids of every core's counter, and random ones.
    for delta in 1..64u64 {
        let id = seg.0.object + delta;
        refused!(sys::segment_get_nbytes(ObjName::new(root(), id)), Error::NoSuchObject);
        refused!(sys::obj_stat(ObjName::new(id, seg.0.object)), Error::ShareNotReachable);
    }
    // Shares we legitimately reach: our share set, and shares our root share holds (the
    // library OS keeps its process and heap shares there).
    let mut set = [0u64; 16];
    let nset = ok!(sys::self_shares(&mut set)) as usize;
    let mut held = [0u64; 256];
    let nheld = ok!(sys::share_list(root(), &mut held)) as usize;
    let reachable = |id: u64| {
        set[..nset].contains(&id)
            || (held[..nheld].contains(&id) && sys::obj_stat(ObjName::new(root(), id)).is_ok_and(|st| st.obj_type == ObjType::Share as u32))
    };
    for core in 0..8u64 {
        for seq in 0..32u64 {
            let id = ((core + 1) << 40) | seq;
            if reachable(id) {
                continue;
            }
            refused!(sys::share_list(id, &mut [0; 4]), Error::ShareNotReachable | Error::WrongType);
        }
    }
    Ok(Pass::Ok)
}

fn t_two_levels_deep_unreachable() -> TestResult {
    // Reachable: shares in our set and shares they hold. A share held by a held share is not.
    let a = Del(ObjName::new(root(), ok!(sys::share_alloc(root(), "iso-a", MEMID_SELF, 0))));
    let b = ok!(sys::share_alloc(root(), "iso-b", MEMID_SELF, 0));
    let seg = ok!(sys::segment_alloc(b, "iso-deep", MEMID_SELF, PAGE_SIZE));
    ok!(sys::share_addobj(a.0.object, ObjName::new(root(), b)));
    ok!(sys::share_delobj(ObjName::new(root(), b)));
    refused!(sys::segment_get_nbytes(ObjName::new(b, seg)), Error::ShareNotReachable);
    refused!(sys::share_list(b, &mut [0; 4]), Error::ShareNotReachable);
    refused!(sys::share_addobj(root(), ObjName::new(b, seg)), Error::ShareNotReachable);
    // Through the held share it is named correctly and works.
    ok!(sys::obj_stat(ObjName::new(a.0.object, b)));
    Ok(Pass::Ok)
}

fn t_stale_ids_refused() -> TestResult {
    let s = ok!(sys::share_alloc(root(), "iso-stale", MEMID_SELF, 0));
    let seg = ok!(sys::segment_alloc(s, "iso-x", MEMID_SELF, PAGE_SIZE));
    ok!(sys::share_delobj(ObjName::new(root(), s)));
    refused!(sys::segment_get_nbytes(ObjName::new(s, seg)), Error::ShareNotReachable);
    refused!(sys::share_alloc(s, "iso-y", MEMID_SELF, 0), Error::ShareNotReachable);
    refused!(sys::share_addobj(s, rar()), Error::ShareNotReachable);
    Ok(Pass::Ok)
}

fn t_drop_root_share_refused() -> TestResult {
    refused!(sys::self_drop(root()), Error::NotPermitted);
    ensure!(ok!(sys::null()) == 0, "alive");
    Ok(Pass::Ok)
}

fn t_bad_pointers_in_batch_entries() -> TestResult {
    // A batch whose entries carry kernel pointers: each entry is refused on its own.
    let mut e = [BatchEntry::default(); 4];
    e[0] = BatchEntry { nr: nr::SYS_INFO, args: [KERNEL_ADDRS[0], 0, 0, 0, 0, 0], result: 0 };
    e[1] = BatchEntry { nr: nr::CONSOLE_WRITE, args: [KERNEL_ADDRS[3], 64, 0, 0, 0, 0], result: 0 };
    e[2] = BatchEntry { nr: nr::SYSCALL_BATCH, args: [0, 0, 0, 0, 0, 0], result: 0 };
    e[3] = BatchEntry { nr: nr::AR_SET_SEG, args: [rar().share, rar().object, KERNEL_ADDRS[1], 0, 0, 0], result: 0 };
    ok!(raw(nr::SYSCALL_BATCH, [e.as_mut_ptr() as u64, 4, 0, 0, 0, 0]));
    let want = [Error::BadAddress, Error::BadAddress, Error::InvalidArgument, Error::BadAddress];
    for (i, w) in want.iter().enumerate() {
        ensure!(e[i].result == -(*w as i64), "entry {i}: result {} want {:?}", e[i].result, w);
    }
    Ok(Pass::Ok)
}

// ---------------------------------------------------------------------------------------
// Another core's private objects (a victim runs on core 1)

fn with_victim(f: impl FnOnce(&Victim) -> TestResult) -> TestResult {
    if cores() < 2 {
        return Ok(Pass::Skipped("1 core"));
    }
    let v = start_victim()?;
    let r = f(&v);
    let s = stop_victim(v);
    let r = r?;
    s?;
    Ok(r)
}

fn t_read_other_core_private_segment() -> TestResult {
    with_victim(|v| {
        let secret = ObjName::new(v.root(), v.id(MB_SECRET_SEG));
        refused!(sys::segment_get_nbytes(secret), Error::NotPermitted | Error::ShareNotReachable);
        refused!(sys::obj_stat(secret), Error::NotPermitted | Error::ShareNotReachable);
        refused!(sys::obj_get_name(secret, &mut [0; 32]), Error::NotPermitted | Error::ShareNotReachable);
        Ok(Pass::Ok)
    })
}

fn t_map_other_core_private_segment() -> TestResult {
    with_victim(|v| {
        let secret = ObjName::new(v.root(), v.id(MB_SECRET_SEG));
        refused!(
            sys::ar_set_seg(rar(), &SegMapping { voff: SCRATCH_BASE, seg: secret, soff: 0, len: PAGE_SIZE, flags: MAP_READ }),
            Error::NotPermitted | Error::ShareNotReachable
        );
        // Named through a share we do reach: not there.
        refused!(
            sys::ar_set_seg(rar(), &SegMapping { voff: SCRATCH_BASE, seg: ObjName::new(root(), secret.object), soff: 0, len: PAGE_SIZE, flags: MAP_READ }),
            Error::NoSuchObject
        );
        Ok(Pass::Ok)
    })
}

fn t_copy_other_core_private_segment() -> TestResult {
    with_victim(|v| {
        let secret = ObjName::new(v.root(), v.id(MB_SECRET_SEG));
        refused!(sys::segment_copy(root(), secret, "stolen", COPY_EAGER), Error::NotPermitted | Error::ShareNotReachable);
        refused!(sys::segment_copy(root(), secret, "stolen", COPY_ON_WRITE), Error::NotPermitted | Error::ShareNotReachable);
        refused!(sys::share_addobj(root(), secret), Error::NotPermitted | Error::ShareNotReachable);
        Ok(Pass::Ok)
    })
}

fn t_transmit_other_core_private_segment() -> TestResult {
    with_victim(|v| {
        let secret = ObjName::new(v.root(), v.id(MB_SECRET_SEG));
        let mut devs = [abi::DeviceInfo::default(); 4];
        let n = ok!(sys::device_list(&mut devs)) as usize;
        let Some(con) = devs[..n].iter().find(|d| d.kind == abi::DEVICE_CONSOLE) else { fail!("no console") };
        let d = Del(ObjName::new(root(), ok!(sys::device_alloc(root(), con.hwid, MEMID_SELF))));
        refused!(sys::device_buf(d.0, &DeviceBuf { seg: secret, offset: 0, len: 8, buf_type: BUF_TX }), Error::NotPermitted | Error::ShareNotReachable);
        Ok(Pass::Ok)
    })
}

/// Parameters for attackers on other cores (written before they start; they read them
/// through their read-only view of our image).
static PARAM: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

fn param(i: usize) -> u64 {
    PARAM[i].load(Ordering::Acquire)
}

/// A private share of ours (core 0), held by a share we give to an attacker on core 1: the
/// attacker reaches it by nesting, so it can name it, and must still be refused.
struct OurPrivate {
    given: Del,
    private: ObjectId,
    seg: ObjectId,
}

fn our_private() -> Result<OurPrivate, Msg> {
    let given = Del(ObjName::new(root(), ok!(sys::share_alloc(root(), "iso-given", MEMID_SELF, 0))));
    // Made in our root share (reachable), then held only by the given share.
    let private = ok!(sys::share_alloc(root(), "iso-private", MEMID_SELF, SHARE_PRIVATE));
    let seg = ok!(sys::segment_alloc(private, "iso-pseg", MEMID_SELF, PAGE_SIZE));
    ok!(sys::share_addobj(given.0.object, ObjName::new(root(), private)));
    ok!(sys::share_delobj(ObjName::new(root(), private)));
    PARAM[0].store(private, Ordering::Release);
    PARAM[1].store(seg, Ordering::Release);
    Ok(OurPrivate { given, private, seg })
}

fn run_attacker(f: fn(&CoreCtx) -> u64, shares: &[ObjectId]) -> Result<u64, Msg> {
    let mut c = ok!(Core::prepare(1, &CoreOpts { shares, ..CoreOpts::default() }));
    ok!(c.start(f, 0));
    Ok(ok!(c.join(10_000)))
}

/// Returns 0 if every result is `NotPermitted`, else 10 + the index of the first that is not.
fn all_not_permitted(rs: &[Result<u64, Error>]) -> u64 {
    for (i, r) in rs.iter().enumerate() {
        if *r != Err(Error::NotPermitted) {
            println!("isolation-attacker: check {i} -> {r:?}, want NotPermitted");
            return 10 + i as u64;
        }
    }
    0
}

fn a_use_private(_: &CoreCtx) -> u64 {
    let (p, seg) = (param(0), param(1));
    all_not_permitted(&[
        sys::segment_get_nbytes(ObjName::new(p, seg)),
        sys::share_list(p, &mut [0; 8]),
        sys::segment_alloc(p, "planted", MEMID_SELF, PAGE_SIZE),
        sys::share_alloc(p, "planted", MEMID_SELF, 0),
        sys::obj_stat(ObjName::new(p, seg)).map(|_| 0),
        sys::segment_copy(p, ObjName::new(p, seg), "stolen", COPY_EAGER),
    ])
}

fn a_add_private(ctx: &CoreCtx) -> u64 {
    let (p, seg) = (param(0), param(1));
    let Ok(mine) = sys::segment_alloc(ctx.root_share, "mine", MEMID_SELF, PAGE_SIZE) else { return 2 };
    all_not_permitted(&[sys::share_addobj(p, ObjName::new(ctx.root_share, mine)), sys::share_addobj(ctx.root_share, ObjName::new(p, seg))])
}

fn a_delete_private(_: &CoreCtx) -> u64 {
    let (p, seg) = (param(0), param(1));
    all_not_permitted(&[sys::share_delobj(ObjName::new(p, seg))])
}

fn private_attack(f: fn(&CoreCtx) -> u64) -> TestResult {
    if cores() < 2 {
        return Ok(Pass::Skipped("1 core"));
    }
    let o = our_private()?;
    let code = run_attacker(f, &[o.given.0.object])?;
    ensure!(code == 0, "attacker check {code} failed (see its line above)");
    // Everything is still there (checked through a name we reach directly).
    ok!(sys::share_addobj(root(), ObjName::new(o.given.0.object, o.private)));
    let _d = Del(ObjName::new(root(), o.private));
    ensure!(ok!(sys::obj_stat(ObjName::new(o.private, o.seg))).refs == 1, "our private segment changed");
    ensure!(ok!(sys::share_list(o.private, &mut [0; 8])) == 1, "our private share changed");
    Ok(Pass::Ok)
}

fn t_use_other_core_private_share() -> TestResult {
    private_attack(a_use_private)
}

fn t_add_to_other_core_private_share() -> TestResult {
    private_attack(a_add_private)
}

fn t_delete_from_other_core_private_share() -> TestResult {
    private_attack(a_delete_private)?;
    with_victim(|v| {
        let secret = ObjName::new(v.root(), v.id(MB_SECRET_SEG));
        refused!(sys::share_delobj(secret), Error::NotPermitted | Error::ShareNotReachable);
        Ok(Pass::Ok)
    })
}

fn t_link_other_core_range() -> TestResult {
    with_victim(|v| {
        let range = ObjName::new(v.root(), v.id(MB_RANGE));
        refused!(sys::ar_set_ar(rar(), SHARED_BASE + (1 << 30), range), Error::NotPermitted | Error::ShareNotReachable);
        refused!(sys::ar_get(range, &mut [abi::ArMapping::default(); 4]), Error::NotPermitted | Error::ShareNotReachable);
        refused!(sys::ar_unmap(range, 0, PAGE_SIZE), Error::NotPermitted | Error::ShareNotReachable);
        Ok(Pass::Ok)
    })
}

fn t_unmap_other_core_root_range() -> TestResult {
    with_victim(|v| {
        // The victim's root range, named through its private root share: refused; the secret
        // is checked by the victim afterwards.
        let r = ObjName::new(v.root(), v.id(MB_ROOT_AR));
        refused!(sys::ar_unmap(r, SCRATCH_BASE, PAGE_SIZE), Error::NotPermitted | Error::ShareNotReachable | Error::NoSuchObject);
        refused!(sys::ar_get(r, &mut [abi::ArMapping::default(); 4]), Error::NotPermitted | Error::ShareNotReachable | Error::NoSuchObject);
        Ok(Pass::Ok)
    })
}

fn t_halt_other_core_context() -> TestResult {
    with_victim(|v| {
        // A pcore object the victim allocated (for core 0, i.e. us): naming it is not enough.
        let p = ObjName::new(v.given.0.object, v.id(MB_PCORE0));
        refused!(sys::pcore_halt(p, 99), Error::NotPermitted);
        // Nor the victim's own pcore through its root share.
        let ctx = PcoreContext { rip: 0x40_0000, rsp: 0x1000_0000, root_ar: rar(), ..Default::default() };
        refused!(sys::pcore_run(p, &ctx), Error::NotPermitted | Error::Busy);
        refused!(sys::pcore_set_interval(ObjName::new(v.root(), 1), 100), Error::NotPermitted | Error::ShareNotReachable);
        Ok(Pass::Ok)
    })
}

fn t_run_pcore_not_allocated() -> TestResult {
    if cores() < 2 {
        return Ok(Pass::Skipped("1 core"));
    }
    // The victim allocated a pcore for core 0 and ended; core 0 is us (busy), so use the
    // victim's run to leave a pcore for core 1 behind, and try to run it while core 1 is idle.
    let v = start_victim()?;
    let given = v.given.0.object;
    let p0 = ObjName::new(given, v.id(MB_PCORE0));
    let mut core = v.core;
    mb(MB_STOP).store(1, Ordering::Release);
    let code = ok!(core.join(10_000));
    ensure!(code == 0, "victim {code}");
    let ctx = core.context(child_ret, 0);
    refused!(sys::pcore_run(p0, &ctx), Error::NotPermitted);
    refused!(raw(nr::PCORE_SET_ROLE, [p0.share, p0.object, ROLE_XC, 0, 0, 0]), Error::NotPermitted);
    let _ = sys::ar_unmap(rar(), SHARED_BASE, PAGE_SIZE);
    drop(core);
    drop(v.given);
    drop(v._mb);
    Ok(Pass::Ok)
}

fn child_ret(_: &CoreCtx) -> u64 {
    0
}

fn t_pcore_run_unreachable_context() -> TestResult {
    if cores() < 2 {
        return Ok(Pass::Skipped("1 core"));
    }
    let c = ok!(Core::prepare(1, &CoreOpts::default()));
    let good = c.context(child_ret, 0);
    let mut ctx = good;
    ctx.root_ar = ObjName::new(0x7777_0000_0001, good.root_ar.object);
    refused!(sys::pcore_run(c.pcore, &ctx), Error::ShareNotReachable);
    let mut ctx = good;
    ctx.shares[1] = 0x7777_0000_0002;
    ctx.nshares = 2;
    refused!(sys::pcore_run(c.pcore, &ctx), Error::ShareNotReachable);
    for &k in &KERNEL_ADDRS {
        let mut ctx = good;
        ctx.rip = k;
        refused!(sys::pcore_run(c.pcore, &ctx), Error::BadAddress);
        let mut ctx = good;
        ctx.rsp = k;
        refused!(sys::pcore_run(c.pcore, &ctx), Error::BadAddress);
    }
    ensure!(ok!(sys::pcore_stat(c.pcore)).runs == 0, "a refused context ran");
    Ok(Pass::Ok)
}

fn t_batch_names_other_core_objects() -> TestResult {
    with_victim(|v| {
        let pseg = ObjName::new(v.id(MB_PRIVATE), v.id(MB_PRIVATE_SEG));
        let secret = ObjName::new(v.root(), v.id(MB_SECRET_SEG));
        let mut e = [BatchEntry::default(); 4];
        e[0] = BatchEntry { nr: nr::SEGMENT_GET_NBYTES, args: [pseg.share, pseg.object, 0, 0, 0, 0], result: 0 };
        e[1] = BatchEntry { nr: nr::SHARE_DELOBJ, args: [pseg.share, pseg.object, 0, 0, 0, 0], result: 0 };
        e[2] = BatchEntry { nr: nr::SEGMENT_GET_NBYTES, args: [secret.share, secret.object, 0, 0, 0, 0], result: 0 };
        e[3] = BatchEntry { nr: nr::SHARE_ADDOBJ, args: [root(), secret.share, secret.object, 0, 0, 0], result: 0 };
        ok!(raw(nr::SYSCALL_BATCH, [e.as_mut_ptr() as u64, 4, 0, 0, 0, 0]));
        for (i, x) in e.iter().enumerate() {
            let refused = x.result == -(Error::NotPermitted as i64) || x.result == -(Error::ShareNotReachable as i64);
            ensure!(refused, "batch entry {i} naming another core's object -> {}", x.result);
        }
        Ok(Pass::Ok)
    })
}

/// An application core's calls run on a kernel core. Make the forwarded calls name objects
/// in a private share *of the kernel core's own core*: the kernel core must judge them as the
/// application core's calls, and refuse. Needs 3 cores: the owner (core 1, then a kernel
/// core), the attacker (core 2, an application core that reaches the share by nesting).
fn a_forwarded(ctx: &CoreCtx) -> u64 {
    let (p, seg) = (param(0), param(1));
    let mut batch = [
        BatchEntry { nr: nr::SEGMENT_GET_NBYTES, args: [p, seg, 0, 0, 0, 0], result: 0 },
        BatchEntry { nr: nr::SEGMENT_ALLOC, args: [p, b"x".as_ptr() as u64, 1, MEMID_SELF, PAGE_SIZE, 0], result: 0 },
    ];
    let r = all_not_permitted(&[sys::segment_get_nbytes(ObjName::new(p, seg)), sys::share_list(p, &mut [0; 8]), sys::share_delobj(ObjName::new(p, seg))]);
    if r != 0 {
        return r;
    }
    if raw(nr::SYSCALL_BATCH, [batch.as_mut_ptr() as u64, 2, 0, 0, 0, 0]) != Ok(2) {
        return 30;
    }
    for (i, e) in batch.iter().enumerate() {
        if e.result != -(Error::NotPermitted as i64) {
            println!("isolation-attacker: forwarded batch entry {i} -> {}", e.result);
            return 31 + i as u64;
        }
    }
    match sys::core_stats(ctx.core) {
        Ok(st) if st.syscalls_forwarded > 0 => 0,
        r => {
            println!("isolation-attacker: no call was forwarded ({r:?}): not running as an application core");
            40
        }
    }
}

fn t_forwarded_calls_name_kernel_core_objects() -> TestResult {
    if cores() < 3 {
        return Ok(Pass::Skipped("fewer than 3 cores"));
    }
    let v = start_victim()?;
    let (given, p, pseg) = (v.given.0.object, v.id(MB_PRIVATE), v.id(MB_PRIVATE_SEG));
    PARAM[0].store(p, Ordering::Release);
    PARAM[1].store(pseg, Ordering::Release);
    let mut vcore = v.core;
    mb(MB_STOP).store(1, Ordering::Release);
    let code = ok!(vcore.join(10_000));
    ensure!(code == 0, "victim {code}");
    let set_role = |pc: ObjName, role: u64| raw(nr::PCORE_SET_ROLE, [pc.share, pc.object, role, 0, 0, 0]);
    let mut result = Ok(0);
    let r_kc = set_role(vcore.pcore, ROLE_KC);
    if r_kc.is_ok() {
        result = (|| {
            let mut c = ok!(Core::prepare(2, &CoreOpts { shares: &[given], ..CoreOpts::default() }));
            let mut ctx = c.context(a_forwarded, 0);
            ctx.role = ROLE_AC;
            ok!(sys::pcore_run(c.pcore, &ctx));
            let st = ok!(c.wait(10_000));
            let back = set_role(c.pcore, ROLE_XC);
            ok!(back);
            Ok(st.exit_code)
        })();
    }
    let back1 = set_role(vcore.pcore, ROLE_XC);
    let _ = sys::ar_unmap(rar(), SHARED_BASE, PAGE_SIZE);
    drop(vcore);
    drop(v.given);
    drop(v._mb);
    ok!(r_kc);
    ok!(back1);
    let code = result?;
    ensure!(code == 0, "attacker check {code} failed (see its line above)");
    Ok(Pass::Ok)
}

// ---------------------------------------------------------------------------------------
// User-mode attacks: the attacker runs on core 1 and must die of a fault

/// Run `f` on core 1 and return its exit code.
fn attack(f: fn(&CoreCtx) -> u64, arg: u64) -> Result<u64, Msg> {
    let mut c = ok!(Core::prepare(1, &CoreOpts::default()));
    ok!(c.start(f, arg));
    Ok(ok!(c.join(10_000)))
}

fn must_fault(f: fn(&CoreCtx) -> u64, arg: u64, what: &str) -> TestResult {
    if cores() < 2 {
        return Ok(Pass::Skipped("1 core"));
    }
    let code = attack(f, arg)?;
    ensure!(
        code == EXIT_FAULT_BASE + 14 || code == EXIT_FAULT_BASE + 13,
        "{what}: the attacker exited with {code:#x}, want a page fault ({:#x}) or a general-protection fault",
        EXIT_FAULT_BASE + 14
    );
    ensure!(ok!(sys::null()) == 0, "kernel did not survive");
    Ok(Pass::Ok)
}

fn a_read(ctx: &CoreCtx) -> u64 {
    // SAFETY: deliberately reads memory we have no right to; the kernel must kill us here.
    let v = unsafe { core::ptr::read_volatile(ctx.arg as *const u64) };
    println!("isolation-attacker: read {v:#x} at {:#x}", ctx.arg);
    1
}

fn a_write(ctx: &CoreCtx) -> u64 {
    // SAFETY: deliberately writes memory we have no right to; the kernel must kill us here.
    unsafe { core::ptr::write_volatile(ctx.arg as *mut u64, 0xdead) };
    println!("isolation-attacker: wrote at {:#x}", ctx.arg);
    1
}

fn t_user_reads_kernel_memory() -> TestResult {
    for &a in &[KERNEL_ADDRS[0], KERNEL_ADDRS[3], KERNEL_ADDRS[1]] {
        must_fault(a_read, a, "read kernel memory")?;
    }
    Ok(Pass::Ok)
}

fn t_user_writes_kernel_memory() -> TestResult {
    for &a in &[KERNEL_ADDRS[0], KERNEL_ADDRS[3]] {
        must_fault(a_write, a, "write kernel memory")?;
    }
    Ok(Pass::Ok)
}

fn t_user_reads_noncanonical() -> TestResult {
    must_fault(a_read, NONCANONICAL[0], "read a non-canonical address")
}

fn t_user_writes_code() -> TestResult {
    must_fault(a_write, (main as *const () as u64) & !7, "write our own code")
}

fn t_user_reads_other_core_memory() -> TestResult {
    // Core 0's stack and heap are not mapped in core 1's root range.
    let sp = {
        let x = 0u8;
        core::ptr::addr_of!(x) as u64
    };
    must_fault(a_read, sp & !7, "read the parent's stack from another core")?;
    must_fault(a_read, libos::layout::HEAP_BASE, "read the parent's heap from another core")
}

/// Map a page with `flags` at SCRATCH_BASE in our own root range, put `ret` in it and call it.
fn a_exec(ctx: &CoreCtx) -> u64 {
    let flags = ctx.arg;
    let Ok(seg) = sys::segment_alloc(ctx.share, "iso-code", MEMID_SELF, PAGE_SIZE) else { return 2 };
    let seg = ObjName::new(ctx.share, seg);
    // Fill it through a writable mapping elsewhere, then map it with the flags under test.
    let w = SegMapping { voff: SCRATCH_BASE + (1 << 30), seg, soff: 0, len: PAGE_SIZE, flags: MAP_READ | MAP_WRITE };
    if sys::ar_set_seg(ctx.root_ar, &w).is_err() {
        return 3;
    }
    // SAFETY: mapped read-write just above. 0xC3 is `ret`.
    unsafe { core::ptr::write_volatile((SCRATCH_BASE + (1 << 30)) as *mut u8, 0xC3) };
    let m = SegMapping { voff: SCRATCH_BASE, seg, soff: 0, len: PAGE_SIZE, flags };
    if sys::ar_set_seg(ctx.root_ar, &m).is_err() {
        return 4;
    }
    // SAFETY: deliberately calls a data page; without MAP_EXEC the fetch must fault (NX). With
    // MAP_EXEC (the control case) it runs `ret` and comes back.
    let f: extern "C" fn() = unsafe { core::mem::transmute::<usize, extern "C" fn()>(SCRATCH_BASE as usize) };
    f();
    if flags & MAP_EXEC != 0 {
        0
    } else {
        println!("isolation-attacker: executed a page mapped without MAP_EXEC (flags {flags})");
        1
    }
}

fn a_exec_stack(_: &CoreCtx) -> u64 {
    let code = [0xC3u8; 16];
    let p = core::hint::black_box(code.as_ptr());
    // SAFETY: deliberately calls into the stack, which is never executable: must fault.
    let f: extern "C" fn() = unsafe { core::mem::transmute::<*const u8, extern "C" fn()>(p) };
    f();
    println!("isolation-attacker: executed the stack");
    1
}

fn t_execute_data_page() -> TestResult {
    must_fault(a_exec, MAP_READ | MAP_WRITE, "execute a read-write data page")
}

fn t_execute_read_only_page() -> TestResult {
    must_fault(a_exec, MAP_READ, "execute a read-only page")
}

fn t_execute_stack() -> TestResult {
    must_fault(a_exec_stack, 0, "execute the stack")
}

fn t_execute_exec_page_control() -> TestResult {
    // The control case: the same page mapped with MAP_EXEC runs (so the cases above fail for
    // the right reason).
    if cores() < 2 {
        return Ok(Pass::Skipped("1 core"));
    }
    let code = attack(a_exec, MAP_READ | MAP_EXEC)?;
    ensure!(code == 0, "a page mapped with MAP_EXEC did not run: exit {code:#x}");
    Ok(Pass::Ok)
}

// ---------------------------------------------------------------------------------------

type Test = (&'static str, fn() -> TestResult);

const TESTS: &[Test] = &[
    ("syscall_reads_kernel_memory", t_syscall_reads_kernel_memory),
    ("syscall_writes_kernel_memory", t_syscall_writes_kernel_memory),
    ("kernel_pointer_as_output_array", t_kernel_pointer_as_output_array),
    ("kernel_pointer_as_input_struct", t_kernel_pointer_as_input_struct),
    ("page_table_addresses_as_buffers", t_page_table_addresses_as_buffers),
    ("buffer_straddles_user_end", t_buffer_straddles_user_end),
    ("kernel_writes_read_only_user_memory", t_kernel_writes_read_only_user_memory),
    ("map_segment_over_kernel_half", t_map_segment_over_kernel_half),
    ("link_range_over_kernel_half", t_link_range_over_kernel_half),
    ("unmap_kernel_half", t_unmap_kernel_half),
    ("guessed_ids_refused", t_guessed_ids_refused),
    ("two_levels_deep_unreachable", t_two_levels_deep_unreachable),
    ("stale_ids_refused", t_stale_ids_refused),
    ("drop_root_share_refused", t_drop_root_share_refused),
    ("bad_pointers_in_batch_entries", t_bad_pointers_in_batch_entries),
    ("read_other_core_private_segment", t_read_other_core_private_segment),
    ("map_other_core_private_segment", t_map_other_core_private_segment),
    ("copy_other_core_private_segment", t_copy_other_core_private_segment),
    ("transmit_other_core_private_segment", t_transmit_other_core_private_segment),
    ("use_other_core_private_share", t_use_other_core_private_share),
    ("add_to_other_core_private_share", t_add_to_other_core_private_share),
    ("delete_from_other_core_private_share", t_delete_from_other_core_private_share),
    ("link_other_core_range", t_link_other_core_range),
    ("unmap_other_core_root_range", t_unmap_other_core_root_range),
    ("halt_other_core_context", t_halt_other_core_context),
    ("run_pcore_not_allocated", t_run_pcore_not_allocated),
    ("pcore_run_unreachable_context", t_pcore_run_unreachable_context),
    ("batch_names_other_core_objects", t_batch_names_other_core_objects),
    ("forwarded_calls_name_kernel_core_objects", t_forwarded_calls_name_kernel_core_objects),
    ("user_reads_kernel_memory", t_user_reads_kernel_memory),
    ("user_writes_kernel_memory", t_user_writes_kernel_memory),
    ("user_reads_noncanonical", t_user_reads_noncanonical),
    ("user_writes_code", t_user_writes_code),
    ("user_reads_other_core_memory", t_user_reads_other_core_memory),
    ("execute_data_page", t_execute_data_page),
    ("execute_read_only_page", t_execute_read_only_page),
    ("execute_stack", t_execute_stack),
    ("execute_exec_page_control", t_execute_exec_page_control),
];

fn main(args: &'static str) -> u64 {
    println!("isolation: {} cores, {} cases", cores(), TESTS.len());
    let mut tally = Tally::default();
    for &(name, f) in TESTS {
        if !selected(args, name) {
            continue;
        }
        tally.record(name, f());
    }
    tally.finish()
}
