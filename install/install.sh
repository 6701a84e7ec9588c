#!/bin/sh
# Installs a release of nd7 under a prefix (ADR-0125):
#   curl -fsSL https://github.com/nd7-dev/nd7/releases/latest/download/install.sh | sh
#   sh install.sh [--version VERSION] [--prefix PREFIX] [--target TARGET] [--from URL]
# Picks this machine's target, downloads its archive, SHA256SUMS and
# SHA256SUMS.sig, checks the signature against the release key this script
# carries (ssh-keygen -Y verify) and the archive against SHA256SUMS, and only
# then installs nd7, nd7-exec, nd7-record (and nd7-vault, where the release has it), the
# completions and the man page under PREFIX (default ~/.local). --version pins
# a release (default: the latest); --from reads the release from another URL.
# The copy in nd7's repository carries no key: use the one published with a
# release. Exit 0 when installed, 2 when anything did not check out (nothing is
# installed then).
set -eu

# The release key, as an allowed-signers line; the release stamps it in.
release_signer=''
repo=https://github.com/nd7-dev/nd7

die() { echo "install.sh: $*" >&2; exit 2; }
say() { echo "install.sh: $*"; }

version="" prefix=${HOME:-}/.local target="" from=""
while [ $# -gt 0 ]; do
  case $1 in
    --version) [ $# -ge 2 ] || die "--version needs a value"; version=${2#v}; shift 2;;
    --prefix) [ $# -ge 2 ] || die "--prefix needs a value"; prefix=$2; shift 2;;
    --target) [ $# -ge 2 ] || die "--target needs a value"; target=$2; shift 2;;
    --from) [ $# -ge 2 ] || die "--from needs a value"; from=${2%/}; shift 2;;
    -h|--help) echo "usage: install.sh [--version VERSION] [--prefix PREFIX] [--target TARGET] [--from URL]"; exit 0;;
    *) die "unknown argument $1 (see --help)";;
  esac
done
[ -n "$release_signer" ] || die "this copy carries no release key; use the install.sh published with a release: $repo/releases"
[ -n "$prefix" ] || die "no prefix (HOME is not set; give --prefix)"

if [ -z "$target" ]; then
  case "$(uname -s)-$(uname -m)" in
    Linux-x86_64|Linux-amd64) target=x86_64-unknown-linux-musl;;
    Linux-aarch64|Linux-arm64) target=aarch64-unknown-linux-musl;;
    Darwin-x86_64) target=x86_64-apple-darwin;;
    Darwin-arm64) target=aarch64-apple-darwin;;
    *) die "no release for $(uname -s) $(uname -m); build from source: cargo install --locked --path . in a checkout";;
  esac
fi
if [ -z "$from" ]; then
  if [ -n "$version" ]; then from=$repo/releases/download/v$version; else from=$repo/releases/latest/download; fi
fi

for tool in ssh-keygen tar gzip; do
  command -v "$tool" >/dev/null || die "$tool is needed (ssh-keygen, from OpenSSH 8.1 or newer, checks the release's signature)"
done
if command -v curl >/dev/null; then fetch() { curl -fsSL --proto '=https,http' -o "$2" "$1"; }
elif command -v wget >/dev/null; then fetch() { wget -q -O "$2" "$1"; }
else die "curl or wget is needed"; fi
if command -v sha256sum >/dev/null; then sha256() { sha256sum "$1" | cut -d' ' -f1; }
elif command -v shasum >/dev/null; then sha256() { shasum -a 256 "$1" | cut -d' ' -f1; }
else die "sha256sum or shasum is needed"; fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
fetch "$from/SHA256SUMS" "$work/SHA256SUMS" || die "$from/SHA256SUMS: could not download"
fetch "$from/SHA256SUMS.sig" "$work/SHA256SUMS.sig" || die "$from/SHA256SUMS.sig: could not download"
printf '%s\n' "$release_signer" > "$work/allowed_signers"
ssh-keygen -Y verify -f "$work/allowed_signers" -I nd7-release -n nd7-release \
  -s "$work/SHA256SUMS.sig" < "$work/SHA256SUMS" > /dev/null 2>&1 \
  || die "$from/SHA256SUMS: its signature does not verify against the release key; nothing was installed"

# The archive for this target, as the signed list names it.
archive=$(sed -n "s/^[0-9a-f]\{64\}  \(nd7-[^ ]*-$target\.tar\.gz\)$/\1/p" "$work/SHA256SUMS" | head -n 1)
[ -n "$archive" ] || die "$from: the release has no archive for $target"
found=${archive#nd7-}; found=${found%-"$target".tar.gz}
if [ -n "$version" ] && [ "$found" != "$version" ]; then
  die "$from: the release is $found, not $version; nothing was installed"
fi
version=$found
want=$(grep "  $archive\$" "$work/SHA256SUMS" | cut -d' ' -f1)
fetch "$from/$archive" "$work/$archive" || die "$from/$archive: could not download"
got=$(sha256 "$work/$archive")
[ "$got" = "$want" ] || die "$archive: its SHA-256 is $got, SHA256SUMS says $want; nothing was installed"

mkdir "$work/x"
gzip -dc "$work/$archive" | (cd "$work/x" && tar -xf -) || die "$archive: could not unpack"
src=$work/x/nd7-$version-$target
for bin in nd7 nd7-exec nd7-record; do
  [ -f "$src/$bin" ] || die "$archive: no $bin in it (a release ships nd7, nd7-exec and nd7-record)"
done

# Each file is copied beside its place and renamed over it, so a running nd7
# is never seen half-written.
put() { # put SOURCE DEST MODE
  mkdir -p "$(dirname "$2")"
  cp "$1" "$2.nd7-new" && chmod "$3" "$2.nd7-new" && mv -f "$2.nd7-new" "$2"
  installed="$installed
  $2"
}
installed=""
put "$src/nd7-exec" "$prefix/bin/nd7-exec" 755
# What every hook runs (ADR-0151); nd7 setup finds it beside nd7.
put "$src/nd7-record" "$prefix/bin/nd7-record" 755
put "$src/nd7" "$prefix/bin/nd7" 755
[ -f "$src/nd7-vault" ] && put "$src/nd7-vault" "$prefix/bin/nd7-vault" 755
put "$src/complete/nd7.bash" "$prefix/share/bash-completion/completions/nd7" 644
put "$src/complete/_nd7" "$prefix/share/zsh/site-functions/_nd7" 644
put "$src/complete/nd7.fish" "$prefix/share/fish/vendor_completions.d/nd7.fish" 644
put "$src/doc/nd7.1" "$prefix/share/man/man1/nd7.1" 644
say "nd7 $version for $target, from $from (signature and SHA-256 checked), installed:$installed"
say "next: $prefix/bin/nd7 setup"
