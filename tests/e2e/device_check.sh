#!/usr/bin/env bash
# device_check.sh BUILD_DIR: the GPU machine's kit still builds and works, here on the CPU, in that
# machine's conditions as far as a CPU shows them (docs/device-kit.md):
# - tools/device-kit stages the kit from BUILD_DIR (failing above 60 MiB) and, as root, proves that
#   the kit's mpirun and lftrain train with the system Open MPI and HDF5, ssh and rsh hidden;
# - tools/device-check --make-references --cpu makes the --cpu rows' references into the kit, as
#   tools/device-kit --references does for the GPU rows; a check with other settings must name
#   the command that makes them;
# - tools/device-check --cpu runs its checks with the kit's binaries, as root inside the same
#   hidden namespace (tools/device-kit --hidden), within its budget (a row SKIPPED (budget)
#   fails this test), and what comes back of it is at most 8 files, none deeper than $OUT/a/b/.
set -u
build=$1
out=$build/test-output/device-check
kit=$out/kit
rm -rf "$out"
mkdir -p "$out"
fail() { echo "device_check: FAIL: $*"; exit 1; }
hidden=()
prove=
if [ "$(id -u)" = 0 ] && unshare -m true 2> /dev/null; then
  prove=--prove
  hidden=(tools/device-kit --out "$kit" --hidden --)
else
  echo "device_check: not root (or no mount namespaces): the relocation is not proved, nothing hidden"
fi

# A build without CUDA (a machine without the toolkit) is a CPU-only kit, which the kit refuses
# unless told: this check is about the kit's CPU side.
cpu_build=
grep -q '^#define LFT_HAS_CUDA 1' "$build/include/lft/build_config.h" || cpu_build=--allow-cpu-build
tools/device-kit --build "$build" --out "$kit" $prove $cpu_build > "$out/kit.log" 2>&1
status=$?
grep '^device-kit:' "$out/kit.log"
[ $status = 0 ] || { tail -30 "$out/kit.log"; fail "tools/device-kit"; }

tools/device-check --make-references --cpu --kit "$kit" > "$out/references.log" 2>&1 \
  || { cat "$out/references.log"; fail "tools/device-check --make-references --cpu"; }
tail -1 "$out/references.log"
# references made with other settings are not used, and the report says how to make them (a
# budget of 1 s skips every run)
tools/device-check --cpu --kit "$kit" --only 2 --steps 7 --budget 1 --out "$out/other-steps" > /dev/null 2>&1
grep -q "^FAIL    CPU references: .*made with other settings.*device-check --make-references --cpu --steps 7" \
  "$out/other-steps/report.txt" || { cat "$out/other-steps/report.txt"; fail "references of other settings were not refused"; }

start=$(date +%s)
"${hidden[@]}" tools/device-check --cpu --kit "$kit" --out "$out/report" --work "$out/work"
status=$?
echo "device_check: device-check --cpu took $(( $(date +%s) - start )) s"
report=$out/report
files=$(find "$report" -type f | wc -l)
[ "$files" -le 8 ] && [ -z "$(find "$report" -mindepth 4)" ] \
  || { find "$report"; fail "$report holds $files files or some deeper than two folders (a device call brings back 8)"; }
for f in report.txt report.json logs.tar.gz; do [ -s "$report/$f" ] || fail "no $f in $report"; done
tar tzf "$report/logs.tar.gz" > "$out/logs.list" || fail "logs.tar.gz is unreadable"
grep -q '^logs/preflight-train.log$' "$out/logs.list" && grep -q '/trainer_log.jsonl$' "$out/logs.list" \
  || fail "logs.tar.gz lacks the runs' logs or trainer logs"
! grep "SKIPPED (budget)" "$report/report.txt" || fail "the --cpu checks no longer fit their budget"
[ $status = 0 ] || fail "tools/device-check --cpu (logs in $out/work/logs)"
echo "device_check: ok"
