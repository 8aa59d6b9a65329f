package acurast

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/deploy"
	"github.com/phonellm/phonellm/pipeline/fit"
)

var _ deploy.Target = (*Fleet)(nil)

// Info: phones run the processor's llama.cpp server and download the model from its URL.
func (f *Fleet) Info() deploy.TargetInfo {
	return deploy.TargetInfo{Name: Target, Engine: fit.LlamaCpp, Downloads: true}
}

// UnsetKeyWarning is what a dry run says when the API key variable it names is not set here.
func UnsetKeyWarning(name string) string {
	return fmt.Sprintf("%s is not set in this environment: set it to the API key before the real ship (each phone gets its value, encrypted; clients send it)", name)
}

// Ship builds the runtime bundle for req.Spec on f.Network (into f.Dir), with the phone profile's RAM as the
// phones' RAM floor, and then plans (DryRun: nothing pinned or signed, nothing recorded) or deploys it. The
// API key variable must be named; a dry run only warns when it is not set here. A deploy that fails part way
// keeps its record, so 'phonellm fleet stop ID' can deregister the jobs that were registered.
func (f *Fleet) Ship(ctx context.Context, req deploy.ShipRequest) (deploy.Shipment, error) {
	rep := req.Reporter
	if rep == nil {
		rep = pipeline.Discard
	}
	spec := req.Spec
	if spec.APIKeyEnv == "" {
		return deploy.Shipment{}, deploy.SpecErrorf("acurast: --api-key-env NAME is required: phones are reachable from the internet")
	}
	if !req.DryRun && !strings.HasPrefix(spec.Model.URL, "https://") {
		return deploy.Shipment{}, deploy.SpecErrorf("acurast: model URL %q is not https: phones download the model over https from the internet", spec.Model.URL)
	}
	if req.DryRun && f.getenv(spec.APIKeyEnv) == "" {
		rep.Note(pipeline.Warn, UnsetKeyWarning(spec.APIKeyEnv))
	}
	raw, err := json.Marshal(Options{Network: f.Network, MinRAMBytes: req.Profile.MinRamTotalBytes(), DryRun: req.DryRun})
	if err != nil {
		return deploy.Shipment{}, err
	}
	spec.Target = raw
	pc, err := PhoneConfig(spec, req.Version)
	if err != nil {
		return deploy.Shipment{}, err
	}
	if err := os.MkdirAll(f.Dir, 0o755); err != nil {
		return deploy.Shipment{}, fmt.Errorf("acurast: %w", err)
	}
	name := deploy.NewID(spec.Name, "")
	bref, err := deploy.BuildBundle(ctx, deploy.BundleOptions{Out: filepath.Join(f.Dir, name+"-bundle.zip"), Name: spec.Name, Config: pc})
	if err != nil {
		return deploy.Shipment{}, err
	}
	spec.Bundle = &bref
	sh := deploy.Shipment{Bundle: &bref}
	if req.DryRun {
		p, err := f.Plan(ctx, spec)
		if err != nil {
			return sh, err
		}
		if sh.Plan, err = json.Marshal(p); err != nil {
			return sh, err
		}
		sh.Deployment = deploy.Deployment{ID: p.ID, Target: Target, Spec: spec, CreatedAt: f.now().UTC(), State: deploy.StatePlanned}
		for i := range spec.Replicas {
			sh.Deployment.Replicas = append(sh.Deployment.Replicas, deploy.Replica{Index: i, State: deploy.StatePlanned})
		}
		return sh, nil
	}
	sh.Deployment, err = f.Deploy(ctx, spec)
	if err != nil && sh.Deployment.ID != "" {
		err = fmt.Errorf("%w (deployment %s; 'phonellm fleet stop %s' deregisters what was registered)", err, sh.Deployment.ID, sh.Deployment.ID)
	}
	return sh, err
}

// loopbackHTTP reports whether s is an http URL on this machine (a test Hub).
func loopbackHTTP(s string) bool {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" {
		return false
	}
	if u.Hostname() == "localhost" {
		return true
	}
	ip := net.ParseIP(u.Hostname())
	return ip != nil && ip.IsLoopback()
}
