# The two commands for a fresh machine: `make demo` and `make test`. Both build .venv from the lock file first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.lock pyproject.toml | sha256sum | cut -c1-16)
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 1

LAMBDA_WHEELS := .cache/lambda-wheels/.downloaded-$(shell sha256sum requirements-lambda.lock | cut -c1-16)
# The Lambda runtime's Python (stacks/bundling.py LAMBDA_PYTHON; a test checks they agree).
LAMBDA_PYTHON := 3.13
LAMBDA_PLATFORM := --only-binary=:all: --platform manylinux2014_aarch64 --python-version $(LAMBDA_PYTHON) --implementation cp

# The console's browser libraries (htmx, uPlot): npm tarballs checked against tools/console-assets.json's integrity
# hashes, the files used copied into the package with their licenses (committed; a test checks them against the lock).
console-assets:  ## download htmx and uPlot again from the npm registry, checked against the lock
	$(PYTHON) tools/console_assets.py fetch

# Screenshots of every console page under docs/console/ (the README shows them): the browser tests, keeping theirs.
console-screenshots: $(STAMP)  ## docs/console/*.png from the console's browser tests
	SITEDISPATCH_CONSOLE_SCREENSHOTS=docs/console $(PY) -m pytest -q tests/integration/test_console.py -k every_page

.PHONY: console-assets console-screenshots demo test iam-report test-localstack localstack schemathesis unit integration acceptance infrastructure openapi checkov synth bench chaos sim fuzz lint format hooks lock lambda-wheels clean

# The lock is the whole closure, so pip installs it as written (--no-deps) and `pip check` proves nothing is missing:
# pip's resolver would otherwise look a dependency's extra (pytest-cov's `coverage[toml]`) up on the index and refuse
# the install in hash mode the day a newer release of it appears.
$(STAMP): requirements.lock pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements.lock
	$(VENV)/bin/pip check --quiet
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	rm -f $(VENV)/.installed-* && touch $(STAMP)

# The Lambda functions' wheels for their platform (Python $(LAMBDA_PYTHON), arm64), hash-checked, downloaded once: synthesis then
# bundles the asset from this directory with no network and no Docker.
$(LAMBDA_WHEELS): requirements-lambda.lock $(STAMP)
	rm -rf .cache/lambda-wheels && mkdir -p .cache/lambda-wheels
	$(VENV)/bin/pip download --quiet --disable-pip-version-check --require-hashes --no-deps $(LAMBDA_PLATFORM) \
		-d .cache/lambda-wheels -r requirements-lambda.lock
	touch $@

lambda-wheels: $(LAMBDA_WHEELS)

# A tool's own environment ($(1)) from its own hash-checked lock ($(2)), stamped with the lock's digest ($@).
define venv_from_lock
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(1)/bin/pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r $(2)
	$(1)/bin/pip check --quiet
	rm -f $(1)/.installed-* && touch $@
endef

# checkov (a third party's rule set over the synthesized template) in its own environment from its own lock: its
# dependencies would otherwise move the project's pins. tests/infrastructure runs it.
CHECKOV := .venv-checkov/.installed-$(shell sha256sum tools/checkov.lock | cut -c1-16)
$(CHECKOV): tools/checkov.lock
	$(call venv_from_lock,.venv-checkov,tools/checkov.lock)

checkov: $(CHECKOV)

# schemathesis (a third party's OpenAPI fuzzer) in its own environment from its own lock, as checkov's: its pins are
# not ours. tests/acceptance/test_api_fuzzer.py runs it in `make test`; `make fuzz` runs a longer campaign.
SCHEMATHESIS := .venv-schemathesis/.installed-$(shell sha256sum tools/schemathesis.lock | cut -c1-16)
$(SCHEMATHESIS): tools/schemathesis.lock
	$(call venv_from_lock,.venv-schemathesis,tools/schemathesis.lock)

schemathesis: $(SCHEMATHESIS)

# LocalStack (SQS and S3), the second emulator, in its own environment from its own lock (its pins clash with ours;
# ~500 MB, ~50 s the first time). `make test-localstack` runs the integration suite and one end-to-end run of the
# local runtime with the queues and the bucket on it, the tables on moto (its DynamoDB needs a Java download).
LOCALSTACK := .venv-localstack/.installed-$(shell sha256sum tools/localstack.lock | cut -c1-16)
$(LOCALSTACK): tools/localstack.lock
	$(call venv_from_lock,.venv-localstack,tools/localstack.lock)

localstack: $(LOCALSTACK)

test-localstack: $(STAMP) $(LOCALSTACK)  ## the integration suite and an end-to-end run with SQS and S3 on LocalStack
	SITEDISPATCH_LOCALSTACK_PYTHON=.venv-localstack/bin/python $(PY) -m pytest -q --durations=5 -m "not moto_only and not long" \
		tests/integration tests/acceptance/test_second_emulator.py

demo: $(STAMP)  ## the local runtime, ten sites provisioned at once, compared with the cron round-robin
	$(VENV)/bin/sitedispatch demo

# Branch coverage of the core, measured in the pytest processes (the local runtime's child processes are not) and
# printed; below the floor in pyproject.toml ([tool.coverage.report] fail_under) the run fails.
COVERAGE := --cov --cov-report=term
# The in-process tests (unit, integration, infrastructure) on two workers (pytest-xdist; a file's tests on one
# worker, in order: the store contract checks at its end that every port method ran), then the acceptance tests one
# at a time: they start fleets of processes and measure latencies, which two at a time on two cores would skew.
IN_PROCESS_TESTS := tests/unit tests/integration tests/infrastructure

