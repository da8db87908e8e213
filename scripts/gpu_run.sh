#!/usr/bin/env bash
# On a leased GPU machine (docs/gpu-machine.md), in the repository's root: install the carried Ray
# (.gpu-carry/, built here by scripts/gpu_carry.py) against that machine's own Python and torch,
# then run `hetlab gpu-check` and leave its record and log in $OUT.
#
#   bash scripts/gpu_run.sh                  # gpu-check --quick
#   bash scripts/gpu_run.sh --full           # gpu-check, every check in full
#   bash scripts/gpu_run.sh --only pair_ps   # any gpu-check options instead (full unless --quick)
#
# Exit status: gpu-check's (0 all goals met, 1 some not, 2 refused), or 3 if Ray did not install.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/hetlab-gpu-check}
SITE=${HETLAB_SITE:-/tmp/hetlab-site}
PY=${PYTHON:-python3}                       # the machine's Python, the one that holds its torch
mkdir -p "$OUT"

if ! ls .gpu-carry/wheels/ray-*.whl >/dev/null 2>&1; then
  echo "no .gpu-carry/wheels/ray-*.whl: build it with scripts/gpu_carry.py and carry .gpu-carry" >&2
  exit 3
fi
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$SITE" .gpu-carry/wheels/*.whl || exit 3

export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"   # Ray's workers inherit it: hetlab imports there too
export HETLAB_COMMIT="$(cat .gpu-carry/hetlab-commit 2>/dev/null || echo unknown)"
export HETLAB_RAY_WHEEL="$(cat .gpu-carry/ray-wheel.txt 2>/dev/null)"
export RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1

"$PY" -c "import platform, ray, torch; print(f'python {platform.python_version()}, ray {ray.__version__}, torch {torch.__version__}, CUDA {torch.version.cuda}, GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}')" || exit 3
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

if [ "${1:-}" = "--full" ]; then shift; elif [ $# -eq 0 ]; then set -- --quick; fi
"$PY" -m hetlab gpu-check --record "$OUT" "$@" 2>&1 | tee "$OUT/gpu-check.log"
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 1 ] && [ -d /tmp/ray/session_latest/logs ]; then   # what Ray said, for a check that failed
  tar czf "$OUT/ray-logs.tgz" -C /tmp/ray/session_latest logs 2>/dev/null || true
fi
echo "gpu-check exit status $rc; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit "$rc"
