//! Links with our script and generates the 256 interrupt entry stubs.
use std::fmt::Write;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    println!("cargo:rustc-link-arg-bin=kernel=-T{dir}/linker.ld");
    println!("cargo:rustc-link-arg-bin=kernel=-zmax-page-size=4096");
    println!("cargo:rerun-if-changed=linker.ld");
    println!("cargo:rerun-if-changed=build.rs");

    // Vectors for which the CPU pushes an error code.
    const WITH_ERROR: [u32; 10] = [8, 10, 11, 12, 13, 14, 17, 21, 29, 30];
    let mut s = String::new();
    s.push_str(".section .text.trap_stubs, \"ax\"\n.code64\n");
    for v in 0..256u32 {
        writeln!(s, ".balign 16\ntrap_stub_{v}:").unwrap();
        if !WITH_ERROR.contains(&v) {
            s.push_str("    push $0\n");
        }
        writeln!(s, "    push ${v}\n    jmp trap_common").unwrap();
    }
    s.push_str(".section .rodata.trap_stub_table, \"a\"\n.balign 8\n.global trap_stub_table\ntrap_stub_table:\n");
    for v in 0..256u32 {
        writeln!(s, "    .quad trap_stub_{v}").unwrap();
    }
    let out = std::env::var("OUT_DIR").unwrap();
    std::fs::write(format!("{out}/trap_stubs.s"), s).unwrap();
}
