"""Tests for agent_gym.trajectory: models, JSONL round trips, crash recovery."""

from __future__ import annotations

import gzip
import math
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from agent_gym.trajectory import (
    StepRecord,
    TornLineWarning,
    Trajectory,
    TrajectoryWriter,
    read_trajectories,
    to_jsonable,
)


def make_trajectory(
    traj_id: str = "traj-0", *, n_steps: int = 2, reward: float = 1.0
) -> Trajectory:
    """A small multi-step trajectory whose last step carries the outcome reward."""
    steps = []
    prompt = [1, 2, 3]
    for i in range(n_steps):
        response = [10 + i, 11 + i]
        last = i == n_steps - 1
        steps.append(
            StepRecord(
                trajectory_id=traj_id,
                step=i,
                prompt_ids=prompt,
                response_ids=response,
                response_logprobs=[-0.25, -1.5],
                reward=reward if last else 0.0,
                terminated=last,
                truncated=False,
                info={"turn": i, "note": "multi\nline \"quoted\" ünïcode"},
            )
        )
        prompt = prompt + response + [99]
    return Trajectory(
        id=traj_id,
        env_id="gsm8k-v0",
        task_id="test-0",
        seed=7,
        steps=steps,
        messages=[
            {"role": "user", "content": "How many?"},
            {"role": "assistant", "content": "2 + 2 = 4\n#### 4"},
        ],
        reward=reward,
        metadata={"policy": "smollm2-135m"},
    )


# --- models ------------------------------------------------------------------------------------


def test_round_trip_via_line() -> None:
    traj = make_trajectory()
    line = traj.to_jsonl_line()
    assert "\n" not in line
    again = Trajectory.from_jsonl_line(line)
    assert again == traj
    assert again.num_turns == 2
    assert again.return_ == 1.0
    assert again.reward == 1.0
    assert again.final_info == {"turn": 1, "note": "multi\nline \"quoted\" ünïcode"}
    assert again.terminated and not again.truncated
    # The computed return is written for convenience but not required (or trusted) on input.
    assert '"return_":1.0' in line
    assert Trajectory.from_jsonl_line(line.replace('"return_":1.0', '"return_":123.0')) == traj


def test_reward_defaults_to_last_step_reward() -> None:
    traj = make_trajectory(reward=0.5)
    data = traj.model_dump()
    del data["reward"]
    assert Trajectory.model_validate(data).reward == 0.5
    assert Trajectory(id="empty", env_id="e").reward == 0.0
    assert Trajectory(id="empty", env_id="e").final_info == {}
    assert Trajectory(id="empty", env_id="e").num_turns == 0


def test_logprob_length_must_match_response() -> None:
    with pytest.raises(ValidationError) as excinfo:
        StepRecord(
            trajectory_id="t",
            step=3,
            prompt_ids=[1],
            response_ids=[2, 3, 4],
            response_logprobs=[-0.1, -0.2],
            reward=0.0,
            terminated=False,
            truncated=False,
        )
    message = str(excinfo.value)
    assert "response_logprobs has 2 entries but response_ids has 3" in message
    assert "step 3" in message
    # Absent logprobs are fine.
    StepRecord(
        trajectory_id="t",
        step=0,
        prompt_ids=[1],
        response_ids=[2, 3, 4],
        reward=0.0,
        terminated=False,
        truncated=False,
    )


def test_step_consistency_is_validated() -> None:
    traj = make_trajectory()
    data = traj.model_dump()
    data["steps"][1]["trajectory_id"] = "other"
    with pytest.raises(ValidationError, match="trajectory_id is 'other'"):
        Trajectory.model_validate(data)
    data = traj.model_dump()
    data["steps"][1]["step"] = 0
    with pytest.raises(ValidationError, match="step indices must increase"):
        Trajectory.model_validate(data)
    data = traj.model_dump()
    data["steps"][0]["truncated"] = True
    with pytest.raises(ValidationError, match="not the last step"):
        Trajectory.model_validate(data)


