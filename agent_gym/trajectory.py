"""Recorded episodes: per-step token records, whole trajectories, and crash-safe JSONL storage.

A :class:`Trajectory` is one finished (or abandoned) episode: the token ids the policy saw and
produced at every step (:class:`StepRecord`), the final chat, and the outcome reward. Trajectories
are stored one JSON object per line; :class:`TrajectoryWriter` fsyncs after every line so a crash
loses at most the episode being written, and :func:`read_trajectories` skips the torn last line such
a crash leaves behind. A path ending in ``.gz`` holds the same lines gzip-compressed (the writer makes
each line one gzip member, so every write still stands on its own).

Numpy values (``np.integer``, ``np.floating``, ``np.bool_``, ``np.ndarray``) anywhere inside
``info``, ``messages`` or ``metadata`` are converted to plain Python values when a model is built,
so that records always serialise and compare equal after a round trip.
"""

from __future__ import annotations

import gzip
import math
import os
import warnings
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    computed_field,
    field_serializer,
    field_validator,
    model_validator,
)

__all__ = [
    "Segment",
    "StepRecord",
    "TornLineWarning",
    "Trajectory",
    "TrajectoryWriter",
    "read_trajectories",
    "to_jsonable",
]


class TornLineWarning(UserWarning):
    """Warned when :func:`read_trajectories` or :class:`TrajectoryWriter` meets a torn last line."""


_PLAIN = frozenset({str, int, float, bool, type(None)})


def to_jsonable(value: Any) -> Any:
    """Recursively convert numpy scalars/arrays (and tuples) to plain JSON-compatible Python values.

    Mappings become dicts (keys are kept as given), sequences become lists, ``np.integer`` becomes
    ``int``, ``np.floating`` becomes ``float``, ``np.bool_`` becomes ``bool`` and ``np.ndarray``
    becomes (nested) lists. Other values are returned unchanged.
    """
    # Plain values first (exact types, so numpy subclasses such as np.float64 are not taken for
    # them): most of an info dict is str / int / float / bool / None, and dicts of them.
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is dict:
        return {k: to_jsonable(v) for k, v in value.items()}
    # Check numpy types first: np.float64 subclasses float, but np.float32 and np.int64 do not,
    # and pydantic's JSON serialiser rejects them.
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {k: to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return value


@dataclass(frozen=True)
class Segment:
    """One token sequence of a trajectory: a maximal run of steps in which the env only appended.

    An append-only env gives one segment per trajectory (the concat-mode sample); an env that rewrites
    its context (``new_segment``) starts a new one after each rewrite. Every trainer adapter builds its
    samples from these (:meth:`Trajectory.segments`), so the policy/env split of the tokens is defined
    once.

    Attributes:
        prompt_ids: the prompt of the segment's first step.
        response_ids: every id after it, in the order the policy saw them: each action, then the env's
            appended turn (the last step's reply only when the episode was stopped before the env ended
            it, see :attr:`Trajectory.tail_ids`).
        response_mask: 1 for an id the policy generated, 0 for an id the env appended.
        response_logprobs: the sampling log-prob of each policy id and 0.0 on env ids; ``None`` when any
            step of the segment was recorded without log-probs.
        step_index: for each response id, the trajectory step it belongs to (a policy id: the step of
            that action; an env id: the step whose reply it is).
        steps: the trajectory step indices the segment covers (positions in ``Trajectory.steps``).
    """

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None
    step_index: list[int]
    steps: range

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


class _Record(BaseModel):
    """Shared configuration for the trajectory models."""

    # NaN/inf rewards or logprobs are bugs worth keeping visible in the log, so they are written as
    # the JSON extensions NaN/Infinity (which pydantic and json both read back) instead of null.
    model_config = ConfigDict(ser_json_inf_nan="constants")


class StepRecord(_Record):
    """The tokens and outcome of one environment step (one policy turn).

    Attributes:
        trajectory_id: Id of the :class:`Trajectory` this step belongs to.
        step: 0-based step index within the trajectory.
        prompt_ids: Token ids the policy was conditioned on at this step.
        response_ids: Token ids the policy generated (the action).
        response_logprobs: Sampling logprob of each response token, if recorded.
        reward: Reward returned by ``env.step``.
        terminated: ``terminated`` flag returned by ``env.step``.
        truncated: ``truncated`` flag returned by ``env.step``.
        new_segment: ``info["new_segment"]`` of this step: the env rewrote its context after this
            action, so the *next* step's ``prompt_ids`` is not this step's ``prompt_ids +
            response_ids`` plus appended tokens, and a trainer must start a new sequence there.
        info: The ``info`` dict returned by ``env.step`` (numpy values converted).
    """

    trajectory_id: str
    step: int = Field(ge=0)
    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float] | None = None
    reward: float
    terminated: bool
    truncated: bool
    new_segment: bool = False
    info: dict[str, Any] = Field(default_factory=dict)

    @field_validator("info", mode="before")
    @classmethod
    def _info_to_jsonable(cls, value: Any) -> Any:
        return to_jsonable(value)

    @field_serializer("info")
    def _serialize_info(self, value: dict[str, Any]) -> dict[str, Any]:
        # Again at write time: info is a plain mutable dict and may have gained numpy values
        # after construction (e.g. a wrapper adding metrics).
        result: dict[str, Any] = to_jsonable(value)
        return result

    @model_validator(mode="after")
    def _check_logprobs_length(self) -> StepRecord:
        if self.response_logprobs is not None and len(self.response_logprobs) != len(
            self.response_ids
        ):
            raise ValueError(
                f"response_logprobs has {len(self.response_logprobs)} entries but response_ids has "
                f"{len(self.response_ids)}; they must have the same length (one logprob per "
                f"response token) (trajectory {self.trajectory_id!r}, step {self.step})"
            )
        return self


