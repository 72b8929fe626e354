//! `fstest`'s test that a disk's device object gives back the memory it took: its virtqueue's
//! DMA pages (the virtio glue's `dma_alloc` / `dma_dealloc`) and its kernel tables.

use super::*;

/// Free pages plus the kernel heap's slab pages: an exact count of the memory nothing holds
/// (`sys_info` trims every core's caches first, as ltest's leak checks rely on).
fn free_memory() -> Result<i64, Msg> {
    let s = ok!(sys::sys_info());
    Ok(s.free_pages as i64 + s.slab_pages)
}

const ROUNDS: i64 = 16;

/// Catches: a device object that does not give its pages back when it goes, e.g. the virtio
/// glue never freeing a virtqueue's DMA memory (`dma_dealloc` a no-op): every bind of the
/// disk (device_alloc, which sets up the virtqueue) and its delete must leave the free
/// memory where it was. One bind first warms the heap; then `ROUNDS` binds and deletes may
/// not lose even one page each.
pub fn blk_device_gives_its_memory_back() -> TestResult {
    let hwid = disk_hwid()?;
    let s = seg(64 << 10)?;
    // Runs before the first mount, as the other `fs_blk_*` tests: the disk is free.
    drop(Del(ObjName::new(root(), ok!(blk_raw(hwid, s.0, 0)))));
    let before = free_memory()?;
    for _ in 0..ROUNDS {
        drop(Del(ObjName::new(root(), ok!(blk_raw(hwid, s.0, 0)))));
    }
    let after = free_memory()?;
    ensure!(before - after < ROUNDS, "{ROUNDS} binds of the disk lost {} pages ({before} free before, {after} after)", before - after);
    Ok(Pass::Ok)
}
