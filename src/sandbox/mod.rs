//! The platform sandboxes: Seatbelt on macOS, Landlock on Linux. All
//! `#[cfg(target_os)]` for the sandbox lives under this module.
//!
//! So far: the Linux backend applies Landlock rules to the calling process
//! (`linux`), and each backend says what it cannot express. `nd7 run` and the
//! one exit, `nd7-exec`, are still to come.

#[cfg(target_os = "linux")]
pub mod linux;

/// Whether the floor can let Claude Code save `~/.claude.json` only by
/// having that file live under `~/.claude`.
///
/// Claude Code saves it through `~/.claude.json.tmp.<pid>.<random>` created in
/// the home directory itself. Seatbelt can allow exactly those names with a
/// regex; Landlock allows only beneath directories that exist, so on Linux the
/// file moves into `~/.claude` with a link left in its place, which Claude
/// Code resolves before saving (measured with 2.1.197; see docs/setup.md).
pub const CLAUDE_JSON_MUST_MOVE: bool = cfg!(target_os = "linux");
