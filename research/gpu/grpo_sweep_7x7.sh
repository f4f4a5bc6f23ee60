#!/usr/bin/env bash
# The 7x7 GRPO sweeps from the 7x7 SFT start that chose make local's setting (research/RESULTS.md): one
# research.grpo_curve run per CPU core (research.grpo_sweep, 13-14 runs), and in sweep 2 two longer runs on the GPU
# beside them. Run from the repository root on a host with 16 cores:
#   SWEEP=1|2|3|4 SECONDS_EACH=520 bash research/gpu/grpo_sweep_7x7.sh
# Every run's log, metrics and curve go to out/grpo-sweep-7x7-$SWEEP/<run>; one line per CPU run is printed.
set -u
SWEEP=${SWEEP:-1}
SECONDS_EACH=${SECONDS_EACH:-520}
export PYTHONPATH=$PWD:$PWD/functions${PYTHONPATH:+:$PYTHONPATH}
BASE=local_stack/cluster_standins/models/tiny-qwen3-vl-maze7
DIR=out/grpo-sweep-7x7-$SWEEP
LM=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj
COMMON="--steps 40 --eval-interval 4 --ckpt-interval 40 --temperature 1.0"
case $SWEEP in
1) runs=(
  "ctl=$COMMON --lr 6e-4"
  "lm6e-4=$COMMON --lr 6e-4 --lora-targets $LM"
  "lm2e-3=$COMMON --lr 2e-3 --lora-targets $LM"
  "lm2e-3t07=$COMMON --lr 2e-3 --lora-targets $LM --temperature 0.7"
  "lm1e-3e4=$COMMON --lr 1e-3 --lora-targets $LM --epochs 4"
  "lm5e-3=$COMMON --lr 5e-3 --lora-targets $LM"
  "lm2e-3kl=$COMMON --lr 2e-3 --lora-targets $LM --kl-coef 0.05"
  "lm2e-3mt12=$COMMON --lr 2e-3 --lora-targets $LM --train-max-turns 12"
  "lm1e-3e2t07=$COMMON --lr 1e-3 --lora-targets $LM --epochs 2 --temperature 0.7"
  "all2e-4e4=$COMMON --lr 2e-4 --epochs 4"
  "lm2e-3b16=$COMMON --lr 2e-3 --lora-targets $LM --batch-mazes 16 --mini-batch-mazes 8"
  "lm3e-3e2mb4=$COMMON --lr 3e-3 --lora-targets $LM --epochs 2 --mini-batch-mazes 4"
) ;;
2) COMMON="--steps 40 --eval-interval 5 --ckpt-interval 40 --temperature 1.0"
  runs=(
  "lm1e-3e4=$COMMON --lr 1e-3 --lora-targets $LM --epochs 4"
  "lm1e-3e4s16=$COMMON --lr 1e-3 --lora-targets $LM --epochs 4 --batch-mazes 4 --mini-batch-mazes 4 --samples 16"
  "lm2e-3e2=$COMMON --lr 2e-3 --lora-targets $LM --epochs 2"
  "lm1e-3e4t07=$COMMON --lr 1e-3 --lora-targets $LM --epochs 4 --temperature 0.7"
  "lm5e-4e8=$COMMON --lr 5e-4 --lora-targets $LM --epochs 8"
  "lm1e-3e4mb2=$COMMON --lr 1e-3 --lora-targets $LM --epochs 4 --mini-batch-mazes 2"
  "all6e-4e4=$COMMON --lr 6e-4 --epochs 4"
  "lm1e-3e4kl=$COMMON --lr 1e-3 --lora-targets $LM --epochs 4 --kl-coef 0.05"
  "lm5e-4e4=$COMMON --lr 5e-4 --lora-targets $LM --epochs 4"
  "lm2e-3e4=$COMMON --lr 2e-3 --lora-targets $LM --epochs 4"
  "lm1e-3e4mt13=$COMMON --lr 1e-3 --lora-targets $LM --epochs 4 --train-max-turns 13"
  "all1e-3e4=$COMMON --lr 1e-3 --epochs 4"
)
  # Two long runs on the GPU beside them: the local spec's settings, and LM-only LoRA with 4 epochs, 16 mazes a step.
  mkdir -p "$DIR/gpu-ctl" "$DIR/gpu-lm1e-3e4b16"
  timeout "$SECONDS_EACH" python3 -m research.grpo_curve --base-model $BASE --out "$DIR/gpu-ctl" \
    --steps 300 --eval-interval 10 --ckpt-interval 300 --lr 6e-4 >"$DIR/gpu-ctl/run.log" 2>&1 &
  timeout "$SECONDS_EACH" python3 -m research.grpo_curve --base-model $BASE --out "$DIR/gpu-lm1e-3e4b16" \
    --steps 300 --eval-interval 10 --ckpt-interval 300 --lr 1e-3 --lora-targets $LM --epochs 4 \
    --batch-mazes 16 --mini-batch-mazes 8 >"$DIR/gpu-lm1e-3e4b16/run.log" 2>&1 &
  ;;
