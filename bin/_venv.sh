# Sourced by bin/*: make sure .venv exists and has the requirements installed (again when a requirements
# or constraints file changes). constraints.txt pins every transitive dependency, so two machines get
# the same versions.
# Usage: ensure_venv requirements-dev.txt   (or requirements-demo.txt, or requirements.txt)
ensure_venv() {
  local req="$1"
  local stamp want
  stamp=".venv/.$(basename "$req" .txt).sha256"   # one stamp per requirements file
  want=$(cat requirements*.txt constraints.txt | sha256sum | cut -d' ' -f1)
  if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  echo "== preparing .venv from $req and constraints.txt (first run only)" >&2
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$req" -c constraints.txt >&2
  echo "$want" > "$stamp"
}
