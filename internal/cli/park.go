package cli

import (
	"fmt"
	"net/url"

	"github.com/spf13/cobra"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/apiclient"
	"github.com/dryexec/dryexec/server"
)

// Sessions live in a daemon (dryexec serve): parking and resuming them goes
// through it, as compare of sessions does.

func sessionDaemon(cmd *cobra.Command, env Env, verb string) (*apiclient.Conn, error) {
	home, err := dryexec.DefaultHome(env.Getenv)
	if err != nil {
		return nil, err
	}
	c, err := findDaemon(cmd.Context(), env, home)
	if err != nil {
		return nil, fmt.Errorf("%s: sessions live in a daemon: %w", verb, err)
	}
	return c, nil
}

// parkCmd is `dryexec park SESSION`.
func parkCmd(env Env) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "park SESSION",
		Short: "Save a live session to disk and stop it until `dryexec resume` (vm rung)",
		Long: "Saves a live session of the running daemon (se_…) to disk under the store and stops it: nothing runs or is " +
			"held until `dryexec resume`, which brings back its workspace, shell state and cache. Only the vm rung parks. " +
			"A park outlives the daemon: the next daemon on the same store lists and resumes it, until it expires " +
			"(DRYEXEC_PARK_TTL, default 168h) and `dryexec gc` removes it.",
		Args: usage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := sessionDaemon(cmd, env, "park")
			if err != nil {
				return err
			}
			var pi server.ParkedInfo
			if err := c.Call(cmd.Context(), "POST", "/v1/sessions/"+url.PathEscape(args[0])+"/park", map[string]any{}, &pi); err != nil {
				return err
			}
			if asJSON {
				return printJSON(env.Stdout, pi)
			}
			_, err = fmt.Fprintf(env.Stdout, "parked %s (%s saved)\n", pi.SessionID, humanSize(pi.Bytes))
			return err
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print what was parked as JSON (as the API answers)")
	return c
}

// parkedCmd is `dryexec parked`.
func parkedCmd(env Env) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "parked",
		Short: "List the parked sessions the running daemon can resume (and damaged parks, on stderr)",
		Args:  usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := sessionDaemon(cmd, env, "parked")
			if err != nil {
				return err
			}
			var out struct {
				Parked  []server.ParkedInfo  `json:"parked"`
				Damaged []server.DamagedPark `json:"damaged,omitempty"`
			}
			if err := c.Call(cmd.Context(), "GET", "/v1/parked", nil, &out); err != nil {
				return err
			}
			if asJSON {
				return printJSON(env.Stdout, out)
			}
			for _, p := range out.Parked {
				if _, err := fmt.Fprintf(env.Stdout, "%s  %s  %s  parked %s  expires %s  %s\n", p.SessionID, p.Rung, p.Workspace,
					p.Parked.Local().Format("2006-01-02 15:04:05"), p.Expires.Local().Format("2006-01-02 15:04"), humanSize(p.Bytes)); err != nil {
					return err
				}
			}
			for _, d := range out.Damaged {
				fmt.Fprintf(env.Stderr, "dryexec: damaged park %s, not resumable (dryexec gc removes it): %s\n", d.SessionID, d.Reason)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON (as the API's GET /v1/parked answers)")
	return c
}

// resumeCmd is `dryexec resume SESSION`.
func resumeCmd(env Env) *cobra.Command {
	return &cobra.Command{
		Use:   "resume SESSION",
		Short: "Start a parked session again where it was parked",
		Args:  usage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := sessionDaemon(cmd, env, "resume")
			if err != nil {
				return err
			}
			var info server.SessionInfo
			if err := c.Call(cmd.Context(), "POST", "/v1/parked/"+url.PathEscape(args[0])+"/resume", map[string]any{}, &info); err != nil {
				return err
			}
			_, err = fmt.Fprintf(env.Stdout, "resumed %s (%s, workspace %s)\n", info.SessionID, info.Rung, info.Workspace)
			return err
		},
	}
}
