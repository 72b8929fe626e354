//! One benchmark run as a record: what `results.json` holds, one per run. [`RecordJson`] is
//! the typed form of one boot's item in results.json (serde): [`Record::to_json`] writes it,
//! [`Record::from_json`] reads it back through serde and then the schema's own rules
//! ([`RecordJson::check`]); docs/bench.md "Record schema" is the contract.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use testdefs::bench_catalog::{BenchSpec, Shape};

/// What a host-driven network benchmark (tcp_accept) adds to its record: the load
/// generator's view of the fastest round and the guest's own `key=value` words. In JSON an
/// object `net` (absent for every other benchmark).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct NetStats {
    /// Good connections per second, all service cores together (fastest round; 2 decimals).
    pub conns_per_s: f64,
    /// Connections started, all rounds (the warm-up not counted).
    pub attempted: u64,
    /// Good connections whose connect waited out a SYN retransmission (≥ 0.9 s), all rounds.
    pub slow_connects: u64,
    /// Failed connections by kind (refused, reset, timeout, empty, wrong_bytes, other), all rounds.
    pub failures: BTreeMap<String, u64>,
    /// Latency of the fastest round's good connections, microseconds: p50, p90, p99, max.
    pub latency_us: BTreeMap<String, u64>,
    /// The guest's words from its `tcpserv: ready` and `tcpserv: done` lines.
    pub guest: BTreeMap<String, String>,
    /// `--audit on`: the sharing audit of a separate boot (single-threaded TCG), per measured
    /// connection: `transfers` (cache-line transfers between vCPUs, kernel and user lines),
    /// the same split by the class of each kernel line's first writer (`driver`, `stack`,
    /// `ipc`, `alloc`, `other`) and `user` for user lines, and
    /// `shared_lines` (in all, not per connection). Empty when not run.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub audit: BTreeMap<String, f64>,
    /// Why the audit has no numbers, when it was asked for and failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_note: Option<String>,
}

/// The host while one boot ran (host load goes in every result): the
/// 1-minute load average when the boot started and when it ended, the host's CPUs, and the
/// CPU time (user + system) of the boot's QEMU processes, from the host's own accounting of
/// this process's waited-for children (`/proc/self/stat` fields `cutime` and `cstime`; a
/// host-driven cell with `--audit on` includes its audit boot). In JSON an object `host`,
/// absent in files written before it was recorded.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct HostLoad {
    pub load1_start: f64,
    pub load1_end: f64,
    pub cpus: u32,
    pub qemu_cpu_s: f64,
}

impl HostLoad {
    /// The busier of the two load samples: what the boot competed with at worst.
    pub fn load1(&self) -> f64 {
        self.load1_start.max(self.load1_end)
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Measured.
    Ok,
    /// The guest reported an error, or gave no result line.
    Error,
    /// Killed at its timeout.
    Timeout,
    /// The system cannot run benchmarks yet (ours, until the library OS exists).
    Unavailable,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::Timeout => "timeout",
            Status::Unavailable => "unavailable",
        }
    }
}

/// The kind of evidence a timing is: an emulated timing at 1-2 vCPUs, functional only above
/// (more vCPUs than the 2-core host has cores; docs/bench.md).
pub fn evidence(cores: u32) -> &'static str {
    if cores <= 2 {
        "TCG, emulated timing"
    } else {
        "TCG, functional only"
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub system: String,
    pub benchmark: String,
    pub group: String,
    pub params: Vec<(String, u64)>,
    pub cores: u32,
    /// Which boot of its cell this is, 1..=N (`--boots N`); records written before
    /// `--boots` existed have no `boot` field and read back as boot 1.
    pub boot: u32,
    pub status: Status,
    /// Why a run is not `ok`.
    pub reason: Option<String>,
    pub workers: Option<u64>,
    pub ops: Option<u64>,
    /// Elapsed guest time of the measured region (first worker start to last worker stop).
    pub ns: Option<u64>,
    /// Sum of the workers' own region times.
    pub busy_ns: Option<u64>,
    /// Guest instructions inside the region (insncount plugin), kernel and user.
    pub instructions_kernel: Option<u64>,
    pub instructions_user: Option<u64>,
    /// Why instructions are null when the run is ok.
    pub instructions_note: Option<String>,
    /// The share-nothing calibration loop run in the same boot with the same workers (all in
    /// parallel): operations and elapsed guest time.
    pub calib_ops: Option<u64>,
    pub calib_ns: Option<u64>,
    /// Host wall-clock seconds for the whole boot.
    pub wall_s: f64,
    pub shape: Shape,
    /// Host-driven network benchmarks only.
    pub net: Option<NetStats>,
    /// Phased benchmarks (`metis_*`): each phase's name, guest ns and soft page faults, in
    /// order, of the same run as `ns`.
    pub phases: Vec<PhaseRecord>,
    /// The host's load and QEMU's CPU time during the boot (absent in older files).
    pub host: Option<HostLoad>,
    /// Instructions inside the region per vCPU (kernel + user, vCPU 0 first; insncount), for
    /// the host-driven rows' split into service cores and the rest. Empty when not counted.
    pub instructions_vcpus: Vec<u64>,
    /// Instructions per vCPU that ran inside the run while the vCPU had marked itself idle
    /// (insncount's `idle=`: ours' service cores polling with nothing to do), apart from
    /// `instructions_vcpus`. Empty when not counted.
    pub instructions_idle_vcpus: Vec<u64>,
}

