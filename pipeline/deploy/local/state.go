package local

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/phonellm/phonellm/internal/httpx"
	"github.com/phonellm/phonellm/pipeline/deploy"
)

// Target is the name of this target in deployment records.
const Target = "local"

// TargetOptions are the local target's part of a Spec (deploy.Spec.Target, JSON). The zero value runs
// replicas without a gateway.
type TargetOptions struct {
	// Gateway, when set, runs a `phonellm gateway` in front of the replicas, supervised like them.
	Gateway *GatewayOptions `json:"gateway,omitempty"`
}

// GatewayOptions configure a deployment's gateway.
type GatewayOptions struct {
	// Port on 127.0.0.1; 0 picks a free one. Deploy binds it before anything starts (a port in use fails the
	// deploy at once, with nothing started) and the supervisor holds the bound socket for the deployment's
	// life, so a restarted gateway gets the same socket and no other program can take the port meanwhile.
	Port int `json:"port"`
}

func decodeTargetOptions(spec deploy.Spec) (TargetOptions, error) {
	var o TargetOptions
	if len(spec.Target) == 0 {
		return o, nil
	}
	dec := json.NewDecoder(bytes.NewReader(spec.Target))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return o, deploy.SpecErrorf("local: target options: %v", err)
	}
	if g := o.Gateway; g != nil && (g.Port < 0 || g.Port > 65535) {
		return o, deploy.SpecErrorf("local: target options: gateway port %d out of range", g.Port)
	}
	return o, nil
}

// Extra is the local target's part of a deployment record ([deploy.Deployment].Extra).
type Extra struct {
	// Supervisor is the `phonellm fleet supervise` process; zero when none runs.
	Supervisor Proc `json:"supervisor"`
	// Memory says how the memory limit is enforced (see the package documentation).
	Memory string `json:"memory_enforcement,omitempty"`
	// Replicas holds one record per replica, in index order.
	Replicas []Process `json:"replicas"`
	// Gateway is the gateway's process record, when the deployment has one (deploy.Deployment.Gateway).
	Gateway *Process `json:"gateway,omitempty"`
}

// Proc identifies a process even after its PID is reused: the start time in clock ticks after boot
// (/proc/<pid>/stat field 22) must match too.
type Proc struct {
	PID        int       `json:"pid,omitempty"`
	StartTicks uint64    `json:"start_ticks,omitempty"`
	StartedAt  time.Time `json:"started_at,omitzero"`
}

// Process is the record of a supervised process: a replica or the gateway.
type Process struct {
	Proc
	Index   int `json:"index"`
	Port    int `json:"port"`
	Threads int `json:"threads"`
	// MemoryLimit is the RSS limit in bytes (0: none); the address-space limit is MemoryLimit + AddressSpaceSlack.
	MemoryLimit int64 `json:"memory_limit_bytes,omitempty"`
	// Argv is the command (no secret: the API key is passed by variable name).
	Argv       []string  `json:"argv"`
	Restarts   int       `json:"restarts"`
	LastExit   string    `json:"last_exit,omitempty"`
	LastExitAt time.Time `json:"last_exit_at,omitzero"`
	// Log is the file that receives the replica's stdout and stderr.
	Log string `json:"log"`
}

// AddressSpaceSlack is added to a replica's memory limit to form its RLIMIT_AS: address space counts
// reservations that never become resident (allocator arenas, thread stacks, the Go heap's reservations), so
// an address-space limit equal to the phone's RAM would fail allocations a phone would satisfy. The RSS
// watchdog enforces the limit itself.
const AddressSpaceSlack int64 = 2 << 30

// decodeExtra reads the local part of a deployment record.
func decodeExtra(d deploy.Deployment) (Extra, error) {
	var x Extra
	if d.Target != Target {
		return x, fmt.Errorf("local: deployment %s belongs to target %q", d.ID, d.Target)
	}
	if len(d.Extra) == 0 {
		return x, fmt.Errorf("local: deployment %s has no process records", d.ID)
	}
	if err := json.Unmarshal(d.Extra, &x); err != nil {
		return x, fmt.Errorf("local: deployment %s: process records: %w", d.ID, err)
	}
	if len(x.Replicas) != len(d.Replicas) {
		return x, fmt.Errorf("local: deployment %s: %d process records for %d replicas", d.ID, len(x.Replicas), len(d.Replicas))
	}
	for i, p := range x.Replicas {
		if p.Index != i || d.Replicas[i].Index != i || p.Port < 1 || p.Port > 65535 || len(p.Argv) == 0 {
			return x, fmt.Errorf("local: deployment %s: replica %d: bad record (index %d, port %d, %d args)", d.ID, i, p.Index, p.Port, len(p.Argv))
		}
	}
	if (x.Gateway == nil) != (d.Gateway == nil) {
		return x, fmt.Errorf("local: deployment %s: gateway and its process record disagree", d.ID)
	}
	if g := x.Gateway; g != nil && (g.Port < 1 || g.Port > 65535 || len(g.Argv) == 0 || d.Gateway.Identity == "") {
		return x, fmt.Errorf("local: deployment %s: gateway: bad record (port %d, %d args)", d.ID, g.Port, len(g.Argv))
	}
	return x, nil
}

func encodeExtra(d *deploy.Deployment, x Extra) error {
	b, err := json.Marshal(x)
	if err != nil {
		return fmt.Errorf("local: encode process records: %w", err)
	}
	d.Extra = b
	return nil
}

// runDir is where a deployment's lock and logs live: <store>/local/<id>.
func runDir(store *deploy.Store, id string) string { return filepath.Join(store.Dir, "local", id) }

func lockPath(store *deploy.Store, id string) string {
	return filepath.Join(runDir(store, id), "supervisor.lock")
}

// keyPresent fails when the spec names an API-key variable that cannot be used (unset, empty, or padded with
// whitespace): replicas started without it would serve without authentication, and serve itself refuses
// such a variable (httpx.APIKeyFromEnv, the check both use), so they would not even start.
func keyPresent(spec deploy.Spec) error {
	if spec.APIKeyEnv == "" {
		return nil
	}
	if _, err := httpx.APIKeyFromEnv(spec.APIKeyEnv); err != nil {
		return fmt.Errorf("local: %w", err)
	}
	return nil
}

// forbidKey registers the API key's value with the store so no record can contain it.
func forbidKey(store *deploy.Store, spec deploy.Spec) {
	if spec.APIKeyEnv != "" {
		store.Forbid(os.Getenv(spec.APIKeyEnv))
	}
	if spec.HFTokenEnv != "" {
		store.Forbid(os.Getenv(spec.HFTokenEnv))
	}
}
