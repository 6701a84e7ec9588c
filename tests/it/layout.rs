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

/// The source without its `#[cfg(test)] mod tests` (tests may serve HTTP
/// or rename files as they like).
fn without_tests(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests")
        .map_or(text, |at| &text[..at])
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
