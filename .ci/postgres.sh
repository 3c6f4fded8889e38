# Sourced by .ci/run (set -euo pipefail is active): starts a throwaway PostgreSQL server in a
# temporary directory and exports AUTOTRANSPOSE_TEST_PG_URL for the `postgres` tests, and
# CI_REQUIRE_POSTGRES=1 so that those tests fail, rather than skip, without a server.
#
# Works on a clean Debian machine: installs Debian's `postgresql` package when initdb/pg_ctl are
# missing, and runs the server as the `postgres` system user when we are root (PostgreSQL
# refuses to run as root). The server listens on 127.0.0.1 at a free port and on a socket in
# its own directory; it is stopped and its directory removed when the calling shell exits.
# If AUTOTRANSPOSE_TEST_PG_URL is already set (sourced twice, or a server provided by the CI
# machine) that server is used and nothing is started.

_at_pg_bindir() {
    local d best=""
    # initdb on the PATH may be a symlink (Debian puts none there): its real directory also
    # holds psql and pg_ctl.
    if command -v initdb >/dev/null 2>&1; then
        d="$(dirname "$(readlink -f "$(command -v initdb)")")"
        if [ -x "$d/pg_ctl" ] && [ -x "$d/psql" ]; then
            echo "$d"
            return 0
        fi
    fi
    for d in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V); do
        if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/psql" ]; then best="$d"; fi
    done
    [ -n "$best" ] && echo "$best"
}

_at_pg_start() {
    local bindir user port run_as=()
    if [ -n "${AUTOTRANSPOSE_TEST_PG_URL:-}" ]; then
        # Sourced twice, or a server given from outside: use it, and still insist on it.
        echo "postgres.sh: using the given AUTOTRANSPOSE_TEST_PG_URL" >&2
        export CI_REQUIRE_POSTGRES=1
        return 0
    fi
    bindir="$(_at_pg_bindir || true)"
    if [ -z "$bindir" ]; then
        echo "postgres.sh: installing Debian's postgresql package" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null
        apt-get install -y -qq --no-install-recommends postgresql >/dev/null
        bindir="$(_at_pg_bindir)"
    fi

    user="$(id -un)"
    if [ "$(id -u)" = 0 ]; then
        user=postgres
        if ! id -u "$user" >/dev/null 2>&1; then
            useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
        fi
        run_as=(runuser -u "$user" --)
    fi

    _AT_PG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/autotranspose-pg.XXXXXX")"
    export _AT_PG_DIR
    chmod 755 "$_AT_PG_DIR"
    mkdir -p "$_AT_PG_DIR/data" "$_AT_PG_DIR/sock"
    chown -R "$user" "$_AT_PG_DIR"
    _AT_PG_CTL="$bindir/pg_ctl"
    _AT_PG_RUN_AS="${run_as[*]:-}"
    trap '_at_pg_stop' EXIT
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

    "${run_as[@]}" "$bindir/initdb" -D "$_AT_PG_DIR/data" -U postgres -A trust -E UTF8 \
        --no-sync >"$_AT_PG_DIR/initdb.log" 2>&1 \
        || { cat "$_AT_PG_DIR/initdb.log" >&2; return 1; }
    # A scratch server: durability off (fsync) for speed, connections enough for the tests.
    "${run_as[@]}" "$bindir/pg_ctl" -D "$_AT_PG_DIR/data" -l "$_AT_PG_DIR/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $_AT_PG_DIR/sock -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=100" \
        start >/dev/null \
        || { cat "$_AT_PG_DIR/server.log" >&2; return 1; }

    "$bindir/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 -q \
        -c "CREATE DATABASE autotranspose_test" >/dev/null
    export AUTOTRANSPOSE_TEST_PG_URL="postgresql+psycopg://postgres@127.0.0.1:$port/autotranspose_test"
    export CI_REQUIRE_POSTGRES=1
    echo "postgres.sh: $("$bindir/pg_ctl" --version) at $AUTOTRANSPOSE_TEST_PG_URL" >&2
}

_at_pg_stop() {
    if [ -n "${_AT_PG_DIR:-}" ] && [ -d "$_AT_PG_DIR" ]; then
        if [ -f "$_AT_PG_DIR/data/postmaster.pid" ]; then
            # shellcheck disable=SC2086 # _AT_PG_RUN_AS is a command prefix, split on purpose
            ${_AT_PG_RUN_AS:-} "$_AT_PG_CTL" -D "$_AT_PG_DIR/data" -m fast -w stop >/dev/null 2>&1 || true
        fi
        rm -rf "$_AT_PG_DIR"
    fi
}

_at_pg_start
