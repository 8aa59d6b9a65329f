package acurast

// Offline tests against the real @acurast/sdk 1.2.2 (installed by scripts/setup-acurast.sh; nothing is
// downloaded here). Which step runs against what:
//   - deploy call encoding: phonellm's Go encoder vs the SDK's convertConfigToJob + @polkadot/types 16.5.6
//     (on-chain layouts of acurast.md §2.4); no chain.
//   - env encryption: the SDK's JobEnvironmentService (encrypt, processEncryptedHex, decrypt) vs a Go double
//     of the processor/deployer side (ECDH P-256, HKDF-SHA256, AES-256-GCM, acurast.md §2.6).
//   - config validation: the SDK's validateConfig (zod).
//   - IPFS pin: the SDK's uploadScript vs a Pinata-shaped httptest server that checks the form and answers
//     the CIDv0 of the bytes it received.
//   - matcher: an unreachable loopback address (the plan records "not reachable").

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phonellm/phonellm/pipeline/deploy"
)

func testSDK(t *testing.T) *SDK {
	t.Helper()
	s := NewSDK()
	if err := s.Installed(); err != nil {
		t.Fatalf("%v (dir %s)", err, s.Dir)
	}
	return s
}

func sdkRun(t *testing.T, s *SDK, op string, req any, out any) {
	t.Helper()
	raw, err := s.Run(context.Background(), op, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s: %v: %s", op, err, raw)
	}
}

func baseProject() ProjectConfig {
	spec := deploy.Spec{Name: "qwen35-9b", Replicas: 1, APIKeyEnv: "PHONELLM_API_KEY", HFTokenEnv: "HF_TOKEN"}
	o := Options{MinRAMBytes: 12_000_000_000}.withDefaults(func(string) string { return "" })
	return Projects(spec, o, "ipfs://QmT78zSuBmuS4z925WZfrqQ1qHaJ56DQaTfyMUF7F8ff5o", time.UnixMilli(1_800_000_000_123))[0]
}

