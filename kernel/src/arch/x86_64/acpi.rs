//! ACPI: find the RSDP, then read the MADT (which cores exist) and the SRAT (which NUMA
//! node each core and each memory range belongs to) and the SLIT (node distances), and the
//! MCFG (where PCI Express configuration space is: ECAM).

use crate::mm::{read_phys, read_phys_bytes};
use percore::MAX_CORES;

pub const MAX_NODES: usize = 64;
pub const MAX_MEM_AFFINITY: usize = 64;

#[derive(Clone, Copy, Debug, Default)]
pub struct CpuEntry {
    pub apic_id: u32,
    /// Proximity domain from the SRAT (0 without one).
    pub node: u32,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct MemAffinity {
    pub start: u64,
    pub end: u64,
    pub node: u32,
}

pub struct AcpiInfo {
    pub cpus: [CpuEntry; MAX_CORES],
    pub cpu_count: usize,
    /// CPUs listed but disabled or beyond MAX_CORES (reported, never started).
    pub cpus_skipped: usize,
    pub mem: [MemAffinity; MAX_MEM_AFFINITY],
    pub mem_count: usize,
    pub has_srat: bool,
    /// Number of NUMA nodes (distinct proximity domains, dense 0..n after remapping).
    pub node_count: usize,
    /// SLIT distances, node_count × node_count, if the firmware provided them.
    pub slit: Option<[[u8; MAX_NODES]; MAX_NODES]>,
    pub x2apic_entries: bool,
    /// PCI segment group 0's configuration space (MCFG), if the firmware lists one.
    pub ecam: Option<Ecam>,
    /// The first I/O APIC (MADT type 1): its address and first global system interrupt.
    pub ioapic: Option<(u64, u32)>,
    /// The global system interrupt of ISA IRQ 4 (COM1): 4 unless an interrupt source
    /// override (MADT type 2) moves it.
    pub com1_gsi: u32,
}

/// One MCFG entry: memory-mapped configuration space for buses `bus_start..=bus_end`.
#[derive(Clone, Copy, Debug)]
pub struct Ecam {
    pub base: u64,
    pub bus_start: u8,
    pub bus_end: u8,
}

fn checksum_ok(pa: u64, len: usize) -> bool {
    let mut sum: u8 = 0;
    for i in 0..len as u64 {
        match read_phys::<u8>(pa + i) {
            Some(b) => sum = sum.wrapping_add(b),
            None => return false,
        }
    }
    sum == 0
}

fn signature(pa: u64) -> [u8; 4] {
    let mut s = [0u8; 4];
    read_phys_bytes(pa, &mut s);
    s
}

/// Validate an RSDP candidate at `pa`.
fn rsdp_valid(pa: u64) -> bool {
    let mut sig = [0u8; 8];
    read_phys_bytes(pa, &mut sig) && &sig == b"RSD PTR " && checksum_ok(pa, 20)
}

/// Search the EBDA and the BIOS area (legacy boot without a loader-provided RSDP).
fn scan_for_rsdp() -> Option<u64> {
    let ebda = (read_phys::<u16>(0x40E)? as u64) << 4;
    let ranges = [(ebda, ebda + 1024), (0xE0000, 0x100000)];
    for (start, end) in ranges {
        if start == 0 {
            continue;
        }
        let mut p = start & !15;
        while p < end {
            if rsdp_valid(p) {
                return Some(p);
            }
            p += 16;
        }
    }
    None
}

/// Every table (physical address) listed by the RSDT/XSDT.
fn for_each_table(rsdp: u64, mut f: impl FnMut(u64, [u8; 4])) -> Result<(), &'static str> {
    let revision: u8 = read_phys(rsdp + 15).ok_or("bad RSDP")?;
    let (root, entry_size) = if revision >= 2 {
        let xsdt: u64 = read_phys(rsdp + 24).ok_or("bad RSDP")?;
        if xsdt != 0 {
            (xsdt, 8)
        } else {
            (read_phys::<u32>(rsdp + 16).ok_or("bad RSDP")? as u64, 4)
        }
    } else {
        (read_phys::<u32>(rsdp + 16).ok_or("bad RSDP")? as u64, 4)
    };
    let len: u32 = read_phys(root + 4).ok_or("RSDT/XSDT outside memory")?;
    if len < 36 || !checksum_ok(root, len as usize) {
        return Err("RSDT/XSDT checksum mismatch");
    }
    let n = (len as u64 - 36) / entry_size;
    for i in 0..n {
        let e = root + 36 + i * entry_size;
        let table = if entry_size == 8 { read_phys::<u64>(e) } else { read_phys::<u32>(e).map(|v| v as u64) };
        if let Some(t) = table {
            f(t, signature(t));
        }
    }
    Ok(())
}

