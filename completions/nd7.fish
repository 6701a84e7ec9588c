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
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "record" -d 'Append one Claude Code hook payload (read on stdin) to its session\'s log'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "verify" -d 'Walk a session\'s hash chain and say what a clean chain does and does not prove'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "setup" -d 'Register `nd7 record` in Claude Code\'s user settings, and install completions'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "run" -d 'Run PROGRAM and everything it starts under the sandbox floor'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "allow" -d 'Let a running session\'s Bash commands write under PATH, from the next command'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "deny" -d 'Take back a grant of `nd7 allow`, from the next command'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "hook-prefix" -d 'Reply to a PreToolUse hook so that a Bash command runs through nd7-exec'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "doctor" -d 'Say what is installed and working, and the command that fixes what is not'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "completions" -d 'Print a shell completion script'
complete -c nd7 -n "__fish_nd7_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c nd7 -n "__fish_nd7_using_subcommand record" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand verify" -l threads -d 'Threads used to check a large log (default: available cores, at most 2)' -r
complete -c nd7 -n "__fish_nd7_using_subcommand verify" -l all -d 'Verify every session under the state directory'
complete -c nd7 -n "__fish_nd7_using_subcommand verify" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand setup" -l settings -d 'Settings file to change [default: ~/.claude/settings.json]' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand setup" -l dry-run -d 'Print what would change and write nothing'
complete -c nd7 -n "__fish_nd7_using_subcommand setup" -l uninstall -d 'Remove nd7\'s entries (and only those) and the completions setup installed'
complete -c nd7 -n "__fish_nd7_using_subcommand setup" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand allow" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand deny" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand hook-prefix" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand doctor" -l settings -d 'Settings file to check [default: ~/.claude/settings.json]' -r -F
complete -c nd7 -n "__fish_nd7_using_subcommand doctor" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nd7 -n "__fish_nd7_using_subcommand completions" -s h -l help -d 'Print help'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify setup run allow deny hook-prefix doctor completions help" -f -a "record" -d 'Append one Claude Code hook payload (read on stdin) to its session\'s log'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify setup run allow deny hook-prefix doctor completions help" -f -a "verify" -d 'Walk a session\'s hash chain and say what a clean chain does and does not prove'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify setup run allow deny hook-prefix doctor completions help" -f -a "setup" -d 'Register `nd7 record` in Claude Code\'s user settings, and install completions'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify setup run allow deny hook-prefix doctor completions help" -f -a "run" -d 'Run PROGRAM and everything it starts under the sandbox floor'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify setup run allow deny hook-prefix doctor completions help" -f -a "allow" -d 'Let a running session\'s Bash commands write under PATH, from the next command'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify setup run allow deny hook-prefix doctor completions help" -f -a "deny" -d 'Take back a grant of `nd7 allow`, from the next command'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify setup run allow deny hook-prefix doctor completions help" -f -a "hook-prefix" -d 'Reply to a PreToolUse hook so that a Bash command runs through nd7-exec'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify setup run allow deny hook-prefix doctor completions help" -f -a "doctor" -d 'Say what is installed and working, and the command that fixes what is not'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify setup run allow deny hook-prefix doctor completions help" -f -a "completions" -d 'Print a shell completion script'
complete -c nd7 -n "__fish_nd7_using_subcommand help; and not __fish_seen_subcommand_from record verify setup run allow deny hook-prefix doctor completions help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
