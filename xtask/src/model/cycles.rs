//! The cycle model's arithmetic (docs/model.md): a core's cycles in a phase are its
//! instructions times a base CPI plus, for every cache miss, the latency of the level that
//! served it in the amd16 model; a phase takes as long as its slowest core. Pure functions of
//! the plugin's counts, so the host tests check them without a guest.

use crate::guest::plugin::Record;

/// Corey's machine runs at 2 GHz (seeds/000 section 8: four quad-core 2 GHz Opterons).
pub const CLOCK_HZ: f64 = 2.0e9;

/// Cycles per instruction when every access hits the L1: one figure for both systems, the
/// non-memory CPI that CachEMU (seeds/004) assumes. Fitted on nothing.
pub const BASE_CPI: f64 = 1.0;

/// Extra cycles over an L1 hit for the level that served a miss (the preset's `mc` record).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latencies {
    pub l2: f64,
    pub l3: f64,
    /// Another core's cache on the same chip.
    pub sibling: f64,
    /// Another chip's caches.
    pub remote: f64,
    pub memory: f64,
}

impl Latencies {
    /// amd16's table as `cachesim_mc.c` reports it.
    pub fn from_mc(r: &Record) -> Result<Latencies, String> {
        let get = |k: &str| r.get(k).and_then(|v| v.parse::<f64>().ok()).ok_or_else(|| format!("cache model record has no `{k}`"));
        Ok(Latencies { l2: get("lat_l2")?, l3: get("lat_l3")?, sibling: get("lat_sibling")?, remote: get("lat_remote")?, memory: get("lat_mem")? })
    }

    /// Every latency times `x` (the sensitivity runs: 0.5 and 2).
    pub fn scaled(self, x: f64) -> Latencies {
        Latencies { l2: self.l2 * x, l3: self.l3 * x, sibling: self.sibling * x, remote: self.remote * x, memory: self.memory * x }
    }
}

/// One vCPU's counts in the region (kernel and user mode together), from the `mcpu` records.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CoreCounts {
    pub vcpu: u64,
    pub insns: u64,
    /// Of `insns`, those in kernel mode (the `os` party).
    pub kernel_insns: u64,
    /// L1I + L1D misses.
    pub l1_miss: u64,
    pub l2_miss: u64,
    pub l3_miss: u64,
    pub sibling: u64,
    pub remote: u64,
    pub memory: u64,
    /// The plugin's own memory cycles at the preset's latencies (a cross-check of the split).
    pub plugin_cycles: u64,
}

impl CoreCounts {
    fn add(&mut self, r: &Record) {
        self.insns += r.u("insns");
        if r.get("party") == Some("os") {
            self.kernel_insns += r.u("insns");
        }
        self.l1_miss += r.u("l1i_miss") + r.u("l1d_miss");
        self.l2_miss += r.u("l2_miss");
        self.l3_miss += r.u("l3_miss");
        self.sibling += r.u("from_sibling");
        self.remote += r.u("from_remote");
        self.memory += r.u("from_mem");
        self.plugin_cycles += r.u("cycles");
    }

    /// Misses served by each level: (L2, L3, sibling, remote, memory). An L1 miss is served by
    /// the L2 unless it misses there; an L2 miss by the chip's L3 unless it misses there; an
    /// L3 miss by a sibling core, another chip or memory (the plugin counts which).
    pub fn served(&self) -> Result<[u64; 5], String> {
        let l2_hits = self.l1_miss.checked_sub(self.l2_miss);
        let l3_hits = self.l2_miss.checked_sub(self.l3_miss);
        let beyond = self.sibling + self.remote + self.memory;
        match (l2_hits, l3_hits) {
            (Some(a), Some(b)) if beyond == self.l3_miss => Ok([a, b, self.sibling, self.remote, self.memory]),
            _ => Err(format!(
                "vCPU {}: inconsistent miss counts (L1 {} L2 {} L3 {}, served beyond L3 {})",
                self.vcpu, self.l1_miss, self.l2_miss, self.l3_miss, beyond
            )),
        }
    }

    /// Cycles spent waiting for misses at `lat`.
    pub fn memory_cycles(&self, lat: &Latencies) -> Result<f64, String> {
        let s = self.served()?;
        Ok(s[0] as f64 * lat.l2 + s[1] as f64 * lat.l3 + s[2] as f64 * lat.sibling + s[3] as f64 * lat.remote + s[4] as f64 * lat.memory)
    }

