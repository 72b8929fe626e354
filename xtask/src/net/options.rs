//! The command line of `cargo xtask net` (cli.rs dispatches it).

use crate::host::args::{at_least_one, number, tcp_port};

#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(after_help = "The guest side: `cargo xtask run --net` (our system) or `cargo xtask linux run --wl tcpserv --net` (Debian's kernel) print the forwarded port.")]
pub struct NetArgs {
    #[command(subcommand)]
    pub command: NetCommand,
}

#[derive(clap::Subcommand, Debug, Clone, PartialEq)]
pub enum NetCommand {
    /// The TCP load generator: connections to 127.0.0.1:PORT, each reply exactly the service's 128 bytes
    #[command(long_about = "Open up to N connections (default 1000) to 127.0.0.1:P, C at a time (default 2: QEMU's \
user-mode network listens with a backlog of 1, and more than 2 connects in flight wait out 1 s SYN retransmissions, \
counted as slow_connects), for at most T seconds (default 30), each within --timeout (default 5 s); each reply must be \
exactly the service's 128 bytes. Prints connections/s, failures by kind and latency percentiles; exit 1 on a failure.")]
    Load(NetLoadArgs),
    /// The frame fuzzer: seeded random and mutated Ethernet frames into the guest's NIC
    #[command(long_about = "The frame fuzzer: boot the guest's TCP service with its NIC on a QEMU socket netdev connected \
to this process (127.0.0.1), write N (default 10000) seeded random and mutated Ethernet frames into it (replayable: frame \
i depends on S and i only), then check a connection to port 80 still gets the 128 bytes and the kernel printed no panic/oops.")]
    Fuzz(NetFuzzArgs),
    /// The network's QEMU tests of `cargo xtask test` on their own (~12 s)
    Selftest,
}

#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct NetLoadArgs {
    /// The host port forwarded to the guest's port 80
    #[arg(long, value_name = "P", value_parser = tcp_port)]
    pub port: u16,
    /// Connections in all, at most (default 1000)
    #[arg(long, value_name = "N", value_parser = number)]
    pub conns: Option<u64>,
    /// Connections at once (default 2)
    #[arg(long, value_name = "C", value_parser = number)]
    pub concurrency: Option<u64>,
    /// No new connection after T seconds (default 30)
    #[arg(long, value_name = "T", value_parser = number)]
    pub seconds: Option<u64>,
    /// Per connection: connect and the whole reply within SECS (default 5)
    #[arg(long, value_name = "SECS", value_parser = number)]
    pub timeout: Option<u64>,
    /// Every K-th connection is reset by the client right after connect (counted as aborted)
    #[arg(long, value_name = "K", value_parser = number)]
    pub abort_every: Option<u64>,
}

#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct NetFuzzArgs {
    /// Frames to send, 1..=1000000
    #[arg(long, value_name = "N", default_value = "10000", value_parser = number)]
    pub frames: u64,
    /// The seed
    #[arg(long, value_name = "S", default_value = "1", value_parser = number)]
    pub seed: u64,
    /// The guest system: ours (this system, the default) or linux (the baseline)
    #[arg(long, value_name = "SYSTEM", default_value = "ours", value_parser = ["linux", "ours"])]
    pub system: String,
    /// vCPUs, 1..=64
    #[arg(long, value_name = "K", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub smp: u32,
    /// The guest run's limit in seconds
    #[arg(long, value_name = "SECS", default_value = "300", value_parser = at_least_one)]
    pub timeout: u64,
    /// Send only frames of these kinds (e.g. truncated,bit_flips), numbered as in the full run
    #[arg(long, value_name = "LIST")]
    pub kinds: Option<String>,
    /// With --system ours: how the guest's service takes frames (tcpserv's mode=)
    #[arg(long, value_name = "MODE", default_value = "dedicated", value_parser = ["dedicated", "polling", "inline"])]
    pub mode: String,
}
