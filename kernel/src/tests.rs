//! Kernel tests for the boot floor: memory, heap, SMP, interrupts, topology, symbols.

use crate::{kassert, ktest};

pub fn register_handlers() {}

ktest! {
fn boot_every_core_online() {
    let online = crate::percpu::online_count();
    kassert!(online == percore::core_count(), "online {} != core_count {}", online, percore::core_count());
    Ok(())
}
}
