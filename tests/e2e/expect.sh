#!/usr/bin/env bash
# expect.sh --exit CODE [--expect REGEX]... [--reject REGEX]... -- COMMAND...
# Runs COMMAND, prints its output, and fails unless it exited with CODE ("nonzero" accepts any
# failure) and its combined output matches every --expect and no --reject (grep -E).
set -u
want_exit=0; expects=(); rejects=()
while [ $# -gt 0 ]; do
  case "$1" in
    --exit) want_exit=$2; shift 2 ;;
    --expect) expects+=("$2"); shift 2 ;;
    --reject) rejects+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "expect.sh: unknown option $1" >&2; exit 64 ;;
  esac
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$@" >"$out" 2>&1
status=$?
cat "$out"
ok=1
if [ "$want_exit" = nonzero ]; then
  [ "$status" -ne 0 ] || { echo "expect.sh: exit status 0, wanted non-zero"; ok=0; }
elif [ "$status" -ne "$want_exit" ]; then
  echo "expect.sh: exit status $status, wanted $want_exit"; ok=0
fi
for re in "${expects[@]}"; do
  grep -Eq -- "$re" "$out" || { echo "expect.sh: output lacks /$re/"; ok=0; }
done
for re in "${rejects[@]}"; do
  ! grep -Eq -- "$re" "$out" || { echo "expect.sh: output has /$re/"; ok=0; }
done
[ $ok = 1 ] && echo "expect.sh: ok" && exit 0
exit 1
