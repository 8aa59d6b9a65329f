package oracle

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// FindModule looks for node_modules/<rel> (e.g. "openai/index.mjs") in the folder named by the environment
// variable envOverride, if set, then in the oracle install folder (Dir), and returns the folder holding
// node_modules. Tests use it to drive other pinned npm oracles installed by scripts/setup-oracle.sh (the
// official OpenAI client, Hugging Face's JS tokenizers).
func FindModule(envOverride, rel string) (string, bool) {
	for _, d := range []string{os.Getenv(envOverride), Dir()} {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "node_modules", filepath.FromSlash(rel))); err == nil {
			return d, true
		}
	}
	return "", false
}

// RequireEnv, set to 1, turns a missing oracle from a skipped test into a failed one. scripts/test.sh (and so
// CI, through .ci/run) sets it: an oracle test that silently skips in CI proves nothing.
const RequireEnv = "PHONELLM_REQUIRE_ORACLE"

// Unavailable is the one rule for a test whose oracle (an npm package, node, the llama.cpp binding) is not
// installed: it skips the test, or fails it when PHONELLM_REQUIRE_ORACLE=1. what says what is missing and how
// to install it.
func Unavailable(t testing.TB, what string) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s (required: %s=1)", what, RequireEnv)
		return
	}
	t.Skip(what)
}

// RequireModule is FindModule for a test that cannot run without the module and node: when they are missing
// it calls Unavailable.
func RequireModule(t testing.TB, envOverride, rel string) string {
	t.Helper()
	dir, ok := FindModule(envOverride, rel)
	_, nodeErr := exec.LookPath("node")
	if ok && nodeErr == nil {
		return dir
	}
	Unavailable(t, "npm module "+rel+" or node not installed (run "+SetupCommand+", or set "+envOverride+")")
	return ""
}
