//! One benchmark run as a record: what `results.json` holds, one per run.

use std::collections::BTreeMap;

use super::catalog::{BenchSpec, Shape};
use super::json::{self, Value};

/// What a host-driven network benchmark (tcp_accept, issue 15) adds to its record: the load
/// generator's view of the fastest round and the guest's own `key=value` words. In JSON an
/// object `net` (absent for every other benchmark).
#[derive(Debug, Clone, PartialEq, Default)]
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
    pub audit: BTreeMap<String, f64>,
    /// Why the audit has no numbers, when it was asked for and failed.
    pub audit_note: Option<String>,
}

impl NetStats {
    fn to_json(&self) -> String {
        let nums = |m: &BTreeMap<String, u64>| m.iter().map(|(k, v)| format!("{}:{v}", json::quote(k))).collect::<Vec<_>>().join(",");
        let strs = self.guest.iter().map(|(k, v)| format!("{}:{}", json::quote(k), json::quote(v))).collect::<Vec<_>>().join(",");
        let mut audit = String::new();
        if !self.audit.is_empty() {
            let a = self.audit.iter().map(|(k, v)| format!("{}:{}", json::quote(k), json::num(*v))).collect::<Vec<_>>().join(",");
            audit.push_str(&format!(",\"audit\":{{{a}}}"));
        }
        if let Some(n) = &self.audit_note {
            audit.push_str(&format!(",\"audit_note\":{}", json::quote(n)));
        }
        format!(
            "{{\"conns_per_s\":{},\"attempted\":{},\"slow_connects\":{},\"failures\":{{{}}},\"latency_us\":{{{}}},\"guest\":{{{strs}}}{audit}}}",
            json::num(self.conns_per_s),
            self.attempted,
            self.slow_connects,
            nums(&self.failures),
            nums(&self.latency_us)
        )
    }

