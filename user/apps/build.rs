//! Link user programs with user/link.ld (static, non-PIE, at 0x400000). Only for the bare
//! target: a host `cargo check` of the workspace must not get the script.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let script = std::path::Path::new(&dir).join("../link.ld");
    println!("cargo:rerun-if-changed={}", script.display());
    if std::env::var("TARGET").as_deref() == Ok("x86_64-unknown-none") {
        println!("cargo:rustc-link-arg-bins=-T{}", script.display());
        println!("cargo:rustc-link-arg-bins=-no-pie");
        println!("cargo:rustc-link-arg-bins=--no-dynamic-linker");
    }
}
