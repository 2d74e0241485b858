#!/usr/bin/env bash
# Set up (scripts/setup.sh --test), lint and type-check, then run every test suite: the core's and each plugin's, each in
# its own pytest process, and print one total line at the end.
#
# Extra arguments go to every pytest run (e.g. scripts/test.sh -x -k rope).
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}

scripts/setup.sh --test || { echo "setup failed" >&2; exit 1; }

status=0
echo "== ruff"
"$VENV/bin/ruff" check . || status=1
echo "== ruff format"
# Python files only: ruff also formats the code blocks of Markdown files, whose aligned comments are deliberate.
"$VENV/bin/ruff" format --check --extend-exclude '*.md' . || status=1
echo "== mypy (core)"
"$VENV/bin/mypy" ggml_core || status=1
# Every plugin's package, the example's included, in one mypy run (MYPY_SKIP: plugin folders to leave out).
MYPY_SKIP=()
PKGS=()
for pkg in plugins/*/ggml_*/ examples/*/ggml_*/; do
    [ -f "$pkg/__init__.py" ] || continue
    case " ${MYPY_SKIP[*]} " in *" ${pkg%/ggml_*/} "*) continue ;; esac
    PKGS+=("${pkg%/}")
done
echo "== mypy (plugins: ${PKGS[*]})"
"$VENV/bin/mypy" "${PKGS[@]}" || status=1

REPORTS=$(mktemp -d)
SUITES=(tests)
for p in plugins/*/tests; do
    [ -d "$p" ] && SUITES+=("$p")
done
for suite in "${SUITES[@]}"; do
    echo "== pytest $suite"
    name=$(echo "$suite" | tr '/' '_')
    "$VENV/bin/python" -m pytest "$suite" -q -rs --junitxml="$REPORTS/$name.xml" "$@"
    rc=$?
    if [ "$rc" = 5 ]; then
        echo "($suite: no tests collected)"
    elif [ "$rc" != 0 ]; then
        status=$rc
    fi
done

"$VENV/bin/python" - "$REPORTS" <<'PY'
import glob, sys, xml.etree.ElementTree as ET
tot = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
for f in glob.glob(sys.argv[1] + "/*.xml"):
    root = ET.parse(f).getroot()
    for s in ([root] if root.tag == "testsuite" else root.iter("testsuite")):
        for k in tot:
            tot[k] += int(s.get(k, 0))
failed = tot["failures"] + tot["errors"]
passed = tot["tests"] - failed - tot["skipped"]
print(f"total: {passed} passed, {failed} failed, {tot['skipped']} skipped")
PY
exit "$status"
