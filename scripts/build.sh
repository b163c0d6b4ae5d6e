#!/usr/bin/env bash
# Installs what Kiln needs (scripts/setup.sh), then configures and builds a Release tree in
# build/ (or $KILN_BUILD_DIR): the kiln command, the libraries, the Python module and the
# examples; with --tests the tests too, with --bench the benchmarks too (each also installs what
# it needs). Further arguments go to cmake's configure step. Then it installs the Python module
# where Debian's /usr/bin/python3 finds it (cmake's `python` component: by default
# /usr/local/lib/python3.<minor>/dist-packages/kiln) and checks that `import kiln` gets that copy.
#   scripts/build.sh [--tests] [--bench] [cmake arguments...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
setup=() tests=OFF bench=OFF
while [ $# -gt 0 ]; do
  case "$1" in
    --tests) setup+=(--tests); tests=ON; shift ;;
    --bench) setup+=(--bench); bench=ON; shift ;;
    *) break ;;
  esac
done
bash "$root/scripts/setup.sh" "${setup[@]}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=$tests \
  -DKILN_BUILD_BENCH=$bench "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"

# pip refuses to install into Debian's Python (PEP 668); a CMake install into /usr/local's
# dist-packages is what Debian leaves to the local administrator. PYTHONPATH=build/python still
# comes first for whoever sets it.
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO cmake --install "$build" --component python >/dev/null
installed=$(grep -m1 '/kiln/__init__.py$' "$build/install_manifest_python.txt" || true)
imported=$(cd / && env -u PYTHONPATH /usr/bin/python3 -c "import kiln; print(kiln.__file__)" 2>&1) ||
  true
if [ -z "$installed" ] || [ "$imported" != "$installed" ]; then
  echo "build.sh: the Python module was installed as '${installed:-nothing}', but" \
    "/usr/bin/python3 -c 'import kiln' (from /, no PYTHONPATH) gives: $imported" >&2
  echo "build.sh: set -DKILN_PYTHON_INSTALL_DIR to a directory in that Python's sys.path," \
    "or remove the other kiln it finds" >&2
  exit 1
fi