func TestEncodeDeployCallMatchesSDK(t *testing.T) {
	s := testSDK(t)
	cases := map[string]func(*ProjectConfig){
		"default": func(*ProjectConfig) {},
		"no filters, unattested, no modules": func(p *ProjectConfig) {
			p.BenchmarkFilters, p.OnlyAttestedDevices, p.RequiredModules, p.MinProcessorVersions = nil, false, []string{}, nil
		},
		"canary, cpu filters, reputation, whitelist, 64 replicas, big reward": func(p *ProjectConfig) {
			p.Network = "canary"
			p.BenchmarkFilters = &BenchmarkFilters{MinRamTotalBytes: 16_000_000_000, MinCpuSingleCoreScore: 150_000_000, MinCpuMultiCoreScore: 600_000_000}
			p.MinProcessorReputation = 500_000
			p.ProcessorWhitelist = []string{"5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY", "5FHneW46xGXgs5mUiveU4sbTyGBzmstUspZC92UhjJM694ty"}
			p.NumberOfReplicas = 64
			p.MaxCostPerExecution = 9_000_000_000_000_000
			p.RequiredModules = []string{"DataEncryption", "LLM"}
			p.UsageLimit = UsageLimit{MaxMemory: 1 << 30, MaxNetworkRequests: 100, MaxStorage: 4_000_000_000}
		},
		"competing, mutable, long": func(p *ProjectConfig) {
			p.AssignmentStrategy.Type = "Competing"
			p.Mutability = "Mutable"
			p.Execution.MaxExecutionTimeInMs = 30 * 24 * 3600 * 1000
			p.MinProcessorVersions = &ProcessorVersions{Android: 132}
		},
	}
	type op struct {
		Op  string `json:"op"`
		Req any    `json:"req"`
	}
	var names, gos []string
	var ops []op
	var starts []ProjectConfig
	for name, mut := range cases {
		p := baseProject()
		mut(&p)
		got, err := EncodeDeployCallHex(p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		names, gos, starts = append(names, name), append(gos, got), append(starts, p)
		ops = append(ops, op{"encode-deploy", map[string]any{"config": p, "network": p.Network}})
	}
	var res struct {
		Results []struct {
			OK     bool
			Error  string
			Result struct {
				Call string
				Job  struct {
					Schedule struct{ StartTime, EndTime, Duration int64 }
				}
			}
		}
	}
	sdkRun(t, s, "batch", map[string]any{"ops": ops}, &res) // one Node process for all cases
	if len(res.Results) != len(ops) {
		t.Fatalf("%d results for %d cases", len(res.Results), len(ops))
	}
	for i, r := range res.Results {
		p := starts[i]
		if !r.OK {
			t.Fatalf("%s: sdk: %s", names[i], r.Error)
		}
		if gos[i] != r.Result.Call {
			t.Errorf("%s:\n go  %s\n sdk %s", names[i], gos[i], r.Result.Call)
		}
		sch := r.Result.Job.Schedule
		if sch.StartTime != *p.StartAt.Timestamp || sch.EndTime != *p.StartAt.Timestamp+p.Execution.MaxExecutionTimeInMs+1 {
			t.Errorf("%s: sdk schedule %+v", names[i], sch)
		}
	}
	// The call starts with pallet 43, call 11 and the 53-byte script.
	c, _ := EncodeDeployCall(baseProject())
	if !bytes.HasPrefix(c, append([]byte{43, 11, 53 << 2}, "ipfs://Qm"...)) {
		t.Errorf("call prefix %x", c[:12])
	}
}

func TestConfigValidatedBySDK(t *testing.T) {
	s := testSDK(t)
	good := baseProject()
	bad := baseProject()
	bad.NumberOfReplicas = 0
	bad.Execution.MaxExecutionTimeInMs = 0
	var v struct{ Results []struct{ OK bool } }
	sdkRun(t, s, "validate", map[string]any{"configs": []ProjectConfig{good, bad}}, &v)
	if len(v.Results) != 2 || !v.Results[0].OK || v.Results[1].OK {
		t.Fatalf("validate: %+v", v)
	}
}

// compressP256 returns the 33-byte compressed form of an uncompressed P-256 point.
func compressP256(raw []byte) []byte {
	c := make([]byte, 33)
	c[0] = 2 | raw[64]&1
	copy(c[1:], raw[1:33])
	return c
}

// envKey is the processor-side double of the SDK's generateSharedKey (acurast.md §2.6): ECDH x-coordinate as
// a big-endian integer without leading zero bytes (the SDK takes elliptic's BN.toArray()), HKDF-SHA256 with a
// 16-byte zero salt and info = label || sort(pub1, pub2).
func envKey(t *testing.T, priv *ecdh.PrivateKey, peerCompressed []byte) []byte {
	t.Helper()
	x, y := elliptic.UnmarshalCompressed(elliptic.P256(), peerCompressed)
	if x == nil {
		t.Fatalf("bad compressed key %x", peerCompressed)
	}
	peer, err := ecdh.P256().NewPublicKey(elliptic.Marshal(elliptic.P256(), x, y))
	if err != nil {
		t.Fatal(err)
	}
	shared, err := priv.ECDH(peer)
	if err != nil {
		t.Fatal(err)
	}
	shared = bytes.TrimLeft(shared, "\x00")
	mine := compressP256(priv.PublicKey().Bytes())
	a, b := mine, peerCompressed
	if bytes.Compare(a, b) > 0 {
		a, b = b, a
	}
	info := append(append([]byte("ECDH secp256r1 AES-256-GCM-SIV"), a...), b...)
	k, err := hkdf.Key(sha256.New, shared, make([]byte, 16), string(info), 32)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestEnvEncryptionRoundTrip(t *testing.T) {
	s := testSDK(t)
	vars := []map[string]string{
		{"key": "PHONELLM_API_KEY", "value": "sk-phonellm-" + strings.Repeat("x", 40)},
		{"key": "HF_TOKEN", "value": "hf_abcdefghijklmnopqrstuvwxyz"},
		{"key": "TUNNEL_KEY", "value": strings.Repeat("QUJD", 46)},
	}
	for range 2 { // fresh keys each time
		proc, _ := ecdh.P256().GenerateKey(rand.Reader)
		procPub := compressP256(proc.PublicKey().Bytes())

		// 1. The SDK encrypts for the processor (as setEnvironments would submit); Go decrypts as the phone.
		var env struct {
			Curve     string
			PublicKey string
			Variables [][2]string
		}
		sdkRun(t, s, "env-encrypt", map[string]any{"processorPublicKey": hex.EncodeToString(procPub), "curve": "p256", "vars": vars}, &env)
		if env.Curve != "p256" || len(env.Variables) != len(vars) {
			t.Fatalf("env-encrypt: %+v", env)
		}
		deployerPub, _ := hex.DecodeString(env.PublicKey)
		if len(deployerPub) != 33 {
			t.Fatalf("deployer key %q is not a compressed P-256 point", env.PublicKey)
		}
		key := envKey(t, proc, deployerPub)
		gcm, _ := cipher.NewGCM(must(aes.NewCipher(key)))
		for j, kv := range env.Variables {
			name, _ := hex.DecodeString(kv[0])
			blob, _ := hex.DecodeString(kv[1])
			if string(name) != vars[j]["key"] || len(blob) != 12+len(vars[j]["value"])+16 {
				t.Fatalf("variable %d: name %q, %d bytes", j, name, len(blob))
			}
			plain, err := gcm.Open(nil, blob[:12], blob[12:], nil)
			if err != nil || string(plain) != vars[j]["value"] {
				t.Fatalf("variable %s: Go could not decrypt the SDK's value: %v", name, err)
			}
		}

		// 2. Go encrypts as the deployer; the SDK's own decode (processEncryptedHex + decrypt) reads it as the
		// processor.
		dep, _ := ecdh.P256().GenerateKey(rand.Reader)
		depPub := compressP256(dep.PublicKey().Bytes())
		gcm2, _ := cipher.NewGCM(must(aes.NewCipher(envKey(t, dep, procPub))))
		var enc [][2]string
		for _, v := range vars {
			iv := make([]byte, 12)
			rand.Read(iv)
			enc = append(enc, [2]string{hex.EncodeToString([]byte(v["key"])), "0x" + hex.EncodeToString(gcm2.Seal(iv, iv, []byte(v["value"]), nil))})
		}
		var dec struct{ Vars []map[string]string }
		sdkRun(t, s, "env-decrypt", map[string]any{"processorPrivateKey": hex.EncodeToString(proc.Bytes()), "deployerPublicKey": hex.EncodeToString(depPub), "curve": "p256", "variables": enc}, &dec)
		for j := range vars {
			if dec.Vars[j]["key"] != vars[j]["key"] || dec.Vars[j]["value"] != vars[j]["value"] {
				t.Fatalf("SDK decoded %v, want %v", dec.Vars[j], vars[j])
			}
		}
		// A flipped byte fails the SDK's authentication.
		b := []byte(enc[0][1])
		b[len(b)-1] ^= 1
		if b[len(b)-1] > 'f' || (b[len(b)-1] > '9' && b[len(b)-1] < 'a') {
			b[len(b)-1] = '0'
		}
		enc[0][1] = string(b)
		if _, err := s.Run(context.Background(), "env-decrypt", map[string]any{"processorPrivateKey": hex.EncodeToString(proc.Bytes()), "deployerPublicKey": hex.EncodeToString(depPub), "curve": "p256", "variables": enc[:1]}, nil); err == nil {
			t.Fatal("the SDK decrypted a tampered value")
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestTunnelKeyMatchesNode(t *testing.T) {
	s := testSDK(t)
	for range 3 {
		k, err := NewTunnelKey("acu.run")
		if err != nil {
			t.Fatal(err)
		}
		var r struct{ ClientID string }
		sdkRun(t, s, "tunnel-id", map[string]string{"key": k.Key}, &r)
		if r.ClientID != k.ClientID || k.URL != "https://"+k.ClientID+".acu.run" || len(k.ClientID) != 16 {
			t.Fatalf("go %+v, node %s", k, r.ClientID)
		}
		if b, _ := json.Marshal(k); bytes.Contains(b, []byte(k.Key)) {
			t.Fatal("TunnelKey marshals its secret")
		}
	}
}

// pinata is a stand-in for the Pinata pinFileToIPFS API shape the SDK uses (acurast.md §2.3).
func pinata(t *testing.T, pinned *[][]byte) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/pinning/pinFileToIPFS" || r.Header.Get("Authorization") != "Bearer test-ipfs-key" {
			http.Error(w, "bad request line or auth", 400)
			return
		}
		if err := r.ParseMultipartForm(1 << 20); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		if r.FormValue("pinataOptions") != `{"cidVersion": 0}` {
			http.Error(w, "want cidVersion 0", 400)
			return
		}
		f, h, err := r.FormFile("file")
		if err != nil || h.Filename != "script.js" {
			http.Error(w, "want file script.js", 400)
			return
		}
		b, _ := io.ReadAll(f)
		*pinned = append(*pinned, b)
		cid, _ := CIDv0(b)
		json.NewEncoder(w).Encode(map[string]any{"IpfsHash": cid, "PinSize": len(b), "Timestamp": "2026-11-29T00:00:00Z"})
	}))
}

