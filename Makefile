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
test: db/up ## Run all tests (race detector, shuffled) against PostgreSQL, MySQL/MariaDB and SQLite, the lock suites again with the history enabled, and the gocron adapters' module
	$(GO) test $(TEST_FLAGS) -timeout $(TEST_TIMEOUT) ./...
	$(MAKE) test/history
	cd gocron && $(GO) test $(TEST_FLAGS) -timeout $(TEST_TIMEOUT) ./...

# The history's trigger sits on the table every acquisition writes: the
# modes' conformance suites and the shared locks run again with it enabled.
# The conformance suites run one package at a time (-p 1): their SQLite
# leases of a second or less were lost, renewed too late, when the three
# ran together with -race on two cores.
.PHONY: test/history
test/history: db/up ## Run the lock suites with the acquisition history enabled on every database
	DBLOCK_TEST_HISTORY=1 $(GO) test $(TEST_FLAGS) -p 1 -timeout $(TEST_TIMEOUT) -run 'TestConformance' ./optimistic ./fairqueue ./pessimistic
	DBLOCK_TEST_HISTORY=1 $(GO) test $(TEST_FLAGS) -timeout $(TEST_TIMEOUT) ./rwlock ./semaphore ./election

.PHONY: soak
soak: db/up ## Run the mixed-mode soak longer (DBLOCK_SOAK per dialect, default 2m; DBLOCK_SOAK_SEED replays)
	DBLOCK_SOAK=$${DBLOCK_SOAK:-2m} $(GO) test -race -count=1 -timeout 60m -run TestSoak -v ./internal/soak/

.PHONY: test/short
test/short: db/up ## Run the tests in -short mode, without the race detector
	$(GO) test -short -count=1 -timeout 10m ./...

.PHONY: db/up
db/up: ## Make sure the test databases answer (starts or installs them if needed)
	scripts/dbup.sh

.PHONY: lint
lint: lint/shell ## gofmt, go vet, staticcheck and shellcheck
	@unformatted=$$(gofmt -l .); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(if $(findstring -mod=,$(GOFLAGS)),GOFLAGS='$(TOOL_GOFLAGS)' )$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	@if [ -f bench/go.mod ]; then \
		echo "cd bench && go vet ./..."; cd bench && $(GO) vet ./...; \
	fi
	cd gocron && $(GO) vet ./... && $(if $(findstring -mod=,$(GOFLAGS)),GOFLAGS='$(TOOL_GOFLAGS)' )$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# The shell scripts CI and `make test` run. shellcheck comes from Debian's packages: installed
# when missing if we are root with apt-get; otherwise skipped with a notice, except under
# CI=true, where a shellcheck that cannot be had fails the lint.
SHELL_SCRIPTS := .ci/run $(wildcard scripts/*.sh)

.PHONY: lint/shell
lint/shell: ## shellcheck the shell scripts (installs Debian's shellcheck as root if missing)
	@if ! command -v shellcheck >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "lint: installing shellcheck from Debian's packages"; \
		log=$$(mktemp); \
		{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q shellcheck; } </dev/null >"$$log" 2>&1 || \
			tail -n 5 "$$log" >&2; \
		rm -f "$$log"; \
	fi; \
	if ! command -v shellcheck >/dev/null 2>&1; then \
		if [ -n "$${CI:-}" ] && [ "$${CI}" != false ]; then \
			echo "lint: shellcheck is not installed and could not be installed (CI requires it)" >&2; exit 1; \
		fi; \
		echo "lint: shellcheck not found; shell scripts not checked (apt-get install shellcheck)"; exit 0; \
	fi; \
	echo "shellcheck $(SHELL_SCRIPTS)"; shellcheck $(SHELL_SCRIPTS)

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
		echo "cd internal/faults && $(GO) test -race -count=1 -timeout 15m ./..."; \
		cd internal/faults && $(GO) test -race -count=1 -timeout 15m ./...; \
	else \
		echo "faults: no fault tests yet (internal/faults does not exist)"; \
	fi

.PHONY: api
api: ## Accept the current exported API into api/v1.txt (after a reviewed surface change)
	$(GO) test ./internal/apidump -run TestAPI -count=1 -update

.PHONY: build
build: ## Build the CLI into bin/dblock
	$(GO) build -o bin/dblock ./cmd/dblock

.PHONY: migrate
migrate: ## Apply the migrations to DBLOCK_DSN (default: the CLI's ./dblock.db)
	@# Never echo the DSN: it may carry a password. Its scheme says enough.
	@if [ -n "$${DBLOCK_DSN:-}" ]; then \
		scheme=$${DBLOCK_DSN%%:*}; case $$scheme in '' | *[!A-Za-z0-9+.-]*) scheme='(no scheme)' ;; esac; \
		echo "migrating the database named by DBLOCK_DSN, scheme $$scheme"; \
	else echo "migrating the default SQLite database ./dblock.db"; fi
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

# The modules of this repository: the library and those with their own go.mod.
MODULES := . $(patsubst %/go.mod,%,$(wildcard bench/go.mod internal/faults/go.mod gocron/go.mod))

# -e: tidy also resolves the tests of our dependencies, and one of those (modernc.org/sqlite's
# test import of a github.com/google/pprof pseudo-version) is not always served by the module
# proxy. When it is not, tidy wants that module's go.sum lines gone; verify ignores a
# difference made of those lines alone (with a notice) and fails on any other.
TIDY := $(GO) mod tidy -e
TIDY_TOLERATED := github.com/google/pprof

.PHONY: tidy
tidy: ## go mod tidy in every module (., bench/, internal/faults/, gocron/)
	@for m in $(MODULES); do echo "(cd $$m && $(TIDY))"; (cd "$$m" && $(TIDY)); done

.PHONY: verify
verify: ## Check that every go.mod is tidy and docker-compose.yml is valid
	@for m in $(MODULES); do \
		echo "(cd $$m && $(TIDY) -diff)"; \
		errf=$$(mktemp); \
		if d=$$(cd "$$m" && $(TIDY) -diff 2>"$$errf"); then rm -f "$$errf"; continue; fi; \
		changed=$$(printf '%s\n' "$$d" | grep -E '^[-+]' | grep -vE '^(\+\+\+|---) ' || true); \
		other=$$(printf '%s\n' "$$changed" | grep -vF '$(TIDY_TOLERATED) ' | grep -v '^$$' || true); \
		if [ -z "$$other" ] && [ -n "$$changed" ]; then \
			echo "verify: $$m: only the go.sum lines of $(TIDY_TOLERATED) differ (a test dependency of a dependency that the module proxy does not always serve); ignored"; \
			rm -f "$$errf"; continue; \
		fi; \
		printf '%s\n' "$$d"; tail -n 5 "$$errf" >&2; rm -f "$$errf"; \
		echo "verify: $$m: go.mod/go.sum are not tidy; run 'make tidy'" >&2; exit 1; \
	done
	@if [ -n "$(COMPOSE)" ]; then \
		echo "$(COMPOSE) config -q"; $(COMPOSE) config -q; \
	else \
		echo "verify: neither 'docker compose' nor docker-compose found; docker-compose.yml not checked"; \
	fi

.PHONY: clean
clean: ## Remove build output and coverage files
	rm -rf bin coverage.out coverage.html
