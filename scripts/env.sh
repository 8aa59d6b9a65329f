# Sourced by every script that builds or tests phonellm (README commands, .ci/run, benchmarks).
# The cgo engine (ollama's ggml backend) is compiled with these flags; keep them identical everywhere, since any
# change rebuilds the whole engine (~3-11 CPU-minutes). x86-64-v3 (AVX2/FMA) makes it ~4x faster on amd64.
case "$(uname -m)" in
  x86_64|amd64)
    export CGO_CFLAGS="-O3 -march=x86-64-v3"
    export CGO_CXXFLAGS="-O3 -march=x86-64-v3"
    ;;
  *)
    export CGO_CFLAGS="-O3"
    export CGO_CXXFLAGS="-O3"
    ;;
esac
export CGO_ENABLED=1
# Go's build cache is what keeps the engine build to once per machine; keep it in its default place unless set.
export GOFLAGS="${GOFLAGS:-} -buildvcs=auto"
