#!/usr/bin/env bash
# The wheelhouse the Containerfile installs from: inhouse's own wheel and every runtime
# dependency's, for the image's platform (CPython 3.11, manylinux x86_64 by default). Run it
# where PyPI or a PyPI mirror is reachable (PIP_INDEX_URL selects the mirror), then carry
# build/wheels/ to the build host with the sources; the image build itself needs no network.
#
#   scripts/container_wheels.sh [DIR]     # default build/wheels
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build/wheels}"
mkdir -p "$dir"
python -m pip wheel --no-deps --wheel-dir "$dir" .
# Runtime dependencies as binary wheels for the image's interpreter, not this machine's.
python - <<'PY' > "$dir/requirements.txt"
import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))
PY
python -m pip download --only-binary=:all: --python-version 3.11 --implementation cp \
  --platform "${PLATFORM:-manylinux2014_x86_64}" --dest "$dir" -r "$dir/requirements.txt"
echo "wheelhouse: $dir ($(ls "$dir"/*.whl | wc -l) wheels)"
