//! The guest layer: booting a system for one workload and reading what it reports, for every
//! experiment command (bench, commute, metis, webd, net, plugin, insngate) to share. It stands
//! on `host/` and knows no command.
//!
//! - `linux`, `linux_net`: Debian's kernel as a guest (fetched and cached), its initramfs around
//!   one static program, with the network or disk modules it needs; `LinuxVm`.
//! - `boot`, `ours`, `linux_sys`, `fsimage`: a benchmark-style boot of this system or of Linux
//!   (`Guest`: prepare once, then one QEMU configuration per run), with the benchmark disk.
//! - `plugin`, `symbols`, `measure`: the QEMU measurement plugins (built, their exact mode, their
//!   report records), symbols to name addresses, and one workload run under a plugin.
//! - `tcp_accept`: a guest's TCP service driven by the host's load generator.
//! - `record`: the results record every benchmark run writes, and the systems' names.
//!
//! docs/architecture.md ("The host tool") draws the layers.

pub mod boot;
pub mod fsimage;
pub mod linux;
pub mod linux_net;
pub mod linux_sys;
pub mod measure;
pub mod ours;
pub mod plugin;
pub mod record;
pub mod symbols;
pub mod tcp_accept;
