#!/usr/bin/env bash
# bench/trainer.py's GPU figures (issue 23 section 6) on a bare GPU machine, in under 5 minutes.
#
# The device image has torch (CUDA), numpy and python3 but neither spotsweep nor
# pydantic (the trainer's configs) nor psycopg (bench/harness.py), and no network.
# So, first, on a machine with pip and the network (this repo's checkout):
#
#   bench/trainer_gpu.sh wheels          # pure wheels for cp312 into build/gpu-wheels (about 5 MiB)
#
# then on the GPU machine, from the repo root, carrying build/gpu-wheels (the device
# tool: run(command="bash bench/trainer_gpu.sh", carry=["build/gpu-wheels"], timeout_s=420)):
#
#   bash bench/trainer_gpu.sh            # figures in $OUT (or bench/results/): trainer-*.json, trainer-gpu.log
#
# spotsweep is put on the path through a folder of links (no build, no install).
# Each size runs under its own time limit, so a slow compilation costs that size only;
# bench/trainer.py writes its JSON after every run, so a cut-off size keeps its figures.
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=${WHEELS:-build/gpu-wheels}
PY=${PYTHON:-python3}
SIZES=${SIZES:-small wide grid}  # and TRAINER_ARGS: more flags for bench/trainer.py (a dry run: SIZES=tiny TRAINER_ARGS=--quick)

if [ "${1:-}" = wheels ]; then
  # The versions in this repo's .venv; pydantic-core and psycopg-binary are the compiled ones.
  exec "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -d "$WHEELS" \
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
    typing-extensions==4.16.0 psycopg==3.3.9 psycopg-binary==3.3.9
fi

OUT=${OUT:-bench/results}
mkdir -p "$OUT" /tmp/spotsweep-shim/spotsweep
"$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/spotsweep-site "$WHEELS"/*.whl || exit 1
ln -sf "$PWD"/spotsweep/*.py /tmp/spotsweep-shim/spotsweep/
for d in shared services trainer; do ln -sfn "$PWD/$d" "/tmp/spotsweep-shim/spotsweep/$d"; done
export PYTHONPATH=/tmp/spotsweep-shim:/tmp/spotsweep-site PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  "$PY" -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())'
  lscpu | grep -m1 'Model name'
  for size in $SIZES; do  # limits: 280 s in all, cold compilations included; the shipped example's size first
    case $size in small) limit=100 ;; wide) limit=110 ;; *) limit=70 ;; esac
    timeout "$limit" "$PY" bench/trainer.py --sizes "$size" --warmup 10 --steps 30 --repeat 2 --threads 4 \
      --json "$OUT/trainer-$size.json" ${TRAINER_ARGS:-} || echo "trainer.py --sizes $size: exit $? (124: cut at ${limit} s)"
  done
} 2>&1 | tee "$OUT/trainer-gpu.log"
