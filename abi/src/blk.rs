//! The block device (docs/fs.md): a `virtio-blk` disk as a Corey device object, and how a
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
//! **Several cores: two modes**, as the NIC's (`abi::net`), chosen with
//! `device_conf(dev, CONF_BLK_MODE, mode | nrings << 8)` while no kernel core is attached and
//! no request is in the device (`Busy` otherwise):
//!
//! - `BLK_MODE_POLLING` (the default): each requesting core calls `device_buf`, which places
//!   its request in the disk's one virtqueue under an MCS lock, taken twice per disk request
//!   by the requesting core (to place it, to take its completion), never while the disk works:
//!   several cores' requests are in the device at once. The call waits (spinning) for its own
//!   completion.
//! - `BLK_MODE_DEDICATED` with `nrings` rings (1..=`BLK_MAX_RINGS`): a kernel core the device
//!   object is attached to (`pcore_add_device`) owns the virtqueue alone. Each requesting core
//!   posts requests on its own *submit ring* and takes their completions from its own
//!   *completion ring*, both in the request segment: single producer, single consumer, no lock
//!   and no line shared between requesting cores. `device_buf` is `NotPermitted` in this mode.
//!   The rings take the first pages of the request segment (below); requests may only name
//!   bytes from `blk_data_offset(nrings)` on (`OutOfRange` otherwise). Setting the mode clears
//!   those pages. The segment must hold the rings and at least one page of data
//!   (`OutOfRange`).
//!
//! **Dedicated layout** (offsets from the start of the request segment):
//!
//! - page 0, written by the kernel: word 0 `BLK_MAGIC`, word 1 `nrings`, word 2 the core the
//!   device is attached to, or `BLK_DETACHED` (a program waiting for a completion reads it: a
//!   request pending while no kernel core polls gets the clear error `NoSuchCore`);
//! - ring `r`'s submit ring on page `blk_submit_page(r)`, its completion ring on
//!   `blk_done_page(r)`. A ring page holds `BLK_RING_ENTRIES` slots of `BLK_SLOT_BYTES` from
//!   byte `BLK_RING_ENTRIES_AT` and the consumer's count (u64 at byte `BLK_RING_CONSUMER`, on
//!   a line of its own). Entry `seq` (from 0) goes in slot `seq % BLK_RING_ENTRIES`, whose
//!   word 0 is the tag `seq + 1`, written last (release) by the producer: the consumer knows
//!   entry `seq` has arrived when the tag says so, with no producer count to read (the NIC's
//!   and `percore::spsc`'s protocol). The consumer stores its count after each entry; the
//!   producer never writes more than `BLK_RING_ENTRIES` entries ahead of it.
//! - submit entry: word 1 = `op | len << 32` (`op` one of `BUF_BLK_*`, `len` in bytes), word 2
//!   = first sector, word 3 = byte offset in the segment (`blk_submit_words`).
//! - completion entry: word 1 = the submit entry's sequence number, word 2 = bytes transferred,
//!   word 3 = 0 or an `Error` code (`blk_done_words`).
//!
//! The kernel core checks every submit entry as `device_buf` checks its arguments (and the
//! data offset against the ring pages); a bad entry is answered with its error on the
//! completion ring and counted (`DeviceStat::drops` counts refused ring entries in this mode).
//! A completion consumer count that is impossible stops that ring (counted in `errors`); a
//! program can stall or break only its own rings. Each ring has at most one request in the
//! device at a time (its later entries wait their turn); rings are served round-robin.
//!
//! **Counters** (`device_stat`, summed over per-core counters the kernel keeps): `packets_in` / `packets_out` = read / write requests
//! completed, `bytes_in` / `bytes_out` = bytes read from / written to the disk, `errors` =
//! requests the disk failed (and, Dedicated, rings stopped), `buffers` = the disk's capacity
//! in sectors, `drops` = flushes (Polling) or flushes plus refused ring entries (Dedicated).

/// Bytes of one sector: the unit of every offset and length.
pub const BLK_SECTOR: u64 = 512;
/// Most bytes one request transfers (bounds the time the queue lock is held).
pub const BLK_MAX_REQUEST: u64 = 256 * 1024;

/// `DeviceBuf::buf_type` of a block device: read sectors from the disk into the segment.
pub const BUF_BLK_READ: u64 = 0x20;
/// Write sectors from the segment to the disk.
pub const BUF_BLK_WRITE: u64 = 0x21;
/// Make every write completed so far durable (the disk's cache flushed).
pub const BUF_BLK_FLUSH: u64 = 0x22;

