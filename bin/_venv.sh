# Sourced by bin/*: make sure .venv exists and has the requirements installed (again when a requirements
# or constraints file, or an example's pyproject.toml, changes). constraints.txt pins every transitive
# dependency, so two machines get the same versions.
# Usage: ensure_venv requirements-dev.txt   (or requirements.txt)
ensure_venv() {
  local req="$1"
  local stamp want
  stamp=".venv/.$(basename "$req" .txt).sha256"   # one stamp per requirements file
  want=$(cat requirements*.txt constraints.txt examples/*/pyproject.toml | sha256sum | cut -d' ' -f1)
  if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  echo "== preparing .venv from $req and constraints.txt (first run only)" >&2
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$req" -c constraints.txt >&2
  if [ "$req" = requirements-dev.txt ]; then
    # The example vendor adapter (docs/design.md §5, Adapters in Python), installed from its own folder as
    # an operator installs one, so Liaison finds it by its entry point; its tests run with the suite
    # (pyproject.toml's testpaths). Built with this venv's setuptools and wheel: no download.
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
      -e ./examples/acme_adapter >&2
  fi
  echo "$want" > "$stamp"
}
