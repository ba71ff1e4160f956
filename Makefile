# wfm — Workload Fleet Manager. `make help` lists the targets.
SHELL := /bin/bash
GO    ?= go
BIN   := bin/wfm
# Fuzz time per fuzz target in `make fuzz` (CI uses the default).
FUZZTIME ?= 20s
# Section of docs/benchmarks.md that `make bench` writes (replaced when it exists), and more
# wfm-bench flags; WFM_BIN=<binary> measures another server build (docs/benchmarks.md).
BENCH_SECTION ?= Latest run
BENCH_ARGS ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: run
run: build ## Run the server on http://localhost:8080 (own PostgreSQL unless DATABASE_URL is set)
	exec ./$(BIN) $(ARGS)

# What `wfm version`, /healthz and wfm_build_info say (internal/buildinfo): the checkout's Git description
# and commit, "-modified" when it has uncommitted changes; `make build VERSION=1.4.0` chooses the version.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -modified)
BUILDINFO := github.com/wfm-dev/wfm/internal/buildinfo
LDFLAGS  := $(if $(VERSION),-X $(BUILDINFO).version=$(VERSION)) $(if $(REVISION:-modified=),-X $(BUILDINFO).revision=$(REVISION))

.PHONY: build
build: ## Build bin/wfm and bin/wfm-devicesim
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/wfm
	$(GO) build -o bin/wfm-devicesim ./cmd/wfm-devicesim

.PHONY: test
test: ## Run all tests (with the race detector) against a real PostgreSQL, the Go SDK's (sdk/, a module of its own) included
	$(GO) test -race -count=1 -timeout 10m ./...
	cd sdk && $(GO) test -race -count=1 ./...

.PHONY: demo
demo: build ## Run every command of README.md and docs/operator-guide.md against new servers and simulators; fails on any answer they do not show
	$(GO) run ./cmd/wfm-demo README.md docs/operator-guide.md

.PHONY: fuzz
# A target that fails with only "context deadline exceeded" and writes no failing input hit Go 1.26's
# fuzz coordinator race at the end of -fuzztime (golang/go#75804, fixed in Go 1.27): it runs once more.
# Any other failure, or that one twice, fails.
fuzz: ## Run every fuzz target for FUZZTIME each
	@set -eo pipefail; out=$$(mktemp); trap 'rm -f "$$out"' EXIT; \
	for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    for try in 1 2; do \
	      echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
	      if $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg 2>&1 | tee "$$out"; then break; fi; \
	      if [ $$try = 1 ] && grep -q 'context deadline exceeded' "$$out" && ! grep -qi 'failing input' "$$out"; then \
	        echo "fuzz: $$f ended on Go's -fuzztime race (golang/go#75804), no failing input: once more"; continue; \
	      fi; \
	      exit 1; \
	    done; \
	  done; \
	done

.PHONY: generate
generate: ## Regenerate api/ and sdk/ from openapi.yaml
	$(GO) tool oapi-codegen -config api/config.yaml openapi.yaml
	$(GO) tool oapi-codegen -config sdk/config.yaml openapi.yaml

.PHONY: generate-ts
generate-ts: ## Regenerate the TypeScript SDK's types (sdk/ts/src/schema.gen.ts) from openapi.yaml (needs npm)
	cd sdk/ts && { [ -d node_modules ] || npm ci --no-audit --no-fund; } && npm run -s generate

.PHONY: lint
lint: ## gofmt, go vet and staticcheck (the root module and sdk/)
	@out=$$(gofmt -l . | grep -v '^.data/' || true); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	@# sdk/ is a module of its own: its packages are not in the root's ./...; its go.mod stays tidy.
	cd sdk && $(GO) vet ./... && $$($(GO) -C .. tool -n staticcheck) ./... && $(GO) mod tidy -diff

.PHONY: bench
bench: ## Benchmark harness (about 9 min): every figure next to its baseline, written to docs/benchmarks.md
	$(GO) run ./cmd/wfm-bench -section '$(BENCH_SECTION)' $(BENCH_ARGS)

.PHONY: bench-go
bench-go: ## Run every Go benchmark of the tree
	$(GO) test -run '^$$' -bench . -benchmem ./...

.PHONY: clean
clean: ## Remove build output (keeps the local database in .data/)
	rm -rf bin

.PHONY: bench-http
bench-http: ## Device-poll throughput vs a bare net/http 304 under wrk (needs wrk), printed only
	$(GO) run ./cmd/wfm-bench -only poll -doc '' $(BENCH_ARGS)

.PHONY: bench-poll-tls
bench-poll-tls: ## Device-poll throughput over mutual TLS vs a bare Go TLS server answering 304 (tools/pollload), printed only
	$(GO) run ./cmd/wfm-bench -only poll-mtls -doc '' $(BENCH_ARGS)

.PHONY: bench-status
bench-status: ## Status-report ingestion rate vs pgbench single-row INSERTs (needs wrk), printed only
	$(GO) run ./cmd/wfm-bench -only status -doc '' $(BENCH_ARGS)

# helm for `make helm-check`: built once from the Go module proxy (about 2 minutes on 2 cores) into
# HELM_DIR, a cache outside the repository that CI may keep between runs (.ci/run sets it).
HELM_VERSION := v4.3.1
HELM_DIR ?= $(HOME)/.cache/wfm-tools/helm-$(HELM_VERSION)
HELM ?= $(HELM_DIR)/helm
HELM_VALUES := deploy/helm/wfm/ci/test-values.yaml

.PHONY: helm-check
helm-check: $(HELM) ## Helm chart: helm lint, helm template, strict decode and settings tests (deploy/helm)
	$(HELM) lint --strict deploy/helm/wfm -f $(HELM_VALUES)
	$(HELM) template wfm deploy/helm/wfm -f $(HELM_VALUES) > /dev/null
	cd deploy/helm/test && $(GO) vet ./... && HELM=$(abspath $(HELM)) $(GO) test -count=1 ./...

$(HELM):
	GOBIN=$(abspath $(HELM_DIR)) $(GO) install helm.sh/helm/v4/cmd/helm@$(HELM_VERSION)

.PHONY: migration-compat
migration-compat: ## The previous release's store tests on this tree's migrations (PREV=<ref>; docs/deploy.md)
	deploy/migration-compat.sh $(PREV)
