//go:build linux

package local

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// TestTakeLockWaitsForADyingHolder: a supervisor that was just killed may hold the deployment's lock for a
// moment after its children saw it die; the next supervisor waits for the lock instead of reporting that
// another supervisor runs (TestResumeRebindsGateway failed that way under load). A holder that stays is
// still reported once the wait is over.
func TestTakeLockWaitsForADyingHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "supervisor.lock")
	held, ok, err := lockFile(path)
	if err != nil || !ok {
		t.Fatalf("first lock: %v %v", ok, err)
	}
	if _, err := takeLock(context.Background(), path, 0); err == nil {
		t.Fatal("took a lock another holder has")
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		held.Close()
	}()
	lock, err := takeLock(context.Background(), path, time.Minute) // the minute is a hang guard
	if err != nil {
		t.Fatalf("lock released by its holder: %v", err)
	}
	lock.Close()
}
