# dryexec — see README.md. `make test` sets up a fresh Debian machine (idempotent)
# and runs every check CI runs.

GO            ?= go
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOBIN         := $(shell $(GO) env GOPATH)/bin
# The gvisor rung's runsc, pinned (rung/gvisor.RunscVersion must match); built
# from source (≈ 4 min on 2 CPUs) into $(GOBIN) only when it is not there, so
# that the gvisor tests run, and are required, in CI (they fail, not skip,
# under CI=true when runsc cannot run).
RUNSC         := gvisor.dev/gvisor/runsc@v0.0.0-20260905035102-160fafc42237
# Debian packages the tests and benchmarks use: bwrap is the benchmark baseline,
# setpriv (util-linux) runs the rootless tests, python3 runs exec_python and the
# escape corpus's syscall attempts, gcc rebuilds the command stub that `make
# lint` compares with the committed one, ip (iproute2) and curl are real clients
# inside trials; git, rsync, tar and nodejs are the real programs the
# cross-directory rename and link tests run in trials (test/escape). The rest
# are the fidelity harness's workloads (docs/fidelity.md): the vm rung boots
# QEMU (qemu-system-x86) with Debian's kernel (linux-image-amd64, whose
# compressed vmlinuz xz-utils unpacks once into the uncompressed vmlinux
# microvm needs); python3-venv and
# python3-wheel-whl let pip build a package offline; npm is checked as a
# command, because NodeSource's nodejs bundles it and conflicts with Debian's
# npm package.
APT_PACKAGES  := bubblewrap util-linux python3 iproute2 curl git rsync tar nodejs \
                 unzip zip make gcc sqlite3 python3-venv python3-wheel-whl \
                 qemu-system-x86 linux-image-amd64 xz-utils erofs-utils
# The capabilities (internal/testreq) a CI machine has once `make deps` ran as
# root: under CI=true, `make test` requires them (DRYEXEC_REQUIRE), so a test
# that needs one fails instead of skipping when it is missing, and a capability
# probe that misfires fails the run. "kernel" (overlayfs options, a Landlock
# ABI, a cgroup v1 hierarchy, ...) is left out: it depends on the host's kernel,
# not on anything `make deps` installs. DRYEXEC_REQUIRE=all requires it too.
CI_REQUIRE    := root,ns,rootless,netsim,gvisor,vm,python,tool,testhooks
ifeq ($(CI),true)
export DRYEXEC_REQUIRE ?= $(CI_REQUIRE)
endif
# Static build: dryexec re-executes itself as the guest on every trial, and a
# dynamically linked binary starts measurably slower.
export CGO_ENABLED ?= 0

# The OpenAPI linters `make lint` runs on server/openapi.json, pinned, from npm,
# installed once into OASLINT_DIR (outside the tree) and reused.
SPECTRAL      := @stoplight/spectral-cli@6.16.3
REDOCLY       := @redocly/cli@2.77.0
OASLINT_DIR   ?= $(HOME)/.cache/dryexec/oaslint

.PHONY: all build deps test test-vm lint openapi-lint unit fidelity examples bench soak stub clean

all: build

