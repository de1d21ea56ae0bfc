#!/bin/bash
# kiln-healthcheck [PATH]: exit 0 when kilnd's REST gateway answers GET PATH (default
# /v2/health/ready) with HTTP 200, 1 otherwise (refused, timed out, any other status).
# Pure bash (/dev/tcp) so the runtime image needs no curl. The Docker HEALTHCHECK runs it;
# tests/deploy runs it against a live kilnd.
#   KILN_HEALTH_HOST (default 127.0.0.1), KILN_HTTP_PORT (default 8000),
#   KILN_HEALTH_TIMEOUT seconds (default 2)
set -uo pipefail

path="${1:-/v2/health/ready}"
host="${KILN_HEALTH_HOST:-127.0.0.1}"
port="${KILN_HTTP_PORT:-8000}"
timeout_s="${KILN_HEALTH_TIMEOUT:-2}"

probe() {
  exec 3<>"/dev/tcp/${host}/${port}" || return 1
  printf 'GET %s HTTP/1.1\r\nHost: %s:%s\r\nConnection: close\r\n\r\n' \
    "$path" "$host" "$port" >&3 || return 1
  local status_line
  IFS= read -r status_line <&3 || return 1
  [[ "$status_line" =~ ^HTTP/1\.[01]\ 200[\ $'\r'] ]]
}

export -f probe
export path host port
# Docker defines only exit codes 0 (healthy) and 1 (unhealthy): map a timeout (124) to 1.
timeout "$timeout_s" bash -c probe 2>/dev/null || exit 1