class Trajectory(_Record):
    """One episode: its steps, final chat, and outcome.

    Attributes:
        id: Unique trajectory id.
        env_id: Registered id of the environment that produced it.
        task_id: Id of the task (e.g. ``"test-0"``), if the environment has tasks.
        seed: Seed passed to ``env.reset``, if any.
        steps: The steps in order. Their ``trajectory_id`` must equal ``id``, their ``step``
            indices must increase, and only the last step may be terminated or truncated.
        messages: The final chat context (list of chat-message dicts).
        reward: The final outcome reward (e.g. 1.0 for a correct GSM8K answer). When omitted it
            defaults to the last step's reward (0.0 with no steps).
        metadata: Free-form extra data (policy name, sampling settings, timings, ...).
        tail_ids: When the episode was stopped before the env ended it (a token budget, a step cap),
            the ids the env appended after the last action (its reply, which the policy never got to
            answer); empty otherwise. Concat-mode samples end with them, masked out.

    ``return_`` (the undiscounted sum of step rewards) is computed, and written to JSON for
    convenience; it is ignored when reading.
    """

    id: str
    env_id: str
    task_id: str | None = None
    seed: int | None = None
    steps: list[StepRecord] = Field(default_factory=list)
    messages: list[dict[str, Any]] = Field(default_factory=list)
    reward: float = 0.0
    metadata: dict[str, Any] = Field(default_factory=dict)
    tail_ids: list[int] = Field(default_factory=list)

    @field_validator("messages", "metadata", mode="before")
    @classmethod
    def _to_jsonable(cls, value: Any) -> Any:
        return to_jsonable(value)

    @field_serializer("messages", "metadata")
    def _serialize_jsonable(self, value: Any) -> Any:
        return to_jsonable(value)

    @model_validator(mode="before")
    @classmethod
    def _drop_computed(cls, data: Any) -> Any:
        # "return_" is derived from the steps; drop it from input rather than trusting it.
        if isinstance(data, dict) and "return_" in data:
            data = {k: v for k, v in data.items() if k != "return_"}
        return data

    @model_validator(mode="after")
    def _check_steps(self) -> Trajectory:
        previous = -1
        for position, record in enumerate(self.steps):
            if record.trajectory_id != self.id:
                raise ValueError(
                    f"steps[{position}].trajectory_id is {record.trajectory_id!r}, "
                    f"expected {self.id!r}"
                )
            if record.step <= previous:
                raise ValueError(
                    f"steps[{position}].step is {record.step} after {previous}; "
                    "step indices must increase"
                )
            previous = record.step
            if position < len(self.steps) - 1 and (record.terminated or record.truncated):
                raise ValueError(
                    f"steps[{position}] is terminated/truncated but is not the last step"
                )
        if "reward" not in self.model_fields_set and self.steps:
            self.reward = self.steps[-1].reward
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def return_(self) -> float:
        """Undiscounted sum of the step rewards."""
        return math.fsum(s.reward for s in self.steps)

    @property
    def num_turns(self) -> int:
        """Number of policy turns (environment steps)."""
        return len(self.steps)

    @property
    def final_info(self) -> dict[str, Any]:
        """The ``info`` dict of the last step (empty if there are no steps)."""
        return self.steps[-1].info if self.steps else {}

    @property
    def terminated(self) -> bool:
        """Whether the last step ended the episode by termination."""
        return bool(self.steps) and self.steps[-1].terminated

    @property
    def truncated(self) -> bool:
        """Whether the last step ended the episode by truncation."""
        return bool(self.steps) and self.steps[-1].truncated

    def segments(self) -> list[Segment]:
        """The trajectory as token sequences, one per segment (see :class:`Segment`).

        A step whose record has ``new_segment`` set ends its segment; the next step starts the next one.
        Within a segment each step's prompt must extend the previous step's prompt and action
        verbatim (the no-drift invariant): the ids between them are the env's appended turn.

        Raises:
            ValueError: no steps, or a step's prompt does not start with the previous prompt + action.
        """
        if not self.steps:
            raise ValueError(f"trajectory {self.id!r} has no steps")
        segments: list[Segment] = []
        start = 0
        for position, record in enumerate(self.steps):
            if record.new_segment or position == len(self.steps) - 1:
                segments.append(self._segment(start, position + 1, tail=position == len(self.steps) - 1))
                start = position + 1
        return segments

    def _segment(self, start: int, stop: int, *, tail: bool) -> Segment:
        first = self.steps[start]
        prompt = list(first.prompt_ids)
        context = list(prompt)  # the ids the policy sees at the current step
        response: list[int] = []
        mask: list[int] = []
        index: list[int] = []
        logprobs: list[float] | None = []
        for position in range(start, stop):
            record = self.steps[position]
            if position > start:
                if record.prompt_ids[: len(context)] != context:
                    raise ValueError(
                        f"trajectory {self.id!r}: step {record.step}'s prompt ids do not start with the previous "
                        "prompt + response ids (token drift)"
                    )
                appended = record.prompt_ids[len(context) :]
                response.extend(appended)
                mask.extend([0] * len(appended))
                index.extend([position - 1] * len(appended))
                if logprobs is not None:
                    logprobs.extend([0.0] * len(appended))
            response.extend(record.response_ids)
            mask.extend([1] * len(record.response_ids))
            index.extend([position] * len(record.response_ids))
            if logprobs is not None:
                if record.response_logprobs is None:
                    logprobs = None
                else:
                    logprobs.extend(record.response_logprobs)
            context = list(record.prompt_ids) + list(record.response_ids)
        if tail and self.tail_ids:
            response.extend(self.tail_ids)
            mask.extend([0] * len(self.tail_ids))
            index.extend([stop - 1] * len(self.tail_ids))
            if logprobs is not None:
                logprobs.extend([0.0] * len(self.tail_ids))
        return Segment(prompt, response, mask, logprobs, index, range(start, stop))

    def sequence(self) -> Segment:
        """The whole episode as one :class:`Segment` (the concat-mode sample).

        Raises:
            ValueError: no steps; the env rewrote its context (``new_segment``), so the episode is not one
                sequence; or token drift between steps.
        """
        if not self.steps:
            raise ValueError(f"trajectory {self.id!r} has no steps")
        for record in self.steps[:-1]:
            if record.new_segment:
                raise ValueError(
                    f"trajectory {self.id!r}: the env rewrote its context after step {record.step} "
                    "(new_segment), so the episode is not one token sequence"
                )
        [segment] = self.segments()
        return segment

    def token_sequence(self) -> tuple[list[int], list[int]]:
        """The episode as one token sequence and its action mask: ``(token_ids, action_mask)``.

        ``token_ids`` is the last step's prompt plus its response: with an append-only env that is the
        whole episode, every earlier action and env reply included, in the exact ids the policy saw
        (the no-drift invariant). ``action_mask[i]`` is 1 where ``token_ids[i]`` was generated by the
        policy and 0 for prompt and env tokens: the loss mask of supervised training on the episode.
        (:meth:`sequence` gives the same split with log-probs and step indices.)

        Raises:
            ValueError: no steps; an env rewrote its context (``new_segment``), so the steps are not one
                sequence; or a step's prompt does not start with the previous prompt + response.
        """
        if not self.steps:
            raise ValueError(f"trajectory {self.id!r} has no steps")
        for record in self.steps:
            if record.new_segment:
                raise ValueError(
                    f"trajectory {self.id!r}: step {record.step} has new_segment set (the env rewrote its "
                    "context), so the episode is not one token sequence"
                )
        [segment] = self.segments()
        # The trailing env reply of a stopped episode is part of the training sample, not of the
        # policy's last context.
        end = len(segment.response_ids) - (len(self.tail_ids) if self.tail_ids else 0)
        ids = segment.prompt_ids + segment.response_ids[:end]
        mask = [0] * len(segment.prompt_ids) + segment.response_mask[:end]
        return ids, mask

    def to_jsonl_line(self) -> str:
        """Serialise to one line of JSON (no trailing newline; newlines inside are escaped)."""
        return self.model_dump_json()

    @classmethod
    def from_jsonl_line(cls, line: str | bytes) -> Trajectory:
        """Parse one JSONL line written by :meth:`to_jsonl_line`.

        Raises:
            pydantic.ValidationError: The line is not valid JSON or not a valid trajectory.
        """
        return cls.model_validate_json(line)


