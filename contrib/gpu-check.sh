#!/bin/sh
# The check of issue 35 on a machine with an NVIDIA GPU (a few minutes at
# most; the tests carry the rest with recorded nvidia-smi output, see
# docs/gpus.md):
#
#   1. what the driver says (nvidia-smi), to compare with what slothqueue read;
#   2. a `--gpus N` job (N = every GPU of the box) running PyTorch sees exactly
#      its GPUs: it prints CUDA_VISIBLE_DEVICES and torch.cuda.device_count()
#      and allocates on the GPU;
#   3. a second `--gpus 1` job waits while the first holds the GPUs, and
#      `show` says why; `status` lists the GPUs and who holds them;
#   4. the second runs once the first is done, on a GPU of its own.
#
# Usage: contrib/gpu-check.sh [path/to/slothqueue]   (default: target/release/slothqueue,
#        built with `cargo build --release -p slothqueue-cli`). Needs python3 with torch.
set -eu
SQ=${1:-target/release/slothqueue}
[ -x "$SQ" ] || { echo "no binary at $SQ: cargo build --release -p slothqueue-cli" >&2; exit 2; }
SQ=$(cd "$(dirname "$SQ")" && pwd)/$(basename "$SQ")
WORK=$(mktemp -d)
trap 'kill "$RUNNER" 2>/dev/null || true; rm -rf "$WORK"' EXIT
RUNNER=
cd "$WORK"
export SLOTHQUEUE_DB="$WORK/q.db"

echo "== nvidia-smi"
nvidia-smi --query-gpu=index,uuid,name,memory.used,memory.total,utilization.gpu --format=csv
nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv
N=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
echo "GPUs: $N"

PY='import torch, os, time; print(os.environ["CUDA_VISIBLE_DEVICES"], torch.cuda.device_count()); torch.ones(1, device="cuda"); print("allocated on", torch.cuda.get_device_name(0)); time.sleep(float(os.environ.get("HOLD", "0")))'
"$SQ" add --gpus "$N" -e HOLD=15 "python3 -c '$PY'"
"$SQ" add --gpus 1 "python3 -c '$PY'"

echo "== run --follow --slots 2"
"$SQ" run --follow --slots 2 > run.log 2>&1 &
RUNNER=$!
i=0
until "$SQ" show 1 | grep -q '^job #1: running'; do
  i=$((i + 1)); [ $i -lt 300 ] || { echo "job #1 never started" >&2; cat run.log; exit 1; }
  sleep 0.1
done
sleep 3
echo "== show 1 (holds)"
"$SQ" show 1 | sed -n '1,/^why\|^now/p'
echo "== show 2 (why it waits)"
"$SQ" show 2 | grep -E '^job|^gpus|^why'
echo "== status (the GPUs as slothqueue read them)"
"$SQ" status
"$SQ" show 2 | grep -q '^job #2: pending' || { echo "FAIL: job #2 did not wait" >&2; exit 1; }

i=0
until "$SQ" show 2 | grep -qE '^job #2: (done|failed)'; do
  i=$((i + 1)); [ $i -lt 1200 ] || { echo "job #2 never ended" >&2; cat run.log; exit 1; }
  sleep 0.1
done
kill "$RUNNER"; wait "$RUNNER" 2>/dev/null || true; RUNNER=
echo "== run's output"
cat run.log
for id in 1 2; do
  echo "== logs $id"
  "$SQ" logs "$id"
  "$SQ" show "$id" | grep -E '^job|claimed'
done
"$SQ" show 1 | grep -q '^job #1: done' && "$SQ" show 2 | grep -q '^job #2: done' \
  || { echo "FAIL: a job did not finish" >&2; exit 1; }
echo "OK"
