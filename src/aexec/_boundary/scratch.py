"""Scratch roots and repository views: where a run's files live.

Every run gets a fresh scratch root (``tempfile.mkdtemp`` under the scratch base)::

    <scratch_root>/work    the candidate's cwd: a copy of the repo, patched (or empty)
    <scratch_root>/home    HOME
    <scratch_root>/tmp     TMPDIR (and, inside the boundary, /tmp, /var/tmp, /dev/shm)
    <scratch_root>/.aexec  the driver's spec, the snippet, the report (not the candidate's)

With the full boundary (root) the scratch root is a tmpfs of its own, shrunk after the
view is made to what the view holds plus the disk cap, so a candidate cannot write more
than the cap anywhere; ``work``, ``home`` and ``tmp`` belong to the run's own uid.
Scratch roots are named ``aexec-<pid>-…``: those of a dead aexec are swept
(``aexec._boundary.leftovers``). The original repository is only read.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import os
import secrets
import shutil
import stat
import tempfile

from .._log import get_logger
from .._stages.plan import Scratch
from .trees import copy_ignore

log = get_logger(__name__)

_libc = ctypes.CDLL(None, use_errno=True)
_MS_REMOUNT, _MNT_DETACH, _MS_NOSUID, _MS_NODEV = 0x20, 0x2, 0x2, 0x4
SCRATCH_PREFIX = "aexec-"


def _mount_tmpfs(target: str, options: str, remount: bool = False) -> None:
    # nosuid, nodev: what the view binds of it keeps them
    flags = (_MS_REMOUNT if remount else 0) | _MS_NOSUID | _MS_NODEV
    rc = _libc.mount(b"aexec", os.fsencode(target), b"tmpfs", ctypes.c_ulong(flags), options.encode())
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs on {target}: {os.strerror(err)}")


def make_scratch(tmpfs: bool = False, base: str | None = None) -> Scratch:
    """A fresh scratch root under ``base`` (default: ``tempfile.gettempdir()``)."""
    root = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=base)
    if tmpfs:
        try:
            _mount_tmpfs(root, "mode=0755,size=50%")
        except OSError:
            os.rmdir(root)
            raise
    s = Scratch(root)
    for d in (s.private, s.home, s.tmp):
        os.mkdir(d)
    if tmpfs:
        # The report lives here: a full scratch disk must not silence the driver.
        _mount_tmpfs(s.private, "mode=0755,size=24m")
    return s


def seal_scratch(scratch: Scratch, uid: int, disk_bytes: int) -> None:
    """Hand the writable dirs to the run's uid; cap the tmpfs at what it holds + the disk cap."""
    for top in (scratch.work, scratch.home, scratch.tmp):
        os.chown(top, uid, uid, follow_symlinks=False)
        _chown_under(top, uid)
    st = os.statvfs(scratch.root)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    _mount_tmpfs(scratch.root, f"size={used + disk_bytes}", remount=True)


def _chown_under(top: str, uid: int) -> None:
    """Everything under ``top`` to ``uid``, links themselves, directories entered but
    not through a link (as ``os.walk`` would, with less of its Python per directory)."""
    stack = [top]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for entry in it:
                os.chown(entry.path, uid, uid, follow_symlinks=False)
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)


def run_uid() -> int:
    """A fresh uid for one run, in a range no distribution hands out."""
    return (1 << 20) + secrets.randbelow(1 << 24)


#: What of the host's /etc a run's view holds (``make_etc``): users and groups, name
#: lookup, the dynamic linker's cache, alternatives' links, certificates, time zone, MIME
#: and service tables, and the configuration toolchains keep there (the JDK's, Python's).
#: Not a name of the host, no secret, no package or service configuration.
ETC_NAMES = (
    "passwd",
    "group",
    "hosts",
    "host.conf",
    "nsswitch.conf",
    "gai.conf",
    "services",
    "protocols",
    "networks",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "ssl",
    "ca-certificates",
    "pki",
    "localtime",
    "timezone",
    "locale.alias",
    "locale.conf",
    "mime.types",
    "magic",
    "inputrc",
    "terminfo",
    "os-release",
    "mtab",
    "java-*",
    "python3*",
    "fonts",
    "gitconfig",
)


