package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/deploy"
	"github.com/phonellm/phonellm/pipeline/fit"
)

var _ deploy.Target = (*Fleet)(nil)

var errNotReady = errors.New("not ready")

// Info: the replicas run `phonellm serve` (the built-in engine) on the model file itself.
func (f *Fleet) Info() deploy.TargetInfo {
	return deploy.TargetInfo{Name: Target, Engine: fit.GoEngine}
}

// Ship deploys req.Spec with a gateway in front (on Options.GatewayPort), each replica limited to the phone
// profile's usable RAM, and waits until every replica answers /health and the gateway answers with the
// deployment's identity. When anything fails after the supervisor started — a replica that never comes up, a
// crash loop, the timeout, Ctrl-C — it stops the deployment, so a failed ship leaves nothing running.
func (f *Fleet) Ship(ctx context.Context, req deploy.ShipRequest) (deploy.Shipment, error) {
	if req.DryRun {
		return deploy.Shipment{}, deploy.SpecErrorf("ship: --dry-run plans phone deployments; the local target has nothing to plan (run it without --dry-run, or use --target acurast)")
	}
	rep := req.Reporter
	if rep == nil {
		rep = pipeline.Discard
	}
	spec := req.Spec
	spec.MemoryLimit = req.Profile.UsableBytes
	to, err := json.Marshal(TargetOptions{Gateway: &GatewayOptions{Port: f.o.GatewayPort}})
	if err != nil {
		return deploy.Shipment{}, err
	}
	spec.Target = to
	d, err := f.Deploy(ctx, spec)
	if err != nil {
		if d.ID != "" { // recorded, but its supervisor did not take over
			if stopErr := deploy.StopAfterFailure(ctx, f, d.ID); stopErr != nil {
				err = fmt.Errorf("%w%s", err, deploy.StoppedNote(d.ID, stopErr))
			}
		}
		return deploy.Shipment{Deployment: d}, err
	}
	step := fmt.Sprintf("start %d local replicas", spec.Replicas)
	rep.Begin(step, -1)
	timeout := req.ReadyTimeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	_, err = f.WaitReady(wctx, d.ID, 0)
	cancel()
	if err != nil {
		// The step line says that it failed; the error itself is reported once, by the caller.
		rep.End(step, errNotReady)
	} else {
		rep.End(step, nil)
	}
	if err != nil {
		stopped := deploy.StopAfterFailure(ctx, f, d.ID)
		if ctx.Err() != nil {
			return deploy.Shipment{Deployment: d}, fmt.Errorf("%w%s", ctx.Err(), deploy.StoppedNote(d.ID, stopped))
		}
		return deploy.Shipment{Deployment: d}, &deploy.FleetError{Deployment: d.ID, Logs: runDir(f.o.Store, d.ID),
			Err: fmt.Errorf("%w%s", err, deploy.StoppedNote(d.ID, stopped))}
	}
	d, err = f.o.Store.Load(d.ID)
	return deploy.Shipment{Deployment: d}, err
}
