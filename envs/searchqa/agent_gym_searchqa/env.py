"""``AgentR1/SearchQA-v0``: multi-hop question answering with ``search`` and ``open`` over a local corpus."""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

from agent_gym.core.env import AgentEnv, Grade, Turn
from agent_gym.core.prompts import PromptTemplates
from agent_gym.core.tasks import TaskList
from agent_gym.core.types import ResetInfo, StepInfo
from agent_gym.tools import ToolExecutor

from agent_gym_searchqa.corpus import Passage, load_corpus, load_questions, world_passages
from agent_gym_searchqa.index import SearchIndex, load_or_build
from agent_gym_searchqa.questions import (
    DIFFICULTIES,
    SPLITS,
    SearchQATask,
    generate_question,
    parse_task_id,
    task_from_mapping,
)
from agent_gym_searchqa.remote import RetrieverClient, shared_client
from agent_gym_searchqa.reward import check_answer
from agent_gym_searchqa.tools import CorpusTools
from agent_gym_searchqa.world import WORLD_SEED, World, generate_world

__all__ = ["EXAMPLE_CALL", "NUM_TASKS", "SearchQAEnv"]

#: The call the system prompt shows, written in the env's tool-call format.
EXAMPLE_CALL: dict[str, Any] = {"name": "search", "arguments": {"query": "Velmont Press"}}
#: Index range of sampled generated questions (per split and difficulty).
NUM_TASKS = 1_000_000
_DEFAULT_DIFFICULTY = "medium"


class SearchQAResetInfo(ResetInfo):
    """The ``info`` of a SearchQA reset: :class:`~agent_gym.core.types.ResetInfo` and the question's difficulty."""

    difficulty: str | None
    """``easy``, ``medium``, ``hard``; ``None`` for questions from a file."""


class SearchQAStepInfo(StepInfo, total=False):
    """The ``info`` of a SearchQA step: :class:`~agent_gym.core.types.StepInfo` and, on the final step, the answer check."""

    predicted: str | None
    """The text in ``<answer>``; ``None``: no answer found."""
    golden_answers: list[str]
    f1: float
    """The best token F1 over the golden answers (reported, not the reward)."""
    difficulty: str | None
    hops: int
    """The documents the question chains through."""


