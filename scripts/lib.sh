# Shared by the scripts: installing what is missing. Starting and stopping the servers is
# the `stack` binary's (stack-kit), which the scripts build and call.
# shellcheck shell=bash

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$HOME/.cargo/bin:$PATH"
# Tansu is built with its in-memory (dynostore) and SQLite (libsql) storage, which its
# default features lack, into a folder of its own so that another tansu on PATH (say, one
# without those features) cannot stand in for it.
TANSU_VERSION=0.6.0
TANSU_FEATURES=dynostore,libsql
TANSU_ROOT=${TANSU_ROOT:-$HOME/.local/share/tansu-$TANSU_VERSION-${TANSU_FEATURES//,/-}}
# Exported for the `stack` binary (stack-kit), which starts the brokers.
export TANSU="$TANSU_ROOT/bin/tansu"

# chdb-core: ClickHouse 26.x in-process (PyPI), to check the schema against a modern server.
CHDB_VERSION=26.9.0
CHDB_VENV=${CHDB_VENV:-$HOME/.local/share/chdb-core-$CHDB_VERSION}

# The statistics reference of the results tests (e2e/tests/stats/reference.py): scipy,
# statsmodels and GrowthBook's gbstats, pinned in e2e/tests/stats/requirements.txt.
STATS_REFERENCE_VERSION=gbstats-0.8.0-scipy-1.17.1-statsmodels-0.15.0
STATS_VENV=${STATS_VENV:-$HOME/.local/share/stats-reference-$STATS_REFERENCE_VERSION}

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# unset_empty NAME...: unsets each variable that is set but empty, so that an empty
# setting counts as unset (as `${VAR:-default}` has it) for a binary that reads it
# through clap, which refuses an empty number.
unset_empty() {
  local name
  for name in "$@"; do
    [ -n "${!name:-}" ] || unset "$name"
  done
}

# usage_of SCRIPT: the script's opening comment, its usage.
usage_of() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$1"; }

# arguments_none SCRIPT ARGS...: for a script that takes no argument. `-h` or `--help`
# prints its usage and exits 0 before anything is started or written; any other argument
# is refused (exit 2).
arguments_none() {
  local script=$1
  shift
  case ${1:-} in
    '') return 0 ;;
    -h | --help) usage_of "$script"; exit 0 ;;
    *) printf 'error: %s takes no argument, not %s (see --help)\n' "${script##*/}" "$1" >&2; exit 2 ;;
  esac
}

# Debian packages: ClickHouse 18.16 and nginx. Installed only when a command is missing.
ensure_packages() {
  local missing=()
  command -v clickhouse-server >/dev/null || missing+=(clickhouse-server clickhouse-client)
  command -v nginx >/dev/null || missing+=(nginx-light)
  command -v curl >/dev/null || missing+=(curl)
  command -v npm >/dev/null || missing+=(nodejs npm)
  # The SDK's browser tests drive Debian's Chromium.
  command -v chromium >/dev/null || missing+=(chromium)
  # docker-compose (v1) only to check the compose file statically: no engine runs here.
  command -v docker-compose >/dev/null || missing+=(docker-compose)
  # ZooKeeper coordinates the replicas of the ClickHouse cluster (tests, and
  # CLICKHOUSE_TOPOLOGY=cluster scripts/up).
  [ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
  python3 -m venv --help >/dev/null 2>&1 || missing+=(python3-venv)
  if [ ${#missing[@]} -gt 0 ]; then
    log "Installing ${missing[*]} (apt-get)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# Debian packages that scripts/bench alone needs (not scripts/test or CI): wrk, its second
# load tool. Installed only when missing.
ensure_bench_packages() {
  local missing=()
  command -v wrk >/dev/null || missing+=(wrk)
  if [ ${#missing[@]} -gt 0 ]; then
    log "Installing ${missing[*]} (apt-get)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# Tansu, the Kafka-protocol broker (about 13 minutes to build the first time).
ensure_tansu() {
  if [ ! -x "$TANSU" ]; then
    log "Installing tansu $TANSU_VERSION into $TANSU_ROOT (cargo install, about 15 minutes once)"
    cargo install tansu --locked --version "$TANSU_VERSION" --features "$TANSU_FEATURES" \
      --root "$TANSU_ROOT" --quiet
  fi
}

# A virtual environment with chdb-core (a 180 MB wheel, about 30 s once).
ensure_chdb() {
  if ! "$CHDB_VENV/bin/python" -c "import chdb" 2>/dev/null; then
    log "Installing chdb-core $CHDB_VERSION into $CHDB_VENV (pip)"
    python3 -m venv "$CHDB_VENV"
    "$CHDB_VENV/bin/pip" install --quiet --no-deps "chdb-core==$CHDB_VERSION"
  fi
}

# A virtual environment with the statistics reference's packages (about 40 s once).
ensure_stats_python() {
  if ! "$STATS_VENV/bin/python" -c "import gbstats, scipy, statsmodels" 2>/dev/null; then
    log "Installing the statistics reference ($STATS_REFERENCE_VERSION) into $STATS_VENV (pip)"
    python3 -m venv "$STATS_VENV"
    "$STATS_VENV/bin/pip" install --quiet --no-deps -r "$REPO/e2e/tests/stats/requirements.txt"
  fi
}

# The build cache, for scripts/test. A checkout without a target/ (a clean clone) gets one
# that links to cargo's target folder kept on this machine between runs, outside the
# repository, as CI systems keep theirs: the dependencies are compiled once, not on every
# clone (cargo rebuilds whatever changed; the workspace's crates, for a clone elsewhere).
# One run uses it at a time (its pid in CACHE.pid, not a lock that the servers it starts
# would inherit): a run that finds it taken, or SPLIT_BUILD_CACHE=off, builds in a
# target/ of its own. Past 40 GB it is emptied first. A checkout with a target/ keeps it.
use_build_cache() {
  local cache="${SPLIT_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/split-testing/target}"
  [ ! -e "$REPO/target" ] && [ ! -L "$REPO/target" ] && [ "$cache" != off ] || return 0
  if kill -0 "$(cat "$cache.pid" 2>/dev/null)" 2>/dev/null; then
    log "the build cache $cache is in use by another run: building in target/"
    return 0
  fi
  mkdir -p "$cache"
  BUILD_CACHE_PID="$cache.pid"
  echo $$ >"$BUILD_CACHE_PID"
  if [ "$(du -s --block-size=1G "$cache" | cut -f1)" -gt 40 ]; then
    log "the build cache $cache is over 40 GB: emptied"
    rm -rf "$cache" && mkdir -p "$cache"
  fi
  ln -s "$cache" "$REPO/target"
  log "target/ is the build cache $cache"
}

# "${STACK[@]}" COMMAND ARGS...: the `stack` binary (stack-kit/src/main.rs), which starts
# and stops the servers, each recorded by a pid file; build_stack builds it.
STACK=("$REPO/target/release/stack" --repo "$REPO")
build_stack() { (cd "$REPO" && cargo build --release --quiet --bin stack); }

# The browser SDK: npm packages (once per lockfile) and its build into sdk/dist (the
# scripts, both module formats and their types).
build_sdk() {
  local sdk="$REPO/sdk"
  if ! cmp -s "$sdk/package-lock.json" "$sdk/node_modules/.installed-lock.json"; then
    log "Installing the SDK's npm packages (npm ci)"
    (cd "$sdk" && npm ci --no-audit --no-fund --loglevel=error &&
      cp package-lock.json node_modules/.installed-lock.json)
  fi
  (cd "$sdk" && node build.mjs && node build.mjs types)
}
