//! Where things live, checked against the source tree: the rules
//! docs/ARCHITECTURE.md states about which module may do what, so a change
//! that breaks one fails here rather than in review.

use std::fs;
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, sorted.
fn rs_files(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).expect("read a source directory") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, &mut files);
    files.sort();
    files
}

/// The workspace's library crates below nd7's own, each with the place its
/// modules take in nd7's module tree: nd7's library re-exports them (ADR-0100),
/// so `crate::policy` in src/ is `nd7_format::policy`, and the vault server's
/// crate is `vault_server`. The rules below read the tree as one.
const CRATES: &[(&str, &str)] = &[
    ("crates/nd7-format/src", "src"),
    ("crates/nd7-platform/src", "src"),
    ("crates/nd7-vault-server/src", "src/vault_server"),
];

/// Where a file of a lower crate sits in nd7's module tree: its crate's
/// `lib.rs` is no module of nd7's (`None`), except the vault server's, which
/// is `vault_server`; `codex_hook` and `safe` are re-exported as
/// `codex::hook` and `read::safe`.
fn place_in_tree(at: &str, rel: &str) -> Option<String> {
    let path = match (at, rel) {
        ("src/vault_server", "lib.rs") => "src/vault_server/mod.rs".to_string(),
        ("src", "lib.rs") => return None,
        ("src", "codex_hook.rs") => "src/codex/hook.rs".to_string(),
        ("src", "safe.rs") => "src/read/safe.rs".to_string(),
        _ => format!("{at}/{rel}"),
    };
    Some(path)
}

/// Every `.rs` file of nd7's library and binaries, with its path in nd7's
/// module tree (`src/…`; a lower crate's file where its module is
/// re-exported, see [`CRATES`]), and its text.
fn sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &Path| fs::read_to_string(p).expect("read source");
    let mut out: Vec<(String, String)> = rs_files(&root.join("src"))
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(root).expect("under the crate");
            (rel.to_string_lossy().into_owned(), read(&p))
        })
        .collect();
    for (krate, at) in CRATES {
        let dir = root.join(krate);
        for p in rs_files(&dir) {
            let rel = p.strip_prefix(&dir).expect("under the crate");
            if let Some(path) = place_in_tree(at, &rel.to_string_lossy()) {
                out.push((path, read(&p)));
            }
        }
    }
    out.sort();
    out
}

/// Every `.rs` file of one lower crate (`crates/<name>/src`), by its real path.
fn crate_sources(krate: &str) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    rs_files(&root.join(krate))
        .into_iter()
        .map(|p| {
            let text = fs::read_to_string(&p).expect("read source");
            let rel = p.strip_prefix(root).expect("under the workspace");
            (rel.to_string_lossy().into_owned(), text)
        })
        .collect()
}

/// The source without its `#[cfg(test)] mod tests { … }` (tests may serve
/// HTTP or rename files as they like); braces counted, so code after the
/// tests is kept, and their lines left empty, so line numbers hold.
fn without_tests(text: &str) -> String {
    let Some(start) = text.find("#[cfg(test)]\nmod tests {") else {
        return text.to_string();
    };
    let open = start + text[start..].find('{').unwrap_or(0);
    let mut depth = 0usize;
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    // Its lines kept as empty ones, so line numbers hold.
                    let end = open + i + 1;
                    let lines = "\n".repeat(text[start..end].matches('\n').count());
                    return format!("{}{lines}{}", &text[..start], &text[end..]);
                }
            }
            _ => {}
        }
    }
    text[..start].to_string()
}

/// nd7 speaks HTTP through `http_client` alone (ship, admin, self-update);
/// the vault server's own transport is the one other, and the egress proxy
/// (`src/egress.rs`, ADR-0106), which opens the agent's connections for it
/// and speaks no HTTP of nd7's own. Guards the split of ship.rs: a module
/// that opened its own connection would show here.
#[test]
fn only_the_http_client_speaks_http() {
    let mut found = Vec::new();
    for (path, text) in sources() {
        if path == "src/http_client.rs"
            || path.starts_with("src/vault_server/")
            || path == "src/egress.rs"
        {
            continue;
        }
        for word in ["ureq::", "TcpStream::connect", "hyper::client", "reqwest"] {
            if without_tests(&text).contains(word) {
                found.push(format!("{path}: {word}"));
            }
        }
    }
    assert!(found.is_empty(), "HTTP outside http_client: {found:?}");
}

