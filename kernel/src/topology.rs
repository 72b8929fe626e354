//! Package, core and thread from CPUID, node from the SRAT, and the locality matrix that
//! Corey's `locality_get` returns (seeds/000 section 4).

use core::sync::atomic::{AtomicU8, Ordering};

use crate::arch::x86_64::acpi::MAX_NODES;
use crate::arch::x86_64::cpu::cpuid;
use crate::percpu::{CoreSlots, PerCpu};
use percore::{CachePadded, TicketLock, MAX_CORES};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTopology {
    pub apic_id: u32,
    pub package: u32,
    pub core: u32,
    pub thread: u32,
    pub node: u32,
}

impl CpuTopology {
    /// Before the core has read its own (all zero, as `Default`).
    pub const UNKNOWN: CpuTopology = CpuTopology { apic_id: 0, package: 0, core: 0, thread: 0, node: 0 };
}

/// How close two cores are, nearest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Locality {
    SameCore = 0,
    SmtSibling = 1,
    SamePackage = 2,
    SameNode = 3,
    OtherNode = 4,
}

impl Locality {
    pub fn short(self) -> &'static str {
        match self {
            Locality::SameCore => "self",
            Locality::SmtSibling => "smt",
            Locality::SamePackage => "pkg",
            Locality::SameNode => "node",
            Locality::OtherNode => "far",
        }
    }
}

/// Decode this core's APIC id into package/core/thread with CPUID leaf 0xB when available,
/// otherwise leaves 1 and 4.
pub fn detect(apic_id: u32, node: u32) -> CpuTopology {
    let max_leaf = cpuid(0, 0).eax;
    let (smt_bits, pkg_shift) = if max_leaf >= 0xB && cpuid(0xB, 0).ebx != 0 {
        let mut smt_bits = 0;
        let mut pkg_shift = 0;
        for sub in 0..8 {
            let r = cpuid(0xB, sub);
            let level_type = (r.ecx >> 8) & 0xFF;
            if level_type == 0 {
                break;
            }
            let shift = r.eax & 0x1F;
            if level_type == 1 {
                smt_bits = shift;
            }
            pkg_shift = shift;
        }
        (smt_bits, pkg_shift)
    } else {
        let logical = (cpuid(1, 0).ebx >> 16) & 0xFF;
        let cores = if max_leaf >= 4 { ((cpuid(4, 0).eax >> 26) & 0x3F) + 1 } else { 1 };
        let bits = |n: u32| if n <= 1 { 0 } else { 32 - (n - 1).leading_zeros() };
        let threads_per_core = (logical.max(1) / cores.max(1)).max(1);
        (bits(threads_per_core), bits(threads_per_core) + bits(cores))
    };
    let pkg_shift = pkg_shift.max(smt_bits);
    let mask = |bits: u32| 1u32.checked_shl(bits).map_or(u32::MAX, |v| v - 1);
    CpuTopology {
        apic_id,
        package: apic_id.checked_shr(pkg_shift).unwrap_or(0),
        core: apic_id.checked_shr(smt_bits).unwrap_or(0) & mask(pkg_shift - smt_bits),
        thread: apic_id & mask(smt_bits),
        node,
    }
}

pub fn locality(a: &CpuTopology, b: &CpuTopology) -> Locality {
    if a.apic_id == b.apic_id {
        Locality::SameCore
    } else if a.node != b.node {
        Locality::OtherNode
    } else if a.package == b.package && a.core == b.core {
        Locality::SmtSibling
    } else if a.package == b.package {
        Locality::SamePackage
    } else {
        Locality::SameNode
    }
}

/// Each core's topology record, written once by the core during bring-up (`set`).
static TOPOLOGY: CoreSlots<TicketLock<CpuTopology>> = CoreSlots::new([const { CachePadded::new(TicketLock::new(CpuTopology::UNKNOWN)) }; MAX_CORES]);

/// Record the calling core's topology during bring-up (before it is marked online).
pub fn set(area: &PerCpu, t: CpuTopology) {
    *TOPOLOGY.of(area).lock() = t;
}

/// The topology record of core `area`.
pub fn of(area: &PerCpu) -> CpuTopology {
    *TOPOLOGY.of(area).lock()
}

/// `locality_get` for cores `i` and `j`: the locality level and the NUMA distance.
pub fn locality_get(i: usize, j: usize) -> Option<(Locality, u8)> {
    let a = crate::percpu::get(i)?;
    let b = crate::percpu::get(j)?;
    Some((locality(&of(a), &of(b)), numa_distance(a.node as usize, b.node as usize)))
}

/// Print the per-core topology and the locality matrix.
pub fn print() {
    use crate::log::kprintln;
    let n = crate::percpu::online_count();
    kprintln!("topology: {n} cores");
    kprintln!("  core  apic  node  package  core  thread");
    for c in crate::percpu::all().take(n) {
        let t = of(c);
        kprintln!("  {:>4}  {:>4}  {:>4}  {:>7}  {:>4}  {:>6}", c.index, t.apic_id, t.node, t.package, t.core, t.thread);
    }
    kprintln!("locality matrix (self, smt = SMT sibling, pkg = same package, node = same NUMA node, far = other node; distance from SLIT or 10/20):");
    let mut header = alloc::string::String::from("        ");
    for j in 0..n {
        header.push_str(&alloc::format!("{j:>8}"));
    }
    kprintln!("{header}");
    for i in 0..n {
        let mut row = alloc::format!("  {i:>4}  ");
        for j in 0..n {
            match locality_get(i, j) {
                Some((l, d)) => row.push_str(&alloc::format!("{:>5}/{d:<2}", l.short())),
                None => row.push_str("       ?"),
            }
        }
        kprintln!("{row}");
    }
}

/// NUMA distances (SLIT, or 10 local / 20 remote).
static NUMA_DISTANCE: [[AtomicU8; MAX_NODES]; MAX_NODES] = [const { [const { AtomicU8::new(0) }; MAX_NODES] }; MAX_NODES];

pub fn numa_distance(a: usize, b: usize) -> u8 {
    match NUMA_DISTANCE.get(a).and_then(|r| r.get(b)).map(|d| d.load(Ordering::Relaxed)) {
        Some(d) if d != 0 => d,
        _ if a == b => 10,
        _ => 20,
    }
}

/// Record the distance from node `a` to node `b` (the boot processor, from the SLIT).
pub fn set_numa_distance(a: usize, b: usize, d: u8) {
    if let Some(slot) = NUMA_DISTANCE.get(a).and_then(|r| r.get(b)) {
        slot.store(d, Ordering::Relaxed);
    }
}
