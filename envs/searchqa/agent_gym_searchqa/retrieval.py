"""The retrieval index that ``agent-gym serve-retriever`` serves: built once into a folder, opened memory-mapped.

Why a folder of its own rather than :mod:`agent_gym_searchqa.index`: a server's corpus is big (Search-R1's
Wikipedia dump has 21M passages), so nothing of it is held as Python objects. The folder holds

- ``passages.jsonl`` (one ``{"id", "contents"}`` object a line, what the server returns) and
  ``passages.offsets.npy`` (where each line starts): a passage is read from the memory-mapped file by its
  row number;
- the ranking: ``bm25/`` (a bm25s index, BM25 Lucene variant, English stop words, no stemming: the
  in-process index's settings, so the same corpus ranks the same) or ``dense.npy`` (the passages'
  normalised embeddings by a sentence-transformers model, e5 or bge, searched by inner product with faiss);
- ``retriever.json``: what was built, from what, and how (format, method, passages, model, prefixes).

Every array is opened with ``mmap``: several server workers (``--workers N``, forked processes) share one
copy in the page cache, and opening a 1M-passage index takes a fraction of a second. The folder is written
under a temporary name and renamed into place, so a reader never sees half of one.

The dense path needs the optional packages ``sentence-transformers`` and ``faiss-cpu`` (the searchqa
package's ``[dense]`` extra), imported only here and only for it, and a local model folder: nothing is
downloaded.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from agent_gym_searchqa.corpus import Passage

__all__ = [
    "FORMAT",
    "METHODS",
    "IndexInfo",
    "RetrievalIndex",
    "build_index",
    "corpus_rows",
    "default_index_dir",
    "is_index_dir",
    "read_info",
    "model_prefixes",
    "prepare_index",
    "passage_rows",
]

#: Bumped when the folder's layout changes: a folder of another format is refused with a rebuild hint.
FORMAT = 1
#: The ranking methods: bm25 (bm25s, the default) and dense (sentence-transformers + faiss).
METHODS = ("bm25", "dense")
_META = "retriever.json"
_STOPWORDS = "en"
#: Passages tokenized (or embedded) per chunk while building: bounds the memory of the texts in flight.
_CHUNK = 10_000
# e5 wants "query: " / "passage: " prefixes and bge an instruction before queries (their model cards; Search-R1's
# encoder adds the same); other models get none unless --query-prefix / --passage-prefix say otherwise.
_PREFIXES = {"e5": ("query: ", "passage: "), "bge": ("Represent this sentence for searching relevant passages: ", "")}


@dataclass(frozen=True)
class IndexInfo:
    """What ``retriever.json`` records about an index folder."""

    method: str
    passages: int
    source: str
    model: str | None = None
    query_prefix: str = ""
    passage_prefix: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, **self.__dict__}


def is_index_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a folder that :func:`build_index` wrote."""
    return (Path(path) / _META).is_file()


def read_info(folder: str | os.PathLike[str]) -> IndexInfo:
    """What ``retriever.json`` of an index folder says.

    Raises:
        ValueError: not an index folder, or one of another format (the message says to rebuild).
    """
    folder = Path(folder)
    if not is_index_dir(folder):
        raise ValueError(f"{folder} is not a retriever index (no {_META}); build one with agent-gym serve-retriever CORPUS")
    meta = json.loads((folder / _META).read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{folder} holds an index of format {meta.get('format')}, this version reads {FORMAT}: "
                         "rebuild it (agent-gym serve-retriever CORPUS --rebuild)")
    meta.pop("format")
    return IndexInfo(**meta)


def model_prefixes(model: str | os.PathLike[str]) -> tuple[str, str]:
    """The (query, passage) prefixes a model's card asks for, guessed from its folder name (e5, bge)."""
    name = Path(model).name.lower()
    for family, prefixes in _PREFIXES.items():
        if family in name:
            return prefixes
    return "", ""


def passage_rows(passages: Sequence[Passage]) -> Iterator[tuple[str, str]]:
    """``(id, contents)`` of passages, ``contents`` as Search-R1 writes it: ``"Title"\\nText``."""
    for p in passages:
        yield p.id, f'"{p.title}"\n{p.text}'


