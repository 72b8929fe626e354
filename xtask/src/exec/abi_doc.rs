//! docs/linux-abi.md's system-call table is written from `linuxabi::support` (the table the
//! dispatcher's handler list is checked against at compile time), between two marker lines.
//! The host test below fails when the file and the table differ; `LINUX_ABI_DOC_WRITE=1
//! cargo test -p xtask linux_abi_doc` rewrites the file's table.

use std::path::PathBuf;

pub const BEGIN: &str = "<!-- system-call table: written from linuxabi::support (xtask/src/exec/abi_doc.rs) -->";
pub const END: &str = "<!-- end of the system-call table -->";

pub fn doc_path() -> PathBuf {
    crate::host::env::workspace_root().join("docs").join("linux-abi.md")
}

/// The table as the doc holds it.
pub fn table() -> String {
    let mut s = String::new();
    linuxabi::support::doc_table(&mut s).expect("writing to a String");
    s
}

/// `doc` with its table replaced by the current one; `None` without the markers.
pub fn with_table(doc: &str) -> Option<String> {
    let b = doc.find(BEGIN)? + BEGIN.len();
    let e = doc[b..].find(END)? + b;
    Some(format!("{}\n{}{}", &doc[..b], table(), &doc[e..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_abi_doc_table_matches_the_dispatcher() {
        let path = doc_path();
        let doc = std::fs::read_to_string(&path).expect("docs/linux-abi.md");
        let want = with_table(&doc).expect("docs/linux-abi.md lacks the table's marker lines");
        if std::env::var_os("LINUX_ABI_DOC_WRITE").is_some() {
            std::fs::write(&path, &want).expect("write docs/linux-abi.md");
            return;
        }
        assert!(doc == want, "docs/linux-abi.md's system-call table is out of date: run `LINUX_ABI_DOC_WRITE=1 cargo test -p xtask linux_abi_doc`");
        // Every Linux number has a row.
        let inside = &doc[doc.find(BEGIN).unwrap_or(0)..];
        let rows = inside.lines().take_while(|l| *l != END).filter(|l| l.starts_with("| ") && l.contains(" | `")).count();
        assert_eq!(rows, linuxabi::SYSCALLS.len());
    }
}
