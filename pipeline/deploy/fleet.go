package deploy

import (
	"context"
	"encoding/json"
	"regexp"
	"time"
)

// Fleet is a deployment target: it starts N replicas of one model, reports their state and stops them.
// Implementations keep their state in a [Store] so that another process can ask for Status or Stop.
type Fleet interface {
	// Deploy starts spec.Replicas replicas and returns once the deployment is recorded (replicas may still be
	// starting; poll Status for readiness).
	Deploy(ctx context.Context, spec Spec) (Deployment, error)
	// Status reports every replica with its URL, state and health.
	Status(ctx context.Context, id string) (Status, error)
	// Endpoints lists the replica URLs a gateway should route to (healthy or not; the gateway checks).
	Endpoints(ctx context.Context, id string) ([]Endpoint, error)
	// Stop stops every replica and marks the deployment stopped.
	Stop(ctx context.Context, id string) error
}

// Spec is what to deploy. It holds no secret: the API key and Hub token are named by the environment variables
// that carry them (APIKeyEnv, HFTokenEnv), and each target moves the values itself (a process environment, or
// per-phone encrypted variables on Acurast).
type Spec struct {
	// Name is a human label ("qwen35-9b-fraud"); the deployment ID is derived from it.
	Name string `json:"name"`
	// Replicas is the number of serving replicas (1..64).
	Replicas int `json:"replicas"`
	// Model is the GGUF to serve.
	Model ModelRef `json:"model"`
	// Ctx is the context size in tokens per slot; the server is started with Ctx*Slots.
	Ctx int `json:"ctx"`
	// Slots is the number of parallel sequences per replica (llama-server --parallel).
	Slots int `json:"slots"`
	// Threads per replica; 0 lets the replica choose (the phone benchmarks its Candidates).
	Threads int `json:"threads,omitempty"`
	// Candidates are thread/batch settings a replica tries before keeping the fastest. Empty means one
	// candidate built from Threads.
	Candidates []Settings `json:"candidates,omitempty"`
	// MemoryLimit is the RAM budget per replica in bytes (a phone's usable RAM, from the fit profile); 0 = none.
	MemoryLimit int64 `json:"memory_limit_bytes,omitempty"`
	// KVType is the replicas' KV cache type: "" or "f16", "q8_0", "q4_0" (llama-server -ctk/-ctv, phonellm
	// serve --kv-type). The fit check counts it.
	KVType string `json:"kv_type,omitempty"`
	// CacheRAM is the host-memory prompt cache of each phone's llama-server in bytes (--cache-ram), sized by
	// the fit check from the profile's headroom; 0 = none.
	CacheRAM int64 `json:"cache_ram_bytes,omitempty"`
	// CtxCheckpoints is llama-server's --ctx-checkpoints: recurrent-state checkpoints kept per slot for hybrid
	// models (0 = DefaultCtxCheckpoints).
	CtxCheckpoints int `json:"ctx_checkpoints,omitempty"`
	// Warm lists text files (absolute paths) of the shared prefixes — rubrics sent as system messages — that
	// every replica evaluates at start, so that the first real request sharing one is a cache hit.
	Warm []string `json:"warm,omitempty"`
	// APIKeyEnv names the variable holding the key clients must send as "Authorization: Bearer <key>".
	// Empty means the replicas accept requests without a key (local only).
	APIKeyEnv string `json:"api_key_env,omitempty"`
	// HFTokenEnv names the variable holding a Hub token, for private model repos.
	HFTokenEnv string `json:"hf_token_env,omitempty"`
	// Bundle is the runtime bundle the replicas run (required by remote targets).
	Bundle *BundleRef `json:"bundle,omitempty"`
	// Target holds target-specific options as JSON (for example acurast.Options); each target documents
	// and decodes its own.
	Target json.RawMessage `json:"target,omitempty"`
}

// ModelRef names the model file: where replicas download it from, what it must hash to, and (for local
// targets) where it already is.
type ModelRef struct {
	// ID is the model name served on /v1/models ("phonellm/qwen35-9b-q4_k_m").
	ID string `json:"id,omitempty"`
	// URL is the Hub resolve URL (https://huggingface.co/<repo>/resolve/<rev>/<file>).
	URL string `json:"url,omitempty"`
	// Size in bytes and lowercase hex SHA256 of the file; replicas refuse a file that does not match.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Path is a local copy (used by local targets instead of URL).
	Path string `json:"path,omitempty"`
}

