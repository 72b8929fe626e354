//! The commutativity checker's test cases (docs/commute.md), one table shared by the host
//! (`xtask/src/commute`, which decides which cases commute and scores them) and the guest
//! (`user/apps/src/bin/commute.rs`, which runs them); both use it from this crate.
//! No dependencies and no allocation, so it compiles on both sides; both enumerate the same
//! cases in the same order, so a case is named by its index.
//!
//! Every case starts from the same **fixture**, made fresh for it by the guest (and mirrored
//! by the model's initial state, `model::State::fixture`):
//!
//! - `SA`, `SB`: shared shares held by the process share (reachable from both cores);
//! - `X`: a segment of 2 pages in `SA`, also added to `SB`;
//! - `Y`: a segment of 2 pages in `SA`;
//! - `R`: a 2 MiB address range in `SA`, with `X`'s first page mapped read-write at offset 0;
//! - `Q`: a 2 MiB address range in `SA`, empty.
//!
//! A case is a pair of calls with concrete arguments drawn from each call's argument classes
//! (`CALLS`): same / different object, same / different share, existing / missing name, same
//! / different page. The pairs are unordered (call `i` with call `j >= i`); call A runs on
//! core 0, call B on core 1.

/// The fixture's objects (the process share that holds `SA` and `SB` is implicit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Sym {
    SA,
    SB,
    X,
    Y,
    R,
    Q,
}

pub const SYMS: [Sym; 6] = [Sym::SA, Sym::SB, Sym::X, Sym::Y, Sym::R, Sym::Q];

impl Sym {
    /// The object's name (`obj_get_name`), also how results print it.
    pub fn name(self) -> &'static str {
        match self {
            Sym::SA => "sa",
            Sym::SB => "sb",
            Sym::X => "x",
            Sym::Y => "y",
            Sym::R => "r",
            Sym::Q => "q",
        }
    }
}

/// `<share, object>`.
pub type Name = (Sym, Sym);

/// Bytes of one page (abi::PAGE_SIZE; repeated so the file has no dependency).
pub const PAGE: u64 = 4096;
/// Fixture sizes, in pages.
pub const FIXTURE_SEG_PAGES: u64 = 2;
/// Bytes a `segment_alloc` of a case asks for.
pub const NEW_SEG_BYTES: u64 = PAGE;

/// One system call with concrete arguments. Offsets and lengths are in pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Null,
    TimeNow,
    PcoreCurrent,
    /// This core's share set (`self_shares`).
    SelfShares,
    ObjStat(Name),
    ObjGetName(Name),
    ShareAlloc(Sym),
    ShareAddobj { dst: Sym, src: Name },
    ShareDelobj(Name),
    ShareList(Sym),
    SegmentAlloc(Sym),
    /// An eager copy (`COPY_EAGER`).
    SegmentCopy { dst: Sym, src: Name },
    /// A copy-on-write copy (`COPY_ON_WRITE`): the same result and state as an eager copy
    /// (the interface does not show which pages are shared), different kernel work (the
    /// source's writable mappings are write-protected).
    SegmentCopyCow { dst: Sym, src: Name },
    SegmentGetNbytes(Name),
    SegmentSetNbytes(Name, u64),
    /// A 2 MiB range (`ArKind::Span2M`).
    ArAlloc(Sym),
    ArSetSeg { ar: Name, voff: u64, seg: Name, soff: u64, len: u64 },
    ArGet(Name),
    ArUnmap { ar: Name, voff: u64, len: u64 },
}

/// A call and its argument classes.
pub type Call = crate::pairs::Call<Op>;

use Sym::*;

/// The modelled calls, in enumeration order. Not modelled (yet): pcore_* but `pcore_current`,
/// self_drop, ar_set_ar, device_*, ppc_*, console_*, sys_info, core_stats,
/// initrd_get, locality_get, syscall_batch, core_request/release (docs/commute.md).
pub const CALLS: &[Call] = &[
    Call { name: "null", variants: &[Op::Null] },
    Call { name: "time_now", variants: &[Op::TimeNow] },
    Call { name: "pcore_current", variants: &[Op::PcoreCurrent] },
    Call { name: "self_shares", variants: &[Op::SelfShares] },
    Call { name: "obj_stat", variants: &[Op::ObjStat((SA, X)), Op::ObjStat((SA, Y)), Op::ObjStat((SB, Y)), Op::ObjStat((SA, R))] },
    Call { name: "obj_get_name", variants: &[Op::ObjGetName((SA, Y)), Op::ObjGetName((SB, X))] },
    Call { name: "share_alloc", variants: &[Op::ShareAlloc(SA), Op::ShareAlloc(SB)] },
    Call {
        name: "share_addobj",
        variants: &[Op::ShareAddobj { dst: SB, src: (SA, Y) }, Op::ShareAddobj { dst: SB, src: (SA, X) }, Op::ShareAddobj { dst: SB, src: (SA, R) }],
    },
    Call { name: "share_delobj", variants: &[Op::ShareDelobj((SB, X)), Op::ShareDelobj((SA, Y)), Op::ShareDelobj((SB, Y)), Op::ShareDelobj((SA, R))] },
    Call { name: "share_list", variants: &[Op::ShareList(SA), Op::ShareList(SB)] },
    Call { name: "segment_alloc", variants: &[Op::SegmentAlloc(SA), Op::SegmentAlloc(SB)] },
    Call { name: "segment_copy", variants: &[Op::SegmentCopy { dst: SB, src: (SA, X) }, Op::SegmentCopy { dst: SA, src: (SA, Y) }] },
    Call { name: "segment_copy_cow", variants: &[Op::SegmentCopyCow { dst: SB, src: (SA, X) }, Op::SegmentCopyCow { dst: SA, src: (SA, Y) }] },
    Call { name: "segment_get_nbytes", variants: &[Op::SegmentGetNbytes((SA, X)), Op::SegmentGetNbytes((SA, Y))] },
    Call {
        name: "segment_set_nbytes",
        variants: &[Op::SegmentSetNbytes((SA, Y), 3), Op::SegmentSetNbytes((SA, Y), 1), Op::SegmentSetNbytes((SA, X), 0), Op::SegmentSetNbytes((SA, X), 3)],
    },
    Call { name: "ar_alloc", variants: &[Op::ArAlloc(SA), Op::ArAlloc(SB)] },
    Call {
        name: "ar_set_seg",
        variants: &[
            Op::ArSetSeg { ar: (SA, Q), voff: 0, seg: (SA, X), soff: 0, len: 1 },
            Op::ArSetSeg { ar: (SA, Q), voff: 1, seg: (SA, Y), soff: 1, len: 1 },
            Op::ArSetSeg { ar: (SA, R), voff: 1, seg: (SA, Y), soff: 0, len: 1 },
            Op::ArSetSeg { ar: (SA, R), voff: 0, seg: (SA, Y), soff: 0, len: 1 },
        ],
    },
    Call { name: "ar_get", variants: &[Op::ArGet((SA, R)), Op::ArGet((SA, Q))] },
    Call {
        name: "ar_unmap",
        variants: &[Op::ArUnmap { ar: (SA, R), voff: 0, len: 1 }, Op::ArUnmap { ar: (SA, R), voff: 1, len: 1 }, Op::ArUnmap { ar: (SA, Q), voff: 0, len: 1 }],
    },
];

/// One case: its index in the enumeration, and the two calls (A on core 0, B on core 1);
/// `crate::pairs::{for_each_case, case, count}` over `CALLS` enumerate them.
pub type Case = crate::pairs::Case<Op>;

