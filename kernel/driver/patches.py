# aiod's changes to ipykernel, made in every kernel of an ipykernel spec
# before its app starts: the template runs them before it forks (every
# forked kernel has them), and a spawned kernel runs them first too
# (kernel/spec.go's command). apply(failed) makes each change it can and
# records in failed what it could not (another ipykernel than expected).

# A stream message carries what the kernel buffered since its last flush,
# every 0.2 s: a flood printed at full speed made messages of tens of MB,
# and aiod's socket reads ten messages ahead, so aiod's memory followed the
# flood's pace. A write that leaves more than this buffered sends it at
# once and waits until it is sent: messages stay near 1 MiB and a flood
# runs at the pace aiod reads it.
STREAM_CHUNK = 1 << 20


def bound_stream_messages():
    from ipykernel.iostream import OutStream

    write = OutStream.write

    def bounded_write(self, string):
        n = write(self, string)
        # The IO thread swaps the buffer for a new one and closes the old
        # under this lock: read the size under it too.
        try:
            with self._buffer_lock:
                size = self._buffer.tell()
        except (AttributeError, ValueError):
            return n
        if size > STREAM_CHUNK and self._is_master_process():
            self.flush()
        return n

    OutStream.write = bounded_write


def failing_shell_escapes():
    """A shell escape whose command fails raises, so the cell fails.

    IPython runs "!cmd", "%pip" and "%conda" through the shell's system()
    and only stores the exit code in _exit_code: a failed "%pip install"
    answered success with the failure in its output. aiod's kernels raise
    subprocess.CalledProcessError instead, as "%%bash" does and as a bash
    session's failing command answers success false. "x = !cmd" (which
    captures output) is unchanged.
    """
    import subprocess
    from ipykernel.zmqshell import ZMQInteractiveShell

    piped = ZMQInteractiveShell.system_piped

    def system(self, cmd):
        piped(self, cmd)
        code = self.user_ns.get("_exit_code")
        if isinstance(code, int) and code != 0:
            raise subprocess.CalledProcessError(code, cmd.strip()) from None

    ZMQInteractiveShell.system_piped = system
    ZMQInteractiveShell.system = system


def apply(failed):
    try:
        bound_stream_messages()
    except Exception as e:  # another ipykernel: messages as it makes them
        failed["bound stream messages"] = repr(e)
    try:
        failing_shell_escapes()
    except Exception as e:  # another ipykernel: escapes as it runs them
        failed["failing shell escapes"] = repr(e)
