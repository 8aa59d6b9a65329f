package autotune

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/phonellm/phonellm/internal/fsx"
)

// Key identifies a cached result: the same model file on the same kind of
// machine, measured by the same phonellm with the same candidates and shape.
type Key struct {
	// ModelSHA256 is set with Options.HashModel; otherwise ModelSize and
	// ModelModTime (with the absolute path) fingerprint the file.
	Model        string    `json:"model"`
	ModelSHA256  string    `json:"model_sha256,omitempty"`
	ModelSize    int64     `json:"model_size"`
	ModelModTime time.Time `json:"model_mtime,omitzero"`

	CPU     string `json:"cpu"`
	NumCPU  int    `json:"num_cpu"`
	GOARCH  string `json:"goarch"`
	Version string `json:"phonellm_version"`

	Candidates     []Candidate `json:"candidates"`
	PromptTokens   int         `json:"prompt_tokens"`
	GenerateTokens int         `json:"generate_tokens"`
	Repeats        int         `json:"repeats"`
	Workload       Workload    `json:"workload"`
}

func (k Key) equal(o Key) bool {
	return k.Model == o.Model && k.ModelSHA256 == o.ModelSHA256 && k.ModelSize == o.ModelSize &&
		k.ModelModTime.Equal(o.ModelModTime) && k.CPU == o.CPU && k.NumCPU == o.NumCPU && k.GOARCH == o.GOARCH &&
		k.Version == o.Version && slices.Equal(k.Candidates, o.Candidates) && k.PromptTokens == o.PromptTokens &&
		k.GenerateTokens == o.GenerateTokens && k.Repeats == o.Repeats && k.Workload == o.Workload
}

// cpuInfoPath is read for the CPU model name.
const cpuInfoPath = "/proc/cpuinfo"

func makeKey(o Options) (Key, error) {
	abs, err := filepath.Abs(o.Model)
	if err != nil {
		return Key{}, fmt.Errorf("autotune: model path %s: %w", o.Model, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return Key{}, fmt.Errorf("autotune: model: %w", err)
	}
	if !st.Mode().IsRegular() {
		return Key{}, fmt.Errorf("autotune: model %s is not a regular file", abs)
	}
	k := Key{Model: abs, ModelSize: st.Size(), CPU: cpuModel(cpuInfoPath), NumCPU: runtime.NumCPU(), GOARCH: runtime.GOARCH,
		Version: o.Version, Candidates: slices.Clone(o.Candidates), PromptTokens: o.PromptTokens,
		GenerateTokens: o.GenerateTokens, Repeats: o.Repeats, Workload: o.Workload}
	if o.HashModel {
		if k.ModelSHA256, err = fileSHA256(abs); err != nil {
			return Key{}, err
		}
	} else {
		k.ModelModTime = st.ModTime().UTC()
	}
	return k, nil
}

func fileSHA256(path string) (string, error) {
	_, sum, err := fsx.HashFile(path)
	if err != nil {
		return "", fmt.Errorf("autotune: hash model: %w", err)
	}
	return sum, nil
}

// cpuModel is the first "model name" of a cpuinfo file (/proc/cpuinfo), or "unknown".
func cpuModel(cpuInfoPath string) string {
	f, err := os.Open(cpuInfoPath)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(name) == "model name" {
			if v := strings.TrimSpace(value); v != "" {
				return v
			}
		}
	}
	return "unknown"
}

func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "unknown"
}

// cachePath names the cache file of a key: the model's base name plus a hash
// of the whole key, so keys differing in any field never share a file.
func cachePath(dir string, k Key) string {
	b, _ := json.Marshal(k) // a Key always marshals
	sum := sha256.Sum256(b)
	base := strings.TrimSuffix(filepath.Base(k.Model), filepath.Ext(k.Model))
	return filepath.Join(dir, fmt.Sprintf("autotune-%s-%s.json", base, hex.EncodeToString(sum[:8])))
}

var errNoCache = errors.New("autotune: no cached result")

// maxCacheBytes bounds a cache file read (a result is a few KB).
const maxCacheBytes = 1 << 20

// loadCache returns the cached result at path when it is for key k.
func loadCache(path string, k Key) (Result, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Result{}, errNoCache
	}
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCacheBytes+1))
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxCacheBytes {
		return Result{}, fmt.Errorf("%s: larger than %d bytes", path, maxCacheBytes)
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return Result{}, fmt.Errorf("%s: %w", path, err)
	}
	if !r.Key.equal(k) {
		return Result{}, fmt.Errorf("%s: cached for a different model, machine or version", path)
	}
	if !slices.Contains(k.Candidates, r.Best) {
		return Result{}, fmt.Errorf("%s: best setting %s is not a candidate", path, r.Best)
	}
	return r, nil
}

// storeCache writes r to path atomically (package fsx: temporary file in the same directory, fsync, rename,
// fsync of the directory).
func storeCache(path string, r Result) error {
	_, err := fsx.WriteJSON(path, r)
	return err
}
