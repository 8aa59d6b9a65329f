package deploy

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/runtime/phone"
)

// PhoneConfig is config.json inside the bundle: everything the entrypoint needs except secrets, which it reads
// from _STD_.env under the names given here.
type PhoneConfig struct {
	PhonellmVersion string     `json:"phonellm_version"`
	Model           PhoneModel `json:"model"`
	// Ctx is tokens per slot; llama-server gets --ctx-size Ctx*Slots --parallel Slots.
	Ctx        int        `json:"ctx"`
	Slots      int        `json:"slots"`
	Candidates []Settings `json:"candidates"`
	// APIKeyEnv, HFTokenEnv and TunnelKeyEnv name _STD_.env variables (never values).
	APIKeyEnv    string `json:"api_key_env,omitempty"`
	HFTokenEnv   string `json:"hf_token_env,omitempty"`
	TunnelKeyEnv string `json:"tunnel_key_env,omitempty"`
	Tunnel       Tunnel `json:"tunnel"`
	// Listen is where the entrypoint's HTTP server listens (the tunnel's localAddr); default 127.0.0.1:8081.
	Listen string `json:"listen,omitempty"`
	// LlamaAddr is where llama-server listens; the processor's default is 127.0.0.1:8080 (acurast.md §3.3).
	// Other values are passed as --host/--port.
	LlamaAddr string `json:"llama_addr,omitempty"`
	Bench     Bench  `json:"bench"`
	// StartTimeoutMS bounds loading the model (default 10 min); WatchdogMS is the health-check period.
	StartTimeoutMS int `json:"start_timeout_ms,omitempty"`
	WatchdogMS     int `json:"watchdog_ms,omitempty"`
	// KVType is the KV cache type (-ctk/-ctv; the quantized types run with --flash-attn on); "" = f16.
	KVType string `json:"kv_type,omitempty"`
	// CacheRAMMiB is llama-server's --cache-ram (host-memory prompt cache, MiB), sized by the fit check;
	// CtxCheckpoints its --ctx-checkpoints. Both are in ExtraArgs as passed.
	CacheRAMMiB    int `json:"cache_ram_mib"`
	CtxCheckpoints int `json:"ctx_checkpoints"`
	// Warm are the texts of the shared prefixes (rubrics) the entrypoint evaluates, each as a system message,
	// once llama-server runs and before it reports ready, so that the first real request is a cache hit.
	Warm      []string `json:"warm,omitempty"`
	ExtraArgs []string `json:"extra_args,omitempty"`
}

