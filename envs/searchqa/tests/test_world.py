"""The generated world and its questions: seeded, unique names, distractors, unique answers reachable
by searching each entity of the chain, disjoint splits."""

from __future__ import annotations

from collections import Counter

import pytest

from agent_gym_searchqa.corpus import world_passages
from agent_gym_searchqa.index import load_or_build
from agent_gym_searchqa.questions import (
    DIFFICULTIES,
    generate_question,
    question_text,
    resolve,
    split_of,
    verify_question,
)
from agent_gym_searchqa.world import WORLD_SEED, generate_world


@pytest.fixture(scope="module")
def world():
    return generate_world()


@pytest.fixture(scope="module")
def index(world):
    return load_or_build(world_passages(world))


def test_the_world_is_seeded_and_about_5000_passages(world):
    again = generate_world.__wrapped__(WORLD_SEED)  # not the cached one: generated afresh
    assert [(e.id, e.name, e.text) for e in again.entities.values()] == world.documents()
    assert 4500 <= len(world) <= 5500
    assert Counter(e.kind for e in world.entities.values())["person"] > 2000
    other = generate_world.__wrapped__(WORLD_SEED + 1, scale=0.1)
    assert other.documents() != world.documents()[: len(other)]


def test_names_are_unique_and_similar_names_abound(world):
    names = [e.name for e in world.entities.values()]
    assert len(set(names)) == len(names)
    surnames = Counter(e.name.split(" ", 1)[1] for e in world.of_kind("person"))
    assert sum(1 for n in surnames.values() if n > 1) > 300  # people sharing a surname
    stems = Counter(e.name.split(" ")[0] for e in world.of_kind("publisher", "company"))
    assert sum(1 for n in stems.values() if n > 1) > 100  # Velmont Press and Velmont Bank


@pytest.mark.parametrize("difficulty", list(DIFFICULTIES))
def test_questions_have_their_hops_and_a_unique_answer(world, difficulty):
    for n in range(30):
        task = generate_question(world, "train", difficulty, n)
        assert task.id == f"train-{difficulty}-{n}" and task.hops in DIFFICULTIES[difficulty]
        assert task == generate_question(world, "train", difficulty, n)  # the id regenerates it
        assert len(task.supporting_docs) == task.hops
        assert task.golden_answers[0].lower() not in task.question.lower()


def test_verify_refuses_unfair_chains(world):
    capital = world.follow(world.of_kind("country")[0].id, "capital")
    assert verify_question(world, capital.name, ("country", "capital")) == "the chain visits an entity twice"
    assert verify_question(world, "Nobody Atall", ("birthplace",)) == "the start name is not unique"
    person = world.of_kind("person")[0]
    assert verify_question(world, person.name, ("founder",)).startswith("a relation is missing")
    assert verify_question(world, person.name, ("birthplace",)) is None
    assert question_text(person.name, ("employer", "founder")) == f"Who founded the employer of {person.name}?"


# A word of each kind's passages, for names that several kinds share (the city Nar, the people
# called Nar): a searcher adds what it looks for, as one would on Wikipedia.
KIND_WORDS = {"city": "city", "country": "country", "person": "born", "university": "university",
              "publisher": "publishing house", "company": "founded", "work": "published"}


@pytest.mark.parametrize("difficulty", list(DIFFICULTIES))
def test_every_hop_is_reachable_by_search(world, index, difficulty):
    """Searching each entity of the chain by name (plus a word of its kind) finds its passage among
    the top 3, and that passage names the next entity of the chain (the last one states the answer).
    Most names need no extra word."""
    by_name_alone = hops = 0
    for n in range(25):
        task = generate_question(world, "test", difficulty, n)
        docs = list(task.supporting_docs)
        for k, doc_id in enumerate(docs):
            entity = world.entities[doc_id]
            hops += 1
            by_name_alone += doc_id in [h.passage.id for h in index.search(entity.name, 3)]
            hits = [h.passage.id for h in index.search(f"{entity.name} {KIND_WORDS[entity.kind]}", 3)]
            assert doc_id in hits, (task.question, entity.name, hits)
            following = task.golden_answers[0] if k + 1 == len(docs) else world.entities[docs[k + 1]].name
            assert following in index.by_id[doc_id].text
    assert by_name_alone >= 0.8 * hops


def test_splits_share_no_question(world):
    train = {generate_question(world, "train", d, n).question for d in DIFFICULTIES for n in range(150)}
    test = {generate_question(world, "test", d, n).question for d in DIFFICULTIES for n in range(150)}
    assert not train & test
    assert len(train) > 400 and len(test) > 400  # distinct questions, not one repeated
    assert all(split_of(q) == "train" for q in train) and all(split_of(q) == "test" for q in test)


def test_resolve_follows_the_tables(world):
    work = world.of_kind("work")[0]
    visited, answer = resolve(world, work.name, ("author", "birthplace"))
    author = world.follow(work.id, "author")
    assert visited == [work.id, author.id, author.rels["birthplace"]]
    assert answer == world.entities[author.rels["birthplace"]].name
    assert resolve(world, work.name, ("year",)) == ([work.id], str(work.attrs["year"]))
