#!/usr/bin/env bash
# The 9x9 GRPO recipe on one GPU (research/RESULTS.md): one research.grpo_curve run per seed, side by side,
# each in out/$NAME/seed-N with its run.log. Held-out play every 10 steps, an adapter every 20.
# Run from the repository root:
#   SEEDS="0 1 2 3" bash research/gpu/grpo_9x9.sh [more grpo_curve flags; they come last and win]
# BASE (default: the recipe's SFT start) and NAME (default grpo-9x9-lin30) pick the start and the runs' folder.
# With STOP_AFTER=SECONDS each run ends after the first step past that time, with a checkpoint; the same line
# again resumes every run after its latest checkpoint.
set -u
SEEDS=${SEEDS:-0 1}
BASE=${BASE:-research/results/sft-m9-d4-body-r920-cpu/checkpoint}
NAME=${NAME:-grpo-9x9-lin30}
stop=()
[ -n "${STOP_AFTER:-}" ] && stop=(--stop-after "$STOP_AFTER")
# The PIL image processor, as on CPU hosts (without torchvision), so the start sees the same pixels on both.
python3 -m pip uninstall -y -q torchvision >/dev/null 2>&1 || true
export PYTHONPATH=$PWD:$PWD/functions${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
LM=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj
for seed in $SEEDS; do
  run=out/$NAME/seed-$seed
  mkdir -p "$run"
  python3 -m research.grpo_curve --base-model "$BASE" --maze-size 9 --steps 30 --eval-interval 10 \
    --ckpt-interval 20 --batch-mazes 16 --mini-batch-mazes 8 --lr 1.5e-3 --lr-scheduler linear --epochs 2 \
    --kl-coef 0.05 --lora-targets $LM --turn-cost 0.02 --float32 --seed "$seed" ${stop[@]+"${stop[@]}"} \
    --out "$run" "$@" >>"$run/run.log" 2>&1 &
done
wait
for seed in $SEEDS; do
  echo "seed $seed:"
  grep -a -h "SFT start\|held-out\|step [0-9]* of\|Error" "out/$NAME/seed-$seed/run.log" | tail -6
done
