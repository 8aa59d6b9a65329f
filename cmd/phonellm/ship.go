package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/phonellm/phonellm/cmd/phonellm/internal/ui"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/deploy"
	"github.com/phonellm/phonellm/pipeline/deploy/acurast"
	"github.com/phonellm/phonellm/pipeline/deploy/local"
	"github.com/phonellm/phonellm/pipeline/fit"
	"github.com/phonellm/phonellm/pipeline/workspace"
	"github.com/spf13/cobra"
)

func init() { register("ship", newShipCmd) }

type shipFlags struct {
	target, model, phone, name, apiKeyEnv, prompt string
	replicas, ctx, parallel, gatewayPort          int
	force, dryRun                                 bool
	network, kvType                               string
	timeout                                       time.Duration
	warm                                          []string
	capacity                                      capacityFlags
}

func newShipCmd(a *app) *cobra.Command {
	var fl shipFlags
	cmd := &cobra.Command{
		Use:   "ship --replicas N [--target local|acurast] [--phone 16gb]",
		Short: "Serve the model on N phones (or local replicas) behind one gateway",
		Long: `Ship the workspace's quantized model to N replicas and put one OpenAI-compatible gateway in front.

--target local (default) runs N 'phonellm serve' replicas on this machine, each with its own port, a share of
the cores and the phone profile's memory budget, plus a gateway on --gateway-port, all kept running (restarted
when they exit or stop answering) by a detached supervisor; 'phonellm fleet status|stop' manage them from any
shell. ship binds the gateway port before starting anything, so a port in use fails at once, and it reports
success only after a first chat request answered through its own gateway (checked by the identity that
gateway sends); when anything fails, what it started is stopped again.

--target acurast builds the deterministic phone bundle, writes acurast.json (one job per phone, RAM floor from
the phone profile, attested devices, cost) and deploys through the official @acurast/sdk; phones download the
model from the Hub, so a real deploy needs it published first ('phonellm publish'). --dry-run prints the whole
plan — lifetime, cost, RAM floor — and stops before anything is signed; it can be planned before publishing
(with a placeholder model URL, labelled as such).

Prompt reuse: every replica evaluates the deployment's shared prefixes at start (--warm FILE, default the
workspace's warm: list; each a rubric sent as the system message), and ship then sends each once through the
gateway, so the first real request of every rubric is routed to a replica that holds it. Phones get a
host-memory prompt cache (llama-server --cache-ram) sized by the fit check from the profile's headroom, and
--ctx-checkpoints for hybrid models; --kv-type q8_0 or q4_0 (default the workspace's kv_cache) quantizes the
KV cache on every replica, and the fit check counts it.

Capacity planning (--reviews-per-hour, --prompt-tokens, --shared-tokens, --latency, as in 'phonellm fit'): the
plan says how many phones the workload needs and what they cost per hour at the Acurast plan's price, and
warns when --replicas is fewer; with --dry-run nothing is spent finding out.

The model must fit the phone profile at --ctx and --parallel (see 'phonellm fit'); --force ships anyway.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runShip(a, cmd, fl) },
	}
	f := cmd.Flags()
	f.IntVar(&fl.replicas, "replicas", 1, "number of replicas (phones)")
	f.StringVar(&fl.target, "target", "local", "where to run: local or acurast")
	f.StringVar(&fl.model, "model", "", "GGUF to ship (default: the workspace's newest quantized model)")
	f.StringVar(&fl.phone, "phone", "", "phone profile for the fit check and memory limit (default: the workspace's, else 16gb)")
	f.IntVar(&fl.ctx, "ctx", 4096, "context tokens per slot")
	f.IntVar(&fl.parallel, "parallel", 1, "parallel slots per replica")
	f.StringVar(&fl.name, "name", "", "deployment name, and the model name the replicas serve (default: the model file's)")
	f.StringVar(&fl.apiKeyEnv, "api-key-env", "", "environment variable holding the API key clients must send (required for acurast; default PHONELLM_API_KEY when it is set)")
	f.IntVar(&fl.gatewayPort, "gateway-port", 8090, "local gateway port (0 picks a free one)")
	f.StringVar(&fl.prompt, "prompt", "Say hello.", "first chat request sent through the gateway")
	f.BoolVar(&fl.force, "force", false, "ship even if the model does not fit the phone profile")
	f.BoolVar(&fl.dryRun, "dry-run", false, "acurast: build the bundle and print the plan; sign nothing")
	f.StringVar(&fl.network, "network", "mainnet", "acurast network: mainnet or canary")
	f.DurationVar(&fl.timeout, "ready-timeout", 5*time.Minute, "how long to wait for the replicas to be ready")
	f.StringArrayVar(&fl.warm, "warm", nil, "text file of a shared prefix (a rubric sent as the system message) every replica evaluates at start (repeatable; default: the workspace's warm: list)")
	f.StringVar(&fl.kvType, "kv-type", "", "KV cache type of the replicas: f16, q8_0 or q4_0 (default: the workspace's kv_cache, else f16)")
	fl.capacity.add(cmd)
	return cmd
}

func runShip(a *app, cmd *cobra.Command, fl shipFlags) error {
	if fl.apiKeyEnv == "" && getenv("PHONELLM_API_KEY", "") != "" {
		// serve and gateway require PHONELLM_API_KEY when it is set; the replicas, the gateway and the first
		// request must agree on it, so it is the deployment's key too.
		fl.apiKeyEnv = "PHONELLM_API_KEY"
	}
	switch {
	case fl.replicas < 1 || fl.replicas > deploy.MaxReplicas:
		return usageError("--replicas must be 1..%d", deploy.MaxReplicas)
	case fl.target != local.Target && fl.target != acurast.Target:
		return usageError("unknown --target %q (want local or acurast)", fl.target)
	case fl.target == acurast.Target && fl.apiKeyEnv == "":
		return usageError("--target acurast needs --api-key-env NAME: phones are reachable from the internet")
	case fl.target == local.Target && fl.dryRun:
		return usageError("--dry-run plans a phone deployment (--target acurast); a local ship has nothing to plan")
	case fl.gatewayPort < 0 || fl.gatewayPort > 65535:
		return usageError("--gateway-port must be 0..65535")
	}
	if fl.phone != "" {
		// A profile named on the command line is a bad command line when unknown (as in fit); one named by the
		// workspace's phonellm.yaml stays bad input, classified by the stage.
		if _, err := fit.Builtin().Lookup(fl.phone); err != nil {
			return usageError("--phone: %v", err)
		}
	}
	ws, err := a.findWorkspace()
	if err != nil {
		return err
	}
	path, err := resolveGGUF(a, fl.model)
	if err != nil {
		return err
	}
	target, err := shipTarget(a, fl, ws)
	if err != nil {
		return err
	}
	var capacity *fit.CapacityOptions
	if fl.capacity.active(cmd) {
		co, err := fl.capacity.options(cmd)
		if err != nil {
			return err
		}
		capacity = &co
	}
	res, err := deploy.Run(a.ctx, deploy.Options{Target: target, Model: path, Workspace: ws, Name: fl.name,
		Replicas: fl.replicas, Ctx: fl.ctx, Parallel: fl.parallel, Phone: fl.phone, APIKeyEnv: fl.apiKeyEnv,
		Prompt: fl.prompt, Force: fl.force, DryRun: fl.dryRun, ReadyTimeout: fl.timeout, Version: buildVersion().Version,
		Warm: fl.warm, KVType: fl.kvType, Capacity: capacity},
		a.reporter())
	if err != nil {
		return shipError(a.ctx, err)
	}
	return a.io.Result(res, func(w io.Writer) { printShip(w, res) })
}

// shipTarget opens the --target fleet: local replicas recorded under the fleet folder, or Acurast phones whose
// bundle and acurast.json go to the workspace's .phonellm/acurast (the fleet folder without a workspace).
func shipTarget(a *app, fl shipFlags, ws *workspace.Workspace) (deploy.Target, error) {
	st := deploy.NewStore(fleetDir())
	if fl.target == local.Target {
		return local.New(local.Options{Store: st, GatewayPort: fl.gatewayPort})
	}
	dir := filepath.Join(fleetDir(), acurast.Target)
	if ws != nil {
		dir = filepath.Join(ws.Root, ".phonellm", acurast.Target)
	}
	return &acurast.Fleet{Store: st, SDK: acurast.NewSDK(), Dir: dir, Reporter: a.reporter(), Network: fl.network}, nil
}

// shipError gives a ship failure its exit code and hint: a model that does not fit gets fit's suggestion.
func shipError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return err
	}
	var nf *deploy.NotFitError
	if errors.As(err, &nf) {
		return withCode(exitVerdict, err, strings.TrimSpace(suggestionHint(nf.Fit)+" (or --force to ship anyway)"))
	}
	var pe *deploy.PortInUseError
	if errors.As(err, &pe) {
		return withCode(exitFailure, err, "choose another port with --gateway-port, or --gateway-port 0 for a free one")
	}
	switch {
	case pipeline.IsCheckFailed(err):
		return withCode(exitVerdict, err, "")
	case pipeline.IsRemoteError(err):
		return withCode(exitRemote, err, "")
	case pipeline.IsInputError(err):
		return withCode(exitBadInput, err, "")
	}
	return err
}

func printShip(w io.Writer, r deploy.Result) {
	if len(r.Plan) > 0 {
		var p acurast.Plan
		if err := json.Unmarshal(r.Plan, &p); err == nil {
			printPlan(w, r, p)
			return
		}
	}
	fmt.Fprintf(w, "deployment %s (%s), model %s sha256 %s\n", r.Deployment, r.Target, r.Model.ID, r.Model.SHA256)
	for _, e := range r.Replicas {
		fmt.Fprintf(w, "  replica %d  %s\n", e.Replica, e.URL)
	}
	if r.Gateway != "" {
		fmt.Fprintf(w, "gateway %s/v1  (OpenAI-compatible)\n", r.Gateway)
	}
	if r.Answer != "" || r.LatencyMS > 0 {
		fmt.Fprintf(w, "first answer in %.0f ms: %q\n", r.LatencyMS, r.Answer)
	}
	for _, p := range r.Warm {
		fmt.Fprintf(w, "warm-up %d through the gateway: %d prompt tokens, %d cached, %.0f ms\n", p.Prefix+1, p.PromptTokens, p.CachedTokens, p.MS)
	}
	if c := r.Capacity; c != nil {
		printCapacity(w, *c)
	}
}

// printPlan is the acurast dry run's summary: what would be deployed, for how long, on which phones, at what
// cost.
func printPlan(w io.Writer, r deploy.Result, p acurast.Plan) {
	fmt.Fprintf(w, "acurast plan %s (dry run: nothing signed or sent)\n", p.ID)
	fmt.Fprintf(w, "  model     %s sha256 %s (%s)\n", r.Model.ID, r.Model.SHA256, ui.HumanBytes(r.Model.Size))
	if r.ModelURLNote != "" {
		fmt.Fprintf(w, "            from %s\n            (%s)\n", p.ModelURL, r.ModelURLNote)
	} else {
		fmt.Fprintf(w, "            from %s\n", p.ModelURL)
	}
	if r.Bundle != nil {
		fmt.Fprintf(w, "  bundle    %s (%s, sha256 %s)\n", r.Bundle.Path, ui.HumanBytes(r.Bundle.Size), r.Bundle.SHA256)
	}
	if pc := r.PromptCache; pc != nil {
		fmt.Fprintf(w, "  cache     --cache-ram %d MiB per phone: %s\n", pc.Bytes>>20, pc.Basis)
	}
	if c := r.Capacity; c != nil {
		printCapacity(w, *c)
	}
	fmt.Fprintf(w, "  script    %s\n  config    %s\n", p.Script, p.ConfigPath)
	phones := fmt.Sprintf("%d on %s, one job each", len(p.Projects), p.Network)
	if len(p.Projects) > 0 && p.Projects[0].OnlyAttestedDevices {
		phones += ", attested devices only"
	}
	fmt.Fprintf(w, "  phones    %s\n", phones)
	if p.MinRAMBytes > 0 {
		fmt.Fprintf(w, "  RAM floor %s reported RAM (benchmarkFilters.minRamTotalBytes %d): smaller phones are not matched\n", ui.HumanBytes(p.MinRAMBytes), p.MinRAMBytes)
	} else {
		fmt.Fprintf(w, "  RAM floor none: any phone may be matched\n")
	}
	fmt.Fprintf(w, "  lifetime  %s per job: starts %s, ends %s; the phones stop serving then (ship again to go on)\n",
		humanDuration(time.Duration(p.LifetimeMS)*time.Millisecond), p.StartAt.Format(time.RFC3339), p.EndAt.Format(time.RFC3339))
	fmt.Fprintf(w, "  cost      at most %s ACU per phone, %s ACU locked for %d phones (unused funds return on cleanup)\n",
		p.Cost.PerReplicaACU, p.Cost.LockedACU, p.Cost.Replicas)
	if m := p.Cost.Matcher; m != nil && m.Reachable && len(m.Advice) > 0 {
		fmt.Fprintf(w, "            matcher advice: %s\n", m.Advice)
	}
	fmt.Fprintf(w, "  env       %s (encrypted per phone; values never written to files)\n", strings.Join(p.Env, ", "))
	check := ""
	if p.SDK != nil && p.SDK.CallsMatch {
		check = ", encoding checked against @acurast/sdk " + p.SDK.Version
	}
	fmt.Fprintf(w, "  calls     %d deploy calls%s\n", len(p.Calls), check)
	for _, n := range p.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

// humanDuration prints whole hours and days as "24 h", "3 d", anything else as Go does.
func humanDuration(d time.Duration) string {
	switch {
	case d > 0 && d%(24*time.Hour) == 0 && d > 24*time.Hour:
		return fmt.Sprintf("%d d", d/(24*time.Hour))
	case d > 0 && d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	}
	return d.String()
}
