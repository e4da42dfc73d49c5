"""Unified diffs of file trees: make one (:func:`make_patch`), apply one (:func:`apply_patch`).

Enough of the format for the patches this package makes and for SWE-bench's ``patch`` /
``test_patch`` (``git diff`` output: modified, added and deleted text files). Applying is exact:
every context and removed line must match where the hunk says, or :class:`PatchError` names the
file and hunk.
"""

from __future__ import annotations

import difflib
import re
from typing import Mapping

__all__ = ["PatchError", "apply_patch", "make_patch", "patch_files"]

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    """A patch that does not apply (or cannot be read)."""


def make_patch(before: Mapping[str, bytes], after: Mapping[str, bytes], context: int = 3) -> str:
    """The unified diff (``git diff`` style headers) that turns ``before`` into ``after``."""
    out: list[str] = []
    for path in sorted(set(before) | set(after)):
        a, b = before.get(path), after.get(path)
        if a == b:
            continue
        a_lines = [] if a is None else a.decode("utf-8").splitlines(keepends=True)
        b_lines = [] if b is None else b.decode("utf-8").splitlines(keepends=True)
        out.append(f"diff --git a/{path} b/{path}\n")
        for line in difflib.unified_diff(a_lines, b_lines, "/dev/null" if a is None else f"a/{path}",
                                         "/dev/null" if b is None else f"b/{path}", n=context):
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def patch_files(patch: str) -> list[str]:
    """The paths a patch changes, in order."""
    return [path for path, _, _ in _parse(patch)]


def _strip(name: str) -> str | None:
    name = name.split("\t")[0].strip()
    if name == "/dev/null":
        return None
    return name[2:] if name.startswith(("a/", "b/")) else name


def _parse(patch: str) -> list[tuple[str, bool, list[tuple[int, list[str]]]]]:
    """(path, deleted, hunks); a hunk is (old start, its lines with their ' ', '-', '+' marks)."""
    files: list[tuple[str, bool, list[tuple[int, list[str]]]]] = []
    lines = patch.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new = _strip(line[4:]), _strip(lines[i + 1][4:])
            path = new if new is not None else old
            if path is None:
                raise PatchError("a file header names /dev/null on both sides")
            hunks: list[tuple[int, list[str]]] = []
            i += 2
            while i < len(lines) and lines[i].startswith("@@"):
                m = _HUNK.match(lines[i])
                if not m:
                    raise PatchError(f"{path}: bad hunk header {lines[i].strip()!r}")
                old_n = int(m.group(2)) if m.group(2) is not None else 1
                new_n = int(m.group(4)) if m.group(4) is not None else 1
                start = int(m.group(1))
                body: list[str] = []
                i += 1
                seen_old = seen_new = 0
                while i < len(lines) and (seen_old < old_n or seen_new < new_n or lines[i].startswith("\\")):
                    text = lines[i]
                    if text.startswith("\\"):
                        if body:
                            body[-1] = body[-1].rstrip("\n")
                        i += 1
                        continue
                    mark = text[:1] if text[:1] in " -+" else " "
                    if text in ("\n", "\r\n"):
                        mark, text = " ", " " + text
                    body.append(text)
                    seen_old += mark in " -"
                    seen_new += mark in " +"
                    i += 1
                hunks.append((start, body))
            files.append((path, new is None, hunks))
            continue
        i += 1
    if patch.strip() and not files:
        raise PatchError("no file changes found in the patch")
    return files


def apply_patch(files: Mapping[str, bytes], patch: str) -> dict[str, bytes]:
    """``files`` (path -> bytes) with ``patch`` applied; raises :class:`PatchError` if it does not apply."""
    out = dict(files)
    for path, deleted, hunks in _parse(patch):
        if deleted:
            if path not in out:
                raise PatchError(f"{path}: the patch deletes a file that does not exist")
            del out[path]
            continue
        old = out.get(path)
        lines = [] if old is None else old.decode("utf-8").splitlines(keepends=True)
        result: list[str] = []
        at = 0
        for n, (start, body) in enumerate(hunks, 1):
            begin = max(0, start - 1) if any(t[:1] in " -" for t in body) else start
            if begin < at:
                raise PatchError(f"{path}: hunk {n} overlaps the one before")
            result.extend(lines[at:begin])
            at = begin
            for text in body:
                mark, content = text[:1], text[1:]
                if mark in " -":
                    if at >= len(lines) or lines[at].rstrip("\r\n") != content.rstrip("\r\n"):
                        found = lines[at].rstrip("\n") if at < len(lines) else "end of file"
                        raise PatchError(f"{path}: hunk {n} expects {content.rstrip()!r} at line {at + 1}, found {found!r}")
                    if mark == " ":
                        result.append(lines[at])
                    at += 1
                else:
                    result.append(content)
        result.extend(lines[at:])
        out[path] = "".join(result).encode("utf-8")
    return out
