package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/fit"
	"github.com/phonellm/phonellm/pipeline/workspace"
)

// Target is a fleet that [Run] ships to. This package cannot import its targets (they import it for the
// vocabulary), so the caller passes one: deploy/local's Fleet (replicas on this machine behind a supervised
// gateway) or deploy/acurast's (phones).
type Target interface {
	Fleet
	// Info says what Run needs to know about the target before it ships.
	Info() TargetInfo
	// Ship deploys a complete, checked spec and returns once the target serves it: for the local target,
	// every replica answers /health and the gateway answers with its identity; for phones, the jobs are
	// submitted (or, for a dry run, the plan is made and nothing is signed). On failure it leaves nothing
	// running that it started.
	Ship(ctx context.Context, req ShipRequest) (Shipment, error)
}

// TargetInfo describes a target.
type TargetInfo struct {
	// Name is the target's name in records ("local", "acurast").
	Name string
	// Engine is what the replicas run, whose memory the fit check estimates.
	Engine fit.Engine
	// Downloads is true when replicas download the model from Spec.Model.URL (phones) rather than read
	// Spec.Model.Path on this machine; Run then finds the URL publish recorded.
	Downloads bool
}

// ShipRequest is what Run asks a target to ship.
type ShipRequest struct {
	Spec Spec
	// Profile is the phone profile of the fit check: its usable RAM is the local replicas' memory limit and
	// its minimum RAM the phones' benchmark filter.
	Profile fit.Profile
	// DryRun: plan only; nothing is started, pinned or signed.
	DryRun bool
	// Version is phonellm's version (written into phone bundles).
	Version string
	// ReadyTimeout bounds the wait for the replicas (and gateway) to serve.
	ReadyTimeout time.Duration
	Reporter     pipeline.Reporter
}

// Shipment is what a target shipped.
type Shipment struct {
	// Deployment is the recorded deployment (for a dry run, the planned one: ID and replicas only).
	Deployment Deployment
	// Plan is the target's dry-run plan as JSON (deploy/acurast.Plan), when DryRun.
	Plan json.RawMessage
	// Bundle is the runtime bundle the replicas run, when the target builds one.
	Bundle *BundleRef
}

// Options configure [Run], the ship stage. Target and Model are required; the zero value of the rest is
// usable.
type Options struct {
	Target Target
	// Model is the GGUF to ship.
	Model string
	// Workspace, when set, supplies the model's recorded sha256, the Hub URL publish recorded for it and the
	// default phone, and receives the ship record.
	Workspace *workspace.Workspace
	// Name names the deployment and the model the replicas serve (default: the file name without .gguf).
	Name string
	// Replicas (default 1), Ctx tokens per slot (default 4096), Parallel slots per replica (default 1).
	Replicas, Ctx, Parallel int
	// Phone is the phone profile of the fit check (default: the workspace's, else 16gb).
	Phone string
	// APIKeyEnv names the variable holding the key clients (and the gateway) must send; never the key.
	APIKeyEnv string
	// Prompt is the first chat request sent through the gateway (default "Say hello.").
	Prompt string
	// Force ships a model that does not fit the profile (with a warning).
	Force bool
	// DryRun plans without starting or signing anything (phone targets).
	DryRun bool
	// ReadyTimeout bounds the wait for the replicas and the first answer (default 5 min).
	ReadyTimeout time.Duration
	// Version is phonellm's version, for phone bundles.
	Version string
	// Getenv reads the API key's value for the first request (os.Getenv when nil).
	Getenv func(string) string
	// HTTP sends the first request (default: no proxy, no redirects).
	HTTP *http.Client
	// Warm lists text files of the deployment's shared prefixes — rubrics sent as system messages — that
	// every replica evaluates at start and ship then sends once through the gateway (default: the workspace's
	// warm: list, relative to its root).
	Warm []string
	// KVType is the replicas' KV cache type: f16 (default: the workspace's kv_cache), q8_0 or q4_0. The fit
	// check counts it; phones get -ctk/-ctv, local replicas --kv-type (with flash attention, which Ollama's
	// engine needs for a quantized cache).
	KVType string
	// Capacity, when set, plans how many phones the workload needs and what they cost (fit.RunCapacity on the
	// shipped model and profile); the result reports it, and a note says when Replicas is fewer.
	Capacity *fit.CapacityOptions
}

