package deploy

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Remover is a fleet that deletes a deployment together with its own files (logs, locks); Prune uses it
// when a deployment's target has one, and deletes only the record otherwise.
type Remover interface {
	Remove(ctx context.Context, id string) error
}

// PruneOptions say which deployments [Prune] removes.
type PruneOptions struct {
	// Targets are the fleets by target name ("local", "acurast"); a deployment whose target is missing here
	// is judged by its record alone.
	Targets map[string]Fleet
	// All also removes deployments that are dead without having been stopped — failed (the local
	// supervisor is gone, nothing runs) or only planned (a dry run's record) — after stopping them, which
	// cleans up whatever is left. Without All only stopped deployments go.
	All bool
	// OlderThan, when positive, keeps deployments created less than this long ago.
	OlderThan time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// PruneResult lists what Prune removed and kept.
type PruneResult struct {
	Removed []string `json:"removed"`
	Kept    []string `json:"kept"`
}

// Prune removes the records (and, through a [Remover] target, the logs) of deployments that no longer serve:
// the stopped ones, and with All the failed and planned ones too. A deployment that is running in any way —
// ready, degraded, starting, pending — is never removed. Errors for one deployment do not stop the others.
func Prune(ctx context.Context, st *Store, o PruneOptions) (PruneResult, error) {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	ds, listErr := st.List()
	res := PruneResult{Removed: []string{}, Kept: []string{}}
	var errs []error
	if listErr != nil {
		errs = append(errs, listErr)
	}
	for _, d := range ds {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if o.OlderThan > 0 && now().Sub(d.CreatedAt) < o.OlderThan {
			res.Kept = append(res.Kept, d.ID)
			continue
		}
		f := o.Targets[d.Target]
		state := d.State
		if state != StateStopped && f != nil && o.All {
			s, err := f.Status(ctx, d.ID)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", d.ID, err))
				res.Kept = append(res.Kept, d.ID)
				continue
			}
			state = s.State
		}
		dead := state == StateStopped || (o.All && (state == StateFailed || state == StatePlanned))
		if !dead {
			res.Kept = append(res.Kept, d.ID)
			continue
		}
		if err := remove(ctx, st, f, d); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.ID, err))
			res.Kept = append(res.Kept, d.ID)
			continue
		}
		res.Removed = append(res.Removed, d.ID)
	}
	return res, errors.Join(errs...)
}

func remove(ctx context.Context, st *Store, f Fleet, d Deployment) error {
	if r, ok := f.(Remover); ok {
		return r.Remove(ctx, d.ID)
	}
	if f != nil && d.State != StateStopped {
		if err := f.Stop(ctx, d.ID); err != nil {
			return err
		}
	}
	return st.Delete(d.ID)
}
