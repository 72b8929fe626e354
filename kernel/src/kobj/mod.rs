//! Corey's kernel objects (seeds/000 section 4): shares, segments, address ranges, pcores
//! and devices, named by `<share id, object id>` and freed when the last reference goes.
//!
//! An object is a `KRef<KObject>`. Every share entry, mapping, link and running context
//! that uses an object holds one `KRef`, so the reference count *is* Corey's count and the
//! object's resources are released by its `Drop`.

pub mod ar;
pub mod device;
pub mod gate;
pub mod kref;
pub mod pcore;
pub mod segment;
pub mod refcache;
pub mod share;

use core::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use abi::{Error, ObjType, MAX_NAME};
use kref::KRef;
use percore::{CachePadded, MAX_CORES};

pub type ObjRef = KRef<KObject>;

pub enum Kind {
    Share(share::Share),
    Segment(segment::Segment),
    Ar(ar::AddressRange),
    Pcore(pcore::Pcore),
    Device(device::Device),
    Gate(gate::Gate),
}

/// Aligned to a cache line: inside its `KRef` the counts then have a line of their own, apart
/// from the fields a borrower reads (`kref::Inner`), and two objects never share a line.
#[repr(align(64))]
pub struct KObject {
    pub id: u64,
    name: [u8; MAX_NAME],
    name_len: u8,
    /// The core whose memory the object's pages come from (`memid`).
    pub home_core: u32,
    pub kind: Kind,
}

/// Per-core id sequence and live-object count: ids are `(core + 1) << 40 | sequence`, so no
/// core ever writes a shared counter to name an object.
struct CoreIds {
    next: AtomicU64,
    live: AtomicI64,
}

static IDS: [CachePadded<CoreIds>; MAX_CORES] =
    [const { CachePadded::new(CoreIds { next: AtomicU64::new(1), live: AtomicI64::new(0) }) }; MAX_CORES];

fn new_id() -> u64 {
    let me = crate::percpu::current_index();
    let seq = IDS[me].next.fetch_add(1, Ordering::Relaxed);
    ((me as u64 + 1) << 40) | (seq & ((1 << 40) - 1))
}

/// Kernel objects alive, summed over cores (exact at quiescent points).
pub fn live_objects() -> u64 {
    (0..percore::core_count()).map(|c| IDS[c].live.load(Ordering::Relaxed)).sum::<i64>().max(0) as u64
}

/// Check a user-supplied name.
pub fn check_name(name: &[u8]) -> Result<(), Error> {
    if name.len() > MAX_NAME {
        return Err(Error::NameTooLong);
    }
    Ok(())
}

/// The NUMA node of core `core` (0 for a core that does not exist).
pub fn node_of_core(core: u32) -> usize {
    crate::percpu::get(core as usize).map_or(0, |c| c.node as usize)
}

/// Resolve `memid` to a core index.
#[inline]
pub fn memid_core(memid: u64) -> Result<u32, Error> {
    if memid == abi::MEMID_SELF {
        return Ok(crate::percpu::acting().index as u32);
    }
    if memid as usize >= crate::percpu::online_count() {
        return Err(Error::NoSuchCore);
    }
    Ok(memid as u32)
}

impl KObject {
    /// Allocate a new object. Out of memory is an error; the kind's resources are dropped.
    /// Its count is one word (`KRef`'s own): an object made private stays cheap to count and
    /// to free, whoever it is later shared with.
    pub fn create(name: &[u8], home_core: u32, kind: Kind) -> Result<ObjRef, Error> {
        Self::create_counted(name, home_core, kind, false)
    }

    /// `create` for an object that goes straight into a **shared** share (`insert_new`): the
    /// application asked for it to be used from several cores. A segment made so has its
    /// count kept per core (`refcache`): shares and mappings of it made or dropped on
    /// different cores write no common line. Other kinds are counted
    /// as by `create`. Decided here, once, while the caller holds the only reference and no
    /// other core can reach the object, so no count change ever races with the choice.
    pub fn create_shared(name: &[u8], home_core: u32, kind: Kind) -> Result<ObjRef, Error> {
        let per_core = matches!(kind, Kind::Segment(_));
        Self::create_counted(name, home_core, kind, per_core)
    }

    fn create_counted(name: &[u8], home_core: u32, kind: Kind, per_core: bool) -> Result<ObjRef, Error> {
        check_name(name)?;
        let mut n = [0u8; MAX_NAME];
        n[..name.len()].copy_from_slice(name);
        let obj = KObject { id: new_id(), name: n, name_len: name.len() as u8, home_core, kind };
        // The metadata itself comes from the memory of `memid`'s node, like the pages.
        let node = node_of_core(home_core);
        let r = if per_core { KRef::try_new_percore_on_node(obj, node) } else { KRef::try_new_borrowable_on_node(obj, node) }.map_err(|_| Error::NoMemory)?;
        IDS[crate::percpu::current_index()].live.fetch_add(1, Ordering::Relaxed);
        Ok(r)
    }

    pub fn name(&self) -> &[u8] {
        &self.name[..self.name_len as usize]
    }