def _etc_sources() -> list[str]:
    return [src for pattern in ETC_NAMES for src in sorted(glob.glob(os.path.join("/etc", pattern)))]


def etc_stamp() -> str:
    """What the cut /etc rests on: the names, sizes and mtimes of everything `ETC_NAMES`
    selects, walked (a few hundred entries)."""
    h = hashlib.sha256()
    for src in _etc_sources():
        for dirpath, dirnames, filenames in os.walk(src) if os.path.isdir(src) else [("", [], [src])]:
            for name in sorted([*dirnames, *filenames]):
                path = os.path.join(dirpath, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                h.update(f"{path}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:24]


def make_etc(base: str) -> str:
    """``base/etc-<stamp>``: the `ETC_NAMES` of the host's /etc that others may read
    (links kept as links), a run's /etc. Made once for every aexec on the host while /etc
    is unchanged (atomically: built aside, then renamed into place); older ones pruned."""
    os.makedirs(base, mode=0o700, exist_ok=True)
    final = os.path.join(base, f"etc-{etc_stamp()}")
    if os.path.isdir(final):
        return final
    out = tempfile.mkdtemp(prefix=".etc-", dir=base)
    os.chmod(out, 0o755)

    def unreadable(directory: str, names: list[str]) -> set[str]:
        skip = set()
        for name in names:
            st = os.lstat(os.path.join(directory, name))
            if not stat.S_ISLNK(st.st_mode) and not st.st_mode & 0o004:
                skip.add(name)
        return skip

    for src in _etc_sources():
        dst = os.path.join(out, os.path.basename(src))
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        elif os.path.isdir(src) and os.stat(src).st_mode & 0o005 == 0o005:
            shutil.copytree(src, dst, symlinks=True, ignore=unreadable)
        elif os.path.isfile(src) and os.stat(src).st_mode & 0o004:
            shutil.copy2(src, dst)
    try:
        os.rename(out, final)
    except OSError:  # another aexec made it first
        shutil.rmtree(out, ignore_errors=True)
    for name in os.listdir(base):
        if name.startswith("etc-") and os.path.join(base, name) != final:
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)  # /etc changed since
    return final


def write_private(scratch: Scratch, name: str, text: str) -> str:
    """A small file in the scratch root's private dir (a few KiB: not worth a thread)."""
    path = os.path.join(scratch.private, name)
    data = memoryview(text.encode("utf-8"))
    # as open(path, "w", encoding="utf-8") writes it, without the io layers' objects
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    try:
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)
    return path


def remove_scratch(scratch: Scratch) -> None:
    # A tmpfs root (and the private tmpfs under it) leaves at once; a plain directory
    # is no mount point and the call fails harmlessly (EINVAL). No scan of the mount
    # table: it is as long as the machine has mounts, and this runs once per run.
    _libc.umount2(os.fsencode(scratch.root), _MNT_DETACH)
    try:
        os.rmdir(scratch.root)  # a tmpfs root: once detached, the empty directory under it
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    try:
        shutil.rmtree(scratch.root)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    # A candidate may have made a directory unwritable: make it ours again, then retry.
    for dirpath, dirnames, _ in os.walk(scratch.root):
        for d in dirnames:
            try:
                os.chmod(os.path.join(dirpath, d), 0o700, follow_symlinks=False)
            except (OSError, NotImplementedError):
                pass
    shutil.rmtree(scratch.root, ignore_errors=True)
    if os.path.exists(scratch.root):
        log.warning("scratch_not_removed", scratch_root=scratch.root)


def make_view(scratch: Scratch, repo: str | None, bytecode: str | None = None) -> None:
    """The run's cwd: a copy of ``repo`` (or empty), with ``bytecode``'s ``__pycache__``
    dirs (`compile_bytecode`) laid over it."""
    if repo is None:
        os.mkdir(scratch.work)
    else:
        shutil.copytree(repo, scratch.work, symlinks=True, ignore=copy_ignore)
        if bytecode is not None:
            shutil.copytree(bytecode, scratch.work, dirs_exist_ok=True)


def import_roots(root: str) -> list[str]:
    """sys.path entries for a repo view: its root, and ``src/`` in a src layout."""
    roots = [root]
    src = os.path.join(root, "src")
    if os.path.isdir(src):
        roots.append(src)
    return roots
