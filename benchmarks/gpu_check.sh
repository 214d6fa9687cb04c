#!/usr/bin/env bash
# The device check of issue #40 (benchmarks/README.md, "The device check").
#
#   make gpu-check                            here: download the wheels the device lacks into
#                                             .gpu-wheels/ (ignored), with dist/'s own wheel, check
#                                             that they and the working tree fit the 64 MiB a device
#                                             call carries, and print the one call to make
#   bash benchmarks/gpu_check.sh              on the device machine: install the carried wheels,
#                                             then every gpu test, a real server and kernel round
#                                             trip, the hibernate checks and the GPU benchmark;
#                                             a table, and $OUT/gpu-report.json
#   bash benchmarks/gpu_check.sh --dry-run    anywhere, no CUDA: the same steps, CPU-sized, the
#                                             same report with "cuda": false (CI runs it)
#
# Options after the mode go to benchmarks/gpu_check.py: --budget SECONDS, --only SECTIONS.
set -euo pipefail
cd "$(dirname "$0")/.."

WHEELS=.gpu-wheels
BUDGET=330     # seconds the check may take on the device: two runs and a machine's start fit 15 min
TIMEOUT_S=360  # the device call's timeout_s: the budget and the install
CARRY_LIMIT=$((64 << 20))
# what the check needs that the device image ('cuda', Python 3.12, torch 2.11) lacks: with their
# dependencies, less what .library/device/KINDS.md lists as installed there
NEEDS=("jupyter_server>=2.15,<3" "ipykernel>=6.29" "jupyter_client" "pytest-jupyter[server]>=0.10"
       "websocket-client")
ON_DEVICE=" absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs
  certifi charset-normalizer click cloudpickle colorama coverage cuda-bindings cuda-core cuda-pathfinder
  cuda-toolkit filelock fsspec h11 httpcore httpx idna iniconfig jinja2 markupsafe numpy nvidia-ml-py
  packaging pandas pip pluggy prometheus-client psutil pygments pytest pytest-timeout pytest-xdist
  python-dateutil pyyaml requests safetensors setuptools six sympy torch triton typing-extensions
  urllib3 xxhash "

mode=device
args=()
for arg in "$@"; do
  case "$arg" in
    --prepare) mode=prepare ;;
    --dry-run) mode=dry; args+=(--dry-run) ;;
    *) args+=("$arg") ;;
  esac
done

python_here() {
  if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; elif [ -x .venv/bin/python ]; then echo .venv/bin/python; else echo python3; fi
}

prepare() {
  local py; py=$(python_here)
  rm -rf "$WHEELS"
  mkdir -p "$WHEELS"
  # wheels for the device's Python, not this one
  "$py" -m pip download --quiet --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --platform any -d "$WHEELS" "${NEEDS[@]}" 2> >(grep -v "^WARNING: Location" >&2)
  local on_device; on_device=" $(echo $ON_DEVICE) "  # one space between names
  for wheel in "$WHEELS"/*.whl; do
    name=$(basename "$wheel" | cut -d- -f1 | tr 'A-Z_.' 'a-z--')
    if [[ "$on_device" == *" $name "* ]]; then rm "$wheel"; fi
  done
  cp dist/jupyter_pause-*.whl "$WHEELS"/
  local wheels tree total
  wheels=$(du -cb "$WHEELS"/*.whl | tail -1 | cut -f1)
  tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | awk '/total$/ {s += $1} END {print s + 0}')
  total=$((wheels + tree))
  echo "$(ls "$WHEELS" | wc -l) wheels in $WHEELS: $((wheels >> 20)) MiB; the working tree: $((tree >> 20)) MiB;" \
       "together $((total >> 20)) MiB of the $((CARRY_LIMIT >> 20)) MiB a device call carries"
  if [ "$total" -gt "$CARRY_LIMIT" ]; then
    echo "too much to carry: drop large untracked files from the tree, or wheels the device has" >&2
    exit 1
  fi
  cat <<EOF

The device check is one call of the device tool (about $((BUDGET / 60)) min of its $((TIMEOUT_S / 60)) min limit; a
machine's start and a second run still fit a session's 15 min):

  run(command="bash benchmarks/gpu_check.sh", carry=["$WHEELS"], timeout_s=$TIMEOUT_S)

It prints a table and writes \$OUT/gpu-report.json (and gpu-report.txt, gpu-tests.xml). To rerun
only what failed: command="bash benchmarks/gpu_check.sh --only tests,hibernate" (environment,
tests, server_round_trip, hibernate, bench). Keep the report in benchmarks/results/ and its table
in benchmarks/README.md.
EOF
}

case "$mode" in
  prepare)
    prepare
    ;;
  device)
    if [ ! -d "$WHEELS" ]; then echo "no $WHEELS: run make gpu-check here first and carry it" >&2; exit 1; fi
    started=$(date +%s.%N)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site "$WHEELS"/*.whl
    export PYTHONPATH=/tmp/site
    installed=$(python3 -c "import time; print(round(time.time() - $started, 1))")
    exec env PYTHONUNBUFFERED=1 python3 benchmarks/gpu_check.py --out "${OUT:-.gpu-check-out}" \
      --budget "$BUDGET" --installed-s "$installed" "${args[@]}"
    ;;
  dry)
    out=${OUT:-.gpu-check-out}
    exec env PYTHONUNBUFFERED=1 "$(python_here)" benchmarks/gpu_check.py --out "$out" --budget 600 "${args[@]}"
    ;;
esac