    fn from_json(v: &Value) -> Result<NetStats, String> {
        let Value::Obj(m) = v else { return Err("`net` must be an object".into()) };
        let num = |k: &str| match m.get(k) {
            Some(Value::Num(x)) if *x >= 0.0 => Ok(*x),
            _ => Err(format!("`net.{k}` must be a non-negative number")),
        };
        let nums = |k: &str| -> Result<BTreeMap<String, u64>, String> {
            match m.get(k) {
                Some(Value::Obj(o)) => o
                    .iter()
                    .map(|(kk, x)| match x {
                        Value::Num(n) if *n >= 0.0 && n.fract() == 0.0 => Ok((kk.clone(), *n as u64)),
                        _ => Err(format!("`net.{k}.{kk}` must be a non-negative integer")),
                    })
                    .collect(),
                _ => Err(format!("`net.{k}` must be an object")),
            }
        };
        let guest = match m.get("guest") {
            Some(Value::Obj(o)) => o
                .iter()
                .map(|(k, x)| match x {
                    Value::Str(s) => Ok((k.clone(), s.clone())),
                    _ => Err(format!("`net.guest.{k}` must be a string")),
                })
                .collect::<Result<_, String>>()?,
            _ => return Err("`net.guest` must be an object".into()),
        };
        let audit = match m.get("audit") {
            None => BTreeMap::new(),
            Some(Value::Obj(o)) => o
                .iter()
                .map(|(k, x)| match x {
                    Value::Num(n) if *n >= 0.0 => Ok((k.clone(), *n)),
                    _ => Err(format!("`net.audit.{k}` must be a non-negative number")),
                })
                .collect::<Result<_, String>>()?,
            _ => return Err("`net.audit` must be an object".into()),
        };
        let audit_note = match m.get("audit_note") {
            None => None,
            Some(Value::Str(s)) => Some(s.clone()),
            _ => return Err("`net.audit_note` must be a string".into()),
        };
        Ok(NetStats {
            conns_per_s: num("conns_per_s")?,
            attempted: num("attempted")? as u64,
            slow_connects: num("slow_connects")? as u64,
            failures: nums("failures")?,
            latency_us: nums("latency_us")?,
            guest,
            audit,
            audit_note,
        })
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// The kind of evidence a timing is: the labelling rule.
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
}

/// One phase of a phased benchmark's run.
#[derive(Debug, Clone, PartialEq)]
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
        }
    }

    pub fn instructions(&self) -> Option<u64> {
        Some(self.instructions_kernel? + self.instructions_user?)
    }

    pub fn instructions_per_op(&self) -> Option<f64> {
        Some(self.instructions()? as f64 / self.ops.filter(|&o| o > 0)? as f64)
    }

    /// Operations per second per core. Parallel benchmarks: ops / elapsed / workers. Relay
    /// benchmarks (one core at a time): ops / the workers' summed busy time, so a system that
    /// passes memory between cores for free stays flat.
    pub fn per_core_throughput(&self) -> Option<f64> {
        if self.status != Status::Ok {
            return None;
        }
        let ops = self.ops? as f64;
        match self.shape {
            Shape::Parallel => Some(ops / (self.ns.filter(|&n| n > 0)? as f64 / 1e9) / self.workers.filter(|&w| w > 0)? as f64),
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

    /// Per-core throughput divided by the in-boot calibration's: operations per calibration
    /// step. Load on the host slows both alike, so this compares across boots and systems.
    pub fn calibrated_throughput(&self) -> Option<f64> {
        Some(self.per_core_throughput()? / self.calib_per_core_throughput().filter(|&c| c > 0.0)?)
    }

    pub fn to_json(&self) -> String {
        let opt_u = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_else(|| "null".into());
        let opt_f = |v: Option<f64>| v.map(json::num).unwrap_or_else(|| "null".into());
        let opt_s = |v: &Option<String>| v.as_deref().map(json::quote).unwrap_or_else(|| "null".into());
        let params: Vec<String> = self.params.iter().map(|(k, v)| format!("{}:{v}", json::quote(k))).collect();
        let mut out = format!(
            "{{\"system\":{},\"benchmark\":{},\"group\":{},\"params\":{{{}}},\"cores\":{},\"boot\":{},\"status\":{},\"reason\":{},\"evidence\":{},\"workers\":{},\"ops\":{},\"ns\":{},\"busy_ns\":{},\"instructions\":{},\"instructions_kernel\":{},\"instructions_user\":{},\"instructions_per_op\":{},\"instructions_note\":{},\"per_core_throughput\":{},\"throughput_unit\":\"ops/s/core\",\"calib_ops\":{},\"calib_ns\":{},\"calib_per_core_throughput\":{},\"calibrated_throughput\":{},\"wall_s\":{}}}",
            json::quote(&self.system),
            json::quote(&self.benchmark),
            json::quote(&self.group),
            params.join(","),
            self.cores,
            self.boot,
            json::quote(self.status.as_str()),
            opt_s(&self.reason),
            json::quote(evidence(self.cores)),
            opt_u(self.workers),
            opt_u(self.ops),
            opt_u(self.ns),
            opt_u(self.busy_ns),
            opt_u(self.instructions()),
            opt_u(self.instructions_kernel),
            opt_u(self.instructions_user),
            opt_f(self.instructions_per_op()),
            opt_s(&self.instructions_note),
            opt_f(self.per_core_throughput()),
            opt_u(self.calib_ops),
            opt_u(self.calib_ns),
            opt_f(self.calib_per_core_throughput()),
            opt_f(self.calibrated_throughput()),
            json::num((self.wall_s * 100.0).round() / 100.0),
        );
        if let Some(n) = &self.net {
            out.pop();
            out.push_str(&format!(",\"net\":{}}}", n.to_json()));
        }
        if !self.phases.is_empty() {
            let ph: Vec<String> = self.phases.iter().map(|p| format!("{{\"name\":{},\"ns\":{},\"faults\":{}}}", json::quote(&p.name), p.ns, p.faults)).collect();
            out.pop();
            out.push_str(&format!(",\"phases\":[{}]}}", ph.join(",")));
        }
        out
    }
}

impl Record {
    /// Read back a record written by [`Record::to_json`] (for `--report`, redrawing without
    /// rerunning). Derived fields (throughput, totals) are recomputed, not read.
    pub fn from_json(v: &Value) -> Result<Record, String> {
        check_schema(v)?;
        let s = |k: &str| match v.get(k) {
            Some(Value::Str(x)) => Some(x.clone()),
            _ => None,
        };
        let u = |k: &str| match v.get(k) {
            Some(Value::Num(x)) => Some(*x as u64),
            _ => None,
        };
        let benchmark = s("benchmark").unwrap_or_default();
        let spec = super::catalog::find(&benchmark).ok_or("unknown benchmark")?;
        let status = match s("status").as_deref() {
            Some("ok") => Status::Ok,
            Some("error") => Status::Error,
            Some("timeout") => Status::Timeout,
            _ => Status::Unavailable,
        };
        let mut params: Vec<(String, u64)> = match v.get("params") {
            Some(Value::Obj(m)) => m.iter().map(|(k, x)| (k.clone(), if let Value::Num(n) = x { *n as u64 } else { 0 })).collect(),
            _ => Vec::new(),
        };
        // JSON objects are unordered: restore the catalog's order, harness options last.
        params.sort_by_key(|(k, _)| spec.defaults.iter().position(|(d, _)| d == k).unwrap_or(usize::MAX));
        Ok(Record {
            system: s("system").unwrap_or_default(),
            benchmark,
            group: s("group").unwrap_or_default(),
            params,
            cores: u("cores").unwrap_or(1) as u32,
            boot: u("boot").unwrap_or(1) as u32,
            status,
            reason: s("reason"),
            workers: u("workers"),
            ops: u("ops"),
            ns: u("ns"),
            busy_ns: u("busy_ns"),
            instructions_kernel: u("instructions_kernel"),
            instructions_user: u("instructions_user"),
            instructions_note: s("instructions_note"),
            calib_ops: u("calib_ops"),
            calib_ns: u("calib_ns"),
            wall_s: match v.get("wall_s") {
                Some(Value::Num(x)) => *x,
                _ => 0.0,
            },
            shape: spec.shape,
            net: match v.get("net") {
                None | Some(Value::Null) => None,
                Some(n) => Some(NetStats::from_json(n)?),
            },
            phases: match v.get("phases") {
                Some(Value::Arr(a)) => a
                    .iter()
                    .map(|p| match (p.get("name"), p.get("ns"), p.get("faults")) {
                        (Some(Value::Str(name)), Some(Value::Num(ns)), Some(Value::Num(f))) => Ok(PhaseRecord { name: name.clone(), ns: *ns as u64, faults: *f as u64 }),
                        _ => Err("a phase needs name, ns and faults".to_string()),
                    })
                    .collect::<Result<_, _>>()?,
                _ => Vec::new(),
            },
        })
    }
}

/// A JSON array of records, one per line (results.json adds the summaries: `stats::Results`).
#[cfg(test)]
pub fn to_json_array(records: &[Record]) -> String {
    let lines: Vec<String> = records.iter().map(|r| format!("  {}", r.to_json())).collect();
    format!("[\n{}\n]\n", lines.join(",\n"))
}

/// The schema every record must satisfy; what the report and later tools rely on.
pub fn check_schema(v: &Value) -> Result<(), String> {
    let Value::Obj(m) = v else { return Err("record is not an object".into()) };
    let field = |k: &str| m.get(k).ok_or_else(|| format!("record lacks `{k}`"));
    let is_str = |k: &str| -> Result<String, String> {
        match field(k)? {
            Value::Str(s) if !s.is_empty() => Ok(s.clone()),
            _ => Err(format!("`{k}` must be a non-empty string")),
        }
    };
    let count = |k: &str, nullable: bool| -> Result<Option<f64>, String> {
        match field(k)? {
            Value::Num(x) if *x >= 0.0 && x.fract() == 0.0 => Ok(Some(*x)),
            Value::Null if nullable => Ok(None),
            _ => Err(format!("`{k}` must be a non-negative integer{}", if nullable { " or null" } else { "" })),
        }
    };
    let real = |k: &str| -> Result<Option<f64>, String> {
        match field(k)? {
            Value::Num(x) if *x >= 0.0 => Ok(Some(*x)),
            Value::Null => Ok(None),
            _ => Err(format!("`{k}` must be a non-negative number or null")),
        }
    };
    let system = is_str("system")?;
    if !["ours", "linux"].contains(&system.as_str()) {
        return Err(format!("unknown system `{system}`"));
    }
    let bench = is_str("benchmark")?;
    if super::catalog::find(&bench).is_none() {
        return Err(format!("unknown benchmark `{bench}`"));
    }
    is_str("group")?;
    is_str("evidence")?;
    match field("params")? {
        Value::Obj(p) if p.values().all(|x| matches!(x, Value::Num(n) if n.fract() == 0.0)) => {}
        _ => return Err("`params` must be an object of integers".into()),
    }
    let cores = count("cores", false)?.unwrap_or(0.0);
    if !(1.0..=255.0).contains(&cores) {
        return Err("`cores` must be 1..=255".into());
    }
    if let Some(b) = m.get("boot") {
        match b {
            Value::Num(x) if *x >= 1.0 && x.fract() == 0.0 => {}
            _ => return Err("`boot` must be a positive integer".into()),
        }
    }
    let status = is_str("status")?;
    for k in ["workers", "ops", "ns", "busy_ns", "instructions", "instructions_kernel", "instructions_user", "calib_ops", "calib_ns"] {
        count(k, true)?;
    }
    for k in ["per_core_throughput", "instructions_per_op", "calib_per_core_throughput", "calibrated_throughput", "wall_s"] {
        real(k)?;
    }
    let present = |k: &str| !matches!(m.get(k), Some(Value::Null) | None);
    match status.as_str() {
        "ok" => {
            for k in ["workers", "ops", "ns", "per_core_throughput"] {
                if !present(k) {
                    return Err(format!("an ok record needs `{k}`"));
                }
            }
            if !present("instructions") && !present("instructions_note") {
                return Err("an ok record without instructions must say why (`instructions_note`)".into());
            }
        }
        "error" | "timeout" | "unavailable" => {
            if !present("reason") {
                return Err(format!("a `{status}` record needs a `reason`"));
            }
            if present("per_core_throughput") {
                return Err(format!("a `{status}` record must not carry a throughput"));
            }
        }
        other => return Err(format!("unknown status `{other}`")),
    }
    if let Some(n) = m.get("net").filter(|n| !matches!(n, Value::Null)) {
        NetStats::from_json(n)?;
    }
    Ok(())
}
