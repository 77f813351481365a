#!/bin/sh
# self_contained.sh SOURCE_DIR - fails when a document, source file or script
# of the repository sends its reader to a file outside the repository: the
# team's design page or AG-UI notes, or anything under a "shared" directory
# next to the checkout. What those pages held is restated in the repository
# (docs/ARCHITECTURE.md: "The promises", "Processes, sockets and threads",
# "AG-UI 1.0: where the event rules come from"); point there instead.
#
# Text files only (grep -I); build directories, .git, the fuzz corpora
# (generated inputs) and node_modules (installed npm packages) are not
# searched. The patterns are split in two so that this file does not match
# itself.
set -eu
root=${1:?usage: self_contained.sh SOURCE_DIR}
design='DESIGN''\.md'
shared='\.\./shared''/|/work/shared''/'
agui='agui-1\.0''\.md'
hits=$(cd "$root" && grep -rInE "$design|$shared|$agui" \
    --exclude-dir=.git --exclude-dir='build*' --exclude-dir=corpus --exclude-dir=node_modules . || true)
if [ -n "$hits" ]; then
    echo "references to files outside the repository (point to docs/ARCHITECTURE.md instead):"
    echo "$hits"
    exit 1
fi
echo "self-contained: no reference to files outside the repository"
