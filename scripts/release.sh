#!/usr/bin/env bash
# Makes nd7's release files (ADR-0124, docs/release.md).
#
#   scripts/release.sh package TARGET BIN_DIR OUT
#       OUT/nd7-<version>-TARGET.tar.gz (nd7, nd7-exec, nd7-record, nd7-vault
#       when built, complete/, doc/nd7.1), and the bare binaries self-update
#       fetches (OUT/nd7-TARGET, OUT/nd7-exec-TARGET, OUT/nd7-record-TARGET).
#       Runs BIN_DIR/nd7 for the
#       completions and the man page, so it runs where TARGET does. Refuses
#       a -linux-musl TARGET's binary that is not static (readelf).
#   scripts/release.sh sign OUT KEY [URL]
#       Over every target packaged in OUT: manifest-TARGET and its .sig (what
#       `nd7 self-update` reads), SHA256SUMS and SHA256SUMS.sig (what
#       install.sh checks), install.sh carrying the release key, and nd7.rb,
#       the Homebrew formula for the tap, its urls under URL (default: the
#       GitHub release of this version). KEY: an unencrypted OpenSSH Ed25519
#       private key, the release key.
#   scripts/release.sh check-tag TAG
#       Prints the version when TAG is v<version>, where <version> is what
#       Cargo.toml's [package] and [workspace.package] say and every crate
#       under crates/ takes the workspace's; otherwise says which differs
#       and exits 2. The release workflow runs it first.
#   scripts/release.sh public-key KEY
#       KEY's public half in hex, as ND7_RELEASE_KEY holds it.
#   scripts/release.sh --local [--bin-dir DIR] [--out DIR] [--serve PORT]
#       The dry run: this platform's release in OUT/dist (default
#       target/release-local), signed by a throwaway key made in OUT/key
#       (its public half in hex: OUT/key/release-key.hex). Builds
#       `cargo build --release --features self-update` with that key compiled
#       in, unless --bin-dir names binaries already built. --serve serves
#       OUT/dist on 127.0.0.1:PORT (python3) until interrupted.
#
# Needs: tar, gzip, sha256sum or shasum, b3sum, ssh-keygen (OpenSSH 8.1+),
# openssl (3.0+), xxd.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "release: $*" >&2; exit 2; }
need() { for t in "$@"; do command -v "$t" >/dev/null || die "$t is needed"; done; }
# The version a table of Cargo.toml sets: table_version package|workspace.package.
table_version() {
  awk -v t="[$1]" '/^\[/ { in_t = ($0 == t) } in_t && /^version = "/ { sub(/^version = "/, ""); sub(/"$/, ""); print; exit }' Cargo.toml
}
version() { table_version package; }
sha256() { if command -v sha256sum >/dev/null; then sha256sum "$@"; else shasum -a 256 "$@"; fi; }
repo_url=https://github.com/nd7-dev/nd7
# What the signature on SHA256SUMS is made for (ssh-keygen -Y's namespace).
namespace=nd7-release
# What the signature on a manifest covers before the manifest's bytes
# (src/self_update.rs, CONTEXT).
context='nd7 release manifest v1'