/// One phase of a phased benchmark's run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseRecord {
    pub name: String,
    pub ns: u64,
    pub faults: u64,
}

impl Record {
    /// A record with no measurement, for a run that did not produce one.
    pub fn without_result(system: &str, spec: &BenchSpec, params: Vec<(String, u64)>, cores: u32, status: Status, reason: &str) -> Record {
        Record {
            system: system.into(),
            benchmark: spec.name.into(),
            group: spec.group.into(),
            params,
            cores,
            boot: 1,
            status,
            reason: Some(reason.into()),
            workers: None,
            ops: None,
            ns: None,
            busy_ns: None,
            instructions_kernel: None,
            instructions_user: None,
            instructions_note: None,
            calib_ops: None,
            calib_ns: None,
            wall_s: 0.0,
            shape: spec.shape,
            net: None,
            phases: Vec::new(),
            host: None,
            instructions_vcpus: Vec::new(),
            instructions_idle_vcpus: Vec::new(),
        }
    }

    pub fn instructions(&self) -> Option<u64> {
        Some(self.instructions_kernel? + self.instructions_user?)
    }

    pub fn instructions_per_op(&self) -> Option<f64> {
        Some(self.instructions()? as f64 / self.ops.filter(|&o| o > 0)? as f64)
    }

    /// Operations per second per vCPU of the guest: the one divisor both systems get
    /// (DESIGN.md, "Fair comparisons"). Parallel benchmarks: ops / elapsed / vCPUs, whatever
    /// the vCPUs not running a worker do (a kernel core, a front-end that also sums, an idle
    /// CPU). Relay benchmarks (one core at a time): ops / the workers' summed busy time, so a
    /// system that passes memory between cores for free stays flat.
    pub fn per_core_throughput(&self) -> Option<f64> {
        self.throughput_over(self.cores as u64)
    }

    /// Operations per second per worker ("per service core": the cores that run the measured
    /// loop or serve the load), only where that differs from the vCPUs: the kernel-core rows
    /// (one worker), tcp_accept (ours' kernel core is not a service core), webd (front-end
    /// cores). A second, labelled column; never the ratio against Linux.
    pub fn per_service_core_throughput(&self) -> Option<f64> {
        let w = self.workers.filter(|&w| w > 0)?;
        if w == self.cores as u64 || self.shape == Shape::Relay {
            return None;
        }
        self.throughput_over(w)
    }

    fn throughput_over(&self, divisor: u64) -> Option<f64> {
        if self.status != Status::Ok || divisor == 0 {
            return None;
        }
        let ops = self.ops? as f64;
        self.workers.filter(|&w| w > 0)?;
        match self.shape {
            Shape::Parallel => Some(ops / (self.ns.filter(|&n| n > 0)? as f64 / 1e9) / divisor as f64),
            Shape::Relay => Some(ops / (self.busy_ns.filter(|&n| n > 0)? as f64 / 1e9)),
        }
    }

    /// The in-boot calibration's ops/s per core (a register loop: what one core of this boot
    /// delivered while the benchmark's boot ran).
    pub fn calib_per_core_throughput(&self) -> Option<f64> {
        if self.status != Status::Ok {
            return None;
        }
        Some(self.calib_ops? as f64 / (self.calib_ns.filter(|&n| n > 0)? as f64 / 1e9) / self.workers.filter(|&w| w > 0)? as f64)
    }

