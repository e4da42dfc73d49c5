"""Expert demonstrations for a warm start on ``AgentR1/SWE-v0``: the reference fix as tool calls.

A task's ``patch`` (the fix, a unified diff against the buggy repository) is written as what an
engineer would do with the env's tools: ``view`` the lines around each change, ``edit`` each hunk
(``old_str``: the hunk's buggy lines with their context, ``new_str``: the fixed ones), then
``submit``. :func:`fix_turns` checks each ``old_str`` is unique in the buggy file (widening the
context where it is not), so played through the env every demonstration scores 1.0.
``examples/sft_warmstart.py --env AgentR1/SWE-v0`` plays them and fine-tunes on the assistant tokens.
"""

from __future__ import annotations

from typing import Any, Iterator

from agent_gym_swe.patches import _parse
from agent_gym_swe.tasks import SWETask, task_files

__all__ = ["demonstrations", "fix_turns"]


def fix_turns(env: Any, task: SWETask) -> tuple[list[str] | None, str]:
    """The assistant turns of the demonstration of ``task`` (``(turns, "kept")``), or ``(None, why)``:
    ``no_patch`` (a task without a reference fix), ``new_file`` (the fix adds or deletes a file),
    ``not_unique`` (a hunk's lines occur more than once however much context is taken),
    ``too_many_turns`` (more turns than ``env.max_turns``)."""
    if not task.patch:
        return None, "no_patch"
    files = task_files(task)
    turns: list[str] = []
    fmt = env.parser.format_calls
    for path, deleted, hunks in _parse(task.patch):
        if deleted or path not in files:
            return None, "new_file"
        text = files[path].decode("utf-8")
        lines = text.splitlines(keepends=True)
        first = max(1, hunks[0][0] - 2) if hunks else 1
        last = min(len(lines), hunks[-1][0] + len(hunks[-1][1]) + 2) if hunks else len(lines)
        turns.append(fmt([{"name": "view", "arguments": {"path": path, "start_line": first, "end_line": last}}]))
        for start, body in hunks:
            old = "".join(t[1:] for t in body if t[:1] in " -")
            new = "".join(t[1:] for t in body if t[:1] in " +")
            at = start - 1
            while text.count(old) != 1:
                if at <= 0 and start - 1 + len(body) >= len(lines) or text.count(old) == 0:
                    return None, "not_unique"
                at = max(0, at - 1)  # widen by the line above (it is the same in both)
                above = lines[at]
                old, new = above + old, above + new
            turns.append(fmt([{"name": "edit", "arguments": {"path": path, "old_str": old, "new_str": new}}]))
            text = text.replace(old, new, 1)
            lines = text.splitlines(keepends=True)
    turns.append(fmt([{"name": "submit", "arguments": {}}]))
    if len(turns) > env.max_turns:
        return None, "too_many_turns"
    return turns, "kept"


def demonstrations(env: Any, *, offset: int, limit: int) -> Iterator[tuple[str, list[str] | None, str]]:
    """``(task_id, turns, outcome)`` for the tasks ``offset`` .. ``offset + limit - 1`` of ``env``'s
    task list (its split and difficulty); ``turns`` is ``None`` when the task is skipped."""
    tasks = env.unwrapped.tasks if hasattr(env, "unwrapped") else env.tasks
    for n in range(offset, min(offset + limit, len(tasks))):
        task = tasks[n]
        turns, outcome = fix_turns(env.unwrapped if hasattr(env, "unwrapped") else env, task)
        yield task.instance_id, turns, outcome