pub fn parse(loader_rsdp: Option<u64>, bsp_apic_id: u32) -> Result<AcpiInfo, &'static str> {
    let rsdp = loader_rsdp.filter(|&p| rsdp_valid(p)).or_else(scan_for_rsdp).ok_or("no ACPI tables (RSDP not found)")?;
    let mut info = AcpiInfo {
        cpus: [CpuEntry::default(); MAX_CORES],
        cpu_count: 0,
        cpus_skipped: 0,
        mem: [MemAffinity::default(); MAX_MEM_AFFINITY],
        mem_count: 0,
        has_srat: false,
        node_count: 1,
        slit: None,
        x2apic_entries: false,
        ecam: None,
        ioapic: None,
        com1_gsi: 4,
    };
    let mut madt = None;
    let mut srat = None;
    let mut slit = None;
    let mut mcfg = None;
    for_each_table(rsdp, |pa, sig| match &sig {
        b"MCFG" => mcfg = Some(pa),
        b"APIC" => madt = Some(pa),
        b"SRAT" => srat = Some(pa),
        b"SLIT" => slit = Some(pa),
        _ => {}
    })?;
    let madt = madt.ok_or("no ACPI MADT (cannot find the cores)")?;
    parse_madt(madt, bsp_apic_id, &mut info)?;
    if let Some(srat) = srat {
        parse_srat(srat, &mut info)?;
    }
    if let (Some(slit), true) = (slit, info.has_srat) {
        parse_slit(slit, &mut info);
    }
    if let Some(mcfg) = mcfg {
        info.ecam = parse_mcfg(mcfg);
    }
    Ok(info)
}

fn add_cpu(info: &mut AcpiInfo, apic_id: u32) {
    if info.cpus[..info.cpu_count].iter().any(|c| c.apic_id == apic_id) {
        return;
    }
    if info.cpu_count == MAX_CORES {
        info.cpus_skipped += 1;
        return;
    }
    info.cpus[info.cpu_count] = CpuEntry { apic_id, node: 0 };
    info.cpu_count += 1;
}

fn parse_madt(pa: u64, bsp: u32, info: &mut AcpiInfo) -> Result<(), &'static str> {
    let len: u32 = read_phys(pa + 4).ok_or("bad MADT")?;
    if !checksum_ok(pa, len as usize) {
        return Err("MADT checksum mismatch");
    }
    let mut off = 44u64;
    while off + 2 <= len as u64 {
        let e = pa + off;
        let ty: u8 = read_phys(e).ok_or("bad MADT")?;
        let elen: u8 = read_phys(e + 1).ok_or("bad MADT")?;
        if elen < 2 {
            return Err("malformed MADT entry");
        }
        match ty {
            0 if elen >= 8 => {
                let apic_id: u8 = read_phys(e + 3).ok_or("bad MADT")?;
                let flags: u32 = read_phys(e + 4).ok_or("bad MADT")?;
                if flags & 1 != 0 {
                    add_cpu(info, apic_id as u32);
                } else {
                    info.cpus_skipped += 1;
                }
            }
            1 if elen >= 12 => {
                let addr: u32 = read_phys(e + 4).ok_or("bad MADT")?;
                let gsi_base: u32 = read_phys(e + 8).ok_or("bad MADT")?;
                if info.ioapic.is_none_or(|(_, b)| gsi_base < b) {
                    info.ioapic = Some((addr as u64, gsi_base));
                }
            }
            2 if elen >= 10 => {
                let irq: u8 = read_phys(e + 3).ok_or("bad MADT")?;
                let gsi: u32 = read_phys(e + 4).ok_or("bad MADT")?;
                if irq == 4 {
                    info.com1_gsi = gsi;
                }
            }
            9 if elen >= 16 => {
                info.x2apic_entries = true;
                let apic_id: u32 = read_phys(e + 4).ok_or("bad MADT")?;
                let flags: u32 = read_phys(e + 8).ok_or("bad MADT")?;
                if flags & 1 != 0 {
                    add_cpu(info, apic_id);
                } else {
                    info.cpus_skipped += 1;
                }
            }
            _ => {}
        }
        off += elen as u64;
    }
    if info.cpu_count == 0 {
        return Err("MADT lists no enabled processor");
    }
    // Dense core ids start with the core we run on; the rest keep MADT order.
    let b = info.cpus[..info.cpu_count].iter().position(|c| c.apic_id == bsp).ok_or("MADT does not list the boot processor")?;
    info.cpus[..=b].rotate_right(1);
    Ok(())
}

