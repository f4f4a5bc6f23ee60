#!/usr/bin/env bash
# The GPU reproduction: GRPO from a 9x9 SFT start at the reference's scale (the fixed 64 9x9 mazes,
# held-out play every 10 steps, an adapter every 20), one research.grpo_curve run per seed, side by
# side on the device machine (one H200). Each call trains for about STOP_AFTER seconds and ends with a
# checkpoint; the next call, with out/$NAME carried back, resumes every run where it stopped.
# Run from the repository root:
#   OUT=<dir> STOP_AFTER=450 SEEDS="0 1" bash research/gpu/grpo_9x9.sh [more grpo_curve flags]
# BASE (default: the committed 9x9 start) and NAME (default grpo-9x9) pick the start and the runs'
# directory; extra flags come after the setting's and win (e.g. --train-max-turns 61 --lr 3e-3).
# FROM (optional) forks each seed's run from a parent curve's latest checkpoint (grpo_curve --fork-from):
# the parent of seed N is the folder ${FROM}N, e.g. FROM=benchmarks/results/grpo-9x9-body-r920-tc-gpu/f32-seed-
# forks seed 1 from .../f32-seed-1. The same line resumes the forks in the next call.
# Rollouts sample at the run spec's temperature, 0.7, as on the cluster, since the twelfth session; the
# runs committed before it sampled at 1.0 and resume with --temperature 1.0.
# Writes $OUT/$NAME.tar.gz (in 15 MiB parts when larger; see packing.sh; only each run's latest checkpoint) (out/$NAME: each run's curve, metrics, log, checkpoints and adapters).
set -u
OUT=${OUT:?set OUT to an output directory}
STOP_AFTER=${STOP_AFTER:-450}
SEEDS=${SEEDS:-0 1}
BASE=${BASE:-local_stack/models/tiny-qwen3-vl-maze9}
NAME=${NAME:-grpo-9x9}
# The PIL image processor, as on the CPU hosts, so the start sees the same pixels here and there.
python3 -m pip uninstall -y -q torchvision >/dev/null 2>&1 || true
export PYTHONPATH=$PWD:$PWD/functions${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
source research/gpu/packing.sh
LM=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj
for seed in $SEEDS; do
  run=out/$NAME/seed-$seed
  mkdir -p "$run"
  fork=()
  if [ -n "${FROM:-}" ]; then
    ckpts=${FROM}$seed/shared/maze-rl/grpo-curve/ckpts
    fork=(--fork-from "$ckpts/global_step_$(latest_checkpoint_step "$ckpts")")
  fi
  python3 -m research.grpo_curve --base-model "$BASE" --maze-size 9 \
    --steps 100 --eval-interval 10 --ckpt-interval 20 --batch-mazes 16 --mini-batch-mazes 8 --lr 1.5e-3 \
    --epochs 2 --kl-coef 0.05 --lora-targets $LM --seed "$seed" --stop-after "$STOP_AFTER" --out "$run" "${fork[@]}" "$@" \
    >>"$run/run.log" 2>&1 &
done
wait
for seed in $SEEDS; do
  keep_latest_checkpoint "out/$NAME/seed-$seed/shared/maze-rl/grpo-curve/ckpts"
done
pack_out "$NAME" "$NAME"
for seed in $SEEDS; do
  echo "seed $seed: $(grep -a -h 'SFT start\|forked at' out/$NAME/seed-$seed/run.log | tail -2 | tr '\n' ' ')"
  grep -a -h "step [0-9]*/[0-9]*\|held-out\|step [0-9]* of\|Error" "out/$NAME/seed-$seed/run.log" | tail -14 | cut -c1-260
done
