#!/usr/bin/env bash
# The whole test suite: set-up (idempotent), vet, every package's tests, the fuzz targets for a fixed count,
# and the bit-exact kernel tests under GOAMD64=v1/v3 and arm64 emulation.
# Usage: bash scripts/test.sh            (what CI runs through .ci/run)
set -euo pipefail
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

bash scripts/setup.sh

echo "== go vet" >&2
go vet ./...

echo "== go test" >&2
go test -count=1 -timeout 45m ./...

echo "== fuzz (fixed count)" >&2
fuzzcount="${PHONELLM_FUZZ_COUNT:-3000x}"
# Every Fuzz* function in the tree runs for a fixed number of inputs (seed corpus first).
grep -rl --include='*_test.go' '^func Fuzz' . | while read -r f; do
	pkg="./$(dirname "${f#./}")"
	for fn in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | cut -d' ' -f2); do
		echo "   $pkg $fn" >&2
		go test -run='^$' -fuzz="^${fn}\$" -fuzztime="$fuzzcount" "$pkg" >/dev/null
	done
done

echo "== the README's main job: phonellm demo (merge → quantize → fit → ship 3 replicas → gateway answer)" >&2
mkdir -p bin
go build -o bin/phonellm ./cmd/phonellm
demo="$(mktemp -d)"
trap 'rm -rf "$demo"' EXIT
bin/phonellm demo --dir "$demo" >/dev/null

echo "== phone entrypoint under Node with phonellm serve as the phone's llama-server" >&2
PHONELLM_STD_LLAMA_CMD="$PWD/bin/phonellm serve" PHONELLM_STD_LLAMA_DIALECT=phonellm-serve \
	PHONELLM_TEST_GGUF="$demo/tiny-fraud-Q4_K_M.gguf" \
	go test -count=1 -run TestPhoneEntrypointEndToEnd ./pipeline/deploy

echo "== kernels under GOAMD64=v1/v3 and arm64" >&2
bash scripts/test-kernels-cross.sh
echo "all tests passed" >&2