    /// The core's cycles: instructions at the base CPI plus its misses' cycles.
    pub fn cycles(&self, lat: &Latencies, cpi: f64) -> Result<f64, String> {
        Ok(self.insns as f64 * cpi + self.memory_cycles(lat)?)
    }

    /// Cross-core transfers: misses served by another core's cache (same chip or another).
    pub fn transfers(&self) -> u64 {
        self.sibling + self.remote
    }
}

/// One run's counts: per vCPU (both modes added), the model's latencies, and the guest's
/// operation count.
#[derive(Debug, Clone, PartialEq)]
pub struct RunCounts {
    pub cores: Vec<CoreCounts>,
    pub lat: Latencies,
    pub ops: Option<u64>,
}

impl RunCounts {
    /// From a cachesim report with the `amd16` multi-core model. Checks that the split by
    /// level reproduces the plugin's own cycles at the preset's latencies, so a change in
    /// what the plugin counts cannot pass unnoticed.
    pub fn from_report(report: &[Record], ops: Option<u64>) -> Result<RunCounts, String> {
        let mc = report.iter().find(|r| r.kind == "mc" && r.get("model") == Some("amd16")).ok_or("the report has no amd16 model (preset=amd16)")?;
        let lat = Latencies::from_mc(mc)?;
        let mut cores: Vec<CoreCounts> = Vec::new();
        for r in report.iter().filter(|r| r.kind == "mcpu" && r.get("model") == Some("amd16")) {
            let v = r.u("vcpu");
            let i = match cores.iter().position(|c| c.vcpu == v) {
                Some(i) => i,
                None => {
                    cores.push(CoreCounts { vcpu: v, ..Default::default() });
                    cores.len() - 1
                }
            };
            cores[i].add(r);
        }
        if cores.is_empty() {
            return Err("the report has no per-vCPU records of the amd16 model".into());
        }
        cores.sort_by_key(|c| c.vcpu);
        for c in &cores {
            let m = c.memory_cycles(&lat)?;
            if (m - c.plugin_cycles as f64).abs() > 0.5 {
                return Err(format!("vCPU {}: the split by level gives {m} memory cycles, the plugin {}", c.vcpu, c.plugin_cycles));
            }
        }
        Ok(RunCounts { cores, lat, ops })
    }

    /// The phase's cycles at `scale` times the preset's latencies: its slowest core's.
    pub fn phase_cycles(&self, scale: f64, cpi: f64) -> Result<f64, String> {
        let lat = self.lat.scaled(scale);
        let mut worst: f64 = 0.0;
        for c in &self.cores {
            worst = worst.max(c.cycles(&lat, cpi)?);
        }
        Ok(worst)
    }

    /// The phase's model time in seconds.
    pub fn seconds(&self, scale: f64, cpi: f64) -> Result<f64, String> {
        Ok(self.phase_cycles(scale, cpi)? / CLOCK_HZ)
    }

    /// Sum over the vCPUs of one count.
    pub fn total(&self, f: impl Fn(&CoreCounts) -> u64) -> u64 {
        self.cores.iter().map(f).sum()
    }

    /// Operations per model second, all cores.
    pub fn throughput(&self, scale: f64, cpi: f64) -> Result<f64, String> {
        let ops = self.ops.ok_or("the guest reported no operation count")?;
        let s = self.seconds(scale, cpi)?;
        if s <= 0.0 {
            return Err("no cycles in the region".into());
        }
        Ok(ops as f64 / s)
    }
}

/// Connections per second a NIC forwarding `packets_per_s` allows when each connection takes
/// `packets_per_conn` packets (Corey's TCP benchmark: 4 in and 4 out).
pub fn card_limit(packets_per_s: f64, packets_per_conn: f64) -> f64 {
    packets_per_s / packets_per_conn
}

