#!/usr/bin/env bash
# Every flag a subcommand's parser accepts is listed in its --help. The flags are read from the
# source: the strcmp()s of the command's file (cmd_pull.c holds pull, ls and rm: its functions
# apart), and those of common.c's shared flag parsers that the command calls.
set -u
B=${BUILD:-build}/brisk
C=src/cli
fail=0
# the string literals compared in the body of C function $2 of file $1 ("" : the whole file)
flags_of() {
  if [ -n "$2" ]; then awk -v f="$2" '$0 ~ "^(static )?int "f"\\(" {p=1} p {print} p && /^}/ {p=0}' "$1"; else cat "$1"; fi |
    grep -o 'strn\{0,1\}cmp([a-z_>-]*\(\[[a-z]*\]\)\{0,1\}, "-[^"]*"' | sed 's/.*"\(-[^"]*\)"$/\1/'
}
shared() { # the shared parsers' flags that file $1 (function $2) reaches
  local src; src=$( [ -n "$2" ] && awk -v f="$2" '$0 ~ "^int "f"\\(" {p=1} p {print} p && /^}/ {p=0}' "$1" || cat "$1")
  if grep -q cli_model_flag <<<"$src"; then
    for f in cli_model_flag cli_rope_flag cli_llamacpp_flag cli_gpu_flag cli_kv_flag; do flags_of $C/common.c $f; done
    # cli_rope_flag matches its flags by a prefix and a table of pointers: the names are its help's
    echo --rope-freq-base --rope-freq-scale --yarn-attn-factor --yarn-beta-fast --yarn-beta-slow | tr ' ' '\n'
  fi
  for f in cli_text_flag cli_sampler_flag cli_stop_flag cli_gpu_flag cli_kv_flag; do
    grep -q "$f" <<<"$src" && flags_of $C/common.c $f
  done
}
for cmd in run chat serve bench perplexity calibrate tokenize info synth quantize convert pull ls rm; do
  file=$C/cmd_$cmd.c fn=""
  case $cmd in pull|ls|rm) file=$C/cmd_pull.c fn=cmd_$cmd ;; esac
  help=$($B $cmd --help 2>&1); rc=$?
  [ $rc -eq 0 ] || { echo "FAIL $cmd --help: exit $rc"; fail=1; continue; }
  missing=""
  for f in $( { flags_of "$file" "$fn"; shared "$file" "$fn"; } | sort -u); do
    case $f in -h|--help|-|--rope-|--yarn-) continue ;; esac
    grep -qE -- "(^|[][ ,/(|])$f([][ ,=/)|:]|$)" <<<"$help" || missing="$missing $f"
  done
  if [ -z "$missing" ]; then echo "ok   $cmd --help lists all its flags"; else echo "FAIL $cmd --help lacks:$missing"; fail=1; fi
done
exit $fail
