package deploy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStoreRoundTrip(t *testing.T) {
	s := NewStore(t.TempDir())
	d := Deployment{ID: NewID("Qwen 3.5 / 9B", "20261129T1830"), Target: "local", CreatedAt: time.Unix(1700000000, 0).UTC(),
		Spec:     Spec{Name: "q", Replicas: 2, Slots: 2, APIKeyEnv: "PHONELLM_API_KEY", Model: ModelRef{Size: 1, SHA256: strings.Repeat("0", 64), Path: "/m"}},
		Replicas: []Replica{{Index: 0, URL: "http://127.0.0.1:1", State: StateReady}, {Index: 1, State: StatePending}}}
	if d.ID != "qwen-3.5---9b-20261129t1830" || !ValidID(d.ID) {
		t.Fatalf("NewID gave %q", d.ID)
	}
	if err := s.Save(d); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != d.ID || len(got.Replicas) != 2 || got.Spec.APIKeyEnv != "PHONELLM_API_KEY" || !got.CreatedAt.Equal(d.CreatedAt) {
		t.Fatalf("loaded %+v", got)
	}
	if eps := got.Endpoints(); len(eps) != 1 || eps[0].Slots != 2 || eps[0].URL != "http://127.0.0.1:1" {
		t.Fatalf("endpoints %+v", eps)
	}
	list, err := s.List()
	if err != nil || len(list) != 1 {
		t.Fatalf("list %v %v", list, err)
	}
	if _, err := s.Load("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing deployment: %v", err)
	}
	if _, err := s.Load("../etc/passwd"); err == nil {
		t.Fatal("path traversal id accepted")
	}
	if err := s.Delete(d.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(d.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	ents, _ := os.ReadDir(filepath.Join(s.Dir, "deployments"))
	if len(ents) != 0 {
		t.Fatalf("leftover files %v", ents)
	}
}

func TestStoreRefusesSecrets(t *testing.T) {
	s := NewStore(t.TempDir())
	const key = "sk-very-secret-key-123"
	s.Forbid(key)
	d := Deployment{ID: "x", Target: "local", Replicas: []Replica{{URL: "http://h/?k=" + key}}}
	var se *SecretError
	if err := s.Save(d); !errors.As(err, &se) {
		t.Fatalf("Save with a secret: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "deployments", "x.json")); !os.IsNotExist(err) {
		t.Fatal("a state file was written")
	}
	d.Replicas[0].URL = "http://h/"
	if err := s.Save(d); err != nil {
		t.Fatal(err)
	}
}

func TestAggregate(t *testing.T) {
	for _, c := range []struct {
		in   []State
		want State
	}{
		{[]State{StateReady, StateReady}, StateReady},
		{[]State{StateReady, StateFailed}, StateDegraded},
		{[]State{StateStarting, StatePending}, StateStarting},
		{[]State{StateStopped}, StateStopped},
		{nil, StatePending},
	} {
		if got := Aggregate(c.in); got != c.want {
			t.Errorf("Aggregate(%v) = %s, want %s", c.in, got, c.want)
		}
	}
}
