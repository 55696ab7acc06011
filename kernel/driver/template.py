# aiod kernel template: a warm Python process that forks one ipykernel per
# request. aiod embeds this file and runs it as
#     python3 -c <this file> <config JSON>
# with the kernelspec's interpreter and environment. Nothing here is meant to
# be run by hand.
#
# Protocol, on descriptor 3 (a SOCK_SEQPACKET socket; one JSON object per
# message):
#   template -> aiod  {"op": "ready", "pid", "python", "ipykernel", "seconds",
#                      "failed": {module: error}, "threads", "probe_dir"}
#   aiod -> template  {"op": "fork", "id", "args", "env", "cwd", "confine",
#                      "gate", "cpu", "charge"} with descriptors attached
#                      (SCM_RIGHTS): first
#                      the write end of the kernel's own stdout/stderr pipe,
#                      with "gate" the read end of the child's gate, then
#                      those the confinement plan refers to (a network
#                      namespace); "cpu", when there, is the one CPU the
#                      child runs on until aiod unpins it (the template
#                      runs on the other CPUs until its next fork);
#                      "charge", when there, the cgroup.procs file of the
#                      kernel's memory group, which the template forks in
#   template -> aiod  {"op": "forked", "id", "pid"} or {"op": "forked", "id",
#                      "error"}
#   template -> aiod  {"op": "exit", "pid", "code"} or {"op": "exit", "pid",
#                      "signal"}: a child ended and was reaped
#   template -> aiod  {"op": "hot", "pages", "seconds"} or {"op": "hot",
#                      "error"}: after ready, what the probe learned (see
#                      "Hot pages" below); again if the pins are dropped
# End of file on descriptor 3 (aiod closed it, or died), SIGTERM (aiod sets
# it as the template's parent-death signal) and a parent that is no longer
# aiod all make the template kill every child and exit.
#
# The config JSON: {"parent": aiod's pid, "preload": [module, ...],
# "module": the launcher module of the kernelspec's "-m", e.g.
# "ipykernel_launcher", "args": the kernel app's arguments but -f,
# "confine": the source of aiod's sandbox applier or null, "setup": the
# template's own confinement plan or null, "hot": false to pin no hot pages
# (below), and, when aiod charges forks to the kernels' memory groups,
# "charge_home": the template's own group's cgroup.procs, where it goes back
# after forking in the group a fork request names ("charge"), and
# "oom_score_adj": the OOM score each child takes (1000: in a kernel's
# group, the OOM killer must pick a kernel, never the template)}.
#
# Under tenant isolation (a "confine" source), the template is root: it first
# applies "setup" to itself (a mount namespace of its own), and each child
# applies its fork request's "confine" plan (its namespaces, the tenant's
# view, uid, no_new_privs, seccomp) before anything of the kernel runs.
#
# The template is not dumpable (PR_SET_DUMPABLE 0): no process of the same
# user can ptrace it or read its memory. Its children are made dumpable
# again, each being its own kernel.
#
# The template also runs the kernel app's first step once: the command line
# and the config files (BaseIPythonApplication.initialize, about a fifth of
# a kernel's start and 7 MB that every child would otherwise write). A child
# whose arguments and configuration variables match the template's skips
# that step; any other runs the kernel app from the start.
#
# Before the first fork the template imports ipykernel and what the config
# names, creates no zmq context and starts no Python thread, then freezes the
# garbage collector so that the children share the imported objects' pages.
#
# Hot pages. A child still copies some 3,000 of the template's pages as it
# starts and runs its first cell (reference counts, the interpreter's inline
# caches, allocator state), each on a page fault that is slow in a virtual
# machine. Once ready, the template forks a probe kernel and a client that
# runs aiod's priming cell on it, reads which of its pages the probe copied
# (the probe's /proc/PID/pagemap says a page is mapped there alone), kills
# both, and pins those pages as io_uring fixed buffers. The kernel copies a
# pinned page into the child inside fork() itself, at a fraction of a page
# fault's cost, so the child starts with its copies made. Only aiod's own
# code runs in the probe: no caller decides what is pinned.

import gc

gc.disable()

import array
import errno
import json
import os
import select
import signal
import socket
import sys
import time

T0 = time.monotonic()
CONFIG = json.loads(sys.argv[1])
PARENT = CONFIG["parent"]
CTL_FD = 3
LAUNCHER = None  # sys.argv[0] of the kernels, set by main
APP = None  # the kernel app configured by preconfigure, or None
TEMPLATE_ENV = {}  # the template's environment when it configured APP

# Environment variables the kernel app's configuration step reads.
CONFIG_ENV = ("IPYTHONDIR", "HOME", "XDG_CONFIG_HOME", "JUPYTER_CONFIG_DIR", "JUPYTER_CONFIG_PATH",
              "JUPYTER_PLATFORM_DIRS", "IPYTHON_SUPPRESS_CONFIG_ERRORS")

