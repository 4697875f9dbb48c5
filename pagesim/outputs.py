"""Output paths, checked before any work starts.

Every command that writes results calls one of these first, so a finished run
is never thrown away because its --out cannot be written:

    prepare_output_dir(path, force, flag="--out") -> Path    a directory of results (replay, live, sweep, ...)
    prepare_output_file(path, force, flag="--out") -> Path   one file (trace synth, trace convert, calibrate)
    provenance(argv) -> dict                                  what summary.json records about how it was made
    removed_if_left_empty()                                   around a command (cli.main): what these created, still
                                                              empty when the command fails, is removed
    json_text(obj) -> str                                     strict JSON of a result (summary.json, plan.json)

Both create missing parent directories and raise UserError with one line that
names the flag and the path. An existing non-empty directory, or an existing
file, is refused unless `force` (the command's --force): results are never
mixed with an earlier run's by accident. With force the command writes into
the directory, replacing files of the same name; nothing else is deleted.
A command that fails before writing (a missing trace, Ctrl-C) leaves no empty
directory behind: removed_if_left_empty removes the directories these created
for it that are still empty, never one that existed before.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from pagesim.errors import UserError, given_path


def prepare_output_dir(path: str | Path, force: bool = False, flag: str = "--out") -> Path:
    """Create `path` as an (empty, or with `force` existing) writable directory; return it as a Path."""
    out = given_path(path, flag)
    where = f"{flag} {path}"
    if out.exists() and not out.is_dir():
        raise UserError(f"{where}: is a file, not a directory; choose a directory path for {flag}")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UserError(f"{where}: directory exists and is not empty; pass --force to write into it, or choose another {flag}")
    _make_dir(out, where)
    if not os.access(out, os.W_OK | os.X_OK):
        raise UserError(f"{where}: directory is not writable")
    try:  # os.access answers yes to root on read-only mounts or pseudo file systems (/proc): try it
        tempfile.TemporaryFile(dir=out).close()
    except OSError as exc:
        raise UserError(f"{where}: cannot create files in the directory ({exc.strerror})") from None
    return out


def check_output_file(parser, path: str | Path, force: bool = False) -> Path:
    """prepare_output_file for scripts with their own argparse parser (bench/): a bad --out is the parser's error."""
    try:
        return prepare_output_file(path, force)
    except UserError as exc:
        parser.error(str(exc))


def prepare_output_file(path: str | Path, force: bool = False, flag: str = "--out") -> Path:
    """Check that `path` can be written as a new file (or replaced, with `force`); create its parent; return it."""
    out = given_path(path, flag)
    where = f"{flag} {path}"
    if str(path).endswith(os.sep) or out.is_dir():
        raise UserError(f"{where}: is a directory; {flag} takes a file path here")
    if out.exists() and not force:
        raise UserError(f"{where}: file exists; pass --force to replace it, or choose another {flag}")
    _make_dir(out.parent, where)
    if not os.access(out.parent, os.W_OK | os.X_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise UserError(f"{where}: not writable")
    if not out.exists():  # os.access answers yes to root on pseudo file systems (/proc): create the file to know
        try:
            out.open("x").close()
        except OSError as exc:
            raise UserError(f"{where}: cannot create the file ({exc.strerror})") from None
        out.unlink()
    return out


_created: list[Path] | None = None  # inside removed_if_left_empty: the directories _make_dir created, parents first


@contextmanager
def removed_if_left_empty():
    """Around a command: when it raises, each directory that prepare_output_dir/prepare_output_file created during it
    (the --out directory, missing parents) and that is still empty is removed, deepest first."""
    global _created
    outer, _created = _created, []
    try:
        yield
    except BaseException:
        for directory in reversed(_created):
            try:
                directory.rmdir()  # an empty directory only
            except OSError:
                pass
        raise
    finally:
        _created = outer


def _make_dir(directory: Path, where: str) -> None:
    missing = [d for d in (directory, *directory.parents) if not d.exists()][::-1]
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if _created is not None:
            _created.extend(missing)
    except (FileExistsError, NotADirectoryError):
        raise UserError(f"{where}: a parent path is a file, not a directory") from None
    except PermissionError:
        raise UserError(f"{where}: no permission to create the directory {directory}") from None
    except OSError as exc:
        raise UserError(f"{where}: cannot create the directory {directory} ({exc.strerror})") from None


def provenance(argv: list[str] | None) -> dict:
    """pagesim's version, the git commit of its checkout (None outside one; `git_dirty` when files differ from it)
    and the command line."""
    import pagesim

    args = sys.argv[1:] if argv is None else argv
    commit = git_commit()
    return {
        "pagesim_version": pagesim.__version__,
        "git_commit": commit.removesuffix("-dirty") if commit else None,
        "git_dirty": None if not commit else commit.endswith("-dirty"),
        "command": "python -m pagesim " + shlex.join(args),
    }


def git_commit() -> str | None:
    """The commit of the code that runs: PAGESIM_GIT_COMMIT when set (a copy of the code inside another checkout,
    as on a device machine), else its checkout's HEAD (+ '-dirty' with local changes); None outside git."""
    env = os.environ.get("PAGESIM_GIT_COMMIT")
    if env:
        return env
    commit = _git(["rev-parse", "HEAD"])
    if not commit:
        return None
    return commit + ("-dirty" if _git(["status", "--porcelain", "--untracked-files=no"]) else "")


def _git(args: list[str]) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def json_text(obj, indent: int | None = 2) -> str:
    """Strict JSON (RFC 8259) of a result: NaN and infinity as null (an SLO percentile that falls on a rejected
    request, counted infinitely slow, is infinite), numpy scalars as Python numbers, tuples as lists."""
    def clean(o):
        if isinstance(o, dict):
            return {k: clean(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [clean(v) for v in o]
        if hasattr(o, "item") and not isinstance(o, (str, bytes)):  # numpy scalars (arrays are not results here)
            o = o.item()
        if isinstance(o, float) and not math.isfinite(o):
            return None
        return o

    return json.dumps(clean(obj), indent=indent, allow_nan=False)
