"""The on-disk build cache: where it lives, and artefacts that a reader gets whole and verified, or not at all.

Every artefact (rendered code, compiled objects and libraries) is written to a private temporary file, flushed to
disk, and its size and SHA-256 recorded in a `<name>.sha256` record beside it before it is renamed into place; a
reader uses an artefact only when it matches its record, so a truncated, emptied or replaced file is rebuilt (and
replaced) instead of trusted. Temporary files carry the writing process's id: those of processes that no longer run
are removed when a process first uses the cache. A cache directory that cannot be created or written, or no home
directory to put one in, falls back, with a warning, to a private temporary one that is removed when the process
exits; artefacts already in a read-only cache are still used.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import shutil
import stat
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: Suffix of an artefact's record: "<size> <sha256>".
RECORD_SUFFIX = ".sha256"
#: Temporary files whose writer cannot be told (no process id in the name) are removed after this many seconds.
STALE_TEMPORARY_S = 24 * 3600.0
_SUBFOLDERS = ("lib", "obj", "code", "index", "derived", "robots")


def configured_cache_dir() -> Path | None:
  """The configured cache directory: $ANVIL_CACHE_DIR, else $XDG_CACHE_HOME/anvil, else ~/.cache/anvil (the home
  directory from $HOME, an empty one unset, else the user's passwd entry); None where there is no home directory."""
  if d := os.environ.get("ANVIL_CACHE_DIR"):
    return Path(d)
  if d := os.environ.get("XDG_CACHE_HOME"):
    return Path(d) / "anvil"
  home = os.environ.get("HOME") or _passwd_home()
  return Path(home) / ".cache" / "anvil" if home and os.path.isabs(home) else None


def _passwd_home() -> str | None:
  """The home directory of this process's user in the passwd database, or None (no entry: a container started with
  an arbitrary uid; not POSIX)."""
  try:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_dir
  except (ImportError, KeyError, AttributeError):
    return None


@dataclass(frozen=True)
class CacheLocation:
  """Where this process writes artefacts (`write`) and where it looks for them (`read`, `write` first)."""

  write: Path
  read: tuple[Path, ...]


def cache_dir() -> Path:
  """The directory this process writes cached artefacts to (the configured one, or its temporary fallback)."""
  return cache_location().write


def cache_location() -> CacheLocation:
  """The cache this process uses, resolved once per configured directory."""
  configured = configured_cache_dir()
  return _resolve("" if configured is None else str(configured))


@functools.cache
def _resolve(configured: str) -> CacheLocation:
  path = Path(configured)
  problem = _unwritable(path) if configured else "no home directory ($HOME unset and no passwd entry) to cache in"
  foreign = problem is None and (problem := _untrusted(path)) is not None
  if problem is None:
    remove_orphans(path)
    return CacheLocation(path, (path,))
  where = f"the cache directory {path} " if configured else ""
  fallback = _private_temporary()
  warnings.warn(
    f"anvil: {where}{problem}; this process caches in {fallback} instead, removed when it exits (set "
    "ANVIL_CACHE_DIR to a writable directory to keep builds between runs)",
    RuntimeWarning,
    stacklevel=4,
  )
  readable = configured and not foreign and path.is_dir()  # NOTE: a read-only cache still serves; a foreign one not
  return CacheLocation(fallback, (fallback, path) if readable else (fallback,))


def _private_temporary() -> Path:
  """A new private (0700) temporary cache directory, removed when the process that made it exits (not when a child
  it forked does)."""
  folder = Path(tempfile.mkdtemp(prefix="anvil-cache-"))
  owner = os.getpid()

  def remove() -> None:
    if os.getpid() == owner:
      shutil.rmtree(folder, ignore_errors=True)

  atexit.register(remove)
  return folder


def _unwritable(path: Path) -> str | None:
  """Why `path` cannot serve as a writable cache directory, or None when it can."""
  try:
    make_private_dirs(path)
  except OSError as e:
    return f"cannot be created ({e.strerror or e})"
  if not os.access(path, os.W_OK | os.X_OK):
    return "is not writable"
  try:
    fd, probe = tempfile.mkstemp(dir=path, prefix=f".probe.{os.getpid()}.", suffix=".tmp")
  except OSError as e:
    return f"is not writable ({e.strerror or e})"
  os.close(fd)
  os.unlink(probe)
  return None


def _untrusted(path: Path) -> str | None:
  """Why the cache at `path` cannot be trusted, or None: it (or a folder in it) is owned by another user, or others
  than its owner may write into it; they could plant code this process loads."""
  for folder in (path, *(path / sub for sub in (*_SUBFOLDERS, "src"))):
    try:
      st = folder.lstat()
    except OSError:
      continue
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
      return f"({folder}) is owned by another user (uid {st.st_uid}): they could plant code this process loads"
    if stat.S_ISLNK(st.st_mode) and folder != path:
      return f"({folder}) is a symbolic link: the cache's folders must be its own"
    if st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and _group_has_others(st.st_gid, st.st_uid)):
      return (f"({folder}) is writable by others than its owner (mode {stat.filemode(st.st_mode)}): they could "
              "replace compiled code this process loads; `chmod go-w` it")  # fmt: skip
  return None


def make_private_dirs(path: Path) -> None:
  """Create `path` and its missing parents as directories only their owner may use (0700), whatever the umask."""
  missing = []
  while not path.exists() and path != path.parent:
    missing.append(path)
    path = path.parent
  for folder in reversed(missing):
    try:
      folder.mkdir(mode=0o700)
    except FileExistsError:
      continue
    os.chmod(folder, 0o700)  # NOTE: the umask may have taken bits off mode (never added any)


