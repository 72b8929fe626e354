//! `cargo xtask layers`: the file-level import graph of each crate of the workspace, read from
//! its own Rust sources, its import circles (strongly connected components, Tarjan) and its
//! floors; `--dot FILE` writes the picture as Graphviz (crates and folders as clusters).
//!
//! What counts as an import of file A on file B (both in one crate):
//! - `mod b;` in A, B being the file that declaration loads (`mod` edge; a `#[path]` is
//!   followed and noted, also when it leaves the crate's folder);
//! - a path in A that names an item of B: `use crate::…`, `use super::…`, `use self::…`, a
//!   relative `use` of a child module, and the same paths written in code (`crate::x::f()`);
//!   the longest module prefix of the path decides the file (`use` edge).
//!
//! A path that starts with another workspace crate's name (`percore::…`) is a crate-level
//! edge (printed, drawn between clusters), not a file edge. Comments and string contents are
//! skipped by a small lexer; macros are not expanded. No crate is parsed by rustc: the figures
//! are what the text says, and an item re-exported under another module is found under the
//! module the path names.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// How a file reaches another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Mod,
    Use,
}

/// One crate's graph: files (paths relative to the workspace), edges by kind, and what was
/// noted on the way (`#[path]` includes, declared modules whose file is missing).
#[derive(Debug, Default)]
pub struct CrateGraph {
    pub name: String,
    pub dir: PathBuf,
    pub files: Vec<PathBuf>,
    pub edges: BTreeSet<(usize, usize, Kind)>,
    pub crate_deps: BTreeSet<String>,
    pub notes: Vec<String>,
}

/// What one pass over the graph finds.
#[derive(Debug, PartialEq)]
pub struct Summary {
    /// Files in the largest strongly connected component with more than one file, counting
    /// `mod` and `use` edges (empty: no circle).
    pub circle: Vec<usize>,
    /// The same with `use` edges only.
    pub use_circle: Vec<usize>,
    /// Components of more than one file (`mod` + `use`).
    pub circles: usize,
    /// Components of more than one file by `use` alone.
    pub use_circles: usize,
    /// Floors of the component graph by `use` (a circle is one room): 1 + the longest chain
    /// of imports. (With `mod` counted a crate is mostly one circle, so `use` is what layers.)
    pub floors: usize,
}

// ---------------------------------------------------------------------------------------
// Lexing: identifiers, string literals (contents kept: `#[path = "…"]`), punctuation.

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    PathSep,
    P(char),
}

