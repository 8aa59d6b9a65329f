package local

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/phonellm/phonellm/pipeline/deploy"
)

// Stop stops a deployment from any process: it asks the supervisor to stop (SIGTERM; SIGKILL after
// StopTimeout), then, holding the supervisor lock so none can start, kills any replica or gateway process
// still alive (a supervisor that crashed leaves its record behind), records every process and the deployment
// as stopped and removes the lock. Logs stay under <state>/local/<id> (Remove deletes them). Stopping a stopped
// deployment does nothing.
func (f *Fleet) Stop(ctx context.Context, id string) error {
	_, x, err := f.load(id)
	if err != nil {
		return err
	}
	if alive(x.Supervisor) {
		if err := signalProc(x.Supervisor, syscall.SIGTERM); err != nil {
			return fmt.Errorf("local: stop %s: signal the supervisor (pid %d): %w", id, x.Supervisor.PID, err)
		}
		if !waitGone(ctx, x.Supervisor, f.o.StopTimeout) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			_ = signalProc(x.Supervisor, syscall.SIGKILL)
			waitGone(ctx, x.Supervisor, 5*time.Second)
		}
	}
	if err := os.MkdirAll(runDir(f.o.Store, id), 0o700); err != nil {
		return fmt.Errorf("local: stop %s: %w", id, err)
	}
	lock, err := f.takeLock(ctx, id)
	if err != nil {
		return err
	}
	defer lock.Close()
	d, x, err := f.load(id) // the supervisor may have written its last record
	if err != nil {
		return err
	}
	procs := append([]Process(nil), x.Replicas...)
	if x.Gateway != nil {
		procs = append(procs, *x.Gateway)
	}
	var wg sync.WaitGroup
	for _, p := range procs {
		if !alive(p.Proc) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = signalGroup(p.Proc, syscall.SIGTERM)
			if !waitGone(ctx, p.Proc, 5*time.Second) {
				_ = signalGroup(p.Proc, syscall.SIGKILL)
				waitGone(ctx, p.Proc, 5*time.Second)
			}
		}()
	}
	wg.Wait()
	for i := range d.Replicas {
		if alive(x.Replicas[i].Proc) {
			return fmt.Errorf("local: stop %s: replica %d (pid %d) survived SIGKILL", id, i, x.Replicas[i].PID)
		}
		d.Replicas[i].State, d.Replicas[i].Ref = deploy.StateStopped, ""
		x.Replicas[i].Proc = Proc{}
	}
	if x.Gateway != nil {
		if alive(x.Gateway.Proc) {
			return fmt.Errorf("local: stop %s: the gateway (pid %d) survived SIGKILL", id, x.Gateway.PID)
		}
		d.Gateway.State = deploy.StateStopped
		x.Gateway.Proc = Proc{}
	}
	x.Supervisor = Proc{}
	d.State = deploy.StateStopped
	if err := encodeExtra(&d, x); err != nil {
		return err
	}
	if err := f.o.Store.Save(d); err != nil {
		return err
	}
	if err := os.Remove(lockPath(f.o.Store, id)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("local: stop %s: %w", id, err)
	}
	return nil
}

// Resume starts a new supervisor for a deployment whose supervisor is gone (it crashed, or the machine
// rebooted); the new one kills any leftover process and starts them all. The gateway gets its recorded port
// back when it is free (the supervisor retries with back-off while it is not). Resume does nothing when the
// supervisor runs, and fails for a stopped deployment.
func (f *Fleet) Resume(ctx context.Context, id string) error {
	d, x, err := f.load(id)
	if err != nil {
		return err
	}
	switch {
	case d.State == deploy.StateStopped:
		return fmt.Errorf("local: deployment %s is stopped; deploy it again", id)
	case alive(x.Supervisor):
		return nil
	}
	if err := keyPresent(d.Spec); err != nil {
		return err
	}
	return f.startSupervisor(ctx, d, nil)
}

// Remove stops a deployment and deletes its record, logs and lock.
func (f *Fleet) Remove(ctx context.Context, id string) error {
	if err := f.Stop(ctx, id); err != nil {
		return err
	}
	if err := os.RemoveAll(runDir(f.o.Store, id)); err != nil {
		return fmt.Errorf("local: remove %s: %w", id, err)
	}
	return f.o.Store.Delete(id)
}

// takeLock waits (at most 10 s) for the supervisor lock of id.
func (f *Fleet) takeLock(ctx context.Context, id string) (*os.File, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		lock, held, err := lockFile(lockPath(f.o.Store, id))
		if err != nil {
			return nil, fmt.Errorf("local: stop %s: lock: %w", id, err)
		}
		if held {
			return lock, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("local: stop %s: a supervisor still holds %s", id, lockPath(f.o.Store, id))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitGone polls until p is gone; false when it still runs after d.
func waitGone(ctx context.Context, p Proc, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for alive(p) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
