# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_nd7_global_optspecs
    string join \n h/help V/version
end

function __fish_nd7_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_nd7_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_nd7_using_subcommand
    set -l cmd (__fish_nd7_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c nd7 -n "__fish_nd7_needs_command" -s h -l help -d 'Print help'
complete -c nd7 -n "__fish_nd7_needs_command" -s V -l version -d 'Print version'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "record" -d 'Append one hook payload (read on stdin) to its session\'s log'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "verify" -d 'Walk a session\'s hash chain and say what a clean chain does and does not prove'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "sessions" -d 'List the recorded sessions, newest first: when, how long, how many tool calls and failures, whether under `nd7 run`, the chain, shipped'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "show" -d 'Show a session as a timeline: prompts, each tool call with its result, failures and refusals marked, subagents nested, the end, the chain'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "search" -d 'Search what sessions say: commands, file paths, prompts, outputs and messages (never the JSON around them), with each hit\'s session and time'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "setup" -d 'Register the recorder (nd7-record) with the agents found here, and install completions'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "uninstall" -d 'Take out what `nd7 setup` put in: the same as `nd7 setup --uninstall`'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "run" -d 'Run PROGRAM and everything it starts under the sandbox floor'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "allow" -d 'Let a running nd7 run\'s Bash commands write under PATH, from the next command'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "deny" -d 'Take back a grant of `nd7 allow` (or of ~/.nd7/grants), from the next command'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "hook-explain" -d 'Tell the model when nd7\'s sandbox refused a tool call (a Claude Code hook)'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "hook-route" -d 'Send a Codex shell call through nd7\'s exit (a Codex hook)'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "doctor" -d 'Say what is installed and working, and the command that fixes what is not'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "enroll" -d 'Enrol this machine with a vault: make its key, register it, pin the admins'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "ship" -d 'Ship every session\'s unshipped entries to the vault, encrypted'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "self-update" -d 'Replace nd7, nd7-exec and nd7-record with a newer signed release (release builds)'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "admin" -d 'Admin tools: keys, the recipients document, and reading a vault back'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "completions" -d 'Print a shell completion script'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "man" -d 'Print nd7\'s manual page, nd7(1), in roff (`nd7 man | man -l -`)'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c nd7 -n "__fish_nd7_using_subcommand record" -l agent -d 'The agent whose hook this is [default: claude-code]' -r -f -a "claude-code\t''
codex\t''"
complete -c nd7 -n "__fish_nd7_using_subcommand record" -l run-hook -d 'Set on the hooks `nd7 run` registers itself; under such a run, copies from hooks registered elsewhere are not recorded twice'
complete -c nd7 -n "__fish_nd7_using_subcommand record" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand verify" -l threads -d 'Threads used to check a large log (default: available cores, at most 2)' -r
complete -c nd7 -n "__fish_nd7_using_subcommand verify" -l all -d 'Verify every session under the state directory'
complete -c nd7 -n "__fish_nd7_using_subcommand verify" -l transcript -d 'Also hold Claude Code\'s transcripts against the session\'s anchors: exit 1 naming the first anchor a file contradicts (rewritten or truncated), 2 when one cannot be read or none is anchored'
complete -c nd7 -n "__fish_nd7_using_subcommand verify" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand sessions" -l project -d 'Only sessions whose project (working directory) is DIR or under it' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand sessions" -l since -d 'Only sessions that started at or after WHEN (2026-11-30, "2026-11-30 14:00", 2h, 3d, yesterday)' -r
complete -c nd7 -n "__fish_nd7_using_subcommand sessions" -l until -d 'Only sessions that started at or before WHEN' -r
complete -c nd7 -n "__fish_nd7_using_subcommand sessions" -l color -d 'Colour: auto (on a terminal, unless NO_COLOR is set), always, never' -r -f -a "auto\t''
always\t''
never\t''"
complete -c nd7 -n "__fish_nd7_using_subcommand sessions" -l failed -d 'Only sessions with a failed tool call'
complete -c nd7 -n "__fish_nd7_using_subcommand sessions" -l refused -d 'Only sessions with a refused tool call (by nd7\'s sandbox or by Claude Code\'s permissions)'
complete -c nd7 -n "__fish_nd7_using_subcommand sessions" -l verify -d 'Verify every listed session whose chain is unchecked first, however large (without it, only up to 16 MiB of logs are)'
complete -c nd7 -n "__fish_nd7_using_subcommand sessions" -l no-verify -d 'Check no chain: CHAIN says only what earlier checks found'
complete -c nd7 -n "__fish_nd7_using_subcommand sessions" -l ids -d 'Only the sessions\' ids, one a line (what completion offers)'
complete -c nd7 -n "__fish_nd7_using_subcommand sessions" -l json -d 'One JSON object per session (NDJSON)'
complete -c nd7 -n "__fish_nd7_using_subcommand sessions" -l no-pager -d 'Never page (by default a terminal gets $ND7_PAGER, $PAGER or `less -FRX`)'
complete -c nd7 -n "__fish_nd7_using_subcommand sessions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand show" -l only -d 'Only the calls that ended so: `failed`, `refused` (comma-separated)' -r -f -a "failed\t''
refused\t''"
complete -c nd7 -n "__fish_nd7_using_subcommand show" -l color -d 'Colour: auto (on a terminal, unless NO_COLOR is set), always, never' -r -f -a "auto\t''
always\t''
never\t''"
complete -c nd7 -n "__fish_nd7_using_subcommand show" -l full -d 'Every line of every output and prompt, and every entry nd7 wrote about a call (`exec`, `exec_end`, `floor_refused`, transcript anchors), which the default view folds into the call\'s row'
complete -c nd7 -n "__fish_nd7_using_subcommand show" -l effects -d 'Every program the observer saw run (`nd7 run` on Linux), one line each with its arguments, beside the collapsed tree shown under each call'
complete -c nd7 -n "__fish_nd7_using_subcommand show" -l json -d 'The same timeline as NDJSON: a session object, one object per item, then the chain\'s verdict'
complete -c nd7 -n "__fish_nd7_using_subcommand show" -l html -d 'One self-contained HTML file (no scripts, nothing loaded) on stdout'
complete -c nd7 -n "__fish_nd7_using_subcommand show" -l no-pager -d 'Never page (by default a terminal gets $ND7_PAGER, $PAGER or `less -FRX`)'
complete -c nd7 -n "__fish_nd7_using_subcommand show" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand search" -l tool -d 'Only entries about this tool (Bash, Write, Read, ...), any case' -r
complete -c nd7 -n "__fish_nd7_using_subcommand search" -l project -d 'Only sessions whose project (working directory) is DIR or under it' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand search" -l since -d 'Only entries recorded at or after WHEN (2026-11-30, 2h, 3d, yesterday)' -r
complete -c nd7 -n "__fish_nd7_using_subcommand search" -l until -d 'Only entries recorded at or before WHEN' -r
complete -c nd7 -n "__fish_nd7_using_subcommand search" -l color -d 'Colour: auto (on a terminal, unless NO_COLOR is set), always, never' -r -f -a "auto\t''
always\t''
never\t''"
complete -c nd7 -n "__fish_nd7_using_subcommand search" -s i -l ignore-case -d 'Match case-insensitively'
complete -c nd7 -n "__fish_nd7_using_subcommand search" -s F -l fixed-strings -d 'PATTERN is a literal string, not a regular expression'
complete -c nd7 -n "__fish_nd7_using_subcommand search" -l json -d 'One JSON object per hit (NDJSON)'
complete -c nd7 -n "__fish_nd7_using_subcommand search" -l no-pager -d 'Never page (by default a terminal gets $ND7_PAGER, $PAGER or `less -FRX`)'
complete -c nd7 -n "__fish_nd7_using_subcommand search" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand setup" -l agent -d 'Set up this agent only [default: every agent found; Claude Code always]' -r -f -a "claude-code\t''
codex\t''"
complete -c nd7 -n "__fish_nd7_using_subcommand setup" -l settings -d 'Claude Code settings file to change [default: ~/.claude/settings.json]' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand setup" -l dry-run -d 'Print what would change and write nothing'
complete -c nd7 -n "__fish_nd7_using_subcommand setup" -l uninstall -d 'Remove nd7\'s entries (and only those) and the completions setup installed'
complete -c nd7 -n "__fish_nd7_using_subcommand setup" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand uninstall" -l agent -d 'Take it out of this agent\'s settings only [default: every agent\'s]' -r -f -a "claude-code\t''
codex\t''"
complete -c nd7 -n "__fish_nd7_using_subcommand uninstall" -l settings -d 'Claude Code settings file to change [default: ~/.claude/settings.json]' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand uninstall" -l dry-run -d 'Print what would change and write nothing'
complete -c nd7 -n "__fish_nd7_using_subcommand uninstall" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand run" -l allow -d 'Let commands write DIR (created if it does not exist), as `nd7 allow DIR` would' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand run" -l preset -d 'Let commands write a toolchain\'s caches (npm, pnpm, yarn, cargo, pip, uv, python-user, go, maven, gradle; docs/sandbox.md says what each risks), and reach its registry\'s hosts (npm, cargo, pip, uv, python-user, go; github brings only hosts)' -r
complete -c nd7 -n "__fish_nd7_using_subcommand run" -l net -d '`strict`: refuse to start where the kernel cannot keep the agent\'s network to nd7\'s egress proxy (`nd7 doctor` says whether it can)' -r -f -a "strict\t''"
complete -c nd7 -n "__fish_nd7_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand allow" -l run -d 'The run: the pid `nd7 run` announced. Needed only when several run; they are listed then' -r
complete -c nd7 -n "__fish_nd7_using_subcommand allow" -l preset -d 'Allow a toolchain\'s caches instead of PATH (npm, pnpm, yarn, cargo, pip, uv, python-user, go, maven, gradle)' -r
complete -c nd7 -n "__fish_nd7_using_subcommand allow" -l net -d 'Let the agent reach a host instead, from its next connection: HOST, *.DOMAIN, HOST:PORT or an IP address (docs/sandbox.md)' -r
complete -c nd7 -n "__fish_nd7_using_subcommand allow" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand deny" -l run -d 'The run: the pid `nd7 run` announced. Needed only when several run; they are listed then' -r
complete -c nd7 -n "__fish_nd7_using_subcommand deny" -l preset -d 'Take back every path of a preset instead of PATH' -r
complete -c nd7 -n "__fish_nd7_using_subcommand deny" -l net -d 'Take back a host the agent may reach, from its next connection' -r
complete -c nd7 -n "__fish_nd7_using_subcommand deny" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand hook-explain" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand hook-route" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand doctor" -l settings -d 'Settings file to check [default: ~/.claude/settings.json]' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand doctor" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand enroll" -l token -d 'The enrolment token from `nd7 admin enroll-token`' -r
complete -c nd7 -n "__fish_nd7_using_subcommand enroll" -l fingerprint -d 'The organisation key\'s fingerprint (64 hex digits), from `nd7 admin org-key`' -r
complete -c nd7 -n "__fish_nd7_using_subcommand enroll" -l ca-cert -d 'Trust only the CA certificate(s) in FILE (PEM) for the vault\'s HTTPS, now and for every ship after (kept as vault/ca.pem). Without it: SSL_CERT_FILE if set, else the Mozilla roots' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand enroll" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand ship" -l every -d 'Ship again every DURATION (e.g. 30s, 5m, 1h) until killed' -r
complete -c nd7 -n "__fish_nd7_using_subcommand ship" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand self-update" -l from -d 'Where the release is published [default: nd7\'s GitHub releases]' -r
complete -c nd7 -n "__fish_nd7_using_subcommand self-update" -l allow-downgrade -d 'Install the release even when it is not newer than this nd7 (an older signed release may bring back a fixed flaw)'
complete -c nd7 -n "__fish_nd7_using_subcommand self-update" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and not __fish_seen_subcommand_from org-key age-key sign-recipients enroll-token machines sessions pull help" -s h -l help -d 'Print help'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and not __fish_seen_subcommand_from org-key age-key sign-recipients enroll-token machines sessions pull help" -f -a "org-key" -d 'Make the organisation\'s Ed25519 key; prints its fingerprint'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and not __fish_seen_subcommand_from org-key age-key sign-recipients enroll-token machines sessions pull help" -f -a "age-key" -d 'Make an admin\'s age identity; prints its age1... recipient'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and not __fish_seen_subcommand_from org-key age-key sign-recipients enroll-token machines sessions pull help" -f -a "sign-recipients" -d 'Print a recipients document listing RECIPIENTS, signed by the organisation key'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and not __fish_seen_subcommand_from org-key age-key sign-recipients enroll-token machines sessions pull help" -f -a "enroll-token" -d 'Print a one-time enrolment token for `nd7 enroll`, signed by the organisation key'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and not __fish_seen_subcommand_from org-key age-key sign-recipients enroll-token machines sessions pull help" -f -a "machines" -d 'List the machines a vault enrolled, by the token each used, held to the organisation\'s register of tokens'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and not __fish_seen_subcommand_from org-key age-key sign-recipients enroll-token machines sessions pull help" -f -a "sessions" -d 'List the sessions a vault holds: machine, session, last entry, held to the machines\' tallies'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and not __fish_seen_subcommand_from org-key age-key sign-recipients enroll-token machines sessions pull help" -f -a "pull" -d 'Fetch a session (or every one) from the vault, decrypt it, verify it, and compare it'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and not __fish_seen_subcommand_from org-key age-key sign-recipients enroll-token machines sessions pull help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from org-key" -l out -d 'Where to write the key (0600; refuses to overwrite)' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from org-key" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from age-key" -l out -d 'Where to write the identity (0600; refuses to overwrite)' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from age-key" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from sign-recipients" -l org-key -d 'The organisation key from `nd7 admin org-key`' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from sign-recipients" -l version -d 'The document\'s version: machines take only a higher one than they hold' -r
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from sign-recipients" -l valid-days -d 'Days the document stays valid: after that, machines start no new chain key under it, so sign and install a newer version before' -r
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from sign-recipients" -l valid-until -d 'Valid until this Unix time instead of for --valid-days' -r
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from sign-recipients" -l vault-key -d 'The vault\'s public key, as `nd7-vault key` printed it' -r
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from sign-recipients" -s h -l help -d 'Print help'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from enroll-token" -l org-key -d 'The organisation key from `nd7 admin org-key`' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from enroll-token" -l recipients -d 'The recipients document currently installed on the vault (from `nd7 admin sign-recipients`)' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from enroll-token" -l hours -d 'Hours until it expires' -r
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from enroll-token" -l label -d 'Whom the token is for (a host, a person): kept in the register' -r
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from enroll-token" -l register -d 'The organisation\'s register of tokens, which this one is added to (`nd7 admin machines --register` holds the vault\'s machines to it) [default: the organisation key\'s file with `.tokens` added]' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from enroll-token" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from machines" -l read-token -r
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from machines" -l ca-cert -d 'Trust only the CA certificate(s) in FILE (PEM) for the vault\'s HTTPS' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from machines" -l fingerprint -d 'The organisation key\'s fingerprint, from `nd7 admin org-key`' -r
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from machines" -l register -d 'The register `nd7 admin enroll-token` wrote' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from machines" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from sessions" -l read-token -d 'A read token from `nd7-vault read-token`' -r
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from sessions" -l ca-cert -d 'Trust only the CA certificate(s) in FILE (PEM) for the vault\'s HTTPS' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from sessions" -l fingerprint -d 'The organisation key\'s fingerprint, from `nd7 admin org-key`' -r
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from sessions" -l seen -d 'Remember in FILE each machine and its latest tally verified, and hold the vault to it next time: a machine it stops listing, or an older tally than one seen, is the vault\'s doing (exit 3). Keep one per vault, in your own state directory' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from sessions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from pull" -l read-token -r
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from pull" -l ca-cert -d 'Trust only the CA certificate(s) in FILE (PEM) for the vault\'s HTTPS' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from pull" -l identity -d 'An age identity file (`nd7 admin age-key`, or age-keygen\'s)' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from pull" -l fingerprint -d 'The organisation key\'s fingerprint, from `nd7 admin org-key`' -r
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from pull" -l machine -d 'The machine whose sessions to pull [default: every machine\'s]' -r
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from pull" -l session -d 'The session to pull [default: every session `nd7 admin sessions` lists, of --machine if given, each into OUT/<session>; the exit status is the worst of theirs and the listing\'s]' -r
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from pull" -l out -d 'Directory to write the decrypted session into' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from pull" -l compare -d 'A local copy (session directory or events.ndjson) to compare with' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from pull" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from help" -f -a "org-key" -d 'Make the organisation\'s Ed25519 key; prints its fingerprint'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from help" -f -a "age-key" -d 'Make an admin\'s age identity; prints its age1... recipient'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from help" -f -a "sign-recipients" -d 'Print a recipients document listing RECIPIENTS, signed by the organisation key'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from help" -f -a "enroll-token" -d 'Print a one-time enrolment token for `nd7 enroll`, signed by the organisation key'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from help" -f -a "machines" -d 'List the machines a vault enrolled, by the token each used, held to the organisation\'s register of tokens'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from help" -f -a "sessions" -d 'List the sessions a vault holds: machine, session, last entry, held to the machines\' tallies'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from help" -f -a "pull" -d 'Fetch a session (or every one) from the vault, decrypt it, verify it, and compare it'
complete -c nd7 -n "__fish_nd7_using_subcommand admin; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c nd7 -n "__fish_nd7_using_subcommand completions" -s h -l help -d 'Print help'
complete -c nd7 -n "__fish_nd7_using_subcommand man" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify sessions show search setup uninstall run allow deny hook-explain hook-route doctor enroll ship self-update admin completions man help" -f -a "record" -d 'Append one hook payload (read on stdin) to its session\'s log'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify sessions show search setup uninstall run allow deny hook-explain hook-route doctor enroll ship self-update admin completions man help" -f -a "verify" -d 'Walk a session\'s hash chain and say what a clean chain does and does not prove'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify sessions show search setup uninstall run allow deny hook-explain hook-route doctor enroll ship self-update admin completions man help" -f -a "sessions" -d 'List the recorded sessions, newest first: when, how long, how many tool calls and failures, whether under `nd7 run`, the chain, shipped'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify sessions show search setup uninstall run allow deny hook-explain hook-route doctor enroll ship self-update admin completions man help" -f -a "show" -d 'Show a session as a timeline: prompts, each tool call with its result, failures and refusals marked, subagents nested, the end, the chain'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify sessions show search setup uninstall run allow deny hook-explain hook-route doctor enroll ship self-update admin completions man help" -f -a "search" -d 'Search what sessions say: commands, file paths, prompts, outputs and messages (never the JSON around them), with each hit\'s session and time'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify sessions show search setup uninstall run allow deny hook-explain hook-route doctor enroll ship self-update admin completions man help" -f -a "setup" -d 'Register the recorder (nd7-record) with the agents found here, and install completions'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify sessions show search setup uninstall run allow deny hook-explain hook-route doctor enroll ship self-update admin completions man help" -f -a "uninstall" -d 'Take out what `nd7 setup` put in: the same as `nd7 setup --uninstall`'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify sessions show search setup uninstall run allow deny hook-explain hook-route doctor enroll ship self-update admin completions man help" -f -a "run" -d 'Run PROGRAM and everything it starts under the sandbox floor'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify sessions show search setup uninstall run allow deny hook-explain hook-route doctor enroll ship self-update admin completions man help" -f -a "allow" -d 'Let a running nd7 run\'s Bash commands write under PATH, from the next command'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify sessions show search setup uninstall run allow deny hook-explain hook-route doctor enroll ship self-update admin completions man help" -f -a "deny" -d 'Take back a grant of `nd7 allow` (or of ~/.nd7/grants), from the next command'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify sessions show search setup uninstall run allow deny hook-explain hook-route doctor enroll ship self-update admin completions man help" -f -a "hook-explain" -d 'Tell the model when nd7\'s sandbox refused a tool call (a Claude Code hook)'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify sessions show search setup uninstall run allow deny hook-explain hook-route doctor enroll ship self-update admin completions man help" -f -a "hook-route" -d 'Send a Codex shell call through nd7\'s exit (a Codex hook)'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify sessions show search setup uninstall run allow deny hook-explain hook-route doctor enroll ship self-update admin completions man help" -f -a "doctor" -d 'Say what is installed and working, and the command that fixes what is not'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify sessions show search setup uninstall run allow deny hook-explain hook-route doctor enroll ship self-update admin completions man help" -f -a "enroll" -d 'Enrol this machine with a vault: make its key, register it, pin the admins'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify sessions show search setup uninstall run allow deny hook-explain hook-route doctor enroll ship self-update admin completions man help" -f -a "ship" -d 'Ship every session\'s unshipped entries to the vault, encrypted'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify sessions show search setup uninstall run allow deny hook-explain hook-route doctor enroll ship self-update admin completions man help" -f -a "self-update" -d 'Replace nd7, nd7-exec and nd7-record with a newer signed release (release builds)'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify sessions show search setup uninstall run allow deny hook-explain hook-route doctor enroll ship self-update admin completions man help" -f -a "admin" -d 'Admin tools: keys, the recipients document, and reading a vault back'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify sessions show search setup uninstall run allow deny hook-explain hook-route doctor enroll ship self-update admin completions man help" -f -a "completions" -d 'Print a shell completion script'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify sessions show search setup uninstall run allow deny hook-explain hook-route doctor enroll ship self-update admin completions man help" -f -a "man" -d 'Print nd7\'s manual page, nd7(1), in roff (`nd7 man | man -l -`)'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify sessions show search setup uninstall run allow deny hook-explain hook-route doctor enroll ship self-update admin completions man help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and __fish_seen_subcommand_from admin" -f -a "org-key" -d 'Make the organisation\'s Ed25519 key; prints its fingerprint'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and __fish_seen_subcommand_from admin" -f -a "age-key" -d 'Make an admin\'s age identity; prints its age1... recipient'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and __fish_seen_subcommand_from admin" -f -a "sign-recipients" -d 'Print a recipients document listing RECIPIENTS, signed by the organisation key'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and __fish_seen_subcommand_from admin" -f -a "enroll-token" -d 'Print a one-time enrolment token for `nd7 enroll`, signed by the organisation key'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and __fish_seen_subcommand_from admin" -f -a "machines" -d 'List the machines a vault enrolled, by the token each used, held to the organisation\'s register of tokens'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and __fish_seen_subcommand_from admin" -f -a "sessions" -d 'List the sessions a vault holds: machine, session, last entry, held to the machines\' tallies'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and __fish_seen_subcommand_from admin" -f -a "pull" -d 'Fetch a session (or every one) from the vault, decrypt it, verify it, and compare it'
