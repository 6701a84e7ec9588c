//! What ran, read back for a person (issue 32): the execs of one `ran` entry
//! (`effect:nd7`, ADR-0111) grouped by the command through the exit they ran
//! under, each group drawn as a collapsed tree of programs (`bash → make →
//! cc ×6`), and every exec as a line of its own for `nd7 show --effects`.
//! Pure: a `ran` body in, text out; the text is the agent's (paths and
//! arguments), so every view escapes it.

use serde_json::Value;

/// A tree drawn longer than this many characters is cut (`--effects` lists
/// every exec whole).
const TREE_LEN: usize = 400;

/// The execs of one `ran` entry under one command, or under none (the
/// agent's own processes).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Group {
    /// The seq of the command's `exec` entry; `None` for the agent's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<u64>,
    /// Execs a process the command left behind ran after the command had
    /// ended (its `exec_end`): not what the call ran (ADR-0144).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub after: bool,
    pub execs: usize,
    /// The collapsed tree of programs.
    pub tree: String,
}

/// One exec of a `ran` body, as read.
struct Exec {
    pid: u64,
    ppid: u64,
    name: String,
    command: Option<u64>,
    /// Seen after its command's `exec_end`.
    after: bool,
}

fn execs(body: &Value, ended: &dyn Fn(u64) -> Option<u64>) -> Vec<Exec> {
    let exes = body["exes"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let all = body["execs"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    all.iter()
        .map(|x| {
            let command = x["command"].as_u64();
            let t = x["t"].as_u64().unwrap_or(0);
            Exec {
                pid: x["pid"].as_u64().unwrap_or(0),
                ppid: x["ppid"].as_u64().unwrap_or(0),
                name: name(exes, x),
                command,
                after: command.and_then(ended).is_some_and(|end| t > end),
            }
        })
        .collect()
}

/// The program's name: its executable's file name, or the first argument's
/// with `?` when the image could not be read. A name holding what the tree
/// is drawn with (an arrow, a count, a comma, brackets, a space, a
/// question mark, a quote) is quoted, so that one program cannot pass for
/// several, or for a tree of them (ADR-0144).
fn name(exes: &[Value], x: &Value) -> String {
    let base = |p: &str| quoted(p.rsplit('/').next().unwrap_or(p));
    match x["exe"]
        .as_u64()
        .and_then(|i| exes.get(usize::try_from(i).ok()?))
        .and_then(|e| e[0].as_str())
    {
        Some(path) => base(path),
        None => format!("{}?", base(x["argv"][0].as_str().unwrap_or(""))),
    }
}

/// `name` as it is, or in double quotes (`"` and `\` escaped) when it
/// holds a character the tree is drawn with, or is empty.
pub(crate) fn quoted(name: &str) -> String {
    let drawn = |c: char| c.is_whitespace() || "→×(),?…\"\\".contains(c);
    if !name.is_empty() && !name.chars().any(drawn) {
        return name.to_string();
    }
    format!("\"{}\"", name.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The execs grouped by command, in the order each command first appears,
/// the agent's own last. `ended` gives when a command's `exec_end` was
/// written (by its `exec` seq), where the reader has seen it: the execs a
/// command's process ran after that are a group of their own (`after`).
pub fn groups(body: &Value, ended: &dyn Fn(u64) -> Option<u64>) -> Vec<Group> {
    let all = execs(body, ended);
    let mut keys: Vec<(Option<u64>, bool)> = Vec::new();
    for x in &all {
        let key = (x.command, x.after);
        if x.command.is_some() && !keys.contains(&key) {
            keys.push(key);
        }
    }
    if all.iter().any(|x| x.command.is_none()) {
        keys.push((None, false));
    }
    keys.into_iter()
        .map(|(command, after)| {
            let members: Vec<&Exec> = all
                .iter()
                .filter(|x| x.command == command && x.after == after)
                .collect();
            Group {
                command,
                after,
                execs: members.len(),
                tree: cut_tree(tree(&members)),
            }
        })
        .collect()
}

/// A tree cut at [`TREE_LEN`] bytes, the cut said: a tree that looks whole
/// must be whole, or a program drawn last would go unseen (ADR-0144).
fn cut_tree(tree: String) -> String {
    if tree.len() <= TREE_LEN {
        return tree;
    }
    format!(
        "{}… (cut; `nd7 show --effects` lists every exec)",
        super::entry::cut(&tree, TREE_LEN)
    )
}

/// The execs drawn as a tree: a process's later exec (the same pid) and
/// the execs of processes it forked are its children; equal subtrees under
/// one parent are drawn once with their count.
fn tree(members: &[&Exec]) -> String {
    let mut parent: Vec<Option<usize>> = Vec::with_capacity(members.len());
    for (i, x) in members.iter().enumerate() {
        let earlier = &members[..i];
        let p = earlier
            .iter()
            .rposition(|e| e.pid == x.pid)
            .or_else(|| earlier.iter().rposition(|e| e.pid == x.ppid));
        parent.push(p);
    }
    let roots: Vec<usize> = (0..members.len())
        .filter(|&i| parent[i].is_none())
        .collect();
    collapse(roots.iter().map(|&r| draw(r, members, &parent)).collect())
}

fn draw(node: usize, members: &[&Exec], parent: &[Option<usize>]) -> String {
    let kids: Vec<String> = (0..members.len())
        .filter(|&i| parent[i] == Some(node))
        .map(|i| draw(i, members, parent))
        .collect();
    let name = &members[node].name;
    if kids.is_empty() {
        return name.clone();
    }
    let kids = collapse(kids);
    let mut drawn = if kids.contains(", ") {
        format!("{name} → ({kids})")
    } else {
        format!("{name} → {kids}")
    };
    // Only the first TREE_LEN bytes are shown: a subtree is kept to twice
    // that, so a deep chain of long names is not copied whole at every
    // level (ADR-0144). What is cut away ends in the node's own number, so
    // two subtrees that differ only past the cut are never counted as one.
    if drawn.len() > 2 * TREE_LEN {
        drawn.truncate(super::entry::cut(&drawn, 2 * TREE_LEN).len());
        drawn.push_str(&format!("…#{node}"));
    }
    drawn
}

/// Siblings, equal ones once with their count, in first-seen order.
fn collapse(drawn: Vec<String>) -> String {
    let mut counted: Vec<(String, usize)> = Vec::new();
    for d in drawn {
        match counted.iter_mut().find(|(s, _)| *s == d) {
            Some((_, n)) => *n += 1,
            None => counted.push((d, 1)),
        }
    }
    counted
        .into_iter()
        .map(|(s, n)| match n {
            1 => s,
            _ if s.contains(' ') => format!("({s}) ×{n}"),
            _ => format!("{s} ×{n}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every exec of a `ran` body, one line each: pid and its forker, the
/// executable (or that it was not confirmed), the arguments, and the
/// command it ran under.
pub fn each(body: &Value, ended: &dyn Fn(u64) -> Option<u64>) -> Vec<String> {
    let exes = body["exes"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let all = body["execs"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    all.iter()
        .map(|x| {
            let exe = x["exe"]
                .as_u64()
                .and_then(|i| exes.get(usize::try_from(i).ok()?))
                .and_then(|e| e[0].as_str());
            let argv: Vec<String> = x["argv"]
                .as_array()
                .map(|a| a.iter().map(|s| word(s.as_str().unwrap_or(""))).collect())
                .unwrap_or_default();
            let t = x["t"].as_u64().unwrap_or(0);
            let under = match x["command"].as_u64() {
                Some(seq) if ended(seq).is_some_and(|end| t > end) => {
                    format!("  [no call: after the command of entry {seq} had ended]")
                }
                Some(seq) => format!("  [command of entry {seq}]"),
                None => "  [no call]".to_string(),
            };
            format!(
                "pid {} (from {}) {}: {}{}{under}",
                x["pid"].as_u64().unwrap_or(0),
                x["ppid"].as_u64().unwrap_or(0),
                exe.map_or_else(|| "(not confirmed)".to_string(), word),
                argv.join(" "),
                if x["cut"] == true { " …(cut)" } else { "" },
            )
        })
        .collect()
}

/// A path or an argument as one word: as it is when it holds only
/// letters, digits and `-_./:=,+@%^~#`, else single-quoted as a shell
/// would read it, so that argument boundaries show and no argument passes
/// for the `[command of entry N]` that ends the line (ADR-0144).
fn word(text: &str) -> String {
    crate::shell_prefix::shell_word(text, |c| c.is_alphanumeric() || "-_./:=,+@%^~#".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body() -> Value {
        json!({
            "exes": [["/usr/bin/bash", "1:2", "a"], ["/usr/bin/make", "1:3", "b"], ["/usr/bin/cc", "1:4", "c"], ["/usr/bin/rg", "1:5", "d"]],
            "execs": [
                {"pid": 10, "ppid": 1, "exe": 0, "argv": ["bash", "-c", "make"], "command": 7},
                {"pid": 11, "ppid": 10, "exe": 1, "argv": ["make"], "command": 7},
                {"pid": 12, "ppid": 11, "exe": 2, "argv": ["cc", "-c", "a.c"], "command": 7},
                {"pid": 13, "ppid": 11, "exe": 2, "argv": ["cc", "-c", "b.c"], "command": 7},
                {"pid": 14, "ppid": 11, "exe": 2, "argv": ["cc", "-o", "p"], "command": 7},
                {"pid": 20, "ppid": 2, "exe": 3, "argv": ["rg", "x"]},
                {"pid": 21, "ppid": 10, "confirmed": false, "argv": ["/tmp/gone", "\u{1b}[2J"], "command": 7},
            ]
        })
    }

    #[test]
    fn each_command_is_a_collapsed_tree_and_the_agents_own_come_last() {
        assert_eq!(
            groups(&body(), &|_| None),
            vec![
                Group {
                    command: Some(7),
                    after: false,
                    execs: 6,
                    tree: "bash → (make → cc ×3, gone?)".into()
                },
                Group {
                    command: None,
                    after: false,
                    execs: 1,
                    tree: "rg".into()
                },
            ]
        );
    }

    #[test]
    fn a_process_that_execs_again_is_drawn_under_its_first_program() {
        let body = json!({
            "exes": [["/usr/bin/bash", "1:2", "a"], ["/usr/bin/true", "1:3", "b"]],
            "execs": [
                {"pid": 10, "ppid": 1, "exe": 0, "argv": ["bash"], "command": 3},
                {"pid": 10, "ppid": 1, "exe": 1, "argv": ["true"], "command": 3},
                {"pid": 30, "ppid": 1, "exe": 0, "argv": ["bash"], "command": 4},
                {"pid": 31, "ppid": 30, "exe": 0, "argv": ["bash"], "command": 4},
                {"pid": 32, "ppid": 31, "exe": 1, "argv": ["true"], "command": 4},
                {"pid": 33, "ppid": 30, "exe": 0, "argv": ["bash"], "command": 4},
                {"pid": 34, "ppid": 33, "exe": 1, "argv": ["true"], "command": 4},
            ]
        });
        let trees: Vec<String> = groups(&body, &|_| None)
            .into_iter()
            .map(|g| g.tree)
            .collect();
        assert_eq!(trees, ["bash → true", "bash → (bash → true) ×2"]);
    }

    /// What a command's process ran after the command's `exec_end` is a
    /// group of its own, marked `after`; a long tree says it is cut; a name
    /// drawn with the tree's own marks is quoted (ADR-0144).
    #[test]
    fn late_execs_long_trees_and_tree_like_names_are_told_apart() {
        let body = json!({
            "exes": [["/usr/bin/bash", "1:2", "a"], ["/tmp/x → (y, z ×2)", "1:3", "b"], [format!("/t/{}", "n".repeat(300)), "1:4", "c"], ["/usr/bin/id", "1:5", "d"], [format!("/t/{}", "m".repeat(300)), "1:6", "e"]],
            "execs": [
                {"pid": 10, "ppid": 1, "t": 5, "exe": 0, "argv": ["bash"], "command": 3},
                {"pid": 11, "ppid": 10, "t": 6, "exe": 1, "argv": ["x"], "command": 3},
                {"pid": 12, "ppid": 10, "t": 50, "exe": 3, "argv": ["id"], "command": 3},
                {"pid": 20, "ppid": 1, "t": 60, "exe": 0, "argv": ["bash"], "command": 4},
                {"pid": 21, "ppid": 20, "t": 61, "exe": 2, "argv": ["n"], "command": 4},
                {"pid": 22, "ppid": 20, "t": 62, "exe": 4, "argv": ["n2"], "command": 4},
                {"pid": 23, "ppid": 20, "t": 63, "exe": 3, "argv": ["id"], "command": 4},
            ]
        });
        let ended = |seq: u64| (seq == 3).then_some(40);
        let g = groups(&body, &ended);
        assert_eq!(
            g.iter()
                .map(|g| (g.command, g.after, g.execs))
                .collect::<Vec<_>>(),
            [(Some(3), false, 2), (Some(3), true, 1), (Some(4), false, 4)]
        );
        assert_eq!(g[0].tree, r#"bash → ("x → (y, z ×2)")"#);
        assert_eq!(g[1].tree, "id");
        assert!(
            g[2].tree
                .ends_with("… (cut; `nd7 show --effects` lists every exec)"),
            "{}",
            g[2].tree
        );
    }

    /// A chain of long names is drawn cut, and two siblings that differ
    /// only past the cut are not counted as one.
    #[test]
    fn deep_chains_are_drawn_cut_and_never_merged_past_the_cut() {
        let long =
            |c: &str, i: usize| json!([format!("/x/{}{i}", c.repeat(250)), format!("1:{i}"), null]);
        let mut exes: Vec<Value> = (0..6).map(|i| long("a", i)).collect();
        exes.push(long("b", 6));
        exes.push(long("c", 7));
        // 0 → 1 → 2 and 0 → 3 → 4: equal heads, then 2 and 4 (one name
        // each, "b…" and "c…", far past the cut).
        let execs = json!([
            {"pid": 10, "ppid": 1, "exe": 0, "argv": ["x"], "command": 3},
            {"pid": 11, "ppid": 10, "exe": 1, "argv": ["x"], "command": 3},
            {"pid": 12, "ppid": 11, "exe": 2, "argv": ["x"], "command": 3},
            {"pid": 13, "ppid": 12, "exe": 6, "argv": ["x"], "command": 3},
            {"pid": 14, "ppid": 10, "exe": 1, "argv": ["x"], "command": 3},
            {"pid": 15, "ppid": 14, "exe": 2, "argv": ["x"], "command": 3},
            {"pid": 16, "ppid": 15, "exe": 7, "argv": ["x"], "command": 3},
        ]);
        let g = groups(&json!({"exes": exes, "execs": execs}), &|_| None);
        assert!(!g[0].tree.contains('×'), "{}", g[0].tree);
        assert!(g[0].tree.len() < 2 * TREE_LEN, "{}", g[0].tree);
    }

    #[test]
    fn every_exec_is_a_line_with_its_arguments() {
        let lines = each(&body(), &|_| None);
        assert_eq!(lines.len(), 7);
        assert_eq!(
            lines[2],
            "pid 12 (from 11) /usr/bin/cc: cc -c a.c  [command of entry 7]"
        );
        assert_eq!(lines[5], "pid 20 (from 2) /usr/bin/rg: rg x  [no call]");
        assert!(lines[6].starts_with("pid 21 (from 10) (not confirmed): /tmp/gone"));
    }
}