def _fsync_dir(directory: Path) -> None:
    """fsync a directory so a newly created file's directory entry survives a crash (POSIX)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open directories; durability there is best effort
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _repair_torn_tail(path: Path) -> None:
    """Make an existing file end at a line boundary before appending to it.

    A crash can leave a partial last line without its newline. Appending after it would glue the
    next record onto the fragment and turn a recoverable torn *last* line into a corrupt *middle*
    line. A fragment that is a complete trajectory just gets its newline; otherwise it is cut off.
    """
    with open(path, "r+b") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        # Find the start of the last line by scanning backwards in blocks.
        start = size
        block = 1 << 16
        while start > 0:
            read_from = max(0, start - block)
            f.seek(read_from)
            chunk = f.read(start - read_from)
            newline = chunk.rfind(b"\n")
            if newline != -1:
                start = read_from + newline + 1
                break
            start = read_from
        f.seek(start)
        fragment = f.read()
        try:
            Trajectory.from_jsonl_line(fragment)
        except ValidationError:
            warnings.warn(
                f"{path}: discarding a torn last line ({len(fragment)} bytes, a partial write "
                "from an earlier crash) before appending",
                TornLineWarning,
                stacklevel=3,  # point at the code that opened the writer
            )
            f.truncate(start)
        else:
            f.seek(size)
            f.write(b"\n")
        f.flush()
        os.fsync(f.fileno())


def _repair_torn_gzip_tail(path: Path) -> None:
    """:func:`_repair_torn_tail` for a ``.gz`` file the writer appends gzip members to.

    Each record is one member, so a crash can only leave the last member incomplete: it is cut off.
    Data that is not gzip at all (a plain file named ``.gz``, a corrupt member) is not cut, since
    that would destroy records: appending to it is refused.
    """
    with open(path, "r+b") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(0)
        offset = end = members = 0  # bytes scanned; end of the last complete member; members seen
        member: Any = None
        while chunk := f.read(1 << 20):
            while chunk:
                if member is None:
                    member = zlib.decompressobj(wbits=31)  # 31: one gzip member
                try:
                    member.decompress(chunk)
                except zlib.error as exc:
                    raise ValueError(
                        f"{path}: not appending: byte {end} starts no valid gzip member ({exc}) after "
                        f"{members} complete ones; write to a new file (or name a plain JSONL file .jsonl)"
                    ) from None
                if not member.eof:
                    offset += len(chunk)
                    break
                offset += len(chunk) - len(member.unused_data)
                end, members = offset, members + 1
                chunk, member = member.unused_data, None
        if end == size:
            return
        warnings.warn(
            f"{path}: discarding a torn last gzip member ({size - end} bytes, a partial write from an "
            "earlier crash) before appending",
            TornLineWarning,
            stacklevel=3,  # point at the code that opened the writer
        )
        f.truncate(end)
        f.flush()
        os.fsync(f.fileno())


def _is_gzip(path: Path) -> bool:
    """gzip by its first two bytes, or by a ``.gz`` name (so a plain file misnamed ``.gz`` is reported)."""
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b" or path.suffix == ".gz"


class TrajectoryWriter:
    """Append trajectories to a JSONL file, durably, one line per trajectory.

    Each :meth:`write` serialises the whole line first (so a serialisation error writes nothing),
    writes it in one call, flushes, and ``os.fsync``\\ s, so a crash loses at most the trajectory in
    flight. Opening in append mode first repairs a torn last line left by an earlier crash.
    Use one writer per file: concurrent writers to the same path are not coordinated.

    A path ending in ``.gz`` is written gzip-compressed, each line as its own gzip member: the file is
    one ordinary gzip stream to ``zcat`` and :func:`read_trajectories`, and a crash still loses at most
    the member being written.

    Example::

        with TrajectoryWriter("runs/rollouts.jsonl") as writer:
            writer.write(trajectory)
    """

    def __init__(self, path: str | os.PathLike[str], mode: Literal["a", "w"] = "a") -> None:
        """Open ``path`` for appending (``mode="a"``, the default) or overwrite it (``"w"``).

        Parent directories are created as needed.
        """
        if mode not in ("a", "w"):
            raise ValueError(f"mode must be 'a' (append) or 'w' (overwrite), got {mode!r}")
        self.path = Path(path)
        self._gzip = self.path.suffix == ".gz"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        existed = self.path.exists()
        if mode == "a" and existed:
            (_repair_torn_gzip_tail if self._gzip else _repair_torn_tail)(self.path)
        # Binary mode: exact bytes, no newline translation, one write() per record.
        self._file = open(self.path, "ab" if mode == "a" else "wb")
        if not existed:
            _fsync_dir(self.path.parent.resolve())
        self.count = 0
        """Number of trajectories written by this writer."""

    @property
    def closed(self) -> bool:
        """Whether the writer has been closed."""
        return self._file.closed

    def write(self, trajectory: Trajectory) -> None:
        """Append one trajectory as a line and fsync it to disk."""
        if self._file.closed:
            raise ValueError(f"TrajectoryWriter for {self.path} is closed")
        line = trajectory.to_jsonl_line().encode("utf-8") + b"\n"
        if self._gzip:
            # mtime=0: the same trajectories give the same bytes.
            line = gzip.compress(line, compresslevel=6, mtime=0)
        self._file.write(line)
        self._file.flush()
        os.fsync(self._file.fileno())
        self.count += 1

    def close(self) -> None:
        """Close the file (idempotent)."""
        if not self._file.closed:
            self._file.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"TrajectoryWriter({str(self.path)!r}, {state}, count={self.count})"


def read_trajectories(path: str | os.PathLike[str]) -> Iterator[Trajectory]:
    """Iterate over the trajectories stored in a JSONL file (plain or gzip-compressed), lazily.

    A file is read as gzip when it starts with the gzip magic bytes or its name ends in ``.gz``; the
    rules below then apply to the decompressed lines. Blank lines are skipped. An unreadable *last*
    line is taken to be a torn write from a crash: it is skipped with a :class:`TornLineWarning`
    naming its line number; so is the partial line of a gzip stream that ends early. An unreadable
    line anywhere else means the file is corrupt and raises.

    Raises:
        FileNotFoundError: ``path`` does not exist (raised immediately, not on first iteration).
        ValueError: A line other than the last is not a valid trajectory, or the gzip data is
            corrupt (or a ``.gz`` file is not gzip); the message names the file and 1-based line
            number.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no trajectory file at {path}")
    return _iter_trajectories(path)


