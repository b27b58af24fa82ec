# Everything runs from the project's own virtual environment (.venv), created on demand.
PYTHON ?= python3.11
VENV := .venv
BIN := $(abspath $(VENV)/bin)
STAMP := $(VENV)/.installed

# Spark's Python workers must start the venv's interpreter, not the system one.
export PYSPARK_PYTHON := $(BIN)/python
export PYSPARK_DRIVER_PYTHON := $(BIN)/python

DEMO_DIR := demo-logs
BENCH_DIR := bench-data

.PHONY: install demo test bench-format bench-plan bench-rebuild bench-compact clean

install: $(STAMP)

$(STAMP): setup.cfg constraints.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	rm -rf $(DEMO_DIR) $(DEMO_DIR)-plan.json $(DEMO_DIR)-plan.png $(DEMO_DIR)-report.json
	$(BIN)/kcompact gen --out $(DEMO_DIR) --seed 7
	$(BIN)/kcompact dump $(DEMO_DIR)/orders-0 | head -n 12
	$(BIN)/kcompact verify $(DEMO_DIR)
	$(BIN)/kcompact plan $(DEMO_DIR) --now 1720001000000 --output $(DEMO_DIR)-plan.json --plot $(DEMO_DIR)-plan.png
	du -sh --apparent-size $(DEMO_DIR)
	$(BIN)/kcompact compact $(DEMO_DIR) --plan $(DEMO_DIR)-plan.json --now 1720001000000 --report $(DEMO_DIR)-report.json
	du -sh --apparent-size $(DEMO_DIR)
	$(BIN)/kcompact verify $(DEMO_DIR)

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/pytest -q

bench-format: $(STAMP)
	$(BIN)/python -m tests.bench.format --dir $(BENCH_DIR)/format

bench-plan: $(STAMP)
	$(BIN)/python -m tests.bench.plan --dir $(BENCH_DIR)/plan

bench-rebuild: $(STAMP)
	$(BIN)/python -m tests.bench.rebuild

bench-compact: $(STAMP)
	$(BIN)/python -m tests.bench.compact --dir $(BENCH_DIR)/compact

clean:
	rm -rf $(VENV) $(DEMO_DIR) $(BENCH_DIR) *.egg-info .pytest_cache .hypothesis
