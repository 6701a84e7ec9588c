//! The credential stores no sandboxed process may read: nd7's list, with
//! why each entry is on it, and the user's changes to it from
//! `~/.nd7/secrets`. Pure: the file's text comes in, paths go out.
//!
//! The file lives under `~/.nd7` because nothing there is ever writable
//! from inside a session (nor readable): an agent cannot take a store off
//! the list for the next session. `nd7 run` reads it once, at start.
//!
//! # The file
//!
//! One path a line; `#` starts a comment, blank lines are skipped.
//!
//! ```text
//! # more places no agent may read
//! ~/.config/mytool
//! /srv/keys
//! # take one of nd7's own entries off the list
//! -~/.npmrc
//! ```
//!
//! A path starts with `~/` (under the home directory) or `/`; `-` before it
//! takes that entry off nd7's list. `.` and `..` components are refused, and
//! so are paths that would hide the home directory itself or one above it.

use std::path::{Component, Path, PathBuf};

/// nd7's list, home-relative, each with the reason it is on it. Files and
/// directories alike: a directory is unreadable with everything in it.
pub const CREDENTIAL_STORES: &[(&str, &str)] = &[
    (".ssh", "SSH private keys, and the hosts they open"),
    (".aws", "AWS access keys and SSO tokens"),
    (".gnupg", "GnuPG private keys: signing, decryption, pass"),
    (
        ".password-store",
        "pass: every password it keeps (encrypted to GnuPG, but with the file names)",
    ),
    (
        ".local/share/keyrings",
        "GNOME Keyring's files: saved passwords and application secrets",
    ),
    (
        ".local/share/kwalletd",
        "KDE Wallet's files: saved passwords",
    ),
    (".config/gh", "the GitHub CLI's OAuth token (hosts.yml)"),
    (".config/hub", "hub's GitHub token"),
    (".config/glab-cli", "the GitLab CLI's token"),
    (
        ".git-credentials",
        "git's credential store: passwords and tokens in plain text",
    ),
    (
        ".config/git/credentials",
        "git's credential store in its XDG place, plain text",
    ),
    (
        ".netrc",
        "logins for curl, git, ftp and others, in plain text",
    ),
    (".docker/config.json", "Docker registry logins (auths)"),
    (
        ".config/containers/auth.json",
        "Podman, Buildah and Skopeo registry logins",
    ),
    (".kube", "kubeconfig: cluster certificates and tokens"),
    (
        ".config/gcloud",
        "Google Cloud credentials and access tokens",
    ),
    (".azure", "the Azure CLI's tokens"),
    (".pypirc", "PyPI upload tokens"),
    (".npmrc", "npm registry tokens (_authToken)"),
    (".cargo/credentials.toml", "the crates.io publishing token"),
    (
        ".cargo/credentials",
        "the crates.io publishing token (older name)",
    ),
    (".gem/credentials", "the RubyGems API key"),
    (
        ".m2/settings-security.xml",
        "Maven's master password, which decrypts the passwords in settings.xml",
    ),
    (".pgpass", "PostgreSQL passwords, plain text"),
    (".my.cnf", "MySQL and MariaDB client passwords"),
    (
        ".config/rclone",
        "rclone's remotes: cloud storage tokens and keys",
    ),
    (".vault-token", "a HashiCorp Vault token"),
    (
        ".terraform.d/credentials.tfrc.json",
        "Terraform Cloud tokens",
    ),
    (
        ".config/op",
        "the 1Password CLI's configuration and sessions",
    ),
    (
        ".pki",
        "NSS databases: client certificates and their private keys",
    ),
    (
        ".mozilla",
        "Firefox profiles: cookies (logged-in sessions) and saved logins",
    ),
    (
        ".config/google-chrome",
        "Chrome profiles: cookies and saved passwords",
    ),
    (
        ".config/chromium",
        "Chromium profiles: cookies and saved passwords",
    ),
    (
        "Library/Application Support/Google/Chrome",
        "Chrome profiles on macOS: cookies and saved passwords",
    ),
    (
        "Library/Application Support/Firefox",
        "Firefox profiles on macOS: cookies and saved logins",
    ),
    ("Library/Cookies", "macOS's shared cookie store"),
];

/// Where the user's changes to the list live, under the home directory.
pub const FILE: &str = ".nd7/secrets";

/// nd7's list under `home`.
pub fn defaults(home: &Path) -> Vec<PathBuf> {
    CREDENTIAL_STORES
        .iter()
        .map(|(rel, _)| home.join(rel))
        .collect()
}

/// What is wrong with a line of the file.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {text:?}: {why}")]
pub struct SecretsError {
    pub line: usize,
    pub text: String,
    pub why: String,
}

