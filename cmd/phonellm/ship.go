package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/phonellm/phonellm/cmd/phonellm/internal/ui"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/deploy"
	"github.com/phonellm/phonellm/pipeline/deploy/acurast"
	"github.com/phonellm/phonellm/pipeline/fit"
	"github.com/phonellm/phonellm/pipeline/workspace"
	"github.com/spf13/cobra"
)

func init() { register("ship", newShipCmd) }

type shipFlags struct {
	target, model, phone, name, apiKeyEnv, prompt string
	replicas, ctx, parallel, gatewayPort          int
	force, dryRun                                 bool
	network                                       string
	timeout                                       time.Duration
}

// shipResult is what ship prints.
type shipResult struct {
	Deployment string              `json:"deployment"`
	Target     string              `json:"target"`
	Model      deploy.ModelRef     `json:"model"`
	Fit        *fit.Verdict        `json:"fit,omitempty"`
	Replicas   []deploy.Endpoint   `json:"replicas,omitempty"`
	Gateway    string              `json:"gateway,omitempty"`
	Answer     string              `json:"first_answer,omitempty"`
	LatencyMS  float64             `json:"first_answer_ms,omitempty"`
	Plan       *acurast.Plan       `json:"plan,omitempty"`
	Bundle     *deploy.BundleRef   `json:"bundle,omitempty"`
	Artifacts  []pipeline.Artifact `json:"artifacts,omitempty"`
}