3) # The KL lead at make-local scale (about 12 steps in the time): which setting climbs soonest and stays.
  COMMON="--steps 15 --eval-interval 3 --ckpt-interval 15 --lora-targets $LM"
  runs=(
  "kl05lr1e-3=$COMMON --lr 1e-3 --epochs 2 --kl-coef 0.05"
  "kl05lr1.5e-3=$COMMON --lr 1.5e-3 --epochs 2 --kl-coef 0.05"
  "kl05lr2e-3=$COMMON --lr 2e-3 --epochs 2 --kl-coef 0.05"
  "kl05lr3e-3=$COMMON --lr 3e-3 --epochs 2 --kl-coef 0.05"
  "kl02lr2e-3=$COMMON --lr 2e-3 --epochs 2 --kl-coef 0.02"
  "kl10lr2e-3=$COMMON --lr 2e-3 --epochs 2 --kl-coef 0.1"
  "kl20lr3e-3=$COMMON --lr 3e-3 --epochs 2 --kl-coef 0.2"
  "kl05lr1e-3e4=$COMMON --lr 1e-3 --epochs 4 --kl-coef 0.05"
  "kl05lr1e-3e3=$COMMON --lr 1e-3 --epochs 3 --kl-coef 0.05"
  "kl05lr2e-3e1=$COMMON --lr 2e-3 --epochs 1 --kl-coef 0.05"
  "kl05lr1e-3mb4=$COMMON --lr 1e-3 --epochs 2 --kl-coef 0.05 --mini-batch-mazes 4"
  "kl05lr1e-3b16=$COMMON --lr 1e-3 --epochs 2 --kl-coef 0.05 --batch-mazes 16 --mini-batch-mazes 8"
  "kl05lr2e-3b16=$COMMON --lr 2e-3 --epochs 2 --kl-coef 0.05 --batch-mazes 16 --mini-batch-mazes 8"
  "kl05lr1e-3s16=$COMMON --lr 1e-3 --epochs 2 --kl-coef 0.05 --batch-mazes 4 --mini-batch-mazes 4 --samples 16"
) ;;
4) # Sweep 3's best settings with the KL term, several seeds each: is the rise the setting's or one seed's?
  B8="--steps 8 --eval-interval 4 --ckpt-interval 8 --lora-targets $LM --epochs 2 --kl-coef 0.05"
  B16="--steps 4 --eval-interval 2 --ckpt-interval 4 --lora-targets $LM --epochs 2 --kl-coef 0.05 --batch-mazes 16 --mini-batch-mazes 8"
  runs=(
  "b8lr1.5e-3s0=$B8 --lr 1.5e-3 --seed 0" "b8lr1.5e-3s1=$B8 --lr 1.5e-3 --seed 1"
  "b8lr1.5e-3s2=$B8 --lr 1.5e-3 --seed 2" "b8lr1.5e-3s3=$B8 --lr 1.5e-3 --seed 3"
  "b8lr2e-3s1=$B8 --lr 2e-3 --seed 1" "b8lr2e-3s2=$B8 --lr 2e-3 --seed 2" "b8lr2e-3s3=$B8 --lr 2e-3 --seed 3"
  "b16lr1e-3s0=$B16 --lr 1e-3 --seed 0" "b16lr1e-3s1=$B16 --lr 1e-3 --seed 1" "b16lr1e-3s2=$B16 --lr 1e-3 --seed 2"
  "b16lr1.5e-3s0=$B16 --lr 1.5e-3 --seed 0" "b16lr1.5e-3s1=$B16 --lr 1.5e-3 --seed 1"
  "b8lr1e-3s1=$B8 --lr 1e-3 --seed 1"
) ;;
esac
args=()
for run in "${runs[@]}"; do args+=(--run "$run"); done
python3 -m research.grpo_sweep --base-model $BASE --out "$DIR" --seconds "$SECONDS_EACH" "${args[@]}"
wait
for run in $(find "$DIR" -maxdepth 1 -name "gpu-*"); do  # the GPU runs of sweep 2
  echo "$(basename "$run"): $(grep -a -h "SFT start" "$run/run.log") $(grep -a -o '"step": [0-9]*, "reward_mean": [0-9.]*, "eval_solve_rate": [0-9.]*' "$run/run.log" | sed 's/"reward_mean": [0-9.]*, //' | tr '\n' ' ')"
  grep -a -h "Error" "$run/run.log" | tail -2
done
