"""``agent-gym serve-retriever CORPUS``: Search-R1's ``/retrieve`` protocol over a corpus, for SearchQA and anyone.

The command line only: the index and the server are the SearchQA env package's
(:mod:`agent_gym_searchqa.retrieval`, :mod:`agent_gym_searchqa.server`), imported when the command runs,
so ``agent-gym --help`` works without that package and the command names its install when it is missing.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agent_gym.commands import UsageError, one_line, positive_int

__all__ = ["add_parser"]

_DESCRIPTION = """\
Serve a passage corpus over Search-R1's retrieval protocol, the one Search-R1's retrieval_server.py, verl's
search tool and verl-tool speak:

  POST /retrieve  {"queries": ["..."], "topk": 3, "return_scores": true}
  ->              {"result": [[{"document": {"id": "...", "contents": "\\"Title\\"\\nText"}, "score": 12.3}, ...], ...]}

one list per query, best first (return_scores false: the documents alone). GET /health says what is served.
AgentR1/SearchQA-v0 uses it with --env-kwarg retriever=http://HOST:PORT/retrieve, batching the searches of
the episodes in flight into one request.

The index is built on the first start (a progress bar on stderr) and kept: in --index DIR, or in the cache
(~/.cache/agent_gym/searchqa/retriever-*, AGENT_GYM_CACHE moves it) keyed by the corpus file's path, size and
modification time and the settings, so the next start opens it in a fraction of a second. Its arrays are
memory-mapped: --workers N processes share one copy in memory."""

_EPILOG = """\
CORPUS is one of:
  FILE.jsonl[.gz]  a Search-R1 / FlashRAG corpus, one {"id", "contents"} object a line, contents "Title"\\nText
                   (a "title" field, where present, is the title); e.g. wiki-18.jsonl
  DIR              an index folder built before (--index DIR, or --build-only's output)
  world            the generated world that AgentR1/SearchQA-v0 asks its own questions about (--world-seed,
                   --world-scale), so the env's generated questions can run through the server

Methods:
  bm25   (default) bm25s: BM25 (Lucene variant), English stop words, no stemming; the settings of
         SearchQA's in-process index, so the same corpus ranks the same either way
  dense  a local sentence-transformers folder (--model DIR: e5 or bge, e.g. e5-base-v2), embeddings searched
         by inner product with faiss; needs pip install 'agent-r1-gym-searchqa[dense]'; nothing is downloaded.
         Prefixes follow the model's name (e5: "query: " / "passage: "; bge: its query instruction) unless
         --query-prefix / --passage-prefix say otherwise

examples:
  agent-gym serve-retriever world --port 8000
  agent-gym serve-retriever ~/data/wiki-18.jsonl --port 8000 --workers 4
  agent-gym serve-retriever ~/data/wiki-18.jsonl --index ~/indexes/wiki-bm25 --build-only
  agent-gym serve-retriever ~/data/wiki-18.jsonl --method dense --model ~/models/e5-base-v2 --device cuda
  curl -s localhost:8000/retrieve -d '{"queries": ["Nocat Gazette"], "topk": 2, "return_scores": true}'"""

_MISSING = "serve-retriever needs the SearchQA env package: pip install -e envs/searchqa (or pip install agent-r1-gym-searchqa)"


def add_parser(sub: Any, formatter: Any) -> None:
    """Add ``serve-retriever`` to ``agent-gym``'s subcommands."""
    p = sub.add_parser("serve-retriever", help="serve a corpus over Search-R1's /retrieve protocol (bm25s or dense)",
                       description=_DESCRIPTION, epilog=_EPILOG, formatter_class=formatter)
    p.add_argument("corpus", metavar="CORPUS", help="a JSONL corpus file, an index folder, or world (see below)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on; 0.0.0.0 for every interface (default: %(default)s)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on, 0 for a free one (default: %(default)s)")
    p.add_argument("--workers", type=positive_int, default=1,
                   help="server processes sharing the socket and the memory-mapped index (default: %(default)s)")
    p.add_argument("--topk", type=positive_int, default=3, help="passages per query when a request leaves topk out (default: %(default)s)")
    p.add_argument("--index", default=None, metavar="DIR", help="the index folder to build or open (default: in the cache)")
    p.add_argument("--rebuild", action="store_true", help="build the index even if it exists")
    p.add_argument("--build-only", action="store_true", help="build (or find) the index, print its folder and exit")
    p.add_argument("--method", choices=("bm25", "dense"), default="bm25", help="how passages are ranked (default: %(default)s)")
    p.add_argument("--model", default=None, metavar="DIR", help="dense: a local sentence-transformers model folder (e5, bge)")
    p.add_argument("--query-prefix", default=None, help="dense: text put before each query (default: by the model's name)")
    p.add_argument("--passage-prefix", default=None, help="dense: text put before each passage (default: by the model's name)")
    p.add_argument("--device", default=None, help="dense: the model's torch device, e.g. cpu or cuda (default: sentence-transformers')")
    p.add_argument("--world-seed", type=int, default=None, metavar="N", help="world: the generated world's seed (default: SearchQA's, 1729)")
    p.add_argument("--world-scale", type=float, default=1.0, metavar="X", help="world: its size, 1 = 5,040 passages (default: %(default)s)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar while building")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        from agent_gym_searchqa.retrieval import prepare_index
        from agent_gym_searchqa.server import serve
    except ImportError as exc:
        raise UsageError(f"{_MISSING} ({exc})") from None
    try:
        folder, built = prepare_index(
            args.corpus, index_dir=args.index, rebuild=args.rebuild, method=args.method, model=args.model,
            query_prefix=args.query_prefix, passage_prefix=args.passage_prefix, world_seed=args.world_seed,
            world_scale=args.world_scale, device=args.device, show_progress=not args.no_progress,
        )
    except (FileNotFoundError, ValueError, ImportError) as exc:
        raise UsageError(one_line(str(exc))) from None
    if args.build_only:
        print(folder)
        return 0

    def ready(url: str, info: Any) -> None:
        workers = f"{args.workers} worker{'s' if args.workers > 1 else ''}"
        print(f"serving {info.passages:,} passages ({info.method}, {info.source}) at {url} with {workers}; "
              f"index {folder}{' (built now)' if built else ''}", flush=True)

    try:
        return serve(str(folder), args.host, args.port, workers=args.workers, default_topk=args.topk,
                     device=args.device, ready=ready)
    except OSError as exc:  # the port is taken, the address cannot be bound
        print(f"agent-gym: error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    except (ValueError, ImportError) as exc:
        raise UsageError(one_line(str(exc))) from None
