//! The `virtio-drivers` crate's `Hal` for this kernel: DMA memory from the frame allocator
//! (physically contiguous, naturally aligned buddy blocks), addresses through the physical
//! window, device registers through `boot::mmio_virt`. There is no IOMMU: sharing a buffer
//! with the device is translating its address.

use core::ptr::NonNull;
use virtio_drivers::{BufferDirection, Hal, PhysAddr, PAGE_SIZE};

use crate::mm::{frame, phys_to_virt, virt_to_phys};

pub struct KernelHal;

fn order_of(pages: usize) -> usize {
    pages.max(1).next_power_of_two().trailing_zeros() as usize
}

// SAFETY: `dma_alloc` returns zeroed, page-aligned memory owned by nobody else until
// `dma_dealloc`; `mmio_phys_to_virt` returns the kernel's uncached mapping of a BAR mapped at
// boot; `share` returns the physical address of memory in the physical window or the image.
unsafe impl Hal for KernelHal {
    fn dma_alloc(pages: usize, _direction: BufferDirection) -> (PhysAddr, NonNull<u8>) {
        let order = order_of(pages);
        let Some(pa) = frame::alloc_frames(order) else {
            // Physical address 0 is the crate's "allocation failed" (`Error::DmaError`).
            return (0, NonNull::dangling());
        };
        let va = phys_to_virt(pa) as *mut u8;
        // SAFETY: 2^order pages we just allocated, mapped in the physical window.
        unsafe { core::ptr::write_bytes(va, 0, (PAGE_SIZE << order) as usize) };
        match NonNull::new(va) {
            Some(p) => (pa as PhysAddr, p),
            None => (0, NonNull::dangling()),
        }
    }

    unsafe fn dma_dealloc(paddr: PhysAddr, _vaddr: NonNull<u8>, pages: usize) -> i32 {
        frame::free_frames(paddr as u64, order_of(pages));
        0
    }

    unsafe fn mmio_phys_to_virt(paddr: PhysAddr, size: usize) -> NonNull<u8> {
        // Every BAR of a driven device was mapped at boot (pci::init), so the lookup finds it;
        // a miss would be a kernel bug, not something a program can cause.
        let va = crate::arch::x86_64::boot::mmio_virt(paddr as u64, size as u64)
            .expect("virtio: a device register range that pci::init did not map");
        NonNull::new(va as *mut u8).expect("virtio: null MMIO mapping")
    }

    unsafe fn share(buffer: NonNull<[u8]>, _direction: BufferDirection) -> PhysAddr {
        virt_to_phys(buffer.as_ptr() as *mut u8 as u64) as PhysAddr
    }

    unsafe fn unshare(_paddr: PhysAddr, _buffer: NonNull<[u8]>, _direction: BufferDirection) {}
}