def _group_has_others(gid: int, uid: int) -> bool:
  """Whether group `gid` has members other than user `uid` (not a user-private group); True when unknown."""
  try:
    import grp
    import pwd
  except ImportError:  # NOTE: not POSIX
    return True
  try:
    owner = pwd.getpwuid(uid).pw_name
    members = set(grp.getgrgid(gid).gr_mem) | {u.pw_name for u in pwd.getpwall() if u.pw_gid == gid}
  except KeyError:
    return True
  return bool(members - {owner})


def _temporaries(root: Path) -> Iterator[Path]:
  folders = [root / sub for sub in _SUBFOLDERS]
  if (src := root / "src").is_dir():
    folders += [d for d in src.iterdir() if d.is_dir()]
  for folder in folders:
    if folder.is_dir():
      yield from (p for p in folder.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp"))


def _writer_alive(path: Path) -> bool:
  """Whether the process that named this temporary file (".<name>.<pid>.<random>.tmp") still runs."""
  parts = path.name.split(".")
  pid = parts[-3] if len(parts) >= 4 else ""
  if not pid.isdigit():
    return time.time() - path.stat().st_mtime < STALE_TEMPORARY_S
  try:
    os.kill(int(pid), 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


def remove_orphans(root: Path) -> list[Path]:
  """Remove the temporary files under the cache `root` whose writers no longer run (killed mid-build); returns them."""
  removed = []
  for tmp in _temporaries(root):
    try:
      if not _writer_alive(tmp):
        tmp.unlink()
        removed.append(tmp)
    except OSError:
      continue  # NOTE: another process removed it first
  return removed


def temporary_beside(path: Path) -> Path:
  """A new private file next to `path` (created empty), named so `remove_orphans` knows its writer."""
  make_private_dirs(path.parent)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp")
  os.close(fd)
  return Path(tmp)


def _record_of(path: Path) -> Path:
  return path.with_name(path.name + RECORD_SUFFIX)


def _digest(data: bytes) -> str:
  return f"{len(data)} {hashlib.sha256(data).hexdigest()}"


def publish(tmp: Path, path: Path, recorded: bool = True, private: bool = True) -> None:
  """Move the finished temporary file `tmp` to `path` atomically, readable and writable by its owner alone (0600,
  whatever the umask or the tool that wrote it; not `private`: as the umask allows, a user's own output); a `recorded`
  artefact is flushed to disk and its record written first."""
  os.chmod(tmp, 0o600 if private else _umask_mode())
  if recorded:
    with open(tmp, "rb+") as f:
      data = f.read()
      os.fsync(f.fileno())
    record = _record_of(path)
    record_tmp = temporary_beside(record)
    record_tmp.write_text(_digest(data))
    _set_aside_if_odd(record)
    os.replace(record_tmp, record)
  _set_aside_if_odd(path)
  os.replace(tmp, path)


def _set_aside_if_odd(path: Path) -> None:
  """Remove a directory found where an artefact goes (moved aside first, so no reader sees it half removed), so the
  artefact can take its place (a link is replaced as a file is)."""
  if path.is_symlink() or not path.is_dir():
    return
  aside = tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=".aside")
  os.replace(path, aside)
  shutil.rmtree(aside, ignore_errors=True)


def discard(path: Path) -> None:
  """Remove the artefact at `path` and its record from the cache this process writes (one in a read-only cache is
  left, to be shadowed by what replaces it)."""
  if path.is_relative_to(cache_dir()):
    for stale in (path, _record_of(path)):
      stale.unlink(missing_ok=True)


def _umask_mode() -> int:
  """The mode open() gives a new file: 0666 less the process's umask."""
  mask = os.umask(0o022)
  os.umask(mask)
  return 0o666 & ~mask


def write_atomic(path: Path, data: str | bytes, recorded: bool = True, private: bool = True) -> None:
  """Write an artefact so that concurrent readers see either nothing or the whole file (and, when `recorded`, its
  record: see `read_verified`); `private` as `publish` takes it."""
  tmp = temporary_beside(path)
  try:
    tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    publish(tmp, path, recorded, private)
  finally:
    tmp.unlink(missing_ok=True)


def read_verified(path: Path) -> bytes | None:
  """The content of the artefact at `path` when it matches its record; None when it is missing or does not."""
  try:
    data, record = path.read_bytes(), _record_of(path).read_text()
  except (OSError, UnicodeDecodeError):
    return None
  return data if record.strip() == _digest(data) else None


def _verified_in_cache(relative: str) -> tuple[Path, bytes] | None:
  if Path(relative).is_absolute() or ".." in Path(relative).parts:
    raise ValueError(f"anvil: {relative!r} is no path inside the cache")
  for root in cache_location().read:
    if (data := read_verified(path := root / relative)) is not None:
      return path, data
  return None


def find_artifact(relative: str) -> Path | None:
  """The path of the verified artefact `relative` (e.g. "lib/<key>.so") in the cache, or None."""
  return found[0] if (found := _verified_in_cache(relative)) is not None else None


def read_artifact(relative: str) -> bytes | None:
  """The content of the verified artefact `relative` in the cache, or None."""
  return found[1] if (found := _verified_in_cache(relative)) is not None else None
