# Homebrew formula for nd7, built from source.
# Until the first tagged release it installs the main branch (brew install --HEAD);
# a release adds `url` and `sha256` for the tag's source archive.
class Nd7 < Formula
  desc "Hash-chained audit log of what AI coding agents do, for Claude Code"
  homepage "https://github.com/nd7-dev/nd7"
  license any_of: ["MIT", "Apache-2.0"]
  head "https://github.com/nd7-dev/nd7.git", branch: "main"

  depends_on "rust" => :build

  def install
    # No self-update in Homebrew builds: brew upgrades nd7 (the feature is off by default).
    system "cargo", "install", "--locked", *std_cargo_args
    generate_completions_from_executable(bin/"nd7", "completions")
  end

  def caveats
    <<~EOS
      To record every Claude Code session, register nd7's hooks:
        nd7 setup
      It writes #{opt_bin}/nd7 into ~/.claude/settings.json, so upgrades keep working.
    EOS
  end

  test do
    ENV["XDG_STATE_HOME"] = testpath.to_s
    payload = '{"session_id":"brew-test","cwd":"/tmp","hook_event_name":"SessionStart","source":"startup"}'
    pipe_output("#{bin}/nd7 record", payload, 0)
    assert_match "verified: 1 entries", shell_output("#{bin}/nd7 verify brew-test")
    system bin/"nd7", "completions", "zsh"
  end
end
