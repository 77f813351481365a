#!/bin/sh
# ctest's python.pytest: the Python package's pytest suite (tests/python) against the
# agentbus binary named by AGENTBUS_BIN.  Fails, never skips, when a module is missing.
#   tests/python/run.sh PYTHON [pytest arguments]
set -eu
py=$1
shift
if ! "$py" -c 'import zmq, msgpack, pytest' 2>/dev/null; then
    echo "python.pytest: $py lacks zmq, msgpack or pytest:" \
        "install python3-zmq python3-msgpack python3-pytest (scripts/install-deps)" >&2
    exit 1
fi
export PYTHONDONTWRITEBYTECODE=1
exec "$py" -m pytest -q -p no:cacheprovider "$(dirname "$0")" "$@"