// PhoneModel is the model the phone downloads.
type PhoneModel struct {
	ID     string `json:"id,omitempty"`
	URL    string `json:"url"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// File is the name in the job's storage folder (default model-<sha256[:16]>.gguf).
	File string `json:"file,omitempty"`
}

// Tunnel is the Acurast tunnel spec's public part (acurast.md §3.4).
type Tunnel struct {
	ServerAddrs  []string `json:"server_addrs"`
	DomainSuffix string   `json:"domain_suffix"`
}

// Bench is the fixed request used to time candidate settings.
type Bench struct {
	Prompt    string `json:"prompt"`
	MaxTokens int    `json:"max_tokens"`
}

// Tunnel relays per network (acurast.md §3.4).
var (
	MainnetTunnel = Tunnel{ServerAddrs: []string{"relay-1.mainnet.acurast.com:4433"}, DomainSuffix: "acu.run"}
	CanaryTunnel  = Tunnel{ServerAddrs: []string{"relay-2.canary.acurast.com:4433"}, DomainSuffix: "canary.acu.run"}
)

// DefaultCandidates are tried when a Spec names none: all big cores vs. fewer threads (phones often run
// faster on performance cores only, acurast.md §4.6), two batch sizes for long prompts.
var DefaultCandidates = []Settings{
	{Threads: 8, Batch: 512, UBatch: 512},
	{Threads: 6, Batch: 512, UBatch: 512},
	{Threads: 4, Batch: 512, UBatch: 512},
	{Threads: 4, Batch: 256, UBatch: 256},
}

// NewPhoneConfig derives the phone configuration from a Spec (tunnel for mainnet; set Tunnel for canary).
func NewPhoneConfig(spec Spec, version string) PhoneConfig {
	c := PhoneConfig{
		PhonellmVersion: version,
		Model:           PhoneModel{ID: spec.Model.ID, URL: spec.Model.URL, Size: spec.Model.Size, SHA256: spec.Model.SHA256},
		Ctx:             spec.Ctx,
		Slots:           max(spec.Slots, 1),
		Candidates:      spec.Candidates,
		APIKeyEnv:       spec.APIKeyEnv,
		HFTokenEnv:      spec.HFTokenEnv,
		TunnelKeyEnv:    "TUNNEL_KEY",
		Tunnel:          MainnetTunnel,
		Bench:           Bench{Prompt: "Count from one to twenty in words.", MaxTokens: 32},
		KVType:          spec.KVType,
		CacheRAMMiB:     int(spec.CacheRAM >> 20),
		CtxCheckpoints:  spec.CtxCheckpoints,
	}
	if c.CtxCheckpoints == 0 {
		c.CtxCheckpoints = DefaultCtxCheckpoints
	}
	if c.KVType == "f16" {
		c.KVType = ""
	}
	// The memory the fit check promised (pipeline/fit, llama.cpp accounting): the host-RAM prompt cache it
	// sized (never llama-server's default of 8 GiB, which alone would break every phone budget; 0 when the
	// budget has no room for one) and the recurrent-state checkpoints per slot it counted. Both flags exist in
	// every llama.cpp that can load Qwen3.5 (b7990 and later); -ctk/-ctv much longer.
	c.ExtraArgs = []string{"--cache-ram", strconv.Itoa(c.CacheRAMMiB), "--ctx-checkpoints", strconv.Itoa(c.CtxCheckpoints)}
	if c.KVType != "" {
		c.ExtraArgs = append(c.ExtraArgs, "--cache-type-k", c.KVType, "--cache-type-v", c.KVType)
	}
	if c.Ctx == 0 {
		c.Ctx = 4096
	}
	if len(c.Candidates) == 0 {
		if spec.Threads > 0 {
			c.Candidates = []Settings{{Threads: spec.Threads, Batch: 512, UBatch: 512}}
		} else {
			c.Candidates = slices.Clone(DefaultCandidates)
		}
	}
	return c
}

// Validate checks the configuration the phone will run with. Errors are *[SpecError].
func (c PhoneConfig) Validate() error {
	bad := func(format string, args ...any) error { return SpecErrorf("deploy: bundle config: "+format, args...) }
	if err := validModelURL(c.Model.URL); err != nil {
		return err
	}
	if c.Model.Size <= 0 {
		return bad("model size = %d, want > 0", c.Model.Size)
	}
	if !hex64.MatchString(c.Model.SHA256) {
		return bad("model sha256 %q is not 64 lowercase hex digits", c.Model.SHA256)
	}
	// The phone joins model.file to its storage folder: a plain file name only (no separators, no "..").
	if c.Model.File != "" && !ValidFileName(c.Model.File) {
		return bad("model file %q is not a plain file name (letters, digits, '.', '_', '-'; no separators or \"..\")", c.Model.File)
	}
	if c.Ctx <= 0 || c.Slots <= 0 || c.Slots > 256 {
		return bad("ctx = %d, slots = %d; want ctx > 0 and slots in 1..256", c.Ctx, c.Slots)
	}
	if len(c.Candidates) == 0 || len(c.Candidates) > 16 {
		return bad("%d candidate settings, want 1..16", len(c.Candidates))
	}
	for i, s := range c.Candidates {
		if s.Threads < 1 || s.Threads > 256 || s.Batch < 0 || s.UBatch < 0 {
			return bad("candidate %d: threads = %d, batch = %d, ubatch = %d", i, s.Threads, s.Batch, s.UBatch)
		}
	}
	for _, e := range []string{c.APIKeyEnv, c.HFTokenEnv, c.TunnelKeyEnv} {
		if e != "" && !envName.MatchString(e) {
			return bad("%q is not an environment variable name", e)
		}
	}
	for _, a := range []string{c.Listen, c.LlamaAddr} {
		if a == "" {
			continue
		}
		if _, p, err := net.SplitHostPort(a); err != nil {
			return bad("address %q: %v", a, err)
		} else if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return bad("address %q: bad port", a)
		}
	}
	if len(c.Tunnel.ServerAddrs) == 0 || c.Tunnel.DomainSuffix == "" {
		return bad("tunnel needs server addresses and a domain suffix")
	}
	if c.Bench.MaxTokens <= 0 || c.Bench.Prompt == "" {
		return bad("bench needs a prompt and max_tokens > 0")
	}
	if !ValidKVType(c.KVType) {
		return bad("kv cache type %q: want f16, q8_0 or q4_0", c.KVType)
	}
	if c.CacheRAMMiB < 0 || c.CtxCheckpoints < 0 {
		return bad("cache_ram_mib = %d, ctx_checkpoints = %d; want >= 0", c.CacheRAMMiB, c.CtxCheckpoints)
	}
	if len(c.Warm) > MaxWarm {
		return bad("%d warm-up prefixes, at most %d", len(c.Warm), MaxWarm)
	}
	total := 0
	for i, w := range c.Warm {
		if w == "" || !utf8.ValidString(w) {
			return bad("warm-up prefix %d is empty or not UTF-8", i)
		}
		total += len(w)
	}
	if total > MaxWarmBytes {
		return bad("warm-up prefixes hold %d bytes, at most %d", total, MaxWarmBytes)
	}
	return nil
}

// Bounds on a deployment's warm-up prefixes: they travel in the bundle's config.json.
const (
	MaxWarm      = 16
	MaxWarmBytes = 4 << 20
)

// WarmError is a warm-up file that cannot be used; it is an input error.
type WarmError struct {
	Path string
	Msg  string
}

func (e *WarmError) Error() string {
	return fmt.Sprintf("deploy: warm-up prefix %s: %s", e.Path, e.Msg)
}

// InputError classifies the error (pipeline.IsInputError).
func (e *WarmError) InputError() bool { return true }

// ReadWarm reads warm-up prefix files: each a non-empty UTF-8 text, all of them within MaxWarmBytes.
func ReadWarm(paths []string) ([]string, error) {
	if len(paths) > MaxWarm {
		return nil, &WarmError{Path: paths[MaxWarm], Msg: fmt.Sprintf("more than %d warm-up prefixes", MaxWarm)}
	}
	var out []string
	total := 0
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, &WarmError{Path: p, Msg: err.Error()}
		}
		if !st.Mode().IsRegular() {
			return nil, &WarmError{Path: p, Msg: "not a regular file"}
		}
		if total += int(st.Size()); st.Size() == 0 || total > MaxWarmBytes {
			return nil, &WarmError{Path: p, Msg: fmt.Sprintf("%d bytes: want a non-empty text, all prefixes together at most %d bytes", st.Size(), MaxWarmBytes)}
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, &WarmError{Path: p, Msg: err.Error()}
		}
		if !utf8.Valid(b) {
			return nil, &WarmError{Path: p, Msg: "not UTF-8 text"}
		}
		out = append(out, string(b))
	}
	return out, nil
}

// fileNameRE is what a name the phone turns into a path may look like: it starts with a letter or digit (so
// never ".", ".." or a hidden file) and holds no separator.
var fileNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$`)

