//! The descriptor window: the segments behind descriptors (pipe rings, in-memory files)
//! mapped into this context at `layout::MAPWIN_OFF`, one 64 MiB slot each, cached in the
//! context page (`Ctx::mapped`), so reads and writes of them are plain memory accesses.

use abi::{Error, ObjName, ObjectId, SegMapping, MAP_READ, MAP_WRITE, PAGE_SIZE};

use crate::layout::{MAPWIN_OFF, MAPWIN_SLOT};

/// Map a segment into this context's descriptor window (cached per context).
pub(super) fn map(seg: ObjName) -> Result<(u64, u64), Error> {
    let c = crate::ctx::ctx();
    let base = crate::ctx::arena() + MAPWIN_OFF;
    let len = crate::sys::segment_get_nbytes(seg)?.next_multiple_of(PAGE_SIZE).min(MAPWIN_SLOT);
    if let Some(i) = c.mapped.iter().position(|&m| m == seg.object) {
        return Ok((base + i as u64 * MAPWIN_SLOT, len));
    }
    let i = c.mapped.iter().position(|&m| m == 0).ok_or(Error::Busy)?;
    let va = base + i as u64 * MAPWIN_SLOT;
    crate::sys::ar_set_seg(c.root_ar, &SegMapping { voff: va, seg, soff: 0, len, flags: MAP_READ | MAP_WRITE })?;
    c.mapped[i] = seg.object;
    Ok((va, len))
}

/// Unmap segment `seg` from this context's descriptor window, if it is mapped there.
pub(super) fn unmap_one(seg: ObjectId) {
    let c = crate::ctx::ctx();
    if let Some(i) = c.mapped.iter().position(|&m| m == seg) {
        let _ = crate::sys::ar_unmap(c.root_ar, crate::ctx::arena() + MAPWIN_OFF + i as u64 * MAPWIN_SLOT, MAPWIN_SLOT);
        c.mapped[i] = 0;
    }
}

/// Unmap every segment this context mapped for descriptors.
pub fn unmap_all() {
    let c = crate::ctx::ctx();
    let base = crate::ctx::arena() + MAPWIN_OFF;
    for i in 0..c.mapped.len() {
        if c.mapped[i] != 0 {
            let _ = crate::sys::ar_unmap(c.root_ar, base + i as u64 * MAPWIN_SLOT, MAPWIN_SLOT);
            c.mapped[i] = 0;
        }
    }
}