# check-tag TAG: one version for the tag, nd7 and every crate it is built from.
check_tag() {
  local tag=$1 v w toml
  v=$(version); w=$(table_version workspace.package)
  [ -n "$v" ] || die "Cargo.toml: no version under [package]"
  [ "$w" = "$v" ] || die "Cargo.toml: [workspace.package] has version ${w:-none}, [package] $v; the crates are released at one version"
  for toml in crates/*/Cargo.toml; do
    grep -q '^version.workspace = true$' "$toml" || die "$toml: its version is not the workspace's (version.workspace = true)"
  done
  [ "$tag" = "v$v" ] || die "the tag $tag is not v$v, Cargo.toml's version"
  echo "$v"
}

# static_only BIN: a -linux-musl release runs on any Linux, so its binaries
# load nothing: no interpreter (ld.so), no shared library.
static_only() {
  local libs headers
  need readelf
  libs=$(readelf -dW "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p' | paste -sd ' ' -) || die "$1: readelf cannot read it"
  headers=$(readelf -lW "$1") || die "$1: readelf cannot read it"
  if [ -n "$libs" ] || grep -q ' INTERP ' <<<"$headers"; then
    die "$1: linked dynamically (${libs:-an interpreter}); a -linux-musl release must be static"
  fi
}

# package TARGET BIN_DIR OUT
package() {
  local target=$1 bins=$2 out=$3 v name stage bin
  need tar gzip
  v=$(version); name=nd7-$v-$target
  # nd7-record is what every hook runs (ADR-0151): shipped as nd7-exec is.
  for bin in nd7 nd7-exec nd7-record; do
    [ -x "$bins/$bin" ] || die "$bins: no $bin (a release ships nd7, nd7-exec and nd7-record)"
  done
  case $target in
    *-linux-musl) for bin in nd7 nd7-exec nd7-record nd7-vault; do
        if [ -x "$bins/$bin" ]; then static_only "$bins/$bin"; fi
      done;;
  esac
  mkdir -p "$out"; stage=$(mktemp -d); mkdir -p "$stage/$name/complete" "$stage/$name/doc"
  for bin in nd7 nd7-exec nd7-record nd7-vault; do
    [ -x "$bins/$bin" ] && cp "$bins/$bin" "$stage/$name/$bin"
  done
  "$bins/nd7" completions bash > "$stage/$name/complete/nd7.bash"
  "$bins/nd7" completions zsh > "$stage/$name/complete/_nd7"
  "$bins/nd7" completions fish > "$stage/$name/complete/nd7.fish"
  "$bins/nd7" man > "$stage/$name/doc/nd7.1"
  cp README.md LICENSE-MIT LICENSE-APACHE "$stage/$name/"
  # Owner (and with GNU tar, times) fixed, so the archive depends on its files.
  if tar --version 2>/dev/null | grep -q GNU; then
    (cd "$stage" && tar --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - "$name")
  else
    (cd "$stage" && tar --uid 0 --gid 0 --numeric-owner -cf - "$name")
  fi | gzip -n > "$out/$name.tar.gz"
  cp "$bins/nd7" "$out/nd7-$target"
  cp "$bins/nd7-exec" "$out/nd7-exec-$target"
  cp "$bins/nd7-record" "$out/nd7-record-$target"
  rm -rf "$stage"
  echo "release: $out/$name.tar.gz"
}

# The 32-byte seed of an unencrypted OpenSSH Ed25519 private key, in hex.
# openssh-key-v1 with cipher "none" and one ed25519 key puts it at byte 161.
key_seed() {
  local blob; blob=$(sed '1d;$d' "$1" | tr -d '\n')
  printf '%s' "$blob" | base64 -d | head -c 23 | tail -c 8 | grep -q none \
    || die "$1: not an unencrypted OpenSSH key"
  printf '%s' "$blob" | base64 -d | tail -c +162 | head -c 32 | xxd -p -c 64
}

# The key's public half, 64 hex digits: what ND7_RELEASE_KEY holds.
key_public_hex() {
  local pub; pub=$(ssh-keygen -y -f "$1") || die "$1: not an OpenSSH private key"
  case $pub in ssh-ed25519\ *) ;; *) die "$1: not an Ed25519 key";; esac
  printf '%s' "$pub" | cut -d' ' -f2 | base64 -d | tail -c 32 | xxd -p -c 64
}

# sign_manifest KEY FILE: FILE.sig, the hex Ed25519 signature over the
# context line and FILE, as `nd7 self-update` checks it.
sign_manifest() {
  local key=$1 file=$2 der msg
  der=$(mktemp); msg=$(mktemp)
  printf '302e020100300506032b657004220420%s' "$(key_seed "$key")" | xxd -r -p > "$der"
  { printf '%s\n' "$context"; cat "$file"; } > "$msg"
  openssl pkeyutl -sign -keyform DER -inkey "$der" -rawin -in "$msg" | xxd -p -c 64 > "$file.sig"
  rm -f "$der" "$msg"
}

# sign OUT KEY [URL]
sign() {
  local out=$1 key=$2 url=${3:-} v pub signer targets=() t
  need b3sum ssh-keygen openssl xxd
  v=$(version); url=${url:-$repo_url/releases/download/v$v}
  pub=$(key_public_hex "$key")
  [ ${#pub} = 64 ] || die "$key: could not read its public key"
  for archive in "$out"/nd7-"$v"-*.tar.gz; do
    [ -e "$archive" ] || die "$out: no archive of nd7 $v"
    t=${archive##*/nd7-"$v"-}; targets+=("${t%.tar.gz}")
  done
  for t in "${targets[@]}"; do
    {
      printf 'nd7-release v1\nversion %s\ntarget %s\n' "$v" "$t"
      printf 'file nd7 %s nd7-%s\n' "$(b3sum --no-names "$out/nd7-$t")" "$t"
      printf 'file nd7-exec %s nd7-exec-%s\n' "$(b3sum --no-names "$out/nd7-exec-$t")" "$t"
      printf 'file nd7-record %s nd7-record-%s\n' "$(b3sum --no-names "$out/nd7-record-$t")" "$t"
    } > "$out/manifest-$t"
    sign_manifest "$key" "$out/manifest-$t"
  done
  (cd "$out" && for t in "${targets[@]}"; do
    sha256 "nd7-$v-$t.tar.gz" "nd7-$t" "nd7-exec-$t" "nd7-record-$t" "manifest-$t" "manifest-$t.sig"
  done > SHA256SUMS)
  rm -f "$out/SHA256SUMS.sig"
  ssh-keygen -q -Y sign -f "$key" -n "$namespace" "$out/SHA256SUMS" \
    || die "ssh-keygen could not sign SHA256SUMS"
  signer="$namespace namespaces=\"$namespace\" ssh-ed25519 $(ssh-keygen -y -f "$key" | cut -d' ' -f2)"
  sed "s|^release_signer=''$|release_signer='$signer'|" install/install.sh > "$out/install.sh"
  grep -q "^release_signer='$namespace " "$out/install.sh" || die "install/install.sh: no release_signer line"
  chmod 755 "$out/install.sh"
  formula "$out" "$v" "$url" "${targets[@]}" > "$out/nd7.rb"
  echo "release: signed $v for ${targets[*]} in $out (release key $pub)"
}