    /// Per-vCPU throughput divided by the in-boot calibration's rate per calibrating core:
    /// operations per calibration step. Load on the host slows both alike, so this compares
    /// across boots and systems.
    pub fn calibrated_throughput(&self) -> Option<f64> {
        Some(self.per_core_throughput()? / self.calib_per_core_throughput().filter(|&c| c > 0.0)?)
    }
}

/// A nullable field that must be present (`null` or a value): serde would otherwise read a
/// missing `Option` as `None`, and the schema requires every field of a record.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    Option::<T>::deserialize(d)
}

/// `params` in the catalog's order (a JSON object; readers must not rely on the order).
fn params_as_object<S: Serializer>(params: &[(String, u64)], s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(params.iter().map(|(k, v)| (k, v)))
}

fn params_from_object<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, u64)>, D::Error> {
    Ok(BTreeMap::<String, u64>::deserialize(d)?.into_iter().collect())
}

/// One boot's item in results.json, field for field (docs/bench.md "Record schema"). The
/// derived fields (`instructions`, `instructions_per_op`, the throughputs) are written for
/// the file's readers and checked for type on reading; [`Record`] recomputes them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordJson {
    pub system: String,
    pub benchmark: String,
    pub group: String,
    #[serde(serialize_with = "params_as_object", deserialize_with = "params_from_object")]
    pub params: Vec<(String, u64)>,
    pub cores: u32,
    /// Absent in files written before `--boots` (read as 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<u32>,
    pub status: Status,
    #[serde(deserialize_with = "present")]
    pub reason: Option<String>,
    pub evidence: String,
    #[serde(deserialize_with = "present")]
    pub workers: Option<u64>,
    #[serde(deserialize_with = "present")]
    pub ops: Option<u64>,
    #[serde(deserialize_with = "present")]
    pub ns: Option<u64>,
    #[serde(deserialize_with = "present")]
    pub busy_ns: Option<u64>,
    #[serde(deserialize_with = "present")]
    pub instructions: Option<u64>,
    #[serde(deserialize_with = "present")]
    pub instructions_kernel: Option<u64>,
    #[serde(deserialize_with = "present")]
    pub instructions_user: Option<u64>,
    #[serde(deserialize_with = "present")]
    pub instructions_per_op: Option<f64>,
    #[serde(deserialize_with = "present")]
    pub instructions_note: Option<String>,
    #[serde(deserialize_with = "present")]
    pub per_core_throughput: Option<f64>,
    #[serde(default = "ops_per_s_per_core")]
    pub throughput_unit: String,
    #[serde(deserialize_with = "present")]
    pub calib_ops: Option<u64>,
    #[serde(deserialize_with = "present")]
    pub calib_ns: Option<u64>,
    #[serde(deserialize_with = "present")]
    pub calib_per_core_throughput: Option<f64>,
    #[serde(deserialize_with = "present")]
    pub calibrated_throughput: Option<f64>,
    #[serde(deserialize_with = "present")]
    pub wall_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net: Option<NetStats>,
    /// Phased benchmarks only (`metis_*`); absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<PhaseRecord>,
    /// Per worker where workers differ from vCPUs (derived; absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_service_core_throughput: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostLoad>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instructions_vcpus: Vec<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instructions_idle_vcpus: Vec<u64>,
}

fn ops_per_s_per_core() -> String {
    "ops/s per vCPU".into()
}

impl From<&Record> for RecordJson {
    fn from(r: &Record) -> RecordJson {
        // JSON cannot carry NaN or infinities; serde_json would write them as null, which a
        // reader could take for "not measured" while the type check passes: keep them out.
        let finite = |x: Option<f64>| x.filter(|v| v.is_finite());
        RecordJson {
            system: r.system.clone(),
            benchmark: r.benchmark.clone(),
            group: r.group.clone(),
            params: r.params.clone(),
            cores: r.cores,
            boot: Some(r.boot),
            status: r.status,
            reason: r.reason.clone(),
            evidence: evidence(r.cores).into(),
            workers: r.workers,
            ops: r.ops,
            ns: r.ns,
            busy_ns: r.busy_ns,
            instructions: r.instructions(),
            instructions_kernel: r.instructions_kernel,
            instructions_user: r.instructions_user,
            instructions_per_op: finite(r.instructions_per_op()),
            instructions_note: r.instructions_note.clone(),
            per_core_throughput: finite(r.per_core_throughput()),
            throughput_unit: ops_per_s_per_core(),
            calib_ops: r.calib_ops,
            calib_ns: r.calib_ns,
            calib_per_core_throughput: finite(r.calib_per_core_throughput()),
            calibrated_throughput: finite(r.calibrated_throughput()),
            wall_s: finite(Some((r.wall_s * 100.0).round() / 100.0)),
            net: r.net.clone(),
            phases: r.phases.clone(),
            per_service_core_throughput: finite(r.per_service_core_throughput()),
            host: r.host.clone(),
            instructions_vcpus: r.instructions_vcpus.clone(),
            instructions_idle_vcpus: r.instructions_idle_vcpus.clone(),
        }
    }
}