// Result is what ship did. JSON field names are the `phonellm ship --json` output.
type Result struct {
	Deployment string       `json:"deployment"`
	Target     string       `json:"target"`
	Model      ModelRef     `json:"model"`
	Fit        *fit.Verdict `json:"fit,omitempty"`
	Replicas   []Endpoint   `json:"replicas,omitempty"`
	// Gateway is the verified gateway's base URL; the OpenAI API is under Gateway + "/v1".
	Gateway   string  `json:"gateway,omitempty"`
	Answer    string  `json:"first_answer,omitempty"`
	LatencyMS float64 `json:"first_answer_ms,omitempty"`
	// ModelURLNote labels a model URL that phones cannot use yet: a placeholder for a model not published, or
	// a local test Hub (dry runs only).
	ModelURLNote string `json:"model_url_note,omitempty"`
	// PromptCache is the host-memory prompt cache each phone's llama-server gets, as the fit check sized it
	// (phone targets); the fit verdict counts it.
	PromptCache *fit.PromptCache `json:"prompt_cache,omitempty"`
	// Warm is what the warm-up requests sent through the gateway reported.
	Warm []Primed `json:"warm,omitempty"`
	// Capacity is the capacity plan, when Options.Capacity asked for one.
	Capacity  *fit.CapacityPlan   `json:"capacity,omitempty"`
	Plan      json.RawMessage     `json:"plan,omitempty"`
	Bundle    *BundleRef          `json:"bundle,omitempty"`
	Artifacts []pipeline.Artifact `json:"artifacts,omitempty"`
}

// Validate checks the options (after defaults).
func (o Options) Validate() error {
	switch {
	case o.Target == nil:
		return errors.New("deploy: no target")
	case o.Model == "":
		return SpecErrorf("ship: no model")
	case o.Replicas < 1 || o.Replicas > MaxReplicas:
		return SpecErrorf("ship: replicas = %d, want 1..%d", o.Replicas, MaxReplicas)
	case o.Ctx < 1 || o.Parallel < 1:
		return SpecErrorf("ship: ctx = %d, parallel = %d; want both >= 1", o.Ctx, o.Parallel)
	case o.APIKeyEnv != "" && !envName.MatchString(o.APIKeyEnv):
		return SpecErrorf("ship: %q is not an environment variable name (A-Z, 0-9, _; at most 32)", o.APIKeyEnv)
	case !ValidKVType(o.KVType):
		return SpecErrorf("ship: kv cache type %q: want f16, q8_0 or q4_0", o.KVType)
	}
	if o.Phone != "" {
		if _, err := fit.Builtin().Lookup(o.Phone); err != nil {
			if o.Workspace != nil && o.Workspace.Project.Phone == o.Phone {
				return fmt.Errorf("%s: phone: %w", filepath.Join(o.Workspace.Root, workspace.FileName), err)
			}
			return err
		}
	}
	return nil
}

