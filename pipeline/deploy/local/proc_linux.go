//go:build linux

package local

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// procStat reads the state letter and the start time (clock ticks after boot, field 22) of a process from
// /proc/<pid>/stat. The start time tells a process from a later one that reused its PID.
func procStat(pid int) (state byte, startTicks uint64, err error) {
	if pid <= 0 {
		return 0, 0, fmt.Errorf("pid %d", pid)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+2:]))
	// f[0] is field 3 (state), so field 22 (starttime) is f[19].
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields after comm, want >= 20", pid, len(f))
	}
	t, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: bad state %q or start time %q", pid, f[0], f[19])
	}
	return f[0][0], t, nil
}

// alive reports whether p still runs: same PID, same start time, and not a zombie.
func alive(p Proc) bool {
	if p.PID <= 0 {
		return false
	}
	st, ticks, err := procStat(p.PID)
	if err != nil || st == 'Z' || st == 'X' {
		return false
	}
	return p.StartTicks == 0 || ticks == p.StartTicks
}

// identify returns the Proc record of a running pid.
func identify(pid int) (Proc, error) {
	_, ticks, err := procStat(pid)
	if err != nil {
		return Proc{}, err
	}
	return Proc{PID: pid, StartTicks: ticks}, nil
}

// rssBytes is the resident set size of pid (VmRSS in /proc/<pid>/status).
func rssBytes(pid int) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/status: VmRSS %q", pid, v)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// signalGroup sends sig to p's process group (replicas lead their own group, so helpers they spawned, such
// as an external llama-server, get it too), after checking p is still the process we started.
func signalGroup(p Proc, sig syscall.Signal) error {
	if !alive(p) {
		return nil
	}
	err := syscall.Kill(-p.PID, sig)
	if errors.Is(err, syscall.ESRCH) {
		err = syscall.Kill(p.PID, sig)
	}
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// signalProc sends sig to p alone.
func signalProc(p Proc, sig syscall.Signal) error {
	if !alive(p) {
		return nil
	}
	if err := syscall.Kill(p.PID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// replicaAttr puts a replica in its own process group and has the kernel send it SIGTERM if the supervisor
// thread that started it dies, so a crashed supervisor leaves no orphan.
func replicaAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

// detachAttr starts the supervisor in a new session: no controlling terminal, so closing the shell that ran
// `phonellm ship` neither sends it SIGHUP nor stops it.
func detachAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

// lockFile takes an exclusive flock on path without waiting. held is false when another process has it.
func lockFile(path string) (f *os.File, held bool, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return f, true, nil
}

// memoryWrapper returns the argv prefix that applies RLIMIT_AS before the replica's program runs: util-linux
// prlimit sets the limit on itself and execs the command (same PID). Empty when prlimit is not installed;
// then limitAfterStart applies it right after the start.
func memoryWrapper(asBytes uint64) []string {
	p, err := exec.LookPath("prlimit")
	if err != nil {
		return nil
	}
	return []string{p, "--as=" + strconv.FormatUint(asBytes, 10), "--"}
}

// limitAfterStart sets RLIMIT_AS on a started process (prlimit(2)); memory it mapped before is not undone.
func limitAfterStart(pid int, asBytes uint64) error {
	return unix.Prlimit(pid, unix.RLIMIT_AS, &unix.Rlimit{Cur: asBytes, Max: asBytes}, nil)
}

// addressSpaceLimit reads RLIMIT_AS of pid from /proc/<pid>/limits (0 = unlimited).
func addressSpaceLimit(pid int) (uint64, error) {
	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_AS, nil, &old); err != nil {
		return 0, err
	}
	if old.Cur == unix.RLIM_INFINITY {
		return 0, nil
	}
	return old.Cur, nil
}

// supported is nil on Linux.
func supported() error { return nil }
