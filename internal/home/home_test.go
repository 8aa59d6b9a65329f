package home

import (
	"path/filepath"
	"testing"
)

func TestDir(t *testing.T) {
	t.Setenv(Env, "/tmp/ph")
	if Dir() != "/tmp/ph" || Path("fleet", "x") != filepath.Join("/tmp/ph", "fleet", "x") {
		t.Fatalf("Dir %q Path %q", Dir(), Path("fleet", "x"))
	}
	t.Setenv(Env, "")
	t.Setenv("XDG_CACHE_HOME", "/tmp/cache")
	if got := Dir(); got != "/tmp/cache/phonellm" {
		t.Fatalf("default Dir %q", got)
	}
}

// TestOracleDir: the default follows scripts/setup-oracle.sh ($HOME/.cache/phonellm/oracle).
func TestOracleDir(t *testing.T) {
	t.Setenv(OracleEnv, "")
	t.Setenv("HOME", "/home/x")
	if got := OracleDir(); got != "/home/x/.cache/phonellm/oracle" {
		t.Fatalf("OracleDir %q", got)
	}
	t.Setenv(OracleEnv, "/opt/o")
	if got := OracleDir(); got != "/opt/o" {
		t.Fatalf("OracleDir %q", got)
	}
}
