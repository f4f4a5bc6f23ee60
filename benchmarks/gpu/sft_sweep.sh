#!/usr/bin/env bash
# SFT of the tiny Qwen3-VL on expert maze play, on the device machine (one H200), several shapes at once.
# Run from the repository root: OUT=<dir> bash benchmarks/gpu/sft_sweep.sh
# Each run writes $OUT/sft-<name>.tar.gz: the checkpoint directory with sft_report.json and the run's log.
set -u
OUT=${OUT:?set OUT to an output directory}
# The PIL image processor, as on the CPU hosts, so a checkpoint sees the same pixels here and there.
python3 -m pip uninstall -y -q torchvision >/dev/null 2>&1 || true
export PYTHONPATH=$PWD:$PWD/functions PYTHONUNBUFFERED=1 OMP_NUM_THREADS=3
MID="--hidden 128 --layers 4 --heads 4 --kv-heads 2 --head-dim 32 --intermediate 256 --vision-hidden 64"
LARGE="--hidden 256 --layers 6 --heads 8 --kv-heads 4 --head-dim 32 --intermediate 512 --vision-hidden 64"
run() {
  local name=$1; shift
  timeout "${LIMIT:-470}" python3 -m cluster_jobs.train.sft --out "/tmp/sft-$name" --workers 3 \
    --max-seconds "${MAX_SECONDS:-400}" "$@" >"/tmp/sft-$name.log" 2>&1
  cp "/tmp/sft-$name.log" "/tmp/sft-$name/"
  tar -C /tmp -czf "$OUT/sft-$name.tar.gz" "sft-$name"
}
run m7-small --maze-size 7 --train-mazes 1000 --steps 100000 --eval-every 100 &
run m7-small-lr3e3 --maze-size 7 --train-mazes 1000 --steps 100000 --eval-every 100 --lr 3e-3 &
run m7-small-bs128 --maze-size 7 --train-mazes 1000 --steps 100000 --eval-every 100 --lr 2e-3 --batch-size 128 &
run m7-mid --maze-size 7 --train-mazes 1000 --steps 100000 --eval-every 100 --lr 1e-3 $MID &
run m9-mid --maze-size 9 --train-mazes 1000 --steps 100000 --eval-every 100 --lr 1e-3 $MID &
run m9-large --maze-size 9 --train-mazes 1000 --steps 100000 --eval-every 100 --lr 5e-4 $LARGE &
wait
nvidia-smi --query-gpu=name,memory.used --format=csv
