//! The platform sandboxes: Seatbelt on macOS, Landlock on Linux. All
//! `#[cfg(target_os)]` for the sandbox lives under this module.
//!
//! So far it says only what each backend can and cannot express; applying
//! the floor comes with `nd7 run`.

/// Whether the floor can let Claude Code save `~/.claude.json` only by
/// having that file live under `~/.claude`.
///
/// Claude Code saves it through `~/.claude.json.tmp.<pid>.<random>` created in
/// the home directory itself. Seatbelt can allow exactly those names with a
/// regex; Landlock allows only beneath directories that exist, so on Linux the
/// file moves into `~/.claude` with a link left in its place, which Claude
/// Code resolves before saving (measured with 2.1.197; see docs/setup.md).
pub const CLAUDE_JSON_MUST_MOVE: bool = cfg!(target_os = "linux");
