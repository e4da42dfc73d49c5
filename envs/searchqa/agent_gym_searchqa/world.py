"""A generated, seeded encyclopedia of a fictional world: the default corpus of SearchQA.

Why generated: a model cannot answer from memory what does not exist, so every correct answer is
evidence that it searched and followed the chain; and the corpus needs no download.

The world holds countries, cities, people, organisations (universities, publishers, companies) and
written works, each with attributes (birth year, founding year, occupation, ...) and *functional*
relations (each entity has exactly one value per relation: one birthplace, one founder, one author,
...), which is what makes every chained question's answer unique (see :mod:`agent_gym_searchqa.questions`).
Each entity is one encyclopedia-style passage whose text states its attributes and relations by
name, and mentions a few other entities (notable people born in a city, titles of a publisher) the
way an encyclopedia does. Names are built from a small stock of syllables and words so that many
entities share parts of their names (``Aldric Venn`` and ``Aldric Venner``, ``Velmont Press`` and
``Velmont Bank``): distractors a careless search-and-read does not tell apart. Every full name is
unique, which :func:`generate_world` checks.

Only the standard library and numpy: about 5,000 passages in well under a second.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence, TypeVar

import numpy as np

__all__ = ["WORLD_SEED", "Entity", "World", "generate_world"]

_T = TypeVar("_T")

#: The seed of the default world: the corpus (and so its index hash) is the same in every process.
WORLD_SEED = 1729

# How many entities of each kind a world of scale 1 holds (about 5,000 passages in all).
_COUNTS = {"country": 40, "city": 500, "person": 2400, "university": 150, "publisher": 200, "company": 550, "work": 1200}

_ONSETS = ("b", "br", "c", "d", "dr", "f", "g", "gr", "h", "k", "l", "m", "n", "p", "r", "s", "st", "t", "th", "v", "w", "z")
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ae", "ei")
_CODAS = ("n", "r", "l", "s", "th", "m", "nd", "rk", "v", "t", "ck")
_COUNTRY_SUFFIXES = ("ia", "and", "ania", "ora", "esh", "avia", "ary")
_CITY_SUFFIXES = ("", "", "", "ford", "holm", "port", "by", "wick", "mere", "gate")
_SURNAME_VARIANTS = ("er", "ett", "s", "ley", "ton")
_FIRST_NAMES = (
    "Aldric", "Maren", "Tobin", "Selka", "Oren", "Ilsa", "Corwin", "Edda", "Hale", "Brin", "Neve", "Casimir",
    "Liora", "Dorian", "Yara", "Fenwick", "Odile", "Rurik", "Tamsin", "Ansel", "Bryony", "Emeric", "Isolde",
    "Jory", "Katya", "Lucan", "Mireille", "Nils", "Orla", "Piet", "Quilla", "Rosalind", "Soren", "Thea",
    "Ulric", "Vesna", "Wendel", "Xanthe", "Yorick", "Zelda", "Agnes", "Bastian", "Clio", "Dagny", "Elric",
    "Freya", "Gideon", "Hester", "Ivo", "Juno", "Kester", "Linnea", "Magnus", "Nadia", "Osric", "Petra",
)
_OCCUPATIONS = (
    "cartographer", "novelist", "astronomer", "engineer", "botanist", "historian", "poet", "architect",
    "physician", "composer", "philosopher", "chemist", "sculptor", "jurist", "economist", "linguist",
    "mathematician", "journalist", "explorer", "painter", "shipbuilder", "geologist", "playwright", "banker",
)
_COMPANY_KINDS = (
    ("Shipping Company", "shipping company"), ("Bank", "bank"), ("Observatory", "observatory"),
    ("Theatre Company", "theatre company"), ("Railway", "railway company"), ("Ironworks", "ironworks"),
    ("Trading House", "trading house"), ("Gazette", "newspaper"), ("Mills", "textile manufacturer"),
)
_PUBLISHER_SUFFIXES = ("Press", "Books", "Publishers", "House", "Editions")
_UNIVERSITY_FORMS = ("University of {}", "{} Institute of Technology", "{} College", "{} Academy")
_ADJECTIVES = (
    "Silent", "Salt", "Iron", "Hollow", "Amber", "Distant", "Crimson", "Winter", "Glass", "Broken", "Golden",
    "Last", "Quiet", "Sunken", "Northern", "Pale", "Burning", "Hidden", "Narrow", "Long", "Bitter", "Second",
    "Lantern", "Copper", "Wandering", "Restless", "Forgotten", "Bright", "Ashen", "Tidal",
)
_NOUNS = (
    "Orchard", "Harbour", "Lighthouse", "Atlas", "Garden", "Bridge", "Archive", "Tide", "Compass", "Meadow",
    "Tower", "Letters", "Voyage", "Cartographer", "Season", "River", "Mirror", "Lantern", "Kingdom", "Forge",
    "Chronicle", "Shore", "Road", "Clockmaker", "Winter", "Cathedral", "Orchestra", "Map", "Island", "Heir",
)
_GENRES = ("novel", "memoir", "atlas", "poetry collection", "play", "treatise", "history", "travelogue")
_SETTINGS = ("river", "estuary", "lake shore", "coast", "plateau", "valley", "hill")
_CITY_SIGHTS = ("covered market", "old harbour", "clock tower", "botanical garden", "stone bridges", "salt works",
                "cathedral", "lighthouse", "canals", "observatory hill")
_INDUSTRIES = ("shipbuilding", "vineyards", "mountain railways", "printing houses", "salt marshes", "wool trade",
               "copper mines", "orchards", "glassworks")
_REMEMBERED = ("a long correspondence with colleagues abroad", "work that was largely forgotten until decades later",
               "an influential series of public lectures", "a habit of travelling on foot", "a large private library",
               "a bitter dispute with a rival", "generous support of younger colleagues", "meticulous notebooks")
_TOPICS = ("a family over three generations", "a failed expedition", "the rise of a merchant house", "a winter siege",
           "an unlikely friendship", "the building of a bridge", "a disputed inheritance", "a journey along the coast")


@dataclass
class Entity:
    """One thing of the world, and the passage about it.

    Attributes:
        id: the passage's doc id (``"w00042"``).
        kind: ``country``, ``city``, ``person``, ``university``, ``publisher``, ``company`` or ``work``.
        name: the unique full name (the passage's title).
        attrs: attribute values (``birth_year``, ``occupation``, ``founded``, ``year``, ``genre``...).
        rels: relation -> the id of the one related entity (``birthplace``, ``founder``, ``author``...).
        text: the passage (filled in once every entity exists).
    """

    id: str
    kind: str
    name: str
    attrs: dict[str, Any] = field(default_factory=dict)
    rels: dict[str, str] = field(default_factory=dict)
    text: str = ""


@dataclass(frozen=True)
class World:
    """A generated world: its entities by id and by name (names are unique)."""

    seed: int
    entities: dict[str, Entity]
    by_name: dict[str, str]

    def __len__(self) -> int:
        return len(self.entities)

    @functools.cached_property
    def _kinds(self) -> dict[str, list[Entity]]:
        kinds: dict[str, list[Entity]] = {}
        for entity in self.entities.values():
            kinds.setdefault(entity.kind, []).append(entity)
        return kinds

    @functools.cached_property
    def name_counts(self) -> Counter[str]:
        """How many entities bear each name (every count is 1 in a generated world; checked anyway)."""
        return Counter(e.name for e in self.entities.values())

    def of_kind(self, *kinds: str) -> list[Entity]:
        """The entities of these kinds, in id order within each kind."""
        return [e for kind in kinds for e in self._kinds.get(kind, [])]

    def follow(self, entity_id: str, relation: str) -> Entity:
        """The one entity ``relation`` leads to (``KeyError`` if this entity has no such relation)."""
        return self.entities[self.entities[entity_id].rels[relation]]

    def documents(self) -> list[tuple[str, str, str]]:
        """``(doc id, title, text)`` of every passage, in id order."""
        return [(e.id, e.name, e.text) for e in self.entities.values()]


class _Names:
    """Draws names that are unique across the whole world (each kind adds to one taken set)."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.taken: set[str] = set()

    def pick(self, options: Sequence[_T]) -> _T:
        return options[int(self.rng.integers(0, len(options)))]

    def word(self, syllables: int, *, vowel_end: bool = False) -> str:
        """A pronounceable made-up word: (onset vowel) x syllables, then a coda (or a vowel)."""
        parts = [self.pick(_ONSETS) + self.pick(_VOWELS) for _ in range(syllables)]
        parts.append(self.pick(_VOWELS[:5]) if vowel_end else self.pick(_CODAS))
        return "".join(parts).capitalize()

    def unique(self, make: Any, tries: int = 200) -> str:
        for _ in range(tries):
            name = make()
            if name not in self.taken:
                self.taken.add(name)
                return name
        raise RuntimeError("the name stock is exhausted; lower the world's scale")  # pragma: no cover


def _year(rng: np.random.Generator, low: int, high: int) -> int:
    return int(rng.integers(low, high + 1))


def _make_entities(rng: np.random.Generator, scale: float) -> tuple[list[Entity], _Names]:
    names = _Names(rng)
    counts = {k: max(2, round(v * scale)) for k, v in _COUNTS.items()}
    entities: list[Entity] = []

    def add(kind: str, name: str, **attrs: Any) -> Entity:
        entity = Entity(id=f"w{len(entities):05d}", kind=kind, name=name, attrs=attrs)
        entities.append(entity)
        return entity

    countries = [
        add("country", names.unique(lambda: names.word(1) + names.pick(_COUNTRY_SUFFIXES)))
        for _ in range(counts["country"])
    ]
    cities = [
        add("city", names.unique(lambda: names.word(int(rng.integers(1, 3))) + names.pick(_CITY_SUFFIXES)),
            founded=_year(rng, 700, 1850), setting=names.pick(_SETTINGS), known_for=names.pick(_CITY_SIGHTS))
        for _ in range(counts["city"])
    ]
    # Surnames come from a stock smaller than the people, so surnames repeat; a share of the people
    # get a near-twin surname (Venn -> Venner): distractors for every search by name.
    surnames = sorted({names.word(int(rng.integers(1, 3))) for _ in range(counts["person"] // 3)})
    people = []
    for _ in range(counts["person"]):
        def person_name() -> str:
            surname = names.pick(surnames)
            if rng.random() < 0.25:
                surname += names.pick(_SURNAME_VARIANTS)
            return f"{names.pick(_FIRST_NAMES)} {surname}"

        people.append(add("person", names.unique(person_name), birth_year=_year(rng, 1790, 1960),
                          occupation=names.pick(_OCCUPATIONS), remembered=names.pick(_REMEMBERED)))
    stems = sorted({names.word(2) for _ in range(counts["company"])})  # shared by orgs of every kind
    universities = [
        add("university", names.unique(lambda: names.pick(_UNIVERSITY_FORMS).format(
            names.pick(stems) if rng.random() < 0.7 else names.pick([c.name for c in cities]))))
        for _ in range(counts["university"])
    ]
    publishers = [
        add("publisher", names.unique(lambda: f"{names.pick(stems)} {names.pick(_PUBLISHER_SUFFIXES)}"))
        for _ in range(counts["publisher"])
    ]
    companies = []
    for _ in range(counts["company"]):
        kind = _COMPANY_KINDS[int(rng.integers(0, len(_COMPANY_KINDS)))]
        companies.append(add("company", names.unique(lambda: f"{names.pick(stems)} {kind[0]}"), description=kind[1]))
    works = [
        add("work", names.unique(lambda: _title(names, cities)), genre=names.pick(_GENRES), topic=names.pick(_TOPICS))
        for _ in range(counts["work"])
    ]
    _relate(rng, names, countries, cities, people, universities, publishers, companies, works)
    return entities, names


def _title(names: _Names, cities: list[Entity]) -> str:
    form = int(names.rng.integers(0, 4))
    adjective, noun, other = names.pick(_ADJECTIVES), names.pick(_NOUNS), names.pick(_NOUNS)
    if form == 0:
        return f"The {adjective} {noun}"
    if form == 1:
        return f"The {noun} of {names.pick(cities).name}"
    if form == 2:
        return f"{adjective} {noun}"
    return f"The {noun} and the {other}" if noun != other else f"The {adjective} {noun}s"


def _relate(
    rng: np.random.Generator, names: _Names, countries: list[Entity], cities: list[Entity], people: list[Entity],
    universities: list[Entity], publishers: list[Entity], companies: list[Entity], works: list[Entity],
) -> None:
    """Draw every relation: each entity gets exactly one value per relation of its kind."""
    for i, city in enumerate(cities):  # every country gets cities (the first ones round-robin)
        country = countries[i % len(countries)] if i < 2 * len(countries) else names.pick(countries)
        city.rels["country"] = country.id
    for country in countries:
        own = [c for c in cities if c.rels["country"] == country.id]
        country.rels["capital"] = names.pick(own).id
        country.attrs["industry"] = names.pick(_INDUSTRIES)
    organisations = universities + publishers + companies
    employers = publishers + companies
    for person in people:
        person.rels["birthplace"] = names.pick(cities).id
        person.rels["alma_mater"] = names.pick(universities).id
        person.rels["employer"] = names.pick(employers).id
    for org in organisations:
        founder = names.pick(people)
        org.rels["founder"] = founder.id
        org.rels["headquarters"] = names.pick(cities).id
        org.attrs["founded"] = founder.attrs["birth_year"] + _year(rng, 25, 55)
    for work in works:
        author = names.pick(people)
        year = author.attrs["birth_year"] + _year(rng, 22, 70)
        older = [p for p in publishers if p.attrs["founded"] <= year]
        work.rels["author"] = author.id
        work.rels["publisher"] = names.pick(older or publishers).id
        work.attrs["year"] = year
        work.rels["setting"] = names.pick(cities).id  # mentioned in the text only: never asked


def _write_passages(world: World) -> None:
    """The encyclopedia text of every entity: attributes, relations by name, a few back-references."""
    back: dict[str, dict[str, list[str]]] = {eid: {} for eid in world.entities}
    for entity in world.entities.values():
        for relation, target in entity.rels.items():
            back[target].setdefault(relation, []).append(entity.name)
    for entity in world.entities.values():
        entity.text = _PASSAGE_WRITERS[entity.kind](world, entity, back[entity.id])


def _names_list(items: list[str], limit: int = 3) -> str:
    items = items[:limit]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _country_text(world: World, e: Entity, back: dict[str, list[str]]) -> str:
    capital = world.follow(e.id, "capital").name
    text = f"{e.name} is a country known for its {e.attrs['industry']}. Its capital is {capital}."
    others = [c for c in back.get("country", []) if c != capital]
    if others:
        text += f" Other cities of {e.name} include {_names_list(others)}."
    return text


def _city_text(world: World, e: Entity, back: dict[str, list[str]]) -> str:
    country = world.follow(e.id, "country")
    text = (
        f"{e.name} is a city in {country.name}, founded in {e.attrs['founded']} on a {e.attrs['setting']}. "
        f"It is known for its {e.attrs['known_for']}."
    )
    if country.rels["capital"] == e.id:
        text += f" It is the capital of {country.name}."
    if back.get("birthplace"):
        text += f" People born in {e.name} include {_names_list(back['birthplace'], 2)}."
    if back.get("headquarters"):
        text += f" {_names_list(back['headquarters'], 2)} {'has' if len(back['headquarters']) == 1 else 'have'} offices here."
    return text


def _person_text(world: World, e: Entity, back: dict[str, list[str]]) -> str:
    surname = e.name.split(" ", 1)[1]
    birthplace = world.follow(e.id, "birthplace")
    country = world.follow(birthplace.id, "country").name
    text = (
        f"{e.name} (born {e.attrs['birth_year']}) was {_a(e.attrs['occupation'])} born in {birthplace.name}, "
        f"{country}. {surname} is remembered for {e.attrs['remembered']}. {surname} studied at "
        f"{world.follow(e.id, 'alma_mater').name} and later worked for {world.follow(e.id, 'employer').name}."
    )
    if back.get("founder"):
        text += f" {surname} founded {_names_list(back['founder'], 2)}."
    if back.get("author"):
        text += f" {surname} wrote {_names_list(back['author'], 2)}."
    return text


def _organisation_text(world: World, e: Entity, back: dict[str, list[str]]) -> str:
    what = {"university": "a university", "publisher": "a publishing house"}.get(e.kind) or _a(e.attrs["description"])
    text = (
        f"{e.name} is {what} founded in {e.attrs['founded']} by {world.follow(e.id, 'founder').name}. "
        f"It is headquartered in {world.follow(e.id, 'headquarters').name}."
    )
    if back.get("alma_mater"):
        text += f" Its alumni include {_names_list(back['alma_mater'], 2)}."
    if back.get("publisher"):
        text += f" Its titles include {_names_list(back['publisher'], 2)}."
    return text


def _work_text(world: World, e: Entity, back: dict[str, list[str]]) -> str:
    return (
        f"{e.name} is {_a(e.attrs['genre'])} by {world.follow(e.id, 'author').name}, published in {e.attrs['year']} "
        f"by {world.follow(e.id, 'publisher').name}. It is set in {world.follow(e.id, 'setting').name} and "
        f"follows {e.attrs['topic']}."
    )


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


_PASSAGE_WRITERS = {
    "country": _country_text, "city": _city_text, "person": _person_text, "university": _organisation_text,
    "publisher": _organisation_text, "company": _organisation_text, "work": _work_text,
}


@functools.lru_cache(maxsize=4)
def generate_world(seed: int = WORLD_SEED, scale: float = 1.0) -> World:
    """The world of ``seed`` (the same in every process), about ``5040 * scale`` passages.

    Cached per process: every env on the default world shares one.

    Raises:
        ValueError: ``scale`` is not positive.
        RuntimeError: two entities got the same name (a generator bug; questions rely on unique names).
    """
    if not scale > 0:
        raise ValueError(f"scale must be positive, got {scale}")
    rng = np.random.default_rng(seed)
    entities, _ = _make_entities(rng, scale)
    by_name = {e.name: e.id for e in entities}
    if len(by_name) != len(entities):
        raise RuntimeError("the world has two entities of the same name")  # pragma: no cover
    world = World(seed=seed, entities={e.id: e for e in entities}, by_name=by_name)
    _write_passages(world)
    return world
