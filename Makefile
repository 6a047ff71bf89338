# spotsweep: `make demo` runs the example sweep locally; `make test` runs the tests.
# Both set up .venv first (CPU torch pinned; no multi-GB CUDA download).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test lint unit integration chaos bench clean

$(BIN)/spotsweep: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

setup: $(BIN)/spotsweep

demo: setup
	$(BIN)/spotsweep run examples/deepseek-small.yaml --workers 2 --csv results.csv

test: setup lint
	$(BIN)/pytest

# mypy checks the installed layout (spotsweep.shared...), which the editable
# install only provides through an import hook mypy does not follow.
lint: setup
	$(BIN)/ruff check .
	rm -rf build/typecheck
	$(BIN)/pip install --quiet --no-deps --target build/typecheck .
	cd build/typecheck && ../../$(BIN)/mypy spotsweep --config-file ../../pyproject.toml --python-executable ../../$(BIN)/python

unit: setup
	$(BIN)/pytest -m 'not integration'

integration: setup
	$(BIN)/pytest -m integration

# A real sweep while agents are preempted and killed and the planner, the
# collector, RabbitMQ and PostgreSQL are killed and restarted (CI runs the short form).
chaos: setup
	$(BIN)/python tests/chaos/chaos.py --long

bench: setup
	$(BIN)/python bench/ingest.py --points 200000 --json bench/results/ingest.json
	$(BIN)/python bench/search.py --seeds 3 --json bench/results/search.json

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
