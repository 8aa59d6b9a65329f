package acurast

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/internal/home"
	"github.com/phonellm/phonellm/pipeline/deploy"
)

//go:embed node/package.json node/package-lock.json node/driver.mjs
var nodeFiles embed.FS

// SDKVersion is the pinned @acurast/sdk.
const SDKVersion = "1.2.2"

// DefaultSDKDir is $PHONELLM_HOME/npm/acurast (PHONELLM_HOME defaults to ~/.cache/phonellm).
func DefaultSDKDir() string { return home.Path("npm", "acurast") }

// SDK runs the Node driver (node/driver.mjs) next to an npm install of the pinned @acurast/sdk.
type SDK struct {
	// Dir is the npm prefix (DefaultSDKDir()).
	Dir string
	// Node is the node executable ("node").
	Node string
	// Env is the driver's environment (os.Environ() when nil). ACURAST_MNEMONIC reaches the driver only this
	// way.
	Env []string
	// Stderr receives the driver's stderr with Redact values replaced by "[redacted]" (discarded when nil).
	Stderr io.Writer
	Redact []string
}

// NewSDK returns an SDK in DefaultSDKDir.
func NewSDK() *SDK { return &SDK{Dir: DefaultSDKDir(), Node: "node"} }

// SDKError is a failure reported by the driver (as opposed to failing to run it).
type SDKError struct {
	Op, Message string
}

func (e *SDKError) Error() string { return fmt.Sprintf("acurast: sdk %s: %s", e.Op, e.Message) }

// RemoteError is true for the operations that talk to the Acurast network, its IPFS pinning service or its
// matcher (pin, deploy, stop, estimate): their failure is the remote side's answer. The other operations are
// computed locally by the SDK.
func (e *SDKError) RemoteError() bool {
	switch e.Op {
	case "pin", "deploy", "stop", "estimate":
		return true
	}
	return false
}

// ErrNotInstalled means the pinned SDK is not in the npm prefix.
var ErrNotInstalled = errors.New("acurast: @acurast/sdk " + SDKVersion + " is not installed (run scripts/setup-acurast.sh)")

func lockStamp() string {
	b, _ := nodeFiles.ReadFile("node/package-lock.json")
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Installed reports whether the pinned install is present: node_modules/@acurast/sdk at SDKVersion and a
// .stamp holding the sha256 of the package-lock.json it was installed from.
func (s *SDK) Installed() error {
	stamp, err := os.ReadFile(filepath.Join(s.Dir, ".stamp"))
	if err != nil || strings.TrimSpace(string(stamp)) != lockStamp() {
		return ErrNotInstalled
	}
	b, err := os.ReadFile(filepath.Join(s.Dir, "node_modules", "@acurast", "sdk", "package.json"))
	if err != nil {
		return ErrNotInstalled
	}
	var pj struct{ Version string }
	if json.Unmarshal(b, &pj) != nil || pj.Version != SDKVersion {
		return ErrNotInstalled
	}
	return nil
}

// Install runs `npm ci` of the pinned lock file into a temporary folder beside Dir and renames it into place
// (install on first use; scripts/setup-acurast.sh does the same). It needs the npm registry.
func (s *SDK) Install(ctx context.Context) error {
	if s.Installed() == nil {
		return nil
	}
	parent := filepath.Dir(s.Dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, ".acurast-install-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, n := range []string{"package.json", "package-lock.json"} {
		b, _ := nodeFiles.ReadFile("node/" + n)
		if err := os.WriteFile(filepath.Join(tmp, n), b, 0o644); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error")
	cmd.Dir = tmp
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("acurast: npm ci @acurast/sdk@%s: %w\n%s", SDKVersion, err, out.String())
	}
	if err := os.WriteFile(filepath.Join(tmp, ".stamp"), []byte(lockStamp()+"\n"), 0o644); err != nil {
		return err
	}
	old := s.Dir + ".old"
	os.RemoveAll(old)
	if _, err := os.Stat(s.Dir); err == nil {
		if err := os.Rename(s.Dir, old); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, s.Dir); err != nil {
		return err
	}
	os.RemoveAll(old)
	return s.Installed()
}

var driverMu sync.Mutex

// driver writes driver.mjs into Dir when it differs from the embedded one and returns its path.
func (s *SDK) driver() (string, error) {
	driverMu.Lock()
	defer driverMu.Unlock()
	want, _ := nodeFiles.ReadFile("node/driver.mjs")
	p := filepath.Join(s.Dir, "driver.mjs")
	if have, err := os.ReadFile(p); err == nil && bytes.Equal(have, want) {
		return p, nil
	}
	if _, err := fsx.WriteFile(p, want); err != nil {
		return "", fmt.Errorf("acurast: install driver: %w", err)
	}
	return p, nil
}

// maxDriverLine bounds one line of driver output.
const maxDriverLine = 4 << 20

// Run runs one driver op with req as JSON on stdin; onEvent (may be nil) gets every progress event. The
// driver's result is returned raw.
func (s *SDK) Run(ctx context.Context, op string, req any, onEvent func(json.RawMessage)) (json.RawMessage, error) {
	if err := s.Installed(); err != nil {
		return nil, err
	}
	drv, err := s.driver()
	if err != nil {
		return nil, err
	}
	in, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("acurast: sdk %s: encode request: %w", op, err)
	}
	node := s.Node
	if node == "" {
		node = "node"
	}
	cmd := exec.CommandContext(ctx, node, drv, op)
	cmd.Dir = s.Dir
	cmd.Env = s.Env
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("acurast: sdk %s: start node: %w", op, err)
	}
	var result json.RawMessage
	var failure *SDKError
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), maxDriverLine)
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.HasPrefix(line, []byte("@@event ")):
			if onEvent != nil {
				onEvent(bytes.Clone(line[len("@@event "):]))
			}
		case bytes.HasPrefix(line, []byte("@@result ")):
			result = bytes.Clone(line[len("@@result "):])
		case bytes.HasPrefix(line, []byte("@@error ")):
			var e struct{ Message string }
			json.Unmarshal(line[len("@@error "):], &e)
			failure = &SDKError{Op: op, Message: s.redact(e.Message)}
		}
	}
	scanErr := sc.Err()
	waitErr := cmd.Wait()
	if s.Stderr != nil && stderr.Len() > 0 {
		io.WriteString(s.Stderr, s.redact(stderr.String()))
	}
	switch {
	case failure != nil:
		return nil, failure
	case ctx.Err() != nil:
		return nil, fmt.Errorf("acurast: sdk %s: %w", op, ctx.Err())
	case scanErr != nil:
		return nil, fmt.Errorf("acurast: sdk %s: read output: %w", op, scanErr)
	case waitErr != nil || result == nil:
		return nil, fmt.Errorf("acurast: sdk %s: node: %v: %s", op, waitErr, s.redact(lastLines(stderr.String(), 5)))
	}
	return result, nil
}

func (s *SDK) redact(text string) string {
	for _, v := range s.Redact {
		if len(v) >= 8 {
			text = strings.ReplaceAll(text, v, "[redacted]")
		}
	}
	if m := os.Getenv("ACURAST_MNEMONIC"); m != "" {
		text = strings.ReplaceAll(text, m, "[redacted]")
	}
	if deploy.ContainsSecret([]byte(text), s.Redact...) {
		return "[driver output withheld: it contained a secret in an encoded form]"
	}
	return text
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
