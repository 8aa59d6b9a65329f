#!/usr/bin/env bash
# Runs the bit-exact kernel tests (both ggml golden sets, with and without
# an importance matrix; fast-vs-reference cross tests; the output digest of
# every kernel on adversarial inputs; round trips; FMA canary) for
# pipeline/quantize/kquant and internal/half, and the finite-value check of
# pipeline/quantize (AVX2 on amd64), in four builds:
#   - GOAMD64=v1            (amd64 baseline: Go never fuses a*b+c here)
#   - GOAMD64=v3            (Go fuses a*b+c into VFMADD unless prevented)
#   - GOAMD64=v3 -tags purego (the plain Go kernels instead of the AVX2 ones,
#                           in a build that fuses)
#   - GOARCH=arm64 on qemu  (Go fuses a*b+c into FMADD unless prevented)
# On an amd64 CPU with AVX2 and F16C the first two run the vector kernels
# (*_amd64.s, which never use FMA) and cross-test them against the plain
# Go kernels and the references; the purego and arm64 runs put the plain
# Go kernels through the goldens.
# The golden tests passing in the builds that fuse, together with TestFMAEnvironment
# confirming that those builds really fuse a plain a*b+c, shows that every
# kernel product is rounded before its add, as in ggml's x86 build.
#
# Installs qemu-user from Debian if qemu-aarch64 is missing (needs root and
# the Debian mirror; non-interactive). Exit status is non-zero on any failure.
set -euo pipefail

cd "$(dirname "$0")/.."
pkgs=(./pipeline/quantize/kquant/ ./internal/half/)
finite=(-run 'CheckFinite' ./pipeline/quantize/)
host_arch=$(go env GOHOSTARCH)

run() {
	echo "== $*" >&2
	env "$@"
}

if [[ "$host_arch" == amd64 ]]; then
	run GOAMD64=v1 KQUANT_EXPECT_FMA=0 go test -count=1 "${pkgs[@]}"
	run GOAMD64=v3 KQUANT_EXPECT_FMA=1 go test -count=1 "${pkgs[@]}"
	run GOAMD64=v3 KQUANT_EXPECT_FMA=1 go test -count=1 -tags purego "${pkgs[@]}"
	run GOAMD64=v1 go test -count=1 "${finite[@]}"
	run GOAMD64=v1 go test -count=1 -tags purego "${finite[@]}"
fi

if [[ "$host_arch" == arm64 ]]; then
	run KQUANT_EXPECT_FMA=1 go test -count=1 "${pkgs[@]}"
	run go test -count=1 "${finite[@]}"
else
	if ! command -v qemu-aarch64 >/dev/null 2>&1 && ! command -v qemu-aarch64-static >/dev/null 2>&1; then
		echo "== installing qemu-user (Debian) for arm64 emulation" >&2
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq >/dev/null
		apt-get install -y -qq qemu-user >/dev/null
	fi
	qemu=$(command -v qemu-aarch64 || command -v qemu-aarch64-static)
	# -short keeps the emulated run quick (fewer random cross-test
	# iterations); every golden case still runs.
	run GOARCH=arm64 CGO_ENABLED=0 KQUANT_EXPECT_FMA=1 go test -count=1 -short -exec "$qemu" "${pkgs[@]}"
	run GOARCH=arm64 CGO_ENABLED=0 go test -count=1 -exec "$qemu" "${finite[@]}"
fi
echo "kernel cross tests: all builds passed" >&2
