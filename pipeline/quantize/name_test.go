package quantize

import (
	"strings"
	"testing"
)

func TestOutputName(t *testing.T) {
	for _, ok := range []string{"Qwen3-8B", "fraud-4b", "qwen3.5 9b", "ünïcödé", "a_b.c"} {
		if !OutputName(ok) {
			t.Errorf("OutputName(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", ".", "..", "../../etc/x", "a/b", `a\b`, "C:x", ".hidden", "-rf", "nul\x00", "tab\tname",
		"esc\x1b[2J", "\xff", strings.Repeat("x", 129)} {
		if OutputName(bad) {
			t.Errorf("OutputName(%q) = true", bad)
		}
	}
}
