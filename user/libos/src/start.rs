//! Program start-up, exit and the panic handler.
//!
//! The first program enters at `_start` with `rdi` = a pointer to `abi::StartInfo` and `rsp` =
//! `abi::INIT_START_INFO`. Contexts started on other cores enter at `__rt_core_entry` (see
//! `cores`). Both clear `rbp` (ending frame-pointer backtraces), align the stack and call Rust.

use abi::{ObjName, StartInfo};
use core::sync::atomic::Ordering;

use crate::launch::{args, LaunchExt, ARGS_LEN, ARGS_PTR, BY_KERNEL, CORES, EXIT_RSP, HOST_MAPS, HOST_NMAPS, HOST_ROOT_AR, IMAGE_SEG, LAUNCH_MAGIC, PCORE, ROOT_AR, ROOT_SHARE, STACK_SEG, TSC_PER_MS};

/// Exit code of a program that panicked.
pub const PANIC_EXIT_CODE: u64 = 101;

#[cfg(target_os = "none")]
core::arch::global_asm!(
    ".section .text._start,\"ax\",@progbits",
    ".global _start",
    "_start:",
    "    xor ebp, ebp",
    "    and rsp, -16",
    "    call {start}",
    "    ud2",
    ".global __rt_core_entry",
    "__rt_core_entry:",
    "    xor ebp, ebp",
    "    and rsp, -16",
    "    call {core_start}",
    "    ud2",
    ".text",
    start = sym rt_start,
    core_start = sym crate::cores::rt_core_start,
);

#[cfg(target_os = "none")]
extern "Rust" {
    fn __rt_user_main(args: &'static str) -> u64;
}

#[cfg(target_os = "none")]
extern "C" fn rt_start(info: *const StartInfo, rsi_root: u64, rdx_pcore: u64) -> ! {
    // SAFETY: the kernel (or a launcher) passes a pointer to a `StartInfo` at the top of our
    // stack mapping, readable for the life of the program.
    let mut si = unsafe { core::ptr::read(info) };
    let (mut root, mut pcore) = (si.root_share, si.pcore);
    BY_KERNEL.store(si.root_share != 0, Ordering::Relaxed);
    if si.root_share == 0 {
        // SAFETY: a launcher that sets root_share = 0 writes a `LaunchExt` right after.
        let ext = unsafe { core::ptr::read(info.add(1) as *const LaunchExt) };
        if ext.magic == LAUNCH_MAGIC {
            crate::ctx::set_arena(ext.arena);
            EXIT_RSP.store(ext.exit_rsp, Ordering::Relaxed);
            if ext.exit_rsp != 0 {
                root = ext.root_share;
                pcore = ext.pcore;
                if ext.host_maps != 0 && ext.host_maps % core::mem::align_of::<abi::ArMapping>() as u64 == 0 {
                    HOST_MAPS.store(ext.host_maps, Ordering::Relaxed);
                    HOST_NMAPS.store(ext.host_nmaps, Ordering::Relaxed);
                    HOST_ROOT_AR.store(si.root_ar, Ordering::Relaxed);
                }
            } else {
                root = rsi_root;
                pcore = rdx_pcore;
            }
            if ext.share != 0 {
                for id in [si.root_ar, si.image_seg, si.stack_seg] {
                    let _ = crate::sys::share_addobj(root, ObjName::new(ext.share, id));
                }
            }
        } else {
            root = rsi_root;
            pcore = rdx_pcore;
        }
        si.root_share = root;
        si.pcore = pcore;
    }
    TSC_PER_MS.store(si.tsc_per_ms, Ordering::Relaxed);
    CORES.store(si.cores, Ordering::Relaxed);
    ROOT_AR.store(si.root_ar, Ordering::Relaxed);
    IMAGE_SEG.store(si.image_seg, Ordering::Relaxed);
    STACK_SEG.store(si.stack_seg, Ordering::Relaxed);
    ARGS_PTR.store(si.args_ptr, Ordering::Relaxed);
    ARGS_LEN.store(si.args_len, Ordering::Relaxed);
    ROOT_SHARE.store(root, Ordering::Relaxed);
    PCORE.store(pcore, Ordering::Relaxed);
    if let Err(e) = init_main(&si) {
        crate::println!("libos: start-up failed: {}", e.as_str());
        exit(1);
    }
    // SAFETY: `__rt_user_main` is defined by the program through `libos::main!`.
    let code = unsafe { __rt_user_main(args()) };
    // Its private descriptors first: a file among them is closed before the unmount.
    crate::fd::close_private_at_exit();
    // Like stdio's buffers at exit: a program that returns from main has its files written
    // back and the disk let go (an unmount error cannot change the exit code any more).
    if crate::fs::mounted() {
        let _ = crate::fs::unmount();
    }
    exit(code)
}

/// The first context's start-up: process state (`process`), then the per-core heap on the
/// process share, then the first chunk of this core's heap.
#[cfg(target_os = "none")]
fn init_main(si: &StartInfo) -> Result<(), abi::Error> {
    let p = crate::process::init_main(si)?;
    crate::heap::init(p, ObjName::new(si.root_share, si.root_ar), si.cores as usize)?;
    crate::process::set_ready();
    crate::heap::pregrow();
    Ok(())
}

/// End the calling context with exit code `code`. In a thread or a cfork child this ends
/// that context only; in a program the shell runs inside its own context it returns to the
/// shell.
pub fn exit(code: u64) -> ! {
    let rsp = EXIT_RSP.load(Ordering::Relaxed);
    // Only the program's first context returns to the launcher; a thread or a context on
    // another core ends itself (their pcore ids differ from the launcher's).
    if rsp != 0 && crate::sys::pcore_current().ok() == Some(PCORE.load(Ordering::Relaxed)) {
        #[cfg(target_os = "none")]
        // SAFETY: `rsp` is the launcher's stack pointer saved by `exec::embed_call`, whose
        // frame (callee-saved registers, return address) is still live: the launcher is
        // blocked in that call until we return through it.
        unsafe {
            crate::exec::embed_return(rsp, code)
        }
    }
    crate::launch::halt(code)
}

#[cfg(target_os = "none")]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    crate::println!("panic: {info}");
    if crate::ppc::on_handler_stack() {
        // A protected procedure call's handler is no context of ours to end: fault, which
        // ends the call (the caller gets `CallAborted`).
        // SAFETY: `ud2` raises #UD; the kernel ends the call and never returns here.
        unsafe { core::arch::asm!("ud2", options(noreturn)) }
    }
    exit(PANIC_EXIT_CODE)
}
