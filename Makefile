# Targets call scripts/ so that CI (.ci/run) and developers run the same commands.

.DEFAULT_GOAL := help
.PHONY: help build serve test test-short lint bench fmt

GO ?= go

help: ## List the targets with their descriptions
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## Build the dwr binary into bin/dwr
	$(GO) build -o bin/dwr ./cmd/dwr

serve: ## Run dwr serve: the whole runtime in one process, NATS embedded
	$(GO) run ./cmd/dwr serve

test: ## Run the full test suite as CI does: vet, gofmt check, go test -race (scripts/test)
	bash scripts/test

test-short: ## Run scripts/test with -short (skips slow suites such as clusters)
	bash scripts/test -short

GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0

lint: ## Check gofmt, run go vet and golangci-lint (built from the module proxy on first use)
	@files="$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go'))"; \
	if [ -n "$$files" ]; then echo "gofmt needed on:"; echo "$$files"; exit 1; fi
	$(GO) vet ./...
	$(GOLANGCI_LINT) run ./...

bench: ## Run the benchmark (scripts/bench; pass flags with ARGS="...")
	bash scripts/bench $(ARGS)

fmt: ## Format all Go files with gofmt
	gofmt -w $$(git ls-files --cached --others --exclude-standard '*.go')