// Settings is one llama-server setting a replica may run with.
type Settings struct {
	Threads   int  `json:"threads"`
	Batch     int  `json:"batch,omitempty"`
	UBatch    int  `json:"ubatch,omitempty"`
	FlashAttn bool `json:"flash_attn,omitempty"`
}

// BundleRef is a built runtime bundle.
type BundleRef struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Deployment is the recorded state of one deploy; it is what the [Store] keeps.
type Deployment struct {
	ID        string    `json:"id"`
	Target    string    `json:"target"`
	Spec      Spec      `json:"spec"`
	CreatedAt time.Time `json:"created_at"`
	State     State     `json:"state"`
	Replicas  []Replica `json:"replicas"`
	// Gateway is the OpenAI endpoint the target runs in front of the replicas, when it runs one (the local
	// target does; phones are reached through their own URLs).
	Gateway *Gateway `json:"gateway,omitempty"`
	// Extra is target-specific state as JSON (Acurast job IDs, processor addresses, IPFS CID, ...).
	Extra json.RawMessage `json:"extra,omitempty"`
}

// Replica is one serving instance.
type Replica struct {
	Index int    `json:"index"`
	URL   string `json:"url"` // base URL; the OpenAI API is under URL + "/v1"
	// Ref identifies the replica within its target: a PID, an Acurast job ID, a processor address.
	Ref   string `json:"ref,omitempty"`
	State State  `json:"state"`
}

// Gateway is a gateway a target runs in front of a deployment's replicas.
type Gateway struct {
	// URL is the gateway's base URL; the OpenAI API is under URL + "/v1".
	URL string `json:"url"`
	// Identity is a random value chosen when the deployment is made. The gateway sends it in the
	// [GatewayIdentityHeader] of every answer, so that ship and status can tell their own gateway from another
	// server answering on the same port. It is an identity, not a credential.
	Identity string `json:"identity"`
	State    State  `json:"state"`
}

// GatewayIdentityHeader is the response header that carries [Gateway.Identity].
const GatewayIdentityHeader = "Phonellm-Gateway-Identity"

// State is the life-cycle state of a deployment or replica.
type State string

// States.
const (
	StatePlanned  State = "planned"  // dry run: nothing started or signed
	StatePending  State = "pending"  // submitted, waiting (for a match, a process, a download)
	StateStarting State = "starting" // running, not yet answering /health
	StateReady    State = "ready"    // answering /health
	StateDegraded State = "degraded" // some replicas ready, some not
	StateFailed   State = "failed"
	StateStopped  State = "stopped"
)

// Status is the live view of a deployment.
type Status struct {
	ID       string          `json:"id"`
	Target   string          `json:"target"`
	State    State           `json:"state"`
	Replicas []ReplicaStatus `json:"replicas"`
	// Gateway is the gateway's live view, when the deployment has one. The deployment is ready only while
	// its gateway is.
	Gateway *GatewayStatus `json:"gateway,omitempty"`
}

// GatewayStatus is the gateway with its last check: Healthy means its process runs and it answered with the
// deployment's identity.
type GatewayStatus struct {
	Gateway
	Healthy   bool            `json:"healthy"`
	CheckedAt time.Time       `json:"checked_at,omitzero"`
	Detail    json.RawMessage `json:"detail,omitempty"`
	Error     string          `json:"error,omitempty"`
}

// ReplicaStatus is a replica with its last health check.
type ReplicaStatus struct {
	Replica
	Healthy   bool      `json:"healthy"`
	CheckedAt time.Time `json:"checked_at,omitzero"`
	// Detail is the replica's own status JSON (model hash, settings chosen, tok/s) when it answered, or the
	// error of the check.
	Detail json.RawMessage `json:"detail,omitempty"`
	Error  string          `json:"error,omitempty"`
	// Cache is what the replica reported about reusing prompts, when it is known: counted by the deployment's
	// gateway (local target) or by the phone's entrypoint.
	Cache *CacheStats `json:"cache,omitempty"`
}

