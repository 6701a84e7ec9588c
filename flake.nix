{
  description = "nd7: a hash-chained audit log of what AI coding agents do, for Claude Code";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs = { self, nixpkgs }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" "x86_64-darwin" "aarch64-darwin" ];
      forAll = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
      cargoToml = builtins.fromTOML (builtins.readFile ./Cargo.toml);
      # nd7 (with completions and the man page) and nd7-vault, from this tree.
      # Self-update is never built here: the binaries live in the read-only store.
      build = pkgs: { pname, features ? [ ], bins }: pkgs.rustPlatform.buildRustPackage {
        inherit pname;
        version = cargoToml.package.version;
        src = pkgs.lib.cleanSource ./.;
        cargoLock.lockFile = ./Cargo.lock;
        buildFeatures = features;
        cargoBuildFlags = map (b: "--bin=${b}") bins;
        nativeBuildInputs = [ pkgs.installShellFiles ];
        # The suite drives the real Claude Code from npm, which a sandboxed
        # build cannot fetch; `checks` runs nd7 instead.
        doCheck = false;
        meta = {
          description = cargoToml.package.description;
          homepage = "https://github.com/nd7-dev/nd7";
          license = with pkgs.lib.licenses; [ mit asl20 ];
          mainProgram = pname;
        };
      };
      # nd7-record, what every hook runs (ADR-0151), sits beside nd7 in bin/,
      # where `nd7 setup` finds it.
      nd7For = pkgs: (build pkgs { pname = "nd7"; bins = [ "nd7" "nd7-exec" "nd7-record" ]; }).overrideAttrs {
        # Default features: libzstd and HTTPS for `nd7 ship`.
        postInstall = ''
          installShellCompletion --cmd nd7 \
            --bash <($out/bin/nd7 completions bash) \
            --zsh <($out/bin/nd7 completions zsh) \
            --fish <($out/bin/nd7 completions fish)
          $out/bin/nd7 man > nd7.1
          installManPage nd7.1
        '';
      };
      vaultFor = pkgs: build pkgs { pname = "nd7-vault"; features = [ "vault-server" ]; bins = [ "nd7-vault" ]; };
    in
    {
      packages = forAll (pkgs: rec {
        nd7 = nd7For pkgs;
        nd7-vault = vaultFor pkgs;
        default = nd7;
      });

      # `nixpkgs.overlays = [ nd7.overlays.default ];` adds pkgs.nd7 and pkgs.nd7-vault.
      overlays.default = final: prev: {
        nd7 = nd7For final;
        nd7-vault = vaultFor final;
      };

      apps = forAll (pkgs:
        let p = self.packages.${pkgs.stdenv.hostPlatform.system}; in {
          default = { type = "app"; program = "${p.nd7}/bin/nd7"; };
          nd7-vault = { type = "app"; program = "${p.nd7-vault}/bin/nd7-vault"; };
        });

      devShells = forAll (pkgs: {
        default = pkgs.mkShell {
          packages = with pkgs; [ cargo rustc clippy rustfmt nodejs zsh fish hyperfine b3sum ];
        };
      });

      # Home Manager: `services.nd7-ship.enable = true;` ships the session logs
      # on a timer (a systemd user timer on Linux, a launchd agent on macOS).
      # `nd7 setup` sees these units link into the store and leaves them alone.
      homeManagerModules.default = { config, lib, pkgs, ... }:
        let
          cfg = config.services.nd7-ship;
          ship = "${cfg.package}/bin/nd7 ship";
        in
        {
          options.services.nd7-ship = {
            enable = lib.mkEnableOption "shipping nd7's session logs to the vault this machine is enrolled with";
            package = lib.mkOption {
              type = lib.types.package;
              default = self.packages.${pkgs.stdenv.hostPlatform.system}.default;
              description = "The nd7 package whose `nd7 ship` runs.";
            };
            interval = lib.mkOption {
              type = lib.types.ints.positive;
              default = 300;
              description = "Seconds from one ship to the next (the systemd timer's and the launchd agent's).";
            };
          };
          config = lib.mkIf cfg.enable (lib.mkMerge [
            (lib.mkIf pkgs.stdenv.isLinux {
              systemd.user.services.nd7-ship = {
                Unit.Description = "Ship nd7 session logs to the vault";
                Service = { Type = "oneshot"; ExecStart = ship; Nice = 10; };
              };
              systemd.user.timers.nd7-ship = {
                Unit.Description = "Ship nd7 session logs to the vault every ${toString cfg.interval} s";
                Timer = { OnBootSec = "2min"; OnUnitActiveSec = "${toString cfg.interval}s"; RandomizedDelaySec = "30s"; };
                Install.WantedBy = [ "timers.target" ];
              };
            })
            (lib.mkIf pkgs.stdenv.isDarwin {
              launchd.agents.nd7-ship = {
                enable = true;
                config = {
                  ProgramArguments = [ "${cfg.package}/bin/nd7" "ship" ];
                  StartInterval = cfg.interval;
                  Nice = 10;
                };
              };
            })
          ]);
        };

      # Records a payload with the built nd7 and verifies the chain.
      checks = forAll (pkgs: {
        record-and-verify = pkgs.runCommand "nd7-record-and-verify"
          { nativeBuildInputs = [ self.packages.${pkgs.stdenv.hostPlatform.system}.default ]; } ''
          export XDG_STATE_HOME=$TMPDIR/state
          echo '{"session_id":"nix-check","cwd":"/tmp","hook_event_name":"SessionStart","source":"startup"}' | nd7 record
          echo '{"session_id":"nix-check","cwd":"/tmp","hook_event_name":"Stop"}' | nd7-record
          nd7 verify nix-check | grep -q 'verified: 2 entries'
          touch $out
        '';
      });
    };
}
