#!/bin/sh
# Builds walcast-sink-pyfile, one executable file walcast can install:
# generates the walcast.sink.v1 stubs from the repository's
# proto/sink/v1/sink.proto (never committed: the .proto is the contract)
# and bundles them with sink.py into a zip application run by Debian's
# python3 (python3-grpcio, python3-grpc-tools, python3-cryptography).
#
#   examples/python-sink/build.sh [OUTPUT]    default: ./walcast-sink-pyfile
set -eu
here=$(cd "$(dirname "$0")" && pwd)
proto=$here/../../proto
out=${1:-walcast-sink-pyfile}
python=${PYTHON:-/usr/bin/python3}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m grpc_tools.protoc -I "$proto" --python_out="$work" --grpc_python_out="$work" "$proto/sink/v1/sink.proto"
touch "$work/sink/__init__.py" "$work/sink/v1/__init__.py"
cp "$here/sink.py" "$work/__main__.py"
"$python" -m zipapp "$work" --output "$out" --python "$python"
chmod 755 "$out"