def corpus_rows(path: str | os.PathLike[str]) -> Iterator[tuple[str, str]]:
    """``(id, contents)`` of a Search-R1 JSONL corpus (``.gz`` too), streamed: nothing but the ids seen is kept.

    A ``title`` field, where present, becomes the first line of ``contents`` (as Search-R1's ``"Title"\\nText``).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a line that is not an object, lacks ``id`` or ``contents``, or repeats an id (file and line named).
    """
    from agent_gym_searchqa.corpus import corpus_records

    for doc_id, contents, raw_title in corpus_records(path):
        title = str(raw_title or "").strip()
        if title and contents.partition("\n")[0].strip().strip('"') != title:
            contents = f'"{title}"\n{contents}'
        yield doc_id, contents


def default_index_dir(source_key: str, method: str, model: str | None) -> Path:
    """Where the index of a corpus is kept by default: the cache, keyed by the corpus and the settings."""
    from agent_gym.models import cache_dir

    import bm25s

    settings = f"format={FORMAT} method={method} model={os.path.abspath(model) if model else ''} bm25s={bm25s.__version__}"
    key = hashlib.sha256(f"{source_key}\n{settings}".encode()).hexdigest()[:32]
    return cache_dir() / "searchqa" / f"retriever-{method}-{key}"


def _progress(total: int | None, desc: str, show: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=" passages", disable=not show, dynamic_ncols=True, leave=False)


def build_index(
    rows: Iterator[tuple[str, str]],
    folder: str | os.PathLike[str],
    *,
    source: str,
    method: str = "bm25",
    model: str | os.PathLike[str] | None = None,
    query_prefix: str | None = None,
    passage_prefix: str | None = None,
    total: int | None = None,
    device: str | None = None,
    batch_size: int = 64,
    show_progress: bool = True,
) -> IndexInfo:
    """Write the index of ``rows`` (``(id, contents)``, e.g. :func:`corpus_rows`) into ``folder``.

    Args:
        rows: the passages, streamed.
        folder: the index folder to write (replaced if it exists).
        source: what the passages came from (recorded in ``retriever.json``).
        method: ``"bm25"`` or ``"dense"``.
        model: the local sentence-transformers folder of the dense method.
        query_prefix, passage_prefix: what the dense model puts before queries and passages (default:
            :func:`model_prefixes`).
        total: how many passages to expect (the progress bar's length), if known.
        device: the dense model's torch device (default: sentence-transformers' choice).
        batch_size: passages embedded at once (dense).
        show_progress: a progress bar (stderr) per stage.

    Raises:
        ValueError: an unknown method, a dense method without a model folder, or no passages.
        ImportError: the dense method without sentence-transformers or faiss-cpu (the message names the install).
    """
    if method not in METHODS:
        raise ValueError(f"unknown retrieval method {method!r}; use one of {', '.join(METHODS)}")
    encoder = None
    if method == "dense":
        encoder = _load_encoder(model, device)
        guessed = model_prefixes(model)  # type: ignore[arg-type]  # _load_encoder refused None
        query_prefix = guessed[0] if query_prefix is None else query_prefix
        passage_prefix = guessed[1] if passage_prefix is None else passage_prefix
    target = Path(folder)
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        if method == "bm25":
            count = _build_bm25(rows, tmp, total, show_progress)
        else:
            count = _build_dense(rows, tmp, encoder, passage_prefix or "", total, batch_size, show_progress)
        info = IndexInfo(method, count, source, None if model is None else os.path.abspath(model),
                         query_prefix or "", passage_prefix or "")
        (tmp / _META).write_text(json.dumps(info.to_dict(), indent=1) + "\n")
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return info


def _count_lines(path: Path) -> int | None:
    """Lines of a plain file (the progress bar's total; a byte scan, seconds for gigabytes); ``None`` for ``.gz``."""
    if path.suffix == ".gz":
        return None
    count = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            count += block.count(b"\n")
    return count


