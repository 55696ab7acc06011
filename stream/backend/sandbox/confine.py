# aiod sandbox: carries out a Plan (stream/backend/sandbox/plan.go) in this
# process. A kernel template runs it on itself at start (its own mount
# namespace) and in each forked child before the kernel app exists; the
# process must be single-threaded and root. aiod's Go binary does the same
# for spawned runtimes (apply.go): keep the two in step.
#
# confine(plan, fds): plan is the Plan's JSON, decoded; fds are the
# descriptors its net_fd indexes.

import base64
import ctypes
import fcntl
import os
import socket
import struct

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]

_NS = {"mnt": 0x00020000, "ipc": 0x08000000, "uts": 0x04000000, "net": 0x40000000}
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x8, 0x1000, 0x4000, 0x40000
_AT_FDCWD, _AT_EMPTY_PATH, _AT_RECURSIVE = -100, 0x1000, 0x8000
_OPEN_TREE_CLONE, _OPEN_TREE_CLOEXEC = 0x1, 0o2000000
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_ATTR_RDONLY, _ATTR_NOSUID, _ATTR_NODEV = 0x1, 0x2, 0x4
# The new mount API's numbers are the same on every architecture.
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442
_PR_SET_PDEATHSIG, _PR_GET_PDEATHSIG, _PR_SET_DUMPABLE = 1, 2, 4
_PR_SET_SECCOMP, _PR_SET_NO_NEW_PRIVS, _SECCOMP_MODE_FILTER = 22, 38, 2
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _check(ret, what):
    if ret < 0:
        e = ctypes.get_errno()
        raise OSError(e, "%s: %s" % (what, os.strerror(e)))
    return ret


def _setattr(fd, path, flags, attr):
    a = _MountAttr(attr, 0, 0, 0)
    _check(_libc.syscall(_SYS_MOUNT_SETATTR, ctypes.c_int(fd), path.encode(), ctypes.c_uint(flags),
                         ctypes.byref(a), ctypes.c_size_t(ctypes.sizeof(a))), "mount_setattr " + (path or "clone"))


def _mount(src, dst, fstype, flags, data):
    _check(_libc.mount(src and src.encode(), dst.encode(), fstype and fstype.encode(), flags,
                       data and data.encode()), "mount " + dst)


def _step(s, clones):
    op, path = s["op"], s["path"]
    if op == "private":
        _mount(None, path, None, _MS_REC | _MS_PRIVATE, None)
    elif op == "readonly":
        _setattr(_AT_FDCWD, path, _AT_RECURSIVE if s.get("recursive") else 0, _ATTR_RDONLY | _ATTR_NOSUID)
    elif op == "proc":
        _mount("proc", path, "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, s.get("data"))
    elif op == "tmpfs":
        _mount("tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV, s.get("data"))
    elif op == "devpts":
        _mount("devpts", path, "devpts", _MS_NOSUID | _MS_NOEXEC, s.get("data"))
        _mount(path + "/ptmx", "/dev/ptmx", None, _MS_BIND, None)
    elif op == "mkdir":
        os.makedirs(path, 0o755, exist_ok=True)
    elif op == "move":
        fd = clones[s.get("clone", 0)]
        attr = _ATTR_NOSUID | _ATTR_NODEV | (_ATTR_RDONLY if s.get("ro") else 0)
        _setattr(fd, "", _AT_EMPTY_PATH, attr)
        _check(_libc.syscall(_SYS_MOVE_MOUNT, ctypes.c_int(fd), b"", ctypes.c_int(_AT_FDCWD), path.encode(),
                             ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH)), "move_mount " + path)
    else:
        raise ValueError("unknown step %r" % op)


def _lo_up():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        flags = struct.unpack("16sH", fcntl.ioctl(s, _SIOCGIFFLAGS, struct.pack("16sH", b"lo", 0)))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))
    finally:
        s.close()


def confine(plan, fds):
    flags = 0
    for name in plan.get("unshare") or []:
        flags |= _NS[name]
    if flags:
        _check(_libc.unshare(flags), "unshare")
    if plan.get("net_fd", -1) >= 0:
        _check(_libc.setns(fds[plan["net_fd"]], _NS["net"]), "join the tenant's network namespace")
    if plan.get("lo_up"):
        _lo_up()
    clones = []
    try:
        for path in plan.get("clones") or []:
            clones.append(_check(_libc.syscall(_SYS_OPEN_TREE, ctypes.c_int(_AT_FDCWD), path.encode(),
                                               ctypes.c_uint(_OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC)), "clone " + path))
        for s in plan.get("steps") or []:
            _step(s, clones)
    finally:
        for fd in clones:
            os.close(fd)
    if plan.get("keep_root"):
        return
    sig = ctypes.c_int(0)
    _libc.prctl(_PR_GET_PDEATHSIG, ctypes.byref(sig), 0, 0, 0)
    os.setgroups([])
    os.setresgid(plan["gid"], plan["gid"], plan["gid"])
    os.setresuid(plan["uid"], plan["uid"], plan["uid"])
    # A change of credentials clears the parent-death signal and the
    # dumpable flag; the tenant's own processes see each other in /proc.
    if sig.value:
        _check(_libc.prctl(_PR_SET_PDEATHSIG, sig.value, 0, 0, 0), "set the parent-death signal")
    _libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")
    prog = base64.b64decode(plan.get("seccomp") or "")
    if prog:
        buf = ctypes.create_string_buffer(prog, len(prog))
        fprog = _SockFprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
        _check(_libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "install the seccomp filter")
