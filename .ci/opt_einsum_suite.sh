#!/usr/bin/env bash
# opt_einsum 3.4.0's own test suite (from its sdist) run against cgx: cgx's contract,
# contract_path, contract_expression and shared_intermediates stand in for opt_einsum's
# (.ci/opt_einsum_suite/conftest.py, which also deselects the tests that do not apply;
# docs/TESTING.md gives each one's reason). Every selected test must pass: the summary
# line (passed, skipped, deselected) is printed, and written to $OE_SUITE_REPORT if set.
#
# Usage: .ci/opt_einsum_suite.sh [python]   (a Python with cgx, pytest and opt_einsum 3.4.0)
set -euo pipefail
python="${1:-python3}"
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$python" -m pip download --quiet --no-deps --no-binary :all: opt_einsum==3.4.0 -d "$work"
tar xzf "$work/opt_einsum-3.4.0.tar.gz" -C "$work"
mkdir "$work/suite"
# The test modules alone, out of their package: they import the installed opt_einsum
# (version-checked by the conftest), never the sdist's copy.
cp "$work"/opt_einsum-3.4.0/opt_einsum/tests/test_*.py "$work/suite/"
cp "$root/.ci/opt_einsum_suite/conftest.py" "$work/suite/"
cd "$work/suite"
# No timeout plugin settings of the repository here: the suite's own pytest defaults.
status=0
"$python" -m pytest -q -p no:cacheprovider -o addopts="" --timeout=600 . >"$work/log" 2>&1 || status=$?
grep -E '^(FAILED|ERROR) ' "$work/log" | head -n 50 || true
summary="$(tail -n 1 "$work/log")"
echo "opt_einsum 3.4.0 suite against cgx: $summary"
if [ -n "${OE_SUITE_REPORT:-}" ]; then echo "$summary" >"$OE_SUITE_REPORT"; fi
exit "$status"