impl RecordJson {
    /// The schema's rules beyond the types serde checked: what the report and later tools
    /// rely on.
    pub fn check(&self) -> Result<(), String> {
        let non_empty = |k: &str, v: &str| if v.is_empty() { Err(format!("`{k}` must be a non-empty string")) } else { Ok(()) };
        non_empty("system", &self.system)?;
        if !SYSTEM_NAMES.contains(&self.system.as_str()) {
            return Err(format!("unknown system `{}`", self.system));
        }
        non_empty("benchmark", &self.benchmark)?;
        if testdefs::bench_catalog::find(&self.benchmark).is_none() {
            return Err(format!("unknown benchmark `{}`", self.benchmark));
        }
        non_empty("group", &self.group)?;
        non_empty("evidence", &self.evidence)?;
        if !(1..=255).contains(&self.cores) {
            return Err("`cores` must be 1..=255".into());
        }
        if self.boot == Some(0) {
            return Err("`boot` must be a positive integer".into());
        }
        for (k, v) in [
            ("per_core_throughput", self.per_core_throughput),
            ("instructions_per_op", self.instructions_per_op),
            ("calib_per_core_throughput", self.calib_per_core_throughput),
            ("calibrated_throughput", self.calibrated_throughput),
            ("wall_s", self.wall_s),
            ("per_service_core_throughput", self.per_service_core_throughput),
        ] {
            if v.is_some_and(|x| !(x >= 0.0)) {
                return Err(format!("`{k}` must be a non-negative number or null"));
            }
        }
        match self.status {
            Status::Ok => {
                for (k, present) in [("workers", self.workers.is_some()), ("ops", self.ops.is_some()), ("ns", self.ns.is_some()), ("per_core_throughput", self.per_core_throughput.is_some())] {
                    if !present {
                        return Err(format!("an ok record needs `{k}`"));
                    }
                }
                if self.instructions.is_none() && self.instructions_note.is_none() {
                    return Err("an ok record without instructions must say why (`instructions_note`)".into());
                }
            }
            other => {
                if self.reason.is_none() {
                    return Err(format!("a `{}` record needs a `reason`", other.as_str()));
                }
                if self.per_core_throughput.is_some() {
                    return Err(format!("a `{}` record must not carry a throughput", other.as_str()));
                }
            }
        }
        if let Some(n) = &self.net {
            if !(n.conns_per_s >= 0.0) {
                return Err("`net.conns_per_s` must be a non-negative number".into());
            }
            if let Some((k, _)) = n.audit.iter().find(|(_, v)| !(**v >= 0.0)) {
                return Err(format!("`net.audit.{k}` must be a non-negative number"));
            }
        }
        if let Some(h) = &self.host {
            for (k, v) in [("load1_start", h.load1_start), ("load1_end", h.load1_end), ("qemu_cpu_s", h.qemu_cpu_s)] {
                if !(v >= 0.0 && v.is_finite()) {
                    return Err(format!("`host.{k}` must be a non-negative number"));
                }
            }
            if h.cpus == 0 {
                return Err("`host.cpus` must be positive".into());
            }
        }
        Ok(())
    }

    /// The record, derived fields recomputed; `check` first.
    pub fn into_record(self) -> Result<Record, String> {
        self.check()?;
        let spec = testdefs::bench_catalog::find(&self.benchmark).ok_or("unknown benchmark")?;
        let mut params = self.params;
        // JSON objects are unordered: restore the catalog's order, harness options last.
        params.sort_by_key(|(k, _)| spec.defaults.iter().position(|(d, _)| d == k).unwrap_or(usize::MAX));
        Ok(Record {
            system: self.system,
            benchmark: self.benchmark,
            group: self.group,
            params,
            cores: self.cores,
            boot: self.boot.unwrap_or(1),
            status: self.status,
            reason: self.reason,
            workers: self.workers,
            ops: self.ops,
            ns: self.ns,
            busy_ns: self.busy_ns,
            instructions_kernel: self.instructions_kernel,
            instructions_user: self.instructions_user,
            instructions_note: self.instructions_note,
            calib_ops: self.calib_ops,
            calib_ns: self.calib_ns,
            wall_s: self.wall_s.unwrap_or(0.0),
            shape: spec.shape,
            net: self.net,
            phases: self.phases,
            host: self.host,
            instructions_vcpus: self.instructions_vcpus,
            instructions_idle_vcpus: self.instructions_idle_vcpus,
        })
    }
}

