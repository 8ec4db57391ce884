# syntax=docker/dockerfile:1
# One image for the three services (and dlq-replay); the command picks the binary:
#   docker run IMAGE ingest | consumer | config-api | dlq-replay
# and, with `--target sdk`, the browser SDK's image (nginx serving split.min.js and
# split-autotrack.min.js).
# Dependencies are compiled in a layer of their own (cargo-chef), rebuilt only when
# Cargo.toml or Cargo.lock change.

FROM rust:1.95.0-bookworm AS chef
RUN cargo install cargo-chef --locked --version 0.1.78
WORKDIR /src

FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS builder
COPY --from=planner /src/recipe.json recipe.json
RUN cargo chef cook --profile dist --recipe-path recipe.json
COPY . .
RUN cargo build --profile dist --locked \
    --bin ingest --bin consumer --bin config-api --bin dlq-replay

# The browser SDK, served by an nginx of its own (`docker build --target sdk`): the
# Kubernetes Ingress sends /sdk/v1/split.min.js and /sdk/v1/split-autotrack.min.js to it
# (deploy/k8s/sdk.yaml).
FROM node:20-bookworm-slim AS sdk-build
WORKDIR /sdk
COPY sdk/package.json sdk/package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY sdk/ ./
RUN node build.mjs

FROM nginx:1.27.5-alpine AS sdk
COPY deploy/nginx/sdk.conf /etc/nginx/conf.d/default.conf
COPY deploy/nginx/sdk-headers.conf /etc/nginx/sdk-headers.conf
COPY --from=sdk-build /sdk/dist/split.min.js /sdk/dist/split-autotrack.min.js /usr/share/nginx/sdk/
EXPOSE 8080

# The services' image, the default target: it stays the last stage.
FROM debian:bookworm-slim AS runtime
# curl: the container health checks.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin pipeline
COPY --from=builder /src/target/dist/ingest /src/target/dist/consumer \
     /src/target/dist/config-api /src/target/dist/dlq-replay /usr/local/bin/
COPY deploy/experiments.json /etc/pipeline/experiments.json
ENV EXPERIMENTS_SNAPSHOT=/etc/pipeline/experiments.json \
    INGEST_LISTEN=0.0.0.0:8081 \
    CONFIG_API_LISTEN=0.0.0.0:8082 \
    CONSUMER_LISTEN=0.0.0.0:8083
USER 10001:10001
EXPOSE 8081 8082 8083
CMD ["ingest"]
