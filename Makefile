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

# The second run puts every host of the end-to-end tests behind the one
# before it (the agent tree as a chain): the same tests through relays.
# Tests none of whose launches can use a tree skip it (e2e.NoTree: one
# host, which a tree reaches flat; local ranks; --transport ssh; mpirun);
# cmd/launcher's launches are local but for two tests, which run flat
# and through the tree in the first run.
TREE_E2E = ./cmd/launcher/e2e/ ./cmd/launcher/e2e/nettest/ \
	./cmd/launcher/e2e/hostnet/ ./cmd/launcher/e2e/pod/ ./cmd/launcher/e2e/firstnodes/ \
	./cmd/launcher/e2e/slurm/

test: deps build lint
	$(GO) test -race -timeout 25m ./...
	GANGWAY_TREE_WIDTH=1 $(GO) test -race -count=1 -timeout 25m $(TREE_E2E)

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
.PHONY: docs install-docs install-docs-only dist gpu-check
docs: build
	$(GO) run ./cmd/internal/gendocs -bin bin -out bin/share

install-docs: docs install-docs-only

install-docs-only:
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions \
		$(DESTDIR)$(PREFIX)/share/zsh/site-functions
	install -m 0644 bin/share/man/man1/launcher.1 bin/share/man/man1/agent.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 bin/share/bash-completion/completions/launcher $(DESTDIR)$(PREFIX)/share/bash-completion/completions/
	install -m 0644 bin/share/zsh/site-functions/_launcher $(DESTDIR)$(PREFIX)/share/zsh/site-functions/

install: install-docs

# Release tarballs: one per architecture in DIST_ARCHES, named
# gangway-$(VERSION)-linux-ARCH.tar.gz in DISTDIR with SHA256SUMS beside
# them. Each unpacks to a folder laid out like /usr/local (bin/, share/man,
# share/bash-completion, share/zsh, lib/systemd/system), so that
#   tar -xzf gangway-V-linux-amd64.tar.gz -C /usr/local --strip-components=1
# installs it. Entries are root-owned and dated at the commit, so two
# builds of one commit give the same bytes.
DIST_ARCHES ?= amd64 arm64
DISTDIR     ?= bin/dist
dist: docs
	@set -e; rm -rf $(DISTDIR); mkdir -p $(DISTDIR); \
	when=$$(git log -1 --format=%cI 2>/dev/null || date -u +%FT%TZ); \
	for a in $(DIST_ARCHES); do \
		n=gangway-$(VERSION)-linux-$$a; d=$(DISTDIR)/$$n; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$a $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $$d/bin/ ./cmd/launcher ./cmd/agent; \
		$(MAKE) --no-print-directory install-docs-only DESTDIR=$$d PREFIX=; \
		install -d $$d/lib/systemd/system; \
		install -m 0644 examples/systemd/gangway-agent.service $$d/lib/systemd/system/; \
		install -m 0644 README.md $$d/; \
		tar -C $(DISTDIR) --sort=name --owner=0 --group=0 --numeric-owner --mtime="$$when" \
			-czf $(DISTDIR)/$$n.tar.gz $$n; \
		rm -rf $$d; \
	done; \
	cd $(DISTDIR) && sha256sum *.tar.gz >SHA256SUMS && cat SHA256SUMS

# On a machine with NVIDIA GPUs and a torch with CUDA (PYTHON=...): host
# facts against nvidia-smi, one rank per GPU with its NUMA binding, NCCL
# across two agents, throughput against a bare run, stacks of a hung CUDA
# rank (examples/gpu-check.sh). Exits 2 where there is no GPU.
gpu-check: build
	./examples/gpu-check.sh
