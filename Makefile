# vllm-pooling-operator — `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(CURDIR)/$(VENV)/bin/python
CLI := $(CURDIR)/$(VENV)/bin/pooling-operator
LOCK := images/operator/requirements.lock
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml $(LOCK) | sha256sum | cut -c1-12)
PYTEST_ARGS ?=
CONTROLLERS_LOG = $(CURDIR)/.cluster/controllers-build.log

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}'

$(STAMP): pyproject.toml $(LOCK)
	@echo "==> Installing the project into $(VENV)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# uv resolves and installs in parallel from its own cache (~15 s warm here, pip took ~75 s); pip stays in
	@# the venv for the image build's `pip download`.
	@$(PY) -m pip install -q --disable-pip-version-check 'uv>=0.9'
	@# the image's lock as constraints: the tests run the versions the image installs
	@$(VENV)/bin/uv pip install -q --python $(PY) -e '.[test]' -c $(LOCK)
	@rm -f $(VENV)/.installed-*; touch $@

.PHONY: venv
venv: $(STAMP) ## Create .venv and install the project with its test tools

.PHONY: lock
lock: ## Pin the image's Python dependencies with hashes (images/operator/requirements.lock) from pyproject.toml
	@test -x $(VENV)/bin/uv || $(MAKE) --no-print-directory venv
	@# uv keeps the versions the lock holds (its preferences) unless pyproject.toml's ranges exclude them
	@head -4 $(LOCK) > $(LOCK).head && cp $(LOCK) $(LOCK).pins
	@$(VENV)/bin/uv pip compile pyproject.toml --universal --generate-hashes --python-version 3.11 --no-header --quiet -o $(LOCK).pins
	@cat $(LOCK).head $(LOCK).pins | awk 'NR <= 4 || !/^# The operator image|^# apart|^# pyproject|^# installs/' > $(LOCK) && rm -f $(LOCK).head $(LOCK).pins
	@echo "==> $(LOCK): $$(grep -c '==' $(LOCK)) pinned dependencies"

.PHONY: release
release: venv ## Build the operator image and chart at pyproject.toml's version; push both to REGISTRY=host/org (image by digest, chart as OCI)
	@test -n "$(REGISTRY)" || { echo "make release needs REGISTRY=host/org (e.g. ghcr.io/vllm-pooling-operator)"; exit 2; }
	@$(PY) -m tools.release --registry $(REGISTRY) $(if $(RELEASE_OUT),--out $(RELEASE_OUT))

.PHONY: demo
demo: venv ## Local control plane + operator + examples until Ready; REAL_VLLM=1 serves MiniLM with real vLLM
	@echo "==> pooling-operator validate examples/"
	@$(CLI) validate examples/
	@$(MAKE) --no-print-directory cluster-up
	@$(PY) -m e2e.demo up --run-dir $(CURDIR)/.cluster $(if $(filter 1 true yes,$(REAL_VLLM)),--real-vllm)

.PHONY: demo-down
demo-down: ## Stop the demo's operator and control plane
	-@$(PY) -m e2e.demo down --run-dir $(CURDIR)/.cluster
	@$(MAKE) --no-print-directory cluster-down

.PHONY: test
LEDGER := $(CURDIR)/.cluster/ledger
TIMED = VPO_LEDGER=$(LEDGER) $(PYTHON) -m e2e.ledger time
test: ## Run every test: lint, layer contract, CRD drift, unit, control-plane, operator and real_vllm tiers; ends with the ledger
	@VPO_LEDGER=$(LEDGER) $(PYTHON) -m e2e.ledger begin
	@$(TIMED) venv -- $(MAKE) --no-print-directory venv
	@$(TIMED) "lint, layers, CRD drift" -- $(MAKE) --no-print-directory lint crds-check
	@$(TIMED) "Prometheus (Debian package, when absent)" -- $(MAKE) --no-print-directory prometheus-or-skip
	@echo "==> control-plane binaries, the vLLM runtime and the operator image built in parallel (cached outside the clone), the unit tier beside them (needs none of them; its log $(UNIT_LOG) is printed when it ends)"
	@mkdir -p $(CLUSTER_DIR)
	@$(MAKE) --no-print-directory -j4 timed-cluster-build timed-vllm-runtime timed-image unit-tier || { VPO_LEDGER=$(LEDGER) $(PY) -m e2e.ledger report; exit 1; }
	@echo "==> third-party controllers (KEDA, Kueue): built in the background at low priority while the tiers run (log: $(CONTROLLERS_LOG)); the tests that need them wait"
	@(VPO_LEDGER=$(LEDGER) chrt --idle 0 nice -n 19 $(PYTHON) -m e2e.ledger time "KEDA + Kueue (background)" -- $(PY) -m e2e.kube.build --controllers > $(CONTROLLERS_LOG) 2>&1 &)
	@echo "==> GPU share sizing: the minimum per case, as validate and render show it (bench/gpu_share_sizing, no torch)"
	$(PY) bench/gpu_share_sizing/run.py --dry-run
	@echo "==> control-plane, operator and real_vllm tiers: the real_vllm tier beside the others, a control plane each (e2e/tiers.py)"
	@VPO_LEDGER=$(LEDGER) $(PY) -m e2e.tiers --log-dir $(CLUSTER_DIR) $(PYTEST_ARGS) || { VPO_LEDGER=$(LEDGER) $(PY) -m e2e.ledger report --json $(LEDGER)/ledger.json; exit 1; }
	@$(PY) -m e2e.kube.build --controllers --report
	@VPO_LEDGER=$(LEDGER) $(PY) -m e2e.ledger report --json $(LEDGER)/ledger.json

