//! Link user programs with user/link.ld (static, non-PIE, at 0x400000), except the shell,
//! which uses user/link-sh.ld (at 0x20000000, so it can run a program inside its own
//! context). Only for the bare target: a host `cargo check` of the workspace must not get
//! the scripts.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let user = std::path::Path::new(&dir).join("..");
    let script = user.join("link.ld");
    let sh_script = user.join("link-sh.ld");
    println!("cargo:rerun-if-changed={}", script.display());
    println!("cargo:rerun-if-changed={}", sh_script.display());
    println!("cargo:rerun-if-changed=src/bin");
    if std::env::var("TARGET").as_deref() != Ok("x86_64-unknown-none") {
        return;
    }
    let bins = std::path::Path::new(&dir).join("src/bin");
    for e in std::fs::read_dir(&bins).expect("user/apps/src/bin") {
        let path = e.expect("dir entry").path();
        if path.extension().and_then(|x| x.to_str()) != Some("rs") {
            continue;
        }
        let name = path.file_stem().and_then(|s| s.to_str()).expect("utf-8 name").to_string();
        let s = if name == "sh" || name == "linuxrt" { &sh_script } else { &script };
        println!("cargo:rustc-link-arg-bin={name}=-T{}", s.display());
        println!("cargo:rustc-link-arg-bin={name}=-no-pie");
        println!("cargo:rustc-link-arg-bin={name}=--no-dynamic-linker");
    }
}