// ValidFileName reports whether s is a plain file name that is safe to join to a folder on the phone: letters,
// digits, '.', '_' and '-', starting with a letter or digit, no "..", at most 200 bytes. The entrypoint
// (runtime/phone/index.js) applies the same rule before it joins a name to its storage folder.
func ValidFileName(s string) bool { return fileNameRE.MatchString(s) && !strings.Contains(s, "..") }

// validModelURL accepts https, and http only on loopback (test Hubs).
func validModelURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return SpecErrorf("deploy: bundle config: model URL %q is not an absolute URL", s)
	}
	if u.User != nil {
		return SpecErrorf("deploy: bundle config: model URL must not carry credentials")
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if ip := net.ParseIP(u.Hostname()); (ip != nil && ip.IsLoopback()) || u.Hostname() == "localhost" {
			return nil
		}
	}
	return SpecErrorf("deploy: bundle config: model URL %q: want https (http only on loopback)", s)
}

// Manifest is manifest.json: Acurast's fields (acurast.md §2.2: name, version, entrypoint, restartPolicy)
// plus phonellm's record of every other file.
type Manifest struct {
	Name          string         `json:"name"`
	Version       int            `json:"version"`
	Entrypoint    string         `json:"entrypoint"`
	RestartPolicy string         `json:"restartPolicy"`
	Phonellm      ManifestRecord `json:"phonellm"`
}

