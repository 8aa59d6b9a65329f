#!/usr/bin/env bash
# setup-acurast.sh — install the pinned @acurast/sdk (and its polkadot peers) used by `phonellm ship
# --target acurast` and by the offline tests of pipeline/deploy/acurast.
#
# Installs pipeline/deploy/acurast/node/package-lock.json with `npm ci --ignore-scripts` into
#
#   ${PHONELLM_HOME:-$HOME/.cache/phonellm}/npm/acurast/node_modules
#
# and writes .stamp (sha256 of the lock file), which is what phonellm checks before using it (phonellm also
# installs it on first use). Idempotent: when the stamp matches it only checks that the SDK loads. Tests never
# download anything; they use this install. Needs node >= 18 and npm (scripts/setup.sh installs them).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$repo/pipeline/deploy/acurast/node"
home="${PHONELLM_HOME:-${HOME:-/root}/.cache/phonellm}"
dir="$home/npm/acurast"

log() { printf 'setup-acurast: %s\n' "$*" >&2; }

for t in node npm; do
	command -v "$t" >/dev/null 2>&1 || { log "$t is required (apt-get install nodejs npm)"; exit 1; }
done
stamp="$(sha256sum <"$src/package-lock.json" | cut -d' ' -f1)"

smoke() {
	# Load the SDK through the driver and print the versions.
	cp "$src/driver.mjs" "$1/driver.mjs"
	(cd "$1" && echo '{}' | timeout 120 node driver.mjs version) | sed -n 's/^@@result /setup-acurast: /p' >&2
	test "${PIPESTATUS[0]}" = 0
}

mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9

if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$stamp" ] && [ -f "$dir/node_modules/@acurast/sdk/package.json" ]; then
	if smoke "$dir"; then
		log "up to date in $dir"
		exit 0
	fi
	log "installed copy is broken; reinstalling"
fi

tmp="$(mktemp -d "$dir.tmp.XXXXXX")"
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
cp "$src/package.json" "$src/package-lock.json" "$tmp/"
log "npm ci @acurast/sdk (pinned by $src/package-lock.json) into $dir"
(cd "$tmp" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >&2)
smoke "$tmp"
printf '%s\n' "$stamp" >"$tmp/.stamp"
rm -rf "$dir.old"
if [ -e "$dir" ]; then mv "$dir" "$dir.old"; fi
mv "$tmp" "$dir"
trap - EXIT
rm -rf "$dir.old"
log "installed in $dir"