# bin/dryexec is the small front (internal/smallfront, on linux/amd64; the Go
# front elsewhere): a static program of a few kilobytes that hands `dryexec
# run -- CMD` to a running daemon (POST /v1/front) and execs the Go front
# beside it, dryexec-front (cmd/dryexec-front), for everything else. The Go
# front does the same through the daemon's POST /v1/trials and execs
# dryexec-engine beside it (cmd/dryexec, the whole CLI) for the rest, so
# that a trial through the daemon pays neither for the engine's package
# initialisation nor for a Go runtime's start (docs/architecture.md, "The
# front and the engine"). For a `run` without a daemon the Go front execs
# dryexec-local instead (cmd/dryexec-local: the ns rung and the store alone,
# and the policy without CEL, which the built-in policy does not use: the
# dryexec_nocel tag). dryexec-guest beside the engine is the guest it
# starts in every sandbox: a binary with the guest alone starts several times
# faster than the engine (guestexe.Executable). Without it, the engine runs
# itself as the guest. dryexec-netsim is, the same way, the confined process
# that serves a sandbox's network (netproc.Executable); dryexec-netsim-openapi
# serves it for a mock file naming OpenAPI documents, which only it links. The Go front is built without cgo: a static binary starts
# without the dynamic loader and libc's set-up (it resolves no users and no
# host names through NSS).
build:
	CGO_ENABLED=0 $(GO) build -o bin/dryexec-front ./cmd/dryexec-front
	if [ "$$($(GO) env GOOS)/$$($(GO) env GOARCH)" = linux/amd64 ]; then \
		$(GO) run ./cmd/dryexec-smallfront bin/dryexec; else cp bin/dryexec-front bin/dryexec; fi
	$(GO) build -o bin/dryexec-engine ./cmd/dryexec
	$(GO) build -tags dryexec_nocel -o bin/dryexec-local ./cmd/dryexec-local
	$(GO) build -o bin/dryexec-guest ./cmd/dryexec-guest
	$(GO) build -o bin/dryexec-netsim ./cmd/dryexec-netsim
	$(GO) build -o bin/dryexec-netsim-openapi ./cmd/dryexec-netsim-openapi

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	@test -x $(GOBIN)/staticcheck || $(GO) install $(STATICCHECK)
	@test -x $(GOBIN)/runsc || { echo "installing runsc ($(RUNSC))"; CGO_ENABLED=0 $(GO) install $(RUNSC); }

# lint also fails on an untidy go.mod and on a committed command stub that is
# not what guest/cmdstub/stub.c builds to (reproducibly: guest/cmdstub/gen.go;
# gcc comes from `make deps`; the stub is x86-64 code, checked there only).
lint: deps
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) mod tidy -diff
	if [ "$$(uname -m)" = x86_64 ]; then $(GO) run guest/cmdstub/gen.go -check; fi
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./...
	$(GO) vet -tags $(TEST_TAGS) ./...
	$(GOBIN)/staticcheck ./...
	$(GOBIN)/staticcheck -tags $(TEST_TAGS) ./...
	GOOS=darwin $(GOBIN)/staticcheck ./...
	# The local engine is built without CEL (make build): its packages, as built.
	$(GO) vet -tags dryexec_nocel ./cmd/dryexec-local ./internal/localrun ./internal/runflags
	$(GOBIN)/staticcheck -tags dryexec_nocel ./cmd/dryexec-local ./internal/localrun ./internal/runflags
	$(MAKE) openapi-lint

# Zero errors and zero warnings from two real linters: Spectral's oas ruleset
# and Redocly's recommended-strict (server/lint/*.yaml; docs/api.md, "The
# OpenAPI document"). The stamp names the pinned versions, so bumping one
# reinstalls. Redocly's telemetry and update check are off: lint reaches no
# network.
openapi-lint:
	@stamp="$(OASLINT_DIR)/.installed-$$(echo '$(SPECTRAL) $(REDOCLY)' | tr -c 'a-zA-Z0-9.\n' _)"; \
	if [ ! -e "$$stamp" ]; then \
		echo "installing $(SPECTRAL) $(REDOCLY) into $(OASLINT_DIR)"; \
		rm -rf "$(OASLINT_DIR)" && mkdir -p "$(OASLINT_DIR)" && \
		npm install --silent --no-audit --no-fund --prefix "$(OASLINT_DIR)" $(SPECTRAL) $(REDOCLY) && touch "$$stamp"; \
	fi
	$(OASLINT_DIR)/node_modules/.bin/spectral lint --fail-severity=warn -r server/lint/spectral.yaml server/openapi.json
	REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true \
		$(OASLINT_DIR)/node_modules/.bin/redocly lint --config server/lint/redocly.yaml server/openapi.json

# The race detector needs cgo. test/fidelity runs in `make fidelity` instead:
# what it tests runs in the dryexec binary it builds, which -race does not reach.
# The tests build with the test hooks (crash points, injected delays: package
# internal/testhooks), which `make build` leaves out of the shipped binaries.
TEST_TAGS     := dryexec_testhooks
unit:
	CGO_ENABLED=1 $(GO) test -race -tags $(TEST_TAGS) -count=1 -timeout 60m $$($(GO) list ./... | grep -v '/test/fidelity$$')

