//go:build !linux

package local

import (
	"errors"
	"os"
	"syscall"
)

var errUnsupported = errors.New("local fleet: process supervision needs Linux (/proc, prlimit, PR_SET_PDEATHSIG)")

func supported() error { return errUnsupported }

func procStat(int) (byte, uint64, error)      { return 0, 0, errUnsupported }
func alive(Proc) bool                         { return false }
func identify(int) (Proc, error)              { return Proc{}, errUnsupported }
func rssBytes(int) (int64, error)             { return 0, errUnsupported }
func signalGroup(Proc, syscall.Signal) error  { return errUnsupported }
func signalProc(Proc, syscall.Signal) error   { return errUnsupported }
func replicaAttr() *syscall.SysProcAttr       { return nil }
func detachAttr() *syscall.SysProcAttr        { return nil }
func lockFile(string) (*os.File, bool, error) { return nil, false, errUnsupported }
func memoryWrapper(uint64) []string           { return nil }
func limitAfterStart(int, uint64) error       { return errUnsupported }
func addressSpaceLimit(int) (uint64, error)   { return 0, errUnsupported }
