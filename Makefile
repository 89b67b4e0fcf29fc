# Two commands do all setup on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum requirements.txt | cut -d' ' -f1)
PORT ?= 8501

.PHONY: run test test-fast bench sample clean

# (Re)create the virtual environment whenever requirements.txt changes.
$(STAMP): requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	@rm -f $(VENV)/.installed-*
	@touch $@

run: $(STAMP)
	$(PY) -m planner serve --port=$(PORT)

test: $(STAMP)
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not e2e"

bench: $(STAMP)
	$(PY) bench/ingest.py
	$(PY) bench/ingest_many.py
	$(PY) bench/fit.py
	$(PY) bench/memory_vs_vllm.py
	$(PY) bench/simulate.py
	$(PY) bench/prefix_cache.py
	$(PY) bench/fidelity.py
	$(PY) bench/calibrate_points.py
	@if [ -n "$$INFSIM_TRAINING" ]; then $(PY) bench/fidelity_v1.py; else echo "bench/fidelity_v1.py skipped: set INFSIM_TRAINING to a clone of https://github.com/inference-sim/training (its data is not bundled)"; fi
	@if [ -n "$$AICONFIGURATOR" ]; then $(PY) bench/gpu_efficiency.py; else echo "bench/gpu_efficiency.py skipped: set AICONFIGURATOR to a clone of https://github.com/ai-dynamo/aiconfigurator (its kernel tables are not bundled)"; fi
	$(PY) bench/recommend.py --ray

sample: $(STAMP)
	$(PY) traces/generate_sample.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
