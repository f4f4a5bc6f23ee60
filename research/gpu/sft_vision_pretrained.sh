#!/usr/bin/env bash
# One SFT run of the tiny Qwen3-VL with vision-tower pretraining, alone on one GPU (several runs at once
# contend for it). The defaults make the 7x7 start; later flags win (research/RESULTS.md has the 9x9 ones).
# Run from the repository root:
#   NAME=sft-m7 bash research/gpu/sft_vision_pretrained.sh [more research.sft flags]
# The run lives in out/$NAME, its log in out/$NAME.log. With MAX_SECONDS=SECONDS it stops on that time limit
# and keeps its training state in out/$NAME/resume/; the same line again goes on from there.
set -u
NAME=${NAME:-sft-m7}
run=out/$NAME
resume=()
[ -d "$run/resume" ] && resume=(--resume)
limit=()
[ -n "${MAX_SECONDS:-}" ] && limit=(--max-seconds "$MAX_SECONDS")
# The PIL image processor, as on CPU hosts (without torchvision), so a checkpoint sees the same pixels on both.
python3 -m pip uninstall -y -q torchvision >/dev/null 2>&1 || true
export PYTHONPATH=$PWD:$PWD/functions${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 OMP_NUM_THREADS=8
mkdir -p out
python3 -m research.sft --out "$run" ${resume[@]+"${resume[@]}"} --workers "${WORKERS:-12}" ${limit[@]+"${limit[@]}"} \
  --maze-size 7 --train-mazes 1000 --eval-every 50 --eval-from-exact 0.75 --lr 1e-3 --batch-size 64 \
  --vision-pretrain-steps 600 "$@" >>"$run.log" 2>&1
grep -a "step\|encoded\|error\|kept\|stopped\|resumed" "$run.log" | tail -40
