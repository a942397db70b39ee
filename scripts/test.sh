#!/usr/bin/env bash
# Run the test suite (arguments go to pytest). "No tests collected" (pytest exit 5) is a failure here:
# a suite that silently runs nothing must not pass CI.
set -euo pipefail
cd "$(dirname "$0")/.."

rc=0
.venv/bin/pytest --durations=25 "$@" || rc=$?  # the slowest tests, to keep make test under 30 minutes
if [ "$rc" -eq 5 ]; then
    echo "test.sh: pytest collected no tests; failing" >&2
    exit 1
fi
exit "$rc"
