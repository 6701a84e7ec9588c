{
  description = "nd7: a hash-chained audit log of what AI coding agents do, for Claude Code";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs = { self, nixpkgs }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" "x86_64-darwin" "aarch64-darwin" ];
      forAll = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
      cargoToml = builtins.fromTOML (builtins.readFile ./Cargo.toml);
    in
    {
      packages = forAll (pkgs: rec {
        nd7 = pkgs.rustPlatform.buildRustPackage {
          pname = "nd7";
          version = cargoToml.package.version;
          src = pkgs.lib.cleanSource ./.;
          cargoLock.lockFile = ./Cargo.lock;
          # No self-update in Nix builds: the binary lives in the read-only store.
          buildNoDefaultFeatures = true;
          nativeBuildInputs = [ pkgs.installShellFiles ];
          # The suite drives the real Claude Code from npm, which a sandboxed
          # build cannot fetch; `checks` runs nd7 instead.
          doCheck = false;
          postInstall = ''
            installShellCompletion --cmd nd7 \
              --bash <($out/bin/nd7 completions bash) \
              --zsh <($out/bin/nd7 completions zsh) \
              --fish <($out/bin/nd7 completions fish)
          '';
          meta = {
            description = cargoToml.package.description;
            homepage = "https://github.com/nd7-dev/nd7";
            license = with pkgs.lib.licenses; [ mit asl20 ];
            mainProgram = "nd7";
          };
        };
        default = nd7;
      });

      apps = forAll (pkgs: {
        default = {
          type = "app";
          program = "${self.packages.${pkgs.stdenv.hostPlatform.system}.default}/bin/nd7";
        };
      });

      devShells = forAll (pkgs: {
        default = pkgs.mkShell {
          packages = with pkgs; [ cargo rustc clippy rustfmt nodejs zsh fish hyperfine b3sum ];
        };
      });

      # Records a payload with the built nd7 and verifies the chain.
      checks = forAll (pkgs: {
        record-and-verify = pkgs.runCommand "nd7-record-and-verify"
          { nativeBuildInputs = [ self.packages.${pkgs.stdenv.hostPlatform.system}.default ]; } ''
          export XDG_STATE_HOME=$TMPDIR/state
          echo '{"session_id":"nix-check","cwd":"/tmp","hook_event_name":"SessionStart","source":"startup"}' | nd7 record
          nd7 verify nix-check | grep -q 'verified: 1 entries'
          touch $out
        '';
      });
    };
}
