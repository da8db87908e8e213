#!/usr/bin/env bash
# The GPU check's prepared call (docs/gpu-machine.md), every step of it, in the repository's root.
#
#   bash scripts/gpu_run.sh                    on a single-GPU Linux machine: the quick checks
#   bash scripts/gpu_run.sh --full             every check in full
#   bash scripts/gpu_run.sh --dry-run          here, without a GPU: the same steps and code paths in a
#                                              stand-in mode (Ray counts one GPU on the desktop node, the
#                                              workers run on the CPU, every label says stand-in), tiny sizes
#   bash scripts/gpu_run.sh --dry-run --quick  the dry run's short form (no notebooks, one pair batch)
#   bash scripts/gpu_run.sh --dry-run --plumbing  the call's machinery at its smallest (make test's part,
#                                              tests/test_gpu_run.py): gpu-check's describe and train_128
#                                              rows, then local_loop; nothing that other tests train
#
# On the GPU machine Ray comes from .gpu-carry/ (scripts/gpu_carry.py) unless `import ray` already works.
# Each step writes $OUT/STEP.log, printed when the step ends; its exit status is its own (no pipe hides
# it). The last line is one JSON object: every figure the course claims for a card, and each step's
# status (scripts/gpu_figures.py). Exit status: 0 every step ran and met its goals, 1 a step failed, was
# cut or did not run, 2 a bad option, 3 Ray missing.
#
# The call fits its lease (about 15 minutes, the machine's start included): on the card it has CALL_BUDGET
# seconds (8 minutes), the carried wheels' install included, and each step its own budget (BUDGET below),
# in priority order: the card's own figures, then the pair, then notebooks 01 and 02. A step past its
# budget is cut (`timeout`), its log kept; a step with no time left is not run. $OUT/plan.txt lists every
# step with its budget; gpu_figures.py names each step cut or not run. The dry run enforces no budget
# (a shared CPU is slower than the card), nor does --full (longer than one lease): the dry run prints each
# step's budget on the card beside what it took here. A cut step's Ray processes may outlive it.
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=0 FULL=0 SHORT=0 PLUMB=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY=1 ;;
    --full) FULL=1 ;;
    --quick) SHORT=1 ;;
    --plumbing) PLUMB=1 SHORT=1 ;;
    *) echo "gpu_run.sh: unknown option $arg (use --dry-run, --quick, --plumbing or --full)" >&2; exit 2 ;;
  esac
