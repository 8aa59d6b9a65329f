package bench

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// childAttrs puts a replica in a process group of its own, sent SIGTERM when the thread that started it exits.
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

// spawner starts processes from one goroutine locked to its OS thread: the kernel ties PR_SET_PDEATHSIG to the
// thread that forked, so the children die with this process but not when the Go runtime retires a thread.
// close ends the goroutine (and the thread, with the children's signal): call it once they are stopped.
type spawner struct {
	req chan spawnReq
}

type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

func newSpawner() *spawner {
	s := &spawner{req: make(chan spawnReq)}
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		for r := range s.req {
			r.err <- r.cmd.Start()
		}
	}()
	return s
}

func (s *spawner) start(c *exec.Cmd) error {
	e := make(chan error, 1)
	s.req <- spawnReq{cmd: c, err: e}
	return <-e
}

func (s *spawner) close() { close(s.req) }

// stopGroup sends SIGTERM to c's process group, then SIGKILL after grace, and reaps c.
func stopGroup(c *exec.Cmd, grace time.Duration) {
	if c.Process == nil {
		return
	}
	pid := c.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		_ = c.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-done
	}
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on every Linux architecture Go
// supports (the kernel's ABI, independent of CONFIG_HZ).
const clockTicks = 100

// processCPU returns the user + system CPU seconds of a process (all its threads) from /proc/<pid>/stat.
func processCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// After the command name: state (field 3), ..., utime (14), stime (15).
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad CPU times", pid)
	}
	return float64(u+st) / clockTicks, nil
}