impl Record {
    /// This record as one line of JSON (its item in results.json).
    pub fn to_json(&self) -> String {
        serde_json::to_string(&RecordJson::from(self)).expect("a record always serializes")
    }

    /// Read back one item of results.json (for `--report`, redrawing without rerunning):
    /// types through serde, then the schema's rules. Derived fields are recomputed, not read.
    pub fn from_value(v: serde_json::Value) -> Result<Record, String> {
        serde_json::from_value::<RecordJson>(v).map_err(|e| e.to_string())?.into_record()
    }

    /// [`Record::from_value`] from text (the tests' round trips).
    #[cfg(test)]
    pub fn from_json(text: &str) -> Result<Record, String> {
        serde_json::from_str::<RecordJson>(text).map_err(|e| e.to_string())?.into_record()
    }
}

/// A JSON array of records, one per line (results.json adds the summaries: `stats::Results`).
#[cfg(test)]
pub fn to_json_array(records: &[Record]) -> String {
    let lines: Vec<String> = records.iter().map(|r| format!("  {}", r.to_json())).collect();
    format!("[\n{}\n]\n", lines.join(",\n"))
}

/// The schema every record must satisfy; what the report and later tools rely on.
#[cfg(test)]
pub fn check_schema(v: &serde_json::Value) -> Result<(), String> {
    serde_json::from_value::<RecordJson>(v.clone()).map_err(|e| e.to_string())?.check()
}

/// The columns of results.csv: one row per boot, the record's scalar fields in
/// results.json's names; `params` as `key=value` words; the network benchmarks' connections/s.
pub const CSV_COLUMNS: &[&str] = &[
    "system",
    "benchmark",
    "group",
    "cores",
    "boot",
    "status",
    "reason",
    "evidence",
    "workers",
    "ops",
    "ns",
    "busy_ns",
    "instructions",
    "instructions_kernel",
    "instructions_user",
    "instructions_per_op",
    "instructions_note",
    "per_core_throughput",
    "calib_ops",
    "calib_ns",
    "calib_per_core_throughput",
    "calibrated_throughput",
    "wall_s",
    "params",
    "net_conns_per_s",
    "per_service_core_throughput",
    "host_load1_start",
    "host_load1_end",
    "qemu_cpu_s",
];

/// One CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// results.csv: a header line, then one line per boot record (for spreadsheets and pandas;
/// results.json stays the full record). Empty fields are nulls.
pub fn to_csv(records: &[Record]) -> String {
    let mut out = CSV_COLUMNS.join(",");
    out.push('\n');
    for r in records {
        let j = RecordJson::from(r);
        let u = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_default();
        let f = |v: Option<f64>| v.map(|x| x.to_string()).unwrap_or_default();
        let params: Vec<String> = j.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let row = [
            j.system.clone(),
            j.benchmark.clone(),
            j.group.clone(),
            j.cores.to_string(),
            u(j.boot.map(u64::from)),
            j.status.as_str().to_string(),
            j.reason.clone().unwrap_or_default(),
            j.evidence.clone(),
            u(j.workers),
            u(j.ops),
            u(j.ns),
            u(j.busy_ns),
            u(j.instructions),
            u(j.instructions_kernel),
            u(j.instructions_user),
            f(j.instructions_per_op),
            j.instructions_note.clone().unwrap_or_default(),
            f(j.per_core_throughput),
            u(j.calib_ops),
            u(j.calib_ns),
            f(j.calib_per_core_throughput),
            f(j.calibrated_throughput),
            f(j.wall_s),
            params.join(" "),
            f(j.net.as_ref().map(|n| n.conns_per_s)),
            f(j.per_service_core_throughput),
            f(j.host.as_ref().map(|h| h.load1_start)),
            f(j.host.as_ref().map(|h| h.load1_end)),
            f(j.host.as_ref().map(|h| h.qemu_cpu_s)),
        ];
        debug_assert_eq!(row.len(), CSV_COLUMNS.len());
        out.push_str(&row.iter().map(|s| csv_field(s)).collect::<Vec<_>>().join(","));
        out.push('\n');
    }
    out
}