    pub fn obj_type(&self) -> ObjType {
        match self.kind {
            Kind::Share(_) => ObjType::Share,
            Kind::Segment(_) => ObjType::Segment,
            Kind::Ar(_) => ObjType::AddressRange,
            Kind::Pcore(_) => ObjType::Pcore,
            Kind::Device(_) => ObjType::Device,
            Kind::Gate(_) => ObjType::Gate,
        }
    }

    pub fn as_share(&self) -> Result<&share::Share, Error> {
        match &self.kind {
            Kind::Share(s) => Ok(s),
            _ => Err(Error::WrongType),
        }
    }

    pub fn as_segment(&self) -> Result<&segment::Segment, Error> {
        match &self.kind {
            Kind::Segment(s) => Ok(s),
            _ => Err(Error::WrongType),
        }
    }

    pub fn as_ar(&self) -> Result<&ar::AddressRange, Error> {
        match &self.kind {
            Kind::Ar(a) => Ok(a),
            _ => Err(Error::WrongType),
        }
    }

    pub fn as_pcore(&self) -> Result<&pcore::Pcore, Error> {
        match &self.kind {
            Kind::Pcore(p) => Ok(p),
            _ => Err(Error::WrongType),
        }
    }

    pub fn as_device(&self) -> Result<&device::Device, Error> {
        match &self.kind {
            Kind::Device(d) => Ok(d),
            _ => Err(Error::WrongType),
        }
    }

    #[inline(always)]
    pub fn as_gate(&self) -> Result<&gate::Gate, Error> {
        match &self.kind {
            Kind::Gate(g) => Ok(g),
            _ => Err(Error::WrongType),
        }
    }

    /// An identity key for reverse maps (the object's address; stable while it lives).
    pub fn key(&self) -> usize {
        self as *const KObject as usize
    }
}

impl Drop for KObject {
    fn drop(&mut self) {
        IDS[crate::percpu::current_index()].live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `Vec::push` that reports out-of-memory instead of aborting.
pub fn try_push<T>(v: &mut alloc::vec::Vec<T>, item: T) -> Result<(), Error> {
    v.try_reserve(1).map_err(|_| Error::NoMemory)?;
    v.push(item);
    Ok(())
}

/// A set of cores, one bit each (who runs a root range, who must see a TLB shootdown).
pub struct CoreSet {
    bits: [AtomicU64; MAX_CORES / 64],
}

/// A core's place in a `CoreSet` (its word and bit), worked out once for a path that tests
/// the same core again and again (a gate's core: `kobj::gate`).
#[derive(Clone, Copy, Debug)]
pub struct CoreBit {
    word: usize,
    mask: u64,
}

impl CoreBit {
    pub const fn of(core: usize) -> CoreBit {
        CoreBit { word: (core / 64) % (MAX_CORES / 64), mask: 1 << (core % 64) }
    }
}

const _: () = assert!((MAX_CORES / 64).is_power_of_two());

impl CoreSet {
    pub const fn new() -> Self {
        Self { bits: [const { AtomicU64::new(0) }; MAX_CORES / 64] }
    }

    /// `contains` for a `CoreBit` (the word index is masked to the array, so no bounds
    /// check is left on the path).
    #[inline(always)]
    pub fn contains_bit(&self, b: CoreBit) -> bool {
        self.bits[b.word & (MAX_CORES / 64 - 1)].load(Ordering::Relaxed) & b.mask != 0
    }

    /// `insert` for a `CoreBit`.
    #[inline(always)]
    pub fn insert_bit(&self, b: CoreBit) {
        self.bits[b.word & (MAX_CORES / 64 - 1)].fetch_or(b.mask, Ordering::AcqRel);
    }

    pub fn insert(&self, core: usize) {
        self.bits[core / 64].fetch_or(1 << (core % 64), Ordering::AcqRel);
    }

    /// Whether `core` is in the set (exact for the caller's own bit: only a core changes its
    /// own bit).
    #[inline(always)]
    pub fn contains(&self, core: usize) -> bool {
        self.bits[core / 64].load(Ordering::Relaxed) & (1 << (core % 64)) != 0
    }

    pub fn remove(&self, core: usize) {
        self.bits[core / 64].fetch_and(!(1 << (core % 64)), Ordering::AcqRel);
    }

    pub fn snapshot(&self) -> [u64; MAX_CORES / 64] {
        core::array::from_fn(|i| self.bits[i].load(Ordering::Acquire))
    }
}

/// Iterate the cores in a snapshot bitmap, in order: a word at a time, a set bit at a time
/// (a TLB flush of a range loaded on one core looks at four words, not 256 bits: every
/// write protection, unmapping and copy-on-write fault calls this).
pub fn cores_in(bits: &[u64; MAX_CORES / 64]) -> impl Iterator<Item = usize> + Clone + '_ {
    CoresIn { bits, word: 0, rest: bits[0] }
}

#[derive(Clone)]
struct CoresIn<'a> {
    bits: &'a [u64; MAX_CORES / 64],
    /// The word `rest` came from.
    word: usize,
    /// Its bits not yet given.
    rest: u64,
}

impl Iterator for CoresIn<'_> {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        while self.rest == 0 {
            self.word += 1;
            if self.word >= self.bits.len() {
                return None;
            }
            self.rest = self.bits[self.word];
        }
        let b = self.rest.trailing_zeros() as usize;
        self.rest &= self.rest - 1;
        Some(self.word * 64 + b)
    }
}