# The fidelity harness (docs/fidelity.md): realistic workloads natively and as
# trials in identical trees, as root and as uid 65534 (≈ 4 minutes on 2 CPUs);
# every difference not in its knownDiffering table fails it, and a missing
# tool fails it too. The table goes to bench/results/fidelity.md.
fidelity: deps
	DRYEXEC_REQUIRE=1 DRYEXEC_FIDELITY_TABLE=$(CURDIR)/bench/results/fidelity.md \
		$(GO) test -count=1 -timeout 30m ./test/fidelity

# The examples (examples/README.md; model_scorer.py runs its --demo), offline: the agent ones talk to a
# scripted model server on loopback even where a model is configured, and
# mocked APIs never leave the machine. Each runs in its own scratch directory
# against a private daemon and store, removed afterwards (≈ 15 s on 2 CPUs).
EXAMPLES      := quickstart native_agent type_safe_db_migration api_payment_exploration langchain_tool model_scorer
examples: build
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; mkdir -p "$$tmp/run"; \
	for ex in $(EXAMPLES); do \
		echo "== examples/$$ex.py"; \
		DRYEXEC_EXAMPLES_OFFLINE=1 DRYEXEC_BIN=$(CURDIR)/bin/dryexec DRYEXEC_HOME="$$tmp/home" \
		XDG_RUNTIME_DIR="$$tmp/run" TMPDIR="$$tmp" python3 examples/$$ex.py $$([ $$ex = model_scorer ] && echo --demo) || exit 1; \
	done

test: deps lint unit fidelity examples

# The vm rung's long tests, a VM boot per trial or session under TCG here:
# the same delta as ns field by field, the escape corpus, its sessions (a
# QEMU killed mid-exec) and the session conformance corpus on vm. `make
# unit` runs the vm rung's short ones (probe, acceptance, --net).
test-vm: deps
	DRYEXEC_REQUIRE=vm,ns DRYEXEC_TEST_VM=1 $(GO) test -count=1 -timeout 60m -run 'TestSameDeltaAsNS|TestEscapeVM|TestSession' ./rung/vm ./test/escape
	DRYEXEC_REQUIRE=vm,ns,tool DRYEXEC_TEST_VM=1 DRYEXEC_FIDELITY_TABLE=$(CURDIR)/bench/results/fidelity.md \
		$(GO) test -count=1 -timeout 90m -run '^TestFidelity$$/^vm$$' ./test/fidelity
	DRYEXEC_REQUIRE=vm DRYEXEC_TEST_VM=1 DRYEXEC_CONFORMANCE_RUNG=vm $(GO) test -count=1 -timeout 120m -run TestConformance ./conformance

# The whole benchmark suite (docs/benchmarks.md): a Markdown table and a PNG
# chart in bench/results/ (latest.md, latest.png and dated copies). BENCH_ROUNDS
# interleaved rounds per candidate: about 8 minutes on 2 CPUs for every group
# but fork, whose rounds (a 100,000-file tree copied and checkpointed) run 5
# times whatever BENCH_ROUNDS says and take longer; -only GROUP runs one.
BENCH_ROUNDS  ?= 20
bench: deps
	$(GO) run ./bench/cmd/trialbench -n $(BENCH_ROUNDS) -out bench/results

# The full soak (docs/reliability.md): 1,000 trials and 100 sessions of mixed
# work through a real daemon, then zero leaks and flat memory. A short version
# runs in `make unit`.
soak:
	DRYEXEC_SOAK=full $(GO) test -count=1 -v -timeout 60m -run '^TestSoak$$' ./test/soak

# The native command stub (guest/cmdstub/stub.c) is committed as generated Go,
# guest/cmdstub_amd64.go, so that building dryexec needs no C compiler; this
# regenerates it (needs gcc; the build is reproducible, and `make lint` checks
# that the committed file matches stub.c).
stub:
	$(GO) run guest/cmdstub/gen.go

clean:
	rm -rf bin
