# spotsweep: `make demo` runs the example sweep locally; `make test` runs the tests.
# Both set up .venv first with the CPU build of torch (no multi-GB CUDA download).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# PyTorch's CPU wheels: their version (2.13.0+cpu) satisfies the pin in pyproject.toml
# and ranks above PyPI's CUDA build. Torch alone is installed from there first (asking
# that index for every package would be slow); where it cannot be reached (a machine
# with only a package mirror), pip warns and takes torch from the mirror instead.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_PIN := $(shell grep -o 'torch==[0-9.]*' pyproject.toml | head -1)

.PHONY: setup demo test lint unit integration chaos cluster-test bench dist clean images image-test

$(BIN)/spotsweep: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --retries 1 --no-deps --extra-index-url $(TORCH_INDEX) '$(TORCH_PIN)'
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

setup: $(BIN)/spotsweep

demo: setup
	$(BIN)/spotsweep run examples/deepseek-small.yaml --workers 2 --csv results.csv

# As root it first installs and starts Docker and Podman when missing (deploy/container-runtime.sh), for
# the tests that run trials in containers; elsewhere those tests skip and say why.
test: setup lint
	@if [ "$$(id -u)" = 0 ]; then deploy/container-runtime.sh; else echo "make test: not root: the container tests run where docker and podman do"; fi
	$(BIN)/pytest

# mypy and lint-imports (the import contracts in pyproject.toml) check the installed
# layout (spotsweep.shared...), which the editable install only provides through an
# import hook neither follows.
lint: setup
	$(BIN)/ruff check .
	rm -rf build/typecheck build/lib  # build/lib: setuptools would copy a moved module's stale copy from it
	$(BIN)/pip install --quiet --no-deps --target build/typecheck .
	cd build/typecheck && ../../$(BIN)/mypy spotsweep --config-file ../../pyproject.toml --python-executable ../../$(BIN)/python
	cd build/typecheck && PYTHONPATH=. ../../$(BIN)/lint-imports --config ../../pyproject.toml --no-cache

# unit: no service reachable is needed (tests/conftest.py marks each test by the
# fixtures it uses); integration: every test that needs RabbitMQ, PostgreSQL or S3.
UNIT_MARKERS := not needs_pg and not needs_rabbit and not needs_s3

unit: setup
	$(BIN)/pytest -m '$(UNIT_MARKERS)'

integration: setup
	$(BIN)/pytest -m 'not ($(UNIT_MARKERS))'

# A real sweep while agents are preempted and killed and the planner, the
# collector, RabbitMQ and PostgreSQL are killed and restarted (CI runs the short form).
chaos: setup
	$(BIN)/python tests/chaos/chaos.py --long

# Many hosts on one machine (network namespaces; needs root, skipped otherwise): an
# agent's link cut and the collector partitioned mid-sweep (`make test` runs it too).
cluster-test: setup
	$(BIN)/pytest tests/cluster

# Benchmarks against Optuna and the other peers (docs/benchmarks.md): over an hour in all
# on 2 cores, by the notes below: search about 25 minutes, scale 13, checkpoint 10, goodput 8,
# trainer a few minutes; headline a few minutes more. bench/dashboard.py, inputs.py, containers.py and
# dispatch_cpu.py are run by hand (docs/benchmarks.md gives each command).
# BENCH_SIZE=smoke runs each at a tiny size, as a check that they work.
BENCH_SIZE ?= full
ifeq ($(BENCH_SIZE),smoke)
BENCH_ARGS_search := --all --seeds 1 --no-ray
BENCH_ARGS_goodput := --quick
BENCH_ARGS_headline := --trials 40 --repeat 1 --no-build-ray
BENCH_ARGS_trainer := --quick
BENCH_ARGS_scale := --quick
BENCH_ARGS_checkpoint := --quick
else
# search: every section, Ray Tune's real runs included (its virtualenv is built under build/peers/ray
# when missing): about 25 minutes on 2 cores, most of it Ray's.
BENCH_ARGS_search := --all --seeds 10
# goodput: clean and preempted runs at checkpoints every 0.5, 1 and 2 (scaled) minutes: about 8 minutes.
BENCH_ARGS_goodput :=
# headline: spotsweep on the S3 path against Optuna at 1, 2, 4, 8 workers and Ray Tune, best against best.
BENCH_ARGS_headline := --trials 400 --repeat 3
# trainer: tokens/s and MFU of the tiny DeepSeek-MoE model, eager and compiled (size small on a CPU: a few
# minutes on 2 cores, most of it cold compilation; on a GPU: small, grid and wide, see bench/trainer_gpu.sh).
BENCH_ARGS_trainer :=
# scale: 100, 250, 500 and 1,000 slots (agents of 20) of 1-5 s trials, 20 per slot: about 13 minutes.
BENCH_ARGS_scale :=
# checkpoint: 256 MiB and 2 GiB checkpoints and 5,000 one-byte files, spotsweep against minio and boto3 on
# loopback and +20 ms, hashing, unchanged files, a preemption mid-upload: about 10 minutes.
BENCH_ARGS_checkpoint := --rounds 2
endif
BENCHMARKS := headline search goodput scale trainer checkpoint

bench: setup
	$(BIN)/pip install --quiet -e '.[bench]'
	$(foreach b,$(BENCHMARKS),$(BIN)/python bench/$(b).py $(BENCH_ARGS_$(b)) --json bench/results/$(b).json &&) true

# The wheel a node installs (`pip install 'dist/spotsweep-*.whl[worker]'`); the images build it too.
dist: setup
	rm -rf dist && $(BIN)/pip wheel --quiet --no-deps --wheel-dir dist .

# The control and CPU worker images with no registry (deploy/images.sh: the base image from
# Debian's packages when python:3.12-slim cannot be pulled, torch as the machine's pip finds it).
images:
	deploy/container-runtime.sh
	deploy/images.sh

# The images as a user runs them (tests/images/stack.py): the compose stack, with RabbitMQ,
# PostgreSQL and S3 built from Debian's packages and moto, drives examples/deepseek-small.yaml
# through an agent container stopped mid-trial; everything is torn down after. Needs a Docker
# daemon and Compose v2 (deploy/container-runtime.sh installs and starts them when missing, as root);
# about 5 minutes on 2 cores from scratch.
image-test:
	deploy/container-runtime.sh
	$(PYTHON) tests/images/stack.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