// CacheStats counts the answers of a replica that reported their prompt tokens: Hits reused at least half of
// the prompt from the replica's cache; HitRate is CachedTokens/PromptTokens.
type CacheStats struct {
	Requests     int64   `json:"requests"`
	Hits         int64   `json:"hits"`
	PromptTokens int64   `json:"prompt_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	HitRate      float64 `json:"hit_rate"`
	// Source says who counted: "gateway" or "replica".
	Source string `json:"source"`
}

// Endpoint is a replica URL a gateway routes to.
type Endpoint struct {
	Replica int    `json:"replica"`
	URL     string `json:"url"`
	// Slots is how many requests the replica serves at once.
	Slots int `json:"slots"`
	// APIKeyEnv names the variable holding the key to send to the replica (empty: none).
	APIKeyEnv string `json:"api_key_env,omitempty"`
}

// Endpoints is the default [Fleet.Endpoints] of a recorded deployment: every replica with a URL.
func (d Deployment) Endpoints() []Endpoint {
	var out []Endpoint
	for _, r := range d.Replicas {
		if r.URL == "" {
			continue
		}
		out = append(out, Endpoint{Replica: r.Index, URL: r.URL, Slots: max(d.Spec.Slots, 1), APIKeyEnv: d.Spec.APIKeyEnv})
	}
	return out
}

// Aggregate is the deployment state implied by its replicas' states.
func Aggregate(rs []State) State {
	if len(rs) == 0 {
		return StatePending
	}
	n := map[State]int{}
	for _, s := range rs {
		n[s]++
	}
	switch {
	case n[StateReady] == len(rs):
		return StateReady
	case n[StateStopped] == len(rs):
		return StateStopped
	case n[StateFailed] == len(rs):
		return StateFailed
	case n[StatePlanned] == len(rs):
		return StatePlanned
	case n[StateReady] > 0:
		return StateDegraded
	case n[StateStarting] > 0:
		return StateStarting
	default:
		return StatePending
	}
}

// MaxReplicas is the most replicas one deployment may have (Acurast's MaxSlots, runtime/common types.rs).
const MaxReplicas = 64

// DefaultCtxCheckpoints is the --ctx-checkpoints phones run with: llama-server makes one where the latest user
// message starts (the end of the shared system prompt, in builds that know it) and two near the end of each
// prompt, and keeps the newest per slot.
const DefaultCtxCheckpoints = 3

// ValidKVType reports whether t is a KV cache type every replica runtime accepts.
func ValidKVType(t string) bool {
	switch t {
	case "", "f16", "q8_0", "q4_0":
		return true
	}
	return false
}

var (
	envName = regexp.MustCompile(`^[A-Z_][A-Z0-9_]{0,31}$`)
	hex64   = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Validate checks a Spec for what every target needs. Errors are *[SpecError].
func (s Spec) Validate() error {
	bad := func(format string, args ...any) error { return SpecErrorf("deploy: spec: "+format, args...) }
	if s.Name == "" {
		return bad("name is empty")
	}
	if s.Replicas < 1 || s.Replicas > MaxReplicas {
		return bad("replicas = %d, want 1..%d", s.Replicas, MaxReplicas)
	}
	if s.Model.Size <= 0 {
		return bad("model size = %d, want > 0", s.Model.Size)
	}
	if !hex64.MatchString(s.Model.SHA256) {
		return bad("model sha256 %q is not 64 lowercase hex digits", s.Model.SHA256)
	}
	if s.Model.URL == "" && s.Model.Path == "" {
		return bad("model has neither a URL nor a local path")
	}
	if s.Ctx < 0 || s.Slots < 0 || s.Threads < 0 || s.MemoryLimit < 0 || s.CacheRAM < 0 || s.CtxCheckpoints < 0 {
		return bad("ctx, slots, threads, memory limit, cache RAM and checkpoints must not be negative")
	}
	if !ValidKVType(s.KVType) {
		return bad("kv cache type %q: want f16, q8_0 or q4_0", s.KVType)
	}
	if len(s.Warm) > MaxWarm {
		return bad("%d warm-up prefixes, at most %d", len(s.Warm), MaxWarm)
	}
	for i, w := range s.Warm {
		if w == "" {
			return bad("warm-up prefix %d has no file", i)
		}
	}
	for _, e := range []string{s.APIKeyEnv, s.HFTokenEnv} {
		if e != "" && !envName.MatchString(e) {
			return bad("%q is not an environment variable name (A-Z, 0-9, _; at most 32)", e)
		}
	}
	for i, c := range s.Candidates {
		if c.Threads < 1 || c.Batch < 0 || c.UBatch < 0 {
			return bad("candidate %d: threads = %d, batch = %d, ubatch = %d", i, c.Threads, c.Batch, c.UBatch)
		}
	}
	return nil
}
