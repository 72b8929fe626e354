//! The block device (issue 16): a `virtio-blk` disk as a Corey device object, and how a
//! program moves sectors between the disk and a segment of its own.
//!
//! `device_alloc(share, hwid, memid, seg_share, seg, 0)` with a disk's hwid (from
//! `device_list`, kind `DEVICE_BLOCK`) makes a *block device object* bound to the *request
//! segment* `seg`, which the program maps. The segment is **pinned** while the object lives
//! (every page allocated and kept in place; shrinking it and copy-on-write copies of it are
//! `Busy`, and a segment already sharing pages copy-on-write is refused with `Busy`), so the
//! disk reads into and writes from its pages in place: no copy in the kernel. One block device
//! object at a time owns a disk (`Busy` otherwise); freeing it resets the device. The last
//! argument is reserved and must be 0 (`InvalidArgument` otherwise).
//!
//! **Requests.** `device_buf(dev_share, dev, &DeviceBuf)` with
//!
//! - `buf_type` = `BUF_BLK_READ` (disk to segment), `BUF_BLK_WRITE` (segment to disk) or
//!   `BUF_BLK_FLUSH` (ask the disk to make earlier writes durable; the other fields must be 0);
//! - `seg.share` = the first sector (`BLK_SECTOR` bytes each) on the disk; `seg.object` must
//!   be 0 (reserved);
//! - `offset` = byte offset in the bound request segment, a multiple of `BLK_SECTOR`;
//! - `len` = bytes, a non-zero multiple of `BLK_SECTOR`, at most `BLK_MAX_REQUEST`.
//!
//! It returns `len` once the transfer is complete (the call waits for the disk). Errors, and
//! nothing is transferred: `Misaligned` (offset or length not a whole number of sectors),
//! `InvalidArgument` (length 0 or above `BLK_MAX_REQUEST`, a reserved field not 0, an unknown
//! type is `Unsupported`), `OutOfRange` (the sectors run past the end of the disk, or the bytes
//! past the end of the segment), `NotPermitted` (a write to a read-only disk), `Io` (the disk
//! reported an error; counted in `errors`). A request that spans several pages of the segment
//! is sent as one disk request per page, in order; if one fails, the pages before it were
//! transferred.
//!
//! **Several cores (Polling).** The disk's one virtqueue is under an MCS lock in the kernel,
//! taken twice per disk request by the requesting core (to place it, to take its completion),
//! never while the disk works: several cores' requests are in the device at once. The call
//! still waits (spinning) for its own completion. Per-core request rings or a kernel core that
//! owns the queue (as `abi::net`'s Dedicated mode) come later.
//!
//! **Counters** (`device_stat`, summed over per-core counters the kernel keeps): `packets_in` / `packets_out` = read / write requests
//! completed, `bytes_in` / `bytes_out` = bytes read from / written to the disk, `errors` =
//! requests the disk failed, `buffers` = the disk's capacity in sectors, `drops` = flushes.

/// Bytes of one sector: the unit of every offset and length.
pub const BLK_SECTOR: u64 = 512;
/// Most bytes one `device_buf` call transfers (bounds the time the queue lock is held).
pub const BLK_MAX_REQUEST: u64 = 256 * 1024;

/// `DeviceBuf::buf_type` of a block device: read sectors from the disk into the segment.
pub const BUF_BLK_READ: u64 = 0x20;
/// Write sectors from the segment to the disk.
pub const BUF_BLK_WRITE: u64 = 0x21;
/// Make every write completed so far durable (the disk's cache flushed).
pub const BUF_BLK_FLUSH: u64 = 0x22;

/// Check a request's shape against a disk of `capacity` sectors and a segment of `seg_bytes`
/// bytes (the kernel's checks, in the order it makes them; shared so the library OS can refuse
/// the same requests without a system call and tests can state them).
pub fn blk_check(sector: u64, offset: u64, len: u64, capacity: u64, seg_bytes: u64) -> Result<(), crate::Error> {
    use crate::Error;
    if len == 0 || len > BLK_MAX_REQUEST {
        return Err(Error::InvalidArgument);
    }
    if offset % BLK_SECTOR != 0 || len % BLK_SECTOR != 0 {
        return Err(Error::Misaligned);
    }
    let sectors = len / BLK_SECTOR;
    match sector.checked_add(sectors) {
        Some(end) if end <= capacity => {}
        _ => return Err(Error::OutOfRange),
    }
    match offset.checked_add(len) {
        Some(end) if end <= seg_bytes => Ok(()),
        _ => Err(Error::OutOfRange),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn request_shapes() {
        let cap = 2048; // 1 MiB disk
        let seg = 64 * 1024;
        assert_eq!(blk_check(0, 0, 512, cap, seg), Ok(()));
        assert_eq!(blk_check(2047, 0, 512, cap, seg), Ok(()));
        assert_eq!(blk_check(2048, 0, 512, cap, seg), Err(Error::OutOfRange));
        assert_eq!(blk_check(2047, 0, 1024, cap, seg), Err(Error::OutOfRange));
        assert_eq!(blk_check(u64::MAX, 0, 512, cap, seg), Err(Error::OutOfRange));
        assert_eq!(blk_check(0, 100, 512, cap, seg), Err(Error::Misaligned));
        assert_eq!(blk_check(0, 0, 100, cap, seg), Err(Error::Misaligned));
        assert_eq!(blk_check(0, 0, 0, cap, seg), Err(Error::InvalidArgument));
        assert_eq!(blk_check(0, 0, BLK_MAX_REQUEST + 512, cap, seg), Err(Error::InvalidArgument));
        assert_eq!(blk_check(0, seg - 512, 1024, cap, seg), Err(Error::OutOfRange));
        assert_eq!(blk_check(0, u64::MAX - 511, 512, cap, seg), Err(Error::OutOfRange));
    }
}