# Every test's cloud runs its functions under their roles with IAM enforced (the acceptance tests' processes and
# the in-process ones), and leaves the calls IAM judged in IAM_CALLS; the IAM report reads them against the
# template's grants and fails the run on a denied call; an unexplained unused grant is printed (`make iam-report`
# fails on it: which rare paths a run takes can vary, local/iam_report.py).
IAM_CALLS := .sitedispatch/iam-calls
IAM_REPORT := .sitedispatch/iam-report.md
# The function timeouts the tests' local clouds use: their templates are synthesized together, once (local/template.py)
LOCAL_TIMEOUTS := 5,10,20,30,120
test test-localstack: export SITEDISPATCH_LOCAL_TIMEOUTS := $(LOCAL_TIMEOUTS)

test: $(STAMP) $(LAMBDA_WHEELS) $(CHECKOV) $(SCHEMATHESIS) lint  ## the whole suite: unit, integration (moto), acceptance (real processes), the IAM report
	rm -rf $(IAM_CALLS)
	SITEDISPATCH_IAM_CALLS_DIR=$(IAM_CALLS) $(PY) -m pytest -q -n 2 --dist loadfile --durations=10 -m "not long" --cov --cov-report= --cov-fail-under=0 $(IN_PROCESS_TESTS)
	SITEDISPATCH_IAM_CALLS_DIR=$(IAM_CALLS) $(PY) -m pytest -q --durations=10 -m "not long" $(COVERAGE) --cov-append tests/acceptance
	$(PY) -m sitedispatch.local.iam_report $(IAM_CALLS) --out $(IAM_REPORT)

iam-report: $(STAMP)  ## least privilege: what the last make test's functions called against what their roles grant (strict)
	$(PY) -m sitedispatch.local.iam_report $(IAM_CALLS) --out $(IAM_REPORT) --strict
	@echo "the whole report: $(IAM_REPORT)"

unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

integration: $(STAMP)
	$(PY) -m pytest -q tests/integration

acceptance: $(STAMP) $(SCHEMATHESIS)
	$(PY) -m pytest -q tests/acceptance

infrastructure: $(STAMP) $(LAMBDA_WHEELS) $(CHECKOV)
	$(PY) -m pytest -q tests/infrastructure

openapi: $(STAMP)  ## regenerate openapi.json and events.schema.json from the API's models (make test compares them)
	$(PY) -m sitedispatch.api.openapi > openapi.json
	$(PY) -m sitedispatch.api.openapi events > events.schema.json

synth: $(STAMP) $(LAMBDA_WHEELS)  ## cdk.out/ from app.py: no AWS credentials, no network, no Docker
	$(PY) app.py

bench: $(STAMP) $(LAMBDA_WHEELS)  ## requests/cost, cold start, fleet model + validation, throughput vs raw moto, publication and import memory
	$(PY) -m bench.run

PROFILE ?= full
chaos: $(STAMP)  ## the `long` tests, then seeded fault-injection runs (SEEDS=N, FIRST=K, or SEED=S to replay one alone; PROFILE=short|full; JOBS=J)
	$(if $(SEED),,$(PY) -m pytest -q -m long --durations=10)
	$(PY) -m chaos.run --profile $(PROFILE) --jobs $(or $(JOBS),1) \
		$(if $(SEED),--seed $(SEED),--seeds $(or $(SEEDS),20) --first $(or $(FIRST),1))

sim: $(STAMP)  ## the deterministic simulation: seeds 1..SEEDS (default 10000) on JOBS processes, or SEED=S to replay one with its trace
	$(PY) -m sim.run $(if $(SEED),--seed $(SEED),--seeds $(or $(SEEDS),10000) --jobs $(or $(JOBS),2) \
		--out sim/results/sim-$(or $(SEEDS),10000).json)

FUZZ_S ?= 900
fuzz: $(STAMP) $(SCHEMATHESIS)  ## property tests with fresh random examples (10x), then schemathesis against the local API for FUZZ_S s
	HYPOTHESIS_PROFILE=explore $(PY) -m pytest -q --timeout 1800 tests/unit/test_fuzz_inputs.py \
		tests/unit/test_stateful_delivery.py tests/unit/test_building_blocks.py tests/integration/test_fuzz_cli.py
	$(PY) -m tests.acceptance.api_fuzzer --max-time $(FUZZ_S) --max-examples 200

CODE := sitedispatch stacks tests bench chaos sim app.py

lint: $(STAMP)  ## format check, ruff (with the complexity gate) and mypy over everything
	$(VENV)/bin/ruff format --check $(CODE)
	$(VENV)/bin/ruff check $(CODE)
	$(VENV)/bin/mypy

format: $(STAMP)  ## ruff format, then the fixes ruff can make itself (imports, upgrades)
	$(VENV)/bin/ruff format $(CODE)
	$(VENV)/bin/ruff check --fix $(CODE)

hooks: $(STAMP)  ## install the git pre-commit hooks of .pre-commit-config.yaml (ruff, mypy, unit tests)
	$(VENV)/bin/pre-commit install

lock: $(STAMP)  ## re-resolve requirements.lock from pyproject.toml (needs the package index)
	$(VENV)/bin/pip install --quiet uv
	$(VENV)/bin/uv pip compile pyproject.toml --extra local --extra cdk --extra bench --extra dev --generate-hashes \
		--python-version 3.11 -o requirements.lock
	$(VENV)/bin/uv pip compile requirements-lambda.in --generate-hashes --python-version $(LAMBDA_PYTHON) \
		--python-platform aarch64-manylinux_2_28 --no-emit-package botocore --no-emit-package urllib3 \
		--no-emit-package python-dateutil --no-emit-package six -o requirements-lambda.lock

clean:
	rm -rf $(VENV) .venv-checkov .venv-localstack .venv-schemathesis .sitedispatch .pytest_cache .mypy_cache .ruff_cache cdk.out .cache
