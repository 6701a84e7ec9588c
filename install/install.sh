#!/usr/bin/env sh
# Builds nd7 from this source tree and installs it under a prefix, with its
# shell completions. Needs cargo (Rust 1.89 or newer).
# usage: install/install.sh [PREFIX]      (default: ~/.local)
# Then run `PREFIX/bin/nd7 setup` to register the hooks with Claude Code.
set -eu
cd "$(dirname "$0")/.."
prefix=${1:-$HOME/.local}
cargo install --locked --path . --root "$prefix"
nd7="$prefix/bin/nd7"
mkdir -p "$prefix/share/bash-completion/completions" "$prefix/share/zsh/site-functions" \
  "$prefix/share/fish/vendor_completions.d"
"$nd7" completions bash > "$prefix/share/bash-completion/completions/nd7"
"$nd7" completions zsh > "$prefix/share/zsh/site-functions/_nd7"
"$nd7" completions fish > "$prefix/share/fish/vendor_completions.d/nd7.fish"
echo "installed $nd7 ($("$nd7" --version)); next: $nd7 setup"
