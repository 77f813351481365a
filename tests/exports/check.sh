#!/bin/sh
# tests/exports/check.sh LIST LIBRARY - the dynamic symbols LIBRARY defines
# must be exactly the committed LIST (one name per line, sorted), and every one
# must start with ab_: nothing leaks from a library by accident, and nothing
# of the API goes missing. To accept a deliberate change, regenerate LIST with
#   nm -D --defined-only LIBRARY | awk '$2 ~ /[TDBRVWi]/ {print $3}' | sort > LIST
set -eu
list=$1 lib=$2
got=$(mktemp)
trap 'rm -f "$got"' EXIT
nm -D --defined-only "$lib" | awk '$2 ~ /[TDBRVWi]/ {print $3}' | sort >"$got"
bad=$(grep -v '^ab_' "$got" || true)
if [ -n "$bad" ]; then
    echo "$lib exports symbols without the ab_ prefix:" >&2
    echo "$bad" >&2
    exit 1
fi
if ! diff -u "$list" "$got" >&2; then
    echo "$lib: its exported symbols (+) differ from $list (-)" >&2
    exit 1
fi
echo "$lib: $(wc -l <"$got") exported symbols, as listed"
