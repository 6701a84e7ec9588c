//! An account's home directory from `/etc/passwd`, when the name service
//! would answer from that file first.
//!
//! `getpwuid` first asks nscd (and, with `systemd` in `nsswitch.conf`,
//! systemd-userdb) over unix sockets. Inside a session those are other
//! programs' sockets, so every `connect` is a round trip to nd7 run's keeper
//! that is refused; `nd7-exec` would pay it on every command. When
//! `nsswitch.conf` names `files` (or `compat`) first for `passwd`, or there
//! is no `nsswitch.conf` (glibc then reads the file), the file's entry is the
//! answer `getpwuid` would give, so it is read directly. Otherwise, or when
//! the file has no entry for the account, the caller asks `getpwuid`.

use std::path::PathBuf;

/// Whether `nsswitch` (the text of `nsswitch.conf`) makes `passwd` lookups
/// consult the file before anything else.
pub fn files_first(nsswitch: &str) -> bool {
    nsswitch
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .find_map(|l| l.strip_prefix("passwd:"))
        .and_then(|sources| sources.split_whitespace().next())
        .is_none_or(|first| first == "files" || first == "compat")
}

/// The home directory of `uid` in `passwd` (the text of `/etc/passwd`):
/// the first ordinary entry with that uid. NIS lines (`+`, `-`) are skipped.
pub fn home_in(passwd: &str, uid: u32) -> Option<PathBuf> {
    passwd.lines().find_map(|line| {
        if line.starts_with(['+', '-']) {
            return None;
        }
        let fields: Vec<&str> = line.split(':').collect();
        let [_, _, id, _, _, home, ..] = fields.as_slice() else {
            return None;
        };
        (id.parse::<u32>().ok()? == uid && !home.is_empty()).then(|| PathBuf::from(home))
    })
}

/// `uid`'s home from `/etc/passwd`, if the name service would give that.
pub fn home_from_files(uid: u32) -> Option<PathBuf> {
    let nsswitch = std::fs::read_to_string("/etc/nsswitch.conf").unwrap_or_default();
    if !files_first(&nsswitch) {
        return None;
    }
    home_in(&std::fs::read_to_string("/etc/passwd").ok()?, uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_files_first_passwd_line_counts() {
        assert!(files_first("passwd:         files systemd\ngroup: files\n"));
        assert!(files_first("passwd: compat\n"));
        assert!(files_first("# nothing\n"));
        assert!(files_first(""));
        assert!(!files_first("passwd: sss files\n"));
        assert!(!files_first("#passwd: files\npasswd: ldap files\n"));
    }

    #[test]
    fn the_entry_with_the_uid_gives_the_home() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n+nis::::::\nme:x:1000:1000:Me,,,:/home/me:/bin/zsh\nbroken\n";
        assert_eq!(home_in(passwd, 1000), Some(PathBuf::from("/home/me")));
        assert_eq!(home_in(passwd, 0), Some(PathBuf::from("/root")));
        assert_eq!(home_in(passwd, 7), None);
    }
}