func newShipCmd(a *app) *cobra.Command {
	var fl shipFlags
	cmd := &cobra.Command{
		Use:   "ship --replicas N [--target local|acurast] [--phone 16gb]",
		Short: "Serve the model on N phones (or local replicas) behind one gateway",
		Long: `Ship the workspace's quantized model to N replicas and put one OpenAI-compatible gateway in front.

--target local (default) runs N 'phonellm serve' replicas on this machine, each with its own port, a share of
the cores and the phone profile's memory budget, supervised (restarted on crash) by a detached supervisor, plus
a detached gateway; 'phonellm fleet status|stop' manage them from any shell.

--target acurast builds the deterministic phone bundle, writes acurast.json (replicas, minRamTotalBytes from the
phone profile, attested devices, cost) and deploys through the official @acurast/sdk; the model must be on the
Hub first ('phonellm publish'). --dry-run prints the whole plan and stops before anything is signed.

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
	f.StringVar(&fl.name, "name", "", "deployment name (default: the model's)")
	f.StringVar(&fl.apiKeyEnv, "api-key-env", "", "environment variable holding the API key clients must send (required for acurast)")
	f.IntVar(&fl.gatewayPort, "gateway-port", 8090, "local gateway port (0 picks a free one)")
	f.StringVar(&fl.prompt, "prompt", "Say hello.", "first chat request sent through the gateway")
	f.BoolVar(&fl.force, "force", false, "ship even if the model does not fit the phone profile")
	f.BoolVar(&fl.dryRun, "dry-run", false, "acurast: build the bundle and print the plan; sign nothing")
	f.StringVar(&fl.network, "network", "mainnet", "acurast network: mainnet or canary")
	f.DurationVar(&fl.timeout, "ready-timeout", 5*time.Minute, "how long to wait for the replicas to be ready")
	return cmd
}

func runShip(a *app, cmd *cobra.Command, fl shipFlags) error {
	if fl.replicas < 1 || fl.replicas > deploy.MaxReplicas {
		return usageError("--replicas must be 1..%d", deploy.MaxReplicas)
	}
	ws, err := findWorkspace()
	if err != nil {
		return err
	}
	path, err := resolveGGUF(a, fl.model)
	if err != nil {
		return err
	}
	phone := fl.phone
	if phone == "" && ws != nil {
		phone = ws.Project.Phone
	}
	if phone == "" {
		phone = "16gb"
	}
	engine := fit.LlamaCpp
	if fl.target == "local" {
		engine = fit.GoEngine
	}
	fr, err := fit.Run(a.ctx, fit.Options{Model: path, Phone: phone, Ctx: fl.ctx, Parallel: fl.parallel, Engine: engine}, nil)
	if err != nil {
		return err
	}
	if !fr.Verdict.Fits {
		msg := fmt.Sprintf("%s does not fit a %s phone at ctx %d × %d slots (needs %s of %s)", filepath.Base(path), phone,
			fl.ctx, fl.parallel, ui.HumanBytes(fr.Verdict.Needed), ui.HumanBytes(fr.Verdict.Usable))
		if !fl.force {
			return withCode(exitVerdict, errors.New(msg), suggestionHint(fr)+" (or --force to ship anyway)")
		}
		a.io.Warnf("%s — shipping anyway because of --force; replicas may be killed for memory", msg)
	}
	size, sum, err := modelDigest(ws, path)
	if err != nil {
		return err
	}
	name := fl.name
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(path), ".gguf")
	}
	spec := deploy.Spec{Name: name, Replicas: fl.replicas, Ctx: fl.ctx, Slots: fl.parallel, APIKeyEnv: fl.apiKeyEnv,
		Model: deploy.ModelRef{ID: name, Size: size, SHA256: sum, Path: path}}
	prof, _ := fit.Builtin().Lookup(phone)
	res := shipResult{Target: fl.target, Model: spec.Model, Fit: &fr.Verdict}
	switch fl.target {
	case "local":
		spec.MemoryLimit = prof.UsableBytes
		err = shipLocal(a, fl, spec, &res)
	case "acurast":
		err = shipAcurast(a, fl, ws, spec, prof, &res)
	default:
		return usageError("unknown --target %q (want local or acurast)", fl.target)
	}
	if err != nil {
		return err
	}
	if ws != nil && !fl.dryRun {
		key := workspace.Key(map[string]string{"model": sum}, map[string]any{"target": fl.target, "replicas": fl.replicas})
		if err := ws.Record(workspace.Record{Stage: "ship", Key: key, Artifacts: res.Artifacts,
			Options: map[string]any{"deployment": res.Deployment, "target": fl.target, "gateway": res.Gateway}}); err != nil {
			a.io.Warnf("workspace state not updated: %v", err)
		}
	}
	return a.io.Result(res, func(w io.Writer) { printShip(w, res) })
}

// modelDigest returns the size and sha256 of the model: the workspace's record when it has one for this file
// (computed while quantize wrote it), else hashed now.
func modelDigest(ws *workspace.Workspace, path string) (int64, string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, "", err
	}
	if sum := recordedSHA(ws, path); sum != "" {
		return st.Size(), sum, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

func shipLocal(a *app, fl shipFlags, spec deploy.Spec, res *shipResult) error {
	f, _, err := localFleet()
	if err != nil {
		return err
	}
	rep := a.reporter()
	rep.Begin(fmt.Sprintf("start %d local replicas", spec.Replicas), -1)
	d, err := f.Deploy(a.ctx, spec)
	if err != nil {
		rep.End("start replicas", err)
		return err
	}
	res.Deployment = d.ID
	ctx, cancel := context.WithTimeout(a.ctx, fl.timeout)
	defer cancel()
	_, err = f.WaitReady(ctx, d.ID, 0)
	rep.End(fmt.Sprintf("start %d local replicas", spec.Replicas), err)
	if err != nil {
		return fmt.Errorf("%w (logs under %s; stop with 'phonellm fleet stop %s')", err, filepath.Join(fleetDir(), "local", d.ID), d.ID)
	}
	if res.Replicas, err = f.Endpoints(a.ctx, d.ID); err != nil {
		return err
	}
	gw, err := startGateway(a, d.ID, fl.gatewayPort, fl.apiKeyEnv)
	if err != nil {
		return fmt.Errorf("gateway: %w (the replicas are running; stop them with 'phonellm fleet stop %s')", err, d.ID)
	}
	res.Gateway = gw
	answer, ms, err := firstAnswer(a.ctx, gw, spec.Model.ID, fl.prompt, os.Getenv(fl.apiKeyEnv))
	if err != nil {
		return fmt.Errorf("first request through the gateway: %w", err)
	}
	res.Answer, res.LatencyMS = answer, ms
	return nil
}

// startGateway runs `phonellm gateway --deployment ID` detached (its own session, log next to the fleet
// records), records its pid for `fleet stop`, and waits until it answers.
func startGateway(a *app, id string, port int, apiKeyEnv string) (string, error) {
	if port == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(gatewayRecordPath(id))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	logf, err := os.OpenFile(filepath.Join(dir, id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return "", err
	}
	defer logf.Close()
	args := []string{"gateway", "--deployment", id, "--port", strconv.Itoa(port)}
	if apiKeyEnv != "" {
		args = append(args, "--api-key-env", apiKeyEnv)
	}
	c := exec.Command(exe, args...)
	c.Stdout, c.Stderr = logf, logf
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		return "", err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	rec, _ := json.Marshal(gatewayRecord{PID: c.Process.Pid, URL: url, Port: port})
	if err := os.WriteFile(gatewayRecordPath(id), rec, 0o644); err != nil {
		return "", err
	}
	go c.Wait() // reap it if it dies while we still run
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url, nil
			}
		}
		select {
		case <-a.ctx.Done():
			return "", a.ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("gateway on %s not healthy after 30 s (log: %s)", url, filepath.Join(dir, id+".log"))
}

// firstAnswer sends one chat request through the gateway and returns the answer and its latency.
func firstAnswer(ctx context.Context, base, model, prompt, key string) (string, float64, error) {
	body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 16, "temperature": 0,
		"messages": []map[string]string{{"role": "user", "content": prompt}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return "", 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	ms := float64(time.Since(start).Microseconds()) / 1000
	if resp.StatusCode != http.StatusOK {
		return "", ms, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(raw)))
	}
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Choices) == 0 {
		return "", ms, fmt.Errorf("unexpected answer %q", raw)
	}
	return out.Choices[0].Message.Content, ms, nil
}

func shipAcurast(a *app, fl shipFlags, ws *workspace.Workspace, spec deploy.Spec, prof fit.Profile, res *shipResult) error {
	if spec.APIKeyEnv == "" {
		return usageError("--target acurast needs --api-key-env NAME: phones are reachable from the internet")
	}
	if ws == nil {
		return usageError("--target acurast needs a workspace with a published model ('phonellm publish')")
	}
	art, ok := publishedModel(ws, spec.Model.SHA256)
	if !ok {
		return fmt.Errorf("%s is not on the Hub yet: run 'phonellm publish' first (phones download it from there)", filepath.Base(spec.Model.Path))
	}
	spec.Model.URL, spec.Model.Path = art.Path, ""
	opts := acurast.Options{Network: fl.network, MinRAMBytes: prof.MinRamTotalBytes(), DryRun: fl.dryRun}
	raw, _ := json.Marshal(opts)
	spec.Target = raw
	pc, err := acurast.PhoneConfig(spec, buildVersion().Version)
	if err != nil {
		return err
	}
	dir := filepath.Join(ws.Root, ".phonellm", "acurast")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	bref, err := deploy.BuildBundle(a.ctx, deploy.BundleOptions{Out: filepath.Join(dir, spec.Name+"-bundle.zip"), Name: spec.Name, Config: pc})
	if err != nil {
		return err
	}
	spec.Bundle = &bref
	res.Bundle = &bref
	res.Artifacts = append(res.Artifacts, pipeline.Artifact{Path: bref.Path, Kind: "bundle", Size: bref.Size, SHA256: bref.SHA256})
	fleet := &acurast.Fleet{Store: deploy.NewStore(fleetDir()), SDK: acurast.NewSDK(), Dir: dir, Reporter: a.reporter()}
	if fl.dryRun {
		plan, err := fleet.Plan(a.ctx, spec)
		if err != nil {
			return err
		}
		res.Plan = &plan
		res.Deployment = plan.ID
		return nil
	}
	d, err := fleet.Deploy(a.ctx, spec)
	if err != nil {
		return remoteErr(err)
	}
	res.Deployment = d.ID
	res.Replicas = d.Endpoints()
	return nil
}

// publishedModel finds the Hub resolve URL recorded by publish for a file with this sha256.
func publishedModel(ws *workspace.Workspace, sum string) (pipeline.Artifact, bool) {
	for i := len(ws.State.Records) - 1; i >= 0; i-- {
		r := ws.State.Records[i]
		if r.Stage != "publish" {
			continue
		}
		for _, art := range r.Artifacts {
			if art.Kind == publishedKind && art.SHA256 == sum {
				return art, true
			}
		}
	}
	return pipeline.Artifact{}, false
}

func printShip(w io.Writer, r shipResult) {
	if r.Plan != nil {
		fmt.Fprintf(w, "acurast plan %s (dry run: nothing signed or sent)\n", r.Deployment)
		fmt.Fprintf(w, "  bundle %s (%s, sha256 %s)\n  script %s\n  config %s\n", r.Bundle.Path, ui.HumanBytes(r.Bundle.Size), r.Bundle.SHA256, r.Plan.Script, r.Plan.ConfigPath)
		fmt.Fprintf(w, "  %d deploy calls, start %s, env %v\n", len(r.Plan.Calls), r.Plan.StartAt.Format(time.RFC3339), r.Plan.Env)
		for _, n := range r.Plan.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
		return
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
}
