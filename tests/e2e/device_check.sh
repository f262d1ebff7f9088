#!/usr/bin/env bash
# device_check.sh BUILD_DIR: the GPU machine's kit still builds and works, here on the CPU.
# tools/device-kit stages the kit from BUILD_DIR (failing above 60 MiB) and, as root, proves that
# the kit's mpirun and lftrain train with the system Open MPI and HDF5 hidden; then
# tools/device-check --cpu runs its checks with the kit's binaries (docs/device-kit.md).
set -u
build=$1
out=$build/test-output/device-check
rm -rf "$out"
mkdir -p "$out"
prove=
if [ "$(id -u)" = 0 ] && unshare -m true 2> /dev/null; then
  prove=--prove
else
  echo "device_check: not root (or no mount namespaces): the relocation is not proved"
fi
tools/device-kit --build "$build" --out "$out/kit" $prove > "$out/kit.log" 2>&1
status=$?
grep '^device-kit:' "$out/kit.log"
[ $status = 0 ] || { tail -30 "$out/kit.log"; echo "device_check: FAIL: tools/device-kit"; exit 1; }
tools/device-check --cpu --kit "$out/kit" --out "$out/report" \
  || { echo "device_check: FAIL (logs in $out/report/logs)"; exit 1; }
echo "device_check: ok"