done
if [ "$PLUMB" = 1 ] && [ "$DRY" = 0 ]; then echo "gpu_run.sh: --plumbing goes with --dry-run" >&2; exit 2; fi
OUT=${OUT:-/tmp/hetlab-gpu-check}
# Seconds on the card, in run order; the setup (install, versions) is what is left of CALL_BUDGET before
# the first step. Measured on an H100 2026-11-28: gpu-check --quick 216 s, pair_vs_alone 128 (3 repeats) 96 s.
CALL_BUDGET=${CALL_BUDGET:-480}
declare -A BUDGET=([gpu_check]=230 [pair_vs_alone_128]=80 [pair_vs_alone_1024]=55 [local_loop]=25 [notebooks]=55)
SETUP_BUDGET=30   # the carried wheels' install and the versions line
ORDER=(gpu_check pair_vs_alone_128 pair_vs_alone_1024 local_loop notebooks)
PY=${PYTHON:-python3}                       # the machine's Python, the one that holds its torch
mkdir -p "$OUT" && rm -f "$OUT"/*.log "$OUT/status.txt" "$OUT/started.txt" "$OUT/plan.txt"
SECONDS=0
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"   # Ray's workers inherit it: hetlab imports there too

if ! "$PY" -c "import ray" 2>/dev/null; then          # a machine with no package registry: the carried wheels
  SITE=${HETLAB_SITE:-/tmp/hetlab-site}
  if ! ls .gpu-carry/wheels/ray-*.whl >/dev/null 2>&1; then
    echo "no Ray here and no .gpu-carry/wheels/ray-*.whl: build it with scripts/gpu_carry.py and carry .gpu-carry" >&2
    exit 3
  fi
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" .gpu-carry/wheels/*.whl || exit 3
  export PYTHONPATH="$SITE:$PYTHONPATH"
fi
export HETLAB_COMMIT="${HETLAB_COMMIT:-$(cat .gpu-carry/hetlab-commit 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
export HETLAB_RAY_WHEEL="$(cat .gpu-carry/ray-wheel.txt 2>/dev/null)"
export RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
"$PY" -c "import platform, ray, torch; print(f'python {platform.python_version()}, ray {ray.__version__}, torch {torch.__version__}, CUDA {torch.version.cuda}, GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}')" || exit 3
[ "$DRY" = 1 ] || nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

failed=0
ENFORCE=$(( DRY == 0 && FULL == 0 ))   # the budgets bind the quick call on the card; --full and the dry run run to the end
step() {   # step NAME COMMAND...: its output into $OUT/NAME.log, then shown; its own exit status kept
  local name=$1; shift
  local budget=${BUDGET[$name]} left=$((CALL_BUDGET - SECONDS)) limit t0=$SECONDS
  limit=$(( budget < left ? budget : left ))
  if [ "$ENFORCE" = 1 ] && [ "$limit" -lt 10 ]; then   # no time left in the lease for it
    echo "=== $name: not run: $left s left of the call's $CALL_BUDGET s"
    echo "$name not-run" >>"$OUT/status.txt"; failed=1; return
  fi
  echo "=== $name (budget on the card ${budget} s): $*"
  echo "$name" >>"$OUT/started.txt"
  local rc
  if [ "$ENFORCE" = 0 ]; then
    "$@" >"$OUT/$name.log" 2>&1; rc=$?
  else                                          # cut at its budget, its log kept
    timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1; rc=$?
  fi
  cat "$OUT/$name.log"
  local took=$((SECONDS - t0))
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "=== $name: CUT after $took s (its budget ${limit} s); its log is $OUT/$name.log"
  fi
  echo "=== $name: exit status $rc; took $took s here, budget on the card $budget s"
  echo "$name $rc" >>"$OUT/status.txt"
  echo "$name $budget $took" >>"$OUT/timing.txt"
  [ "$rc" -eq 0 ] || failed=1
}

rm -f "$OUT/timing.txt"
setup_took=$SECONDS
for name in "${ORDER[@]}"; do
  if [ "$SHORT" = 1 ] && { [ "$name" = pair_vs_alone_1024 ] || [ "$name" = notebooks ]; }; then continue; fi
  if [ "$PLUMB" = 1 ] && [ "$name" = pair_vs_alone_128 ]; then continue; fi
  echo "$name ${BUDGET[$name]}" >>"$OUT/plan.txt"
done
total=$SETUP_BUDGET; for name in "${ORDER[@]}"; do total=$((total + BUDGET[$name])); done
echo "=== the call's budget on the card: setup $SETUP_BUDGET s (took $setup_took s here)$(for n in "${ORDER[@]}"; do printf ', %s %s s' "$n" "${BUDGET[$n]}"; done); $total s of $CALL_BUDGET s"
NOTEBOOKS=(notebooks/01_single_device_mnist.ipynb notebooks/02_measure_your_devices.ipynb)
if [ "$DRY" = 1 ]; then
  TINY_PAIR=(--card --stand-in --samples 512 --epochs 1 --repeats 1 --sweep-steps 2 --local-steps 4 --target 0.5)
  if [ "$PLUMB" = 1 ]; then ONLY=(--only describe,train_128); else ONLY=(); fi
  step gpu_check "$PY" -m harness.gpucheck --stand-in --record "$OUT" "${ONLY[@]}"
  [ "$PLUMB" = 1 ] || step pair_vs_alone_128 "$PY" benchmarks/pair_vs_alone.py "${TINY_PAIR[@]}" --global-batch 32
  [ "$SHORT" = 1 ] || step pair_vs_alone_1024 "$PY" benchmarks/pair_vs_alone.py "${TINY_PAIR[@]}" --global-batch 64
  step local_loop "$PY" benchmarks/local_loop.py --stand-in --batch 32 --local-steps 4 --rounds 2 --repeats 1
  [ "$SHORT" = 1 ] || step notebooks env HETLAB_QUICK=1 "$PY" scripts/run_cells.py "${NOTEBOOKS[@]}"
else
  if [ "$FULL" = 1 ]; then MODE=(); else MODE=(--quick); fi
  step gpu_check "$PY" -m harness.gpucheck --record "$OUT" "${MODE[@]}"
  step pair_vs_alone_128 "$PY" benchmarks/pair_vs_alone.py --card --repeats 3
  # at 1024 a round of H=64 is all of MNIST: H up to 16, a pass of 16,384 samples, 2 alternations
  step pair_vs_alone_1024 "$PY" benchmarks/pair_vs_alone.py --card --global-batch 1024 --repeats 2 \
    --samples 16384 --local-steps 4,8,16 --sweep-steps 10
  step local_loop "$PY" benchmarks/local_loop.py --repeats 3
  step notebooks env HETLAB_QUICK="$((1 - FULL))" "$PY" scripts/run_cells.py "${NOTEBOOKS[@]}"
fi

if [ "$failed" = 1 ] && [ -d /tmp/ray/session_latest/logs ]; then   # what Ray said, for a step that failed
  tar czf "$OUT/ray-logs.tgz" -C /tmp/ray/session_latest logs 2>/dev/null || true
fi
echo "=== the call: $SECONDS s here (on the card at most $CALL_BUDGET s); each step, budget on the card ÷ took here:"
while read -r name budget took; do printf '    %-20s %4s s  %4s s\n' "$name" "$budget" "$took"; done <"$OUT/timing.txt"
echo "files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
"$PY" scripts/gpu_figures.py "$OUT" || failed=1
exit "$failed"
