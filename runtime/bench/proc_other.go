//go:build !linux

package bench

import (
	"errors"
	"os/exec"
	"syscall"
	"time"
)

func childAttrs() *syscall.SysProcAttr { return nil }

type spawner struct{}

func newSpawner() *spawner                 { return &spawner{} }
func (s *spawner) start(c *exec.Cmd) error { return c.Start() }
func (s *spawner) close()                  {}

func stopGroup(c *exec.Cmd, grace time.Duration) {
	if c.Process != nil {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
}

func processCPU(pid int) (float64, error) {
	return 0, errors.New("bench fleet: CPU time of a process is read from /proc (Linux only)")
}