/// Every file nd7 writes whole goes through `files` (ADR-0060): one place
/// with the temporary at its final mode, no link followed, and durability
/// said. A rename anywhere else is one of these, each with why; an entry
/// whose file no longer renames must leave the list.
#[test]
fn every_atomic_replace_goes_through_files() {
    const ELSEWHERE: &[(&str, &str)] = &[(
        "src/setup/claude_json.rs",
        "moves Claude Code's own state file and puts a link in its place: no bytes are written",
    )];
    let mut found = Vec::new();
    for (path, text) in sources() {
        if path == "src/files.rs" {
            continue;
        }
        let renames = ["fs::rename(", "renameat", ".persist("]
            .iter()
            .any(|w| without_tests(&text).contains(w));
        let listed = ELSEWHERE.iter().any(|(p, _)| *p == path);
        if renames != listed {
            found.push(format!(
                "{path}: {}",
                if renames {
                    "renames a file outside files.rs"
                } else {
                    "no longer renames: take it off the list"
                }
            ));
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// The code lines of `text`: comments (`//`, `//!`, `///`) left out.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
}

/// `kernel` stands below `run_dir` and `sandbox`, and `run_dir` below
/// `sandbox` (ADR-0064, ADR-0065): a `crate::sandbox` in run_dir.rs or
/// kernel/, or a `crate::run_dir` in kernel/, brings the cycle back.
#[test]
fn the_run_dir_and_the_kernel_never_reach_up_into_the_sandbox() {
    let mut found = Vec::new();
    let mut checked = 0;
    for (path, text) in sources() {
        let kernel = path.starts_with("src/kernel/");
        let above: &[&str] = if kernel {
            &["sandbox", "run_dir"]
        } else if path == "src/run_dir.rs" {
            &["sandbox"]
        } else {
            continue;
        };
        checked += 1;
        for (n, line) in code_lines(&text) {
            let names_crate = line.contains("crate::") || line.contains("super::");
            if let Some(up) = above.iter().find(|m| names_crate && line.contains(*m)) {
                found.push(format!("{path}:{n}: uses {up}: {}", line.trim()));
            }
        }
    }
    // The run directory's module and kernel's three files: a rename that
    // left this test checking nothing fails here.
    assert_eq!(checked, 4, "the modules below the sandbox moved");
    assert!(found.is_empty(), "{found:#?}");
}

/// `#[cfg(target_os)]` lives in `sandbox/` and `kernel/` only (ADR-0064), and
/// in setup's timer code, which installs a systemd unit or a launchd agent.
#[test]
fn platform_code_is_fenced_off_in_the_sandbox_and_the_kernel() {
    let mut found = Vec::new();
    for (path, text) in sources() {
        if path.starts_with("src/sandbox/")
            || path.starts_with("src/kernel/")
            || path == "src/setup/timer.rs"
        {
            continue;
        }
        for (n, line) in code_lines(&text) {
            // The test build's refusal without its features holds on Linux
            // only (src/lib.rs, tests/it/main.rs): not platform code.
            if line.trim() == "target_os = \"linux\"," && path == "src/lib.rs" {
                continue;
            }
            if line.contains("target_os") {
                found.push(format!("{path}:{n}: {}", line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// `#[cfg(target_arch)]` lives in the Linux sandbox only (the seccomp
/// filter's system call numbers differ by architecture). No macOS code depends
/// on the architecture, so .ci/check-macos type-checks one macOS target, not
/// both (ADR-0122): a `target_arch` outside `src/sandbox/linux/` makes that
/// check incomplete, and fails here.
#[test]
fn only_the_linux_sandbox_depends_on_the_architecture() {
    let mut found = Vec::new();
    let mut fenced = 0;
    for (path, text) in sources() {
        for (n, line) in code_lines(&text) {
            if !line.contains("target_arch") {
                continue;
            }
            if path.starts_with("src/sandbox/linux/") {
                fenced += 1;
            } else {
                found.push(format!("{path}:{n}: {}", line.trim()));
            }
        }
    }
    // The filter's own arms: a rename that left this test checking nothing fails here.
    assert!(
        fenced > 0,
        "no target_arch in src/sandbox/linux: the seccomp filter moved"
    );
    assert!(found.is_empty(), "{found:#?}");
}

/// The module a source file is, as docs/ARCHITECTURE.md names it:
/// `src/read/store.rs` is `read::store`, `src/policy/mod.rs` is `policy`; a
/// binary's file is named by its path. `None` for the crate root and the
/// files that hold only a module's unit tests.
fn module_of(path: &str) -> Option<String> {
    if path.starts_with("src/bin/") {
        return Some(path.to_string());
    }
    let inner = path.strip_prefix("src/")?.strip_suffix(".rs")?;
    let mut parts: Vec<&str> = inner.split('/').collect();
    if parts.last() == Some(&"mod") {
        parts.pop();
    }
    match parts.as_slice() {
        ["lib"] => None,
        [.., "tests"] => None,
        _ => Some(parts.join("::")),
    }
}

/// docs/ARCHITECTURE.md's module table: for each row, the modules its first
/// cell names (in backticks) and what its last cell says they touch.
fn architecture_rows() -> Vec<(Vec<String>, String)> {
    let text =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ARCHITECTURE.md"))
            .expect("docs/ARCHITECTURE.md");
    text.lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            let first = cells[0].trim_start_matches("| ");
            let names = first
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect();
            let touches = cells
                .last()
                .unwrap_or(&"")
                .trim_end_matches(" |")
                .to_string();
            (names, touches)
        })
        .collect()
}

/// docs/ARCHITECTURE.md shows every module with its one job: a module
/// added without its row, or renamed, fails here.
#[test]
fn the_architecture_shows_every_module() {
    let rows = architecture_rows();
    let shown: Vec<&String> = rows.iter().flat_map(|(names, _)| names).collect();
    let mut missing = Vec::new();
    let mut modules = Vec::new();
    for (path, _) in sources() {
        let Some(module) = module_of(&path) else {
            continue;
        };
        if !shown.contains(&&module) {
            missing.push(format!("{module} ({path})"));
        }
        modules.push(module);
    }
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md has no row for: {missing:#?}"
    );
    // And no row for a module that is gone.
    let gone: Vec<&&String> = shown
        .iter()
        .filter(|name| !modules.contains(name))
        .collect();
    assert!(
        gone.is_empty(),
        "docs/ARCHITECTURE.md shows modules that do not exist: {gone:?}"
    );
}

/// src/lib.rs's module list names every module the crate declares.
#[test]
fn the_crate_doc_lists_every_module() {
    let lib = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
        .expect("src/lib.rs");
    let doc: String = lib
        .lines()
        .filter(|l| l.starts_with("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    let declared: Vec<&str> = lib
        .lines()
        .filter_map(|l| {
            let l = l.strip_suffix(';')?;
            // `pub mod x;`, or a lower crate's module re-exported: `pub use nd7_format::x;`.
            l.strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("pub use nd7_")?.split("::").nth(1))
                .or_else(|| l.strip_prefix("pub use nd7_vault_server as "))
        })
        .collect();
    assert!(declared.len() > 20, "{declared:?}");
    let missing: Vec<&&str> = declared
        .iter()
        .filter(|m| !doc.contains(&format!("`{m}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "src/lib.rs's doc does not list: {missing:?}"
    );
}

/// What a line of code names that reaches the world: files, sockets, the
/// clock, processes, the environment, the terminal, the kernel. `None` for
/// a line that reaches none of it (threads and `OsStr` bytes do not).
fn reaches_the_world(line: &str) -> Option<&'static str> {
    const STD: [&str; 5] = ["fs", "net", "time", "process", "env"];
    for module in STD {
        if line.contains(&format!("std::{module}::")) || line.contains(&format!("std::{module};")) {
            return Some(module);
        }
    }
    // `use std::{fs, io};` and the like.
    if let Some(group) = line.split("std::{").nth(1) {
        let group = group.split('}').next().unwrap_or("");
        if let Some(module) = STD.iter().find(|m| {
            group
                .split([',', ' '])
                .any(|w| w == **m || w.starts_with(&format!("{m}::")))
        }) {
            return Some(module);
        }
    }
    [
        "std::os::unix::net",
        "std::os::unix::fs",
        "std::os::unix::process",
        "std::os::fd",
        "std::io::stdin",
        "std::io::stdout",
        "std::io::stderr",
        "rustix::",
        "libc::",
        "nix::",
        "signal_hook",
        "getrandom",
        "ureq::",
        "Zoned::now",
        "Timestamp::now",
    ]
    .into_iter()
    .find(|w| names_path(line, w))
}

/// Whether `line` holds `path` where a path starts (not `unix::` for `nix::`).
fn names_path(line: &str, path: &str) -> bool {
    line.match_indices(path).any(|(at, _)| {
        !line[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// The pure core decides and touches nothing (ARCHITECTURE.md): every file
/// of the crate nd7-format names no file, socket, clock, process,
/// environment or system call outside its unit tests, and the crate forbids
/// `unsafe` (ADR-0100). The compiler keeps it from nd7's other crates.
#[test]
fn the_pure_core_touches_nothing() {
    let mut found = Vec::new();
    let mut checked = 0;
    for (path, text) in crate_sources("crates/nd7-format/src") {
        if path.ends_with("/tests.rs") {
            continue;
        }
        checked += 1;
        for (n, line) in code_lines(&without_tests(&text)) {
            if let Some(what) = reaches_the_world(line) {
                found.push(format!("{path}:{n}: {what}: {}", line.trim()));
            }
        }
    }
    assert!(checked >= 20, "the pure crate moved ({checked} files)");
    let root = "crates/nd7-format/src/lib.rs";
    let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(root)).expect(root);
    if !text.contains("\n#![forbid(unsafe_code)]\n") {
        found.push(format!("{root}: no #![forbid(unsafe_code)]"));
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// What ARCHITECTURE.md says a module touches is drawn from the code: a
/// module whose row says "no" names no file, socket, clock, process or
/// environment outside its unit tests (a system call to install a filter,
/// said in the row, excepted).
#[test]
fn a_module_said_to_touch_nothing_touches_nothing() {
    let mut found = Vec::new();
    let mut checked = 0;
    let sources = sources();
    for (names, touches) in architecture_rows() {
        if !(touches == "no" || touches.starts_with("no (")) {
            continue;
        }
        let syscall = touches.contains("system call");
        for name in names {
            let base = format!("src/{}", name.replace("::", "/"));
            for (path, text) in &sources {
                if *path != format!("{base}.rs") && *path != format!("{base}/mod.rs") {
                    continue;
                }
                checked += 1;
                for (n, line) in code_lines(&without_tests(text)) {
                    match reaches_the_world(line) {
                        Some("rustix::" | "libc::") if syscall => {}
                        Some(what) => found.push(format!("{path}:{n}: {what}: {}", line.trim())),
                        None => {}
                    }
                }
            }
        }
    }
    assert!(checked >= 30, "{checked} modules said to touch nothing");
    assert!(
        found.is_empty(),
        "modules ARCHITECTURE.md says touch nothing: {found:#?}"
    );
}

/// ADR numbers run without gaps: every number up to the last has its
/// heading, in order (a number set aside says "Not assigned", as does a
/// run of them, `## ADR-0068 to ADR-0079: Not assigned`), and none is used
/// twice.
#[test]
fn adr_numbers_run_without_gaps() {
    let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/DECISIONS.md"))
        .expect("docs/DECISIONS.md");
    let number = |n: &str, heading: &str| -> u32 {
        n.parse()
            .unwrap_or_else(|_| panic!("an ADR heading without its number: ## ADR-{heading}"))
    };
    let mut numbers: Vec<u32> = Vec::new();
    for rest in text.lines().filter_map(|l| l.strip_prefix("## ADR-")) {
        let (head, title) = rest.split_once(':').unwrap_or((rest, ""));
        match head.split_once(" to ADR-") {
            Some((from, to)) => {
                assert_eq!(
                    title.trim(),
                    "Not assigned",
                    "a run of numbers is only ever unassigned: {rest}"
                );
                numbers.extend(number(from, rest)..=number(to, rest));
            }
            None => numbers.push(number(head, rest)),
        }
    }
    assert!(numbers.len() > 60, "{numbers:?}");
    let expected: Vec<u32> = (1..=numbers.len() as u32).collect();
    assert_eq!(
        numbers, expected,
        "ADR headings out of order, missing or twice"
    );
}

/// Every `unsafe` block says why it is sound: a `// SAFETY:` comment in the
/// lines just above it (clippy's `undocumented_unsafe_blocks`, denied in
/// Cargo.toml, checks the same on Linux; this also covers the macOS code,
/// which clippy does not see here).
#[test]
fn every_unsafe_block_says_why_it_is_sound() {
    let mut found = Vec::new();
    let mut blocks = 0;
    for (path, text) in sources() {
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if !(code.contains("unsafe {") || code.contains("unsafe impl")) {
                continue;
            }
            blocks += 1;
            // The comment ends at most a few lines up (a statement's start,
            // `let x =`, may sit between), with nothing but comments and the
            // statement's head between.
            let said = lines[..i]
                .iter()
                .rev()
                .take(8)
                .take_while(|l| {
                    let t = l.trim_start();
                    t.starts_with("//") || !t.ends_with(';') && !t.ends_with('}') && !t.is_empty()
                })
                .any(|l| l.trim_start().starts_with("// SAFETY:"))
                || line.contains("// SAFETY:");
            if !said {
                found.push(format!("{path}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(blocks > 50, "{blocks} unsafe blocks");
    assert!(
        found.is_empty(),
        "unsafe without a SAFETY comment: {found:#?}"
    );
}

/// Every feature a test is gated on is one the suite's guard refuses to run
/// without (`SUITE_FEATURES` in tests/it/main.rs): a test gated on a new
/// feature must not be dropped silently by a build without it.
#[test]
fn the_suites_guard_covers_every_feature_its_tests_need() {
    let files = rs_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it"));
    let mut gated = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).expect("read a test");
        for (n, line) in code_lines(&text) {
            for part in line.split("feature = \"").skip(1) {
                let feature = part.split('"').next().unwrap_or("");
                if !crate::SUITE_FEATURES.contains(&feature) {
                    gated.push(format!("{}:{n}: {feature}", file.display()));
                }
            }
        }
    }
    assert!(
        gated.is_empty(),
        "gated on features the guard does not name: {gated:#?}"
    );
}

/// DECISIONS.md's index by topic names every ADR heading exactly once, with
/// its number and title as the heading has them (a run of unassigned
/// numbers, `## ADR-0068 to ADR-0079: Not assigned`, counts as each of its
/// numbers): an ADR added without its line, or retitled, fails here.
#[test]
fn the_decisions_index_lists_every_adr_once() {
    let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/DECISIONS.md"))
        .expect("docs/DECISIONS.md");
    let (_, index) = text
        .split_once("\n## Index by topic\n")
        .expect("DECISIONS.md has an index by topic");
    let index = index.split("\n## ").next().unwrap_or("");
    // The index's lines: `- ADR-0001: Title` and, after the title, ` — `
    // and the markers.
    let mut listed: Vec<(u32, String)> = Vec::new();
    for rest in index.lines().filter_map(|l| l.strip_prefix("- ADR-")) {
        let (number, title) = rest.split_once(": ").unwrap_or((rest, ""));
        let title = title.split(" — ").next().unwrap_or("");
        let number = number
            .parse()
            .unwrap_or_else(|_| panic!("an index line without its number: - ADR-{rest}"));
        listed.push((number, title.to_string()));
    }
    let mut headings: Vec<(u32, String)> = Vec::new();
    for rest in text.lines().filter_map(|l| l.strip_prefix("## ADR-")) {
        let (head, title) = rest.split_once(": ").unwrap_or((rest, ""));
        match head.split_once(" to ADR-") {
            Some((from, to)) => {
                let (from, to): (u32, u32) = (
                    from.parse().expect("an ADR number"),
                    to.parse().expect("an ADR number"),
                );
                headings.extend((from..=to).map(|n| (n, title.to_string())));
            }
            None => headings.push((head.parse().expect("an ADR number"), title.to_string())),
        }
    }
    assert!(headings.len() > 60, "{headings:?}");
    let mut problems = Vec::new();
    for (number, title) in &headings {
        let lines: Vec<&(u32, String)> = listed.iter().filter(|(n, _)| n == number).collect();
        match lines.as_slice() {
            [] => problems.push(format!("ADR-{number:04} is not in the index")),
            [(_, t)] if t != title => problems.push(format!(
                "ADR-{number:04}: the index says {t:?}, the heading {title:?}"
            )),
            [_] => {}
            _ => problems.push(format!(
                "ADR-{number:04} is in the index {} times",
                lines.len()
            )),
        }
    }
    for (number, _) in &listed {
        if !headings.iter().any(|(n, _)| n == number) {
            problems.push(format!(
                "the index lists ADR-{number:04}, which has no heading"
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// The library's module of each source file (`src/a/b.rs` and `src/a/b/mod.rs`
/// are `a::b`; `src/lib.rs` is the crate root, empty), binaries left out:
/// their `crate::` is their own crate.
fn library_modules() -> Vec<(String, String)> {
    sources()
        .into_iter()
        .filter(|(path, _)| !path.starts_with("src/bin/"))
        .map(|(path, text)| {
            let rel = path.trim_start_matches("src/").trim_end_matches(".rs");
            let rel = rel.trim_end_matches("/mod").trim_end_matches("lib");
            (rel.replace('/', "::"), text)
        })
        .collect()
}

/// The paths one `crate::`/`super::` reference names, its `{…}` groups
/// expanded: `a::{b, c::{d}}` gives `a::b` and `a::c::d`. `text` starts just
/// after the prefix; a path ends at the first character that cannot continue it.
fn expand_paths(text: &str) -> Vec<String> {
    fn tree(s: &[u8], i: &mut usize, prefix: &str, out: &mut Vec<String>) {
        let mut path = prefix.to_string();
        loop {
            if *i < s.len() && s[*i] == b'{' {
                *i += 1;
                loop {
                    while *i < s.len() && (s[*i].is_ascii_whitespace() || s[*i] == b',') {
                        *i += 1;
                    }
                    if *i >= s.len() || s[*i] == b'}' {
                        *i += 1;
                        return;
                    }
                    let before = *i;
                    tree(s, i, &path, out);
                    // `as name` and anything else a tree does not read.
                    while *i < s.len() && !matches!(s[*i], b',' | b'}') {
                        *i += 1;
                    }
                    if *i == before {
                        *i += 1;
                    }
                }
            }
            let start = *i;
            while *i < s.len() && (s[*i].is_ascii_alphanumeric() || s[*i] == b'_') {
                *i += 1;
            }
            if *i > start {
                if !path.is_empty() {
                    path.push_str("::");
                }
                path.push_str(std::str::from_utf8(&s[start..*i]).expect("ascii"));
            }
            while *i < s.len() && s[*i].is_ascii_whitespace() {
                *i += 1;
            }
            if s[*i..].starts_with(b"::") {
                *i += 2;
                while *i < s.len() && s[*i].is_ascii_whitespace() {
                    *i += 1;
                }
                continue;
            }
            out.push(path);
            return;
        }
    }
    let mut out = Vec::new();
    tree(text.as_bytes(), &mut 0, "", &mut out);
    out
}

/// The library's import graph: for each module, the modules its
/// `crate::…` and `super::…` paths name (the longest prefix that is a
/// module: a path through a parent to a sibling counts for the sibling, an
/// item the parent holds or re-exports for the parent), itself left out.
/// Comments are not read.
fn import_graph() -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let modules = library_modules();
    let known: std::collections::BTreeSet<String> =
        modules.iter().map(|(m, _)| m.clone()).collect();
    let mut graph = std::collections::BTreeMap::new();
    for (module, text) in &modules {
        let code: String = without_tests(text)
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        let mut names = std::collections::BTreeSet::new();
        let bytes = code.as_bytes();
        for (at, _) in code.match_indices("::") {
            let word_start = code[..at]
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(0, |p| p + 1);
            let word = &code[word_start..at];
            if word_start > 0 && matches!(bytes[word_start - 1], b'$' | b':') {
                continue;
            }
            let mut base: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
            let mut rest = &code[at + 2..];
            match word {
                "crate" => base.clear(),
                "self" => {}
                "super" => {
                    base.pop();
                    while let Some(r) = rest.strip_prefix("super::") {
                        base.pop();
                        rest = r;
                    }
                }
                _ => continue,
            }
            for path in expand_paths(rest) {
                let mut full: Vec<&str> = base.clone();
                full.extend(path.split("::").filter(|s| !s.is_empty()));
                let target = (0..=full.len())
                    .rev()
                    .map(|n| full[..n].join("::"))
                    .find(|m| known.contains(m))
                    .unwrap_or_default();
                if target != *module {
                    names.insert(target);
                }
            }
        }
        graph.insert(module.clone(), names);
    }
    graph
}

/// The graph's cycles: its strongly connected components of more than one
/// module (Tarjan's), each sorted.
fn import_cycles(
    graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        index: std::collections::BTreeMap<&'g str, usize>,
        low: std::collections::BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: std::collections::BTreeSet<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                loop {
                    let w = self.stack.pop().expect("on the stack");
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: Default::default(),
        low: Default::default(),
        stack: Vec::new(),
        on_stack: Default::default(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found.sort();
    walk.found
}

/// The import cycles of today (issue 30). This list may only shrink: a new
/// cycle fails the test below, and so does a listed one that is gone, so the
/// list is kept exact as cycles are broken.
/// Empty since issue 30, item 2: keep it so.
const KNOWN_CYCLES: &[&[&str]] = &[];

/// No import cycle beyond the known ones, and every known one still there.
#[test]
fn no_new_import_cycle() {
    let found = import_cycles(&import_graph());
    let known: Vec<Vec<String>> = KNOWN_CYCLES
        .iter()
        .map(|c| c.iter().map(|m| m.to_string()).collect())
        .collect();
    let new: Vec<_> = found.iter().filter(|c| !known.contains(c)).collect();
    let gone: Vec<_> = known.iter().filter(|c| !found.contains(c)).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "import cycles not in KNOWN_CYCLES (break them): {new:#?}\n\
         KNOWN_CYCLES that no longer exist (take them off the list): {gone:#?}"
    );
}

/// Every ioctl request nd7 hands to libc has the type libc gives it on the
/// target: `libc::Ioctl`, an unsigned long in glibc and an int in musl, whose
/// static builds are the release's Linux archives (ADR-0158). A request
/// typed for glibc alone compiles here and breaks the release build; it did
/// twice (`SIOCSIFFLAGS`, `BTRFS_IOC_FS_INFO`). Taken as written: `as
/// libc::Ioctl` or `as _`, a constant declared `: libc::Ioctl` in the same
/// file, one of libc's seccomp requests (typed so on each target), or a
/// bare number.
#[test]
fn ioctl_requests_are_typed_for_every_libc() {
    let mut calls = 0;
    let mut found = Vec::new();
    for (path, text) in sources() {
        for (at, _) in text.match_indices("libc::ioctl(") {
            calls += 1;
            let args = &text[at + "libc::ioctl(".len()..];
            let request = top_level_args(args).get(1).map(|a| a.trim().to_string());
            let request = request.unwrap_or_default();
            let typed = request.ends_with("as libc::Ioctl")
                || request.ends_with("as _")
                || request.starts_with("libc::SECCOMP_IOCTL_")
                || request
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() || c == 'x' || c == '_')
                || text.contains(&format!("const {request}: libc::Ioctl"));
            if !typed {
                let line = text[..at].lines().count();
                found.push(format!("{path}:{line}: request `{request}`"));
            }
        }
    }
    assert!(calls >= 5, "{calls} ioctl calls");
    assert!(
        found.is_empty(),
        "ioctl requests not typed libc::Ioctl: {found:#?}"
    );
}

/// The arguments of a call whose text starts just after its `(`, split at
/// its own commas (not those inside nested brackets), up to its `)`.
fn top_level_args(text: &str) -> Vec<&str> {
    let (mut depth, mut start, mut args) = (0usize, 0, Vec::new());
    for (i, c) in text.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' if depth == 0 => {
                args.push(&text[start..i]);
                break;
            }
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                args.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    args
}