func (o *Options) defaults() {
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Ctx == 0 {
		o.Ctx = 4096
	}
	if o.Parallel == 0 {
		o.Parallel = 1
	}
	if o.Phone == "" && o.Workspace != nil {
		o.Phone = o.Workspace.Project.Phone
	}
	if o.Workspace != nil {
		if len(o.Warm) == 0 {
			for _, w := range o.Workspace.Project.Warm {
				if !filepath.IsAbs(w) {
					w = filepath.Join(o.Workspace.Root, w)
				}
				o.Warm = append(o.Warm, w)
			}
		}
		if o.KVType == "" {
			o.KVType = o.Workspace.Project.KVCache
		}
	}
	if o.Phone == "" {
		o.Phone = "16gb"
	}
	if o.Prompt == "" {
		o.Prompt = "Say hello."
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 5 * time.Minute
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{
			Transport:     &http.Transport{Proxy: nil, DisableKeepAlives: true},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if o.Name == "" {
		o.Name = strings.TrimSuffix(filepath.Base(o.Model), ".gguf")
	}
}

// Run ships a model: it checks that the model fits the phone profile, hashes it (or takes the workspace's
// record), completes the deployment spec for the target, has the target ship it (start and supervise the
// replicas and the gateway, or bundle and submit phone jobs), sends the first request through the gateway it
// started (verified by its identity), and records the deployment in the workspace. A failure after replicas
// started stops them: a failed ship leaves nothing running.
func Run(ctx context.Context, o Options, rep pipeline.Reporter) (Result, error) {
	if rep == nil {
		rep = pipeline.Discard
	}
	o.defaults()
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	info := o.Target.Info()
	res := Result{Target: info.Name}
	for i, w := range o.Warm {
		if abs, err := filepath.Abs(w); err == nil {
			o.Warm[i] = abs
		}
	}
	warm, err := ReadWarm(o.Warm)
	if err != nil {
		return res, err
	}
	fo := fit.Options{Model: o.Model, Phone: o.Phone, Ctx: o.Ctx, Parallel: o.Parallel, Engine: info.Engine, KVType: o.KVType}
	quantized := o.KVType == "q8_0" || o.KVType == "q4_0"
	if info.Engine == fit.GoEngine && quantized {
		fo.FlashAttention = "on" // phonellm serve turns it on for a quantized cache
	}
	if info.Engine == fit.LlamaCpp {
		fo.Checkpoints = DefaultCtxCheckpoints
	}
	fr, err := fit.Run(ctx, fo, nil)
	if err != nil {
		return res, err
	}
	prof, err := fit.Builtin().Lookup(o.Phone)
	if err != nil {
		return res, err
	}
	var cacheRAM int64
	if info.Engine == fit.LlamaCpp && fr.Verdict.Fits {
		// The phones' prompt cache, sized by the fit check within the profile's headroom and counted in the
		// verdict.
		pc := fit.PlanPromptCache(fr.Breakdown, prof, len(warm), DefaultCtxCheckpoints)
		_, fr.Verdict = fit.WithPromptCache(fr.Breakdown, pc, prof)
		res.PromptCache, cacheRAM = &pc, pc.Bytes
	}
	res.Fit = &fr.Verdict
	if o.Capacity != nil {
		plan, err := fit.RunCapacity(fo, *o.Capacity)
		if err != nil {
			return res, err
		}
		res.Capacity = &plan
		if plan.ReviewsPerHour > 0 && o.Replicas < plan.Replicas.Lo {
			rep.Note(pipeline.Warn, fmt.Sprintf("%d replicas for %.0f reviews per hour: the capacity plan needs %d–%d", o.Replicas,
				plan.ReviewsPerHour, plan.Replicas.Lo, plan.Replicas.Hi))
		}
	}
	if !fr.Verdict.Fits {
		nf := &NotFitError{Model: filepath.Base(o.Model), Phone: o.Phone, Ctx: o.Ctx, Parallel: o.Parallel, Fit: fr}
		if !o.Force {
			return res, nf
		}
		rep.Note(pipeline.Warn, nf.Error()+" — shipping anyway because of --force; replicas may be killed for memory")
	}
	size, sum, err := Digest(o.Workspace, o.Model)
	if err != nil {
		return res, err
	}
	spec := Spec{Name: o.Name, Replicas: o.Replicas, Ctx: o.Ctx, Slots: o.Parallel, APIKeyEnv: o.APIKeyEnv,
		Model: ModelRef{ID: o.Name, Size: size, SHA256: sum, Path: o.Model}, KVType: o.KVType, CacheRAM: cacheRAM,
		Warm: o.Warm}
	if info.Engine == fit.LlamaCpp {
		spec.CtxCheckpoints = DefaultCtxCheckpoints
	}
	if info.Downloads {
		url, note, err := modelURL(o.Workspace, o.Model, sum, o.DryRun)
		if err != nil {
			return res, err
		}
		spec.Model.URL, spec.Model.Path = url, ""
		res.ModelURLNote = note
	}
	res.Model = spec.Model
	if err := spec.Validate(); err != nil {
		return res, err
	}
	sh, err := o.Target.Ship(ctx, ShipRequest{Spec: spec, Profile: prof, DryRun: o.DryRun, Version: o.Version,
		ReadyTimeout: o.ReadyTimeout, Reporter: rep})
	res.Deployment = sh.Deployment.ID
	if err != nil {
		return res, err
	}
	res.Plan = sh.Plan
	if sh.Bundle != nil {
		res.Bundle = sh.Bundle
		res.Artifacts = append(res.Artifacts, pipeline.Artifact{Path: sh.Bundle.Path, Kind: "bundle", Size: sh.Bundle.Size, SHA256: sh.Bundle.SHA256})
	}
	if !o.DryRun {
		res.Replicas = sh.Deployment.Endpoints()
	}
	if gw := sh.Deployment.Gateway; gw != nil && !o.DryRun {
		actx, cancel := context.WithTimeout(ctx, o.ReadyTimeout)
		ans, ms, err := FirstAnswer(actx, o.HTTP, *gw, spec.Model.ID, o.Prompt, o.key())
		cancel()
		if err != nil {
			stopped := StopAfterFailure(ctx, o.Target, sh.Deployment.ID)
			return res, &FleetError{Deployment: sh.Deployment.ID,
				Err: fmt.Errorf("first request through the gateway %s: %w%s", gw.URL, err, StoppedNote(sh.Deployment.ID, stopped))}
		}
		res.Gateway, res.Answer, res.LatencyMS = gw.URL, ans, ms
		if len(warm) > 0 {
			// The replicas warmed themselves; the gateway learns which holds which prefix.
			pctx, cancel := context.WithTimeout(ctx, o.ReadyTimeout)
			res.Warm, err = PrimeGateway(pctx, o.HTTP, *gw, spec.Model.ID, warm, o.key())
			cancel()
			if err != nil {
				rep.Note(pipeline.Warn, "warm-up through the gateway: "+err.Error())
			}
		}
	}
	if o.Workspace != nil && !o.DryRun {
		if err := record(o.Workspace, res, sum, o.Replicas); err != nil {
			rep.Note(pipeline.Warn, "workspace state not updated: "+err.Error())
		}
	}
	return res, nil
}

func (o Options) key() string {
	if o.APIKeyEnv == "" {
		return ""
	}
	return o.Getenv(o.APIKeyEnv)
}

// StopAfterFailure stops a deployment that ship started and then gave up on (Run, and targets whose Ship
// fails after starting something). It runs even when ctx was cancelled — Ctrl-C during ship must not leave
// replicas behind — bounded by its own deadline.
func StopAfterFailure(ctx context.Context, f Fleet, id string) error {
	if id == "" {
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	return f.Stop(sctx, id)
}

// StoppedNote ends a ship failure's message with what became of the deployment: "; deployment X stopped",
// or why stopping it failed too (the caller's error stays the cause).
func StoppedNote(id string, stopErr error) string {
	if stopErr != nil {
		return fmt.Sprintf("; stopping deployment %s failed too: %v", id, stopErr)
	}
	return fmt.Sprintf("; deployment %s stopped", id)
}

// record is the ship stage's one workspace record: the deployment, its target and gateway, and the bundle.
func record(ws *workspace.Workspace, res Result, sum string, replicas int) error {
	key := workspace.Key(map[string]string{"model": sum}, map[string]any{"target": res.Target, "replicas": replicas})
	return ws.Record(workspace.Record{Stage: "ship", Key: key, Artifacts: res.Artifacts,
		Options: map[string]any{"deployment": res.Deployment, "target": res.Target, "gateway": res.Gateway}})
}