def prepare_index(
    corpus: str | os.PathLike[str],
    *,
    index_dir: str | os.PathLike[str] | None = None,
    rebuild: bool = False,
    method: str = "bm25",
    model: str | os.PathLike[str] | None = None,
    query_prefix: str | None = None,
    passage_prefix: str | None = None,
    world_seed: int | None = None,
    world_scale: float = 1.0,
    device: str | None = None,
    show_progress: bool = True,
) -> tuple[Path, bool]:
    """The index folder of ``corpus``, built unless it is there already: ``(folder, built)``.

    ``corpus`` is a Search-R1 JSONL corpus (:func:`corpus_rows`), an index folder (served as it is), or
    ``"world"``: the generated world that SearchQA asks its own questions about (``world_seed``,
    ``world_scale``). Without ``index_dir`` the index goes to the cache, keyed by the corpus file's path,
    size and modification time (the world: its content) and the settings, so a second start finds it;
    ``rebuild`` builds it anew.

    Raises:
        FileNotFoundError: no such corpus file.
        ValueError: a bad corpus line, an unknown method, a dense method without a model folder.
    """
    from agent_gym_searchqa.world import WORLD_SEED

    if str(corpus) != "world" and is_index_dir(corpus):
        read_info(corpus)  # refuses another format now, not at the first request
        return Path(corpus), False
    rows: Iterator[tuple[str, str]]
    total: int | None
    if str(corpus) == "world":
        from agent_gym_searchqa.corpus import world_passages
        from agent_gym_searchqa.index import corpus_key
        from agent_gym_searchqa.world import generate_world

        seed = WORLD_SEED if world_seed is None else int(world_seed)
        passages = world_passages(generate_world(seed, world_scale))
        source, key, total = f"world seed {seed} scale {world_scale:g}", f"world {corpus_key(passages)}", len(passages)
        rows = passage_rows(passages)
    else:
        path = Path(corpus)
        if not path.is_file():
            raise FileNotFoundError(f"corpus file {path} does not exist (pass a Search-R1 JSONL corpus, an index folder, or world)")
        stat = path.stat()
        source, key = str(path.resolve()), f"file {path.resolve()} {stat.st_size} {stat.st_mtime_ns}"
        total, rows = _count_lines(path), corpus_rows(path)
    folder = Path(index_dir) if index_dir is not None else default_index_dir(key, method, None if model is None else str(model))
    if is_index_dir(folder) and not rebuild:
        info = read_info(folder)
        if info.method != method:
            raise ValueError(f"{folder} holds a {info.method} index, not {method}: pass --rebuild or another --index")
        return folder, False
    build_index(rows, folder, source=source, method=method, model=model, query_prefix=query_prefix,
                passage_prefix=passage_prefix, total=total, device=device, show_progress=show_progress)
    return folder, True


class _PassageWriter:
    """Appends passages to ``passages.jsonl`` and records where each line starts."""

    def __init__(self, folder: Path):
        self.file = open(folder / "passages.jsonl", "wb")
        self.offsets: list[int] = [0]

    def add(self, doc_id: str, contents: str) -> None:
        line = json.dumps({"id": doc_id, "contents": contents}, ensure_ascii=False).encode() + b"\n"
        self.file.write(line)
        self.offsets.append(self.offsets[-1] + len(line))

    def close(self, folder: Path) -> int:
        self.file.close()
        np.save(folder / "passages.offsets.npy", np.asarray(self.offsets, dtype=np.int64))
        count = len(self.offsets) - 1
        if count == 0:
            raise ValueError("the corpus holds no passages")
        return count


def _chunks(rows: Iterator[tuple[str, str]], writer: _PassageWriter, bar: Any, size: int = _CHUNK) -> Iterator[list[str]]:
    """The contents of ``rows`` in chunks of ``size``, each passage written to the store on the way."""
    chunk: list[str] = []
    for doc_id, contents in rows:
        writer.add(doc_id, contents)
        chunk.append(contents)
        if len(chunk) == size:
            yield chunk
            bar.update(len(chunk))
            chunk = []
    if chunk:
        yield chunk
        bar.update(len(chunk))


def _build_bm25(rows: Iterator[tuple[str, str]], folder: Path, total: int | None, show: bool) -> int:
    import bm25s
    from bm25s.tokenization import Tokenizer

    # The tokenizer keeps one vocabulary across chunks, so the corpus is never held as text at once; its
    # tokens are those of bm25s.tokenize with the same settings (the in-process index's).
    tokenizer = Tokenizer(stopwords=_STOPWORDS)
    writer = _PassageWriter(folder)
    ids: list[list[int]] = []
    with _progress(total, "tokenizing", show) as bar:
        for chunk in _chunks(rows, writer, bar):
            ids.extend(tokenizer.tokenize(chunk, update_vocab=True, return_as="ids", show_progress=False))
    count = writer.close(folder)
    retriever = bm25s.BM25()
    retriever.index((ids, tokenizer.get_vocab_dict()), show_progress=show)
    del ids
    retriever.save(str(folder / "bm25"), show_progress=False)
    return count


