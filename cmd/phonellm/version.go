package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at link time (-ldflags "-X main.version=v1.2.3"); otherwise the module version is used.
var version = "dev"

type versionInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Dirty   bool   `json:"dirty"`
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
}

func buildVersion() versionInfo {
	v := versionInfo{Version: version, Commit: "unknown", Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.modified":
				v.Dirty = s.Value == "true"
			}
		}
	}
	return v
}

func newVersionCmd(app *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the phonellm version and commit",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v := buildVersion()
			return app.io.Result(v, func(w io.Writer) {
				dirty := ""
				if v.Dirty {
					dirty = "-dirty"
				}
				fmt.Fprintf(w, "phonellm %s (commit %s%s, %s %s/%s)\n", v.Version, v.Commit, dirty, v.Go, v.OS, v.Arch)
			})
		},
	}
}
