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

// RequireModule is FindModule for a test that cannot run without the module and node: it skips when they are
// missing, and fails instead when CI is set or PHONELLM_REQUIRE_ORACLE=1 (an oracle that silently skips in CI
// proves nothing).
func RequireModule(t testing.TB, envOverride, rel string) string {
	t.Helper()
	dir, ok := FindModule(envOverride, rel)
	_, nodeErr := exec.LookPath("node")
	if ok && nodeErr == nil {
		return dir
	}
	msg := "npm module " + rel + " or node not installed (run " + SetupCommand + ", or set " + envOverride + ")"
	if os.Getenv("CI") != "" || os.Getenv("PHONELLM_REQUIRE_ORACLE") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}
