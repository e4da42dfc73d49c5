#!/usr/bin/env python3
"""How long loading GSM8K takes: the packaged gzip copy, a folder of the original JSONL files, and a cached call.

For each split, the median over ``--repeats`` of:

- ``packaged``: ``load_gsm8k(split)`` from the copy inside ``agent_gym_gsm8k`` (decompressed and parsed);
- ``folder``: the same from a folder holding the original ``<split>.jsonl`` (``AGENT_GYM_GSM8K_DIR``);
- ``cached``: a second call on the folder (a stat of the file and a copy of the list).

Each cold load clears the loader's cache first. Targets on an idle core: train (7,473 problems) packaged
< 1.0 s, folder < 0.5 s, cached < 0.05 s. The tests check what is parsed and cached, not these times.

    python benchmarks/gsm8k_load.py --repeats 5
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import tempfile
import time
from pathlib import Path

from agent_gym_gsm8k import data as gsm8k_data
from agent_gym_gsm8k.data import DATA_DIR_ENV_VAR, SPLITS, load_gsm8k

TARGETS_S = {"packaged": 1.0, "folder": 0.5, "cached": 0.05}


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="loads per measurement, median reported (default 5)")
    args = parser.parse_args()
    package_dir = Path(gsm8k_data.__file__).resolve().parent
    with tempfile.TemporaryDirectory() as folder:
        for split in SPLITS:
            raw = gzip.decompress((package_dir / "dataset" / f"{split}.jsonl.gz").read_bytes())
            (Path(folder) / f"{split}.jsonl").write_bytes(raw)
        print(f"{'split':<6} {'tasks':>6} " + " ".join(f"{name + ' s':>11}" for name in TARGETS_S))
        for split in SPLITS:
            times: dict[str, list[float]] = {name: [] for name in TARGETS_S}
            for _ in range(args.repeats):
                os.environ.pop(DATA_DIR_ENV_VAR, None)
                gsm8k_data._load_packaged_cached.cache_clear()
                times["packaged"].append(_seconds(lambda: load_gsm8k(split)))
                os.environ[DATA_DIR_ENV_VAR] = folder
                gsm8k_data._load_jsonl_cached.cache_clear()
                times["folder"].append(_seconds(lambda: load_gsm8k(split)))
                times["cached"].append(_seconds(lambda: load_gsm8k(split)))
            os.environ.pop(DATA_DIR_ENV_VAR, None)
            medians = {name: statistics.median(values) for name, values in times.items()}
            cells = " ".join(
                f"{medians[name]:>9.4f}{'' if medians[name] < TARGETS_S[name] else ' !':<2}" for name in TARGETS_S
            )
            print(f"{split:<6} {len(load_gsm8k(split)):>6} {cells}")
    print("targets: " + ", ".join(f"{name} < {target:g} s" for name, target in TARGETS_S.items()) + " (! = missed)")


if __name__ == "__main__":
    main()
