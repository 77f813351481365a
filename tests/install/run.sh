#!/bin/sh
# tests/install/run.sh BUILD_DIR SOURCE_DIR [CFLAGS...] - install the build into
# a temporary prefix and build and run tests/install/client.c against it twice,
# as a user would: once with pkg-config, once with find_package(agentbus). The
# client talks to the installed `agentbus broker`, started here on loopback
# ports it picks and stopped by pid. Extra arguments are compiler flags the
# build itself was made with (the sanitizers), so the client links the same way.
# Exits 0 when both builds run, else prints what failed and exits 1.
set -eu
build=$1 src=$2
shift 2
flags="$*"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/agentbus-install.XXXXXX")
pid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "install test: $*" >&2; exit 1; }

prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || fail "cmake --install failed: $(cat "$tmp/install.log")"
libdir=$(ls -d "$prefix"/lib* | head -1)
for f in bin/agentbus include/agentbus/agentbus.h include/agentbus/client.h \
    include/agentbus/plugin.h include/agentbus/broker.h; do
    [ -e "$prefix/$f" ] || fail "not installed: $f"
done
for f in libagentbus.so libagentbus.so.3 libagentbus-proto.so.3 libagentbus-broker.so.3 \
    libagentbus.a libagentbus-proto.a agentbus/libagentbus-sqlite.so pkgconfig/agentbus.pc \
    cmake/agentbus/agentbusConfig.cmake; do
    [ -e "$libdir/$f" ] || fail "not installed: $(basename "$libdir")/$f"
done
[ -e "$prefix/include/agentbus/store.h" ] && fail "the private store.h was installed"
# No installed header includes a header of another library.
if grep -l -E '#include <(msgpack|jansson|zmq|sqlite3)\.h>' "$prefix"/include/agentbus/*.h; then
    fail "an installed header includes a third-party header (above)"
fi

# The man page and the bash completion, made from the help texts.
man=$prefix/share/man/man1/agentbus.1
comp=$prefix/share/bash-completion/completions/agentbus
[ -e "$man" ] || fail "not installed: share/man/man1/agentbus.1"
[ -e "$comp" ] || fail "not installed: share/bash-completion/completions/agentbus"
for c in $("$prefix/bin/agentbus" --help | sed -n '/^commands:/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p'); do
    grep -q "^\.SS $c\$" "$man" || fail "the man page has no section for '$c'"
done
words=$(bash -c ". '$comp'; COMP_WORDS=(agentbus sta); COMP_CWORD=1; _agentbus; echo \${COMPREPLY[*]}")
[ "$words" = "status" ] || fail "completing 'agentbus sta' gave '$words', not 'status'"
words=$(bash -c ". '$comp'; COMP_WORDS=(agentbus status --wa); COMP_CWORD=2; _agentbus; echo \${COMPREPLY[*]}")
[ "$words" = "--watch" ] || fail "completing 'agentbus status --wa' gave '$words', not '--watch'"

# As a service: the unit names the installed command and settings file.
unit=$prefix/lib/systemd/system/agentbus-broker.service
conf=$prefix/etc/agentbus/broker.conf
[ -e "$unit" ] || fail "not installed: lib/systemd/system/agentbus-broker.service"
[ -e "$conf" ] || fail "not installed: etc/agentbus/broker.conf"
grep -q "^ExecStart=$prefix/bin/agentbus broker --config $conf\$" "$unit" ||
    fail "the unit does not run the installed broker with $conf: $(grep ExecStart "$unit")"
grep -q '^Type=notify$' "$unit" || fail "the unit does not wait for the broker's readiness"

# The broker, as installed, on the installed settings (the flags win over the file).
# Its output file exists before the broker starts: the redirection below happens in the
# child, and a sed of a file not yet made would end this script (set -e).
: >"$tmp/broker.out"
"$prefix/bin/agentbus" broker --config "$conf" --data "$tmp/data" --cmd 'tcp://127.0.0.1:*' \
    --events 'tcp://127.0.0.1:*' >"$tmp/broker.out" 2>"$tmp/broker.err" &
pid=$!
ep=""
for _ in $(seq 1 200); do
    ep=$(sed -n 's/^agentbus broker ready cmd=\([^ ]*\) .*/\1/p' "$tmp/broker.out")
    [ -n "$ep" ] && break
    kill -0 "$pid" 2>/dev/null || fail "the installed broker exited: $(cat "$tmp/broker.err")"
    sleep 0.05
done
[ -n "$ep" ] || fail "the installed broker did not say ready"

export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# 1. pkg-config
export PKG_CONFIG_PATH="$libdir/pkgconfig"
[ "$(pkg-config --modversion agentbus)" = "$(sed -n 's/^project(agentbus VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")" ] ||
    fail "pkg-config --modversion agentbus is not the project's version"
# shellcheck disable=SC2046,SC2086
cc -std=c11 -Wall -Werror $flags $(pkg-config --cflags agentbus) "$src/tests/install/client.c" \
    -o "$tmp/client-pc" $(pkg-config --libs agentbus) || fail "build with pkg-config failed"
"$tmp/client-pc" "$ep" r-pkgconfig || fail "the pkg-config build did not run"
# -lagentbus alone is enough (libagentbus.so names the protocol library too)
# shellcheck disable=SC2086
cc -std=c11 $flags -I"$prefix/include" "$src/tests/install/client.c" -o "$tmp/client-l" \
    -L"$libdir" -lagentbus || fail "build with -lagentbus alone failed"
"$tmp/client-l" "$ep" r-lagentbus >/dev/null || fail "the -lagentbus build did not run"
# a program embedding a broker: agentbus-broker with the client library
# shellcheck disable=SC2046,SC2086
cc -std=c11 -Wall -Werror $flags $(pkg-config --cflags agentbus-broker agentbus) \
    "$src/tests/install/embed.c" -o "$tmp/embed-pc" $(pkg-config --libs agentbus-broker agentbus) ||
    fail "build of the embedding program with pkg-config failed"
"$tmp/embed-pc" "$tmp/embed-data-pc" || fail "the embedding program (pkg-config) did not run"
# 2. find_package
cmake -S "$src/tests/install/project" -B "$tmp/proj" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCLIENT_SOURCE="$src/tests/install/client.c" -DEMBED_SOURCE="$src/tests/install/embed.c" \
    -DCMAKE_C_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" >"$tmp/proj.log" 2>&1 ||
    fail "find_package(agentbus) configure failed: $(tail -20 "$tmp/proj.log")"
cmake --build "$tmp/proj" >>"$tmp/proj.log" 2>&1 || fail "find_package build failed: $(tail -20 "$tmp/proj.log")"
"$tmp/proj/client" "$ep" r-cmake || fail "the find_package build did not run"
"$tmp/proj/embed" "$tmp/embed-data-cmake" || fail "the embedding program (find_package) did not run"
echo "install test: pkg-config, -lagentbus and find_package builds of a client and of a program embedding a broker ran against $prefix"
