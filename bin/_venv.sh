# Sourced by bin/*: make sure .venv exists and has the requirements installed (again when a requirements,
# lock or constraints file, or an example's pyproject.toml, changes). Each requirements file has its lock (bin/lock: pip-compile
# --generate-hashes): the whole closure at constraints.txt's versions, with every file's sha256. pip
# installs the lock with --require-hashes, so two machines get the same versions, and a file whose
# hash differs (a tampered mirror, a re-uploaded release) is refused.
# Usage: ensure_venv requirements-dev.txt   (or requirements-demo.txt, or requirements.txt)
ensure_venv() {
  local req="$1"
  local lock="${req%.txt}.lock"
  local stamp want
  stamp=".venv/.$(basename "$req" .txt).sha256"   # one stamp per requirements file
  want=$(cat requirements*.txt requirements*.lock constraints.txt examples/*/pyproject.toml | sha256sum | cut -d' ' -f1)
  if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  echo "== preparing .venv from $lock (first run only)" >&2
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes -r "$lock" >&2
  if [ "$req" = requirements-dev.txt ]; then
    # The example vendor adapter (docs/design.md §5, Adapters in Python), installed from its own folder as
    # an operator installs one, so Liaison finds it by its entry point; its tests run with the suite
    # (pyproject.toml's testpaths). Built with this venv's setuptools and wheel: no download.
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
      -e ./examples/acme_adapter >&2
  fi
  echo "$want" > "$stamp"
}
