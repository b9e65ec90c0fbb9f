"""A bytecode cache for the methods attrs generates, as ``__pycache__`` is for modules.

attrs writes each class's ``__init__``, ``__eq__``, ``__repr__`` and ``__hash__`` as Python source and
compiles it when the class is created: for kraftpy's seven hundred classes that is about a third of
the time a process takes to import a node's modules (a test cluster's start, a CLI command, a broker's
restart), every time. The compiled code objects depend only on the source, its file name and the
interpreter, so they are kept: `install` (run by ``kraftpy/__init__`` before any kraftpy class exists)
puts a ``compile`` into attrs' module that looks the code up first. kraftpy.protocol.schema compiles
the protocol's message classes and their codecs through it too (`cached_compile`).

Where: ``__pycache__/attrs-<interpreter's magic>/`` beside this file, or under ``sys.pycache_prefix``
(``PYTHONPYCACHEPREFIX``) when it is set, one marshal file per class named by a digest of the source;
written as ``.pyc`` files are (a temporary file renamed into place, so concurrent processes agree), not
written when ``sys.dont_write_bytecode`` (``PYTHONDONTWRITEBYTECODE``) is set or the directory is not
writable. A file that does not load is compiled anew. ``KRAFTPY_NO_CODE_CACHE=1`` turns it off.

One part of attrs' source differs between processes: the constant a class's ``__hash__`` mixes in,
``hash()`` of the class's name, which Python salts per process. The digest is taken with it left out,
and a cached ``__hash__`` keeps the constant of the process that compiled it: any constant serves (it
only keeps equal fields of different classes apart), and hashes differ between processes anyway.
"""

from __future__ import annotations

import builtins
import hashlib
import importlib.util
import marshal
import os
import re
import sys
import threading
from pathlib import Path
from types import CodeType
from typing import Any

#: The per-process constant in an attrs ``__hash__``: ``hash((<int>, self.a, ...))``.
_HASH_SALT = re.compile(r"hash\(\(\s*-?\d+,")
#: A process stops writing after this many new entries (a source that differs in every process would
#: otherwise fill the directory).
MAX_WRITES = 5000

_compile = builtins.compile
_directory: Path | None = None
_writable = False
#: Counts since `install`: looked up and found, compiled and written, compiled but not written.
stats = {"hits": 0, "written": 0, "compiled": 0}


def directory() -> Path:
    tag = "attrs-" + importlib.util.MAGIC_NUMBER.hex()
    if sys.pycache_prefix:
        return Path(sys.pycache_prefix) / "kraftpy" / tag
    return Path(__file__).resolve().parent / "__pycache__" / tag


def _key(source: str, filename: str, mode: str) -> str:
    stable = _HASH_SALT.sub("hash((", source)
    return hashlib.sha1(f"{filename}\0{mode}\0{stable}".encode()).hexdigest()


def cached_compile(source: Any, filename: Any, mode: str, *args: Any, **kwargs: Any) -> CodeType:
    """``compile``, through the cache when it is given a string and nothing else."""
    global _writable
    if _directory is None or args or kwargs or not isinstance(source, str) or not isinstance(filename, str):
        return _compile(source, filename, mode, *args, **kwargs)
    path = _directory / _key(source, filename, mode)
    try:
        code = marshal.loads(path.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        pass
    else:
        if isinstance(code, CodeType):
            stats["hits"] += 1
            return code
    code = _compile(source, filename, mode)
    if not _writable or stats["written"] >= MAX_WRITES:
        stats["compiled"] += 1
        return code
    temporary = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        temporary.write_bytes(marshal.dumps(code))
        os.replace(temporary, path)
        stats["written"] += 1
    except OSError:
        _writable = False  # a full disk or a read-only install: compile from now on
        stats["compiled"] += 1
        try:
            temporary.unlink()
        except OSError:
            pass
    return code


def install() -> None:
    """Route attrs' compilation of generated methods through the cache (once; a no-op when turned off
    or when attrs compiles some other way)."""
    global _directory, _writable
    if _directory is not None or os.environ.get("KRAFTPY_NO_CODE_CACHE") == "1":
        return
    from attr import _make

    if not callable(getattr(_make, "_compile_and_eval", None)):
        return
    where = directory()
    _writable = not sys.dont_write_bytecode
    if _writable:
        try:
            where.mkdir(parents=True, exist_ok=True)
            _writable = os.access(where, os.W_OK)
        except OSError:
            _writable = False
    _directory = where
    # attrs calls the builtin by name in its module (_compile_and_eval): a module global of that name
    # is found first.
    _make.compile = cached_compile