// ManifestRecord lists the bundle's files with their hashes.
type ManifestRecord struct {
	Version string         `json:"version"`
	Files   []ManifestFile `json:"files"`
}

// ManifestFile is one bundled file.
type ManifestFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// BundleOptions says what to build and where.
type BundleOptions struct {
	// Out is the zip to write (atomically).
	Out string
	// Name is the Acurast project name (manifest.json "name").
	Name   string
	Config PhoneConfig
}

// zipTime is every entry's timestamp: 1980-01-01, the zip epoch, as the Acurast CLI does (acurast.md §2.2).
var zipTime = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)

// BuildBundle writes the runtime bundle: a zip with sorted, stored (uncompressed, so identical across Go
// versions) entries and fixed timestamps, so the same inputs give the same bytes and sha256 (and IPFS CID).
func BuildBundle(ctx context.Context, o BundleOptions) (BundleRef, error) {
	if err := ctx.Err(); err != nil {
		return BundleRef{}, err
	}
	if o.Out == "" || o.Name == "" {
		return BundleRef{}, errors.New("deploy: bundle: output path and name are required")
	}
	b, err := BundleBytes(o.Name, o.Config)
	if err != nil {
		return BundleRef{}, err
	}
	sum, err := fsx.WriteFile(o.Out, b)
	if err != nil {
		return BundleRef{}, fmt.Errorf("deploy: bundle: %w", err)
	}
	return BundleRef{Path: o.Out, Size: int64(len(b)), SHA256: sum}, nil
}

// BundleBytes returns the bundle zip in memory (it is small: the entrypoint and two JSON files).
func BundleBytes(name string, cfg PhoneConfig) ([]byte, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	err := fs.WalkDir(phone.Files(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(phone.Files(), p)
		files[p] = b
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("deploy: bundle: embedded phone files: %w", err)
	}
	cj, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("deploy: bundle: config.json: %w", err)
	}
	files["config.json"] = append(cj, '\n')

	m := Manifest{Name: name, Version: 1, Entrypoint: phone.Entrypoint, RestartPolicy: "onFailure",
		Phonellm: ManifestRecord{Version: cfg.PhonellmVersion}}
	names := make([]string, 0, len(files))
	for p := range files {
		names = append(names, p)
	}
	slices.Sort(names)
	for _, p := range names {
		s := sha256.Sum256(files[p])
		m.Phonellm.Files = append(m.Phonellm.Files, ManifestFile{Path: p, Size: int64(len(files[p])), SHA256: hex.EncodeToString(s[:])})
	}
	mj, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("deploy: bundle: manifest.json: %w", err)
	}
	files["manifest.json"] = append(mj, '\n')
	names = append(names, "manifest.json")
	slices.Sort(names)

	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, p := range names {
		h := &zip.FileHeader{Name: p, Method: zip.Store, Modified: zipTime}
		h.SetMode(0o644)
		w, err := zw.CreateHeader(h)
		if err != nil {
			return nil, fmt.Errorf("deploy: bundle: %s: %w", p, err)
		}
		if _, err := w.Write(files[p]); err != nil {
			return nil, fmt.Errorf("deploy: bundle: %s: %w", p, err)
		}
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("deploy: bundle: %w", err)
	}
	return buf.Bytes(), nil
}

