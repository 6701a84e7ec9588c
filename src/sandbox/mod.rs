//! The platform sandboxes: Seatbelt on macOS, Landlock on Linux. All
//! `#[cfg(target_os)]` for the sandbox lives under this module.
//!
//! So far: the Linux backend applies Landlock rules to the calling process
//! (`linux`); the macOS backend applies Seatbelt profiles to the calling
//! process or a child, walks the parent chain, and becomes the confined shell
//! (`macos`). Each backend says what it cannot express. `nd7 run` and the one
//! exit, `nd7-exec`, are still to come.

#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "macos")]
pub mod macos;

/// Whether the floor can let Claude Code save `~/.claude.json` only by
/// having that file live under `~/.claude`.
///
/// Claude Code saves it through `~/.claude.json.tmp.<pid>.<random>` created in
/// the home directory itself. Seatbelt can allow exactly those names with a
/// regex; Landlock allows only beneath directories that exist, so on Linux the
/// file moves into `~/.claude` with a link left in its place, which Claude
/// Code resolves before saving (measured with 2.1.197; see docs/setup.md).
pub const CLAUDE_JSON_MUST_MOVE: bool = cfg!(target_os = "linux");

/// What this system offers nd7's sandbox, or why it cannot be used.
pub fn available() -> Result<&'static str, String> {
    #[cfg(target_os = "linux")]
    {
        linux::probe()
            .map(|()| "Landlock, with every right nd7 needs (ABI 3 or newer)")
            .map_err(|e| e.to_string())
    }
    #[cfg(target_os = "macos")]
    {
        Ok("Seatbelt")
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        Err("nd7 has no sandbox for this operating system".to_string())
    }
}