# One platform's url and sha256 in the formula, or nothing when the release
# has no archive for it (a local dry run has only its own).
formula_platform() {
  local out=$1 v=$2 url=$3 os=$4 cpu=$5 t sum; shift 5
  for t in "$@"; do
    [ -e "$out/nd7-$v-$t.tar.gz" ] || continue
    sum=$(sha256 "$out/nd7-$v-$t.tar.gz" | cut -d' ' -f1)
    printf '  on_%s do\n    on_%s do\n      url "%s/nd7-%s-%s.tar.gz"\n      sha256 "%s"\n    end\n  end\n' \
      "$os" "$cpu" "$url" "$v" "$t" "$sum"
    return
  done
}

# formula OUT VERSION URL TARGET...: the Homebrew formula for the tap
# nd7-dev/homebrew-tap (`brew install nd7-dev/tap/nd7`), from the archives.
formula() {
  local out=$1 v=$2 url=$3
  cat <<EOF
# Generated by nd7's scripts/release.sh from release $v; the release replaces it in the tap
# (nd7-dev/homebrew-tap), so do not edit it by hand.
class Nd7 < Formula
  desc "Audit log, sandbox and encrypted log shipping for AI coding agents"
  homepage "$repo_url"
  version "$v"
  license any_of: ["MIT", "Apache-2.0"]

EOF
  formula_platform "$out" "$v" "$url" macos arm aarch64-apple-darwin
  formula_platform "$out" "$v" "$url" macos intel x86_64-apple-darwin
  formula_platform "$out" "$v" "$url" linux arm aarch64-unknown-linux-musl aarch64-unknown-linux-gnu
  formula_platform "$out" "$v" "$url" linux intel x86_64-unknown-linux-musl x86_64-unknown-linux-gnu
  cat <<'EOF'

  head do
    url "https://github.com/nd7-dev/nd7.git", branch: "main"
    depends_on "rust" => :build
  end

  def install
    if build.head?
      # Built without self-update: brew upgrades nd7.
      system "cargo", "install", "--locked", *std_cargo_args
      generate_completions_from_executable(bin/"nd7", "completions")
      (man1/"nd7.1").write Utils.safe_popen_read(bin/"nd7", "man")
    else
      bin.install "nd7", "nd7-exec", "nd7-record"
      bin.install "nd7-vault" if File.exist?("nd7-vault")
      bash_completion.install "complete/nd7.bash" => "nd7"
      zsh_completion.install "complete/_nd7"
      fish_completion.install "complete/nd7.fish"
      man1.install "doc/nd7.1"
    end
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
      It writes #{opt_bin}/nd7-record into ~/.claude/settings.json, so upgrades keep working.
      Once enrolled with your organisation's vault (nd7 enroll), ship the logs with:
        brew services start nd7
      Update with `brew upgrade nd7`; `nd7 self-update` leaves a Homebrew copy alone.
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
EOF
}

