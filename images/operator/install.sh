#!/bin/sh
# Install the operator into a fresh virtual environment at DEST, with the interpreter `python3` on PATH (Debian's,
# in the image) and the pip that venv brings: first its dependencies exactly as LOCK pins them, every file checked
# against the lock's hashes (so two builds a week apart install the same wheels), then the operator's own wheel,
# built from SRC, without resolving anything again. The Dockerfile's build stage runs exactly this; so does
# e2e/tests/test_image.py into a venv here. pip's own configuration applies (PIP_* variables, PIP_CONFIG_FILE):
# e2e/image.py points it at wheels downloaded beforehand, so that build is offline.
set -eu
src=$1
dest=$2
lock=${3:-$src/images/operator/requirements.lock}
wheels=$(mktemp -d)
python3 -m venv "$dest"
"$dest/bin/python" -m pip install --no-cache-dir --quiet --disable-pip-version-check --require-hashes --no-deps \
  --only-binary=:all: -r "$lock"
"$dest/bin/python" -m pip wheel --no-cache-dir --quiet --disable-pip-version-check --no-deps --wheel-dir "$wheels" "$src"
"$dest/bin/python" -m pip install --no-cache-dir --quiet --disable-pip-version-check --no-deps --no-index \
  --find-links "$wheels" vllm-pooling-operator
"$dest/bin/python" -m pip check --disable-pip-version-check >/dev/null
# pip and setuptools only build: the image runs the operator, it installs nothing
"$dest/bin/python" -m pip uninstall --quiet --yes --disable-pip-version-check pip setuptools
rm -rf "$wheels"
