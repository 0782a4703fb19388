package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/dryexec/dryexec/netsim/tun"
	"github.com/dryexec/dryexec/rung"
)

func doctorCmd(env Env, code *int) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Say which rungs this host can run, and what is missing for the others",
		Args:  usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			st := rung.Doctor(cmd.Context())
			for i := range st {
				if st[i].Name == "ns" && st[i].Available {
					st[i].Notes = append(st[i].Notes, netNote(tun.CheckTUN()))
				}
			}
			if asJSON {
				return printJSON(env.Stdout, st)
			}
			for _, s := range st {
				if s.Available {
					fmt.Fprintf(env.Stdout, "%-9s ok\n", s.Name)
					for _, n := range s.Notes {
						fmt.Fprintf(env.Stdout, "%-9s %s\n", "", n)
					}
				} else {
					fmt.Fprintf(env.Stdout, "%-9s unavailable: %s\n", s.Name, s.Missing)
				}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return c
}

// netNote says whether this user's sandboxes can have their network
// intercepted (netsim needs /dev/net/tun, opened as this user: rootless, a
// node of mode 0600 is not enough), so that --net mock:/allow: failing later
// is no surprise.
func netNote(tunErr error) string {
	if tunErr == nil {
		return "network: interception ok (/dev/net/tun): --net none logs attempts, mock: and allow: work"
	}
	return "network: interception unavailable (" + tunErr.Error() + "): --net mock: and allow: are refused (exit 1), --net none runs with loopback only and does not log attempts; make /dev/net/tun readable and writable by this user (mode 0666, as distributions ship it) to have it (docs/network.md)"
}