.PHONY: timed-cluster-build timed-vllm-runtime timed-image unit-tier
UNIT_LOG = $(CLUSTER_DIR)/unit.log
# The unit tier on both cores (pytest-xdist) beside the builds: its output into a log (the builds print progress
# meanwhile), printed whole when it ends.
unit-tier:
	@echo "==> unit tier started (pytest-xdist, both cores): $(UNIT_LOG)"
	@VPO_LEDGER=$(LEDGER) $(PY) -m pytest tests -n 2 $(PYTEST_ARGS) > $(UNIT_LOG) 2>&1; rc=$$?; \
	  echo "==> unit tier ended (exit $$rc):"; cat $(UNIT_LOG); exit $$rc
timed-cluster-build:
	@$(TIMED) "control plane (k8s, etcd, kwok, helm)" -- $(MAKE) --no-print-directory cluster-build
timed-vllm-runtime:
	@$(TIMED) "vLLM 0.32 CPU runtime and models" -- $(MAKE) --no-print-directory vllm-runtime-or-skip
timed-image:
	@$(TIMED) "operator image" -- $(MAKE) --no-print-directory image-or-skip

.PHONY: controllers
controllers: venv ## Build the third-party controllers the tests run (KEDA v2.20.2, Kueue v0.17.0; cached; 17 min cold here beside a cold control-plane build)
	$(PY) -m e2e.kube.build --controllers

.PHONY: image
image: venv ## Build the operator image from images/operator/Dockerfile with buildah on a debootstrap Debian 12 base (root; cached; ~2 min cold)
	@$(PY) -m e2e.image

.PHONY: image-or-skip
image-or-skip: venv
	@$(PY) -m e2e.image || echo "==> operator image not built (above): test_operator_image.py skips (fails under CI=true, or reports the build's error)"

.PHONY: prometheus prometheus-or-skip
prometheus: venv ## Install Debian's prometheus package (prometheus, promtool) when absent: apt-get, root (once, ~20 s)
	@$(PY) -m e2e.kube.prometheus

prometheus-or-skip: venv
	@$(PY) -m e2e.kube.prometheus || echo "==> Prometheus not installed (above): the tests that need it skip (and fail under CI=true)"

.PHONY: vllm-runtime-or-skip
vllm-runtime-or-skip: venv
	@$(PY) -m e2e.realvllm.runtime || echo "==> vLLM runtime not installed: the real_vllm tier will skip (and fail under CI=true)"

.PHONY: vllm-runtime
vllm-runtime: venv ## Install the CPU vLLM 0.32 runtime and its two models for the real_vllm tier (once: ~5-12 min, 7 GB)
	@$(PY) -m e2e.realvllm.runtime

.PHONY: unit
unit: venv ## The pure tests on both cores (no cluster, no processes; <= 30 s on a quiet machine); make test runs the integration ones too
	$(PY) -m pytest tests -n 2 -m "not integration and not thorough" $(PYTEST_ARGS)

.PHONY: lint
lint: venv ## ruff, the import-linter layer contract and mypy over operator/ (its settings in pyproject.toml)
	$(VENV)/bin/ruff check operator tests e2e bench argocd dashboards tools conftest.py
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

.PHONY: crds
crds: venv ## Regenerate crds/ from the pydantic models, the chart's copy of them and docs/api.md
	$(CLI) crds --output-dir crds
	cp crds/*.yaml charts/vllm-pooling-operator/files/crds/
	$(PY) -m pooling_operator.api.reference --output docs/api.md

.PHONY: api-docs
api-docs: venv ## Regenerate docs/api.md (every kind and field) from the models
	$(PY) -m pooling_operator.api.reference --output docs/api.md

.PHONY: crds-check
crds-check: venv ## Fail when crds/ differs from what the models generate
	@tmp=$$(mktemp -d) && $(CLI) crds --output-dir $$tmp && \
	  if diff -ru crds $$tmp >/dev/null; then rm -rf $$tmp; echo "crds/ is up to date"; \
	  else diff -ru crds $$tmp | head -40; rm -rf $$tmp; echo "crds/ is stale: run 'make crds'"; exit 1; fi

.PHONY: dashboards
dashboards: venv ## Regenerate the chart's Grafana dashboards (charts/.../files/dashboards/) from dashboards/generate.py
	$(PY) dashboards/generate.py

.PHONY: argocd
argocd: ## Regenerate argocd/ (every kind's health.lua and argocd-cm.yaml) from argocd/generate.py
	$(PY) argocd/generate.py

.PHONY: deploy
deploy: venv ## Re-render deploy/rbac.yaml from the Helm chart (the one source of the operator's RBAC)
	UPDATE_DEPLOY=1 $(PY) -m pytest -q e2e/tests/test_chart.py -k deploy_rbac

.PHONY: clean
clean: ## Remove the venv and caches (not the control-plane binary cache)
	rm -rf $(VENV) .pytest_cache .ruff_cache

-include e2e/cluster.mk
