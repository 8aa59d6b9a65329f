#!/usr/bin/env bash
# Installs everything the tests and the demo need on a fresh Debian 12 machine (as root), idempotently:
#   - Debian packages: nodejs + npm (test oracles, phone-bundle tests), python3-jinja2 (chat-template oracle),
#     qemu-user (arm64 kernel tests)
#   - npm test oracles, pinned: node-llama-cpp (upstream llama.cpp), @huggingface/hub (Hub conformance),
#     @huggingface/jinja (chat templates)
#   - Go modules (go mod download)
# Nothing here is downloaded at test run time; tests only use what this script installed.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'setup: %s\n' "$*" >&2; }

need_apt=()
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
# g++ and git build the llama.cpp imatrix oracle of pipeline/quantize (its headers come from a git bundle).
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
command -v git >/dev/null 2>&1 || need_apt+=(git)
# Python's jinja2 is the reference the chat-template engine (internal/jinja) is tested against.
{ python3 -c 'import jinja2' || /usr/bin/python3 -c 'import jinja2'; } >/dev/null 2>&1 || need_apt+=(python3-jinja2)
if [ "${PHONELLM_SKIP_QEMU:-}" = "" ] && [ "$(uname -m)" = x86_64 ] &&
	! command -v qemu-aarch64 >/dev/null 2>&1 && ! command -v qemu-aarch64-static >/dev/null 2>&1; then
	need_apt+=(qemu-user)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		log "missing ${need_apt[*]}: install them (apt-get install ${need_apt[*]}) or run as root"
		exit 1
	fi
	log "apt-get install ${need_apt[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

log "npm oracles"
bash scripts/setup-oracle.sh
log "Acurast SDK (pinned; also installed by phonellm on first use)"
bash scripts/setup-acurast.sh
for d in testdata/js/*/; do
	[ -f "$d/package.json" ] || continue
	case "$d" in *oracle/) continue ;; esac
	if [ -f "$d/package-lock.json" ]; then
		(cd "$d" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
	else
		(cd "$d" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
	fi
done

log "go modules"
go mod download
log "done"
