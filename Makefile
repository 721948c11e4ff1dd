# gangway: `make run` shows a multi-host job on this machine; `make test`
# runs every test (installing the Debian packages the tests need first).

GO      ?= go
PREFIX  ?= /usr/local
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo devel)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# Packages the tests use: real OpenSSH on both ends, MPICH and Open MPI
# programs, PyTorch (CPU, gloo), iproute2 for network-namespace hosts, and
# Slurm 22.05 with munge for a real cluster on those hosts (cmd/internal/slurmbed),
# gdb and python3-dbg (py-bt, and the interpreter's debug symbols) for the
# stacks of hung ranks, groff to render the man pages.
TEST_PKGS := openssh-client openssh-server mpich libmpich-dev openmpi-bin libopenmpi-dev \
             python3-torch iproute2 procps gcc slurmctld slurmd slurm-client munge \
             gdb python3-dbg groff-base
BENCH_PKGS := pdsh

.PHONY: all build run test test-short deps bench bench-quick lint install image clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/ ./cmd/launcher ./cmd/agent
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/ ./examples/synthetic

# The main job on the embedded default: two agents on loopback with
# throwaway keys, an 8-rank example across them, the throughput summary.
run: build
	./examples/local-cluster.sh

deps:
	@./.ci/install-packages.sh $(TEST_PKGS)

test: deps build lint
	$(GO) test -race -timeout 25m ./...

test-short: build
	$(GO) test -race -short ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./agent/facts ./nccl ./hostfile ./bench ./agent/wire
	@./.ci/check-imports.sh

bench: build
	@./.ci/install-packages.sh $(TEST_PKGS) $(BENCH_PKGS)
	$(GO) run ./cmd/gwbench -out bench/results

bench-quick: build
	@./.ci/install-packages.sh $(TEST_PKGS) $(BENCH_PKGS)
	$(GO) run ./cmd/gwbench -quick -out bench/results

# The binaries, and the agent's systemd unit with ExecStart in $(PREFIX)/bin
# ($(PREFIX)/lib/systemd/system is on systemd's search path for /usr and
# /usr/local; SYSTEMDDIR overrides it).
SYSTEMDDIR ?= $(PREFIX)/lib/systemd/system
install: build
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(SYSTEMDDIR)
	install -m 0755 bin/launcher bin/agent $(DESTDIR)$(PREFIX)/bin/
	sed 's|/usr/local/bin/agent|$(PREFIX)/bin/agent|' examples/systemd/gangway-agent.service >$(DESTDIR)$(SYSTEMDDIR)/gangway-agent.service
	chmod 0644 $(DESTDIR)$(SYSTEMDDIR)/gangway-agent.service

# The container image (Dockerfile): BASE=nvcr.io/nvidia/pytorch:<tag> adds
# gangway to a training image. Skipped, with exit 0, where neither docker
# nor podman answers.
IMAGE ?= gangway:$(VERSION)
BASE  ?= debian:bookworm-slim
image:
	@engine=; for e in docker podman; do \
		if command -v $$e >/dev/null 2>&1 && $$e info >/dev/null 2>&1; then engine=$$e; break; fi; \
	done; \
	if [ -z "$$engine" ]; then \
		echo "make image: skipped: no docker or podman that answers here (build elsewhere: docker build --build-arg BASE=$(BASE) -t $(IMAGE) .)"; \
		exit 0; \
	fi; \
	echo "$$engine build --build-arg BASE=$(BASE) --build-arg VERSION=$(VERSION) -t $(IMAGE) ."; \
	$$engine build --build-arg BASE=$(BASE) --build-arg VERSION=$(VERSION) -t $(IMAGE) .

clean:
	rm -rf bin

# Man pages and shell completions, written from the commands' own help by
# cmd/internal/gendocs; `make install` installs them beside the binaries.
.PHONY: docs install-docs
docs: build
	$(GO) run ./cmd/internal/gendocs -bin bin -out bin/share

install-docs: docs
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions \
		$(DESTDIR)$(PREFIX)/share/zsh/site-functions
	install -m 0644 bin/share/man/man1/launcher.1 bin/share/man/man1/agent.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 bin/share/bash-completion/completions/launcher $(DESTDIR)$(PREFIX)/share/bash-completion/completions/
	install -m 0644 bin/share/zsh/site-functions/_launcher $(DESTDIR)$(PREFIX)/share/zsh/site-functions/

install: install-docs
