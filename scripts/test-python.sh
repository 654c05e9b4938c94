#!/usr/bin/env bash
# `make test-python`: installs the Python package (python/) into a virtual
# environment with pip, as a user would, and runs its pytest suite against
# this build's libtvm.so, with the C examples as the other processes.
# The package is installed with --no-index: it must need nothing from the
# network (its build backend is in python/backend, standard library only).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=$PWD/target/py
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -c "import pytest" 2>/dev/null ||
    "$VENV/bin/pip" install -q --disable-pip-version-check pytest
"$VENV/bin/pip" install -q --disable-pip-version-check --no-index --force-reinstall --no-deps ./python
LIB=${LIBDIR:-$PWD/target/release}   # the Makefile passes its LIBDIR
export TVMQ_LIB=$LIB/libtvm.so TVMQ_EXAMPLES_BIN=$PWD/target/examples TVMQ_BIN=$LIB/tvmq
export TVMQ_HEADER=$PWD/include/tvm.h
cd target   # import the installed package, not the source tree
"$VENV/bin/python" -m pytest -q -p no:cacheprovider ../python/tests