/// `device_conf` key of a block device: the mode (`BLK_MODE_*` in the low byte, the number of
/// rings of Dedicated mode in bits 8..16).
pub const CONF_BLK_MODE: u64 = 0x200;
pub const BLK_MODE_POLLING: u64 = 0;
pub const BLK_MODE_DEDICATED: u64 = 1;
/// Most rings (requesting cores) of Dedicated mode.
pub const BLK_MAX_RINGS: u64 = 16;
/// Header word 0 once the kernel has set the rings up ("BLKRING1").
pub const BLK_MAGIC: u64 = 0x424C_4B52_494E_4731;
/// Header word 2 while no kernel core polls the device.
pub const BLK_DETACHED: u64 = u64::MAX;
/// Entries of one ring (a power of two) and the layout of a ring page.
pub const BLK_RING_ENTRIES: u64 = 64;
pub const BLK_SLOT_BYTES: u64 = 32;
pub const BLK_RING_CONSUMER: u64 = 128;
pub const BLK_RING_ENTRIES_AT: u64 = 256;
const _: () = assert!(BLK_RING_ENTRIES_AT + BLK_RING_ENTRIES * BLK_SLOT_BYTES <= crate::PAGE_SIZE);

/// Page of ring `r`'s submit ring (produced by the requesting core, consumed by the kernel).
pub const fn blk_submit_page(r: u64) -> u64 {
    1 + 2 * r
}

/// Page of ring `r`'s completion ring (produced by the kernel, consumed by the requesting core).
pub const fn blk_done_page(r: u64) -> u64 {
    2 + 2 * r
}

/// First byte of the segment a Dedicated request may name, with `nrings` rings.
pub const fn blk_data_offset(nrings: u64) -> u64 {
    (1 + 2 * nrings) * crate::PAGE_SIZE
}

/// Word index (in its page) of slot `seq`'s word 0.
pub const fn blk_slot_word(seq: u64) -> usize {
    ((BLK_RING_ENTRIES_AT + (seq % BLK_RING_ENTRIES) * BLK_SLOT_BYTES) / 8) as usize
}

/// The tag of entry `seq` (never 0, so a cleared slot holds no entry).
pub const fn blk_tag(seq: u64) -> u64 {
    seq.wrapping_add(1)
}

/// Words 1..=3 of a submit entry.
pub const fn blk_submit_words(op: u64, sector: u64, offset: u64, len: u64) -> [u64; 3] {
    [(op & 0xFFFF_FFFF) | len << 32, sector, offset]
}

/// A submit entry's words 1..=3 read back: (op, sector, offset, len).
pub const fn blk_submit_parse(w: [u64; 3]) -> (u64, u64, u64, u64) {
    (w[0] & 0xFFFF_FFFF, w[1], w[2], w[0] >> 32)
}

/// Words 1..=3 of a completion entry answering submit entry `seq`.
pub fn blk_done_words(seq: u64, r: Result<u64, crate::Error>) -> [u64; 3] {
    match r {
        Ok(n) => [seq, n, 0],
        Err(e) => [seq, 0, e as u64],
    }
}

/// A completion entry's words 1..=3 read back: (submit seq, result). An error code that is not
/// an `Error` reads as `Io`.
pub fn blk_done_parse(w: [u64; 3]) -> (u64, Result<u64, crate::Error>) {
    if w[2] == 0 {
        (w[0], Ok(w[1]))
    } else {
        (w[0], Err(crate::Error::from_code(w[2] as i64).unwrap_or(crate::Error::Io)))
    }
}

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

    #[test]
    fn ring_layout_and_entries() {
        // Rings and data do not overlap, and slots stay inside their page.
        assert_eq!(blk_data_offset(2), 5 * crate::PAGE_SIZE);
        assert!(blk_done_page(1) < blk_data_offset(2) / crate::PAGE_SIZE);
        assert_eq!(blk_submit_page(1), blk_done_page(0) + 1);
        assert_eq!(blk_slot_word(BLK_RING_ENTRIES), blk_slot_word(0));
        assert!((blk_slot_word(BLK_RING_ENTRIES - 1) + 4) * 8 <= crate::PAGE_SIZE as usize);
        assert!(blk_slot_word(0) * 8 > BLK_RING_CONSUMER as usize + 56, "consumer count on its own line");
        assert_ne!(blk_tag(0), 0);
        let w = blk_submit_words(BUF_BLK_WRITE, 12345, 8192, BLK_MAX_REQUEST);
        assert_eq!(blk_submit_parse(w), (BUF_BLK_WRITE, 12345, 8192, BLK_MAX_REQUEST));
        assert_eq!(blk_done_parse(blk_done_words(7, Ok(4096))), (7, Ok(4096)));
        assert_eq!(blk_done_parse(blk_done_words(8, Err(Error::OutOfRange))), (8, Err(Error::OutOfRange)));
        assert_eq!(blk_done_parse([9, 0, 9999]), (9, Err(Error::Io)));
    }
}
