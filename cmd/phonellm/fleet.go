package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/phonellm/phonellm/pipeline/deploy"
	"github.com/phonellm/phonellm/pipeline/deploy/acurast"
	"github.com/phonellm/phonellm/pipeline/deploy/local"
	"github.com/spf13/cobra"
)

func init() { register("ship", newFleetCmd) }

// fleetDir is where deployment records live: $PHONELLM_HOME/fleet (default ~/.cache/phonellm/fleet), so
// `phonellm fleet status` works from any folder and any shell.
func fleetDir() string { return filepath.Join(phonellmHome(), "fleet") }

// fleets opens the deployment records and every target's fleet over them, by target name.
func fleets(a *app) (*deploy.Store, map[string]deploy.Fleet, error) {
	st := deploy.NewStore(fleetDir())
	lf, err := local.New(local.Options{Store: st})
	if err != nil {
		return nil, nil, err
	}
	af := &acurast.Fleet{Store: st, SDK: acurast.NewSDK(), Dir: filepath.Join(fleetDir(), acurast.Target), Reporter: a.reporter()}
	return st, map[string]deploy.Fleet{local.Target: lf, acurast.Target: af}, nil
}

// pickDeployment opens the deployment named in args (or the newest) and its target's fleet.
func pickDeployment(a *app, args []string) (*deploy.Store, deploy.Fleet, deploy.Deployment, error) {
	st, fs, err := fleets(a)
	if err != nil {
		return nil, nil, deploy.Deployment{}, err
	}
	var d deploy.Deployment
	if len(args) == 1 {
		if d, err = st.Load(args[0]); err != nil {
			return nil, nil, d, err
		}
	} else {
		ds, err := st.List()
		if len(ds) == 0 {
			if err != nil {
				return nil, nil, d, err
			}
			return nil, nil, d, fmt.Errorf("no deployments in %s (run 'phonellm ship')", fleetDir())
		}
		d = ds[len(ds)-1] // List sorts by creation time
	}
	f, ok := fs[d.Target]
	if !ok {
		return nil, nil, d, fmt.Errorf("deployment %s has target %q, which this phonellm does not know", d.ID, d.Target)
	}
	return st, f, d, nil
}

func newFleetCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "List, inspect, stop and prune deployments made by ship",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List deployments",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ds, err := deploy.NewStore(fleetDir()).List()
			if err != nil && len(ds) == 0 {
				return err
			}
			if err != nil {
				a.io.Warnf("%v", err)
			}
			if ds == nil {
				ds = []deploy.Deployment{} // JSON: [] rather than null
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
			_, f, d, err := pickDeployment(a, args)
			if err != nil {
				return err
			}
			s, err := f.Status(a.ctx, d.ID)
			if err != nil {
				return err
			}
			return a.io.Result(s, func(w io.Writer) { printStatus(w, s) })
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "stop [ID]",
		Short: "Stop a deployment's replicas and gateway (default: the newest)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, f, d, err := pickDeployment(a, args)
			if err != nil {
				return err
			}
			if err := f.Stop(a.ctx, d.ID); err != nil {
				return err
			}
			return a.io.Result(map[string]string{"stopped": d.ID}, func(w io.Writer) { fmt.Fprintf(w, "stopped %s\n", d.ID) })
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "resume [ID]",
		Short: "Restart a local deployment whose supervisor is gone (after a crash or reboot)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, f, d, err := pickDeployment(a, args)
			if err != nil {
				return err
			}
			lf, ok := f.(*local.Fleet)
			if !ok {
				return usageError("deployment %s runs on %s; only local deployments have a supervisor to resume", d.ID, d.Target)
			}
			if err := lf.Resume(a.ctx, d.ID); err != nil {
				return err
			}
			return a.io.Result(map[string]string{"resume": d.ID}, func(w io.Writer) { fmt.Fprintf(w, "resume %s\n", d.ID) })
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "rm [ID]",
		Short: "Stop a deployment and delete its records and logs",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, f, d, err := pickDeployment(a, args)
			if err != nil {
				return err
			}
			if r, ok := f.(deploy.Remover); ok {
				err = r.Remove(a.ctx, d.ID)
			} else if err = f.Stop(a.ctx, d.ID); err == nil {
				err = st.Delete(d.ID)
			}
			if err != nil {
				return err
			}
			return a.io.Result(map[string]string{"rm": d.ID}, func(w io.Writer) { fmt.Fprintf(w, "rm %s\n", d.ID) })
		},
	})
	cmd.AddCommand(newFleetPruneCmd(a))
	var stateDir string
	sup := &cobra.Command{
		Use:    "supervise --state-dir DIR ID",
		Short:  "Run a local deployment's replicas and gateway, restarting any that exits (started by ship)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o := local.SuperviseOptions{Store: deploy.NewStore(stateDir), ID: args[0], Logger: slog.New(slog.NewTextHandler(a.io.Err, nil))}
			if v := os.Getenv(local.ListenFDEnv); v != "" {
				fd, err := strconv.Atoi(v)
				if err != nil {
					return usageError("%s=%q is not a file descriptor", local.ListenFDEnv, v)
				}
				if o.Listener, err = local.InheritedListener(fd); err != nil {
					return err
				}
			}
			return local.Supervise(a.ctx, o)
		},
	}
	sup.Flags().StringVar(&stateDir, "state-dir", fleetDir(), "deployment state folder")
	cmd.AddCommand(sup)
	return cmd
}

