package acurast

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/deploy"
)

// Target is the name of this target in deploy.Deployment.Target.
const Target = "acurast"

// MnemonicEnv is the only place the deployer's mnemonic is read from (by the Node driver).
const MnemonicEnv = "ACURAST_MNEMONIC"

// Fleet deploys to Acurast phones. It implements deploy.Fleet.
type Fleet struct {
	Store *deploy.Store
	SDK   *SDK
	// Dir is where plans, acurast.json and driver work files go (per deployment: Dir/<id>/).
	Dir string
	// Getenv reads secrets and endpoint overrides (os.Getenv when nil).
	Getenv func(string) string
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// HTTP checks replica health (a 5 s timeout client when nil).
	HTTP     *http.Client
	Reporter pipeline.Reporter
	// Network is the network Ship deploys to: "mainnet" (default) or "canary".
	Network string
}

var _ deploy.Fleet = (*Fleet)(nil)

func (f *Fleet) getenv(k string) string {
	if f.Getenv != nil {
		return f.Getenv(k)
	}
	return os.Getenv(k)
}

func (f *Fleet) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

func (f *Fleet) reporter() pipeline.Reporter {
	if f.Reporter != nil {
		return f.Reporter
	}
	return pipeline.Discard
}

// Plan is a dry run's output: everything that would be submitted, nothing signed.
type Plan struct {
	ID      string           `json:"id"`
	Network string           `json:"network"`
	Bundle  deploy.BundleRef `json:"bundle"`
	// Script is ipfs://<CIDv0> of the bundle, computed offline; the pin must return the same.
	Script     string          `json:"script"`
	ConfigPath string          `json:"config_path"`
	Projects   []ProjectConfig `json:"projects"`
	// Calls are the SCALE-encoded AcurastMarketplace.deploy calls (0x hex), one per replica, for a start at
	// StartAt (a real deploy recomputes the start when it submits).
	Calls   []string  `json:"deploy_calls"`
	StartAt time.Time `json:"start_at"`
	// Env lists the names of the per-phone encrypted variables (never values).
	Env []string `json:"env"`
	// DomainSuffix is the tunnel domain of the bundle: replica URLs are https://<client id>.<suffix>.
	DomainSuffix string `json:"domain_suffix"`
	// ModelURL is where the phones download the model from.
	ModelURL string `json:"model_url"`
	// LifetimeMS is how long each phone serves (the job's maxExecutionTimeInMs): the jobs end at EndAt and
	// the deployment stops serving then; ship again to go on.
	LifetimeMS int64     `json:"lifetime_ms"`
	EndAt      time.Time `json:"end_at"`
	// MinRAMBytes is the RAM floor phones must report to be matched (benchmarkFilters.minRamTotalBytes; 0:
	// none).
	MinRAMBytes int64     `json:"min_ram_bytes"`
	Cost        Cost      `json:"cost"`
	Endpoints   Endpoints `json:"endpoints"`
	// SDK is the cross-check by the installed @acurast/sdk (absent when it is not installed).
	SDK   *SDKCheck `json:"sdk,omitempty"`
	Notes []string  `json:"notes,omitempty"`
}

// Endpoints are the network services a deploy talks to.
type Endpoints struct {
	RPC     string `json:"rpc"`
	IPFS    string `json:"ipfs"`
	Matcher string `json:"matcher"`
}

// SDKCheck is what the SDK said about the plan.
type SDKCheck struct {
	Version string `json:"version"`
	// Valid: the SDK's validateConfig accepted every project.
	Valid bool `json:"valid"`
	// CallsMatch: the SDK's convertConfigToJob + @polkadot/types encoding equals phonellm's for every replica.
	CallsMatch bool `json:"calls_match"`
}

// Extra is the Acurast part of a recorded deployment (deploy.Deployment.Extra).
type Extra struct {
	Network string     `json:"network"`
	Script  string     `json:"script"`
	Address string     `json:"address,omitempty"`
	RPC     string     `json:"rpc"`
	Config  string     `json:"config_path"`
	Jobs    []JobState `json:"jobs"`
	Plan    *Plan      `json:"plan,omitempty"`
}

