# aiod's snapshot of a bash session: run by aiod in the session's shell as
# its own command, after __aiod_args (JSON) is set. It prints one line,
# "\x1eaiod-snapshot " + JSON: {"payload": base64 of the working folder,
# the functions (declare -f) and the exported environment (env -0), each
# ended by a NUL byte, "saved", "skipped"}. Shell variables that are not
# exported, aliases, options and jobs are not saved.
__aiod_snap_fn=$(compgen -A function | grep -v '^__aiod')
__aiod_snap_p=$( { printf '%s\0' "$PWD"; if [ -n "$__aiod_snap_fn" ]; then declare -f $__aiod_snap_fn; fi; printf '\0'; env -0; } | base64 -w0 )
printf '\n\036aiod-snapshot {"payload":"%s","saved":["(environment)","(functions)","(working folder)"],"skipped":{"(shell state)":"variables that are not exported, aliases, shell options and background jobs are not saved"},"reopened":{}}\n' "$__aiod_snap_p"
unset __aiod_snap_fn __aiod_snap_p __aiod_args
