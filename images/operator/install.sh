#!/bin/sh
# Build the operator's wheel from SRC and install it, with its dependencies, into a fresh virtual
# environment at DEST. The Dockerfile's build stage runs exactly this, and so does the test that stands in
# for an image build here (e2e/tests/test_image.py).
set -eu
src=$1
dest=$2
wheels=$(mktemp -d)
python -m pip wheel --no-cache-dir --quiet --wheel-dir "$wheels" "$src"
python -m venv "$dest"
"$dest/bin/python" -m pip install --no-cache-dir --quiet --no-index --find-links "$wheels" vllm-pooling-operator
rm -rf "$wheels"