def test_numpy_values_are_converted() -> None:
    step = StepRecord(
        trajectory_id="np",
        step=np.int64(0),
        prompt_ids=np.array([1, 2, 3], dtype=np.int32),
        response_ids=np.array([4, 5], dtype=np.int64),
        response_logprobs=np.array([-0.5, -0.25], dtype=np.float32),
        reward=np.float32(1.0),
        terminated=np.bool_(True),
        truncated=False,
        info={
            "count": np.int64(3),
            "score": np.float32(0.5),
            "flag": np.bool_(False),
            "matrix": np.arange(6).reshape(2, 3),
            "nested": {"vals": (np.float64(1.25), np.int8(-2))},
        },
    )
    assert step.info == {
        "count": 3,
        "score": 0.5,
        "flag": False,
        "matrix": [[0, 1, 2], [3, 4, 5]],
        "nested": {"vals": [1.25, -2]},
    }
    assert type(step.info["count"]) is int and type(step.info["score"]) is float
    # Numpy added after construction is converted when written.
    step.info["late"] = np.arange(2, dtype=np.float32)
    traj = Trajectory(
        id="np",
        env_id="e",
        steps=[step],
        metadata={"temperature": np.float64(0.7), "shape": np.array([2, 3])},
    )
    again = Trajectory.from_jsonl_line(traj.to_jsonl_line())
    assert again.steps[0].info["late"] == [0.0, 1.0]
    assert again.steps[0].info["matrix"] == [[0, 1, 2], [3, 4, 5]]
    assert again.metadata == {"temperature": 0.7, "shape": [2, 3]}
    assert again.steps[0].prompt_ids == [1, 2, 3]
    assert to_jsonable({"a": [np.int16(1), (np.float16(0.5),)]}) == {"a": [1, [0.5]]}


def test_nan_reward_survives_round_trip() -> None:
    traj = make_trajectory(reward=float("nan"))
    again = Trajectory.from_jsonl_line(traj.to_jsonl_line())
    assert math.isnan(again.reward) and math.isnan(again.steps[-1].reward)


# --- writer and reader -------------------------------------------------------------------------


def test_writer_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "rollouts.jsonl"
    trajs = [make_trajectory(f"traj-{i}", n_steps=i + 1, reward=float(i)) for i in range(3)]
    with TrajectoryWriter(path) as writer:
        for traj in trajs:
            writer.write(traj)
        assert writer.count == 3
    assert writer.closed
    assert path.read_bytes().count(b"\n") == 3
    assert list(read_trajectories(path)) == trajs
    with pytest.raises(ValueError, match="closed"):
        writer.write(trajs[0])