local_release() {
  local out=target/release-local bins="" port="" target pub
  while [ $# -gt 0 ]; do
    case $1 in
      --out) out=$2; shift 2;;
      --bin-dir) bins=$2; shift 2;;
      --serve) port=$2; shift 2;;
      *) die "unknown argument $1";;
    esac
  done
  need cargo ssh-keygen
  target=$(rustc -vV | sed -n 's/^host: //p')
  rm -rf "$out/dist" "$out/key"; mkdir -p "$out/dist" "$out/key"; chmod 700 "$out/key"
  ssh-keygen -q -t ed25519 -N '' -C "$namespace (throwaway)" -f "$out/key/release-key"
  pub=$(key_public_hex "$out/key/release-key"); printf '%s\n' "$pub" > "$out/key/release-key.hex"
  if [ -z "$bins" ]; then
    ND7_RELEASE_KEY=$pub cargo build --locked --release --features self-update --bin nd7 --bin nd7-exec --bin nd7-record
    bins=${CARGO_TARGET_DIR:-target}/release
  fi
  package "$target" "$bins" "$out/dist"
  if [ -n "$port" ]; then
    sign "$out/dist" "$out/key/release-key" "http://127.0.0.1:$port"
    echo "release: serving $out/dist on http://127.0.0.1:$port; install with"
    echo "  sh $out/dist/install.sh --from http://127.0.0.1:$port --target $target --prefix PREFIX"
    cd "$out/dist" && exec python3 -m http.server --bind 127.0.0.1 "$port"
  fi
  sign "$out/dist" "$out/key/release-key"
}

case ${1:-} in
  package) [ $# = 4 ] || die "usage: scripts/release.sh package TARGET BIN_DIR OUT"; package "$2" "$3" "$4";;
  check-tag) [ $# = 2 ] || die "usage: scripts/release.sh check-tag TAG"; check_tag "$2";;
  public-key) [ $# = 2 ] || die "usage: scripts/release.sh public-key KEY"; key_public_hex "$2";;
  sign) [ $# -ge 3 ] || die "usage: scripts/release.sh sign OUT KEY [URL]"; sign "$2" "$3" "${4:-}";;
  --local) shift; local_release "$@";;
  *) die "usage: scripts/release.sh package|sign|check-tag|public-key|--local (see the top of this script)";;
esac
