# Sourced by the device scripts. pack_out NAME PATH...: tars PATH... (relative to out/) into $OUT/NAME.tar.gz,
# split into parts of at most 15 MiB (NAME.tar.gz.part-00, -01, ...) when larger, since the device machine
# returns files of at most 16 MiB each. Unpack here with: cat NAME.tar.gz* | tar -xz -C out
pack_out() {
  local name=$1; shift
  tar -C out -czf "$OUT/$name.tar.gz" "$@"
  if [ "$(stat -c %s "$OUT/$name.tar.gz")" -gt $((15 * 1024 * 1024)) ]; then
    split -b 15M -d "$OUT/$name.tar.gz" "$OUT/$name.tar.gz.part-" && rm "$OUT/$name.tar.gz"
  fi
  ls -l "$OUT" | grep -F "$name.tar.gz"
}
