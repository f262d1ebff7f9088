#!/usr/bin/env bash
# slurm_multinode.sh BUILD_DIR: slurm/multinode.sbatch on a real two-node Slurm (tools/slurm-local
# with LFT_SLURM_HOSTS=2: slurmctld plus one slurmd in each of two namespace hosts), 2 nodes x 2
# ranks, the ranks meeting through PMIx:
#   (a) --check of fsdp2 with HSDP: world and placement host by host, every dp_shard group
#       inside one node,
#   (b) fsdp2 HSDP (dp_shard inside a node, dp_replicate across) and megatron (tp inside a node,
#       pp across) train with the same losses as the same layout on one host under mpirun.
# The script is the repository's, less its --gpus-per-node line (these nodes have no GPUs, as its
# comment says to do on a CPU cluster). Exit 77 (skipped) where Slurm or namespaces cannot be set up.
set -u
cd "$(dirname "$0")/../.." || exit 1
build=$1
case "$build" in /*) ;; *) build="$PWD/$build" ;; esac
say() { echo "slurm_multinode: $*"; }
fail() { say "FAILED: $*"; exit 1; }
skip() { say "SKIPPED: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "a local Slurm with namespace hosts needs root"

tmp=$(mktemp -d /tmp/lft-slurm-multinode-XXXXXX)
chmod 755 "$tmp"
export LFT_SLURM_HOSTS=2 LFT_SLURM_DIR="$tmp/slurm" LFT_SLURM_PORT=6837
export LFT_NETNS_PREFIX=lftsl LFT_NETNS_SUBNET=10.80.0 LFT_NETNS_BRIDGE=lftslbr0 LFT_NETNS_DIR="$tmp/netns"
cleanup() { tools/slurm-local stop >/dev/null 2>&1; tools/netns-hosts down >/dev/null 2>&1; rm -rf "$tmp"; }
trap cleanup EXIT
if ! timeout 600 tools/slurm-local start >"$tmp/start.out" 2>"$tmp/start.err"; then
  cat "$tmp/start.err"
  skip "tools/slurm-local start (2 namespace hosts) failed: no Slurm to test with"
fi
cat "$tmp/start.err"
eval "$(grep '^export SLURM_CONF=' "$tmp/start.out")"
export SLURM_CONF OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
timeout 30 srun --mpi=list 2>&1 | grep -qw pmix || skip "this srun has no PMIx plugin (srun --mpi=list)"
h1=${LFT_NETNS_PREFIX}1 h2=${LFT_NETNS_PREFIX}2

sed '/^#SBATCH --gpus-per-node/d' slurm/multinode.sbatch >"$tmp/multinode.sbatch"
# job NAME CONFIG ARGS...: sbatch --wait the script on 2 nodes x 2 tasks; the job's output in $tmp/NAME.out.
job() {
  local name=$1 config=$2
  shift 2
  CONFIG=$config LFTRAIN_BIN="$build/lftrain" timeout 600 sbatch --wait --parsable --job-name="lft-$name" \
    --nodes=2 --ntasks-per-node=2 --cpus-per-task=1 --time=10 --output="$tmp/$name.out" \
    "$tmp/multinode.sbatch" "$@" >"$tmp/$name.sbatch" 2>&1
  local rc=$?
  cat "$tmp/$name.sbatch"
  [ $rc = 0 ] || { cat "$tmp/$name.out" 2>/dev/null; fail "($name) sbatch exited $rc"; }
}
expect() { grep -Fq -- "$2" "$1" || { tail -25 "$1"; fail "$1 lacks '$2'"; }; }

common=(logging_steps=1 lr_scheduler_type=constant warmup_steps=0 bf16=false save_strategy=no)
fsdp2=(mesh.dp_replicate=2 mesh.dp_shard=2 bf16=false 'dist_config.mixed_precision="fp32"')
megatron=(mesh.tp=2 mesh.pp=2 gradient_accumulation_steps=2)

say "(a) LFTRAIN_FLAGS=--check sbatch --nodes=2 --ntasks-per-node=2 multinode.sbatch (fsdp2 HSDP)"
LFTRAIN_FLAGS=--check job check inputs/fsdp2.toml "${fsdp2[@]}" output_dir="$tmp/check"
cat "$tmp/check.out"
expect "$tmp/check.out" "launcher   srun (PMIx)"
expect "$tmp/check.out" "world      4 rank(s) on 2 node(s): $h1 x2, $h2 x2"
expect "$tmp/check.out" "  $h1  ranks 0-1 (pp 0, dp_replicate 0, dp_shard 0-1, cp 0, tp 0)"
expect "$tmp/check.out" "  $h2  ranks 2-3 (pp 0, dp_replicate 1, dp_shard 0-1, cp 0, tp 0)"
expect "$tmp/check.out" "dp_shard groups (2 ranks each): each inside one host"
expect "$tmp/check.out" "check: ok"

for engine in fsdp2 megatron; do
  if [ $engine = fsdp2 ]; then args=(inputs/fsdp2.toml "${fsdp2[@]}"); else args=(inputs/megatron.toml "${megatron[@]}"); fi
  say "(b) $engine: 10 steps on 2 nodes under Slurm, and on one host under mpirun"
  job "$engine" "${args[0]}" "${args[@]:1}" "${common[@]}" max_steps=10 output_dir="$tmp/$engine-slurm"
  grep -E "placement|groups|^  $LFT_NETNS_PREFIX" "$tmp/$engine.out"
  timeout 300 mpirun --oversubscribe --bind-to none -np 4 "$build/lftrain" "${args[@]}" "${common[@]}" max_steps=10 \
    output_dir="$tmp/$engine-one" >"$tmp/$engine-one.log" 2>&1 || { tail -20 "$tmp/$engine-one.log"; fail "(b) $engine on one host"; }
  python3 tests/e2e/compare_logs.py "$tmp/$engine-one/trainer_log.jsonl" "$tmp/$engine-slurm/trainer_log.jsonl" 1 10 0 ||
    fail "(b) $engine: the losses on 2 Slurm nodes differ from one host's"
done
expect "$tmp/megatron.out" "tp groups (2 ranks each): each inside one host"
say "ok"
