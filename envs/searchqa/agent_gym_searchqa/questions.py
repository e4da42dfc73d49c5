"""Multi-hop questions about the generated world: seeded, unique answers, disjoint train/test splits.

A question is a *chain*: a named start entity and 1 to 4 relations followed from it ("the founder of
the publisher of X", then "In which city was ... born?"). Every relation of the world is functional
(one birthplace per person, one founder per organisation, ...), so a chain has exactly one answer,
and every passage states its entity's relations by name, so the answer is reachable by searching
each entity of the chain in turn and reading its passage. :func:`verify_question` re-checks both
for every generated question, and refuses chains that visit an entity twice or whose answer is
written in the question itself (``In which city is University of Karth headquartered?`` -> Karth).

Ids and splits
--------------
A task id is ``"<split>-<difficulty>-<n>"`` (:class:`~agent_gym.core.tasks.GeneratedTaskId`):
generation seeds a numpy generator with the world seed, the difficulty and ``n``, and draws chains
until one is valid and falls in the split. A question's split is a stable hash (sha256) of its text:
about 10% of all questions are ``test``, the rest ``train``, so no test question ever shows up in
training, under any seed. Difficulties: ``easy`` 1 hop, ``medium`` 2 hops, ``hard`` 3 or 4 hops.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from agent_gym.core.tasks import GeneratedTaskId

from agent_gym_searchqa.world import World

__all__ = [
    "DIFFICULTIES",
    "SPLITS",
    "SearchQATask",
    "generate_question",
    "parse_task_id",
    "split_of",
    "task_from_mapping",
    "verify_question",
]

SPLITS = ("train", "test")
#: Hops of each difficulty (the number of relations a question chains).
DIFFICULTIES: dict[str, tuple[int, ...]] = {"easy": (1,), "medium": (2,), "hard": (3, 4)}
#: Share of all questions that belong to ``test`` (by a hash of the question text).
TEST_FRACTION = 0.1

# Relations that lead to another entity, by the kind of entity they start from; organisations of
# every kind share theirs.
_ENTITY_RELATIONS: dict[str, tuple[str, ...]] = {
    "work": ("author", "publisher"),
    "person": ("birthplace", "alma_mater", "employer"),
    "org": ("founder", "headquarters"),
    "city": ("country",),
    "country": ("capital",),
}
# Attributes a question may end on.
_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "work": ("year",),
    "person": ("birth_year", "occupation"),
    "org": ("founded",),
    "city": ("founded",),
    "country": (),
}
# How a relation reads inside a longer question ("the founder of {}") ...
_PHRASES = {
    "author": "the author of {}",
    "publisher": "the publisher of {}",
    "birthplace": "the birthplace of {}",
    "alma_mater": "the university where {} studied",
    "employer": "the employer of {}",
    "founder": "the founder of {}",
    "headquarters": "the city where {} is headquartered",
    "country": "the country of {}",
    "capital": "the capital of {}",
}
# ... and as the question itself, by relation and the kind it starts from.
_QUESTIONS = {
    "author": "Who wrote {}?",
    "publisher": "Which publishing house published {}?",
    "birthplace": "In which city was {} born?",
    "alma_mater": "At which university did {} study?",
    "employer": "Which organisation did {} work for?",
    "founder": "Who founded {}?",
    "headquarters": "In which city is {} headquartered?",
    "country": "In which country is {}?",
    "capital": "What is the capital of {}?",
    "year": "In what year was {} published?",
    "birth_year": "In what year was {} born?",
    "occupation": "What was the occupation of {}?",
    "founded": "In what year was {} founded?",
}
# Start kinds, weighted so that every kind of chain is common.
_START_KINDS = ("work", "work", "person", "person", "org", "city", "country")


@dataclass(frozen=True)
class SearchQATask:
    """One question.

    Attributes:
        id: ``"<split>-<difficulty>-<n>"`` for generated questions, the file's id (or
            ``"<split>-<line>"``) for your own, ``"custom"`` for a task given as a dict.
        question: the question text.
        golden_answers: every accepted answer (exact match after SQuAD normalisation).
        difficulty: ``easy`` / ``medium`` / ``hard``, or ``custom`` for your own questions.
        hops: how many relations the question chains (``None``: unknown).
        supporting_docs: the doc ids of the chain's entities, start first: reading them in turn
            answers the question (empty: unknown).
    """

    id: str
    question: str
    golden_answers: tuple[str, ...]
    difficulty: str = "custom"
    hops: int | None = None
    supporting_docs: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "question": self.question, "golden_answers": list(self.golden_answers),
            "difficulty": self.difficulty, "hops": self.hops, "supporting_docs": list(self.supporting_docs),
        }


_KINDS_OF_GROUP = {"org": ("university", "publisher", "company")}


def _group(kind: str) -> str:
    return "org" if kind in ("university", "publisher", "company") else kind


def split_of(question: str) -> str:
    """The split of a question: a stable hash of its text (the same in every process)."""
    bucket = int.from_bytes(hashlib.sha256(question.encode()).digest()[:8], "big") % 1000
    return "test" if bucket < TEST_FRACTION * 1000 else "train"


def question_text(start_name: str, relations: tuple[str, ...]) -> str:
    """The words of a chain: the inner relations as nested phrases, the last one as the question."""
    phrase = start_name
    for relation in relations[:-1]:
        phrase = _PHRASES[relation].format(phrase)
    return _QUESTIONS[relations[-1]].format(phrase)


def resolve(world: World, start_name: str, relations: tuple[str, ...]) -> tuple[list[str], str]:
    """Answer a chain from the world's tables: the ids of the entities visited (start first, the
    answer entity last when the chain ends on an entity) and the answer text.

    Raises:
        KeyError: no entity has the start name, or an entity lacks a relation of the chain.
    """
    visited = [world.by_name[start_name]]
    for relation in relations[:-1]:
        visited.append(world.entities[visited[-1]].rels[relation])
    last = world.entities[visited[-1]]
    final = relations[-1]
    if final in last.rels:
        answer_entity = world.entities[last.rels[final]]
        return [*visited, answer_entity.id], answer_entity.name
    return visited, str(last.attrs[final])


def verify_question(world: World, start_name: str, relations: tuple[str, ...]) -> str | None:
    """Why a chain makes no fair question (``None``: it does).

    Checks that exactly one entity bears the start name; that every step follows a relation that
    entity has (one value each, so the answer is unique); that no entity is visited twice; that the
    answer is not written in the question; and that every step is readable: each passage on the
    chain names the next entity (or states the answer).
    """
    if world.name_counts[start_name] != 1:
        return "the start name is not unique"
    try:
        visited, answer = resolve(world, start_name, relations)
    except KeyError as exc:
        return f"a relation is missing: {exc}"
    if len(set(visited)) != len(visited):
        return "the chain visits an entity twice"
    question = question_text(start_name, relations)
    if answer.lower() in question.lower():
        return "the answer is written in the question"
    readable = visited[: len(relations)]
    for k, entity_id in enumerate(readable):
        following = answer if k + 1 == len(relations) else world.entities[visited[k + 1]].name
        if following not in world.entities[entity_id].text:
            return f"the passage of {world.entities[entity_id].name} does not name {following}"
    return None


def _candidate(world: World, rng: np.random.Generator, hops: int) -> tuple[str, tuple[str, ...]]:
    kind = _START_KINDS[int(rng.integers(0, len(_START_KINDS)))]
    starts = world.of_kind(*_KINDS_OF_GROUP.get(kind, (kind,)))
    entity = starts[int(rng.integers(0, len(starts)))]
    start_name, relations = entity.name, []
    for _ in range(hops - 1):
        options = _ENTITY_RELATIONS[_group(entity.kind)]
        relation = options[int(rng.integers(0, len(options)))]
        relations.append(relation)
        entity = world.entities[entity.rels[relation]]
    group = _group(entity.kind)
    finals = _ENTITY_RELATIONS[group] + _ATTRIBUTES[group]
    relations.append(finals[int(rng.integers(0, len(finals)))])
    return start_name, tuple(relations)


def generate_question(world: World, split: str, difficulty: str, n: int) -> SearchQATask:
    """The question with id ``f"{split}-{difficulty}-{n}"`` of ``world`` (the same in every process).

    Raises:
        ValueError: an unknown split or difficulty, or ``n`` out of range.
    """
    GeneratedTaskId.check(split, difficulty, splits=SPLITS, variants=DIFFICULTIES, env="SearchQA")
    if not 0 <= int(n) < 2**63:
        raise ValueError(f"task number must be in [0, 2**63), got {n}")
    levels = DIFFICULTIES[difficulty]
    rng = np.random.default_rng([world.seed, list(DIFFICULTIES).index(difficulty), int(n)])
    for _ in range(10_000):
        hops = levels[int(rng.integers(0, len(levels)))]
        start_name, relations = _candidate(world, rng, hops)
        question = question_text(start_name, relations)
        if split_of(question) != split or verify_question(world, start_name, relations) is not None:
            continue
        visited, answer = resolve(world, start_name, relations)
        task_id = str(GeneratedTaskId(split, difficulty, int(n)))
        return SearchQATask(task_id, question, (answer,), difficulty, hops, tuple(visited[:hops]))
    raise RuntimeError(f"could not generate a {difficulty} question from seed {n}")  # pragma: no cover


def parse_task_id(task_id: str) -> GeneratedTaskId:
    """``"train-easy-12"`` -> ``("train", "easy", 12)``; ``KeyError`` explaining the form otherwise."""
    return GeneratedTaskId.parse(task_id, splits=SPLITS, variants=DIFFICULTIES, name="SearchQA question")


def task_from_mapping(task: Mapping[str, Any], default_id: str = "custom") -> SearchQATask:
    """A task from ``{"question", "golden_answers"}`` (Search-R1's fields; optional ``id``,
    ``difficulty``, ``hops``, ``supporting_docs``). ``golden_answers`` may be one string.

    Raises:
        ValueError: a field is missing or empty, naming it.
    """
    missing = {"question", "golden_answers"} - set(task)
    if missing:
        raise ValueError(f"a SearchQA task needs the keys question and golden_answers; missing {sorted(missing)}")
    answers = task["golden_answers"]
    answers = [answers] if isinstance(answers, str) else list(answers)
    if not answers or not all(isinstance(a, (str, int, float)) and str(a).strip() for a in answers):
        raise ValueError(f"golden_answers must be a non-empty list of strings, got {task['golden_answers']!r}")
    if not str(task["question"]).strip():
        raise ValueError("the question is empty")
    hops = task.get("hops")
    return SearchQATask(
        id=str(task.get("id", default_id)), question=str(task["question"]).strip(),
        golden_answers=tuple(str(a) for a in answers), difficulty=str(task.get("difficulty", "custom")),
        hops=None if hops is None else int(hops), supporting_docs=tuple(str(d) for d in task.get("supporting_docs", ())),
    )