/// The list `defaults` becomes with the file's `text` applied: its paths
/// added, its `-` entries taken off. Every bad line is an error naming it;
/// nothing is half applied.
pub fn apply(defaults: &[PathBuf], text: &str, home: &Path) -> Result<Vec<PathBuf>, SecretsError> {
    let mut list = defaults.to_vec();
    let mut removed = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let err = |why: String| SecretsError {
            line: i + 1,
            text: raw.trim().to_string(),
            why,
        };
        let (remove, written) = match line.strip_prefix('-') {
            Some(rest) => (true, rest.trim()),
            None => (false, line),
        };
        let path = expand(written, home).map_err(|why| err(why.into()))?;
        if home.starts_with(&path) {
            return Err(err(
                "would hide the home directory itself (or one above it)".into(),
            ));
        }
        if remove {
            if !defaults.contains(&path) {
                return Err(err(format!(
                    "{} is not on nd7's list, so it cannot be taken off (nd7's list: docs/sandbox.md)",
                    path.display()
                )));
            }
            removed.push(path);
        } else if !list.contains(&path) {
            list.push(path);
        }
    }
    list.retain(|p| !removed.contains(p));
    Ok(list)
}

/// `~/x` under `home`, or an absolute path, with no `.` or `..` in it.
pub(crate) fn expand(written: &str, home: &Path) -> Result<PathBuf, &'static str> {
    let path = if let Some(rel) = written.strip_prefix("~/") {
        home.join(rel)
    } else if written.starts_with('/') {
        PathBuf::from(written)
    } else {
        return Err("a path must start with ~/ or /");
    };
    if path
        .components()
        .any(|c| matches!(c, Component::CurDir | Component::ParentDir))
    {
        return Err("a path may not hold . or .. components");
    }
    // Trailing slashes and doubled ones name the same path.
    Ok(path.components().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home() -> PathBuf {
        PathBuf::from("/home/u")
    }

    #[test]
    fn the_list_covers_the_stores_the_issue_names() {
        for rel in [
            ".gnupg",
            ".config/gh",
            ".netrc",
            ".git-credentials",
            ".docker/config.json",
            ".kube",
            ".password-store",
            ".local/share/keyrings",
            ".config/gcloud",
            ".azure",
            ".pypirc",
            ".npmrc",
            ".ssh",
            ".aws",
        ] {
            assert!(
                CREDENTIAL_STORES.iter().any(|(r, _)| *r == rel),
                "{rel} is missing"
            );
        }
        for (rel, why) in CREDENTIAL_STORES {
            assert!(!rel.starts_with('/') && !rel.ends_with('/'), "{rel}");
            assert!(!why.is_empty());
        }
    }

    #[test]
    fn lines_add_and_take_off() {
        let d = defaults(&home());
        let text = "# mine\n~/.config/mytool\n/srv/keys/  # trailing slash\n\n-~/.npmrc\n  - ~/.pypirc\n~/.ssh\n";
        let list = apply(&d, text, &home()).expect("applies");
        assert!(list.contains(&PathBuf::from("/home/u/.config/mytool")));
        assert!(list.contains(&PathBuf::from("/srv/keys")));
        assert!(!list.contains(&PathBuf::from("/home/u/.npmrc")));
        assert!(!list.contains(&PathBuf::from("/home/u/.pypirc")));
        assert_eq!(
            list.iter()
                .filter(|p| **p == Path::new("/home/u/.ssh"))
                .count(),
            1
        );
        assert_eq!(list.len(), d.len() + 2 - 2);
    }

    #[test]
    fn bad_lines_are_named() {
        let d = defaults(&home());
        let cases = [
            ("ok/relative", "a path must start with ~/ or /"),
            ("~/a/../b", "a path may not hold . or .. components"),
            (
                "/",
                "would hide the home directory itself (or one above it)",
            ),
            (
                "~/",
                "would hide the home directory itself (or one above it)",
            ),
            (
                "/home",
                "would hide the home directory itself (or one above it)",
            ),
            (
                "-~/.bashrc",
                "/home/u/.bashrc is not on nd7's list, so it cannot be taken off (nd7's list: docs/sandbox.md)",
            ),
        ];
        for (line, why) in cases {
            let text = format!("~/.fine\n{line}\n");
            assert_eq!(
                apply(&d, &text, &home()),
                Err(SecretsError {
                    line: 2,
                    text: line.into(),
                    why: why.into()
                }),
                "{line}"
            );
        }
        let e = apply(&d, "\n\n-~/nope", &home()).expect_err("refused");
        assert_eq!(
            e.to_string(),
            "line 3: \"-~/nope\": /home/u/nope is not on nd7's list, so it cannot be taken off (nd7's list: docs/sandbox.md)"
        );
    }
}