def _iter_trajectories(path: Path) -> Iterator[Trajectory]:
    """Generator behind :func:`read_trajectories` (one line of look-ahead to spot the last line)."""
    compressed = _is_gzip(path)
    # Binary mode so that a torn multi-byte UTF-8 character only affects its own line.
    with gzip.open(path, "rb") if compressed else open(path, "rb") as f:
        pending: tuple[int, bytes] | None = None
        lines = iter(f)
        lineno = 0
        while True:
            try:
                raw = next(lines)
            except StopIteration:
                break
            except EOFError:
                # The gzip stream stops before its end marker (a copy or a write cut short): the
                # line it was in is lost, the lines before it are whole.
                if pending is not None:
                    yield _parse_line(path, *pending)
                warnings.warn(
                    f"{path}:{lineno + 1}: skipping the torn last line (the gzip data ends early, likely "
                    "a partial write from a crash)",
                    TornLineWarning,
                    stacklevel=2,
                )
                return
            except (gzip.BadGzipFile, zlib.error) as exc:
                hint = " (if it is plain JSONL, rename it to end in .jsonl)" if lineno == 0 else ""
                raise ValueError(
                    f"{path}:{lineno + 1}: corrupt gzip data after {lineno} whole lines: {exc}{hint}"
                ) from None
            lineno += 1
            if not raw.strip():
                continue
            if pending is not None:
                yield _parse_line(path, *pending)
            pending = (lineno, raw)
        if pending is None:
            return
        lineno, raw = pending
        try:
            trajectory = Trajectory.from_jsonl_line(raw)
        except ValidationError as exc:
            warnings.warn(
                f"{path}:{lineno}: skipping the torn last line (likely a partial write from a "
                f"crash): {_first_error(exc)}",
                TornLineWarning,
                stacklevel=2,
            )
            return
        yield trajectory


def _parse_line(path: Path, lineno: int, raw: bytes) -> Trajectory:
    """Parse a non-final line; any failure is corruption and raises with the line number."""
    try:
        return Trajectory.from_jsonl_line(raw)
    except ValidationError as exc:
        raise ValueError(
            f"{path}:{lineno}: corrupt trajectory line: {_first_error(exc)}"
        ) from exc


def _first_error(exc: ValidationError) -> str:
    """A one-line summary of a pydantic error (the full one can be pages for a big record)."""
    errors = exc.errors(include_url=False, include_input=False)
    if not errors:
        return str(exc)
    first = errors[0]
    location = ".".join(str(part) for part in first.get("loc", ()))
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{location + ': ' if location else ''}{first['msg']}{more}"
