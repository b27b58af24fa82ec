# Everything runs from the project's own virtual environment (.venv), created on demand.
PYTHON ?= python3.11
VENV := .venv
BIN := $(abspath $(VENV)/bin)
STAMP := $(VENV)/.installed
KERNELS := kernels/compiled/target.json

# Spark's Python workers must start the venv's interpreter, not the system one.
export PYSPARK_PYTHON := $(BIN)/python
export PYSPARK_DRIVER_PYTHON := $(BIN)/python

DEMO_DIR := demo-logs
BENCH_DIR := bench-data

.PHONY: install libsnappy demo lint test test-fast test-deep dist bench-format bench-plan bench-rebuild bench-compact bench-many bench-floor bench-s3 bench-read clean

install: $(STAMP) $(KERNELS) libsnappy

# Google's snappy, which writes Kafka's snappy blocks (writers/snappy_library.py): Debian's libsnappy1v5,
# installed when missing and make runs as root with apt-get; else said (snappy batches then not byte-identical).
LIBSNAPPY_CHECK := $(PYTHON) -c "import ctypes; ctypes.CDLL('libsnappy.so.1').snappy_compress"
libsnappy:
	@$(LIBSNAPPY_CHECK) 2>/dev/null || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "libsnappy.so.1 missing: installing Debian's libsnappy1v5 (Google's snappy, for Kafka's snappy bytes)"; \
		{ apt-get install -y --no-install-recommends libsnappy1v5 >/dev/null 2>&1 || \
		  { apt-get update >/dev/null && apt-get install -y --no-install-recommends libsnappy1v5 >/dev/null; }; } && \
		$(LIBSNAPPY_CHECK) || echo "libsnappy1v5 did not install: snappy batches will not be byte-identical to Kafka's"; \
	else \
		echo "libsnappy.so.1 not found and not installable here (needs root and apt-get): snappy batches will not be" \
		     "byte-identical to Kafka's; install Google's snappy 1.1.9 or 1.1.10 (Debian: libsnappy1v5)"; \
	fi

$(STAMP): setup.py setup.cfg constraints.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

demo: $(STAMP) $(KERNELS) libsnappy
	rm -rf $(DEMO_DIR) $(DEMO_DIR)-plan.json $(DEMO_DIR)-plan.png $(DEMO_DIR)-report.json $(DEMO_DIR)-report.html
	$(BIN)/kcompact gen --out $(DEMO_DIR) --seed 7
	$(BIN)/kcompact dump $(DEMO_DIR)/orders-0 | head -n 12
	$(BIN)/kcompact verify $(DEMO_DIR)
	$(BIN)/kcompact plan $(DEMO_DIR) --now 1720001000000 --output $(DEMO_DIR)-plan.json --plot $(DEMO_DIR)-plan.png
	du -sh --apparent-size $(DEMO_DIR)
	$(BIN)/kcompact compact $(DEMO_DIR) --plan $(DEMO_DIR)-plan.json --now 1720001000000 --report $(DEMO_DIR)-report.json
	du -sh --apparent-size $(DEMO_DIR)
	$(BIN)/kcompact verify $(DEMO_DIR)

lint: $(STAMP)
	$(BIN)/ruff check .

# The whole suite, its test files spread over workers (pytest-xdist; a file stays on one worker, so
# its module fixtures run once). One worker more than cores: e2e tests also wait on JVM starts,
# servers and timeouts, which a third worker fills on 2 cores; a fourth only slows every test.
# Files go out in collection order: tests/e2e (the longest) first, the many short unit files last,
# filling the gaps. xdist's default order (the files with the most tests first) leaves to the end
# the e2e files of one or two long tests, where one may still run after the other workers finished.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
test: lint $(KERNELS) libsnappy
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The unit tier alone, its tests marked slow left out (tests/unit: no Spark, no whole command; under 2 minutes).
test-fast: lint $(KERNELS) libsnappy
	$(BIN)/pytest -q -m "not slow" tests/unit

# The property tests against the reference model of Kafka's cleaner, with many more generated
# log dirs than make test's fixed set (200 examples, deterministic too: 8 to 13 minutes on 2 cores).
test-deep: $(STAMP) $(KERNELS)
	KCOMPACT_REFERENCE_PROFILE=deep $(BIN)/pytest -q tests/e2e/test_reference_properties.py