class SearchQAEnv(AgentEnv[SearchQATask, SearchQAResetInfo, SearchQAStepInfo]):
    """Multi-hop question answering: the policy searches a local corpus, reads passages, and answers.

    Each turn either calls tools (``search(query)``: the ``top_k`` best BM25 passages, each as id,
    title and a snippet; ``open(doc_id)``: one whole passage) or answers without a tool call, which
    ends the episode. A tool call on the last turn truncates the episode (reward 0). Every tool
    result is capped (``snippet_chars``, ``max_passage_chars``, ``max_result_chars``); an empty query
    or an unknown doc id is a tool error (kinds ``empty_query``, ``unknown_doc_id``).

    Reward: the outcome only, 1.0 when the text of the last ``<answer>...</answer>`` equals a golden
    answer after SQuAD normalisation, else 0.0 (:mod:`agent_gym_searchqa.reward`). ``info`` has
    ``answer_check`` (``correct``, ``no_answer``, ``wrong_answer``), ``f1`` (best token F1 over the
    golden answers), ``predicted``, ``golden_answers``, ``difficulty`` and ``hops``.

    Args:
        tokenizer: see :class:`agent_gym.AgentEnv`.
        split: ``"train"`` or ``"test"``: disjoint question sets (a hash of the question text). With
            ``questions=`` it only names the ids of questions without one (``"<split>-<n>"``).
        difficulty: ``"easy"`` (1 hop), ``"medium"`` (2 hops, the default) or ``"hard"`` (3-4 hops);
            for the generated world's questions only.
        corpus: a JSONL file of ``{"id", "contents"}`` (optional ``title``), Search-R1's format, instead
            of the generated world (:mod:`agent_gym_searchqa.corpus`); needs ``questions=``.
        questions: a JSONL file of ``{"question", "golden_answers"}`` (optional ``id``), or a Parquet file
            as Search-R1's data scripts write it (``.parquet``, needs pyarrow;
            :func:`~agent_gym_searchqa.corpus.question_record`).
        world_seed: the seed of the generated world (default :data:`~agent_gym_searchqa.world.WORLD_SEED`).
        top_k: passages per search (default 3).
        snippet_chars: characters of each passage's text a search shows (default 200).
        max_passage_chars: characters of a passage ``open`` shows (default 1000).
        max_result_chars: the cap of any one tool message (default 1500).
        cache_index: keep the BM25 index in the disk cache (default ``True``; :mod:`agent_gym_searchqa.index`).
        prompt_dir: a folder of jinja2 templates overriding the packaged ones (same file names).
        retriever: the URL of a server speaking Search-R1's ``/retrieve`` protocol (``agent-gym
            serve-retriever``, Search-R1's ``retrieval_server.py``, ...) to search instead of an in-process
            index; the server holds the corpus, so ``corpus=`` is left out. The searches of all episodes of a
            process that step concurrently share requests (:mod:`agent_gym_searchqa.remote`); ``open`` shows
            passages this episode's searches returned; a failed search is a tool error (kinds
            ``retriever_timeout``, ``retriever_unreachable``, ``retriever_http_error``, ``retriever_bad_response``).
        retriever_timeout_s: seconds one request to the server may take (default 10).
        retriever_window_s: how long a search waits for others to share its request (default 0.005).
        retriever_max_batch: the most queries of one request (default 64).
        **kwargs: passed to :class:`agent_gym.AgentEnv` (``max_turns`` default 8,
            ``max_context_tokens`` default 8192, ``tool_format``, ...).
    """

    #: With a retriever, the passages the episode's searches returned are episode state (``open`` reads them).
    episode_state = ("retrieved",)

    def __init__(
        self,
        tokenizer: Any = None,
        *,
        split: str = "train",
        difficulty: str | None = None,
        corpus: str | os.PathLike[str] | None = None,
        questions: str | os.PathLike[str] | None = None,
        world_seed: int = WORLD_SEED,
        top_k: int = 3,
        snippet_chars: int = 200,
        max_passage_chars: int = 1000,
        max_result_chars: int = 1500,
        cache_index: bool = True,
        prompt_dir: str | os.PathLike[str] | None = None,
        retriever: str | None = None,
        retriever_timeout_s: float = 10.0,
        retriever_window_s: float = 0.005,
        retriever_max_batch: int = 64,
        **kwargs: Any,
    ):
        if "tools" in kwargs:
            raise TypeError("SearchQAEnv offers exactly its search and open tools; do not pass tools=")
        self.split, self.difficulty = _check_source(split, difficulty, corpus, questions)
        if retriever is not None and corpus is not None:
            raise ValueError("retriever= and corpus= do not go together: the server holds the corpus (leave corpus= out)")
        self.world: World | None = None if corpus is not None else generate_world(int(world_seed))
        self.tasks: TaskList[SearchQATask] | None = None
        if questions is not None:
            self.tasks = TaskList(load_questions(questions, split), name=f"questions file {os.fspath(questions)}")
        #: The in-process index (``None`` with ``retriever=``).
        self.index: SearchIndex | None = None
        #: The retrieval server's client (``None`` without ``retriever=``), shared by the envs of this process.
        self.retriever: RetrieverClient | None = None
        if retriever is not None:
            self.retriever = shared_client(str(retriever), timeout_s=float(retriever_timeout_s),
                                           window_s=float(retriever_window_s), max_batch=int(retriever_max_batch))
        else:
            passages = load_corpus(corpus) if corpus is not None else world_passages(self.world)  # type: ignore[arg-type]
            self.index = load_or_build(passages, cache=cache_index)
        self.prompts = PromptTemplates("agent_gym_searchqa", prompt_dir)
        self.corpus_tools = CorpusTools(
            self.index, self.prompts, top_k=top_k, snippet_chars=snippet_chars, max_passage_chars=max_passage_chars,
            remote=self.retriever,
        )
        kwargs.setdefault("max_turns", 8)
        kwargs.setdefault("max_context_tokens", 8192)
        super().__init__(tokenizer, tools=self.corpus_tools.tools(), **kwargs)
        if int(max_result_chars) < 1:
            raise ValueError(f"max_result_chars must be >= 1, got {max_result_chars}")
        self.executor = ToolExecutor(self.tools, max_output_chars=int(max_result_chars))

    @property
    def passages(self) -> list[Passage]:
        """The corpus, in file (or id) order (with ``retriever=``: the server's, not listed here)."""
        if self.index is None:
            raise AttributeError("with retriever= the corpus is the server's: this env holds no passages")
        return self.index.passages

    @property
    def retrieved(self) -> dict[str, Passage]:
        """The passages this episode's searches returned from the retriever, by id (empty without one)."""
        return self.corpus_tools.retrieved

    @retrieved.setter
    def retrieved(self, value: dict[str, Passage]) -> None:
        self.corpus_tools.retrieved = dict(value)

    # -- the task source -------------------------------------------------------------------------------

    def sample_task(self, rng: np.random.Generator) -> SearchQATask:
        if self.tasks is not None:
            return self.tasks.sample(rng)
        assert self.world is not None and self.difficulty is not None
        return generate_question(self.world, self.split, self.difficulty, int(rng.integers(0, NUM_TASKS)))

    def get_task(self, task_id: str) -> SearchQATask:
        if self.tasks is not None:
            return self.tasks.get(task_id)
        assert self.world is not None
        return generate_question(self.world, *parse_task_id(task_id))

    def task_from_dict(self, task: Mapping[str, Any]) -> SearchQATask:
        if "question" not in task and "id" in task:
            return self.get_task(str(task["id"]))
        return task_from_mapping(task)

    # -- prompt and reward -----------------------------------------------------------------------------

    def initial_messages(self, task: SearchQATask) -> list[dict[str, Any]]:
        system = self.prompts.render(
            "searchqa_system.j2", top_k=self.corpus_tools.top_k, **self.tool_prompt_variables(EXAMPLE_CALL)
        )
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": self.prompts.render("searchqa_user.j2", question=task.question)},
        ]

    def grade(self, task: SearchQATask, turn: Turn) -> Grade:
        check = check_answer(turn.parsed.content, task.golden_answers)
        return Grade.from_check(
            check.correct,
            check.reason,
            f1=check.score,
            predicted=check.predicted,
            golden_answers=list(task.golden_answers),
            difficulty=task.difficulty,
            hops=task.hops,
        )

    def on_reset(self, task: SearchQATask) -> dict[str, Any]:
        self.corpus_tools.retrieved = {}
        return {"difficulty": task.difficulty}


def _check_source(
    split: str, difficulty: str | None, corpus: str | os.PathLike[str] | None, questions: str | os.PathLike[str] | None
) -> tuple[str, str | None]:
    """The split and difficulty, or ``ValueError`` naming the fix for arguments that do not go together."""
    if questions is None:
        if corpus is not None:
            raise ValueError(
                "corpus= needs questions= too (a JSONL file of {\"question\", \"golden_answers\"}): "
                "the generated questions are about the generated world only"
            )
        level = _DEFAULT_DIFFICULTY if difficulty is None else difficulty
        if level not in DIFFICULTIES or split not in SPLITS:
            from agent_gym.core.tasks import GeneratedTaskId

            GeneratedTaskId.check(split, level, splits=SPLITS, variants=DIFFICULTIES, env="SearchQA")
        return split, level
    if difficulty is not None:
        raise ValueError("difficulty= applies to the generated questions; with questions= leave it out")
    return split, None
