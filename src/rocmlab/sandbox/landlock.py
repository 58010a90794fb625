"""Landlock: a process restricts its own file, TCP and signal access, without any privilege.

The sandbox backend of last resort where neither bubblewrap nor namespaces work: a grading pod
on Kubernetes that runs as a non-root user under the runtime's default seccomp profile (which
forbids new user namespaces), or an instructor without bubblewrap. A kernel applies its ruleset
to itself after ``no_new_privs`` and before ipykernel starts; the ruleset is an allow list, so
everything not named (the course, the grader's files, other learners' runs) is out of reach.

The kernel ABI is read at run time (``abi()``): version 1 handles files, 4 adds TCP bind and
connect, 5 device ioctls, 6 scopes signals and abstract Unix sockets to the sandbox. Landlock also
forbids a sandboxed process to ptrace (or read ``/proc/PID/mem`` or ``environ`` of) any process
outside its domain, from version 1. Kernel documentation:
https://docs.kernel.org/userspace-api/landlock.html
"""

from __future__ import annotations

import ctypes
import os
import struct
from dataclasses import dataclass, field

# syscall numbers: the same on every architecture (asm-generic table, Linux 5.13)
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2
PR_SET_NO_NEW_PRIVS = 38
# What the grader's sandbox needs: TCP rules (4) and signals scoped to the sandbox (6). Below 6 a
# kernel could kill a classmate's kernel, which runs as the same uid.
SANDBOX_ABI = 6

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # the rights a rule on a file may hold
READ = EXECUTE | READ_FILE | READ_DIR
DEVICE = READ_FILE | WRITE_FILE | READ_DIR | IOCTL_DEV  # GPU device files: open, read, write, ioctl


def fs_rights(version: int) -> int:
    """Every file right the running kernel's Landlock knows (all of them are handled: denied
    unless a rule grants them)."""
    rights = (1 << 13) - 1
    if version >= 2:
        rights |= REFER
    if version >= 3:
        rights |= TRUNCATE
    if version >= 5:
        rights |= IOCTL_DEV
    return rights


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def abi() -> int:
    """The Landlock ABI version of the running kernel; 0 where it has none or it is disabled."""
    version = _libc().syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    return max(0, version)


@dataclass
class Ruleset:
    """What a sandboxed process may still do: ``read`` (read and execute below each path),
    ``write`` (everything below each path), ``devices`` (open, read, write and ioctl below each
    path), ``listed`` (list the folders below each path, and read no file there). Any TCP bind or connect is denied, and so are signals and abstract Unix sockets
    towards processes outside the sandbox, where the kernel's ABI handles them."""

    read: list[str] = field(default_factory=list)
    write: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    listed: list[str] = field(default_factory=list)  # folders whose entries may be listed, no file read

    def apply(self) -> int:
        """Restrict this process (and what it starts) for good; returns the ABI applied. Paths
        that do not exist are left out. Raises OSError where Landlock is missing."""
        version = abi()
        if version < 1:
            raise OSError("this kernel has no Landlock (Linux 5.13 or later, with landlock in its lsm= list)")
        handled_fs = fs_rights(version)
        handled_net = NET_BIND_TCP | NET_CONNECT_TCP if version >= 4 else 0
        scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 else 0
        attr = struct.pack("=QQQ", handled_fs, handled_net, scoped)
        size = 24 if version >= 6 else 16 if version >= 4 else 8
        libc = _libc()
        ruleset = libc.syscall(SYS_CREATE_RULESET, attr[:size], ctypes.c_size_t(size), ctypes.c_uint32(0))
        if ruleset < 0:
            raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
        try:
            rules = ((self.read, READ), (self.write, handled_fs), (self.devices, DEVICE), (self.listed, READ_DIR))
            for paths, rights in rules:
                for path in paths:
                    _allow(libc, ruleset, path, rights & handled_fs)
            if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "cannot set no_new_privs")
            if libc.syscall(SYS_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) != 0:
                raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
        finally:
            os.close(ruleset)
        return version


def _allow(libc, ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if not os.path.isdir(f"/proc/self/fd/{fd}"):
            rights &= FILE_ONLY
        rule = struct.pack("=Qi", rights, fd)  # struct landlock_path_beneath_attr is packed
        if libc.syscall(SYS_ADD_RULE, ruleset, ctypes.c_int(RULE_PATH_BENEATH), rule, ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
    finally:
        os.close(fd)
