//! Where things live, checked against the source tree: the rules
//! docs/ARCHITECTURE.md states about which module may do what, so a change
//! that breaks one fails here rather than in review.

use std::fs;
use std::path::{Path, PathBuf};

/// Every `.rs` file under `src/`, with its path relative to the crate.
fn sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    walk(&root.join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = fs::read_to_string(&p).expect("read source");
            let rel = p
                .strip_prefix(root)
                .expect("under the crate")
                .to_string_lossy()
                .into_owned();
            (rel, text)
        })
        .collect()
}

/// The source without its `#[cfg(test)] mod tests { … }` (tests may serve
/// HTTP or rename files as they like); braces counted, so code after the
/// tests is kept.
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
                    return format!("{}{}", &text[..start], &text[open + i + 1..]);
                }
            }
            _ => {}
        }
    }
    text[..start].to_string()
}

/// nd7 speaks HTTP through `http_client` alone (ship, admin, self-update);
/// the vault server's own transport is the one other. Guards the split of
/// ship.rs: a module that opened its own connection would show here.
#[test]
fn only_the_http_client_speaks_http() {
    let mut found = Vec::new();
    for (path, text) in sources() {
        if path == "src/http_client.rs" || path.starts_with("src/vault_server/") {
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

/// `kernel` stands below `session` and `sandbox`, and `session` below
/// `sandbox` (ADR-0064): a `crate::sandbox` in run_dir.rs or kernel/, or a
/// `crate::run_dir` in kernel/, brings the cycle back.
#[test]
fn the_session_and_the_kernel_never_reach_up_into_the_sandbox() {
    let mut found = Vec::new();
    let mut checked = 0;
    for (path, text) in sources() {
        let kernel = path.starts_with("src/kernel/");
        let above: &[&str] = if kernel {
            &["sandbox", "session"]
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
            if line.contains("target_os") {
                found.push(format!("{path}:{n}: {}", line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}