# The Airflow example DAG (jobs/airflow_dag.py), run end to end by a real Airflow in a venv of its own:
# Airflow's install step under its constraints file, then this project under ours (Airflow kept at its pin).
AIRFLOW_VENV := .venv-airflow
AIRFLOW_BIN := $(abspath $(AIRFLOW_VENV)/bin)
AIRFLOW_STAMP := $(AIRFLOW_VENV)/.installed

.PHONY: test-airflow

$(AIRFLOW_STAMP): tests/airflow/requirements.txt tests/airflow/constraints-3.11.txt setup.py setup.cfg constraints.txt pyproject.toml
	$(PYTHON) -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_BIN)/pip install --quiet --upgrade pip
	$(AIRFLOW_BIN)/pip install --quiet -c tests/airflow/constraints-3.11.txt -r tests/airflow/requirements.txt
	$(AIRFLOW_BIN)/pip install --quiet -c constraints.txt -r tests/airflow/requirements.txt -e .
	touch $(AIRFLOW_STAMP)

test-airflow: $(AIRFLOW_STAMP)
	$(AIRFLOW_BIN)/python tests/airflow/e2e.py

# spark-submit's inputs: the wheel (for executors' Python environments), the --py-files archive of
# the same package, and the entry scripts. Built from a staged copy of the tracked files and the
# kernels, so the tree gets no build/; setup.py says which folders the wheel holds.
DIST ?= dist
ENTRY_SCRIPTS := jobs/plan.py jobs/compact.py jobs/retain.py jobs/run.py jobs/recover.py

# The compiled kernels shipped in the package, so that a fresh process compiles none
# (kernels/cache.py, jobs/kernels.py): built again when a module with kernels changed. Its run also
# leaves the JVM class-data archive of embedded Spark (jobs/cds.py), an optimisation: built or not, make goes on.
$(KERNELS): $(STAMP) jobs/kernels.py jobs/cds.py kernels/cache.py $(shell git ls-files '*.py' ':!tests' | xargs grep -l 'cache=True')
	$(BIN)/python -m kcompact.jobs.kernels

dist: $(STAMP) $(KERNELS)
	rm -rf $(DIST)
	mkdir -p $(DIST)
	stage=$$(mktemp -d) && trap 'rm -rf "$$stage"' EXIT && \
	git ls-files -z --cached --others --exclude-standard ':!tests' | xargs -0 cp --parents -t "$$stage" && \
	cp -r kernels/compiled "$$stage/kernels/" && \
	$(BIN)/pip wheel --quiet --no-deps --wheel-dir $(abspath $(DIST)) "$$stage" && \
	$(BIN)/python -m zipfile -e $(DIST)/kcompact-*.whl "$$stage/wheel" && \
	$(BIN)/python -m zipfile -c $(DIST)/kcompact-py.zip "$$stage/wheel/kcompact"
	cp $(ENTRY_SCRIPTS) $(DIST)/

bench-format: $(STAMP)
	$(BIN)/python -m tests.bench.format --dir $(BENCH_DIR)/format

bench-plan: $(STAMP) $(KERNELS)
	$(BIN)/python -m tests.bench.plan --dir $(BENCH_DIR)/plan

bench-rebuild: $(STAMP)
	$(BIN)/python -m tests.bench.rebuild

bench-compact: $(STAMP) $(KERNELS)
	$(BIN)/python -m tests.bench.compact --dir $(BENCH_DIR)/compact

# Log dirs of many small compacted partitions (2,000, 20,000, 100,000; e.g. SIZES=2000 for one).
SIZES ?= 2000,20000,100000
bench-many: $(STAMP) $(KERNELS)
	$(BIN)/python -m tests.bench.many --dir $(BENCH_DIR)/many --sizes $(SIZES)

# The file system's own cost of bench-many's 2,000-partition compaction: its mutations replayed by plain os calls.
bench-floor: $(STAMP) $(KERNELS)
	$(BIN)/python -m tests.bench.fs_floor --dir $(BENCH_DIR)/many --size 2000

bench-read: $(STAMP) $(KERNELS)
	$(BIN)/python -m tests.bench.read --dir $(BENCH_DIR)/read

bench-s3: $(STAMP) $(KERNELS)
	$(BIN)/python -m tests.bench.s3 --dir $(BENCH_DIR)/s3 --out $(BENCH_DIR)/s3/results.json

clean:
	rm -rf $(VENV) $(AIRFLOW_VENV) $(DEMO_DIR) $(BENCH_DIR) *.egg-info .pytest_cache .hypothesis
