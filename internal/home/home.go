package home

import (
	"os"
	"path/filepath"
)

// Env is the environment variable that overrides the folder.
const Env = "PHONELLM_HOME"

// OracleEnv overrides where scripts/setup-oracle.sh installed the pinned npm test oracles.
const OracleEnv = "PHONELLM_ORACLE_DIR"

// Dir is $PHONELLM_HOME, else "phonellm" in the user cache folder (~/.cache on Linux), else in the
// temporary folder when the system has no user cache folder.
func Dir() string {
	if h := os.Getenv(Env); h != "" {
		return h
	}
	if c, err := os.UserCacheDir(); err == nil {
		return filepath.Join(c, "phonellm")
	}
	return filepath.Join(os.TempDir(), "phonellm")
}

// Path is a path under Dir.
func Path(elem ...string) string { return filepath.Join(append([]string{Dir()}, elem...)...) }

// OracleDir is where scripts/setup-oracle.sh installs the pinned npm oracles (node-llama-cpp, the OpenAI
// client, Hugging Face's JS tokenizers): $PHONELLM_ORACLE_DIR, else ~/.cache/phonellm/oracle. It follows
// the script, which uses $HOME rather than the platform cache folder.
func OracleDir() string {
	if d := os.Getenv(OracleEnv); d != "" {
		return d
	}
	h, err := os.UserHomeDir()
	if err != nil || h == "" {
		h = "/root"
	}
	return filepath.Join(h, ".cache", "phonellm", "oracle")
}
