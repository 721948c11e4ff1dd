# gangway's image: bin/launcher, bin/agent and start-agent.sh on a small
# Debian (make image), or added to your own training image:
#
#   make image BASE=nvcr.io/nvidia/pytorch:24.05-py3 IMAGE=train-gangway:latest
#   docker build --build-arg BASE=nvcr.io/nvidia/pytorch:24.05-py3 -t train-gangway .
#
# The binaries are static (CGO_ENABLED=0), so any Linux base of the same
# architecture takes them; the base needs /bin/sh and coreutils for
# start-agent.sh, and a login shell for root in /etc/passwd (the agent
# refuses users whose shell is missing or nologin).
ARG GO_IMAGE=golang:1.26-bookworm
ARG BASE=debian:bookworm-slim

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
	-o /out/ ./cmd/launcher ./cmd/agent

FROM ${BASE}
COPY --from=build /out/launcher /out/agent /usr/local/bin/
COPY examples/start-agent.sh /usr/local/bin/start-agent.sh
EXPOSE 22122
# Workers: the agent as PID 1 through start-agent.sh (examples/kubernetes).
# A launcher pod overrides the command with `launcher ...`.
ENTRYPOINT ["/usr/local/bin/start-agent.sh"]