// JobState is one replica's on-chain job.
type JobState struct {
	Replica  int    `json:"replica"`
	Project  string `json:"project"`
	ClientID string `json:"client_id,omitempty"`
	// JobID is the job sequence number of the owner (Acurast:<owner>:<JobID>), 0 before registration.
	JobID  int64  `json:"job_id,omitempty"`
	Status string `json:"status,omitempty"` // last SDK status (Submit, WaitingForMatch, Matched, Acknowledged, EnvironmentVariablesSet)
	EnvSet bool   `json:"env_set"`
}

func decodeOptions(spec deploy.Spec) (Options, error) {
	var o Options
	if len(spec.Target) > 0 {
		dec := json.NewDecoder(strings.NewReader(string(spec.Target)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&o); err != nil {
			return o, deploy.SpecErrorf("acurast: target options: %v", err)
		}
	}
	return o, nil
}

// Plan builds the dry-run plan for spec: it checks everything, writes acurast.json under Dir/<id>/ and
// returns what Deploy would submit. It signs nothing and needs no mnemonic. When the SDK is installed it
// validates the configs and cross-checks the call encoding with it, and asks the matcher for a price.
func (f *Fleet) Plan(ctx context.Context, spec deploy.Spec) (Plan, error) {
	if err := spec.Validate(); err != nil {
		return Plan{}, err
	}
	o, err := decodeOptions(spec)
	if err != nil {
		return Plan{}, err
	}
	o = o.withDefaults(f.getenv)
	if err := o.Validate(); err != nil {
		return Plan{}, err
	}
	if spec.Bundle == nil || spec.Bundle.Path == "" {
		return Plan{}, errors.New("acurast: spec has no bundle (build it with deploy.BuildBundle)")
	}
	var notes []string
	switch {
	case spec.Model.URL == "":
		return Plan{}, deploy.SpecErrorf("acurast: the spec has no model URL: phones download the model (publish it to the Hub)")
	case !strings.HasPrefix(spec.Model.URL, "https://") && !(o.DryRun && loopbackHTTP(spec.Model.URL)):
		return Plan{}, deploy.SpecErrorf("acurast: model URL %q is not https: phones download the model over https from the internet", spec.Model.URL)
	case !strings.HasPrefix(spec.Model.URL, "https://"):
		notes = append(notes, "model URL "+spec.Model.URL+" is a local test Hub: phones cannot reach it, and the real deploy refuses it")
	}
	if spec.APIKeyEnv == "" {
		return Plan{}, deploy.SpecErrorf("acurast: an API key variable is required: phones are reachable from the internet")
	}
	names := envNames(spec)
	if len(names) > 10 {
		return Plan{}, deploy.SpecErrorf("acurast: %d environment variables, at most 10", len(names))
	}
	b, err := os.ReadFile(spec.Bundle.Path)
	if err != nil {
		return Plan{}, fmt.Errorf("acurast: bundle: %w", err)
	}
	_, pc, err := deploy.ReadBundle(b)
	if err != nil {
		return Plan{}, err
	}
	// The bundle must be the one built for this spec and network.
	wantSuffix := deploy.MainnetTunnel.DomainSuffix
	if o.Network == "canary" {
		wantSuffix = deploy.CanaryTunnel.DomainSuffix
	}
	switch {
	case pc.Model.SHA256 != spec.Model.SHA256 || pc.Model.Size != spec.Model.Size || pc.Model.URL != spec.Model.URL:
		return Plan{}, deploy.SpecErrorf("acurast: bundle %s was built for model %s (%d bytes), the spec names %s (%d bytes)", spec.Bundle.Path, pc.Model.SHA256, pc.Model.Size, spec.Model.SHA256, spec.Model.Size)
	case pc.APIKeyEnv != spec.APIKeyEnv || pc.HFTokenEnv != spec.HFTokenEnv || pc.TunnelKeyEnv != TunnelKeyEnv:
		return Plan{}, deploy.SpecErrorf("acurast: bundle %s reads variables %q/%q/%q, the deployment sets %q/%q/%q", spec.Bundle.Path, pc.APIKeyEnv, pc.HFTokenEnv, pc.TunnelKeyEnv, spec.APIKeyEnv, spec.HFTokenEnv, TunnelKeyEnv)
	case pc.Tunnel.DomainSuffix != wantSuffix:
		return Plan{}, deploy.SpecErrorf("acurast: bundle %s tunnels to %s, network %s uses %s (build it with deploy.%sTunnel)", spec.Bundle.Path, pc.Tunnel.DomainSuffix, o.Network, wantSuffix, map[bool]string{true: "Canary", false: "Mainnet"}[o.Network == "canary"])
	}
	cid, ok := CIDv0(b)
	if !ok {
		return Plan{}, fmt.Errorf("acurast: bundle %s is %d bytes; phonellm computes CIDs for bundles up to 256 KiB", spec.Bundle.Path, len(b))
	}
	id := deploy.NewID(spec.Name, f.now().UTC().Format("20060102t150405"))
	start := o.StartAt
	if start.IsZero() {
		start = f.now().Add(o.StartDelay)
	}
	start = start.Truncate(time.Millisecond)
	p := Plan{
		ID: id, Network: o.Network, Bundle: *spec.Bundle, Script: "ipfs://" + cid,
		Projects: Projects(spec, o, "ipfs://"+cid, start), StartAt: start, Env: names, DomainSuffix: wantSuffix,
		ModelURL: spec.Model.URL, LifetimeMS: o.Duration.Milliseconds(), EndAt: start.Add(o.Duration), MinRAMBytes: o.MinRAMBytes,
		Cost:      costOf(o.MaxCostPerExecution, spec.Replicas),
		Endpoints: Endpoints{RPC: o.RPC, IPFS: o.IPFS, Matcher: o.Matcher},
		Notes:     notes,
	}
	for _, pc := range p.Projects {
		call, err := EncodeDeployCallHex(pc)
		if err != nil {
			return Plan{}, err
		}
		p.Calls = append(p.Calls, call)
	}
	if o.MinRAMBytes == 0 {
		p.Notes = append(p.Notes, "no RAM filter: pass the fit profile's RAM as min_ram_bytes so only phones that fit the model match")
	}
	p.ConfigPath = filepath.Join(f.Dir, id, "acurast.json")
	if err := WriteConfigFile(p.ConfigPath, p.Projects); err != nil {
		return Plan{}, fmt.Errorf("acurast: write %s: %w", p.ConfigPath, err)
	}
	if f.SDK != nil && f.SDK.Installed() == nil {
		chk, err := f.checkWithSDK(ctx, p)
		if err != nil {
			return Plan{}, err
		}
		p.SDK = chk
		p.Cost.Matcher = f.estimate(ctx, spec, o, p)
	} else {
		p.Notes = append(p.Notes, "@acurast/sdk not installed: configs not validated by the SDK, no matcher estimate (scripts/setup-acurast.sh)")
	}
	return p, nil
}

func (f *Fleet) checkWithSDK(ctx context.Context, p Plan) (*SDKCheck, error) {
	type op struct {
		Op  string `json:"op"`
		Req any    `json:"req"`
	}
	ops := []op{{"version", struct{}{}}, {"validate", map[string]any{"configs": p.Projects}}}
	for _, pc := range p.Projects {
		ops = append(ops, op{"encode-deploy", map[string]any{"config": pc, "network": p.Network}})
	}
	raw, err := f.SDK.Run(ctx, "batch", map[string]any{"ops": ops}, nil)
	if err != nil {
		return nil, err
	}
	var res struct {
		Results []struct {
			OK     bool            `json:"ok"`
			Result json.RawMessage `json:"result"`
			Error  string          `json:"error"`
		}
	}
	if err := json.Unmarshal(raw, &res); err != nil || len(res.Results) != len(ops) {
		return nil, fmt.Errorf("acurast: sdk batch: %d answers for %d ops (%v)", len(res.Results), len(ops), err)
	}
	for i, r := range res.Results {
		if !r.OK {
			return nil, &SDKError{Op: ops[i].Op, Message: r.Error}
		}
	}
	var ver struct{ SDK string }
	json.Unmarshal(res.Results[0].Result, &ver)
	chk := &SDKCheck{Version: ver.SDK, Valid: true, CallsMatch: true}
	var v struct {
		Results []struct {
			OK    bool
			Error string
		}
	}
	if err := json.Unmarshal(res.Results[1].Result, &v); err != nil || len(v.Results) != len(p.Projects) {
		return nil, fmt.Errorf("acurast: sdk validate: %v", err)
	}
	for i, r := range v.Results {
		if !r.OK {
			return nil, fmt.Errorf("acurast: project %s rejected by @acurast/sdk validateConfig: %s", p.Projects[i].ProjectName, r.Error)
		}
	}
	for i := range p.Projects {
		var e struct{ Call string }
		json.Unmarshal(res.Results[2+i].Result, &e)
		if e.Call != p.Calls[i] {
			return nil, fmt.Errorf("acurast: replica %d: phonellm's deploy call differs from the SDK's:\n phonellm %s\n sdk      %s", i, p.Calls[i], e.Call)
		}
	}
	return chk, nil
}

// estimate asks the matcher (through the SDK) for a price for N distinct phones.
func (f *Fleet) estimate(ctx context.Context, spec deploy.Spec, o Options, p Plan) *MatcherAdvice {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cfg := p.Projects[0]
	cfg.NumberOfReplicas = spec.Replicas
	raw, err := f.SDK.Run(ctx, "estimate", map[string]any{"config": cfg, "matcherUrl": o.Matcher,
		"address": "5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY"}, nil)
	if err != nil {
		return &MatcherAdvice{Error: err.Error()}
	}
	var a MatcherAdvice
	if err := json.Unmarshal(raw, &a); err != nil {
		return &MatcherAdvice{Error: err.Error()}
	}
	return &a
}

// Deploy plans; with Options.DryRun it records the plan (state "planned") and stops. Otherwise it installs the
// SDK if needed, generates one tunnel key per replica (URL known in advance), pins the bundle, submits one
// single-replica job per replica through the SDK, waits for acknowledgement and the encrypted environment,
// and records the deployment with the replica URLs.
func (f *Fleet) Deploy(ctx context.Context, spec deploy.Spec) (deploy.Deployment, error) {
	o, err := decodeOptions(spec)
	if err != nil {
		return deploy.Deployment{}, err
	}
	o = o.withDefaults(f.getenv)
	// Secrets: read now, kept in memory only, forbidden in state files and scrubbed from driver output.
	secrets := map[string]string{}
	if !o.DryRun {
		for _, n := range []string{spec.APIKeyEnv, spec.HFTokenEnv} {
			if n == "" {
				continue
			}
			v := f.getenv(n)
			if v == "" && n == spec.APIKeyEnv {
				return deploy.Deployment{}, deploy.SpecErrorf("acurast: %s is empty: set the API key clients will use", n)
			}
			if len(v) > 996 {
				return deploy.Deployment{}, deploy.SpecErrorf("acurast: %s is %d bytes; encrypted variables hold at most 996", n, len(v))
			}
			if v != "" {
				secrets[n] = v
			}
		}
		if f.getenv(MnemonicEnv) == "" {
			return deploy.Deployment{}, deploy.SpecErrorf("acurast: %s is not set (the deployer account's mnemonic; it is read from the environment only)", MnemonicEnv)
		}
		if f.SDK == nil {
			return deploy.Deployment{}, errors.New("acurast: no SDK configured")
		}
	}
	var installErr error
	if f.SDK != nil {
		// Installed on first use (npm registry); a dry run without network only loses the SDK cross-check.
		if installErr = f.SDK.Install(ctx); installErr != nil && !o.DryRun {
			return deploy.Deployment{}, installErr
		}
	}
	p, err := f.Plan(ctx, spec)
	if err != nil {
		return deploy.Deployment{}, err
	}
	if installErr != nil {
		p.Notes = append(p.Notes, "installing @acurast/sdk failed: "+installErr.Error())
	}
	d := deploy.Deployment{ID: p.ID, Target: Target, Spec: spec, CreatedAt: f.now().UTC()}
	ex := Extra{Network: p.Network, Script: p.Script, RPC: o.RPC, Config: p.ConfigPath}
	for i, pc := range p.Projects {
		d.Replicas = append(d.Replicas, deploy.Replica{Index: i, State: deploy.StatePlanned})
		ex.Jobs = append(ex.Jobs, JobState{Replica: i, Project: pc.ProjectName})
	}
	if o.DryRun {
		ex.Plan = &p
		d.State = deploy.StatePlanned
		return d, f.save(&d, ex)
	}

	forbid := []string{f.getenv(MnemonicEnv)}
	for _, v := range secrets {
		forbid = append(forbid, v)
	}
	keys := make([]TunnelKey, spec.Replicas)
	suffix := p.DomainSuffix
	for i := range keys {
		if keys[i], err = NewTunnelKey(suffix); err != nil {
			return d, err
		}
		forbid = append(forbid, keys[i].Key)
		d.Replicas[i].URL = keys[i].URL
		d.Replicas[i].Ref = keys[i].ClientID
		d.Replicas[i].State = deploy.StatePending
		ex.Jobs[i].ClientID = keys[i].ClientID
	}
	f.Store.Forbid(forbid...)
	f.SDK.Redact = append(f.SDK.Redact, forbid...)
	rep := f.reporter()

	rep.Begin("pin bundle", -1)
	raw, err := f.SDK.Run(ctx, "pin", map[string]any{"file": p.Bundle.Path, "endpoint": o.IPFS}, nil)
	rep.End("pin bundle", err)
	if err != nil {
		return d, err
	}
	var pinned struct{ URL string }
	json.Unmarshal(raw, &pinned)
	if pinned.URL != p.Script {
		rep.Note(pipeline.Warn, fmt.Sprintf("IPFS pin returned %s, phonellm computed %s; deploying the pinned one", pinned.URL, p.Script))
		ex.Script = pinned.URL
	}
	d.State = deploy.StatePending
	if err := f.save(&d, ex); err != nil {
		return d, err
	}

	type replicaReq struct {
		Config  ProjectConfig       `json:"config"`
		EnvVars []map[string]string `json:"envVars"`
	}
	var reqs []replicaReq
	for i, pc := range Projects(spec, o, ex.Script, time.Time{}) {
		var env []map[string]string
		for _, n := range envNames(spec) {
			v := secrets[n]
			if n == TunnelKeyEnv {
				v = keys[i].Key
			}
			if v != "" {
				env = append(env, map[string]string{"key": n, "value": v})
			}
		}
		reqs = append(reqs, replicaReq{Config: pc, EnvVars: env})
	}
	work := filepath.Join(f.Dir, d.ID, "work")
	os.MkdirAll(work, 0o755)
	pipeline.BeginItems(rep, "submit and wait for phones", int64(spec.Replicas), "phones")
	raw, err = f.SDK.Run(ctx, "deploy", map[string]any{"rpc": o.RPC, "ipfs": map[string]string{"endpoint": o.IPFS},
		"replicas": reqs, "timeoutMs": (o.StartDelay - time.Minute).Milliseconds(), "workDir": work}, func(ev json.RawMessage) {
		var e struct {
			Replica      int
			Status       string
			JobIDs       []json.RawMessage `json:"jobIds"`
			Address      string
			Acknowledged int
		}
		if json.Unmarshal(ev, &e) != nil || e.Replica < 0 || e.Replica >= len(ex.Jobs) {
			return
		}
		if e.Status == "Wallet" {
			ex.Address = e.Address
			return
		}
		j := &ex.Jobs[e.Replica]
		j.Status = e.Status
		if len(e.JobIDs) > 0 {
			j.JobID = jobSeq(e.JobIDs[0])
			d.Replicas[e.Replica].Ref = fmt.Sprintf("Acurast:%s:%d", ex.Address, j.JobID)
		}
		if e.Status == "EnvironmentVariablesSet" {
			j.EnvSet = true
			d.Replicas[e.Replica].State = deploy.StateStarting
			rep.Add(1)
		}
		rep.Note(pipeline.Info, fmt.Sprintf("replica %d: %s", e.Replica, e.Status))
		f.save(&d, ex)
	})
	rep.End("submit and wait for phones", err)
	d.State = deploy.Aggregate(states(d.Replicas))
	if serr := f.save(&d, ex); serr != nil && err == nil {
		err = serr
	}
	return d, err
}

// jobSeq reads the sequence number from a JobId JSON ([{acurast: owner}, seq]).
func jobSeq(raw json.RawMessage) int64 {
	var parts []json.RawMessage
	if json.Unmarshal(raw, &parts) != nil || len(parts) != 2 {
		return 0
	}
	var n int64
	json.Unmarshal(parts[1], &n)
	return n
}

func states(rs []deploy.Replica) []deploy.State {
	out := make([]deploy.State, len(rs))
	for i, r := range rs {
		out[i] = r.State
	}
	return out
}

func (f *Fleet) save(d *deploy.Deployment, ex Extra) error {
	b, err := json.Marshal(ex)
	if err != nil {
		return err
	}
	d.Extra = b
	return f.Store.Save(*d)
}

func (f *Fleet) client() *http.Client {
	if f.HTTP != nil {
		return f.HTTP
	}
	return &http.Client{Timeout: 5 * time.Second}
}

// Status checks every replica's /health and /status over its tunnel URL.
func (f *Fleet) Status(ctx context.Context, id string) (deploy.Status, error) {
	d, err := f.Store.Load(id)
	if err != nil {
		return deploy.Status{}, err
	}
	st := deploy.Status{ID: d.ID, Target: d.Target}
	for _, r := range d.Replicas {
		rs := deploy.ReplicaStatus{Replica: r}
		if r.URL != "" && r.State != deploy.StatePlanned && r.State != deploy.StateStopped {
			rs.CheckedAt = f.now().UTC()
			code, body, err := f.get(ctx, r.URL+"/health")
			switch {
			case err != nil:
				rs.Error = err.Error()
			case code == http.StatusOK:
				rs.Healthy, rs.State = true, deploy.StateReady
			default:
				rs.State = deploy.StateStarting
				rs.Error = fmt.Sprintf("health: HTTP %d %s", code, strings.TrimSpace(string(body)))
			}
			if _, body, err := f.get(ctx, r.URL+"/status"); err == nil && json.Valid(body) {
				rs.Detail = body
				rs.Cache = phoneCache(body)
			}
		}
		st.Replicas = append(st.Replicas, rs)
	}
	st.State = deploy.Aggregate(func() []deploy.State {
		var s []deploy.State
		for _, r := range st.Replicas {
			s = append(s, r.State)
		}
		return s
	}())
	return st, nil
}

func (f *Fleet) get(ctx context.Context, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := f.client().Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, b, err
}

// Endpoints lists the replicas' tunnel URLs.
func (f *Fleet) Endpoints(ctx context.Context, id string) ([]deploy.Endpoint, error) {
	d, err := f.Store.Load(id)
	if err != nil {
		return nil, err
	}
	return d.Endpoints(), nil
}

// Stop deregisters every registered job (Acurast.deregister; the chain refuses it for running jobs until
// they end, acurast.md §2.8) and marks the deployment stopped. A planned deployment is just marked stopped.
func (f *Fleet) Stop(ctx context.Context, id string) error {
	d, err := f.Store.Load(id)
	if err != nil {
		return err
	}
	var ex Extra
	if len(d.Extra) > 0 {
		if err := json.Unmarshal(d.Extra, &ex); err != nil {
			return fmt.Errorf("acurast: deployment %s: %w", id, err)
		}
	}
	var ids []int64
	for _, j := range ex.Jobs {
		if j.JobID > 0 {
			ids = append(ids, j.JobID)
		}
	}
	if len(ids) > 0 {
		if f.getenv(MnemonicEnv) == "" {
			return fmt.Errorf("acurast: %s is needed to deregister jobs %v", MnemonicEnv, ids)
		}
		if _, err := f.SDK.Run(ctx, "stop", map[string]any{"rpc": ex.RPC, "jobIds": ids}, nil); err != nil {
			return err
		}
	}
	for i := range d.Replicas {
		d.Replicas[i].State = deploy.StateStopped
	}
	d.State = deploy.StateStopped
	return f.Store.Save(d)
}

// phoneCache reads the prompt-cache counters the phone entrypoint keeps in its /status ("cache").
func phoneCache(status []byte) *deploy.CacheStats {
	var s struct {
		Cache *struct {
			Requests     int64 `json:"requests"`
			Hits         int64 `json:"hits"`
			PromptTokens int64 `json:"prompt_tokens"`
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"cache"`
	}
	if json.Unmarshal(status, &s) != nil || s.Cache == nil || s.Cache.Requests < 0 || s.Cache.PromptTokens < 0 ||
		s.Cache.CachedTokens < 0 || s.Cache.CachedTokens > s.Cache.PromptTokens {
		return nil
	}
	c := &deploy.CacheStats{Requests: s.Cache.Requests, Hits: s.Cache.Hits, PromptTokens: s.Cache.PromptTokens,
		CachedTokens: s.Cache.CachedTokens, Source: "replica"}
	if c.PromptTokens > 0 {
		c.HitRate = float64(c.CachedTokens) / float64(c.PromptTokens)
	}
	return c
}
