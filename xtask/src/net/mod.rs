//! The host side of the guest network (docs/net-host.md): the QEMU arguments for the guest NIC (one
//! place, shared by `run`, `bench`, the Linux baseline and the tests), the load generator
//! (`load`), the TCP accept benchmark driver (`tcp_accept`) and `cargo xtask net`.
//!
//! The contract with the guest: one `virtio-net-pci` NIC on QEMU's user-mode network with
//! `restrict=on` (the guest reaches nothing outside QEMU; guest 10.0.2.15/24, gateway
//! 10.0.2.2), and host ports forwarded from 127.0.0.1 only. The TCP service (Corey §8.2)
//! listens on guest port 80 and answers every connection with [`load::expected_reply`].

pub mod fuzz;
pub mod load;
pub mod options;


/// `cargo xtask net ...` (the command line: options.rs, [`NetCommand`]).
pub fn main(cmd: crate::net::options::NetCommand) -> Result<(), crate::host::outcome::Failure> {
    use crate::net::options::NetCommand;
    match cmd {
        NetCommand::Load(a) => {
            let spec = crate::host::outcome::usage(load::options(a))?;
            crate::host::outcome::work(load::command(&spec))
        }
        NetCommand::Fuzz(a) => {
            let o = crate::host::outcome::usage(fuzz::options(a))?;
            crate::host::outcome::work(fuzz::command(o))
        }
        NetCommand::Selftest => crate::host::outcome::work(qemu_tests().and_then(|t| {
            println!("{} passed, {} failed", t.passed, t.failed);
            if t.failed > 0 {
                Err(format!("{} network test(s) failed", t.failed))
            } else {
                Ok(())
            }
        })),
    }
}

fn tally(t: &mut crate::host::outcome::TestTally, name: &str, r: Result<(), String>) {
    match r {
        Ok(()) => {
            t.passed += 1;
            println!("   ok   {name}");
        }
        Err(e) => {
            t.failed += 1;
            println!("   FAIL {name}: {e}");
        }
    }
}

/// The network's QEMU tests for `cargo xtask test` (also `cargo xtask net selftest`), about
/// 12 s here: the Linux baseline's service through the forward, and a short seeded fuzz.
/// (Ours joins when its guest side exists; until then it is not a skip but not a test.)
pub fn qemu_tests() -> Result<crate::host::outcome::TestTally, String> {
    println!("== network: the Linux baseline's TCP service and the frame fuzzer");
    let mut t = crate::host::outcome::TestTally::default();
    // Catches: the NIC's modules missing or out of order, the guest's interface or route
    // not configured, the forward not reaching guest port 80, a reply that is not the 128
    // bytes, connections lost or counted twice, SO_REUSEPORT listeners not all serving.
    let served = (|| -> Result<(), String> {
        let k = crate::guest::linux::fetch_kernel()?;
        let mut vm = crate::guest::linux::LinuxVm::new(&k, &crate::guest::linux_net::initramfs(&k)?);
        vm.smp = 2;
        let net = crate::host::vm::NetConfig::service()?;
        let port = net.host_port(crate::host::vm::SERVICE_PORT).ok_or("no forward")?;
        vm.net = Some(net);
        let spec = crate::guest::tcp_accept::AcceptSpec { conns: 200, ready_timeout: std::time::Duration::from_secs(120), ..Default::default() };
        vm.append = format!("wl=tcpserv threads=2 conns={} warmup={}", spec.guest_conns(), spec.warmup);
        let o = crate::guest::tcp_accept::run(&vm.qemu_args(), port, &spec, false)?;
        if let Some(p) = &o.problem {
            return Err(p.clone());
        }
        let l = o.best().ok_or("no round")?;
        if l.ok != 200 {
            return Err(format!("{} good connections, want 200", l.ok));
        }
        let w = o.guest_words();
        let get = |k: &str| w.iter().find(|(kk, _)| kk == k).and_then(|(_, v)| v.parse::<u64>().ok());
        if get("conns") != Some(spec.guest_conns()) || get("served") != Some(spec.guest_conns()) {
            return Err(format!("the guest counted {:?} connections ({:?} served), the host opened {}", get("conns"), get("served"), spec.guest_conns()));
        }
        if get("core0").unwrap_or(0) == 0 || get("core1").unwrap_or(0) == 0 {
            return Err(format!("a core served nothing: {:?} {:?}", get("core0"), get("core1")));
        }
        Ok(())
    })();
    tally(&mut t, "linux tcpserv: 200 connections through 127.0.0.1, 128 bytes each, both cores serve", served);
    // Catches: the fuzzer's framing broken (QEMU would stop reading), ARP not answered (the
    // probe would go unanswered), a guest that stops serving after malformed frames, the
    // probe's hand-made handshake or reassembly broken (no 128 bytes).
    let o = |seed, smp, system: &str, mode: &str, frames| fuzz::FuzzOptions { frames, seed, system: system.into(), smp, timeout: std::time::Duration::from_secs(120), kinds: Vec::new(), mode: mode.into() };
    tally(&mut t, "net fuzz: 3000 seeded frames into the Linux guest, its service still sends the 128 bytes", fuzz::command(o(1, 1, "linux", "dedicated", 3000)));
    // The same into this system (Dedicated: the kernel core parses and steers every frame, the
    // service core's stack gets the malformed ones); then the kernel's leak check after exit.
    tally(&mut t, "net fuzz: 3000 seeded frames into this system, its service still sends the 128 bytes, nothing leaked", fuzz::command(o(2, 2, "ours", "dedicated", 3000)));
    // Polling (the service cores read the card's queues and parse every frame themselves, no
    // kernel core in between) and Inline (one core polls the card and serves): the malformed
    // frames reach other code there. Shorter runs, other seeds; the tcp-service suites boot
    // the same modes at the same vCPU counts.
    tally(&mut t, "net fuzz: 1500 seeded frames into this system in Polling mode (3 vCPUs), still serving, nothing leaked", fuzz::command(o(3, 3, "ours", "polling", 1500)));
    tally(&mut t, "net fuzz: 1500 seeded frames into this system in Inline mode (2 vCPUs), still serving, nothing leaked", fuzz::command(o(4, 2, "ours", "inline", 1500)));
    Ok(t)
}