fn lex(src: &str) -> Vec<(Tok, usize)> {
    let b: Vec<char> = src.chars().collect();
    let (mut i, mut line, mut out) = (0, 1, Vec::new());
    let n = b.len();
    while i < n {
        let c = b[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && i + 1 < n && b[i + 1] == '/' {
            while i < n && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && i + 1 < n && b[i + 1] == '*' {
            // Block comments nest in Rust.
            let mut depth = 0;
            while i < n {
                if b[i] == '/' && i + 1 < n && b[i + 1] == '*' {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && i + 1 < n && b[i + 1] == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if c == '"' || ((c == 'r' || c == 'b') && raw_or_byte_string_at(&b, i)) {
            let start_line = line;
            let (s, next) = string_at(&b, i, &mut line);
            out.push((Tok::Str(s), start_line));
            i = next;
        } else if c == '\'' {
            // A char literal ('a', '\n', '\'', '\u{..}') or a lifetime ('a).
            if i + 2 < n && b[i + 1] == '\\' {
                i += 2;
                while i < n && b[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if i + 2 < n && b[i + 2] == '\'' {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_alphanumeric() || c == '_' {
            let s = i;
            while i < n && (b[i].is_alphanumeric() || b[i] == '_') {
                i += 1;
            }
            let w: String = b[s..i].iter().collect();
            out.push((Tok::Ident(w.trim_start_matches("r#").to_string()), line));
        } else if c == ':' && i + 1 < n && b[i + 1] == ':' {
            out.push((Tok::PathSep, line));
            i += 2;
        } else {
            out.push((Tok::P(c), line));
            i += 1;
        }
    }
    out
}

fn raw_or_byte_string_at(b: &[char], i: usize) -> bool {
    let mut j = i;
    if b[j] == 'b' {
        j += 1;
    }
    if j < b.len() && b[j] == 'r' {
        j += 1;
        while j < b.len() && b[j] == '#' {
            j += 1;
        }
    }
    j > i && j < b.len() && b[j] == '"' && (i == 0 || !(b[i - 1].is_alphanumeric() || b[i - 1] == '_'))
}

/// The string literal starting at `i` (plain, byte, raw): its contents and the index after it.
fn string_at(b: &[char], mut i: usize, line: &mut usize) -> (String, usize) {
    if b[i] == 'b' {
        i += 1;
    }
    let mut hashes = None;
    if b[i] == 'r' {
        i += 1;
        let mut h = 0;
        while b[i] == '#' {
            h += 1;
            i += 1;
        }
        hashes = Some(h);
    }
    i += 1; // the opening quote
    let mut s = String::new();
    while i < b.len() {
        let c = b[i];
        if c == '\n' {
            *line += 1;
        }
        match hashes {
            None if c == '\\' => {
                if i + 1 < b.len() {
                    if b[i + 1] == '\n' {
                        *line += 1;
                    }
                    s.push(b[i + 1]);
                }
                i += 2;
                continue;
            }
            None if c == '"' => return (s, i + 1),
            Some(h) if c == '"' && (0..h).all(|k| b.get(i + 1 + k) == Some(&'#')) => return (s, i + 1 + h),
            _ => {}
        }
        s.push(c);
        i += 1;
    }
    (s, i)
}

// ---------------------------------------------------------------------------------------
// Parsing one file: its `mod` declarations and the paths it names, each under the inline
// module (`mod x { … }`) it is written in.

#[derive(Debug, Default)]
struct FileInfo {
    /// (inline module prefix, name, `#[path]`, line)
    mods: Vec<(Vec<String>, String, Option<String>, usize)>,
    /// (inline module prefix, path segments, from a `use` item)
    paths: Vec<(Vec<String>, Vec<String>, bool)>,
}

fn parse_file(src: &str) -> FileInfo {
    let toks = lex(src);
    let mut info = FileInfo::default();
    // The brace stack: Some(name) for an inline module's block.
    let mut stack: Vec<Option<String>> = Vec::new();
    let mut pending_path: Option<String> = None;
    let inline = |stack: &Vec<Option<String>>| stack.iter().flatten().cloned().collect::<Vec<_>>();
    let mut i = 0;
    while i < toks.len() {
        match &toks[i].0 {
            Tok::P('#') => {
                // An attribute: `#[…]` or `#![…]`; note `#[path = "…"]`.
                let mut j = i + 1;
                if matches!(toks.get(j), Some((Tok::P('!'), _))) {
                    j += 1;
                }
                if matches!(toks.get(j), Some((Tok::P('['), _))) {
                    let mut depth = 0;
                    let start = j;
                    while j < toks.len() {
                        match toks[j].0 {
                            Tok::P('[') => depth += 1,
                            Tok::P(']') => {
                                depth -= 1;
                                if depth == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        j += 1;
                    }
                    if let (Some((Tok::Ident(a), _)), Some((Tok::P('='), _)), Some((Tok::Str(p), _))) = (toks.get(start + 1), toks.get(start + 2), toks.get(start + 3)) {
                        if a == "path" {
                            pending_path = Some(p.clone());
                        }
                    }
                    i = j + 1;
                    continue;
                }
                i += 1;
            }
            Tok::Ident(w) if w == "mod" => {
                if let Some((Tok::Ident(name), line)) = toks.get(i + 1) {
                    match toks.get(i + 2).map(|t| &t.0) {
                        Some(Tok::P(';')) => {
                            info.mods.push((inline(&stack), name.clone(), pending_path.take(), *line));
                            i += 3;
                            continue;
                        }
                        Some(Tok::P('{')) => {
                            info.mods.push((inline(&stack), name.clone(), Some(String::new()), *line));
                            pending_path = None;
                            stack.push(Some(name.clone()));
                            i += 3;
                            continue;
                        }
                        _ => {}
                    }
                }
                i += 1;
            }
            Tok::Ident(w) if w == "use" && !matches!(toks.get(i.wrapping_sub(1)).map(|t| &t.0), Some(Tok::PathSep)) => {
                let mut j = i + 1;
                let mut depth = 0;
                while j < toks.len() {
                    match toks[j].0 {
                        Tok::P('{') => depth += 1,
                        Tok::P('}') => depth -= 1,
                        Tok::P(';') if depth == 0 => break,
                        _ => {}
                    }
                    j += 1;
                }
                let mut k = 0;
                let tree: Vec<Tok> = toks[i + 1..j.min(toks.len())].iter().map(|t| t.0.clone()).collect();
                for p in use_tree(&tree, &mut k, Vec::new()) {
                    info.paths.push((inline(&stack), p, true));
                }
                pending_path = None;
                i = j + 1;
            }
            Tok::Ident(w) if !matches!(toks.get(i.wrapping_sub(1)).map(|t| &t.0), Some(Tok::PathSep)) && matches!(toks.get(i + 1).map(|t| &t.0), Some(Tok::PathSep)) => {
                // A path in code: `a::b::c`; kept when it starts with crate/super/self or a
                // workspace crate's name (decided when resolving).
                let mut segs = vec![w.clone()];
                let mut j = i + 1;
                while matches!(toks.get(j).map(|t| &t.0), Some(Tok::PathSep)) {
                    match toks.get(j + 1).map(|t| &t.0) {
                        Some(Tok::Ident(s)) => {
                            segs.push(s.clone());
                            j += 2;
                        }
                        _ => break,
                    }
                }
                info.paths.push((inline(&stack), segs, false));
                i = j;
            }
            Tok::P('{') => {
                stack.push(None);
                i += 1;
            }
            Tok::P('}') => {
                stack.pop();
                i += 1;
            }
            Tok::P(';') => {
                pending_path = None;
                i += 1;
            }
            _ => i += 1,
        }
    }
    info
}

/// The paths a use tree names (`a::{b::C, d::{self, E}}` → a::b::C, a::d, a::d::E).
fn use_tree(t: &[Tok], k: &mut usize, prefix: Vec<String>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut cur = prefix.clone();
    if matches!(t.get(*k), Some(Tok::PathSep)) {
        *k += 1;
    }
    while *k < t.len() {
        match &t[*k] {
            Tok::Ident(w) if w == "as" => {
                *k += 2; // the alias
            }
            Tok::Ident(w) if w == "self" && cur.len() == prefix.len() && !prefix.is_empty() => {
                *k += 1;
            }
            Tok::Ident(w) => {
                cur.push(w.clone());
                *k += 1;
            }
            Tok::PathSep => *k += 1,
            Tok::P('*') => *k += 1,
            Tok::P('{') => {
                *k += 1;
                loop {
                    out.extend(use_tree(t, k, cur.clone()));
                    match t.get(*k) {
                        Some(Tok::P(',')) => {
                            *k += 1;
                            if matches!(t.get(*k), Some(Tok::P('}'))) {
                                *k += 1;
                                return out;
                            }
                        }
                        Some(Tok::P('}')) => {
                            *k += 1;
                            return out;
                        }
                        _ => return out,
                    }
                }
            }
            Tok::P(',') | Tok::P('}') => break,
            _ => *k += 1,
        }
    }
    if cur.len() > prefix.len() || (!prefix.is_empty() && out.is_empty()) {
        out.push(cur);
    }
    out
}

// ---------------------------------------------------------------------------------------
// A crate: its roots, its module tree, its edges.

/// The workspace's crates: (directory relative to `root`, crate name as code writes it).
pub fn workspace_crates(root: &Path) -> Result<Vec<(PathBuf, String)>, String> {
    let text = std::fs::read_to_string(root.join("Cargo.toml")).map_err(|e| format!("layers: Cargo.toml: {e}"))?;
    let members = text.split("members").nth(1).and_then(|s| s.split_once('[')).and_then(|(_, s)| s.split_once(']')).map(|(m, _)| m).ok_or("layers: no `members = [...]` in Cargo.toml")?;
    let mut out = Vec::new();
    for m in members.split(',').map(|s| s.trim().trim_matches('"')).filter(|s| !s.is_empty()) {
        let manifest = std::fs::read_to_string(root.join(m).join("Cargo.toml")).map_err(|e| format!("layers: {m}/Cargo.toml: {e}"))?;
        let name = manifest.lines().find_map(|l| l.trim().strip_prefix("name").and_then(|r| r.trim().strip_prefix('=')).map(|v| v.trim().trim_matches('"').replace('-', "_"))).ok_or_else(|| format!("layers: {m}/Cargo.toml has no name"))?;
        out.push((PathBuf::from(m), name));
    }
    Ok(out)
}

/// The crate's root files: src/lib.rs, src/main.rs, src/bin/*.rs, src/bin/*/main.rs.
fn roots(root: &Path, dir: &Path) -> Vec<PathBuf> {
    let src = root.join(dir).join("src");
    let mut out: Vec<PathBuf> = ["lib.rs", "main.rs"].iter().map(|f| src.join(f)).filter(|p| p.is_file()).collect();
    if let Ok(rd) = std::fs::read_dir(src.join("bin")) {
        let mut bins: Vec<PathBuf> = rd.flatten().map(|e| e.path()).filter_map(|p| if p.is_dir() { Some(p.join("main.rs")).filter(|m| m.is_file()) } else { Some(p).filter(|p| p.extension().is_some_and(|x| x == "rs")) }).collect();
        bins.sort();
        out.extend(bins);
    }
    out
}

fn is_dir_owner(p: &Path, is_root: bool) -> bool {
    is_root || p.file_name().is_some_and(|f| f == "mod.rs")
}

fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// Build one crate's graph. `root` is the workspace; `dir` the crate's folder in it; `crates`
/// every workspace crate's name (for crate-level edges).
pub fn crate_graph(root: &Path, dir: &Path, name: &str, crates: &[String]) -> CrateGraph {
    let mut g = CrateGraph { name: name.to_string(), dir: dir.to_path_buf(), ..Default::default() };
    let mut index: BTreeMap<PathBuf, usize> = BTreeMap::new();
    let mut infos: Vec<FileInfo> = Vec::new();
    let mut add = |p: &Path, g: &mut CrateGraph, infos: &mut Vec<FileInfo>| -> Option<usize> {
        let rel = p.strip_prefix(root).unwrap_or(p).to_path_buf();
        if let Some(&i) = index.get(&rel) {
            return Some(i);
        }
        let text = std::fs::read_to_string(p).ok()?;
        index.insert(rel.clone(), g.files.len());
        g.files.push(rel);
        infos.push(parse_file(&text));
        Some(g.files.len() - 1)
    };
    // Per root: module path -> file, and the module path each file was reached under.
    for r in roots(root, dir) {
        let Some(ri) = add(&r, &mut g, &mut infos) else { continue };
        let mut modules: BTreeMap<Vec<String>, usize> = BTreeMap::new();
        let mut at: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        let mut work = vec![(ri, Vec::<String>::new(), true)];
        modules.insert(Vec::new(), ri);
        while let Some((fi, mpath, is_root)) = work.pop() {
            if at.contains_key(&fi) {
                continue;
            }
            at.insert(fi, mpath.clone());
            let fpath = root.join(&g.files[fi]);
            let here = fpath.parent().unwrap().to_path_buf();
            let base = if is_dir_owner(&fpath, is_root) { here.clone() } else { here.join(fpath.file_stem().unwrap()) };
            let mods = infos[fi].mods.clone();
            for (inl, m, path_attr, line) in mods {
                let mut full = mpath.clone();
                full.extend(inl.iter().cloned());
                full.push(m.clone());
                if path_attr.as_deref() == Some("") {
                    modules.insert(full, fi); // an inline module: the same file
                    continue;
                }
                let dir_for = inl.iter().fold(base.clone(), |d, s| d.join(s));
                let candidates = match &path_attr {
                    // A #[path] on a module in a file is relative to that file's folder.
                    Some(p) => vec![normalize(&here.join(inl.iter().collect::<PathBuf>()).join(p))],
                    None => vec![dir_for.join(format!("{m}.rs")), dir_for.join(&m).join("mod.rs")],
                };
                match candidates.iter().find(|c| c.is_file()) {
                    Some(c) => {
                        let Some(ci) = add(c, &mut g, &mut infos) else { continue };
                        g.edges.insert((fi, ci, Kind::Mod));
                        modules.insert(full.clone(), ci);
                        if let Some(p) = &path_attr {
                            let rel = g.files[ci].clone();
                            let outside = !rel.starts_with(dir);
                            g.notes.push(format!("{}:{line}: `mod {m}` loads {} by #[path = \"{p}\"]{}", g.files[fi].display(), rel.display(), if outside { " (outside the crate's folder)" } else { "" }));
                        }
                        work.push((ci, full, false));
                    }
                    None => g.notes.push(format!("{}:{line}: `mod {m};` has no file (looked for {})", g.files[fi].display(), candidates.iter().map(|c| c.strip_prefix(root).unwrap_or(c).display().to_string()).collect::<Vec<_>>().join(", "))),
                }
            }
        }
        // Resolve every path of every file this root reached.
        let ctx = Ctx { modules: &modules, at: &at, infos: &infos, crates, name };
        for (&fi, _) in &at {
            for (inl, segs, _from_use) in &infos[fi].paths {
                match resolve(&ctx, fi, inl, segs, 0) {
                    Res::File(t) if t != fi => {
                        g.edges.insert((fi, t, Kind::Use));
                    }
                    Res::Crate(c) => {
                        g.crate_deps.insert(c);
                    }
                    _ => {}
                }
            }
        }
    }
    g
}

/// One root's module tree, for resolving paths.
struct Ctx<'a> {
    modules: &'a BTreeMap<Vec<String>, usize>,
    at: &'a BTreeMap<usize, Vec<String>>,
    infos: &'a [FileInfo],
    crates: &'a [String],
    name: &'a str,
}

enum Res {
    File(usize),
    Crate(String),
    Nothing,
}

/// The file a path written in file `fi` (inside its inline modules `inl`) names: the longest
/// module prefix decides; a name the module only re-exports (`pub use x::Name`, as crate roots
/// do) is followed to where it comes from, up to four steps.
fn resolve(ctx: &Ctx, fi: usize, inl: &[String], segs: &[String], depth: u8) -> Res {
    let Some(mpath) = ctx.at.get(&fi) else { return Res::Nothing };
    let mut cur = mpath.clone();
    cur.extend(inl.iter().cloned());
    let (base, rest): (Vec<String>, &[String]) = match segs[0].as_str() {
        "crate" => (Vec::new(), &segs[1..]),
        "self" => (cur.clone(), &segs[1..]),
        "super" => {
            let ups = segs.iter().take_while(|s| *s == "super").count();
            if ups > cur.len() {
                return Res::Nothing;
            }
            (cur[..cur.len() - ups].to_vec(), &segs[ups..])
        }
        first => {
            let mut child = cur.clone();
            child.push(first.to_string());
            if ctx.modules.contains_key(&child) {
                (cur.clone(), segs)
            } else if ctx.crates.iter().any(|c| c == first) && first != ctx.name {
                return Res::Crate(first.to_string());
            } else {
                return Res::Nothing;
            }
        }
    };
    for k in (0..=rest.len()).rev() {
        let mut m = base.clone();
        m.extend(rest[..k].iter().cloned());
        let Some(&t) = ctx.modules.get(&m) else { continue };
        if k < rest.len() && depth < 4 {
            // `rest[k]` is an item of module `m` (in file `t`): if `t` brings it in by a `use`
            // at that module's level, the item lives where that `use` points.
            let inner: Vec<String> = m.get(ctx.at.get(&t).map(|p| p.len()).unwrap_or(0)..).map(|x| x.to_vec()).unwrap_or_default();
            if let Some((inl2, segs2, _)) = ctx.infos[t].paths.iter().find(|(i, p, from_use)| *from_use && *i == inner && p.last() == Some(&rest[k]) && p.len() > 1) {
                if let Res::File(t2) = resolve(ctx, t, inl2, segs2, depth + 1) {
                    return Res::File(t2);
                }
            }
        }
        return Res::File(t);
    }
    Res::Nothing
}

// ---------------------------------------------------------------------------------------
// Strongly connected components (Tarjan) and floors.

/// Tarjan's strongly connected components of `n` nodes under `adj`, each sorted; in reverse
/// topological order (a component comes after every component it reaches).
pub fn tarjan(n: usize, adj: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let (mut index, mut low, mut on) = (vec![usize::MAX; n], vec![0; n], vec![false; n]);
    let (mut next, mut stack, mut out) = (0, Vec::new(), Vec::new());
    for s in 0..n {
        if index[s] != usize::MAX {
            continue;
        }
        // Iterative: (node, position in its adjacency list).
        let mut call = vec![(s, 0usize)];
        index[s] = next;
        low[s] = next;
        next += 1;
        stack.push(s);
        on[s] = true;
        while let Some(&mut (v, ref mut pos)) = call.last_mut() {
            if *pos < adj[v].len() {
                let w = adj[v][*pos];
                *pos += 1;
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on[w] = true;
                    call.push((w, 0));
                } else if on[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                call.pop();
                if let Some(&(u, _)) = call.last() {
                    low[u] = low[u].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut comp = Vec::new();
                    while let Some(w) = stack.pop() {
                        on[w] = false;
                        comp.push(w);
                        if w == v {
                            break;
                        }
                    }
                    comp.sort();
                    out.push(comp);
                }
            }
        }
    }
    out
}

fn adjacency(g: &CrateGraph, kinds: &[Kind]) -> Vec<Vec<usize>> {
    let mut adj = vec![Vec::new(); g.files.len()];
    for &(a, b, k) in &g.edges {
        if kinds.contains(&k) && !adj[a].contains(&b) {
            adj[a].push(b);
        }
    }
    adj
}

fn largest(comps: &[Vec<usize>]) -> Vec<usize> {
    comps.iter().filter(|c| c.len() > 1).max_by_key(|c| c.len()).cloned().unwrap_or_default()
}

/// Floor of each node: 1 for a component that imports nothing, else 1 + the highest floor
/// among what its component imports.
pub fn floors(n: usize, adj: &[Vec<usize>], comps: &[Vec<usize>]) -> Vec<usize> {
    let mut comp_of = vec![0; n];
    for (ci, c) in comps.iter().enumerate() {
        for &v in c {
            comp_of[v] = ci;
        }
    }
    // Tarjan gives components in reverse topological order: what a component imports comes first.
    let mut floor_of = vec![1; comps.len()];
    for (ci, c) in comps.iter().enumerate() {
        for &v in c {
            for &w in &adj[v] {
                let cw = comp_of[w];
                if cw != ci {
                    floor_of[ci] = floor_of[ci].max(floor_of[cw] + 1);
                }
            }
        }
    }
    (0..n).map(|v| floor_of[comp_of[v]]).collect()
}

pub fn summarize(g: &CrateGraph) -> Summary {
    let n = g.files.len();
    let both = adjacency(g, &[Kind::Mod, Kind::Use]);
    let comps = tarjan(n, &both);
    let uses = adjacency(g, &[Kind::Use]);
    let ucomps = tarjan(n, &uses);
    let fl = floors(n, &uses, &ucomps);
    Summary { circle: largest(&comps), use_circle: largest(&ucomps), circles: comps.iter().filter(|c| c.len() > 1).count(), use_circles: ucomps.iter().filter(|c| c.len() > 1).count(), floors: fl.into_iter().max().unwrap_or(0) }
}

// ---------------------------------------------------------------------------------------
// Output: the table, and the dot picture.

pub fn report(graphs: &[CrateGraph]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "layers: each crate's files and their imports (`mod` declarations; `use` and code paths through crate::, super::, self::, child modules)");
    let _ = writeln!(s, "{:<10} {:>6} {:>6} {:>6} {:>7} {:>15} {:>11} {:>12}  uses crates", "crate", "files", "mod", "use", "floors", "largest circle", "(use only)", "circles (use)");
    for g in graphs {
        let sm = summarize(g);
        let count = |k| g.edges.iter().filter(|e| e.2 == k).count();
        let deps: Vec<&str> = g.crate_deps.iter().map(String::as_str).collect();
        let _ = writeln!(s, "{:<10} {:>6} {:>6} {:>6} {:>7} {:>15} {:>11} {:>12}  {}", g.name, g.files.len(), count(Kind::Mod), count(Kind::Use), sm.floors, sm.circle.len(), sm.use_circle.len(), sm.use_circles, if deps.is_empty() { "-".to_string() } else { deps.join(", ") });
    }
    for g in graphs {
        let sm = summarize(g);
        if !sm.use_circle.is_empty() {
            let names: Vec<String> = sm.use_circle.iter().map(|&i| g.files[i].display().to_string()).collect();
            let _ = writeln!(s, "\n{}: the largest circle by `use` alone, {} files: {}", g.name, names.len(), names.join(" "));
        }
        if !sm.circle.is_empty() && sm.circle.len() != sm.use_circle.len() {
            let _ = writeln!(s, "{}: with `mod` declarations counted, {} of {} files in one circle (a parent declares its children and they name it back)", g.name, sm.circle.len(), g.files.len());
        }
        for n in &g.notes {
            let _ = writeln!(s, "{}: note: {n}", g.name);
        }
    }
    s
}

fn dot_id(p: &Path) -> String {
    format!("\"{}\"", p.display())
}

/// The dot text: a cluster per crate, nested clusters per folder, a node per file (the files
/// of the crate's largest `use` circle filled), `use` edges inside crates and one edge per
/// crate-level dependency between the crates' root files.
pub fn dot(graphs: &[CrateGraph]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "// cargo xtask layers --dot FILE: files as nodes, crates and folders as clusters; an arrow A -> B: A imports B (use).");
    let _ = writeln!(s, "digraph layers {{\n  compound=true; newrank=true; rankdir=TB; ranksep=0.5; nodesep=0.08;\n  node [shape=box, fontsize=9, height=0.2, margin=\"0.04,0.02\", style=filled, fillcolor=white];\n  edge [color=\"#00000030\", arrowsize=0.4];");
    for (ci, g) in graphs.iter().enumerate() {
        let sm = summarize(g);
        let circle: BTreeSet<usize> = sm.use_circle.iter().copied().collect();
        let _ = writeln!(s, "  subgraph cluster_{ci} {{\n    label=\"{} ({}/, {} files; largest circle {})\"; fontsize=14; style=rounded; color=\"#4060a0\";", g.name, g.dir.display(), g.files.len(), sm.use_circle.len());
        // Folders, nested.
        let mut folders: BTreeMap<PathBuf, Vec<usize>> = BTreeMap::new();
        for (i, f) in g.files.iter().enumerate() {
            folders.entry(f.parent().unwrap_or(Path::new("")).to_path_buf()).or_default().push(i);
        }
        for (fi, (folder, files)) in folders.iter().enumerate() {
            let _ = writeln!(s, "    subgraph cluster_{ci}_{fi} {{ label=\"{}/\"; fontsize=10; style=dashed; color=\"#909090\";", folder.display());
            for &i in files {
                let f = &g.files[i];
                let label = f.file_name().map(|x| x.to_string_lossy().to_string()).unwrap_or_default();
                let fill = if circle.contains(&i) { "#f4c0a0" } else { "white" };
                let _ = writeln!(s, "      {} [label=\"{label}\", fillcolor=\"{fill}\"];", dot_id(f));
            }
            let _ = writeln!(s, "    }}");
        }
        let _ = writeln!(s, "  }}");
        for &(a, b, k) in &g.edges {
            if k == Kind::Use {
                let _ = writeln!(s, "  {} -> {};", dot_id(&g.files[a]), dot_id(&g.files[b]));
            }
        }
    }
    // Crate-level edges between the clusters (from the first root to the first root).
    for (ci, g) in graphs.iter().enumerate() {
        for d in &g.crate_deps {
            if let Some((di, h)) = graphs.iter().enumerate().find(|(_, h)| &h.name == d) {
                if let (Some(a), Some(b)) = (g.files.first(), h.files.first()) {
                    let _ = writeln!(s, "  {} -> {} [ltail=cluster_{ci}, lhead=cluster_{di}, color=\"#4060a0\", penwidth=2, arrowsize=1];", dot_id(a), dot_id(b));
                }
            }
        }
    }
    s.push_str("}\n");
    s
}

/// The dot text one level up: a node per folder (its files counted, filled when it holds
/// files of the crate's largest `use` circle), crates as clusters, an arrow per pair of
/// folders whose files import each other (its width grows with the number of file imports),
/// and the crate-level dependencies between the clusters.
pub fn dot_folders(graphs: &[CrateGraph]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "// cargo xtask layers --folders --dot FILE: folders as nodes, crates as clusters; an arrow A -> B: files of A import files of B (use; width: how many).");
    let _ = writeln!(s, "digraph layers {{\n  compound=true; newrank=true; rankdir=TB; ranksep=0.45; nodesep=0.25;\n  node [shape=box, fontsize=11, style=\"filled,rounded\", fillcolor=white];\n  edge [color=\"#00000060\", arrowsize=0.6];");
    let folder = |f: &Path| f.parent().unwrap_or(Path::new("")).to_path_buf();
    let mut first_node: BTreeMap<String, PathBuf> = BTreeMap::new();
    for (ci, g) in graphs.iter().enumerate() {
        let sm = summarize(g);
        let circle: BTreeSet<PathBuf> = sm.use_circle.iter().map(|&i| folder(&g.files[i])).collect();
        let mut files: BTreeMap<PathBuf, usize> = BTreeMap::new();
        for f in &g.files {
            *files.entry(folder(f)).or_default() += 1;
        }
        let _ = writeln!(s, "  subgraph cluster_{ci} {{\n    label=\"{} ({}/): {} files, largest circle {}\"; fontsize=14; style=rounded; color=\"#4060a0\";", g.name, g.dir.display(), g.files.len(), sm.use_circle.len());
        for (f, n) in &files {
            let fill = if circle.contains(f) { "#f4c0a0" } else { "white" };
            let _ = writeln!(s, "    \"{}:{}\" [label=\"{}/\\n{n} files\", fillcolor=\"{fill}\"];", g.name, f.display(), f.display());
        }
        let _ = writeln!(s, "  }}");
        if let Some(f) = g.files.first() {
            first_node.insert(g.name.clone(), folder(f));
        }
        let mut pairs: BTreeMap<(PathBuf, PathBuf), usize> = BTreeMap::new();
        for &(a, b, k) in &g.edges {
            let (fa, fb) = (folder(&g.files[a]), folder(&g.files[b]));
            if k == Kind::Use && fa != fb {
                *pairs.entry((fa, fb)).or_default() += 1;
            }
        }
        for ((a, b), n) in pairs {
            let w = 1.0 + (n as f64).ln();
            let _ = writeln!(s, "  \"{}:{}\" -> \"{}:{}\" [penwidth={w:.1}, tooltip=\"{n} file imports\"];", g.name, a.display(), g.name, b.display());
        }
    }
    for (ci, g) in graphs.iter().enumerate() {
        for d in &g.crate_deps {
            if let (Some(di), Some(a), Some(b)) = (graphs.iter().position(|h| &h.name == d), first_node.get(&g.name), first_node.get(d)) {
                let _ = writeln!(s, "  \"{}:{}\" -> \"{d}:{}\" [ltail=cluster_{ci}, lhead=cluster_{di}, color=\"#4060a0\", penwidth=2.5, arrowsize=1];", g.name, a.display(), b.display());
            }
        }
    }
    s.push_str("}\n");
    s
}

/// `cargo xtask layers [--crate NAME]... [--folders] [--dot FILE] [--svg FILE]`.
pub fn command(only: &[String], folders: bool, dot_out: Option<&Path>, svg_out: Option<&Path>) -> Result<(), String> {
    let root = crate::host::env::workspace_root();
    let crates = workspace_crates(&root)?;
    let names: Vec<String> = crates.iter().map(|c| c.1.clone()).collect();
    for o in only {
        if !names.contains(o) {
            return Err(format!("layers: no crate `{o}` in the workspace (crates: {})", names.join(", ")));
        }
    }
    let graphs: Vec<CrateGraph> = crates.iter().filter(|(_, n)| only.is_empty() || only.contains(n)).map(|(d, n)| crate_graph(&root, d, n, &names)).collect();
    print!("{}", report(&graphs));
    let text = if folders { dot_folders(&graphs) } else { dot(&graphs) };
    if let Some(p) = dot_out {
        std::fs::write(p, &text).map_err(|e| format!("layers: cannot write {}: {e}", p.display()))?;
        println!("layers: wrote {}", p.display());
    }
    if let Some(p) = svg_out {
        crate::host::env::ensure_tool("dot", &["graphviz"])?;
        let tmp = std::env::temp_dir().join(format!("layers-{}.dot", std::process::id()));
        std::fs::write(&tmp, &text).map_err(|e| format!("layers: cannot write {}: {e}", tmp.display()))?;
        let st = std::process::Command::new("dot").arg("-Tsvg").arg(&tmp).arg("-o").arg(p).status().map_err(|e| format!("layers: dot: {e}"));
        let _ = std::fs::remove_file(&tmp);
        if !st?.success() {
            return Err(format!("layers: dot failed to draw {}", p.display()));
        }
        println!("layers: wrote {}", p.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A made-up crate in a fresh folder: `files` are (path under src/, text).
    fn tree(name: &str, files: &[(&str, &str)]) -> (PathBuf, CrateGraph) {
        let root = std::env::temp_dir().join(format!("layers-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (p, t) in files {
            let f = root.join("c/src").join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, t).unwrap();
        }
        let g = crate_graph(&root, Path::new("c"), "c", &["c".into(), "other".into()]);
        (root, g)
    }

    fn file_names(g: &CrateGraph, ix: &[usize]) -> Vec<String> {
        ix.iter().map(|&i| g.files[i].display().to_string()).collect()
    }

    /// Catches: a circle of `use`s missed (Tarjan's low links wrong), or one reported on a chain.
    #[test]
    fn a_circle_is_found_and_a_chain_is_not() {
        let (root, g) = tree("circle", &[("lib.rs", "mod a; mod b; mod c; mod d;"), ("a.rs", "use crate::b::B; pub struct A;"), ("b.rs", "use crate::c::{C, self};\npub struct B;"), ("c.rs", "pub struct C; fn f() { crate::a::A; }"), ("d.rs", "use super::a::A;")]);
        let s = summarize(&g);
        assert_eq!(file_names(&g, &s.use_circle), ["c/src/a.rs", "c/src/b.rs", "c/src/c.rs"]);
        let (root2, g2) = tree("chain", &[("lib.rs", "mod a; mod b; mod c;"), ("a.rs", "use crate::b::B;"), ("b.rs", "use crate::c::C;"), ("c.rs", "pub struct C;")]);
        let s2 = summarize(&g2);
        assert!(s2.use_circle.is_empty(), "{s2:?}");
        // a -> b -> c: three floors of `use` (the root's `mod`s do not make floors).
        assert_eq!(s2.floors, 3);
        let _ = (std::fs::remove_dir_all(root), std::fs::remove_dir_all(root2));
    }

    /// Catches: `mod` declarations not counted as imports, or `super::` resolved to the wrong
    /// file; nested files (`x/mod.rs`, `x/y.rs`) and inline modules placed.
    #[test]
    fn mod_and_use_are_both_counted() {
        let (root, g) = tree("modsuse", &[("main.rs", "mod x;\nmod inner { pub fn f() {} }\nfn main() {}"), ("x/mod.rs", "pub mod y;\npub fn g() { super::inner::f(); }"), ("x/y.rs", "use super::g;")]);
        let e = |a: &str, b: &str, k| g.edges.contains(&(g.files.iter().position(|f| f.ends_with(a)).unwrap(), g.files.iter().position(|f| f.ends_with(b)).unwrap(), k));
        assert!(e("main.rs", "x/mod.rs", Kind::Mod));
        assert!(e("x/mod.rs", "x/y.rs", Kind::Mod));
        assert!(e("x/y.rs", "x/mod.rs", Kind::Use));
        assert!(e("x/mod.rs", "main.rs", Kind::Use), "super::inner is an inline module of main.rs");
        let s = summarize(&g);
        // x/mod.rs declares y and y names x back: a circle with `mod` counted, none by `use` alone
        // (main.rs <- x/mod.rs is `use` one way and `mod` the other, so it joins the circle too).
        assert_eq!(s.circle.len(), 3, "{s:?}");
        assert!(s.use_circle.is_empty(), "{s:?}");
        let _ = std::fs::remove_dir_all(root);
    }

    /// Catches: a `#[path]` include not followed or not noted; another crate's path taken for
    /// a file edge; comments and strings read as code.
    #[test]
    fn path_includes_are_noted_and_other_crates_are_crate_edges() {
        let (root, g) = tree("path", &[("main.rs", "#[path = \"../../shared/k.rs\"]\nmod k;\n// use crate::nothing::X;\nconst S: &str = \"crate::k::K\";\nuse other::Thing;\nfn main() { let c = '{'; k::K; }"), ("../../shared/k.rs", "pub struct K;")]);
        assert!(g.files.iter().any(|f| f.ends_with("shared/k.rs") && !f.starts_with("c")), "{:?}", g.files);
        assert_eq!(g.notes.len(), 1, "{:?}", g.notes);
        assert!(g.notes[0].contains("#[path = \"../../shared/k.rs\"]") && g.notes[0].contains("outside the crate's folder"), "{:?}", g.notes);
        assert_eq!(g.crate_deps.iter().collect::<Vec<_>>(), ["other"]);
        // Only the `mod` edge and the code path `k::K`; nothing from the comment or the string.
        assert_eq!(g.edges.len(), 2, "{:?}", g.edges);
        let _ = std::fs::remove_dir_all(root);
    }

    /// Catches: a crate root's re-export taken for the item's home (every module that names
    /// `crate::A` would then stand in one circle with the root that declares it).
    #[test]
    fn re_exports_are_followed_to_the_item() {
        let (root, g) = tree("reexport", &[("lib.rs", "mod a; mod b; pub use a::A;"), ("a.rs", "pub struct A;"), ("b.rs", "use crate::A; fn f() { crate::A; }")]);
        let ix = |f: &str| g.files.iter().position(|p| p.ends_with(f)).unwrap();
        assert!(g.edges.contains(&(ix("b.rs"), ix("a.rs"), Kind::Use)), "{:?}", g.edges);
        assert!(!g.edges.contains(&(ix("b.rs"), ix("lib.rs"), Kind::Use)), "{:?}", g.edges);
        assert!(summarize(&g).circle.is_empty());
        let _ = std::fs::remove_dir_all(root);
    }

    /// Catches: use trees expanded wrongly (`self`, nested braces, `as`).
    #[test]
    fn use_trees_expand() {
        let toks: Vec<Tok> = lex("crate::{a::{self, B as C}, d::*, e};").into_iter().map(|t| t.0).collect();
        let mut k = 0;
        let got = use_tree(&toks, &mut k, Vec::new());
        let want: Vec<Vec<String>> = [&["crate", "a"][..], &["crate", "a", "B"], &["crate", "d"], &["crate", "e"]].iter().map(|v| v.iter().map(|s| s.to_string()).collect()).collect();
        assert_eq!(got, want);
    }

    /// The real tree: every workspace crate is read, and the kernel has files and imports.
    #[test]
    fn the_workspace_reads() {
        let root = crate::host::env::workspace_root();
        let crates = workspace_crates(&root).unwrap();
        assert!(crates.iter().any(|c| c.1 == "kernel") && crates.iter().any(|c| c.1 == "libos"), "{crates:?}");
        let names: Vec<String> = crates.iter().map(|c| c.1.clone()).collect();
        let k = crate_graph(&root, Path::new("kernel"), "kernel", &names);
        assert!(k.files.len() > 20 && k.edges.len() > k.files.len(), "{} files, {} edges", k.files.len(), k.edges.len());
        assert!(k.crate_deps.contains("abi") && k.crate_deps.contains("percore"), "{:?}", k.crate_deps);
    }
}

/// `cargo xtask layers` options (declared here so that cli.rs only names them).
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct LayersArgs {
    /// Only this crate (as code names it: kernel, libos, xtask, ...); repeatable
    #[arg(long = "crate", value_name = "NAME")]
    pub krate: Vec<String>,
    /// Draw folders as nodes (files counted in each) instead of files
    #[arg(long)]
    pub folders: bool,
    /// Write the Graphviz dot text here
    #[arg(long, value_name = "FILE")]
    pub dot: Option<PathBuf>,
    /// Draw it as SVG here with Graphviz's `dot` (installed from Debian's graphviz if missing)
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}
