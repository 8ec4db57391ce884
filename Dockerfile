# syntax=docker/dockerfile:1
# One image for the three services (and dlq-replay); the command picks the binary:
#   docker run IMAGE ingest | consumer | config-api | dlq-replay
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
RUN cargo chef cook --release --recipe-path recipe.json
COPY . .
RUN cargo build --release --locked \
    --bin ingest --bin consumer --bin config-api --bin dlq-replay

FROM debian:bookworm-slim AS runtime
# curl: the container health checks.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin pipeline
COPY --from=builder /src/target/release/ingest /src/target/release/consumer \
     /src/target/release/config-api /src/target/release/dlq-replay /usr/local/bin/
COPY deploy/experiments.json /etc/pipeline/experiments.json
ENV EXPERIMENTS_SNAPSHOT=/etc/pipeline/experiments.json \
    INGEST_LISTEN=0.0.0.0:8081 \
    CONFIG_API_LISTEN=0.0.0.0:8082 \
    CONSUMER_LISTEN=0.0.0.0:8083
USER 10001:10001
EXPOSE 8081 8082 8083
CMD ["ingest"]
