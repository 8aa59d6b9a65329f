#!/usr/bin/env bash
# setup-oracle.sh — install the upstream llama.cpp test oracle (testdata/js/oracle) used by internal/testkit/oracle.
#
# Installs the npm packages pinned in testdata/js/oracle/package.json (node-llama-cpp and its prebuilt
# linux-x64 llama.cpp binary) into a cache directory outside the work tree:
#
#   ${PHONELLM_ORACLE_DIR:-$HOME/.cache/phonellm/oracle}/node_modules
#
# Idempotent and non-interactive: when the installed set matches package.json (a stamp holds its sha256)
# it only re-checks that the binary loads and exits, in well under a second. Downloads nothing at test
# time; node-llama-cpp's postinstall (which may try to download or build llama.cpp) is never run.
# Needs node >= 20 and npm; installs Debian's nodejs/npm with apt-get when node is missing (as root).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$repo/testdata/js/oracle"
dir="${PHONELLM_ORACLE_DIR:-${HOME:-/root}/.cache/phonellm/oracle}"
export NODE_LLAMA_CPP_SKIP_DOWNLOAD=true
export NODE_LLAMA_CPP_POSTINSTALL=skip

log() { printf 'setup-oracle: %s\n' "$*" >&2; }

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	if [ "$(id -u)" != 0 ]; then
		log "node and npm are required (node >= 20); install them and re-run"
		exit 1
	fi
	log "node/npm missing: apt-get install nodejs npm"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq nodejs npm >/dev/null
fi
node_major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$node_major" -lt 20 ]; then
	log "warning: node $(node --version) is older than node-llama-cpp's required >= 20; trying anyway"
fi

stamp="$(sha256sum <"$src/package.json" | cut -d' ' -f1) node$node_major"

smoke() {
	# Start the oracle once and ask for its version: proves the prebuilt llama.cpp binary loads.
	local out
	out="$(printf '{"id":1,"op":"version"}\n' | PHONELLM_ORACLE_DIR="$1" timeout 120 node "$src/oracle.mjs" 2>&1)" || {
		log "oracle smoke test failed:"
		printf '%s\n' "$out" >&2
		return 1
	}
	if ! grep -q '^@@oracle {"id":1,"ok":true' <<<"$out"; then
		log "oracle smoke test gave no version answer:"
		printf '%s\n' "$out" >&2
		return 1
	fi
	grep '^@@oracle {"id":1' <<<"$out" | sed 's/^@@oracle /setup-oracle: /' >&2
}

mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9

if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$stamp" ] &&
	[ -f "$dir/node_modules/node-llama-cpp/package.json" ]; then
	if smoke "$dir"; then
		log "up to date in $dir"
		exit 0
	fi
	log "installed copy is broken; reinstalling"
fi

tmp="$(mktemp -d "$dir.tmp.XXXXXX")"
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
cp "$src/package.json" "$tmp/package.json"
log "npm install into $dir (pinned: $(node -p "Object.entries(require('$src/package.json').dependencies).map(([k,v])=>k+'@'+v).join(' ')"))"
(
	cd "$tmp"
	# No lock file: the registry here does not serve every platform package a lock would list, which breaks
	# 'npm ci'. Versions are pinned exactly in package.json instead. --omit=optional skips the other
	# platforms' prebuilt binaries; linux-x64 is a direct dependency.
	npm install --no-audit --no-fund --no-package-lock --ignore-scripts --omit=optional \
		--loglevel=error >&2
)
test -f "$tmp/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/llama-addon.node" || {
	log "the prebuilt linux-x64 llama.cpp binary is missing after npm install"
	exit 1
}
smoke "$tmp"
printf '%s\n' "$stamp" >"$tmp/.stamp"
rm -rf "$dir.old"
if [ -e "$dir" ]; then mv "$dir" "$dir.old"; fi
mv "$tmp" "$dir"
trap - EXIT
rm -rf "$dir.old"
log "installed in $dir"
