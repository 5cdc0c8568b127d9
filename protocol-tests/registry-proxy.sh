#!/usr/bin/env bash
# Starts or stops nginx in front of a test schema registry (protocol-tests/schema-registry.sh):
# HTTP basic authentication on one port, and the same over TLS on the next, for the registry
# client's authentication and TLS tests. nginx-light from Debian; everything under PROXY_DIR.
#
#   protocol-tests/registry-proxy.sh start   # prints the HTTP base URL once nginx answers
#   protocol-tests/registry-proxy.sh stop
#
# Environment:
#   REGISTRY_URL  the registry's base URL to proxy to (required for start), e.g.
#                 http://127.0.0.1:19740/apis/ccompat/v7: the proxy serves the same path
#   PROXY_PORT    HTTP with basic authentication (default 19750); PROXY_PORT+1: HTTPS
#   PROXY_DIR     state directory (default <repo>/target/registry-proxy-$PROXY_PORT)
#
# Users (htpasswd, apr1): alice / alice-secret. The proxy drops the Authorization header before
# the registry, which runs without authentication. Certificates (PEM, made with openssl once per
# directory): ca.pem (the CA), server.pem / server.key (SAN IP:127.0.0.1 and DNS:localhost).
# `start` also writes $PROXY_DIR/proxy.env: HTTP_URL, HTTPS_URL, CA_PEM, USER, PASSWORD.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
PROXY_PORT=${PROXY_PORT:-19750}
PROXY_DIR=${PROXY_DIR:-$repo/target/registry-proxy-$PROXY_PORT}
TLS_PORT=$((PROXY_PORT + 1))

log() { printf 'registry-proxy: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

nginx_bin() {
  command -v nginx 2>/dev/null || { [ -x /usr/sbin/nginx ] && echo /usr/sbin/nginx; } ||
    die "nginx not found: apt-get install nginx-light"
}

certificates() {
  [ -f "$PROXY_DIR/server.pem" ] && return 0
  command -v openssl >/dev/null || die "openssl not found"
  local d=$PROXY_DIR
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=onceflow-test-registry-ca" \
    -keyout "$d/ca.key" -out "$d/ca.pem" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
    -keyout "$d/server.key" -out "$d/server.csr" >/dev/null 2>&1
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$d/server.ext"
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
    -days 3650 -extfile "$d/server.ext" -out "$d/server.pem" >/dev/null 2>&1
}

start() {
  [ -n "${REGISTRY_URL:-}" ] || die "REGISTRY_URL is not set"
  local nginx; nginx=$(nginx_bin)
  local rest=${REGISTRY_URL#http://}
  local upstream=${rest%%/*} path=/${rest#*/}
  [ "$path" = "/$rest" ] && path=/
  mkdir -p "$PROXY_DIR/tmp"
  certificates
  printf 'alice:%s\n' "$(openssl passwd -apr1 alice-secret)" >"$PROXY_DIR/htpasswd"
  local location="
      location / {
        auth_basic \"schema registry\";
        auth_basic_user_file $PROXY_DIR/htpasswd;
        proxy_set_header Authorization \"\";
        proxy_pass http://$upstream;
      }"
  cat >"$PROXY_DIR/nginx.conf" <<CONF
user $(id -un);
worker_processes 1;
pid $PROXY_DIR/nginx.pid;
error_log $PROXY_DIR/error.log;
events { worker_connections 64; }
http {
  access_log $PROXY_DIR/access.log;
  client_body_temp_path $PROXY_DIR/tmp/body;
  proxy_temp_path $PROXY_DIR/tmp/proxy;
  fastcgi_temp_path $PROXY_DIR/tmp/fastcgi;
  uwsgi_temp_path $PROXY_DIR/tmp/uwsgi;
  scgi_temp_path $PROXY_DIR/tmp/scgi;
  server {
    listen 127.0.0.1:$PROXY_PORT;$location
  }
  server {
    listen 127.0.0.1:$TLS_PORT ssl;
    ssl_certificate $PROXY_DIR/server.pem;
    ssl_certificate_key $PROXY_DIR/server.key;$location
  }
}
CONF
  stop >/dev/null 2>&1 || true
  "$nginx" -p "$PROXY_DIR" -c "$PROXY_DIR/nginx.conf" || die "nginx did not start (see $PROXY_DIR/error.log)"
  local http_url=http://127.0.0.1:$PROXY_PORT$path https_url=https://127.0.0.1:$TLS_PORT$path
  local deadline=$((SECONDS + 30))
  # Ready when it answers 401 without credentials.
  until [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$http_url/subjects" || true)" = 401 ]; do
    [ $SECONDS -lt $deadline ] || die "nginx did not answer on $http_url within 30 s (see $PROXY_DIR/error.log)"
    sleep 0.2
  done
  cat >"$PROXY_DIR/proxy.env" <<ENV
HTTP_URL=$http_url
HTTPS_URL=$https_url
CA_PEM=$PROXY_DIR/ca.pem
USER=alice
PASSWORD=alice-secret
ENV
  echo "$http_url"
}

stop() {
  [ -f "$PROXY_DIR/nginx.pid" ] || return 0
  local pid; pid=$(cat "$PROXY_DIR/nginx.pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -f "$PROXY_DIR/nginx.pid"
  log "stopped (pid $pid)"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
