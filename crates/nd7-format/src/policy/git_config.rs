//! Which edits of a held git configuration run nothing, so that the keeper
//! may make them for the session (ADR-0134).
//!
//! `.git/config` is held read-only for the session (`deferred`): a key like
//! `core.fsmonitor`, `alias.*`, `include.path` or `url.*.insteadOf` makes the
//! user's next plain `git`, outside the floor, run a program. Yet `git
//! remote add`, `git config user.email` and `git branch -d` write it too.
//! Git writes the whole new file to `config.lock` and renames it onto
//! `config`; the keeper stops that rename and asks [`judge`] whether the
//! new file differs from the old only in keys of [`PLAIN`] (and
//! [`PLAIN_SUBSECTION`]), with values that run nothing. Both files are read
//! with git's own rules ([`parse_config`]), so a key hidden on its
//! section's line, behind a quoting trick or in a continued line is the key
//! git would read; a file nd7 cannot read as git would is refused whole.
//!
//! A key is *changed* when its values, in order, differ between the two
//! files (added, removed, altered or reordered: git takes the last of
//! several). Every changed key must be on the list; anything else, known
//! or not, is refused, and named.

use std::collections::BTreeMap;

use super::deferred::parse_config;

/// Keys with no subsection that run nothing, whatever their value, with why.
pub const PLAIN: &[(&str, &str, &str)] = &[
    ("user", "name", "a name written into commits"),
    ("user", "email", "an address written into commits"),
    ("core", "filemode", "whether the executable bit is tracked"),
    ("core", "logallrefupdates", "whether reflogs are kept"),
    ("core", "ignorecase", "how names are compared"),
    ("core", "precomposeunicode", "how names are compared"),
    ("core", "symlinks", "whether links are checked out as links"),
    ("core", "autocrlf", "line ends on checkout"),
    ("core", "safecrlf", "line ends on checkout"),
    ("core", "eol", "line ends on checkout"),
    ("core", "quotepath", "how names are printed"),
    ("init", "defaultbranch", "a branch name"),
    (
        "pull",
        "rebase",
        "merge or rebase: a boolean or `merges` only",
    ),
    ("pull", "ff", "whether to fast-forward"),
    ("merge", "ff", "whether to fast-forward"),
    ("push", "default", "which branches a push sends"),
    (
        "push",
        "autosetupremote",
        "whether a push sets its upstream",
    ),
    ("fetch", "prune", "whether a fetch prunes"),
    ("rebase", "autostash", "whether a rebase stashes"),
];

/// Keys under a named subsection (`remote "origin"`) that run nothing,
/// with why; a [`Value::Url`] must also be a plain URL ([`plain_url`]).
pub const PLAIN_SUBSECTION: &[(&str, &str, Value, &str)] = &[
    ("remote", "url", Value::Url, "where fetches go"),
    ("remote", "pushurl", Value::Url, "where pushes go"),
    ("remote", "fetch", Value::Any, "a refspec"),
    ("remote", "push", Value::Any, "a refspec"),
    ("remote", "tagopt", Value::Any, "whether tags are fetched"),
    ("remote", "prune", Value::Any, "whether a fetch prunes"),
    ("branch", "remote", Value::Any, "a remote's name"),
    ("branch", "merge", Value::Any, "a branch name"),
    (
        "branch",
        "rebase",
        Value::Any,
        "merge or rebase: a boolean or `merges` only",
    ),
    ("branch", "pushremote", Value::Any, "a remote's name"),
    ("branch", "description", Value::Any, "text"),
    (
        "submodule",
        "url",
        Value::Url,
        "where a submodule is fetched",
    ),
    (
        "submodule",
        "active",
        Value::Any,
        "whether it is checked out",
    ),
];

/// What a listed key's value may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    Any,
    /// A plain URL: see [`plain_url`].
    Url,
}

/// Why an edit is refused: the first key off the list (as
/// `section.key`, the subsection kept), or the file's unreadable line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused(pub String);

