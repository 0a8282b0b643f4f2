#!/bin/sh
# Build the operator's wheel from SRC and install it, with its dependencies, into a fresh virtual environment at
# DEST, with the interpreter `python3` on PATH (Debian's, in the image) and the pip that venv brings. The
# Dockerfile's build stage runs exactly this; so does e2e/tests/test_image.py into a venv here. pip's own
# configuration applies (PIP_* variables, PIP_CONFIG_FILE): e2e/image.py pins the dependencies that way.
set -eu
src=$1
dest=$2
wheels=$(mktemp -d)
python3 -m venv "$dest"
"$dest/bin/python" -m pip wheel --no-cache-dir --quiet --disable-pip-version-check --wheel-dir "$wheels" "$src"
"$dest/bin/python" -m pip install --no-cache-dir --quiet --disable-pip-version-check --no-index \
  --find-links "$wheels" vllm-pooling-operator
# pip and setuptools only build: the image runs the operator, it installs nothing
"$dest/bin/python" -m pip uninstall --quiet --yes --disable-pip-version-check pip setuptools
rm -rf "$wheels"
