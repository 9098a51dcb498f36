#!/usr/bin/env bash
# Installs the official MCP SDK clients the e2e tests drive toolgate with, from the
# registries, at the versions pinned here: Python `mcp` (requirements.txt, every
# dependency pinned) into tests/clients/.venv, the TypeScript SDK (package-lock.json)
# into tests/clients/node_modules, schemathesis (schemathesis-requirements.txt) into
# tests/clients/.venv-st, and the deploy files' validators (deploy-requirements.txt) into
# tests/clients/.venv-deploy, and an OTLP receiver's protobuf messages
# (otel-requirements.txt) into tests/clients/.venv-otel, Debian's Chromium for the
# browser tests, and Debian's Prometheus (promtool too) for the alerting rules.
# Idempotent and quick when nothing changed; safe to run concurrently (a lock serializes
# runs). The e2e harness runs it before the first SDK test.
set -euo pipefail
cd "$(dirname "$0")"
exec 9>.setup.lock
flock 9

stamp() { cat requirements.txt schemathesis-requirements.txt deploy-requirements.txt otel-requirements.txt package-lock.json setup.sh | sha256sum | cut -d' ' -f1; }
if [ -f .installed ] && [ "$(cat .installed)" = "$(stamp)" ]; then
  exit 0
fi
rm -f .installed
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install --quiet --disable-pip-version-check --require-virtualenv -r requirements.txt
npm ci --silent --no-audit --no-fund
# schemathesis (every dependency pinned) in a venv of its own: its pins and the SDK's
# need not agree.
if [ ! -x .venv-st/bin/python ]; then
  python3 -m venv .venv-st
fi
.venv-st/bin/pip install --quiet --disable-pip-version-check --require-virtualenv -r schemathesis-requirements.txt
# The deploy files' validators; the Compose Specification's JSON Schema ships in the
# docker-compose 1.x wheel (compose/config/compose_spec.json), installed without its
# dependencies: only the schema file is read.
if [ ! -x .venv-deploy/bin/python ]; then
  python3 -m venv .venv-deploy
fi
.venv-deploy/bin/pip install --quiet --disable-pip-version-check --require-virtualenv -r deploy-requirements.txt
.venv-deploy/bin/pip install --quiet --disable-pip-version-check --require-virtualenv --no-deps docker-compose==1.29.2
# The loopback OTLP receiver of the telemetry tests (the official protobuf messages).
if [ ! -x .venv-otel/bin/python ]; then
  python3 -m venv .venv-otel
fi
.venv-otel/bin/pip install --quiet --disable-pip-version-check --require-virtualenv -r otel-requirements.txt
# Debian's packages, as root or with passwordless sudo.
apt_install() {
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo -n"
  $sudo apt-get install -y -qq "$@" >/dev/null \
    || { $sudo apt-get update -qq && $sudo apt-get install -y -qq "$@" >/dev/null; }
}
# A real browser for the browser tests: Debian's Chromium (and ChromeDriver), driven by
# playwright-core from package.json with executablePath /usr/bin/chromium.
[ -x /usr/bin/chromium ] || apt_install chromium chromium-driver
# Debian's `prometheus`: promtool checks deploy/alerts.yml and runs its unit tests, and the
# monitoring test starts the server itself on loopback (the package's service is not used).
[ -x /usr/bin/promtool ] || apt_install prometheus
stamp > .installed
