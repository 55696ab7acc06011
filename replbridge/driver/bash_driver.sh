# aiod's bash driver. aiod writes these lines to the stdin of an
# interactive bash (--norc --noprofile --noediting -i), whose stderr is
# /dev/null until the last line. Then, for each execution, aiod writes
#   __aiod_tok=TOKEN; __aiod_read && eval "$__aiod_code"
# to stdin and the code, ended by a NUL byte, to fd 3. The eval runs at
# the top level, so cd, variables, functions and declare survive; SIGINT
# ends the whole command line as at a prompt. Before the next prompt,
# __aiod_prompt writes the end marker on stdout and stderr and the exit
# code of the last command on fd 4 (the markers go to copies of stdout and
# stderr made at the start). Whatever the code reads from stdin
# is what aiod writes there while it runs.
set +H +m
shopt -u checkwinsize 2>/dev/null
PS1='' PS2='' PS0=''
__aiod_tok=
__aiod_prompt() {
	local rc=$?
	if [ -n "$__aiod_tok" ]; then
		printf '\0aiod:end:%s\0' "$__aiod_tok" >&"$__aiod_out"
		printf '\0aiod:end:%s\0' "$__aiod_tok" >&"$__aiod_err"
		printf '{"type":"done","status":"ok","exit_code":%d}\n' "$rc" >&4
		__aiod_tok=
	fi
}
__aiod_read() { __aiod_code=; IFS= read -r -d '' -u 3 __aiod_code; }
PROMPT_COMMAND=__aiod_prompt
export PAGER="${PAGER:-cat}" GIT_PAGER="${GIT_PAGER:-cat}"
exec 2>&5 5>&-
# The markers go to the streams as they were at the start, whatever the
# code does with its own stdout and stderr (exec >file, exec 2>&1).
exec {__aiod_out}>&1 {__aiod_err}>&2
printf '{"type":"ready","version":"%s"}\n' "$BASH_VERSION" >&4
