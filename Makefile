# dblock's everyday commands. `make help` lists them.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

GO ?= go
# Pinned so lint results don't change under us; 2026.2.x is the first release that knows Go 1.26.
STATICCHECK_VERSION ?= v0.8.2
# -mod=vendor (or mod) in a developer's GOFLAGS breaks `go run pkg@version`; drop it there.
TOOL_GOFLAGS := $(filter-out -mod=%,$(GOFLAGS))

TEST_FLAGS ?= -race -shuffle=on -count=1
TEST_TIMEOUT ?= 25m

# `docker compose` (v2 plugin) when present, else the standalone docker-compose.
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo 'docker compose' || \
	{ command -v docker-compose >/dev/null 2>&1 && echo docker-compose; })

# Scripts and tests look at CI; pass it through unchanged (and don't invent an empty one).
ifneq ($(origin CI),undefined)
export CI
endif

.PHONY: help
help: ## Show this help
	@awk 'BEGIN { FS = ":.*## " } /^[a-zA-Z0-9_\/-]+:.*## / { printf "  %-12s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

.PHONY: test
test: db/up ## Run all tests (race detector, shuffled) against PostgreSQL, MySQL/MariaDB and SQLite
	$(GO) test $(TEST_FLAGS) -timeout $(TEST_TIMEOUT) ./...

.PHONY: test/short
test/short: db/up ## Run the tests in -short mode, without the race detector
	$(GO) test -short -count=1 -timeout 10m ./...

.PHONY: db/up
db/up: ## Make sure the test databases answer (starts or installs them if needed)
	scripts/dbup.sh

.PHONY: lint
lint: ## gofmt, go vet and staticcheck
	@unformatted=$$(gofmt -l .); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(if $(findstring -mod=,$(GOFLAGS)),GOFLAGS='$(TOOL_GOFLAGS)' )$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	@if [ -f bench/go.mod ]; then \
		echo "cd bench && go vet ./..."; cd bench && $(GO) vet ./...; \
	fi

.PHONY: bench
bench: db/up ## Run the Go benchmarks, then the side-by-side comparison in bench/
	$(GO) test -run '^$$' -bench . -benchmem ./...
	@if [ -d bench ]; then \
		echo "cd bench && go run ."; cd bench && $(GO) run .; \
	fi

.PHONY: faults
faults: ## Run the fault-injection tests (own module: kill -9, killed connections, failover, poolers)
	@if [ -f internal/faults/go.mod ]; then \
		scripts/dbup.sh; \
		missing=""; \
		[ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null 2>&1 || missing="$$missing pgbouncer"; \
		[ -e /usr/lib/galera/libgalera_smm.so ] || missing="$$missing galera-4"; \
		command -v rsync >/dev/null 2>&1 || missing="$$missing rsync"; \
		if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "faults: installing$$missing (Debian packages) for the pooler and Galera tests"; \
			apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >/dev/null; \
		fi; \
		echo "cd internal/faults && $(GO) test -race -count=1 -timeout 20m ./..."; \
		cd internal/faults && $(GO) test -race -count=1 -timeout 20m ./...; \
	else \
		echo "faults: no fault tests yet (internal/faults does not exist)"; \
	fi

.PHONY: build
build: ## Build the CLI into bin/dblock
	$(GO) build -o bin/dblock ./cmd/dblock

.PHONY: migrate
migrate: ## Apply the migrations to DBLOCK_DSN (default: the CLI's ./dblock.db)
	@echo "migrating $${DBLOCK_DSN:-the default SQLite database ./dblock.db}"
	$(GO) run ./cmd/dblock migrate up

.PHONY: up
up: ## Start PostgreSQL and MySQL in Docker and wait until healthy
	@test -n "$(COMPOSE)" || { echo "up: needs 'docker compose' or docker-compose"; exit 1; }
	$(COMPOSE) up -d $(if $(findstring docker compose,$(COMPOSE)),--wait) postgres mysql
	@$(if $(findstring docker compose,$(COMPOSE)),,scripts/dbup.sh)

.PHONY: down
down: ## Stop and remove the Docker services and their data
	@test -n "$(COMPOSE)" || { echo "down: needs 'docker compose' or docker-compose"; exit 1; }
	$(COMPOSE) down -v

# -e: tidy also resolves the tests of our dependencies, and one of those (modernc.org/sqlite's
# test import of a github.com/google/pprof pseudo-version) is not served by the module proxy.
TIDY := $(GO) mod tidy -e

.PHONY: tidy
tidy: ## go mod tidy (and in bench/)
	$(TIDY)
	@if [ -f bench/go.mod ]; then echo "cd bench && $(TIDY)"; cd bench && $(TIDY); fi

.PHONY: verify
verify: ## Check that go.mod is tidy and docker-compose.yml is valid
	$(TIDY) -diff
	@if [ -f bench/go.mod ]; then echo "cd bench && $(TIDY) -diff"; cd bench && $(TIDY) -diff; fi
	@if [ -n "$(COMPOSE)" ]; then \
		echo "$(COMPOSE) config -q"; $(COMPOSE) config -q; \
	else \
		echo "verify: neither 'docker compose' nor docker-compose found; docker-compose.yml not checked"; \
	fi

.PHONY: clean
clean: ## Remove build output and coverage files
	rm -rf bin coverage.out coverage.html