// maxBundleEntry bounds one file read back from a bundle; maxBundleFiles bounds the entries.
const (
	maxBundleEntry = 8 << 20
	maxBundleFiles = 64
)

// ReadBundle opens a bundle, checks every file against manifest.json and returns the manifest and config.
// Every name that becomes a path where the bundle is unpacked or run (zip entries, manifest paths, the
// entrypoint, config.json's model.file) must be a plain file name: no separators, no "..". Errors are
// *[BundleError], or the config's *[SpecError].
func ReadBundle(b []byte) (Manifest, PhoneConfig, error) {
	var m Manifest
	var c PhoneConfig
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return m, c, bundleErrorf("%v", err)
	}
	if len(zr.File) > maxBundleFiles {
		return m, c, bundleErrorf("%d entries, at most %d", len(zr.File), maxBundleFiles)
	}
	got := map[string][]byte{}
	for _, f := range zr.File {
		if !ValidFileName(f.Name) {
			return m, c, bundleErrorf("entry %q is not a plain file name (no folders, separators or \"..\")", f.Name)
		}
		if f.UncompressedSize64 > maxBundleEntry {
			return m, c, bundleErrorf("%s: %d bytes, more than %d", f.Name, f.UncompressedSize64, maxBundleEntry)
		}
		if _, dup := got[f.Name]; dup {
			return m, c, bundleErrorf("%s appears twice", f.Name)
		}
		rc, err := f.Open()
		if err != nil {
			return m, c, bundleErrorf("%s: %v", f.Name, err)
		}
		data, err := io.ReadAll(io.LimitReader(rc, maxBundleEntry+1))
		rc.Close()
		if err != nil {
			return m, c, bundleErrorf("%s: %v", f.Name, err)
		}
		if len(data) > maxBundleEntry {
			return m, c, bundleErrorf("%s: more than %d bytes", f.Name, maxBundleEntry)
		}
		got[f.Name] = data
	}
	mj, ok := got["manifest.json"]
	if !ok {
		return m, c, bundleErrorf("no manifest.json")
	}
	if err := json.Unmarshal(mj, &m); err != nil {
		return m, c, bundleErrorf("manifest.json: %v", err)
	}
	if m.Name == "" || len(m.Name) > 128 || strings.ContainsAny(m.Name, "/\\\x00") || strings.Contains(m.Name, "..") {
		return m, c, bundleErrorf("manifest.json: name %q: want 1..128 bytes without separators or \"..\"", m.Name)
	}
	if !ValidFileName(m.Entrypoint) {
		return m, c, bundleErrorf("manifest.json: entrypoint %q is not a plain file name", m.Entrypoint)
	}
	if len(m.Phonellm.Files) != len(got)-1 {
		return m, c, bundleErrorf("manifest lists %d files, zip has %d besides the manifest", len(m.Phonellm.Files), len(got)-1)
	}
	listed := map[string]bool{}
	for _, f := range m.Phonellm.Files {
		if !ValidFileName(f.Path) || f.Path == "manifest.json" || listed[f.Path] {
			return m, c, bundleErrorf("manifest.json: file %q: want a plain file name, listed once, other than the manifest", f.Path)
		}
		listed[f.Path] = true
		data, ok := got[f.Path]
		if !ok {
			return m, c, bundleErrorf("%s is in the manifest but not in the zip", f.Path)
		}
		s := sha256.Sum256(data)
		if int64(len(data)) != f.Size || hex.EncodeToString(s[:]) != f.SHA256 {
			return m, c, bundleErrorf("%s does not match its manifest size/sha256", f.Path)
		}
	}
	if _, ok := got[m.Entrypoint]; !ok {
		return m, c, bundleErrorf("entrypoint %q missing", m.Entrypoint)
	}
	cj, ok := got["config.json"]
	if !ok {
		return m, c, bundleErrorf("no config.json")
	}
	if err := json.Unmarshal(cj, &c); err != nil {
		return m, c, bundleErrorf("config.json: %v", err)
	}
	return m, c, c.Validate()
}
