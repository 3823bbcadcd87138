# make setup : build $(VENV) with the pinned SGLang and the test extras (about 6 min, 10.5 GB, first time only)
# make test  : run the test suite (builds the environment first when it is missing)
# make demo  : run the main job on the bundled tiny models
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEPS_KEY := $(shell cat pyproject.toml | sha256sum | cut -c1-16)
DEPS_STAMP := $(VENV)/.deps-$(DEPS_KEY)
# The editable install records this checkout's path, so it is keyed on it too.
SRC_STAMP := $(VENV)/.src-$(shell echo "$(CURDIR)" | sha256sum | cut -c1-16)-$(DEPS_KEY)
PYTEST_ARGS ?=

.PHONY: setup test demo clean-venv

setup: $(SRC_STAMP)

$(DEPS_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade "pip>=23"
	$(PY) -m pip install -e '.[test]'
	rm -f $(VENV)/.deps-* $(VENV)/.src-*
	touch $@

$(SRC_STAMP): $(DEPS_STAMP)
	$(PY) -m pip install --no-deps --no-build-isolation -e .
	rm -f $(VENV)/.src-*
	touch $@

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

# The main job on the bundled fixture: what stock SGLang would feed the draft (inspect exits 1 for a
# mis-wired draft, which is the point of the demo), then three real servers and the results table.
demo: setup
	-$(VENV)/bin/sglang-eagle3-capture inspect fixtures/tiny/draft --target fixtures/tiny/target
	$(PY) benchmarks/bench_e2e.py --fixture fixtures/tiny $(DEMO_ARGS)

clean-venv:
	rm -rf $(VENV)
