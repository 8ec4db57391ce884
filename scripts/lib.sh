# Shared by scripts/up, scripts/down and scripts/test: installing what is missing and
# starting or stopping the servers, each recorded by a pid file under $RUN_DIR.
# shellcheck shell=bash

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$HOME/.cargo/bin:$PATH"
# Tansu is built with its in-memory (dynostore) and SQLite (libsql) storage, which its
# default features lack, into a folder of its own so that another tansu on PATH (say, one
# without those features) cannot stand in for it.
TANSU_VERSION=0.6.0
TANSU_FEATURES=dynostore,libsql
TANSU_ROOT=${TANSU_ROOT:-$HOME/.local/share/tansu-$TANSU_VERSION-${TANSU_FEATURES//,/-}}
TANSU="$TANSU_ROOT/bin/tansu"

# chdb-core: ClickHouse 26.x in-process (PyPI), to check the schema against a modern server.
CHDB_VERSION=26.9.0
CHDB_VENV=${CHDB_VENV:-$HOME/.local/share/chdb-core-$CHDB_VERSION}

# The statistics reference of the results tests (e2e/tests/stats/reference.py): scipy,
# statsmodels and GrowthBook's gbstats, pinned in e2e/tests/stats/requirements.txt.
STATS_REFERENCE_VERSION=gbstats-0.8.0-scipy-1.17.1-statsmodels-0.15.0
STATS_VENV=${STATS_VENV:-$HOME/.local/share/stats-reference-$STATS_REFERENCE_VERSION}

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

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

# is_running PIDFILE: the process recorded there is alive (a zombie, killed but not yet
# reaped, is not).
is_running() {
  local pid state
  # The file can go between the test and the read (nginx removes its own as it exits).
  pid=$(cat "$1" 2>/dev/null) || return 1
  state=$(ps -o stat= -p "$pid" 2>/dev/null) || return 1
  [ -n "$state" ] && [[ $state != Z* ]]
}

# stop_pidfile PIDFILE NAME: TERM, wait up to 20 s, then KILL.
stop_pidfile() {
  local pidfile=$1 name=$2 pid
  if is_running "$pidfile"; then
    pid=$(cat "$pidfile")
    log "Stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 200); do
      is_running "$pidfile" || break
      sleep 0.1
    done
    is_running "$pidfile" && kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$pidfile"
}

# wait_ready SECONDS PIDFILE LOGFILE DESCRIPTION COMMAND...: polls COMMAND every 0.2 s
# while the process of PIDFILE lives; on failure shows the end of LOGFILE.
wait_ready() {
  local seconds=$1 pidfile=$2 logfile=$3 what=$4
  shift 4
  local tries=$((seconds * 5))
  for _ in $(seq 1 "$tries"); do
    "$@" >/dev/null 2>&1 && return 0
    if ! is_running "$pidfile"; then
      tail -n 20 "$logfile" >&2 2>/dev/null
      die "$what exited during start-up (log: $logfile)"
    fi
    sleep 0.2
  done
  tail -n 20 "$logfile" >&2 2>/dev/null
  die "$what did not become ready within ${seconds}s (log: $logfile)"
}

http_ok() { curl -fsS --max-time 2 "$1"; }
tcp_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port_free() { ! tcp_open "$1"; }

# free_port_from PORT: PORT if nothing listens there, else the next free one above it.
free_port_from() {
  local port=$1
  while ! port_free "$port"; do port=$((port + 1)); done
  echo "$port"
}

# start_clickhouse DIR HTTP_PORT TCP_PORT [EXTRA_CONFIG]: a server of its own, data and
# logs in DIR; EXTRA_CONFIG (a file) is merged over the configuration from config.d/.
start_clickhouse() {
  local dir=$1 http_port=$2 tcp_port=$3 extra=${4:-}
  local pidfile="$dir/clickhouse.pid"
  if is_running "$pidfile"; then
    return 0
  fi
  port_free "$http_port" || die "port $http_port is taken by another program (ClickHouse HTTP)"
  port_free "$tcp_port" || die "port $tcp_port is taken by another program (ClickHouse native)"
  mkdir -p "$dir/data" "$dir/tmp" "$dir/user_files" "$dir/format_schemas" "$dir/log"
  sed -e "s|@DIR@|$dir|g" -e "s|@HTTP_PORT@|$http_port|g" -e "s|@TCP_PORT@|$tcp_port|g" \
    "$REPO/deploy/clickhouse/config.xml" > "$dir/config.xml"
  cp "$REPO/deploy/clickhouse/users.xml" "$dir/users.xml"
  # Left by releases whose analysts read through a user with every right (access_reader).
  rm -f "$dir/users.d/access_reader.xml" "$dir/config.d/analytics-access.xml"
  if [ -n "$extra" ]; then
    mkdir -p "$dir/config.d"
    cp "$extra" "$dir/config.d/extra.xml"
  fi
  chown -R clickhouse:clickhouse "$dir"
  log "Starting ClickHouse on 127.0.0.1:$http_port (data in $dir)"
  setpriv --reuid clickhouse --regid clickhouse --init-groups -- \
    "$(command -v clickhouse-server)" --config-file="$dir/config.xml" \
    >"$dir/log/stdout.log" 2>&1 &
  echo $! > "$pidfile"
  wait_ready 60 "$pidfile" "$dir/log/clickhouse-server.err.log" "ClickHouse on port $http_port" \
    http_ok "http://127.0.0.1:$http_port/ping"
}

# secret_sha256 FILE: the SHA-256 (hex) of the password in FILE, made first if missing (32
# random hex characters, readable by its owner only).
secret_sha256() {
  if [ ! -s "$1" ]; then
    mkdir -p "$(dirname "$1")"
    (umask 077 && head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$1")
  fi
  tr -d '\n' < "$1" | sha256sum | cut -d' ' -f1
}

# clickhouse_service_user DIR NAME SECRET_FILE: the ClickHouse user NAME of a service on
# the server of DIR (before start_clickhouse DIR, or it takes the server a few seconds to
# see it), its password kept in SECRET_FILE (made once: 32 random hex characters, readable
# by its owner only) and stored as its SHA-256 in DIR/users.d/NAME.xml. It reaches the
# server from loopback only, and only the analysts' database and `default` (where the
# migrations connect): 18.x has no grants, `allow_databases` is its narrowest rule.
# `default`, loopback only too (users.xml), stays the operators' user.
clickhouse_service_user() {
  local dir=$1 name=$2 secret=$3 hash
  hash=$(secret_sha256 "$secret")
  mkdir -p "$dir/users.d"
  printf '%s\n' '<?xml version="1.0"?>' \
    "<!-- scripts/lib.sh clickhouse_service_user: the password is in $secret -->" \
    "<yandex><users><$name>" \
    "  <password_sha256_hex>$hash</password_sha256_hex>" \
    '  <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>' \
    '  <profile>default</profile><quota>default</quota>' \
    '  <allow_databases><database>analytics</database><database>default</database></allow_databases>' \
    "</$name></users></yandex>" > "$dir/users.d/$name.xml.new"
  mv "$dir/users.d/$name.xml.new" "$dir/users.d/$name.xml"
  chown -R clickhouse:clickhouse "$dir/users.d" 2>/dev/null || true
}

# clickhouse_user_ok PORT NAME SECRET_FILE: that user logs in (a running server reads a new
# users.d file within seconds, not at once).
clickhouse_user_ok() {
  curl -fsS --max-time 2 -u "$2:$(cat "$3")" "http://127.0.0.1:$1/?query=SELECT%201"
}

# start_zookeeper DIR PORT: a standalone ZooKeeper (Debian's), data in DIR.
start_zookeeper() {
  local dir=$1 port=$2
  local pidfile="$dir/zookeeper.pid"
  if is_running "$pidfile"; then
    return 0
  fi
  port_free "$port" || die "port $port is taken by another program (ZooKeeper)"
  mkdir -p "$dir/data"
  printf '%s\n' "dataDir=$dir/data" clientPortAddress=127.0.0.1 "clientPort=$port" \
    tickTime=2000 admin.enableServer=false 4lw.commands.whitelist=srvr > "$dir/zoo.cfg"
  log "Starting ZooKeeper on 127.0.0.1:$port (data in $dir)"
  java -Xmx256m -cp /usr/share/java/zookeeper.jar \
    org.apache.zookeeper.server.ZooKeeperServerMain "$dir/zoo.cfg" >"$dir/zookeeper.log" 2>&1 &
  echo $! > "$pidfile"
  wait_ready 60 "$pidfile" "$dir/zookeeper.log" "ZooKeeper on port $port" zookeeper_ok "$port"
}

# zookeeper_ok PORT: serving requests (`ruok` says imok before the data is loaded).
zookeeper_ok() {
  local answer
  answer=$(exec 3<>"/dev/tcp/127.0.0.1/$1" && printf srvr >&3 && timeout 2 cat <&3) || return 1
  [[ $answer == *"Mode: standalone"* ]]
}

# The ClickHouse cluster `analytics`: two shards of two replicas, servers 1 and 2 the first
# shard, 3 and 4 the second. Server N listens on HTTP_BASE+N-1, TCP_BASE+N-1 and
# INTERSERVER_BASE+N-1, keeps its data in DIR/chN, and its replica name is chN.
CLUSTER_SERVERS=4

# start_clickhouse_cluster DIR ZOOKEEPER_PORT HTTP_BASE TCP_BASE INTERSERVER_BASE
start_clickhouse_cluster() {
  local dir=$1 zk_port=$2 http_base=$3 tcp_base=$4 interserver_base=$5 n
  start_zookeeper "$dir/zookeeper" "$zk_port"
  for n in $(seq 1 "$CLUSTER_SERVERS"); do
    mkdir -p "$dir/ch$n"
    sed -e "s|@SHARD@|0$(((n + 1) / 2))|; s|@REPLICA@|ch$n|" \
      -e "s|@INTERSERVER_PORT@|$((interserver_base + n - 1))|; s|@ZOOKEEPER_PORT@|$zk_port|" \
      -e "s|@TCP_PORT_1@|$tcp_base|; s|@TCP_PORT_2@|$((tcp_base + 1))|" \
      -e "s|@TCP_PORT_3@|$((tcp_base + 2))|; s|@TCP_PORT_4@|$((tcp_base + 3))|" \
      "$REPO/deploy/clickhouse/cluster.xml.in" > "$dir/ch$n.cluster.xml"
    start_clickhouse "$dir/ch$n" "$((http_base + n - 1))" "$((tcp_base + n - 1))" "$dir/ch$n.cluster.xml"
  done
}

# cluster_urls HTTP_BASE: the consumer's CLICKHOUSE_URL for that cluster, shards
# separated by `;`, the replicas of a shard by `,`.
cluster_urls() {
  local b=$1
  echo "http://127.0.0.1:$b,http://127.0.0.1:$((b + 1));http://127.0.0.1:$((b + 2)),http://127.0.0.1:$((b + 3))"
}

# stop_clickhouse_cluster DIR
stop_clickhouse_cluster() {
  local n
  for n in $(seq 1 "$CLUSTER_SERVERS"); do
    stop_pidfile "$1/ch$n/clickhouse.pid" "clickhouse ch$n"
  done
  stop_pidfile "$1/zookeeper/zookeeper.pid" zookeeper
}

# private_dir DIR: DIR made if missing, readable by its owner only (700), and every file
# already in it too (600): broker files and service logs hold visitors' events and ids.
# What is written there later gets its mode from the writer's umask (077 here).
private_dir() {
  mkdir -p "$1"
  chmod 700 "$1"
  find "$1" -type f -exec chmod go-rwx {} +
}

# start_tansu DIR PORT STORAGE [MAINTENANCE_INTERVAL]: a broker keeping its data in
# STORAGE, `memory` (nothing survives a restart) or `sqlite` (a database file in DIR). DIR,
# the database and the log are its owner's only (private_dir, umask 077). With SQLite,
# Tansu deletes the records older than a topic's retention.ms every MAINTENANCE_INTERVAL
# (Tansu's default: 10m; a humantime duration such as 2s); memory storage deletes nothing.
start_tansu() {
  local dir=$1 port=$2 storage=$3 interval=${4:-} engine
  local pidfile="$dir/tansu.pid"
  if is_running "$pidfile"; then
    return 0
  fi
  port_free "$port" || die "port $port is taken by another program (Kafka broker)"
  private_dir "$dir"
  case $storage in
    memory) engine=memory://tansu/ ;;
    sqlite) engine=sqlite://tansu.db ;; # relative to the broker's working folder
    *) die "unknown tansu storage $storage" ;;
  esac
  [ -z "$interval" ] || engine="$engine?maintenance_interval=$interval"
  log "Starting tansu on 127.0.0.1:$port ($storage storage)"
  (umask 077 && cd "$dir" && exec "$TANSU" broker --listener-url "tcp://127.0.0.1:$port" \
    --advertised-listener-url "tcp://127.0.0.1:$port" \
    --storage-engine "$engine" >"$dir/tansu.log" 2>&1) &
  echo $! > "$pidfile"
  chmod 600 "$pidfile"
  wait_ready 30 "$pidfile" "$dir/tansu.log" "tansu on port $port" tcp_open "$port"
}

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

# render_front DIR LISTEN INGEST CONFIG_API: the nginx front's configuration (with the
# SDK's versioned path, sdk-versioned.conf.in, after the routes).
render_front() {
  sed -e "/include @ROUTES@;/r $REPO/deploy/nginx/sdk-versioned.conf.in" "$REPO/deploy/nginx/local.conf.in" |
    sed -e "s|@NGINX_DIR@|$1|g" -e "s|@LISTEN@|$2|g" -e "s|@INGEST@|$3|g" \
    -e "s|@CONFIG_API@|$4|g" -e "s|@ROUTES@|$REPO/deploy/nginx/routes.conf|g" \
    -e "s|@SDK_DIST@|$REPO/sdk/dist|g" -e "s|@SDK_HEADERS@|$REPO/deploy/nginx/sdk-headers.conf|g"
}