func newFleetPruneCmd(a *app) *cobra.Command {
	var o deploy.PruneOptions
	cmd := &cobra.Command{
		Use:   "prune [--all] [--older-than 24h]",
		Short: "Delete the records and logs of stopped deployments",
		Long: `Delete the records and logs of deployments that no longer serve, so 'fleet list' shows what matters.

By default only stopped deployments go. --all also removes dead ones that were never stopped — a local
deployment whose supervisor is gone (failed), a planned one — stopping them first so nothing is left behind.
--older-than keeps deployments created more recently than the given age. A deployment that runs in any way
(ready, degraded, starting) is never removed; stop it first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.OlderThan < 0 {
				return usageError("--older-than must not be negative")
			}
			st, fs, err := fleets(a)
			if err != nil {
				return err
			}
			o.Targets = fs
			res, err := deploy.Prune(a.ctx, st, o)
			if err != nil && len(res.Removed) == 0 {
				return err
			}
			if err != nil {
				a.io.Warnf("%v", err)
			}
			return a.io.Result(res, func(w io.Writer) {
				for _, id := range res.Removed {
					fmt.Fprintf(w, "removed %s\n", id)
				}
				fmt.Fprintf(w, "%d removed, %d kept\n", len(res.Removed), len(res.Kept))
			})
		},
	}
	cmd.Flags().BoolVar(&o.All, "all", false, "also remove failed and planned deployments (stopping them first)")
	cmd.Flags().DurationVar(&o.OlderThan, "older-than", 0, "only remove deployments created at least this long ago")
	return cmd
}

func printStatus(w io.Writer, s deploy.Status) {
	fmt.Fprintf(w, "%s (%s): %s\n", s.ID, s.Target, s.State)
	if g := s.Gateway; g != nil {
		line := fmt.Sprintf("gateway %s  %s", g.URL, g.State)
		if g.Error != "" && !g.Healthy {
			line += ": " + g.Error
		}
		fmt.Fprintln(w, line)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	cache := false
	for _, r := range s.Replicas {
		cache = cache || r.Cache != nil
	}
	if cache {
		fmt.Fprintln(tw, "REPLICA\tURL\tSTATE\tHEALTHY\tHIT RATE\tHITS")
	} else {
		fmt.Fprintln(tw, "REPLICA\tURL\tSTATE\tHEALTHY")
	}
	for _, r := range s.Replicas {
		line := fmt.Sprintf("%d\t%s\t%s\t%v", r.Index, r.URL, r.State, r.Healthy)
		switch {
		case r.Cache != nil && r.Cache.Requests > 0:
			line += fmt.Sprintf("\t%.0f %%\t%d of %d", 100*r.Cache.HitRate, r.Cache.Hits, r.Cache.Requests)
		case cache:
			line += "\t-\t-"
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	if cache {
		fmt.Fprintln(w, "hit rate: prompt tokens the replica reused from its cache; hits: answers that reused at least half of their prompt")
	}
	for _, r := range s.Replicas {
		if r.Error != "" && !r.Healthy && r.State != deploy.StateStopped {
			fmt.Fprintf(w, "replica %d: %s\n", r.Index, strings.TrimSpace(r.Error))
		}
	}
}
