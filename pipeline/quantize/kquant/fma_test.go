package kquant

import (
	"os"
	"testing"
)

// Inputs for which a fused multiply-add differs from multiply-then-add:
// a*b = 1 + 2^-11 + 2^-24 rounds to 1 + 2^-11, so the unfused result is 0
// and the fused one 2^-24.
var fmaA, fmaB, fmaC float32 = 1 + 1.0/4096, 1 + 1.0/4096, -(1 + 1.0/2048)

//go:noinline
func mulAddMayFuse(a, b, c float32) float32 { return a*b + c }

//go:noinline
func mulAddRounded(a, b, c float32) float32 { return float32(a*b) + c }

// TestFMAEnvironment proves what the golden tests prove: it reports whether
// this build fuses a plain a*b + c (it does on arm64 and with GOAMD64=v3),
// and checks that the float32(a*b) + c form used in the kernels never fuses.
// With KQUANT_EXPECT_FMA=1 (or 0) it also fails unless the build does (or
// does not) fuse, so scripts/test-kernels-cross.sh can show that the golden
// tests passed in a build where fusion was really happening.
func TestFMAEnvironment(t *testing.T) {
	fused := mulAddMayFuse(fmaA, fmaB, fmaC) != 0
	t.Logf("this build fuses a*b + c into FMA: %v", fused)
	if got := mulAddRounded(fmaA, fmaB, fmaC); got != 0 {
		t.Fatalf("float32(a*b) + c = %g, want 0: the rounding conversion did not prevent fusion", got)
	}
	switch os.Getenv("KQUANT_EXPECT_FMA") {
	case "1":
		if !fused {
			t.Fatal("KQUANT_EXPECT_FMA=1 but this build does not fuse a*b + c")
		}
	case "0":
		if fused {
			t.Fatal("KQUANT_EXPECT_FMA=0 but this build fuses a*b + c")
		}
	}
}