/// The systems a matrix can boot. `linux` is Debian's kernel as shipped (its default
/// mitigations and security modules); `linux-tuned` is the same kernel with what a tuned
/// benchmark machine switches off (`linux_sys::TUNED_WORDS`, docs/bench.md "The Linux
/// baselines"). Every ratio is given against both; a claim holds only against the faster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum System {
    Ours,
    Linux,
    LinuxTuned,
}

/// Every system's name as records carry it.
pub const SYSTEM_NAMES: [&str; 3] = ["ours", "linux", "linux-tuned"];

/// The Linux baselines' names, in table order.
pub const LINUX_NAMES: [&str; 2] = ["linux", "linux-tuned"];

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Ours => "ours",
            System::Linux => "linux",
            System::LinuxTuned => "linux-tuned",
        }
    }

    pub fn from_name(s: &str) -> Option<System> {
        match s {
            "ours" => Some(System::Ours),
            "linux" => Some(System::Linux),
            "linux-tuned" => Some(System::LinuxTuned),
            _ => None,
        }
    }
}

/// One Linux baseline as it was booted (results.json's `run` item, `linux`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LinuxConfig {
    /// `linux` or `linux-tuned`.
    pub system: String,
    /// Debian's kernel release (`6.1.0-57-amd64`).
    pub kernel: String,
    /// The kernel command line before the benchmark's own words.
    pub cmdline: String,
    /// What the guest reported of itself (bench-linux's `bench-config` line, from the first
    /// good boot that printed one): `/sys/devices/system/cpu/vulnerabilities/*` by name, and
    /// the active security modules (`/sys/kernel/security/lsm`).
    pub mitigations: std::collections::BTreeMap<String, String>,
    pub lsm: String,
    /// Why `mitigations`/`lsm` are empty, when they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4180 fields of one CSV text (quoted fields may hold commas, quotes, line breaks).
    fn parse_csv(text: &str) -> Vec<Vec<String>> {
        let (mut rows, mut row, mut field) = (Vec::new(), Vec::new(), String::new());
        let mut chars = text.chars().peekable();
        let mut quoted = false;
        while let Some(c) = chars.next() {
            match (quoted, c) {
                (true, '"') if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                (true, '"') => quoted = false,
                (true, c) => field.push(c),
                (false, '"') => quoted = true,
                (false, ',') => row.push(std::mem::take(&mut field)),
                (false, '\n') => {
                    row.push(std::mem::take(&mut field));
                    rows.push(std::mem::take(&mut row));
                }
                (false, c) => field.push(c),
            }
        }
        rows
    }

    /// Catches a CSV whose rows do not line up with the header (a field with a comma or a
    /// quote unquoted, a column added to one side only) or that loses a record's values.
    #[test]
    fn csv_has_one_aligned_row_per_record_and_quotes_what_needs_it() {
        let spec = testdefs::bench_catalog::find("dupclose").unwrap();
        let mut ok = Record::without_result("linux", spec, vec![("iters".into(), 1000), ("reps".into(), 3)], 2, Status::Ok, "");
        ok.reason = None;
        (ok.workers, ok.ops, ok.ns, ok.instructions_note) = (Some(2), Some(4000), Some(2_000_000), Some("plugin off".into()));
        ok.host = Some(HostLoad { load1_start: 3.5, load1_end: 4.25, cpus: 2, qemu_cpu_s: 7.5 });
        let bad = Record::without_result("ours", spec, vec![], 1, Status::Error, "guest said \"no\", then stopped\nsecond line");
        let text = to_csv(&[ok.clone(), bad]);
        let rows = parse_csv(&text);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0], CSV_COLUMNS);
        assert!(rows.iter().all(|r| r.len() == CSV_COLUMNS.len()), "{rows:?}");
        let col = |name: &str| CSV_COLUMNS.iter().position(|c| *c == name).unwrap();
        assert_eq!(rows[1][col("params")], "iters=1000 reps=3");
        assert_eq!(rows[1][col("ops")], "4000");
        assert_eq!(rows[1][col("per_core_throughput")].parse::<f64>().unwrap(), ok.per_core_throughput().unwrap());
        assert_eq!(rows[2][col("reason")], "guest said \"no\", then stopped\nsecond line");
        assert_eq!(rows[2][col("per_core_throughput")], "", "null is an empty field");
        assert_eq!((rows[1][col("host_load1_end")].as_str(), rows[1][col("qemu_cpu_s")].as_str()), ("4.25", "7.5"));
        assert_eq!(rows[2][col("host_load1_start")], "");
    }
}
