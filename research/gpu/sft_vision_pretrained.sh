#!/usr/bin/env bash
# One SFT run of the tiny Qwen3-VL with vision-tower pretraining, alone on the device machine (one H200):
# several runs at once contend for the GPU and ran at ~0.7 steps/s each (docs/learning.md, sweep 3).
# Run from the repository root: OUT=<dir> bash research/gpu/sft_vision_pretrained.sh [more sft flags, e.g. --wall-bumps]
# (a later flag wins: `--maze-size 9` with NAME=sft-m9-vp makes the 9x9 start).
# The run lives in out/$NAME (default sft-m7-vp), its log in out/$NAME.log. When MAX_SECONDS stops it
# before its steps, it keeps its training state in out/$NAME/resume/; the same command again, with
# out/$NAME and out/$NAME.log carried back (or still there on a warm machine), goes on from there.
# Writes $OUT/$NAME.tar.gz (in 15 MiB parts when larger; see packing.sh): out/$NAME (checkpoint,
# sft_report.json, resume/) and out/$NAME.log.
set -u
OUT=${OUT:?set OUT to an output directory}
NAME=${NAME:-sft-m7-vp}
run=out/$NAME
resume=()
[ -d "$run/resume" ] && resume=(--resume)
# The PIL image processor, as on the CPU hosts, so a checkpoint sees the same pixels here and there.
python3 -m pip uninstall -y -q torchvision >/dev/null 2>&1 || true
export PYTHONPATH=$PWD:$PWD/functions${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 OMP_NUM_THREADS=8
mkdir -p out
timeout "${LIMIT:-500}" python3 -m research.sft --out "$run" ${resume[@]+"${resume[@]}"} --workers "${WORKERS:-12}" \
  --max-seconds "${MAX_SECONDS:-430}" --maze-size 7 --train-mazes 1000 --eval-every 50 \
  --eval-from-exact 0.75 --lr 1e-3 --batch-size 64 --vision-pretrain-steps 600 "$@" >>"$run.log" 2>&1
source research/gpu/packing.sh
pack_out "$NAME" "$NAME" "$NAME.log"
grep -a "step\|encoded\|error\|kept\|stopped\|resumed" "$run.log" | tail -40
