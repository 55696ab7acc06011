# aiod's restore of a bash session: run by aiod in a fresh shell of the
# session as its own command, after __aiod_args (JSON: {"payload": base64,
# verified by aiod}) is set. It exports the saved environment (not the
# shell's own variables), defines the functions again and enters the
# working folder, then prints one line, "\x1eaiod-snapshot " + JSON:
# {"restored": [...], "skipped": {...}}.
__aiod_snap_b64=${__aiod_args#*\"payload\":\"}
__aiod_snap_b64=${__aiod_snap_b64%%\"*}
__aiod_snap_i=0
__aiod_snap_cwd=
__aiod_snap_fns=
__aiod_snap_skipped=
while IFS= read -r -d '' __aiod_snap_kv; do
  case $__aiod_snap_i in
    0) __aiod_snap_cwd=$__aiod_snap_kv ;;
    1) __aiod_snap_fns=$__aiod_snap_kv ;;
    *) case "${__aiod_snap_kv%%=*}" in
         PWD|OLDPWD|SHLVL|_|BASH*|SHELLOPTS|EUID|UID|PPID|__aiod*) ;;
         *) export "$__aiod_snap_kv" 2>/dev/null ;;
       esac ;;
  esac
  __aiod_snap_i=$((__aiod_snap_i + 1))
done < <(printf '%s' "$__aiod_snap_b64" | base64 -d)
if [ -n "$__aiod_snap_fns" ]; then
  eval "$__aiod_snap_fns" 2>/dev/null || __aiod_snap_skipped='"(functions)":"could not be defined again"'
fi
if [ -n "$__aiod_snap_cwd" ] && ! cd -- "$__aiod_snap_cwd" 2>/dev/null; then
  __aiod_snap_skipped=${__aiod_snap_skipped:+$__aiod_snap_skipped,}'"(working folder)":"could not be entered again"'
fi
printf '\n\036aiod-snapshot {"restored":["(environment)","(functions)","(working folder)"],"skipped":{%s}}\n' "$__aiod_snap_skipped"
unset __aiod_snap_b64 __aiod_snap_i __aiod_snap_cwd __aiod_snap_fns __aiod_snap_skipped __aiod_snap_kv __aiod_args