# PR_SET_PDEATHSIG and PR_SET_DUMPABLE from <sys/prctl.h>.
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
CONFINE = None  # confine(plan, fds) from aiod's sandbox applier, when one was given
SHELL = None  # the kernels' IPython shell, made here (premake_shell)
MODULE_NAMES = None  # set(sys.modules) when the template was ready (note_modules)
CPUS = os.sched_getaffinity(0)  # the CPUs the template was started with

# The modules IPKernelApp.initialize imports on its own: importing them here
# moves their cost out of every kernel start.
KERNEL_MODULES = [
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "ipykernel.zmqshell",
    "ipykernel.iostream",
    "ipykernel.heartbeat",
    "ipykernel.parentpoller",
    "ipykernel.comm",
    "ipykernel.eventloops",
    "ipykernel.debugger",
    "IPython.core.interactiveshell",
    "IPython.core.completer",
    "IPython.core.history",
    "jupyter_client.session",
    "jupyter_client.connect",
    "tornado.ioloop",
    "tornado.queues",
    "zmq.eventloop.zmqstream",
    "asyncio",
    "ctypes",
    "random",
    "uuid",
    "faulthandler",  # imported by the kernel app's init_io; here, the children import nothing before init_code
]


def launcher_path(module):
    """sys.argv[0] of "python -m MODULE": the module's file, or for a
    package its __main__'s."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec.submodule_search_locations is not None:
        spec = importlib.util.find_spec(module + ".__main__")
    return spec.origin


def preconfigure(args, failed):
    """Run IPKernelApp's command-line and config-file step here, once, when
    its initialize starts with that step (ipykernel 6's does)."""
    global APP
    import inspect

    from IPython.core.application import BaseIPythonApplication
    from ipykernel.kernelapp import IPKernelApp

    try:
        body = [l.strip() for l in inspect.getsource(IPKernelApp.initialize).splitlines()]
        start = body.index("def initialize(self, argv=None):") + 1
        if body[start:start + 2] != ["self._init_asyncio_patch()", "super().initialize(argv)"]:
            raise ValueError("IPKernelApp.initialize does not start as expected")
        app = IPKernelApp.instance()
        app._init_asyncio_patch()
        BaseIPythonApplication.initialize(app, args)
        APP = app
    except Exception as e:  # the children then run the whole initialize
        IPKernelApp.clear_instance()
        failed["(kernel app preconfiguration)"] = "%s: %s" % (type(e).__name__, e)


def warm_up_shell(failed):
    """Build and drop one IPython shell (it runs "pass", never user code):
    the shell's code then starts each child specialised and its caches
    built, which saves every kernel about 1.2 MB of copied pages. What the
    shell changed in the interpreter is put back."""
    import atexit
    import builtins

    main = sys.modules.get("__main__")
    names = set(vars(builtins))
    try:
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets.config import Config

        config = Config()
        config.HistoryManager.hist_file = ":memory:"  # no file, no saving thread
        shell = InteractiveShell(config=config)
        shell.run_cell("pass", store_history=False)
        atexit.unregister(shell.atexit_operations)
        shell.history_manager.db.close()
        del shell
    except Exception as e:
        failed["(shell warm-up)"] = "%s: %s" % (type(e).__name__, e)
    sys.modules["__main__"] = main
    for name in set(vars(builtins)) - names:
        delattr(builtins, name)


def premake_shell(failed):
    """Make the kernels' IPython shell here, once, as IPythonKernel would
    (the kernel app's shell class and arguments, the template's
    configuration): building it (its magics, hooks, history and
    namespace) was about half of a forked child's start. A child whose
    kernel app is the template's takes it (kernel_app) and gives it its
    kernel; any other child makes its own."""
    global SHELL
    if APP is None:
        return
    main = sys.modules.get("__main__")
    try:
        from ipykernel.compiler import XCachingCompiler
        from ipykernel.ipkernel import IPythonKernel
        from ipykernel.zmqshell import ZMQInteractiveShell

        if IPythonKernel.shell_class.default_value is not ZMQInteractiveShell or APP.user_ns is not None:
            raise ValueError("the kernel's shell is not ipykernel's own")
        SHELL = ZMQInteractiveShell.instance(parent=APP, profile_dir=APP.profile_dir, user_module=None,
                                             user_ns=None, kernel=None, compiler_class=XCachingCompiler)
    except Exception as e:  # the children make their own, as before
        SHELL = None
        try:
            from ipykernel.zmqshell import ZMQInteractiveShell

            ZMQInteractiveShell.clear_instance()
        except Exception:
            pass
        failed["(kernel shell)"] = "%s: %s" % (type(e).__name__, e)
    # The shell made the template's __main__ its namespace's module: the
    # template's own code keeps its globals, and each child gets it back.
    if main is not None and SHELL is None:
        sys.modules["__main__"] = main


def take_shell():
    """In a child: the template's shell, for the kernel IPythonKernel makes
    (its shell_class.instance call), once it is given that kernel."""
    from ipykernel.zmqshell import ZMQInteractiveShell

    made = ZMQInteractiveShell.instance

    def instance(cls, *args, **kwargs):
        if SHELL is not None and cls is ZMQInteractiveShell and not args and kwargs.get("kernel") is not None \
                and kwargs.get("profile_dir") is APP.profile_dir and kwargs.get("user_ns") is None and kwargs.get("user_module") is None:
            SHELL.parent = kwargs["parent"]
            SHELL.kernel = kwargs["kernel"]
            SHELL.init_environment()  # PAGER and the like, in the child's environment
            return SHELL
        cls.clear_instance()
        return made.__func__(cls, *args, **kwargs)

    ZMQInteractiveShell.instance = classmethod(instance)


# InteractiveShellApp.init_code's statements, as note_modules expects them.
INIT_CODE = ["self._run_startup_files()", "self._run_exec_lines()", "self._run_exec_files()",
             "if self.hide_initial_ns:", "self.shell.user_ns_hidden.update(self.shell.user_ns)",
             "self._run_cmd_line_code()", "self._run_module()", "sys.stdout.flush()", "sys.stderr.flush()",
             "self.shell._sys_modules_keys = set(sys.modules.keys())"]


def note_modules(failed):
    """Note the names of the modules loaded here, once, for the children's
    init_code (keep_module_names). IPython's init_code ends by noting them
    itself, for %reset --aggressive: a set that takes a reference to each of
    some 1,500 names, each write to a name's count copying one of the
    template's pages into the child (2.5 MB of an idle pandas kernel's
    private memory, and 10-20 ms of a cold start on a machine whose page
    faults take 12 us). Only for the init_code this expects."""
    global MODULE_NAMES
    try:
        import inspect

        from IPython.core.shellapp import InteractiveShellApp

        lines = [l.strip() for l in inspect.getsource(InteractiveShellApp.init_code).splitlines()]
        body = [l for l in lines[1:] if l and not l.startswith(("#", '"""'))]
        if body != INIT_CODE:
            raise ValueError("InteractiveShellApp.init_code is not as expected")
        MODULE_NAMES = set(sys.modules)
    except Exception as e:  # the children note their own
        failed["(module names)"] = "%s: %s" % (type(e).__name__, e)


def keep_module_names(app):
    """In a child: app's init_code, as IPython's (INIT_CODE), with the
    template's note of its modules when the child has as many (it imported
    none since: modules come, they are not taken away)."""
    def init_code():
        app._run_startup_files()
        app._run_exec_lines()
        app._run_exec_files()
        if app.hide_initial_ns:
            app.shell.user_ns_hidden.update(app.shell.user_ns)
        app._run_cmd_line_code()
        app._run_module()
        sys.stdout.flush()
        sys.stderr.flush()
        names = MODULE_NAMES
        if names is None or len(sys.modules) != len(names):
            names = set(sys.modules)
        app.shell._sys_modules_keys = names

    if MODULE_NAMES is not None:
        app.init_code = init_code


def kernel_app(args, env):
    """The child's kernel app, initialized with args (-f included)."""
    from ipykernel.kernelapp import IPKernelApp

    rest = list(args)
    conn = None
    if "-f" in rest:
        i = rest.index("-f")
        conn = rest[i + 1]
        del rest[i:i + 2]
    same_env = all(env.get(k) == TEMPLATE_ENV.get(k) for k in CONFIG_ENV)
    if APP is not None and conn and rest == CONFIG.get("args") and same_env:
        from IPython.core.application import BaseIPythonApplication

        APP.connection_file = conn
        # Done by the template; in this process only.
        BaseIPythonApplication.initialize = lambda self, argv=None: None
        take_shell()
        keep_module_names(APP)
        APP.initialize(args)
        return APP
    if SHELL is not None:  # made for the template's configuration
        from ipykernel.zmqshell import ZMQInteractiveShell

        ZMQInteractiveShell.clear_instance()
    IPKernelApp.clear_instance()
    app = IPKernelApp.instance()
    app.initialize(args)
    return app


def send(ctl, msg, fds=()):
    data = json.dumps(msg).encode()
    if fds:
        ctl.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        ctl.send(data)


def import_all(names, failed):
    for name in names:
        try:
            __import__(name)
        except Exception as e:  # a missing optional module must not stop the template
            failed[name] = "%s: %s" % (type(e).__name__, e)


def set_up_confinement():
    """Load aiod's sandbox applier and apply the template's own plan."""
    global CONFINE
    source = CONFIG.get("confine")
    if not source:
        return
    ns = {"__name__": "aiod_confine"}
    exec(compile(source, "aiod-confine.py", "exec"), ns)
    CONFINE = ns["confine"]
    if CONFIG.get("setup"):
        CONFINE(CONFIG["setup"], [])


def main():
    if os.getppid() != PARENT:
        os._exit(1)  # aiod went away before we started
    set_up_confinement()
    # A kernel's sys.path starts with its working directory, as
    # "python -m ipykernel_launcher" has it; ours starts with "" (-c).
    if sys.path and sys.path[0] == "":
        del sys.path[0]
    # ipykernel selects this backend unless MPLBACKEND says otherwise;
    # matplotlib reads the variable when it is imported, which is here.
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    failed = {}
    import_all(KERNEL_MODULES, failed)
    if "ipykernel.kernelapp" in failed:
        sys.stderr.write("aiod template: cannot import ipykernel: %s\n" % failed["ipykernel.kernelapp"])
        sys.exit(2)
    # aiod's changes to ipykernel (driver/patches.py), as a spawned kernel
    # of an ipykernel spec gets them too.
    patches = {"__name__": "aiod_patches"}
    exec(compile(CONFIG["patches"], "aiod-patches.py", "exec"), patches)
    patches["apply"](failed)
    import_all(CONFIG.get("preload") or [], failed)
    global TEMPLATE_ENV
    TEMPLATE_ENV = dict(os.environ)
    preconfigure(CONFIG.get("args") or [], failed)
    warm_up_shell(failed)
    premake_shell(failed)
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    # No ptrace of the template, whose memory every later kernel starts from.
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    import ipykernel

    note_modules(failed)
    global LAUNCHER
    LAUNCHER = launcher_path(CONFIG.get("module") or "ipykernel_launcher")
    defaults = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP)}
    ctl = socket.socket(fileno=CTL_FD)
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w.fileno())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # aiod interrupts kernels, never us
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop, killing the children
    gc.collect()
    fill_free_chunks(libc, failed)
    fill_free_blocks(failed)
    gc.freeze()
    threads = len(os.listdir("/proc/self/task"))
    make_probe_dir()
    send(ctl, {
        "op": "ready", "pid": os.getpid(), "python": sys.version.split()[0],
        "ipykernel": ipykernel.__version__, "seconds": round(time.monotonic() - T0, 3),
        "failed": failed, "threads": threads, "probe_dir": HOT["dir"],
    })
    state = {"ctl": ctl, "wake_r": wake_r, "wake_w": wake_w, "libc": libc, "defaults": defaults}
    children = set()
    try:
        if CONFIG.get("hot", True):
            start_probe(ctl, state)
        else:
            send_hot(ctl, error="off: aiod cannot charge what fork() copies to the kernels' memory groups")
        serve(ctl, wake_r, children, state)
    finally:
        # A second SIGTERM (aiod's death can send two) must not cut this short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop_probe(wait=True)
        stop_children(children)
    # Nothing to tear down: skip the interpreter's (a tenth of a second and
    # more with pandas loaded).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


