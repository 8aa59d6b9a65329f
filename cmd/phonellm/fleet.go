package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/phonellm/phonellm/pipeline/deploy"
	"github.com/phonellm/phonellm/pipeline/deploy/local"
	"github.com/spf13/cobra"
)

func init() { register("ship", newFleetCmd) }

// fleetDir is where deployment records live: $PHONELLM_HOME/fleet (default ~/.cache/phonellm/fleet), so
// `phonellm fleet status` works from any folder and any shell.
func fleetDir() string { return filepath.Join(phonellmHome(), "fleet") }

func localFleet() (*local.Fleet, *deploy.Store, error) {
	st := deploy.NewStore(fleetDir())
	f, err := local.New(local.Options{Store: st})
	return f, st, err
}

// gatewayRecord is the detached gateway of a local deployment, kept next to its records.
type gatewayRecord struct {
	PID  int    `json:"pid"`
	URL  string `json:"url"`
	Port int    `json:"port"`
}

func gatewayRecordPath(id string) string { return filepath.Join(fleetDir(), "gateways", id+".json") }

func loadGatewayRecord(id string) (gatewayRecord, bool) {
	var g gatewayRecord
	b, err := os.ReadFile(gatewayRecordPath(id))
	if err != nil || json.Unmarshal(b, &g) != nil || g.PID <= 0 {
		return g, false
	}
	return g, true
}

// gatewayAlive reports whether pid is still a phonellm gateway of deployment id (not a recycled pid).
func gatewayAlive(pid int, id string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(cmdline), "\x00")
	return containsStr(args, "gateway") && containsStr(args, id)
}

func stopGateway(id string) {
	g, ok := loadGatewayRecord(id)
	if ok && gatewayAlive(g.PID, id) {
		syscall.Kill(g.PID, syscall.SIGTERM)
		for i := 0; i < 50 && gatewayAlive(g.PID, id); i++ {
			time.Sleep(100 * time.Millisecond)
		}
	}
	os.Remove(gatewayRecordPath(id))
}

func newFleetCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "List, inspect and stop deployments made by ship",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List deployments",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, st, err := localFleet()
			if err != nil {
				return err
			}
			ds, err := st.List()
			if err != nil {
				return err
			}
			return a.io.Result(ds, func(w io.Writer) {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tTARGET\tSTATE\tREPLICAS\tMODEL\tCREATED")
				for _, d := range ds {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", d.ID, d.Target, d.State, len(d.Replicas), d.Spec.Model.ID, d.CreatedAt.Format(time.RFC3339))
				}
				tw.Flush()
			})
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "status [ID]",
		Short: "Replica health, URLs and the gateway of a deployment (default: the newest)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, id, err := fleetAndDeployment(args)
			if err != nil {
				return err
			}
			s, err := f.Status(a.ctx, id)
			if err != nil {
				return err
			}
			g, hasGW := loadGatewayRecord(id)
			out := struct {
				deploy.Status
				Gateway string `json:"gateway,omitempty"`
			}{Status: s}
			if hasGW && gatewayAlive(g.PID, id) {
				out.Gateway = g.URL
			}
			return a.io.Result(out, func(w io.Writer) {
				fmt.Fprintf(w, "%s (%s): %s\n", s.ID, s.Target, s.State)
				if out.Gateway != "" {
					fmt.Fprintf(w, "gateway %s\n", out.Gateway)
				}
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "REPLICA\tURL\tSTATE\tHEALTHY")
				for _, r := range s.Replicas {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%v\n", r.Index, r.URL, r.State, r.Healthy)
				}
				tw.Flush()
			})
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "stop [ID]",
		Short: "Stop a deployment's replicas and gateway (default: the newest)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, id, err := fleetAndDeployment(args)
			if err != nil {
				return err
			}
			stopGateway(id)
			if err := f.Stop(a.ctx, id); err != nil {
				return err
			}
			return a.io.Result(map[string]string{"stopped": id}, func(w io.Writer) { fmt.Fprintf(w, "stopped %s\n", id) })
		},
	})
	for _, c := range []struct {
		use, short string
		do         func(f *local.Fleet, id string) error
	}{
		{"resume [ID]", "Restart a deployment whose supervisor is gone (after a crash or reboot)", func(f *local.Fleet, id string) error { return f.Resume(a.ctx, id) }},
		{"rm [ID]", "Stop a deployment and delete its records and logs", func(f *local.Fleet, id string) error {
			stopGateway(id)
			return f.Remove(a.ctx, id)
		}},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:   c.use,
			Short: c.short,
			Args:  cobra.MaximumNArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				f, id, err := fleetAndDeployment(args)
				if err != nil {
					return err
				}
				if err := c.do(f, id); err != nil {
					return err
				}
				verb := strings.Fields(c.use)[0]
				return a.io.Result(map[string]string{verb: id}, func(w io.Writer) { fmt.Fprintf(w, "%s %s\n", verb, id) })
			},
		})
	}
	var stateDir string
	sup := &cobra.Command{
		Use:    "supervise --state-dir DIR ID",
		Short:  "Run a local deployment's replicas, restarting any that exits (started by ship)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			logger := slog.New(slog.NewTextHandler(a.io.Err, nil))
			return local.Supervise(a.ctx, local.SuperviseOptions{Store: deploy.NewStore(stateDir), ID: args[0], Logger: logger})
		},
	}
	sup.Flags().StringVar(&stateDir, "state-dir", fleetDir(), "deployment state folder")
	cmd.AddCommand(sup)
	return cmd
}

// fleetAndDeployment opens the local fleet and picks the deployment named in args (or the newest).
func fleetAndDeployment(args []string) (*local.Fleet, string, error) {
	f, st, err := localFleet()
	if err != nil {
		return nil, "", err
	}
	id, err := pickDeployment(st, args)
	return f, id, err
}

// pickDeployment returns the named deployment, or the newest one.
func pickDeployment(st *deploy.Store, args []string) (string, error) {
	if len(args) == 1 {
		return args[0], nil
	}
	ds, err := st.List()
	if err != nil {
		return "", err
	}
	var newest *deploy.Deployment
	for i := range ds {
		if newest == nil || ds[i].CreatedAt.After(newest.CreatedAt) {
			newest = &ds[i]
		}
	}
	if newest == nil {
		return "", fmt.Errorf("no deployments in %s (run 'phonellm ship')", fleetDir())
	}
	return newest.ID, nil
}
