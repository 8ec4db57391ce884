# syntax=docker/dockerfile:1
# Four images from one file:
#   (default)        the three services and dlq-replay; the command picks the binary:
#                    docker run IMAGE ingest | consumer | config-api | dlq-replay
#   --target tools   the operators' and analysts' commands: experiment-results,
#                    analytics-access, analytics-erase, dlq-replay (no cargo needed)
#   --target front   the single base URL: a non-root nginx with the browser SDK and the
#                    routes of deploy/nginx (docker-compose's front, Kubernetes' front.yaml)
#   --target sdk     the same nginx serving only split.min.js and split-autotrack.min.js
# Dependencies are compiled in a layer of their own (cargo-chef), rebuilt only when
# Cargo.toml or Cargo.lock change.
ARG VERSION=0.1.0

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
    --bin ingest --bin consumer --bin config-api --bin dlq-replay \
    --bin experiment-results --bin analytics-access --bin analytics-erase

# The browser SDK's build, on Node 22 (LTS).
FROM node:22-bookworm-slim AS sdk-build
WORKDIR /sdk
COPY sdk/package.json sdk/package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY sdk/ ./
RUN node build.mjs
# The front's location of the SDK's immutable, versioned paths (sdk/releases/).
COPY deploy/nginx/sdk-versioned.conf.in ./
RUN sed -e 's|@SDK_RELEASES@|/usr/share/nginx/sdk/releases|g' \
        -e 's|@SDK_HEADERS@|/etc/nginx/sdk-headers.conf|g' \
        sdk-versioned.conf.in > dist/sdk-versioned.conf

# The browser SDK alone (`docker build --target sdk`), served by nginx as a non-root user
# (101; its pid and temporary files under /tmp), listening on 8080.
FROM nginxinc/nginx-unprivileged:1.27.5-alpine AS sdk
ARG VERSION
LABEL org.opencontainers.image.title="split-pipeline-sdk" \
      org.opencontainers.image.description="The split-testing browser SDK, served by nginx" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY deploy/nginx/sdk.conf /etc/nginx/conf.d/default.conf
COPY deploy/nginx/sdk-headers.conf /etc/nginx/sdk-headers.conf
COPY --from=sdk-build /sdk/dist/split.min.js /sdk/dist/split-autotrack.min.js /usr/share/nginx/sdk/
COPY sdk/releases/ /usr/share/nginx/sdk/releases/
EXPOSE 8080

# The front (`docker build --target front`): the SDK's nginx with the contract's routes,
# /api/v1/analytics to ingest:8081 and /api/v1/experiments to config-api:8082 (the names
# of docker-compose's services and of the Kubernetes Services alike).
FROM sdk AS front
LABEL org.opencontainers.image.title="split-pipeline-front" \
      org.opencontainers.image.description="The split-testing pipeline's single base URL: nginx, the API routes and the browser SDK"
COPY deploy/nginx/routes.conf /etc/nginx/routes.conf
COPY --from=sdk-build /sdk/dist/sdk-versioned.conf /etc/nginx/sdk-versioned.conf
COPY deploy/nginx/compose.conf /etc/nginx/conf.d/default.conf

# The operators' and analysts' commands (`docker build --target tools`), e.g.
#   docker compose run --rm tools experiment-results --help
FROM debian:bookworm-slim AS tools
ARG VERSION
LABEL org.opencontainers.image.title="split-pipeline-tools" \
      org.opencontainers.image.description="experiment-results, analytics-access, analytics-erase and dlq-replay" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin pipeline
COPY --from=builder /src/target/dist/experiment-results /src/target/dist/analytics-access \
     /src/target/dist/analytics-erase /src/target/dist/dlq-replay /usr/local/bin/
USER 10001:10001
CMD ["experiment-results", "--help"]

# The services' image, the default target: it stays the last stage.
FROM debian:bookworm-slim AS runtime
ARG VERSION
LABEL org.opencontainers.image.title="split-pipeline" \
      org.opencontainers.image.description="The split-testing pipeline's services: ingest, consumer, config-api (and dlq-replay)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
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
