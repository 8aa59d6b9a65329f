package oracle

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/phonellm/phonellm/internal/home"
)

// Environment variables read by this package.
const (
	// EnvDir names the set-up cache holding node_modules (default ~/.cache/phonellm/oracle).
	EnvDir = home.OracleEnv
	// EnvNode names the node binary (default "node" on PATH).
	EnvNode = "PHONELLM_NODE"
	// EnvThreads sets the default llama.cpp thread count of the oracle process (default 1).
	EnvThreads = "PHONELLM_ORACLE_THREADS"
	// EnvDebug, when "1", copies llama.cpp's log lines to the oracle's stderr.
	EnvDebug = "PHONELLM_ORACLE_DEBUG"
)

// SetupCommand is what a person runs to install the oracle.
const SetupCommand = "bash scripts/setup-oracle.sh"

const scriptRel = "testdata/js/oracle"

// Dir returns the set-up cache directory: $PHONELLM_ORACLE_DIR, else ~/.cache/phonellm/oracle (home.OracleDir).
func Dir() string { return home.OracleDir() }

// ModuleRoot is the directory holding go.mod above the working directory (go test runs in the package
// directory), or "" when there is none.
func ModuleRoot() string {
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}

// scriptDir finds testdata/js/oracle: first under the module root, then next to this source file.
func scriptDir() (string, error) {
	var tried []string
	if root := ModuleRoot(); root != "" {
		cand := filepath.Join(root, scriptRel)
		tried = append(tried, cand)
		if fileExists(filepath.Join(cand, "oracle.mjs")) {
			return cand, nil
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		cand := filepath.Join(filepath.Dir(file), "..", "..", scriptRel)
		tried = append(tried, cand)
		if fileExists(filepath.Join(cand, "oracle.mjs")) {
			return filepath.Clean(cand), nil
		}
	}
	return "", fmt.Errorf("oracle: oracle.mjs not found (tried %q)", tried)
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// installation is a resolved, checked oracle set-up.
type installation struct {
	node        string // node binary
	script      string // oracle.mjs
	modulesRoot string // directory holding node_modules, passed to the script as PHONELLM_ORACLE_DIR
}

// ErrNotInstalled is wrapped by Available's error when the npm packages or node are missing.
var ErrNotInstalled = errors.New("oracle not installed")

// Available reports whether the oracle can be started: node is on PATH, and the pinned npm packages are
// installed (in Dir(), or in testdata/js/oracle/node_modules) at the versions package.json pins.
// The error wraps ErrNotInstalled when something is missing and names the set-up command.
func Available() error {
	_, err := locate()
	return err
}

func locate() (installation, error) {
	var in installation
	dir, err := scriptDir()
	if err != nil {
		return in, err
	}
	in.script = filepath.Join(dir, "oracle.mjs")
	node := os.Getenv(EnvNode)
	if node == "" {
		node = "node"
	}
	if in.node, err = exec.LookPath(node); err != nil {
		return in, fmt.Errorf("%w: node: %v (run %s)", ErrNotInstalled, err, SetupCommand)
	}
	pins, err := readPins(filepath.Join(dir, "package.json"))
	if err != nil {
		return in, err
	}
	roots := []string{Dir()}
	if os.Getenv(EnvDir) == "" {
		roots = append(roots, dir)
	}
	var problems []error
	for _, root := range roots {
		if err := checkInstalled(root, pins); err != nil {
			problems = append(problems, err)
			continue
		}
		in.modulesRoot = root
		return in, nil
	}
	return in, fmt.Errorf("%w (run %s): %w", ErrNotInstalled, SetupCommand, errors.Join(problems...))
}

// readPins returns the dependency versions pinned in package.json.
func readPins(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("oracle: %w", err)
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		return nil, fmt.Errorf("oracle: %s: %w", path, err)
	}
	if len(pkg.Dependencies) == 0 {
		return nil, fmt.Errorf("oracle: %s: no dependencies pinned", path)
	}
	return pkg.Dependencies, nil
}

// checkInstalled checks root/node_modules against the pinned versions and that the prebuilt binary exists.
func checkInstalled(root string, pins map[string]string) error {
	for name, want := range pins {
		p := filepath.Join(root, "node_modules", filepath.FromSlash(name), "package.json")
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("%s: %s missing", root, name)
		}
		var pkg struct {
			Version string `json:"version"`
		}
		if err := json.Unmarshal(b, &pkg); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if pkg.Version != want {
			return fmt.Errorf("%s: %s is %s, package.json pins %s", root, name, pkg.Version, want)
		}
	}
	addon := filepath.Join(root, "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64", "llama-addon.node")
	if !fileExists(addon) {
		return fmt.Errorf("%s: prebuilt llama.cpp binary %s missing", root, addon)
	}
	return nil
}