FILLERS = []


def fill_free_blocks(failed):
    """Fill the free blocks of the small-object allocator's partly used
    pools with bytes objects kept for ever: a child's new objects then go
    to pools of its own instead of into the template's pages, each of which
    the first object written to it would copy (1.3 MB less per idle pandas
    kernel). The allocator's statistics say how many blocks of each size
    are free; they are written to descriptor 2, here a pipe (about 4 KB,
    well within its buffer)."""
    try:
        r, w = os.pipe()
        saved = os.dup(2)
        try:
            os.dup2(w, 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(w)
        with os.fdopen(r, "rb") as f:
            stats = f.read().decode(errors="replace")
        empty = sys.getsizeof(b"")  # a bytes(n) takes a block of empty + n
        for line in stats.splitlines():
            f = line.split()
            if len(f) != 5 or not all(x.isdigit() for x in f):
                continue
            n, avail = int(f[1]) - empty, int(f[4])
            if n > 1:  # bytes of length 0 and 1 are shared, never allocated
                FILLERS.extend(bytes(n) for _ in range(avail))
    except Exception as e:  # an allocator without statistics: no fill
        failed["aiod: fill free blocks"] = repr(e)


def fill_free_chunks(libc, failed):
    """Allocate, and keep for ever, the C allocator's free chunks, as
    fill_free_blocks does for Python's small objects: a child's first C
    allocations then come from the top of the heap, a few pages, instead of
    reusing chunks spread over the template's pages, each of which the reuse
    (and the unlinking of its neighbours) would copy into the child. The
    allocator's own report (malloc_info) says how many chunks of each size
    are free; a few rounds take what the first leaves (about 2,150 chunks,
    650 KB, in a pandas template)."""
    try:
        import ctypes
        import xml.etree.ElementTree as ET

        libc.fdopen.restype = ctypes.c_void_p
        libc.fdopen.argtypes = [ctypes.c_int, ctypes.c_char_p]
        libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.fclose.argtypes = [ctypes.c_void_p]
        libc.malloc.restype = ctypes.c_void_p
        libc.malloc.argtypes = [ctypes.c_size_t]
        for _ in range(4):
            fd = os.memfd_create("aiod-malloc-info")
            try:
                dup = os.dup(fd)
                f = libc.fdopen(dup, b"w")
                if not f:
                    os.close(dup)
                    raise OSError("fdopen failed")
                libc.malloc_info(0, f)
                libc.fclose(f)
                os.lseek(fd, 0, os.SEEK_SET)
                with os.fdopen(os.dup(fd), "rb") as r:
                    report = ET.fromstring(r.read())
            finally:
                os.close(fd)
            taken = 0
            for size in report.iterfind("heap/sizes/size"):
                # A chunk of "from" bytes serves a request of 16 fewer.
                n, count = max(int(size.get("from")) - 16, 1), int(size.get("count"))
                for _ in range(count):
                    libc.malloc(n)  # never freed
                taken += count
            if not taken:
                break
    except Exception as e:  # no report, or one of another form: no fill
        failed["aiod: fill free chunks"] = repr(e)

# The probe (see "Hot pages" at the top). PROBE_CODE is aiod's priming cell
# (stream/pool.go's primeCode).
PROBE_CODE = "print()\nprint(file=__import__('sys').stderr)"
PROBE_SECONDS = 120
HOT_MAX_PAGES = 16384  # 64 MiB, and io_uring's bound on buffers a ring
HOT = {"pids": {}, "kernel": 0, "client": 0, "dir": None, "dir_error": "", "deadline": 0.0, "rings": [],
       "bytes": 0, "sent": False}


def make_probe_dir():
    """The probe's private folder (its connection file and sockets), made
    before ready, which names it: aiod removes it when the template ends,
    should the template be killed before it could. Under /tmp when the
    temporary folder's path is too long for a socket's."""
    import tempfile

    try:
        d = tempfile.mkdtemp(prefix="aiod-probe-")
        if len(d) > 90:
            os.rmdir(d)
            d = tempfile.mkdtemp(prefix="aiod-probe-", dir="/tmp")
        HOT["dir"] = d
    except OSError as e:
        HOT["dir_error"] = str(e)


def start_probe(ctl, state):
    """Fork the probe kernel and its client (both children of the
    template, neither reported to aiod); the client's exit says when the
    kernel has run its cell."""
    try:
        d = HOT["dir"]
        if d is None:
            raise OSError("no folder: %s" % HOT["dir_error"])
        conn = os.path.join(d, "kernel.json")
        info = {"transport": "ipc", "ip": os.path.join(d, "k"), "shell_port": 1, "iopub_port": 2,
                "stdin_port": 3, "control_port": 4, "hb_port": 5, "key": os.urandom(32).hex(),
                "signature_scheme": "hmac-sha256", "kernel_name": ""}
        with open(os.open(conn, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            json.dump(info, f)
        HOT["deadline"] = time.monotonic() + PROBE_SECONDS
        req = {"args": ["-f", conn] + (CONFIG.get("args") or []), "env": TEMPLATE_ENV, "cwd": d}
        out = os.open(os.devnull, os.O_WRONLY)  # the client's traceback tells a failure
        pid = os.fork()
        if pid == 0:
            child(req, [out], state)  # never returns
        os.close(out)
        HOT["pids"][pid], HOT["kernel"] = "kernel", pid
        pid = os.fork()
        if pid == 0:
            probe_client(conn, state)  # never returns
        HOT["pids"][pid], HOT["client"] = "client", pid
    except Exception as e:
        stop_probe()
        send_hot(ctl, error="start the probe: %r" % e)


def probe_client(conn, state):
    code = 1
    try:
        own_oom_score()
        for s in ("ctl", "wake_r", "wake_w"):
            state[s].close()
        signal.set_wakeup_fd(-1)
        state["libc"].prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        from jupyter_client.blocking import BlockingKernelClient

        kc = BlockingKernelClient(connection_file=conn)
        kc.load_connection_file()
        kc.start_channels(shell=True, iopub=True, stdin=False, hb=False, control=False)
        kc.wait_for_ready(timeout=PROBE_SECONDS)
        msg_id = kc.execute(PROBE_CODE, store_history=False)
        kc.get_shell_msg(timeout=PROBE_SECONDS)
        while True:
            m = kc.get_iopub_msg(timeout=PROBE_SECONDS)
            if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "status" \
                    and m["content"]["execution_state"] == "idle":
                break
        code = 0
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def probe_ended(ctl, pid, status):
    role = HOT["pids"].pop(pid)
    HOT[role] = 0
    if role == "client" and HOT["kernel"] and os.waitstatus_to_exitcode(status) == 0:
        try:
            pages, seconds = hold_hot_pages(HOT["kernel"])
            send_hot(ctl, pages=pages, seconds=round(seconds, 3))
        except Exception as e:
            send_hot(ctl, error="pin the hot pages: %s" % e)
    elif HOT[{"client": "kernel", "kernel": "client"}[role]] or not HOT["pids"]:
        send_hot(ctl, error="the probe's %s ended before its cell had run (wait status %d)" % (role, status))
    stop_probe()


def stop_probe(wait=False):
    """Kill what is left of the probe (reap collects it, or with wait
    this) and, once it is all gone, remove its folder."""
    for pid in list(HOT["pids"]):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        if wait:
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass
            del HOT["pids"][pid]
    if not HOT["pids"] and HOT["dir"]:
        import shutil

        shutil.rmtree(HOT["dir"], ignore_errors=True)
        HOT["dir"] = None


def room_for_hot_pages(procs):
    """Refuse to fork in a memory group whose limit could not hold twice the
    hot pages: the OOM killer would find only the template there."""
    d = os.path.dirname(procs)
    try:
        with open(os.path.join(d, "memory.limit_in_bytes")) as f:
            limit = int(f.read())
    except (OSError, ValueError):
        return
    if limit < 2 * HOT["bytes"]:
        raise OSError(errno.ENOMEM, "its limit of %d bytes is less than twice the %d bytes a fork copies" % (limit, HOT["bytes"]))


def join_group(procs):
    with open(procs, "w") as f:
        f.write(str(os.getpid()))


def drop_hot_pages(ctl, why):
    """Unpin the hot pages for good: forks then copy page by page again,
    in the child, charged to the child's group."""
    for ring in HOT["rings"]:
        os.close(ring)
    HOT["rings"] = []
    HOT["sent"] = False
    send_hot(ctl, pages=0, error="dropped: " + why)


def send_hot(ctl, **msg):
    if not HOT["sent"]:
        HOT["sent"] = True
        try:
            send(ctl, dict(msg, op="hot"))
        except OSError:
            pass


def hold_hot_pages(pid):
    """Pin the pages of the template's private writable mappings that
    process pid (a child) has copied: present in both, and mapped in pid
    alone (pagemap bits 63 and 56). Returns how many, and the time taken."""
    import ctypes

    t0 = time.monotonic()
    maps = []
    with open("/proc/self/maps") as f:
        for line in f:
            x = line.split()
            name = x[5] if len(x) > 5 else ""
            if x[1][1] == "w" and x[1][3] == "p" and name not in ("[stack]", "[vvar]", "[vdso]", "[vsyscall]"):
                maps.append(tuple(int(v, 16) for v in x[0].split("-")))
    runs = []  # [start, length] of consecutive hot pages
    with open("/proc/%d/pagemap" % pid, "rb") as theirs, open("/proc/self/pagemap", "rb") as mine:
        for lo, hi in maps:
            theirs.seek(lo // 4096 * 8)
            mine.seek(lo // 4096 * 8)
            t, m = array.array("Q"), array.array("Q")
            t.frombytes(theirs.read((hi - lo) // 4096 * 8))
            m.frombytes(mine.read((hi - lo) // 4096 * 8))
            for i in range(min(len(t), len(m))):
                if t[i] >> 63 & t[i] >> 56 & m[i] >> 63 & 1:
                    a = lo + i * 4096
                    if runs and runs[-1][0] + runs[-1][1] == a:
                        runs[-1][1] += 4096
                    else:
                        runs.append([a, 4096])
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long

    class iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    while runs and (len(runs) > HOT_MAX_PAGES or sum(n for _, n in runs) > HOT_MAX_PAGES * 4096):
        runs.pop()
    params = ctypes.create_string_buffer(120)  # struct io_uring_params
    ring = libc.syscall(425, ctypes.c_uint(1), params)  # io_uring_setup
    if ring < 0:
        raise OSError(ctypes.get_errno(), "io_uring_setup: " + os.strerror(ctypes.get_errno()))
    while runs:
        iov = (iovec * len(runs))(*[(a, n) for a, n in runs])
        # io_uring_register(ring, IORING_REGISTER_BUFFERS, iov, n)
        if libc.syscall(427, ctypes.c_int(ring), ctypes.c_uint(0), iov, ctypes.c_uint(len(runs))) == 0:
            HOT["rings"].append(ring)
            HOT["bytes"] = sum(n for _, n in runs)
            return HOT["bytes"] // 4096, time.monotonic() - t0
        err = ctypes.get_errno()
        if err != 12:  # ENOMEM: over RLIMIT_MEMLOCK; try with half
            os.close(ring)
            raise OSError(err, "io_uring_register: " + os.strerror(err))
        del runs[len(runs) // 2:]
    os.close(ring)
    raise OSError(12, "io_uring_register: no pages fit RLIMIT_MEMLOCK")


def serve(ctl, wake_r, children, state):
    while True:
        try:
            ready, _, _ = select.select([ctl, wake_r], [], [], 1.0)
        except InterruptedError:
            ready = []
        if wake_r in ready:
            try:
                while wake_r.recv(512):
                    pass
            except BlockingIOError:
                pass
        reap(ctl, children)
        if HOT["pids"] and time.monotonic() > HOT["deadline"]:
            stop_probe()
            send_hot(ctl, error="the probe did not run its cell within %d s" % PROBE_SECONDS)
        if os.getppid() != PARENT:
            return  # aiod died; the children go with us
        if ctl not in ready:
            continue
        fds = array.array("i")
        try:
            data, anc, _, _ = ctl.recvmsg(1 << 20, socket.CMSG_LEN(8 * fds.itemsize))
        except ConnectionResetError:
            return
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
        if not data:
            for fd in fds:
                os.close(fd)
            return  # aiod closed its end
        req = json.loads(data)
        if req.get("op") != "fork" or len(fds) < (2 if req.get("gate") else 1) or (req.get("confine") and CONFINE is None):
            for fd in fds:
                os.close(fd)
            send(ctl, {"op": "forked", "id": req.get("id"), "error": "bad request: want op fork with its descriptors (and a template that confines)"})
            continue
        fork(ctl, req, list(fds), children, state)


def fork(ctl, req, fds, children, state):
    sys.stdout.flush()
    sys.stderr.flush()
    gc.freeze()
    # Fork on the one CPU the kernel is to start on, which the child and
    # every thread it makes inherit until aiod unpins them: a page the
    # child's start-up copies from the template then needs no other CPU's
    # TLB flushed (the child has never run anywhere else). Without "cpu",
    # or when that CPU cannot be had, on all the template's CPUs.
    cpus = CPUS
    if req.get("cpu") is not None:
        cpus = {req["cpu"]}
    try:
        os.sched_setaffinity(0, cpus)
    except OSError:
        try:
            os.sched_setaffinity(0, CPUS)
        except OSError:
            pass
    charged = False
    if req.get("charge") and HOT["rings"] and CONFIG.get("charge_home"):
        # Fork in the kernel's memory group, so that the hot pages fork()
        # copies are charged to the kernel (see "Hot pages").
        try:
            room_for_hot_pages(req["charge"])
            join_group(req["charge"])
            charged = True
        except OSError as e:
            for fd in fds:
                os.close(fd)
            try:
                os.sched_setaffinity(0, CPUS)
            except OSError:
                pass
            if e.errno in (errno.EACCES, errno.EPERM):  # never will: fork page by page
                drop_hot_pages(ctl, "cannot fork in the kernels' memory groups: %s" % e)
            send(ctl, {"op": "forked", "id": req["id"], "error": "join the kernel's memory group: %s" % e})
            return
    try:
        pid = os.fork()
    except OSError as e:
        pid = -1
        err = e
    if charged and pid != 0:  # the child stays in its kernel's group
        try:
            join_group(CONFIG["charge_home"])
        except OSError as e:  # the template's own group: should not happen
            drop_hot_pages(ctl, "cannot go back to its own memory group: %s" % e)
    if pid < 0:
        for fd in fds:
            os.close(fd)
        send(ctl, {"op": "forked", "id": req["id"], "error": "fork: %s" % err})
        return
    if pid == 0:
        child(req, fds, state)  # never returns
    if cpus != CPUS:
        # Leave that CPU to the child until the next fork: the child cannot
        # run there while the template is on it (the rest of this fork, the
        # wait for the next request). 5-18 ms off a cold fork's first
        # execute at the median on the 2-core AMD VM.
        try:
            os.sched_setaffinity(0, CPUS - cpus or CPUS)
        except OSError:
            pass
    for fd in fds:
        os.close(fd)
    children.add(pid)
    send(ctl, {"op": "forked", "id": req["id"], "pid": pid})


def reap(ctl, children):
    while children or HOT["pids"]:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            HOT["pids"].clear()
            return
        if pid == 0:
            return
        if pid in HOT["pids"]:
            probe_ended(ctl, pid, status)
            continue
        children.discard(pid)
        msg = {"op": "exit", "pid": pid}
        if os.WIFSIGNALED(status):
            msg["signal"] = os.WTERMSIG(status)
        else:
            msg["code"] = os.waitstatus_to_exitcode(status)
        try:
            send(ctl, msg)
        except OSError:
            pass  # aiod is gone; keep reaping


def stop_children(children):
    """Kill every child's process group and reap them, for at most 5 s."""
    for pid in children:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            # No group yet: the child has not reached its setsid.
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        except OSError:
            pass
    deadline = time.monotonic() + 5
    while children and time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.02)
        children.discard(pid)


def child(req, fds, state):
    """Become the kernel: own session, own descriptors, own environment,
    and, when the request says so, its tenant's sandbox."""
    code = 1
    try:
        own_oom_score()
        for ring in HOT["rings"]:
            os.close(ring)  # the pins are the template's; no child holds them
        if req.get("gate"):
            # Wait until aiod has put this process in its cgroups: nothing
            # of the kernel, the tenant's profile or its sandbox runs before.
            gate = fds.pop(1)
            line = b""
            while not line.endswith(b"\n"):
                b = os.read(gate, 1)
                if not b:
                    os._exit(125)  # aiod shut the gate
                line += b
            os.close(gate)
        out_fd = fds[0]
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.close(out_fd)
        template = os.getppid()
        os.setsid()
        # Die with the template (which dies with aiod): the kernel never
        # outlives the daemon, and never becomes someone else's orphan.
        if state["libc"].prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != template:
            os._exit(1)
        signal.set_wakeup_fd(-1)
        for s, h in state["defaults"].items():
            signal.signal(s, h)
        for s in ("ctl", "wake_r", "wake_w"):
            state.pop(s).close()
        if req.get("confine"):
            CONFINE(req["confine"], fds[1:])
            if os.getppid() != template:
                os._exit(1)  # the template died while the sandbox was made
        else:
            state["libc"].prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # the template is not; the kernel is
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        user_site()
        sys.path.insert(0, os.getcwd())
        sys.argv = [LAUNCHER] + req["args"]
        reseed()
        backend = os.environ.get("MPLBACKEND")
        if backend and "matplotlib" in sys.modules:
            mpl = sys.modules["matplotlib"]
            if dict.__getitem__(mpl.rcParams, "backend") != backend:
                mpl.rcParams["backend"] = backend
        gc.enable()
        if req.get("confine") and APP is not None:
            own_profile(APP)
        del state, req
        app = kernel_app(sys.argv[1:], os.environ)
        app.start()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            sys.stderr.write("%s\n" % e.code)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            import atexit

            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def own_oom_score():
    """Take the kernels' OOM score (the config's "oom_score_adj")."""
    adj = CONFIG.get("oom_score_adj")
    if adj is not None:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(adj))


def own_profile(app):
    """The template read IPython's configuration in a HOME of its own; the
    tenant's HOME is mounted over it, so make the profile's folders there
    (the kernel's startup scripts are read from it)."""
    try:
        os.makedirs(app.profile_dir.location, exist_ok=True)
        app.profile_dir.check_dirs()
    except Exception:  # a kernel without its profile folders still runs
        pass


def user_site():
    """Put the kernel's own user site-packages on sys.path, as Python does
    at start-up: `pip install --user` installs there, under the kernel's
    HOME, which was not the template's HOME (or did not exist) when the
    template started. Like Python, before the system's packages. Unlike
    Python, also while the folder does not exist yet: a pooled kernel forked
    before a session's first `pip install --user` finds what it installed
    (LaterDir)."""
    try:
        import site

        if not site.ENABLE_USER_SITE or os.environ.get("PYTHONNOUSERSITE"):
            return
        old = site.USER_SITE
        site.USER_BASE = site.USER_SITE = None
        path = site.getusersitepackages()
        before = [p for p in sys.path if p != old or p == path]
        if path in before:
            sys.path[:] = before
            return
        if os.path.isdir(path):
            site.addsitedir(path)
            added = [p for p in sys.path if p not in before]
        else:
            sys.path_hooks.insert(0, LaterDir.hook(path))
            sys.path_importer_cache.pop(path, None)
            added = [path]
        at = next((i for i, p in enumerate(before) if p.endswith(("site-packages", "dist-packages"))), len(before))
        sys.path[:] = before[:at] + added + before[at:]
    except Exception:  # a kernel without its user site still runs
        pass


class LaterDir:
    """The finder of a path entry whose folder does not exist yet: it finds
    nothing until the folder appears, then what the usual finder there
    finds (Python's own caches such an entry as finding nothing, for good).
    .pth files in it are not read, as they are not for a folder made after
    start-up."""

    def __init__(self, path):
        self.path = path
        self.finder = None

    @classmethod
    def hook(cls, path):
        def later(p):
            if p != path or os.path.isdir(p):
                raise ImportError("not the user site-packages yet to come")
            return cls(p)

        return later

    def find_spec(self, fullname, target=None):
        if self.finder is None:
            if not os.path.isdir(self.path):
                return None
            for hook in sys.path_hooks:
                try:
                    self.finder = hook(self.path)
                    break
                except ImportError:
                    continue
            else:
                return None
        return self.finder.find_spec(fullname, target)

    def invalidate_caches(self):
        if self.finder is not None:
            self.finder.invalidate_caches()


def reseed():
    """Give the child its own random state: every generator seeded when the
    template imported it would otherwise repeat the same numbers in every
    kernel."""
    import random

    random.seed()
    np_random = sys.modules.get("numpy.random")
    if np_random is None:
        return
    # numpy's global generator (Mersenne Twister) gets a whole new state
    # from the system's entropy (624 words, pos 624: the next draw makes
    # new numbers from it). np.random.seed() would draw 128 bits through
    # SeedSequence's Python code, which in a new child cost 6.6 ms and 165
    # page faults on the 2-core AMD VM against 2.4 ms and 71 for this.
    try:
        key = sys.modules["numpy"].frombuffer(os.urandom(624 * 4), dtype="uint32")
        np_random.set_state(("MT19937", key, 624, 0, 0.0))
    except Exception:  # a numpy without the legacy state: its own seeding
        np_random.seed()


main()