/// Whether `new` may replace `old` ([`judge`]): `Ok` when every changed key
/// runs nothing; else the first key (or line) that does not, or may.
pub fn judge(old: &str, new: &str) -> Result<(), Refused> {
    if let Some(c) = new.chars().chain(old.chars()).find(|&c| unwritten(c)) {
        return Err(Refused(format!(
            "a control character (U+{:04X}), which git does not write",
            c as u32
        )));
    }
    let (old, new) = (parse_config(old), parse_config(new));
    for (which, config) in [("the current", &old), ("the new", &new)] {
        if let Some(line) = config.refused_at {
            return Err(Refused(format!(
                "line {line} of {which} file, which nd7 cannot read as git configuration"
            )));
        }
    }
    let (before, after) = (by_key(&old.entries), by_key(&new.entries));
    let keys: std::collections::BTreeSet<_> = before.keys().chain(after.keys()).collect();
    for key in keys {
        let values = after.get(key).cloned().unwrap_or_default();
        if before.get(key).cloned().unwrap_or_default() == values {
            continue;
        }
        if !listed(&key.0, &key.1, &values, &new.entries) {
            return Err(Refused(format!("{}.{}", key.0, key.1)));
        }
    }
    let before = loose_remotes(&old.entries);
    match loose_remotes(&new.entries)
        .into_iter()
        .find(|k| !before.contains(k))
    {
        Some((key, _)) => Err(Refused(key)),
        None => Ok(()),
    }
}

/// Whether git and nd7's reader may read `c` two ways, so that a file with
/// it is refused rather than judged (none of them is one git writes bare).
/// Git keeps a carriage return inside a value where nd7's reader takes it
/// for a space, and a form feed likewise (found comparing the two on
/// random files); git reads a key's name as a C string, so a NUL in a
/// subsection ends the name there: `[remote "pushdefault\0"] fetch = x`
/// is `remote.pushdefault = x` to git, an unlisted key nd7 would have read
/// as a listed refspec (ADR-0138).
fn unwritten(c: char) -> bool {
    c.is_ascii_control() && c != '\t' && c != '\n'
}

/// Keys whose value names a remote.
const NAMES_REMOTE: &[(&str, &str)] = &[
    ("branch", "remote"),
    ("branch", "pushremote"),
    ("remote", "pushdefault"),
];

/// Each `(section.key, value)` of `entries` naming a remote that has no URL
/// in `entries`. Git takes such a name for a URL itself, a local path
/// among them (`/tmp/x.git`, or `x.git` beside where the user runs git),
/// and a push to a local repository runs that repository's hooks
/// (ADR-0138); so a file may name no such remote that the one it replaces
/// did not (a remote's URL taken away counts, as does the `.`, the
/// repository itself, which is the only name allowed without one).
fn loose_remotes(
    entries: &[(String, String, String)],
) -> std::collections::BTreeSet<(String, String)> {
    let mut out = std::collections::BTreeSet::new();
    for (section, key, value) in entries {
        let name = section
            .split_once('.')
            .map_or(section.as_str(), |(name, _)| name);
        let names_remote = NAMES_REMOTE.iter().any(|(s, k)| *s == name && *k == key)
            && (name == "branch") == section.contains('.');
        if names_remote && value != "." && !has_url(entries, value) {
            out.insert((format!("{section}.{key}"), value.clone()));
        }
    }
    out
}

/// Whether `entries` give the remote `name` a URL: git takes every
/// `remote.<name>.url` after the last empty one, which empties the list,
/// and ignores a remote whose name starts with `/` ("config remote
/// shorthand cannot begin with '/'"), so that name stays a path.
fn has_url(entries: &[(String, String, String)], name: &str) -> bool {
    if name.starts_with('/') {
        return false;
    }
    let section = format!("remote.{name}");
    let urls: Vec<&str> = entries
        .iter()
        .filter(|(s, k, _)| *s == section && k == "url")
        .map(|(_, _, v)| v.as_str())
        .collect();
    let after = urls.iter().rposition(|v| v.is_empty()).map_or(0, |i| i + 1);
    after < urls.len()
}

/// Each `(section, key)`'s values, in the file's order.
fn by_key(entries: &[(String, String, String)]) -> BTreeMap<(String, String), Vec<&str>> {
    let mut out: BTreeMap<(String, String), Vec<&str>> = BTreeMap::new();
    for (section, key, value) in entries {
        out.entry((section.clone(), key.clone()))
            .or_default()
            .push(value);
    }
    out
}

/// Whether `section.key` is on the lists with every one of `values`
/// allowed; `entries` (the new file's) for the rewrites a URL would meet.
fn listed(section: &str, key: &str, values: &[&str], entries: &[(String, String, String)]) -> bool {
    if key == "rebase" && !values.iter().all(|v| plain_rebase(v)) {
        return false;
    }
    if PLAIN.iter().any(|(s, k, _)| *s == section && *k == key) {
        return true;
    }
    let Some((name, sub)) = section.split_once('.') else {
        return false;
    };
    if sub.is_empty() {
        return false;
    }
    let Some((_, _, kind, _)) = PLAIN_SUBSECTION
        .iter()
        .find(|(s, k, _, _)| *s == name && *k == key)
    else {
        return false;
    };
    match kind {
        Value::Any => true,
        Value::Url => values
            .iter()
            .all(|v| plain_url(v) && !rewritten(v, entries)),
    }
}