def test_append_across_two_writer_sessions(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    with TrajectoryWriter(path) as writer:
        writer.write(make_trajectory("a"))
    with TrajectoryWriter(path, mode="a") as writer:
        writer.write(make_trajectory("b"))
        writer.write(make_trajectory("c"))
    assert [t.id for t in read_trajectories(path)] == ["a", "b", "c"]
    # mode="w" starts over.
    with TrajectoryWriter(path, mode="w") as writer:
        writer.write(make_trajectory("d"))
    assert [t.id for t in read_trajectories(path)] == ["d"]
    with pytest.raises(ValueError, match="mode"):
        TrajectoryWriter(path, mode="r")  # type: ignore[arg-type]


def _write_torn_file(path: Path, complete: list[str], fraction: float = 0.5) -> None:
    """Simulate a crash: complete records, then part of the next one without its newline."""
    torn = make_trajectory("torn").to_jsonl_line().encode("utf-8")
    with TrajectoryWriter(path, mode="w") as writer:
        for traj_id in complete:
            writer.write(make_trajectory(traj_id))
    with open(path, "ab") as f:
        f.write(torn[: int(len(torn) * fraction)])


@pytest.mark.parametrize("fraction", [0.01, 0.5, 0.99])
def test_torn_last_line_is_skipped_with_warning(tmp_path: Path, fraction: float) -> None:
    path = tmp_path / "rollouts.jsonl"
    _write_torn_file(path, ["a", "b"], fraction)
    with pytest.warns(TornLineWarning, match=r"rollouts\.jsonl:3: skipping the torn last line"):
        got = [t.id for t in read_trajectories(path)]
    assert got == ["a", "b"]


def test_torn_multibyte_character_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    with TrajectoryWriter(path) as writer:
        writer.write(make_trajectory("a"))
    with open(path, "ab") as f:
        f.write('{"id": "ü'.encode()[:-1])  # cut inside a two-byte UTF-8 character
    with pytest.warns(TornLineWarning, match=":2:"):
        assert [t.id for t in read_trajectories(path)] == ["a"]


def test_appending_after_a_crash_repairs_the_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    _write_torn_file(path, ["a", "b"])
    with pytest.warns(TornLineWarning, match="discarding a torn last line"):
        writer = TrajectoryWriter(path)
    with writer:
        writer.write(make_trajectory("c"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the repaired file reads back cleanly
        assert [t.id for t in read_trajectories(path)] == ["a", "b", "c"]


def test_appending_keeps_a_complete_last_line_missing_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    path.write_text(make_trajectory("a").to_jsonl_line(), encoding="utf-8")  # no trailing newline
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with TrajectoryWriter(path) as writer:
            writer.write(make_trajectory("b"))
        assert [t.id for t in read_trajectories(path)] == ["a", "b"]


def test_corrupt_middle_line_raises_with_line_number(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    lines = [make_trajectory(i).to_jsonl_line() for i in ("a", "b", "c")]
    lines[1] = lines[1][: len(lines[1]) // 2]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    reader = read_trajectories(path)
    assert next(reader).id == "a"  # lazily yields what it can before the corruption
    with pytest.raises(ValueError, match=r"rollouts\.jsonl:2: corrupt trajectory line"):
        next(reader)


def test_schema_violation_in_middle_line_raises(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    good = make_trajectory("a").to_jsonl_line()
    path.write_text(f'{good}\n\n{{"id": "x"}}\n{good}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r":3: corrupt trajectory line: env_id: Field required"):
        list(read_trajectories(path))


def test_blank_lines_and_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    path.write_text("", encoding="utf-8")
    assert list(read_trajectories(path)) == []
    path.write_text("\n" + make_trajectory("a").to_jsonl_line() + "\n\n", encoding="utf-8")
    assert [t.id for t in read_trajectories(path)] == ["a"]


def test_missing_file_raises_immediately(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_trajectories(tmp_path / "nope.jsonl")


def test_each_write_is_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    path = tmp_path / "rollouts.jsonl"
    with TrajectoryWriter(path) as writer:
        before = len(synced)
        writer.write(make_trajectory("a"))
        writer.write(make_trajectory("b"))
        assert len(synced) - before == 2
        # The data is on disk (not just in a buffer) while the writer is still open.
        assert [t.id for t in read_trajectories(path)] == ["a", "b"]



# -- gzip -------------------------------------------------------------------------------------------


def _gzip_members(trajs: list[Trajectory]) -> list[bytes]:
    """One gzip member per line: the bytes TrajectoryWriter writes to a .gz path."""
    return [gzip.compress(t.to_jsonl_line().encode("utf-8") + b"\n", compresslevel=6, mtime=0) for t in trajs]


def test_gzip_file_reads_like_the_plain_one(tmp_path: Path) -> None:
    plain = tmp_path / "rollouts.jsonl"
    trajs = [make_trajectory(f"traj-{i}", n_steps=i + 1, reward=float(i)) for i in range(3)]
    with TrajectoryWriter(plain) as writer:
        for traj in trajs:
            writer.write(traj)
    gz = tmp_path / "rollouts.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))  # one member, as `gzip rollouts.jsonl` makes it
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(read_trajectories(gz)) == trajs
        # The magic bytes are enough: the same data under a plain name reads the same.
        unnamed = tmp_path / "rollouts-compressed.jsonl"
        unnamed.write_bytes(gz.read_bytes())
        assert list(read_trajectories(unnamed)) == trajs


def test_writer_writes_one_gzip_member_per_line_to_a_gz_path(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl.gz"
    trajs = [make_trajectory(i) for i in ("a", "b", "c")]
    with TrajectoryWriter(path) as writer:
        writer.write(trajs[0])
    with TrajectoryWriter(path, mode="a") as writer:  # appending adds members
        writer.write(trajs[1])
        writer.write(trajs[2])
    assert path.read_bytes() == b"".join(_gzip_members(trajs))
    assert gzip.decompress(path.read_bytes()) == b"".join(t.to_jsonl_line().encode() + b"\n" for t in trajs)
    assert list(read_trajectories(path)) == trajs


def test_torn_gzip_member_is_skipped_with_its_line_number(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl.gz"
    members = _gzip_members([make_trajectory(i) for i in ("a", "b", "torn")])
    path.write_bytes(members[0] + members[1] + members[2][: len(members[2]) // 2])
    with pytest.warns(TornLineWarning, match=r"rollouts\.jsonl\.gz:3: skipping the torn last line \(the gzip data ends early"):
        assert [t.id for t in read_trajectories(path)] == ["a", "b"]
    # The cut may fall after the line's newline, before the member's trailer: the line is whole.
    path.write_bytes(members[0] + members[1][:-4])
    with pytest.warns(TornLineWarning, match=r":3: skipping the torn last line"):
        assert [t.id for t in read_trajectories(path)] == ["a", "b"]


def test_appending_to_a_torn_gzip_file_cuts_the_partial_member(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl.gz"
    members = _gzip_members([make_trajectory(i) for i in ("a", "b", "torn")])
    path.write_bytes(members[0] + members[1] + members[2][:7])
    with pytest.warns(TornLineWarning, match=r"discarding a torn last gzip member \(7 bytes"):
        writer = TrajectoryWriter(path)
    with writer:
        writer.write(make_trajectory("c"))
    assert path.read_bytes() == members[0] + members[1] + _gzip_members([make_trajectory("c")])[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [t.id for t in read_trajectories(path)] == ["a", "b", "c"]


def test_corrupt_gzip_middle_line_and_data_raise_with_line_number(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl.gz"
    lines = [make_trajectory(i).to_jsonl_line() for i in ("a", "b", "c")]
    lines[1] = lines[1][: len(lines[1]) // 2]
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode("utf-8")))
    reader = read_trajectories(path)
    assert next(reader).id == "a"
    with pytest.raises(ValueError, match=r"rollouts\.jsonl\.gz:2: corrupt trajectory line"):
        next(reader)
    # A damaged member: its CRC no longer matches.
    members = _gzip_members([make_trajectory(i) for i in ("a", "b")])
    damaged = bytearray(members[1])
    damaged[-8] ^= 0xFF  # the first byte of the stored CRC-32
    path.write_bytes(members[0] + bytes(damaged))
    with pytest.raises(ValueError, match=r"rollouts\.jsonl\.gz:3: corrupt gzip data after 2 whole lines: CRC check failed"):
        list(read_trajectories(path))


def test_plain_file_named_gz_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl.gz"
    path.write_text(make_trajectory("a").to_jsonl_line() + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"rollouts\.jsonl\.gz:1: corrupt gzip data after 0 whole lines: .*"
                       r"\(if it is plain JSONL, rename it to end in \.jsonl\)"):
        list(read_trajectories(path))
    with pytest.raises(ValueError, match=r"not appending: byte 0 starts no valid gzip member"):
        TrajectoryWriter(path)
    assert path.read_text(encoding="utf-8") == make_trajectory("a").to_jsonl_line() + "\n"  # left as it was
    path.write_bytes(b"")  # an empty .gz file holds no trajectories
    assert list(read_trajectories(path)) == []


# -- token_sequence ---------------------------------------------------------------------------------


def _step(i: int, prompt: list[int], response: list[int], *, new_segment: bool = False, last: bool = False) -> StepRecord:
    return StepRecord(
        trajectory_id="t", step=i, prompt_ids=prompt, response_ids=response, reward=0.0,
        terminated=last, truncated=False, new_segment=new_segment,
    )


def test_token_sequence_joins_steps_and_masks_only_actions() -> None:
    traj = Trajectory(
        id="t",
        env_id="E",
        steps=[
            _step(0, [1, 2, 3], [10, 11]),
            _step(1, [1, 2, 3, 10, 11, 20, 21], [12]),  # env appended 20, 21
            _step(2, [1, 2, 3, 10, 11, 20, 21, 12, 30], [13, 14, 15], last=True),
        ],
    )
    ids, mask = traj.token_sequence()
    assert ids == [1, 2, 3, 10, 11, 20, 21, 12, 30, 13, 14, 15]
    assert mask == [0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1]


def test_token_sequence_refuses_drift_new_segments_and_empty() -> None:
    drift = Trajectory(id="t", env_id="E", steps=[_step(0, [1, 2], [5]), _step(1, [1, 2, 6, 7], [8])])
    with pytest.raises(ValueError, match=r"step 1's prompt ids do not start with the previous prompt \+ response ids"):
        drift.token_sequence()
    rewritten = Trajectory(id="t", env_id="E", steps=[_step(0, [1, 2], [5]), _step(1, [9], [8], new_segment=True)])
    with pytest.raises(ValueError, match="step 1 has new_segment set"):
        rewritten.token_sequence()
    with pytest.raises(ValueError, match="has no steps"):
        Trajectory(id="t", env_id="E").token_sequence()
