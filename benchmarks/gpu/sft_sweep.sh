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
  timeout "${LIMIT:-470}" python3 -m cluster_jobs.train.sft --out "/tmp/sft-$name" --workers 4 \
    --max-seconds "${MAX_SECONDS:-400}" "$@" >"/tmp/sft-$name.log" 2>&1
  cp "/tmp/sft-$name.log" "/tmp/sft-$name/"
  tar -C /tmp -czf "$OUT/sft-$name.tar.gz" "sft-$name"
}
# Next sweep (docs/learning.md, "Next steps"): fewer runs at once (the six-run sweep was CPU-bound at
# ~1 step/s each), larger batches, a deeper vision tower; train_exact must leave the 0.72 plateau.
run m7-small-bs256 --maze-size 7 --train-mazes 2000 --steps 100000 --eval-every 100 --lr 2e-3 --batch-size 256 &
run m7-vision2 --maze-size 7 --train-mazes 2000 --steps 100000 --eval-every 100 --lr 2e-3 --batch-size 256 --vision-depth 2 --vision-hidden 64 &
run m7-mid-bs256 --maze-size 7 --train-mazes 2000 --steps 100000 --eval-every 100 --lr 1e-3 --batch-size 256 $MID &
wait
nvidia-smi --query-gpu=name,memory.used --format=csv