/// Whether `pull.rebase` or `branch.<name>.rebase` is `value` without
/// running anything: a boolean or `merges`, never `interactive` (`i`),
/// which opens an editor at the user's next `git pull`.
fn plain_rebase(value: &str) -> bool {
    let plain = [
        "true", "false", "yes", "no", "on", "off", "1", "0", "merges", "m",
    ];
    plain.contains(&value.to_ascii_lowercase().as_str())
}

/// Whether a `url.<base>.insteadOf` or `pushInsteadOf` of `entries` would
/// rewrite `url` into something else, which might not be plain.
fn rewritten(url: &str, entries: &[(String, String, String)]) -> bool {
    entries.iter().any(|(section, key, value)| {
        section.starts_with("url.")
            && (key == "insteadof" || key == "pushinsteadof")
            && url.starts_with(value.as_str())
    })
}

/// Whether `url` names a remote git reaches with its own transports and
/// nothing else: `https://`, `http://`, `ssh://`, `git://` or the scp-like
/// `user@host:path`, with no host or user that starts with `-` (an
/// option to `ssh`) and nothing outside printable ASCII. Refused:
/// `<helper>::<address>` (`ext::` runs a command; any other helper is a
/// program `git-remote-<helper>` looked up on `PATH`), `fd::`, local paths
/// and `file://` (the other repository's own configuration and hooks are
/// then the ones that count), and anything else.
pub fn plain_url(url: &str) -> bool {
    if url.contains("::") || !url.bytes().all(|b| b.is_ascii_graphic()) {
        return false;
    }
    let lower = url.to_ascii_lowercase();
    let schemes = [
        "https://",
        "http://",
        "ssh://",
        "git+ssh://",
        "ssh+git://",
        "git://",
    ];
    if let Some(scheme) = schemes.iter().find(|s| lower.starts_with(**s)) {
        let rest = &url[scheme.len()..];
        let authority = rest.split('/').next().unwrap_or("");
        return plain_authority(authority);
    }
    // scp-like: `[user@]host:path`, with no slash before the colon; any
    // other scheme (`file://`) is not.
    if lower.contains("://") {
        return false;
    }
    let Some((authority, path)) = url.split_once(':') else {
        return false;
    };
    !authority.contains('/') && !path.is_empty() && plain_authority(authority)
}

