#!/usr/bin/env bash
# The whole test suite: set-up (idempotent), vet, every package's tests, the fuzz targets for a fixed count,
# the README's demo, the phone entrypoint under Node, and the bit-exact kernel tests under GOAMD64=v1/v3 and
# arm64 emulation.
# Usage: bash scripts/test.sh            (what CI runs through .ci/run)
#
# Set-up failures stop the run (nothing after it can mean anything). After that every stage runs even when an
# earlier one failed — a failing package must not hide a failing kernel build — and the run ends with one line
# per stage (ok/FAILED, wall seconds) and a non-zero exit status when any stage failed.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
# node-llama-cpp reads CI as a boolean and refuses to load on anything else (an empty CI included).
if [ -n "${CI+set}" ]; then
	case "$CI" in
	true | false | TRUE | FALSE | 1 | 0) ;;
	"") unset CI ;;
	*) export CI=true ;;
	esac
fi
# Tests that need an oracle (node-llama-cpp, npm clients) fail instead of skipping when it is missing.
export PHONELLM_REQUIRE_ORACLE=1

if ! bash scripts/setup.sh; then
	echo "test.sh: set-up failed; nothing was tested" >&2
	exit 1
fi

summary=()
failed=()
# stage NAME COMMAND...: runs one stage, records its result and time, never stops the run.
stage() {
	local name=$1
	shift
	echo "== $name" >&2
	local start=$SECONDS rc=0
	"$@" || rc=$?
	local took=$((SECONDS - start))
	if [ "$rc" -eq 0 ]; then
		summary+=("ok      ${took}s  $name")
	else
		summary+=("FAILED  ${took}s  $name (exit $rc)")
		failed+=("$name")
	fi
}

fuzz_all() {
	local fuzzcount="${PHONELLM_FUZZ_COUNT:-3000x}" bad=0 f pkg fn
	# Every Fuzz* function in the tree runs for a fixed number of inputs (seed corpus first).
	while read -r f; do
		pkg="./$(dirname "${f#./}")"
		for fn in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | cut -d' ' -f2); do
			echo "   $pkg $fn" >&2
			if ! go test -run='^$' -fuzz="^${fn}\$" -fuzztime="$fuzzcount" "$pkg" >/dev/null; then
				echo "   FAILED: $pkg $fn" >&2
				bad=1
			fi
		done
	done < <(grep -rl --include='*_test.go' '^func Fuzz' .)
	return "$bad"
}

demo="$(mktemp -d)"
trap 'rm -rf "$demo"' EXIT
demo_run() {
	mkdir -p bin && go build -o bin/phonellm ./cmd/phonellm && bin/phonellm demo --dir "$demo" >/dev/null
}

phone_entrypoint() {
	if [ ! -f "$demo/tiny-fraud-Q4_K_M.gguf" ]; then
		echo "   no demo model (the demo stage failed)" >&2
		return 1
	fi
	PHONELLM_STD_LLAMA_CMD="$PWD/bin/phonellm serve" PHONELLM_STD_LLAMA_DIALECT=phonellm-serve \
		PHONELLM_TEST_GGUF="$demo/tiny-fraud-Q4_K_M.gguf" \
		go test -count=1 -run TestPhoneEntrypointEndToEnd ./pipeline/deploy
}

stage "go vet" go vet ./...
stage "go test" go test -count=1 -timeout 45m ./...
stage "fuzz (fixed count)" fuzz_all
stage "the README's main job: phonellm demo (merge → quantize → fit → ship 3 replicas → gateway answer)" demo_run
stage "phone entrypoint under Node with phonellm serve as the phone's llama-server" phone_entrypoint
stage "kernels under GOAMD64=v1/v3 and arm64" bash scripts/test-kernels-cross.sh

echo "== summary" >&2
printf '   %s\n' "${summary[@]}" >&2
if [ ${#failed[@]} -gt 0 ]; then
	echo "test.sh: ${#failed[@]} stage(s) failed:" >&2
	printf '   %s\n' "${failed[@]}" >&2
	exit 1
fi
echo "all tests passed" >&2
