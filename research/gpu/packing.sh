# Sourced by the device scripts: what they do to a run's files before those come back from the device
# machine, which returns at most 8 files of at most 16 MiB each (64 MiB in all).

# pack_out NAME PATH...: tar PATH... (relative to out/) into $OUT/NAME.tar.gz, split into parts of at
# most 15 MiB (NAME.tar.gz.part-00, -01, ...) when larger. Unpack here with: cat NAME.tar.gz* | tar -xz -C out
pack_out() {
  local name=$1; shift
  tar -C out -czf "$OUT/$name.tar.gz" "$@"
  if [ "$(stat -c %s "$OUT/$name.tar.gz")" -gt $((15 * 1024 * 1024)) ]; then
    split -b 15M -d "$OUT/$name.tar.gz" "$OUT/$name.tar.gz.part-" && rm "$OUT/$name.tar.gz"
  fi
  ls -l "$OUT" | grep -F "$name.tar.gz"
}

# latest_checkpoint_step CKPTS: print the step that CKPTS/latest_ckpt_global_step.txt names (CKPTS: a GRPO
# run's ckpts/ folder); nothing without that file or a step in it.
latest_checkpoint_step() {
  [ -f "$1/latest_ckpt_global_step.txt" ] || return 0
  tr -dc 0-9 < "$1/latest_ckpt_global_step.txt"
}

# keep_latest_checkpoint CKPTS: delete every global_step_* checkpoint in CKPTS (a GRPO run's ckpts/
# folder) but the one latest_ckpt_global_step.txt names, all a resumed run needs; without that file,
# nothing. One checkpoint a call would outgrow what comes back (an 8-layer start's is 7.6 MB).
keep_latest_checkpoint() {
  local ckpts=$1 latest
  latest=$(latest_checkpoint_step "$ckpts")
  [ -n "$latest" ] || return 0
  find "$ckpts" -mindepth 1 -maxdepth 1 -name 'global_step_*' ! -name "global_step_$latest" -exec rm -rf {} +
}