/// `[user@]host[:port]`, neither part empty nor starting with `-`.
fn plain_authority(authority: &str) -> bool {
    let host = match authority.rsplit_once('@') {
        Some((user, host)) => {
            if user.is_empty() || user.starts_with('-') {
                return false;
            }
            host
        }
        None => authority,
    };
    !host.is_empty()
        && !host.starts_with('-')
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_[]:".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    const INIT: &str = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n";

    fn with(extra: &str) -> String {
        format!("{INIT}{extra}")
    }

    fn refused(new: &str) -> String {
        match judge(INIT, new) {
            Err(Refused(why)) => why,
            Ok(()) => panic!("passed: {new}"),
        }
    }

    /// What `git config user.email`, `git remote add` and `git branch
    /// --set-upstream-to` write, and what `git branch -d` and `git remote
    /// remove` take away, pass.
    #[test]
    fn everyday_edits_pass() {
        let remote = "[remote \"origin\"]\n\turl = https://example.com/x.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n";
        let branch = "[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n";
        assert_eq!(judge(INIT, INIT), Ok(()));
        assert_eq!(judge(INIT, &with("[user]\n\temail = x@y\n")), Ok(()));
        let rebase = "[pull]\n\trebase = true\n[branch \"b\"]\n\trebase = merges\n";
        assert_eq!(judge(INIT, &with(rebase)), Ok(()));
        assert_eq!(judge(INIT, &with(remote)), Ok(()));
        assert_eq!(
            judge(&with(remote), &with(&format!("{remote}{branch}"))),
            Ok(())
        );
        assert_eq!(judge(&with(branch), INIT), Ok(()));
        for url in [
            "git@github.com:o/r.git",
            "ssh://git@host:22/r",
            "http://h/r",
            "git://h/r",
            "HTTPS://H/R",
            "h:r",
        ] {
            let text = with(&format!("[remote \"o\"]\n\turl = {url}\n"));
            assert_eq!(judge(INIT, &text), Ok(()), "{url}");
        }
    }

    /// Every key that runs something, or is not known, is refused and
    /// named, however it is spelt: another case, on its section's line, in
    /// the old `[section.sub]` form, continued over lines, quoted in parts.
    #[test]
    fn keys_that_run_something_are_refused_however_spelt() {
        let cases = [
            ("[core]\n\tfsmonitor = /tmp/x\n", "core.fsmonitor"),
            ("[Core]\n\tFsMonitor = /tmp/x\n", "core.fsmonitor"),
            ("[core]fsmonitor=/tmp/x\n", "core.fsmonitor"),
            ("[core] hooksPath = /tmp\n", "core.hookspath"),
            ("[alias]\n\tst = !sh\n", "alias.st"),
            ("[include]\n\tpath = /tmp/x\n", "include.path"),
            (
                "[includeIf \"gitdir:/\"]\n\tpath = /tmp/x\n",
                "includeif.gitdir:/.path",
            ),
            (
                "[url \"ext::sh -c x\"]\n\tinsteadOf = https://\n",
                "url.ext::sh -c x.insteadof",
            ),
            (
                "[remote \"o\"]\n\tuploadpack = /tmp/x\n",
                "remote.o.uploadpack",
            ),
            ("[remote \"o\"]\n\tvcs = x\n", "remote.o.vcs"),
            ("[remote.o]\n\tuploadpack = x\n", "remote.o.uploadpack"),
            ("[core]\n\tpager = \\\nless\n", "core.pager"),
            (
                "[core]\n\tssh\\\n",
                "line 7 of the new file, which nd7 cannot read as git configuration",
            ),
            (
                "[protocol \"ext\"]\n\tallow = always\n",
                "protocol.ext.allow",
            ),
            ("[credential]\n\thelper = !x\n", "credential.helper"),
            ("[filter \"f\"]\n\tclean = x\n", "filter.f.clean"),
            (
                "[branch \"b\"]\n\tmergeOptions = -s x\n",
                "branch.b.mergeoptions",
            ),
            ("[submodule \"s\"]\n\tupdate = !x\n", "submodule.s.update"),
            ("[core]\n\tworktree = /\n", "core.worktree"),
            ("[user]\n\tsigningkey = x\n", "user.signingkey"),
            ("[remote]\n\turl = https://h/r\n", "remote.url"),
            ("[something]\n\tnew = 1\n", "something.new"),
            ("[pull]\n\trebase = interactive\n", "pull.rebase"),
            ("[branch \"b\"]\n\trebase = i\n", "branch.b.rebase"),
        ];
        for (extra, key) in cases {
            assert_eq!(refused(&with(extra)), key, "{extra}");
        }
        // Taken away, reordered or altered counts as changed as well.
        let two = "[core]\n\tpager = a\n[core]\n\tpager = b\n";
        assert_eq!(
            judge(
                &with(two),
                &with("[core]\n\tpager = b\n[core]\n\tpager = a\n")
            )
            .expect_err("reordered")
            .0,
            "core.pager"
        );
        assert_eq!(
            judge(&with("[core]\n\thooksPath = h\n"), INIT)
                .expect_err("removed")
                .0,
            "core.hookspath"
        );
        // A key already there and left alone does not stop an edit.
        let held = with("[alias]\n\tst = status\n");
        assert_eq!(judge(&held, &format!("{held}[user]\n\tname = n\n")), Ok(()));
        // A quote escaped inside a subsection does not end it: what looks
        // like `[core]` on the next line is inside a name git refuses.
        let trick = with("[branch \"x\\\"]\n[core]\n\tfsmonitor = y\"]\n\tremote = o\n");
        assert!(refused(&trick).contains("of the new file"), "{trick}");
        // A listed key on its section's line is read as git reads it.
        let o = "[remote \"o\"]\n\turl = https://h/r\n";
        assert_eq!(
            judge(INIT, &with(&format!("{o}[branch \"x\"] remote = o\n"))),
            Ok(())
        );
        assert_eq!(
            refused(&with("[branch \"x\"] remote = o\n\tvcs = y\n")),
            "branch.x.vcs"
        );
        assert!(refused(&with("[user]\n\tname = a\rb\n")).contains("U+000D"));
        // A file nd7 cannot read, old or new, is refused whole.
        assert!(refused(&with("[core\n")).contains("of the new file"));
        assert!(
            judge("garbage!", INIT)
                .expect_err("old")
                .0
                .contains("current")
        );
    }

    /// A remote named by a branch (or `remote.pushDefault`) must have a
    /// URL in the new file, or be `.`: git takes any other name for a URL,
    /// a local path among them, whose hooks a push runs (ADR-0138). A
    /// NUL, which ends a key's name for git, is refused.
    #[test]
    fn remotes_named_without_a_url_are_refused() {
        let origin = "[remote \"origin\"]\n\turl = https://h/r\n";
        for (extra, key) in [
            (
                "[branch \"main\"]\n\tpushRemote = /tmp/evil.git\n",
                "branch.main.pushremote",
            ),
            (
                "[branch \"main\"]\n\tremote = evil.git\n",
                "branch.main.remote",
            ),
            ("[branch \"main\"]\n\tremote = ./x\n", "branch.main.remote"),
        ] {
            assert_eq!(refused(&with(extra)), key, "{extra}");
        }
        let named = with(&format!("{origin}[branch \"main\"]\n\tremote = origin\n"));
        assert_eq!(judge(INIT, &named), Ok(()));
        assert_eq!(
            judge(INIT, &with("[branch \"main\"]\n\tremote = .\n")),
            Ok(())
        );
        // Git ignores a remote whose name starts with `/`.
        let slash = with("[remote \"/tmp/e.git\"]\n\turl = https://h/r\n");
        let named_slash = format!("{slash}[branch \"m\"]\n\tpushRemote = /tmp/e.git\n");
        assert_eq!(
            judge(&slash, &named_slash).expect_err("slash").0,
            "branch.m.pushremote"
        );
        // An empty URL empties the remote's list.
        let emptied = with("[remote \"x\"]\n\turl = https://h/r\n\turl =\n");
        let named_x = format!("{emptied}[branch \"m\"]\n\tremote = x\n");
        assert_eq!(
            judge(&emptied, &named_x).expect_err("emptied").0,
            "branch.m.remote"
        );
        // A URL taken away from a remote a branch names.
        let bare = with("[branch \"main\"]\n\tremote = origin\n");
        assert_eq!(
            judge(&named, &bare).expect_err("unnamed").0,
            "branch.main.remote"
        );
        // Taken away from one `remote.pushDefault` names, which is kept.
        let pushdefault = "[remote]\n\tpushDefault = origin\n";
        let old = with(&format!("{origin}{pushdefault}"));
        let new = with(pushdefault);
        assert_eq!(
            judge(&old, &new).expect_err("unnamed").0,
            "remote.pushdefault"
        );
        // The user's own loose name, left alone, does not stop an edit.
        assert_eq!(judge(&bare, &format!("{bare}[user]\n\tname = n\n")), Ok(()));
        let nul = with("[remote \"pushdefault\0\"]\n\tfetch = /tmp/evil.git\n");
        assert!(refused(&nul).contains("U+0000"), "{nul}");
        assert!(refused(&with("[user]\n\tname = a\x0cb\n")).contains("U+000C"));
    }

    /// A URL that would run something, or that nd7 cannot tell runs
    /// nothing, is refused: a helper, a local path, an option for `ssh`,
    /// a control character, or one an `insteadOf` of the file rewrites.
    #[test]
    fn urls_that_may_run_something_are_refused() {
        for url in [
            "ext::sh -c touch% /tmp/x",
            "\"ext\"::sh",
            "fd::3",
            "evil::https://h/r",
            "/tmp/repo",
            "../repo",
            "file:///tmp/repo",
            "ssh://-oProxyCommand=x/r",
            "ssh://-o@h/r",
            "-oProxyCommand=x:r",
            "h/x:r",
            "https://h/r\\nx",
        ] {
            let text = with(&format!("[remote \"o\"]\n\turl = {url}\n"));
            assert_eq!(refused(&text), "remote.o.url", "{url}");
            let text = with(&format!("[submodule \"s\"]\n\turl = {url}\n"));
            assert_eq!(refused(&text), "submodule.s.url", "{url}");
        }
        let rewrite = "[url \"ext::sh -c x\"]\n\tinsteadOf = https://h\n";
        let old = with(rewrite);
        let new = format!("{old}[remote \"o\"]\n\turl = https://h/r\n");
        assert_eq!(judge(&old, &new).expect_err("rewritten").0, "remote.o.url");
        assert!(plain_url("git@h:r") && !plain_url("") && !plain_url("h:"));
    }
}
