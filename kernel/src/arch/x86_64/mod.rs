//! Everything specific to x86-64: boot entry, descriptor tables, traps, APIC, ACPI.

pub mod acpi;
pub mod apic;
pub mod boot;
pub mod cpu;
pub mod gdt;
pub mod idt;
pub mod ioapic;
pub mod paging;
pub mod serial;
pub mod syscall;