func TestDryRunPlan(t *testing.T) {
	s := testSDK(t)
	const apiKey, hfToken = "sk-phonellm-plan-secret-0001", "hf_plan_secret_token_0002"
	const mnemonic = "bottom drive obey lake curtain smoke basket hold race lonely fit walk"
	env := map[string]string{"PHONELLM_API_KEY": apiKey, "HF_TOKEN": hfToken, MnemonicEnv: mnemonic, "ACURAST_IPFS_API_KEY": "test-ipfs-key"}
	dir := t.TempDir()
	spec := deploy.Spec{Name: "Qwen3.5 9B fraud", Replicas: 3, Ctx: 8192, Slots: 1,
		Model:     deploy.ModelRef{ID: "me/qwen35-9b-fraud", URL: "https://huggingface.co/me/qwen35-9b-fraud/resolve/main/q4_k_m.gguf", Size: 5_600_000_000, SHA256: strings.Repeat("c", 64)},
		APIKeyEnv: "PHONELLM_API_KEY", HFTokenEnv: "HF_TOKEN"}
	ref, err := deploy.BuildBundle(context.Background(), deploy.BundleOptions{Out: filepath.Join(dir, "bundle.zip"), Name: "qwen", Config: deploy.NewPhoneConfig(spec, "test")})
	if err != nil {
		t.Fatal(err)
	}
	spec.Bundle = &ref
	spec.Target, _ = json.Marshal(Options{MinRAMBytes: 12_000_000_000, DryRun: true, Matcher: "http://127.0.0.1:1"})
	var stderr bytes.Buffer
	s.Stderr = &stderr
	store := deploy.NewStore(filepath.Join(dir, "state"))
	now := time.Now().UTC().Truncate(time.Millisecond)
	f := &Fleet{Store: store, SDK: s, Dir: filepath.Join(dir, "acurast"), Getenv: func(k string) string { return env[k] }, Now: func() time.Time { return now }}
	d, err := f.Deploy(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != deploy.StatePlanned || len(d.Replicas) != 3 {
		t.Fatalf("deployment %+v", d)
	}
	var ex Extra
	json.Unmarshal(d.Extra, &ex)
	p := ex.Plan
	zb, _ := os.ReadFile(ref.Path)
	cid, _ := CIDv0(zb)
	if p == nil || p.Script != "ipfs://"+cid || p.Bundle.SHA256 != ref.SHA256 || len(p.Calls) != 3 || len(p.Projects) != 3 {
		t.Fatalf("plan %+v", p)
	}
	if p.SDK == nil || !p.SDK.Valid || !p.SDK.CallsMatch || p.SDK.Version != SDKVersion {
		t.Errorf("sdk check %+v", p.SDK)
	}
	if p.Cost.Locked != "2400000000000" || p.Cost.LockedACU != "2.4" || p.Cost.Matcher == nil || p.Cost.Matcher.Reachable {
		t.Errorf("cost %+v matcher %+v", p.Cost, p.Cost.Matcher)
	}
	if p.DomainSuffix != "acu.run" {
		t.Errorf("domain suffix %q", p.DomainSuffix)
	}
	if !p.StartAt.Equal(now.Add(5*time.Minute)) || strings.Join(p.Env, ",") != "PHONELLM_API_KEY,HF_TOKEN,TUNNEL_KEY" {
		t.Errorf("start %v env %v", p.StartAt, p.Env)
	}
	cfg, err := os.ReadFile(p.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	var cf ConfigFile
	if err := json.Unmarshal(cfg, &cf); err != nil || len(cf.Projects) != 3 {
		t.Fatalf("acurast.json: %v %s", err, cfg)
	}
	pc := cf.Projects["qwen3.5-9b-fraud-r1"]
	if pc.BenchmarkFilters == nil || pc.BenchmarkFilters.MinRamTotalBytes != 12_000_000_000 || !pc.OnlyAttestedDevices || pc.NumberOfReplicas != 1 ||
		pc.MaxCostPerExecution != 800_000_000_000 || pc.RequiredModules[0] != "LLM" || pc.MinProcessorVersions.Android != 128 {
		t.Errorf("project r1 %+v", pc)
	}
	// Loaded back from another "shell".
	got, err := deploy.NewStore(filepath.Join(dir, "state")).Load(d.ID)
	if err != nil || got.State != deploy.StatePlanned {
		t.Fatalf("state: %v %+v", err, got)
	}
	st, err := f.Status(context.Background(), d.ID)
	if err != nil || st.State != deploy.StatePlanned {
		t.Errorf("status %+v %v", st, err)
	}
	// Secrets: nowhere in the bundle, acurast.json, the state file or the driver's stderr.
	stateFile, _ := os.ReadFile(filepath.Join(dir, "state", "deployments", d.ID+".json"))
	for what, b := range map[string][]byte{"bundle": zb, "acurast.json": cfg, "state": stateFile, "driver stderr": stderr.Bytes()} {
		if deploy.ContainsSecret(b, apiKey, hfToken, mnemonic, "test-ipfs-key") {
			t.Errorf("a secret appears in the %s", what)
		}
	}

	// Pin step against the Pinata stand-in: the SDK uploads the bundle and gets the CID phonellm computed.
	var pinned [][]byte
	srv := pinata(t, &pinned)
	defer srv.Close()
	s.Env = append(os.Environ(), "ACURAST_IPFS_API_KEY=test-ipfs-key")
	var pr struct{ URL string }
	sdkRun(t, s, "pin", map[string]any{"file": ref.Path, "endpoint": srv.URL}, &pr)
	if pr.URL != p.Script || len(pinned) != 1 || !bytes.Equal(pinned[0], zb) {
		t.Fatalf("pin returned %s (plan %s), %d uploads", pr.URL, p.Script, len(pinned))
	}

	// Without a mnemonic a real deploy stops before pinning or signing anything.
	delete(env, MnemonicEnv)
	spec.Target, _ = json.Marshal(Options{MinRAMBytes: 12_000_000_000, IPFS: srv.URL, Matcher: "http://127.0.0.1:1", RPC: "ws://127.0.0.1:1"})
	if _, err := f.Deploy(context.Background(), spec); err == nil || !strings.Contains(err.Error(), MnemonicEnv) {
		t.Fatalf("deploy without mnemonic: %v", err)
	}
	if len(pinned) != 1 {
		t.Fatal("the bundle was pinned without a mnemonic")
	}
}

func TestCanaryBundle(t *testing.T) {
	dir := t.TempDir()
	spec := deploy.Spec{Name: "c", Replicas: 2, Model: deploy.ModelRef{URL: "https://h/m.gguf", Size: 1, SHA256: strings.Repeat("a", 64)}, APIKeyEnv: "K",
		Target: json.RawMessage(`{"network":"canary","max_cost_per_execution":10000000000}`)}
	cfg, err := PhoneConfig(spec, "t")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := deploy.BuildBundle(context.Background(), deploy.BundleOptions{Out: filepath.Join(dir, "b.zip"), Name: "c", Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	spec.Bundle = &ref
	f := &Fleet{Store: deploy.NewStore(dir), Dir: dir, Getenv: func(string) string { return "" }}
	p, err := f.Plan(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if p.DomainSuffix != "canary.acu.run" || p.Endpoints.RPC != DefaultCanaryRPC || p.Endpoints.Matcher != DefaultCanaryMatcher ||
		p.Cost.Locked != "20000000000" || p.Cost.LockedACU != "0.02" || p.Projects[0].Network != "canary" {
		t.Fatalf("canary plan %+v", p)
	}
}

func TestPlanRejects(t *testing.T) {
	dir := t.TempDir()
	spec := deploy.Spec{Name: "x", Replicas: 1, Model: deploy.ModelRef{URL: "https://h/m.gguf", Size: 1, SHA256: strings.Repeat("a", 64)}, APIKeyEnv: "K"}
	ref, err := deploy.BuildBundle(context.Background(), deploy.BundleOptions{Out: filepath.Join(dir, "b.zip"), Name: "x", Config: deploy.NewPhoneConfig(spec, "t")})
	if err != nil {
		t.Fatal(err)
	}
	f := &Fleet{Store: deploy.NewStore(dir), Dir: dir, Getenv: func(string) string { return "" }}
	for name, mut := range map[string]func(*deploy.Spec){
		"no bundle":     func(s *deploy.Spec) { s.Bundle = nil },
		"no api key":    func(s *deploy.Spec) { s.APIKeyEnv = "" },
		"local model":   func(s *deploy.Spec) { s.Model.URL = "" },
		"bad network":   func(s *deploy.Spec) { s.Target = json.RawMessage(`{"network":"devnet"}`) },
		"unknown field": func(s *deploy.Spec) { s.Target = json.RawMessage(`{"replicas":3}`) },
		"other model":   func(s *deploy.Spec) { s.Model.SHA256 = strings.Repeat("b", 64) },
		"other key var": func(s *deploy.Spec) { s.APIKeyEnv = "OTHER_KEY" },
		"canary bundle": func(s *deploy.Spec) { s.Target = json.RawMessage(`{"network":"canary"}`) },
		"short delay":   func(s *deploy.Spec) { s.Target = json.RawMessage(`{"start_delay":60000000000}`) },
		"bad module":    func(s *deploy.Spec) { s.Target = json.RawMessage(`{"required_modules":["GPU"]}`) },
	} {
		s := spec
		s.Bundle = &ref
		mut(&s)
		if _, err := f.Plan(context.Background(), s); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
