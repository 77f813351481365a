#!/bin/sh
# tools/gen-cli-docs.sh AGENTBUS OUTDIR VERSION - the man page agentbus.1 and the bash
# completion agentbus.bash, generated at build time from the command's own help
# texts (`agentbus --help`, `agentbus CMD --help`), so they never drift from it.
set -eu
bin=$1
out=$2
version=$3
mkdir -p "$out"
# The commands: the lines of the "commands:" block of `agentbus --help`.
cmds=$("$bin" --help | sed -n '/^commands:/,/^$/p' | sed -n 's/^  \([a-z][a-z-]*\) .*/\1/p')
[ -n "$cmds" ] || { echo "gen-cli-docs: no commands in '$bin --help'" >&2; exit 1; }

# roff needs its own escapes: backslash, and a leading dot or quote.
roff() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }

man=$out/agentbus.1
{
    echo ".TH AGENTBUS 1 \"\" \"agentbus $version\" \"User Commands\""
    echo ".SH NAME"
    echo "agentbus \\- a message bus for multi-process AI-agent fabrics"
    echo ".SH SYNOPSIS"
    echo ".B agentbus"
    echo "[\\-\\-key FILE \\-\\-server\\-key FILE] COMMAND [options]"
    echo ".SH DESCRIPTION"
    echo ".nf"
    "$bin" --help | roff
    echo ".fi"
    echo ".SH COMMANDS"
    for c in $cmds; do
        echo ".SS $c"
        echo ".nf"
        "$bin" "$c" --help | roff
        echo ".fi"
    done
    echo ".SH ENVIRONMENT"
    echo ".TP"
    echo ".B AGENTBUS_BROKER"
    echo "the broker's command endpoint for client commands (HOST:PORT and :PORT too)"
    echo ".TP"
    echo ".B AGENTBUS_KEY, AGENTBUS_SERVER_KEY"
    echo "this client's CURVE secret key file, the broker's public key file or keys directory"
    echo ".TP"
    echo ".B NO_COLOR"
    echo "set and not empty: no colour in any output"
    echo ".SH EXIT STATUS"
    echo "0 success, 1 the work found a failure, 2 a usage error; a command that follows a"
    echo "run or streams until stopped has more (3 and 4 for how a run ended, 130 when stopped"
    echo "by SIGINT or SIGTERM): its help lists them."
} >"$man.tmp"
mv "$man.tmp" "$man"

comp=$out/agentbus.bash
{
    echo "# bash completion for agentbus $version (generated from its help texts)"
    echo "_agentbus() {"
    echo "    local cur=\${COMP_WORDS[COMP_CWORD]} cmd=\"\" i"
    echo "    for ((i = 1; i < COMP_CWORD; i++)); do"
    echo "        case \${COMP_WORDS[i]} in --key|--server-key) ((i++)) ;; -*) ;; *) cmd=\${COMP_WORDS[i]}; break ;; esac"
    echo "    done"
    echo "    local opts"
    echo "    case \$cmd in"
    echo "    \"\") opts=\"$(echo $cmds) help --key --server-key --help --version\" ;;"
    for c in $cmds; do
        o=$("$bin" "$c" --help | grep -o -- '--[a-z][a-z-]*' | sort -u | tr '\n' ' ')
        echo "    $c) opts=\"$o--version\" ;;"
    done
    echo "    help) opts=\"$(echo $cmds)\" ;;"
    echo "    esac"
    echo "    if [[ \$cur == -* || -z \$cmd || \$cmd == help ]]; then"
    echo "        COMPREPLY=(\$(compgen -W \"\$opts\" -- \"\$cur\"))"
    echo "    else"
    echo "        COMPREPLY=(\$(compgen -f -- \"\$cur\"))"
    echo "    fi"
    echo "}"
    echo "complete -F _agentbus agentbus"
} >"$comp.tmp"
mv "$comp.tmp" "$comp"