/// Relative error of a model ratio against a measured one: model / measured − 1.
pub fn relative_error(model: f64, measured: f64) -> f64 {
    model / measured - 1.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::plugin::parse_records;

    fn report() -> Vec<Record> {
        // Two vCPUs; vCPU 0: 10 L1 misses, 6 of them L2 misses, 5 of those L3 misses (1
        // sibling, 2 remote, 2 memory); cycles = 4*14 + 1*75 + 127 + 2*200 + 2*127 = 912.
        parse_records(
            "mc model=amd16 lat_l2=14 lat_l3=75 lat_sibling=127 lat_remote=200 lat_mem=127\n\
             mcpu model=amd16 vcpu=0 party=app insns=1000 l1i_miss=2 l1d_miss=5 l2_miss=4 l3_miss=3 from_sibling=1 from_remote=0 from_mem=2 cycles=3\n\
             mcpu model=amd16 vcpu=0 party=os insns=500 l1i_miss=1 l1d_miss=2 l2_miss=2 l3_miss=2 from_sibling=0 from_remote=2 from_mem=0 cycles=0\n\
             mcpu model=amd16 vcpu=1 party=app insns=100 l1i_miss=0 l1d_miss=1 l2_miss=0 l3_miss=0 from_sibling=0 from_remote=0 from_mem=0 cycles=14\n\
             end\n",
        )
    }

    fn fixed(mut r: Vec<Record>) -> Vec<Record> {
        // Give the records the plugin's cycles: app 3*14 + 1*75 + 127 + 2*127 = 498,
        // os 1*14 + 2*200 = 414.
        for x in r.iter_mut() {
            if x.kind == "mcpu" && x.get("vcpu") == Some("0") {
                let c = if x.get("party") == Some("app") { "498" } else { "414" };
                x.fields.retain(|(k, _)| k != "cycles");
                x.fields.push(("cycles".into(), c.into()));
            }
        }
        r
    }

    #[test]
    fn cycles_are_instructions_plus_misses_at_their_level() {
        let run = RunCounts::from_report(&fixed(report()), Some(40)).unwrap();
        assert_eq!(run.cores.len(), 2);
        let c0 = run.cores[0];
        assert_eq!((c0.insns, c0.l1_miss, c0.l2_miss, c0.l3_miss), (1500, 10, 6, 5));
        assert_eq!(c0.served().unwrap(), [4, 1, 1, 2, 2]);
        assert_eq!(c0.memory_cycles(&run.lat).unwrap(), 912.0);
        assert_eq!(c0.cycles(&run.lat, 1.0).unwrap(), 2412.0);
        assert_eq!(c0.cycles(&run.lat, 2.0).unwrap(), 3912.0);
        assert_eq!(c0.transfers(), 3);
        // The phase is its slowest core's: vCPU 0.
        assert_eq!(run.phase_cycles(1.0, 1.0).unwrap(), 2412.0);
        assert_eq!(run.seconds(1.0, 1.0).unwrap(), 2412.0 / CLOCK_HZ);
        assert_eq!(run.throughput(1.0, 1.0).unwrap(), 40.0 / (2412.0 / CLOCK_HZ));
    }

    #[test]
    fn latency_scale_moves_only_the_miss_cycles() {
        let run = RunCounts::from_report(&fixed(report()), None).unwrap();
        assert_eq!(run.phase_cycles(0.5, 1.0).unwrap(), 1500.0 + 912.0 / 2.0);
        assert_eq!(run.phase_cycles(2.0, 1.0).unwrap(), 1500.0 + 912.0 * 2.0);
        assert!(run.throughput(1.0, 1.0).is_err(), "no ops, no throughput");
    }

    #[test]
    fn the_slowest_core_sets_the_phase() {
        let mut r = fixed(report());
        // vCPU 1 now runs 5000 instructions: it is the slowest.
        for x in r.iter_mut().filter(|x| x.get("vcpu") == Some("1")) {
            x.fields.retain(|(k, _)| k != "insns");
            x.fields.push(("insns".into(), "5000".into()));
        }
        let run = RunCounts::from_report(&r, None).unwrap();
        assert_eq!(run.phase_cycles(1.0, 1.0).unwrap(), 5014.0);
    }

    #[test]
    fn a_split_that_disagrees_with_the_plugin_is_an_error() {
        // The unfixed records carry cycles the split by level does not give.
        let e = RunCounts::from_report(&report(), None).unwrap_err();
        assert!(e.contains("memory cycles"), "{e}");
        let bad = parse_records("mc model=amd16 lat_l2=14 lat_l3=75 lat_sibling=127 lat_remote=200 lat_mem=127\nmcpu model=amd16 vcpu=0 party=app insns=1 l1i_miss=1 l1d_miss=0 l2_miss=2 l3_miss=0 cycles=0\n");
        assert!(RunCounts::from_report(&bad, None).unwrap_err().contains("inconsistent"));
        assert!(RunCounts::from_report(&parse_records("mc model=nehalem-mc\n"), None).is_err());
    }

    #[test]
    fn card_limit_and_errors() {
        assert_eq!(card_limit(900_000.0, 8.0), 112_500.0);
        assert!((relative_error(1.2, 1.0) - 0.2).abs() < 1e-12);
        assert!((relative_error(0.75, 1.0) + 0.25).abs() < 1e-12);
    }
}
