#!/usr/bin/env bash
# SFT of the tiny Qwen3-VL on expert maze play, on the device machine (one H200), several shapes at once.
# Run from the repository root: OUT=<dir> bash research/gpu/sft_sweep.sh
# Each run writes $OUT/sft-<name>.tar.gz: the checkpoint directory with sft_report.json and the run's log.
set -u
OUT=${OUT:?set OUT to an output directory}
# The PIL image processor, as on the CPU hosts, so a checkpoint sees the same pixels here and there.
python3 -m pip uninstall -y -q torchvision >/dev/null 2>&1 || true
export PYTHONPATH=$PWD:$PWD/functions PYTHONUNBUFFERED=1 OMP_NUM_THREADS=2
MID="--hidden 128 --layers 4 --heads 4 --kv-heads 2 --head-dim 32 --intermediate 256"
run() {
  local name=$1; shift
  timeout "${LIMIT:-470}" python3 -m research.sft --out "/tmp/sft-$name" --workers 2 \
    --max-seconds "${MAX_SECONDS:-400}" "$@" >"/tmp/sft-$name.log" 2>&1
  cp "/tmp/sft-$name.log" "/tmp/sft-$name/"
  tar -C /tmp -czf "$OUT/sft-$name.tar.gz" "sft-$name"
}
# Sweep 3 (docs/learning.md): the 0.71 plateau is "on target + previous move"; reading a wall next to
# the agent needs the vision tower to mix neighbouring patches, so this sweep varies the vision tower.
# Held-out play waits for 0.8 exact answers (above the plateau) so the steps go to training.
COMMON="--maze-size 7 --train-mazes 1000 --steps 100000 --eval-every 250 --eval-from-exact 0.8 --batch-size 128"
V2="--vision-depth 2 --vision-hidden 64"
run m7-control $COMMON --lr 1e-3 &
run m7-v2 $COMMON --lr 1e-3 $V2 &
run m7-v2-lr3e-3 $COMMON --lr 3e-3 $V2 &
run m7-v3-wide $COMMON --lr 1e-3 --vision-depth 3 --vision-hidden 128 &
run m7-v2-mid $COMMON --lr 1e-3 $V2 $MID &
run m7-v2-d50 $COMMON --lr 1e-3 $V2 --detour-prob 0.5 &
wait
nvidia-smi --query-gpu=name,memory.used --format=csv