def _load_encoder(model: str | os.PathLike[str] | None, device: str | None) -> Any:
    if model is None:
        raise ValueError("the dense method needs --model DIR: a local sentence-transformers folder (e5 or bge)")
    folder = Path(model)
    if not (folder / "config.json").is_file() and not (folder / "modules.json").is_file():
        raise ValueError(
            f"--model {model} is not a local model folder (no config.json or modules.json there); nothing is "
            "downloaded: pass a folder holding a sentence-transformers model such as e5-base-v2 or bge-small-en-v1.5"
        )
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise ImportError(
            "the dense method needs sentence-transformers and faiss-cpu: pip install 'agent-r1-gym-searchqa[dense]'"
        ) from None
    return SentenceTransformer(str(folder), device=device, local_files_only=True)


def _encode(encoder: Any, texts: list[str], prefix: str, batch_size: int) -> np.ndarray:
    vectors = encoder.encode([prefix + t for t in texts], batch_size=batch_size, normalize_embeddings=True,
                             convert_to_numpy=True, show_progress_bar=False)
    return np.ascontiguousarray(vectors, dtype=np.float32)


def _build_dense(rows: Iterator[tuple[str, str]], folder: Path, encoder: Any, prefix: str, total: int | None,
                 batch_size: int, show: bool) -> int:
    _faiss()  # refused before the slow part when faiss is missing
    writer = _PassageWriter(folder)
    parts: list[np.ndarray] = []
    with _progress(total, "embedding", show) as bar:
        for chunk in _chunks(rows, writer, bar, size=16 * batch_size):  # embedding is slow: a bar that moves
            parts.append(_encode(encoder, chunk, prefix, batch_size))
    count = writer.close(folder)
    np.save(folder / "dense.npy", np.concatenate(parts))
    return count


def _faiss() -> Any:
    try:
        import faiss
    except ImportError:
        raise ImportError(
            "the dense method needs sentence-transformers and faiss-cpu: pip install 'agent-r1-gym-searchqa[dense]'"
        ) from None
    return faiss


class RetrievalIndex:
    """An index folder opened for searching: passages and ranking memory-mapped.

    Args:
        folder: a folder :func:`build_index` wrote.
        device: the dense model's torch device (queries are embedded at search time).

    Raises:
        ValueError: not an index folder, or one of another format (the message says to rebuild).
    """

    def __init__(self, folder: str | os.PathLike[str], *, device: str | None = None):
        self.folder = Path(folder)
        self.info = read_info(self.folder)
        self._offsets = np.load(self.folder / "passages.offsets.npy", mmap_mode="r")
        with open(self.folder / "passages.jsonl", "rb") as f:
            self._data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._bm25: Any = None
        self._vectors: np.ndarray | None = None
        self._encoder: Any = None
        if self.info.method == "bm25":
            import bm25s

            self._bm25 = bm25s.BM25.load(str(self.folder / "bm25"), mmap=True, show_progress=False)
        else:
            self._vectors = np.load(self.folder / "dense.npy", mmap_mode="r")
            self._encoder = _load_encoder(self.info.model, device)
            self._faiss = _faiss()

    def __len__(self) -> int:
        return self.info.passages

    def document(self, row: int) -> dict[str, str]:
        """The passage at ``row``: ``{"id", "contents"}``."""
        start, end = int(self._offsets[row]), int(self._offsets[row + 1])
        return json.loads(self._data[start:end])

    def search(self, queries: Sequence[str], k: int) -> list[list[tuple[int, float]]]:
        """The best ``k`` (row, score) of each query, best first. BM25 leaves out passages that share no
        word with the query (so a query of unknown words or stop words finds nothing); dense returns ``k``."""
        k = max(1, min(int(k), len(self)))
        if self._bm25 is not None:
            return self._search_bm25(list(queries), k)
        return self._search_dense(list(queries), k)

    def _search_bm25(self, queries: list[str], k: int) -> list[list[tuple[int, float]]]:
        import bm25s

        from agent_gym_searchqa.index import top_rows

        tokens = bm25s.tokenize(queries, stopwords=_STOPWORDS, return_ids=False, show_progress=False)
        return [top_rows(self._bm25.get_scores(t), k) if t and self._bm25.get_tokens_ids(t) else [] for t in tokens]

    def _search_dense(self, queries: list[str], k: int) -> list[list[tuple[int, float]]]:
        if not queries:
            return []
        vectors = _encode(self._encoder, queries, self.info.query_prefix, 64)
        # knn over the memory-mapped array: nothing is copied into a faiss index, so workers share the pages.
        scores, rows = self._faiss.knn(vectors, self._vectors, k, metric=self._faiss.METRIC_INNER_PRODUCT)
        return [[(int(r), float(s)) for r, s in zip(rr, ss) if r >= 0] for rr, ss in zip(rows, scores)]

    def close(self) -> None:
        self._data.close()
