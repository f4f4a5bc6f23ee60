#!/usr/bin/env bash
# GRPO sweep 1 from the committed 7x7 SFT start: twelve benchmarks.grpo_curve runs, one CPU core each, on the
# device machine's 16 cores (the GPU stays free for one SFT run beside it). Run from the repository root:
#   OUT=<dir> SECONDS_EACH=540 bash benchmarks/gpu/grpo_sweep_7x7.sh
# Writes $OUT/grpo-sweep-7x7.tar.gz (every run's log, metrics and curve) and prints one line per run.
set -u
OUT=${OUT:?set OUT to an output directory}
export PYTHONPATH=$PWD:$PWD/functions${PYTHONPATH:+:$PYTHONPATH}
LM=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj
COMMON="--steps 40 --eval-interval 4 --ckpt-interval 40"
python3 -m benchmarks.grpo_sweep --base-model local_stack/models/tiny-qwen3-vl-maze7 --out /tmp/grpo-sweep-7x7 \
  --seconds "${SECONDS_EACH:-540}" \
  --run "ctl=$COMMON --lr 6e-4" \
  --run "lm6e-4=$COMMON --lr 6e-4 --lora-targets $LM" \
  --run "lm2e-3=$COMMON --lr 2e-3 --lora-targets $LM" \
  --run "lm2e-3t07=$COMMON --lr 2e-3 --lora-targets $LM --temperature 0.7" \
  --run "lm1e-3e4=$COMMON --lr 1e-3 --lora-targets $LM --epochs 4" \
  --run "lm5e-3=$COMMON --lr 5e-3 --lora-targets $LM" \
  --run "lm2e-3kl=$COMMON --lr 2e-3 --lora-targets $LM --kl-coef 0.05" \
  --run "lm2e-3mt12=$COMMON --lr 2e-3 --lora-targets $LM --train-max-turns 12" \
  --run "lm1e-3e2t07=$COMMON --lr 1e-3 --lora-targets $LM --epochs 2 --temperature 0.7" \
  --run "all2e-4e4=$COMMON --lr 2e-4 --epochs 4" \
  --run "lm2e-3b16=$COMMON --lr 2e-3 --lora-targets $LM --batch-mazes 16 --mini-batch-mazes 8" \
  --run "lm3e-3e2mb4=$COMMON --lr 3e-3 --lora-targets $LM --epochs 2 --mini-batch-mazes 4"
tar -C /tmp -czf "$OUT/grpo-sweep-7x7.tar.gz" --exclude='*.safetensors' grpo-sweep-7x7