fn parse_srat(pa: u64, info: &mut AcpiInfo) -> Result<(), &'static str> {
    let len: u32 = read_phys(pa + 4).ok_or("bad SRAT")?;
    if !checksum_ok(pa, len as usize) {
        return Err("SRAT checksum mismatch");
    }
    // Proximity domains are sparse 32-bit values; map them densely in first-seen order.
    let mut domains = [0u32; MAX_NODES];
    let mut ndomains = 0usize;
    let mut dense = |d: u32| -> u32 {
        if let Some(i) = domains[..ndomains].iter().position(|&x| x == d) {
            return i as u32;
        }
        if ndomains < MAX_NODES {
            domains[ndomains] = d;
            ndomains += 1;
            (ndomains - 1) as u32
        } else {
            0
        }
    };
    let mut off = 48u64;
    while off + 2 <= len as u64 {
        let e = pa + off;
        let ty: u8 = read_phys(e).ok_or("bad SRAT")?;
        let elen: u8 = read_phys(e + 1).ok_or("bad SRAT")?;
        if elen < 2 {
            return Err("malformed SRAT entry");
        }
        match ty {
            0 if elen >= 16 => {
                let lo: u8 = read_phys(e + 2).ok_or("bad SRAT")?;
                let apic: u8 = read_phys(e + 3).ok_or("bad SRAT")?;
                let flags: u32 = read_phys(e + 4).ok_or("bad SRAT")?;
                let hi = [read_phys::<u8>(e + 9).unwrap_or(0), read_phys::<u8>(e + 10).unwrap_or(0), read_phys::<u8>(e + 11).unwrap_or(0)];
                if flags & 1 != 0 {
                    let domain = lo as u32 | (hi[0] as u32) << 8 | (hi[1] as u32) << 16 | (hi[2] as u32) << 24;
                    let node = dense(domain);
                    for c in info.cpus[..info.cpu_count].iter_mut().filter(|c| c.apic_id == apic as u32) {
                        c.node = node;
                    }
                }
            }
            1 if elen >= 40 => {
                let domain: u32 = read_phys(e + 2).ok_or("bad SRAT")?;
                let base: u64 = read_phys(e + 8).ok_or("bad SRAT")?;
                let length: u64 = read_phys(e + 16).ok_or("bad SRAT")?;
                let flags: u32 = read_phys(e + 28).ok_or("bad SRAT")?;
                if flags & 1 != 0 && length > 0 && info.mem_count < MAX_MEM_AFFINITY {
                    let node = dense(domain);
                    info.mem[info.mem_count] = MemAffinity { start: base, end: base.saturating_add(length), node };
                    info.mem_count += 1;
                }
            }
            2 if elen >= 24 => {
                let domain: u32 = read_phys(e + 4).ok_or("bad SRAT")?;
                let apic: u32 = read_phys(e + 8).ok_or("bad SRAT")?;
                let flags: u32 = read_phys(e + 12).ok_or("bad SRAT")?;
                if flags & 1 != 0 {
                    let node = dense(domain);
                    for c in info.cpus[..info.cpu_count].iter_mut().filter(|c| c.apic_id == apic) {
                        c.node = node;
                    }
                }
            }
            _ => {}
        }
        off += elen as u64;
    }
    info.has_srat = ndomains > 0;
    info.node_count = ndomains.max(1);
    Ok(())
}

fn parse_slit(pa: u64, info: &mut AcpiInfo) {
    let Some(n) = read_phys::<u64>(pa + 36) else { return };
    if n as usize != info.node_count || n as usize > MAX_NODES {
        return; // SLIT localities do not match the SRAT domains we mapped; ignore it
    }
    let mut m = [[0u8; MAX_NODES]; MAX_NODES];
    for i in 0..n as usize {
        for j in 0..n as usize {
            m[i][j] = read_phys::<u8>(pa + 44 + (i as u64) * n + j as u64).unwrap_or(if i == j { 10 } else { 20 });
        }
    }
    info.slit = Some(m);
}

/// The MCFG's entry for PCI segment group 0 (a bad table is ignored: no PCI devices then).
fn parse_mcfg(pa: u64) -> Option<Ecam> {
    let len: u32 = read_phys(pa + 4)?;
    if len < 44 || !checksum_ok(pa, len as usize) {
        return None;
    }
    // Header (36 bytes), 8 reserved, then 16-byte entries: base u64, segment u16, start bus
    // u8, end bus u8, 4 reserved.
    let mut off = 44u64;
    while off + 16 <= len as u64 {
        let base: u64 = read_phys(pa + off)?;
        let segment: u16 = read_phys(pa + off + 8)?;
        let bus_start: u8 = read_phys(pa + off + 10)?;
        let bus_end: u8 = read_phys(pa + off + 11)?;
        if segment == 0 && base != 0 && bus_end >= bus_start {
            return Some(Ecam { base, bus_start, bus_end });
        }
        off += 16;
    }
    None
}
