# Homebrew formula for nd7, built from source.
# Until the first tagged release it installs the main branch (brew install --HEAD);
# a release adds `url` and `sha256` for the tag's source archive.
class Nd7 < Formula
  desc "Audit log, sandbox and encrypted log shipping for AI coding agents"
  homepage "https://github.com/nd7-dev/nd7"
  license any_of: ["MIT", "Apache-2.0"]
  head "https://github.com/nd7-dev/nd7.git", branch: "main"

  depends_on "rust" => :build

  def install
    # No self-update in Homebrew builds: brew upgrades nd7 (the feature is off by default).
    system "cargo", "install", "--locked", *std_cargo_args
    generate_completions_from_executable(bin/"nd7", "completions")
  end

  # `brew services start nd7` ships the session logs every five minutes, like
  # the timer `nd7 setup` installs elsewhere (setup leaves this one alone).
  # Until the machine is enrolled (`nd7 enroll`), each run exits 2 and ships nothing.
  service do
    run [opt_bin/"nd7", "ship"]
    run_type :interval
    interval 300
    nice 10
    log_path var/"log/nd7-ship.log"
    error_log_path var/"log/nd7-ship.log"
  end

  def caveats
    <<~EOS
      To record every Claude Code session, register nd7's hooks:
        nd7 setup
      It writes #{opt_bin}/nd7 into ~/.claude/settings.json, so upgrades keep working.
      Once enrolled with your organisation's vault (nd7 enroll), ship the logs with:
        brew services start nd7
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
